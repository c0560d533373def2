"""``max_batch``: the largest global batch whose compiled step fits a budget.

Answers are held against direct compiles with ``step_memory_report`` (the best
batch fits, one data-parallel step more does not) and against arithmetic (the
data-parallel size from the mesh, the bound from the batch's own bytes).
"""

import json
import math
import xml.etree.ElementTree as ET

import jax
import jax.numpy as jnp
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from nnx_introspect._step import step_memory_report
from nnx_introspect._sweep.batch.search import MAX_COMPILES, BatchSearch, max_batch

# programs asked for again (a report of a search's answer, a command line's
# of an API call's): the module's cache compiles each once
pytestmark = pytest.mark.usefixtures("one_compile_per_program")


def mlp(rngs: nnx.Rngs) -> nnx.Sequential:
    return nnx.Sequential(
        nnx.Linear(16, 64, rngs=rngs), nnx.relu, nnx.Linear(64, 16, rngs=rngs)
    )


X = jax.ShapeDtypeStruct((8, 16), jnp.float32)
BUDGET = 40_000  # a forward step of mlp on 8 devices: ~9 KiB at 8, ~57 KiB at 1024
PARAMS = (16 * 64 + 64 + 64 * 16 + 16) * 4  # mlp's float32 parameters, replicated
TIGHT = PARAMS + 8 * 16 * 4 // 8 + 400  # the arguments of batch 8 fit, its step not


@pytest.fixture(scope="module")
def search() -> BatchSearch:
    return max_batch(mlp, "data=8", X, max_device_bytes=BUDGET, loss=None)


def peak_at(size: int, mesh: str = "data=8", **kwargs: object) -> int:
    batch = jax.ShapeDtypeStruct((size, 16), jnp.float32)
    return step_memory_report(mlp, mesh, batch, loss=None, **kwargs).peak_bytes  # type: ignore[arg-type]


def test_best_fits_and_one_more_step_does_not(search: BatchSearch) -> None:
    assert search.data_parallel == 8 and search.converged and search.ok
    assert search.best is not None and search.best % 8 == 0
    assert peak_at(search.best) <= BUDGET
    assert peak_at(search.best + 8) > BUDGET
    assert search.report is not None
    assert search.report.peak_bytes == peak_at(search.best)
    assert search.report.batch == (f"float32[{search.best},16]",)


def test_points_are_sorted_and_judged_against_the_budget(search: BatchSearch) -> None:
    sizes = [b for b, _, _ in search.points]
    assert sizes == sorted(set(sizes))
    assert all(b % 8 == 0 for b in sizes)
    assert all(fits == (peak <= BUDGET) for _, peak, fits in search.points)
    assert search.compiles == len(search.points)
    assert search.best is not None
    assert (search.best, True) in {(b, f) for b, _, f in search.points}
    assert (search.best + 8, False) in {(b, f) for b, _, f in search.points}


def test_compiles_are_logarithmic(search: BatchSearch) -> None:
    # the default upper end: the batch shards (8 bytes of float32[., 16] per
    # example per device, over 8 devices) fill the budget beside the parameters
    assert search.plan_bytes == PARAMS
    assert search.hi == (BUDGET - PARAMS) // (16 * 4 // 8) // 8 * 8
    assert search.compiles <= 2 * math.log2(search.hi / 8) + 4


def test_hi_caps_the_search() -> None:
    found = max_batch(mlp, "data=8", X, max_device_bytes=BUDGET, loss=None, hi=64)
    assert found.best == 64 and found.converged
    assert max(b for b, _, _ in found.points) == 64
    assert peak_at(64) <= BUDGET


def test_nothing_fits() -> None:
    found = max_batch(mlp, "data=8", X, max_device_bytes=TIGHT, loss=None)
    assert found.best is None and found.report is None and not found.ok
    # the smallest batch only: with no answer, nothing above it is probed
    assert found.converged and found.compiles == 1 and found.probed == ()
    assert found.points[0][0] == 8 and not found.points[0][2]
    assert peak_at(8) > TIGHT  # the smallest batch, compiled directly
    data = json.loads(found.to_json())
    assert data["ok"] is False and data["best"] is None and data["report"] is None
    assert found.verdict.startswith("No batch fits: batch 8 needs")
    assert not found.fits()


def test_starts_at_the_given_batch_and_calls_progress_per_compile() -> None:
    seen: list[tuple[int, int, bool]] = []
    x = jax.ShapeDtypeStruct((12, 16), jnp.float32)  # rounded up to 16
    found = max_batch(
        mlp, "data=8", x, max_device_bytes=BUDGET, loss=None, progress=seen.append
    )
    assert seen[0][0] == 16
    assert sorted(seen) == list(found.points)
    assert seen[1][0] == 32  # doubling while it fits


def test_starts_high_and_halves_down() -> None:
    x = jax.ShapeDtypeStruct((2048, 16), jnp.float32)
    seen: list[tuple[int, int, bool]] = []
    found = max_batch(
        mlp, "data=8", x, max_device_bytes=BUDGET, loss=None, progress=seen.append
    )
    assert found.hi > 2048  # the search starts at the given batch
    assert [b for b, _, _ in seen[:2]] == [2048, 1024]
    assert found.best is not None and found.converged
    assert peak_at(found.best) <= BUDGET < peak_at(found.best + 8)


@pytest.mark.parametrize(
    ("mesh", "spec", "dp"),
    [
        ("data=2,model=4", None, 2),  # default: the first mesh axis
        ("data=2,model=4", P(("data", "model")), 8),
        ("data=2,model=4", P("model"), 4),
        ("data=2,model=4", P(), 1),
    ],
)
def test_data_parallel_size_from_the_batch_spec(
    mesh: str, spec: P | None, dp: int
) -> None:
    found = max_batch(
        mlp,
        mesh,
        X,
        max_device_bytes=12_000,
        loss=None,
        batch_spec=spec,
        hi=dp * 4,
    )
    assert found.data_parallel == dp
    assert all(b % dp == 0 for b, _, _ in found.points)
    assert found.lo == dp


def test_data_parallel_size_is_the_lcm_over_leaves() -> None:
    def two_inputs(rngs: nnx.Rngs) -> nnx.Module:
        return TwoInputs(rngs)

    batch = (X, jax.ShapeDtypeStruct((8,), jnp.int32))
    found = max_batch(
        two_inputs,
        "data=2,model=3",
        batch,
        max_device_bytes=10**6,
        loss=None,
        batch_spec=(P("data"), P("model")),
        hi=12,
    )
    assert found.data_parallel == math.lcm(2, 3)
    assert [b for b, _, _ in found.points] == [12]  # 8 rounded up, and hi


class TwoInputs(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.linear = nnx.Linear(16, 4, rngs=rngs)

    def __call__(self, x: jax.Array, ids: jax.Array) -> jax.Array:
        y: jax.Array = self.linear(x) + ids[:, None]
        return y


def test_search_stops_after_the_compile_cap() -> None:
    found = max_batch(mlp, "data=8", X, max_device_bytes=10**9, loss=None)
    assert found.compiles == MAX_COMPILES
    assert not found.converged and found.ok
    assert found.best is not None and peak_at(found.best) <= 10**9
    assert found.verdict.startswith("At least")
    assert any("stopped after 24 compiles" in n for n in found.table().notes)


def test_renders_in_every_format(search: BatchSearch) -> None:
    data = json.loads(search.to_json())
    assert data["schema"] == "nnx-introspect/max-batch"
    assert data["best"] == search.best and data["ok"] is True
    assert [tuple(p.values()) for p in data["points"]] == list(search.points)
    assert data["report"]["peak_bytes"] == search.report.peak_bytes  # type: ignore[union-attr]
    markdown = search.to_markdown()
    assert markdown.startswith(f"**Largest global batch: {search.best} ")
    page = search.to_html()
    assert page.startswith("<!DOCTYPE html>")
    assert page.index('class="verdict ok"') < page.index("<svg")
    svg = ET.fromstring(page[page.index("<svg") : page.index("</svg>") + 6])
    circles = svg.findall("{http://www.w3.org/2000/svg}circle")
    # the whole curve's points first (a zoom panel near the budget may follow)
    assert len(circles) >= len(search.points)
    fills = [c.get("fill") for c in circles[: len(search.points)]]
    assert fills == ["#1a7f37" if f else "#cf222e" for _, _, f in search.points]
    assert "budget 39.06 KiB" in page  # 40,000 bytes
    assert "BatchSearch(most=" in repr(search) and len(repr(search)) <= 300


@pytest.mark.parametrize("budget", [1000, TIGHT])  # nothing compiled; one compile
def test_html_verdict_of_a_search_where_nothing_fits(budget: int) -> None:
    page = max_batch(mlp, "data=8", X, max_device_bytes=budget, loss=None).to_html()
    assert 'class="verdict bad"' in page and "No batch fits" in page
    assert ("<svg" in page) is (budget == TIGHT)  # no chart without a point


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({}, ValueError, "`max_device_bytes` is required"),
        ({"max_device_bytes": "lots"}, ValueError, "`max_device_bytes` must be a size"),
        ({"max_device_bytes": -1}, ValueError, "`max_device_bytes` must be"),
        ({"max_device_bytes": 1000, "lo": 12}, ValueError, "`lo` must be a multiple"),
        ({"max_device_bytes": 1000, "hi": 0}, ValueError, "`hi` must be a positive"),
        ({"max_device_bytes": 1000, "lo": 1.5}, ValueError, "`lo` must be"),
        ({"max_device_bytes": 1000, "lo": True}, TypeError, "`lo` must be"),
        (
            {"max_device_bytes": 1000, "lo": 16, "hi": 8},
            ValueError,
            r"`lo` \(16\) must be at most `hi` \(8\)",
        ),
        ({"max_device_bytes": 1000, "progress": 3}, TypeError, "progress"),
    ],
)
def test_bad_arguments(
    kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        max_batch(mlp, "data=8", X, loss=None, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("batch", "match"),
    [
        (jax.ShapeDtypeStruct((), jnp.float32), r"`batch\[0\]` \(float32\[\]\) is a"),
        (
            (X, jax.ShapeDtypeStruct((16,), jnp.int32)),
            "`batch` leaves must share their leading",
        ),
    ],
)
def test_bad_batches(batch: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        max_batch(mlp, "data=8", batch, max_device_bytes=1000, loss=None)


def test_step_errors_pass_through_before_any_compile() -> None:
    with pytest.raises(ValueError, match="`loss` must be None"):
        max_batch(mlp, "data=8", X, max_device_bytes=1000, loss="bogus")
    with pytest.raises(ValueError, match="axis 'nope' is not in the mesh"):
        max_batch(mlp, "data=8", X, max_device_bytes=1000, batch_spec=P("nope"))


def _libtpu_missing() -> bool:
    from nnx_introspect._step import libtpu_version

    return libtpu_version() is None


def wide(rngs: nnx.Rngs) -> nnx.Sequential:
    return nnx.Sequential(
        nnx.Linear(1024, 16384, rngs=rngs), nnx.relu, nnx.Linear(16384, 1024, rngs=rngs)
    )


@pytest.mark.skipif(_libtpu_missing(), reason="libtpu is not installed (the tpu extra)")
def test_a_compile_refused_for_memory_does_not_fit() -> None:
    # 2**21 examples of 1024 float32 on 4 v5e chips: the forward alone holds a
    # (2**19, 16384) float32 activation per chip, 32 GiB, on a 16 GiB chip
    size = 2**21
    x = jax.ShapeDtypeStruct((size, 1024), jnp.float32)
    found = max_batch(
        wide, "data=4", x, loss=None, topology="v5e-4", lo=size - 4, probes=0
    )
    # the budget: the 15.75 of a v5e chip's 16 GiB that XLA:TPU lets a program use
    assert found.max_device_bytes == round(15.75 * 2**30)
    assert found.budget_basis.startswith("the 15.75 GiB of HBM XLA:TPU lets")
    assert found.best is None and found.converged
    assert [(b, f) for b, _, f in found.points] == [(size - 4, False), (size, False)]
    direct = step_memory_report(wide, "data=4", x, loss=None, topology="v5e-4")
    assert direct.out_of_memory and not direct.fits()


def test_a_search_stopped_before_lo_does_not_claim_nothing_fits() -> None:
    # starting 2**30 examples up, 24 halvings end before reaching lo = 8
    x = jax.ShapeDtypeStruct((2**30 * 8, 16), jnp.float32)
    found = max_batch(
        mlp, "data=8", x, max_device_bytes=TIGHT, loss=None, hi=x.shape[0]
    )
    assert found.compiles == MAX_COMPILES and not found.converged
    assert found.best is None and not found.ok
    assert found.points[0][0] > found.lo == 8
    assert found.verdict.startswith("No batch tried fits")

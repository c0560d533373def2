"""``max_batch``'s budget, its answer without compiling, ``fits``, the chart."""

import json
import math
import re
import xml.etree.ElementTree as ET
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from nnx_introspect._render.batch_chart import _batch_ticks, chart_svg
from nnx_introspect._render.svg import byte_ticks, nice_step
from nnx_introspect._render.table import format_bytes
from nnx_introspect._sweep.batch import search as search_module
from nnx_introspect._sweep.batch.search import max_batch
from nnx_introspect._xla.toolchain import cuda_plugin_version

X = jax.ShapeDtypeStruct((8, 16), jnp.float32)
GiB = 2**30


def mlp(rngs: nnx.Rngs) -> nnx.Sequential:
    return nnx.Sequential(
        nnx.Linear(16, 64, rngs=rngs), nnx.relu, nnx.Linear(64, 16, rngs=rngs)
    )


PARAMS = (16 * 64 + 64 + 64 * 16 + 16) * 4  # float32, replicated on every device
ADAMW = 3 * PARAMS + 4 + 4  # params, mu and nu; adam's count; the step counter


@pytest.fixture
def no_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any compile fails the test."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("max_batch compiled a step")

    monkeypatch.setattr(search_module, "measure_step", refuse)


# --- 4. no compile when the plan alone is over the budget ---------------------------


@pytest.mark.usefixtures("no_compile")
@pytest.mark.parametrize(
    ("optimizer", "loss", "plan"),
    [(None, None, PARAMS), ("adamw", "mean", ADAMW)],
)
def test_the_plan_alone_over_the_budget_compiles_nothing(
    optimizer: str | None, loss: str | None, plan: int
) -> None:
    budget = plan - 1
    found = max_batch(
        mlp, "data=8", X, max_device_bytes=budget, loss=loss, optimizer=optimizer
    )
    assert found.compiles == 0 and found.points == () and found.plan_bytes == plan
    assert found.best is None and found.converged and not found.ok
    assert found.report is None and found.compiler is None
    assert found.verdict == (
        f"No batch fits: the plan alone needs {format_bytes(plan)} per device of "
        f"the budget {format_bytes(budget)} (nothing compiled; 8 devices)"
    )
    data = json.loads(found.to_json())
    assert data["compiles"] == 0 and data["plan_bytes"] == plan
    assert data["verdict"] == found.verdict
    assert found.to_html().count("<svg") == 0


@pytest.mark.usefixtures("no_compile")
def test_the_plan_and_the_smallest_batch_over_the_budget_compile_nothing() -> None:
    # batch 8 of float32[., 16] over 8 devices: 64 bytes of shards per device
    budget = PARAMS + 63
    found = max_batch(mlp, "data=8", X, max_device_bytes=budget, loss=None)
    assert found.compiles == 0 and not found.ok
    assert found.verdict.startswith(
        f"No batch fits: the plan's {format_bytes(PARAMS)} per device leaves 63 B "
        f"of the budget {format_bytes(budget)}, less than batch 8's shards need"
    )
    # with a larger `lo` too, whatever `hi`
    found = max_batch(
        mlp, "data=8", X, max_device_bytes=PARAMS + 64 * 3, loss=None, lo=32, hi=64
    )
    assert found.compiles == 0 and "batch 32's shards" in found.verdict


def test_a_plan_that_fits_still_compiles() -> None:
    budget = PARAMS + 64  # the arguments of batch 8 fit exactly: only XLA can say
    seen: list[tuple[int, int, bool]] = []
    found = max_batch(
        mlp, "data=8", X, max_device_bytes=budget, loss=None, progress=seen.append
    )
    assert found.compiles == 1 == len(seen) and found.hi == 8
    assert seen[0][1] > budget and not found.ok  # the step needs more


def test_errors_of_the_step_come_before_the_plan_answer() -> None:
    # a budget below the plan does not hide what the first compile would raise
    with pytest.raises(ValueError, match="`loss` must be None"):
        max_batch(mlp, "data=8", X, max_device_bytes=10, loss="bogus")
    with pytest.raises(ValueError, match="`optimizer` 'adamw' needs a loss"):
        max_batch(mlp, "data=8", X, max_device_bytes=10, loss=None, optimizer="adamw")
    with pytest.raises(ValueError, match="axis 'nope' is not in the mesh"):
        max_batch(mlp, "data=8", X, max_device_bytes=10, batch_spec=P("nope"))
    with pytest.raises(ValueError, match="`topology` 'v5e-4' has 4 chip"):
        max_batch(mlp, "data=8", X, max_device_bytes=10, topology="v5e-4")


# --- 5. fits ------------------------------------------------------------------------


def test_fits_is_whether_a_batch_fits() -> None:
    found = max_batch(mlp, "data=8", X, max_device_bytes=40_000, loss=None, hi=16)
    assert found.fits() is True and found.best == 16
    assert found.report is not None and found.report.fits()
    nothing = max_batch(mlp, "data=8", X, max_device_bytes=PARAMS, loss=None)
    assert nothing.fits() is False


# --- 3. the callback before each compile ---------------------------------------------


def test_compiling_is_called_before_each_compile() -> None:
    events: list[tuple[str, int, int]] = []
    found = max_batch(
        mlp,
        "data=8",
        X,
        max_device_bytes=12_000,
        loss=None,
        compiling=lambda b, n: events.append(("start", b, n)),
        progress=lambda p: events.append(("done", p[0], 0)),
    )
    starts = [(b, n) for what, b, n in events if what == "start"]
    assert [n for _, n in starts] == list(range(1, found.compiles + 1))
    # each compile announced before its point, in the same order
    assert [what for what, _, _ in events] == ["start", "done"] * found.compiles
    assert [b for b, _ in starts] == [b for what, b, _ in events if what == "done"]
    assert sorted(b for b, _ in starts) == [b for b, _, _ in found.points]


# --- 9. the default budget: what a step gets on the device --------------------------

H100_BYTES = 84_942_979_072  # XLA's device_memory_size of an H100 80GB (79.11 GiB)


def big(rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(2**17, 2**17, use_bias=False, rngs=rngs)  # 64 GiB of float32


BIG_X = jax.ShapeDtypeStruct((8, 2**17), jnp.float32)


@pytest.mark.skipif(cuda_plugin_version() is None, reason="no CUDA plugin (gpu extra)")
@pytest.mark.parametrize(
    ("env", "fraction", "basis"),
    [
        (None, 0.75, "the 75% of the device's 79.11 GiB that JAX's GPU allocator "
         "takes (JAX's default)"),
        (".7", 0.7, "the 70% of the device's 79.11 GiB that JAX's GPU allocator "
         "takes (XLA_CLIENT_MEM_FRACTION=.7)"),
    ],
)  # fmt: skip
def test_gpu_budget_is_the_allocators_pool(
    monkeypatch: pytest.MonkeyPatch, env: str | None, fraction: float, basis: str
) -> None:
    monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)
    if env is None:
        monkeypatch.delenv("XLA_CLIENT_MEM_FRACTION", raising=False)
    else:
        monkeypatch.setenv("XLA_CLIENT_MEM_FRACTION", env)
    found = max_batch(big, "data=8", BIG_X, topology="h100-8", loss=None)
    pool = int(H100_BYTES * fraction)
    assert found.max_device_bytes == pool and found.budget_basis == basis
    # 2**34 float32 parameters (64 GiB), replicated: over 59.33 and 55.38 GiB
    assert found.plan_bytes == 2**36 and found.compiles == 0
    assert found.verdict.endswith(f"; the budget is {basis}")
    assert json.loads(found.to_json())["budget_basis"] == basis
    assert f"per device: {basis}." in " ".join(found.table().notes)
    assert basis.replace("'", "&#x27;") in found.to_html()


@pytest.mark.skipif(cuda_plugin_version() is None, reason="no CUDA plugin (gpu extra)")
def test_gpu_points_are_judged_against_the_pool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)
    monkeypatch.setenv("XLA_CLIENT_MEM_FRACTION", ".5")
    x = jax.ShapeDtypeStruct((8, 4), jnp.float32)
    found = max_batch(
        lambda rngs: nnx.Linear(4, 6, rngs=rngs),
        "data=8",
        x,
        topology="h100-8",
        loss=None,
        hi=8,
    )
    assert found.max_device_bytes == int(H100_BYTES * 0.5)
    assert [(b, f) for b, _, f in found.points] == [(8, True)]
    assert found.report is not None and found.report.max_device_bytes in (
        None,
        found.max_device_bytes,
    )


def test_a_given_budget_is_the_basis() -> None:
    found = max_batch(mlp, "data=8", X, max_device_bytes="1MiB", loss=None, hi=8)
    assert found.budget_basis == "the budget given"
    assert "the budget is" not in found.verdict


# --- 2. the chart's ticks ------------------------------------------------------------


@pytest.mark.parametrize(
    ("span", "step"),
    [(82.31, 20), (79.11, 20), (100, 20), (101, 50), (9, 2), (0.7, 0.2), (4, 1)],
)
def test_nice_step_is_1_2_5(span: float, step: float) -> None:
    assert nice_step(span) == step
    assert span / step <= 5 * 1.0000001  # at most about five intervals


@pytest.mark.parametrize(
    ("top", "unit", "ticks"),
    [
        (82.31 * GiB, "GiB", (0, 20, 40, 60, 80, 100)),
        (79.11 * GiB, "GiB", (0, 20, 40, 60, 80)),
        (40_000, "KiB", (0, 10, 20, 30, 40)),  # 39.06 KiB
        (900, "B", (0, 200, 400, 600, 800, 1000)),
        (1.5 * 2**40, "TiB", (0, 0.5, 1, 1.5)),
    ],
)
def test_byte_ticks_are_round_and_cover_the_top(
    top: float, unit: str, ticks: tuple[float, ...]
) -> None:
    got_unit, size, got = byte_ticks(top)
    assert (got_unit, got) == (unit, ticks)
    assert size == {"B": 1, "KiB": 2**10, "GiB": 2**30, "TiB": 2**40}[unit]
    assert got[-2] * size < top <= got[-1] * size


def test_batch_ticks_label_each_batch_tried_when_they_have_room() -> None:
    sizes = [8, 16, 24, 32]

    def linear(b: float) -> float:
        return b / 32

    assert _batch_ticks(sizes, False, linear) == sizes


def test_batch_ticks_are_round_when_the_tried_batches_crowd() -> None:
    sizes = [8, 16, 32, 64, 128, 256, 512, 640, 656, 664, 672, 704, 768, 1024]

    def log(b: float) -> float:
        return math.log2(b / 8) / math.log2(1024 / 8)

    assert _batch_ticks(sizes, True, log) == [8, 16, 32, 64, 128, 256, 512, 1024]
    crowded = [8, 16, 24, 2**20]

    def log2(b: float) -> float:
        return math.log2(b / 8) / math.log2(2**20 / 8)

    ticks = _batch_ticks(crowded, True, log2)  # 2**3 to 2**20: every third power
    assert ticks == [2**e for e in range(3, 21, 3)] and len(ticks) <= 8

    def linear(b: float) -> float:
        return b / 1000

    assert _batch_ticks([8, 16, 24, 1000], False, linear) == list(range(0, 1001, 200))


def _svg_texts(svg: str) -> list[str]:
    root = ET.fromstring(svg[svg.index("<svg") : svg.index("</svg>") + 6])
    return [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]


def test_the_chart_of_an_h100_search_has_round_ticks_and_a_budget_label() -> None:
    budget = int(79.11 * GiB)
    peak = int(82.31 * GiB)
    points = ((8, int(40 * GiB), True), (16, int(60 * GiB), True), (24, peak, False))
    texts = _svg_texts(chart_svg(points, budget))
    assert texts[:6] == ["0 GiB", "20 GiB", "40 GiB", "60 GiB", "80 GiB", "100 GiB"]
    assert texts[6:9] == ["8", "16", "24"]  # every batch tried
    assert texts.count("budget 79.11 GiB") == 1
    assert not any("82.31" in t for t in texts)  # no label at the data's extreme


def test_the_budget_line_sits_at_the_budget() -> None:
    budget = int(79.11 * GiB)
    svg = chart_svg(((8, 10 * GiB, True),), budget)
    lines = re.findall(r'<line x1="90" y1="([\d.]+)"[^>]*stroke="#cf222e"', svg)
    zero = float(
        re.findall(r'<line x1="90" y1="([\d.]+)"[^>]*stroke="#57606a"', svg)[0]
    )
    top = 20  # the plot's top: the last tick, 80 GiB
    assert float(lines[0]) == pytest.approx(zero - (zero - top) * 79.11 / 80, abs=0.1)

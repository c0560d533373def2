"""Every search when memory is not monotone in the size: the answer, the edge, above.

XLA compiles a different program at a different size, so a larger size can need
less memory than a smaller one (issue 44: Llama-3.2-1B's decode on eight H100s
holds 5.2 GB fewer temporaries at 1,383 sequences than at 1,258). For every
search (``max_batch``, ``max_sequences``, ``rl_max_batch``), on a case whose
peak falls with the size:

- the answer, compiled anew by its own report, fits, and the next size does not;
- every size the search compiled above the answer that fits is named (in
  ``also_fits``, the verdict and the table);
- the jump that crosses the budget names the instruction at each peak.

Real compiles use small models whose memory jumps honestly: the code takes a
different path (a wide sorted temporary) at some sizes, as XLA takes another
program. The serving and RL searches are also driven through their compile
seams with the issue's own figures.
"""

import dataclasses
import json
from types import SimpleNamespace
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from nnx_introspect import max_batch, max_sequences, serve_memory_report
from nnx_introspect._accelerators.budget import Budget
from nnx_introspect._rl import size_search as rl_search
from nnx_introspect._serve import size_search as serve_search
from nnx_introspect._size_search import (
    PeakAt,
    SearchPoint,
    edge_of,
    find_jumps,
    probe_sizes,
)
from nnx_introspect._step import step_memory_report
from nnx_introspect._sweep.batch.sizes import MAX_COMPILES, bisect_sizes
from nnx_introspect.examples import LlamaConfig, llama

MiB, GiB = 2**20, 2**30


def _named_above(found: Any) -> list[int]:
    """Every size the search compiled above its answer that fits."""
    return sorted(p.size for p in found.tried if p.size > found.most and p.fits)


WIDTHS = ("60", "80", "200")
"""Terminal widths the text is read at: ``str(report)`` wraps at the terminal's
(``COLUMNS``), so a phrase may break across lines at one and not another."""


def _texts(found: Any) -> list[str]:
    """``str(found)`` at each of :data:`WIDTHS`, its line breaks read as spaces."""
    texts = []
    with pytest.MonkeyPatch.context() as patch:
        for width in WIDTHS:
            patch.setenv("COLUMNS", width)
            texts.append(" ".join(str(found).split()))
    return texts


def _check_named(found: Any) -> None:
    """Each fitting size above the answer is in ``also_fits``, the verdict, the table."""
    above = _named_above(found)
    assert above and list(found.also_fits) == above
    assert all(f"{s:,}" in found.verdict for s in above)
    assert "not monotone" in found.verdict
    data = json.loads(found.to_json())
    assert data["most"] == found.most and data["also_fits"] == above
    crossing = [j for j in found.jumps if j.crosses]
    assert crossing and all(j.lower_peak and j.higher_peak for j in crossing[:1])
    for text in _texts(found):
        assert all(f"{s:,}" in text for s in above)
        assert f"peaks at `{crossing[0].lower_peak.instruction}`" in text


# --- max_batch: a layer whose wide path is skipped at multiples of 40 ---------------


class Jumpy(nnx.Module):
    """A linear layer that sorts a wide temporary unless the batch is a multiple of 40.

    Per device (8 shards), the sort holds 512 bytes per example: the step at
    batch 32 peaks near 18 KB, at 40 near 2 KB.
    """

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.linear = nnx.Linear(16, 16, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        y: jax.Array = self.linear(x)
        if x.shape[0] % 40:  # the wide path: (batch, 1024) sorted
            wide = jnp.sort(y[:, :1] * jnp.arange(1024.0), axis=-1)
            y = y + wide.min(axis=-1, keepdims=True)
        return y


X = jax.ShapeDtypeStruct((8, 16), jnp.float32)
BATCH_BUDGET = 16_000  # 24 fits (14 KB), 32 does not (18 KB), 40 does (2 KB)


def _step_peak(size: int) -> int:
    batch = jax.ShapeDtypeStruct((size, 16), jnp.float32)
    return step_memory_report(Jumpy, "data=8", batch, loss=None).peak_bytes


def test_max_batch_names_the_larger_batch_that_fits() -> None:
    found = max_batch(Jumpy, "data=8", X, max_device_bytes=BATCH_BUDGET, loss=None)
    # the answer and the next size, each compiled anew
    assert found.most and found.converged and found.best == found.most
    assert _step_peak(found.most) <= BATCH_BUDGET < _step_peak(found.most + 8)
    assert found.edge_size == found.most + 8
    _check_named(found)
    # the probes past the edge: about 5%, 10% and 25% above, a step apart at least
    assert len(found.probed) == 3 and min(found.probed) > found.edge_size
    assert found.verdict.startswith(
        f"Every global batch tried up to {found.most} fits, {found.most + 8} does not; "
    )
    # the jump's temporaries are XLA's: the wide sort's, then none
    jump = next(j for j in found.jumps if j.crosses)
    assert jump.higher.temp_bytes < jump.lower.temp_bytes  # type: ignore[operator]
    direct = step_memory_report(
        Jumpy, "data=8", jax.ShapeDtypeStruct((jump.higher.size, 16), jnp.float32),
        loss=None,
    )  # fmt: skip
    assert jump.higher.peak_bytes == direct.peak_bytes
    assert jump.higher.temp_bytes == direct.memory.temp_bytes
    rows = {r[0]: r[-1] for r in found.table().rows}
    assert rows[str(found.most)] == "answer" and rows[str(found.edge_size)] == "edge"
    assert {rows[str(s)] for s in found.probed} == {"probe"}


def test_without_probes_nothing_above_the_edge_is_compiled() -> None:
    found = max_batch(
        Jumpy, "data=8", X, max_device_bytes=BATCH_BUDGET, loss=None, probes=0
    )
    assert found.probed == () and found.also_fits == ()
    assert max(b for b, _, _ in found.points) == found.most + 8


# --- max_sequences: a decode that sorts a wide temporary unless 5 divides the rows --


# one layer: the jump is the decode's own sorted temporary, not the layers'
# (two compiled each point twice as long); 8 compiles to the answer, probes included
TINY = llama(LlamaConfig(vocab=64, d_model=32, n_layers=1, n_heads=4, d_ff=48))
SERVE_BUDGET = 416_000  # 2 sequences fit, 3 and 4 do not, 5 does (the narrow path)


def jumpy_decode(model: Any, tokens: Any, positions: Any, cache: Any) -> Any:
    """The model's KV-cache call; a decode of rows not divisible by 5 sorts 128 KiB a row."""
    context = max(leaf.shape[1] for leaf in jax.tree.leaves(cache) if leaf.ndim >= 2)
    mask = jnp.arange(context)[None, None, :] <= positions[:, :, None]
    logits, cache = model(tokens, positions, cache, mask)
    if tokens.shape[1] == 1 and tokens.shape[0] % 5:
        wide = jnp.sort(logits[:, :, :1] * jnp.arange(32768, dtype=logits.dtype), -1)
        logits = logits + wide.min(axis=-1, keepdims=True)
    return logits, cache


SERVE = {"context": 64, "prompt": 16, "prefill_sequences": 1, "decode": jumpy_decode}


def test_max_sequences_names_the_larger_count_that_fits(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setenv("NNX_INTROSPECT_CACHE", "on")
    monkeypatch.setenv("NNX_INTROSPECT_CACHE_DIR", str(tmp_path))
    found = max_sequences(TINY, "tp=2", max_device_bytes=SERVE_BUDGET, **SERVE)

    def report(sequences: int) -> Any:
        return serve_memory_report(
            TINY,
            "tp=2",
            sequences=sequences,
            max_device_bytes=SERVE_BUDGET,
            **SERVE,  # type: ignore[arg-type]
        )

    assert found.most and found.value == found.most
    assert report(found.most).fits() is True
    assert report(found.most + 1).fits() is False
    _check_named(found)
    # the program over the budget one step up is named, and what lifts it
    assert f"at {found.most + 1:,} decode's peak" in found.verdict
    assert "a smaller `kv_cache` (--kv-cache)" in found.verdict
    # the first compile of each point: none from the cache; again: every one
    rows = found.table().rows
    assert {r[4] for r in rows} == {"no"}
    again = max_sequences(TINY, "tp=2", max_device_bytes=SERVE_BUDGET, **SERVE)
    assert again.most == found.most and again.also_fits == found.also_fits
    assert {r[4] for r in again.table().rows} == {"yes"} and all(again.cached)


# --- the figures, through each search's compile seam ---------------------------

BUDGET = int(59.33 * GiB)
KV = 32 * MiB  # Llama-3.2-1B's cache of one 8,192-position sequence on one of 8 GPUs
BIG, SMALL = 21_100_000_000, 15_900_000_000  # decode's temporaries (XLA:GPU's)


def _h100_peak(n: int) -> tuple[int, int]:
    """``(peak, temporaries)`` of decode at ``n`` sequences: 1,258 fits; 1,259 does not.

    From 1,319 XLA:GPU chooses the decode with 5.2 GB fewer temporaries.
    """
    temps = BIG if n < 1319 else SMALL
    return BUDGET - MiB + (n - 1258) * KV + (temps - BIG), temps


def test_the_serving_search_on_the_h100_figures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def peak(spec: Any, cache: bool) -> Any:
        value, temps = _h100_peak(spec.sequences)
        return serve_search._Point(value, value <= BUDGET, "decode", 4096, False, temps)

    asked: list[tuple[int, str]] = []

    def peak_at(spec: Any, program: str, cache: bool) -> PeakAt:
        asked.append((spec.sequences, program))
        name = "fusion.21" if spec.sequences < 1319 else "fusion.9"
        return PeakAt(name, "attention.py:88", _h100_peak(spec.sequences)[1] // 4)

    monkeypatch.setattr(serve_search, "_peak", peak)
    monkeypatch.setattr(serve_search, "_peak_at", peak_at)
    # the search of the module patched (with --doctest-modules, pytest may
    # import src's copy of the module apart from the package's)
    found = serve_search.max_sequences(
        "nnx_introspect.examples:llama_tiny",
        "tp=8",
        context=8192,
        prompt=512,
        prefill_sequences=1,
        max_device_bytes=BUDGET,
    )
    assert (found.most, found.edge_size, found.also_fits) == (1258, 1259, (1320, 1383))
    assert found.verdict == (
        "Every size tried up to 1,258 sequences fits, 1,259 does not; 1,320 and "
        "1,383 also fit: the peak is not monotone in the sequences, within 59.33 "
        "GiB per device (the budget given); at 1,259 decode's peak, 59.36 GiB, is "
        "over the budget (a KV cache of 1,259 sequences x 8,192 positions); a "
        "smaller `kv_cache` (--kv-cache) or more devices lift it"
    )
    # the jump that crosses: both sizes compiled again, broken down
    jump = next(j for j in found.jumps if j.crosses)
    assert (jump.lower.size, jump.higher.size) == (1259, 1320)
    assert asked == [(1259, "decode"), (1320, "decode")]
    assert jump.lower.temp_bytes - jump.higher.temp_bytes == BIG - SMALL  # type: ignore[operator]
    assert all("at 1,259 decode peaks at `fusion.21`" in t for t in _texts(found))
    # the frontier passes between the answer and its edge, not past the probes
    frontier = found.frontier
    assert frontier is not None and 1258 * 8192 <= frontier.product < 1259 * 8192


def _rl_report(batch: int, **more: Any) -> Any:
    """A stand-in step: train sets the peak; 6 prompts take a leaner program than 5."""
    peak = 90 + 10 * batch - (25 if batch >= 6 else 0)
    breakdown = SimpleNamespace(
        peak_instruction=f"fusion.{batch}",
        rows=(SimpleNamespace(kind="temporary", label="loss.py:7", nbytes=peak // 2),),
    )
    train = SimpleNamespace(
        memory=SimpleNamespace(temp_bytes=peak // 2),
        compilation=SimpleNamespace(cached=None),
    )
    return SimpleNamespace(
        target="m",
        mesh_axes=(("data", 2),),
        topology=None,
        prompt=8,
        completion=8,
        budget=Budget(125, "the budget given"),
        peak_bytes=peak,
        peak_phase=SimpleNamespace(name="train"),
        fits=lambda: peak <= 125,
        programs={"train": train},
        breakdowns={"train": breakdown} if more.get("breakdown") else {},
        json_data=lambda: {"peak_bytes": peak},
    )


def test_the_rl_search_through_its_compile_seam(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[int, bool]] = []

    def report(spec: Any) -> Any:
        calls.append((spec.batch, spec.breakdown))
        return _rl_report(spec.batch, breakdown=spec.breakdown)

    monkeypatch.setattr(rl_search, "measure_rl", report)
    found = rl_search.rl_max_batch(
        "nnx_introspect.examples:llama_tiny",
        "data=2",
        generations=2,
        prompt=8,
        completion=8,
        max_device_bytes=125,
    )
    # 1, 2 fit (100, 110 B); 4 does not (130); 3 fits (120); the probes 5, 6, 7:
    # 6 fits (150 - 25 = 125), 5 and 7 do not (140, 160 - 25 = 135)
    assert (found.most, found.edge_size, found.also_fits) == (3, 4, (6,))
    assert found.batch == found.most and found.answer is not None
    assert found.answer.peak_bytes == 120 and found.edge.peak_bytes == 130  # type: ignore[union-attr]
    assert found.verdict.startswith(
        "Every batch tried up to 3 prompts per step fits (x 2 generations = 6 "
        "completions): peak 120 B per device of a 125 B budget, set by train; 4 "
        "does not fit (130 B, set by train); 6 fits, above it: the peak is not "
        "monotone in the batch"
    )
    assert found.probed == (5, 6, 7)
    _check_named(found)
    # two jumps: 6 under 5 crosses the budget, 7 under 5 does not (7 is over it)
    pairs = [(j.lower.size, j.higher.size, j.crosses) for j in found.jumps]
    assert pairs == [(5, 6, True), (5, 7, False)]
    # the crossing jump alone compiled again with breakdowns, and explained
    assert calls[-2:] == [(5, True), (6, True)]
    assert [b for b, again in calls if not again] == [1, 2, 4, 3, 5, 6, 7]
    crossing, other = found.jumps
    assert crossing.lower_peak == PeakAt("fusion.5", "loss.py:7", 70)
    assert crossing.higher_peak == PeakAt("fusion.6", "loss.py:7", 62)
    assert other.lower_peak is None and other.higher_peak is None
    for text in _texts(found):  # the crossing jump's note first, with both peaks
        assert (
            "Batch 6 needs less than 5: its peak (train) is 125 B against 140 B, "
            "with 62 B of temporaries against 70 B; XLA compiled another program: "
            "at 5 train peaks at `fusion.5` (largest temporary loss.py:7, 70 B), at "
            "6 at `fusion.6` (largest temporary loss.py:7, 62 B). Batch 7 needs less "
            "than 5: its peak (train) is 135 B against 140 B, with 67 B of "
            "temporaries against 70 B."
        ) in text


# --- one record and one name across the searches ----------------------------------


def test_the_old_names_are_aliases_of_most() -> None:
    serve = serve_search.ServeSearch(
        "sequences", 7, 1, ((7, 64, 62, True), (8, 64, 64, False)), Budget(63, None)
    )
    rl = rl_search.RLBatchSearch(
        "m", (("data", 2),), None, 4, 8, 8, 1, 3,
        ((3, 90, "train", True), (4, 120, "train", False)),
        Budget(100, "the budget given"),
    )  # fmt: skip
    assert serve.value == serve.most == 7 and rl.batch == rl.most == 3
    # built from points alone, each gets the shared record
    assert serve.tried == (
        SearchPoint(7, 62, True, "", None, None),
        SearchPoint(8, 64, False, "", None, None),
    )
    assert rl.tried[1] == SearchPoint(4, 120, False, "train")
    assert all(isinstance(p, SearchPoint) for p in serve.tried + rl.tried)
    for found in (serve, rl):
        assert found.edge_size == found.most + 1 and found.also_fits == ()
    # a record is a NamedTuple: its fields by name, the same in every search
    assert dataclasses.fields(type(serve))[1].name == "most"
    assert json.loads(serve.to_json())["value"] == 7


# --- the engine, on any fits: hypothesis ---------------------------------------------


@settings(deadline=None, max_examples=200)
@given(
    fits=st.lists(st.booleans(), min_size=1, max_size=64),
    start=st.integers(1, 64),
    dp=st.sampled_from([1, 2, 8]),
)
def test_bisection_ends_on_an_edge_every_size_below_fits(
    fits: list[bool], start: int, dp: int
) -> None:
    high = len(fits) * dp
    tried: dict[int, bool] = {}

    def check(size: int) -> bool:
        tried[size] = fits[size // dp - 1]
        return tried[size]

    first = min(start * dp, high)
    good, bad = bisect_sizes(check, first, dp, high, dp)
    points = [SearchPoint(s, 0, ok) for s, ok in tried.items()]
    most, edge = edge_of(points)
    assert (most or None, edge) == (good, bad)
    assert all(ok for s, ok in tried.items() if edge is None or s < edge)
    if good is not None:
        assert tried[good]
    if bad is not None:
        assert not tried[bad]
    if len(tried) < MAX_COMPILES and good is not None and bad is not None:
        assert bad == good + dp  # converged: the next size compiled


@given(
    edge=st.integers(1, 10**6),
    step=st.sampled_from([1, 2, 8, 64]),
    count=st.integers(0, 5),
    room=st.integers(0, 10**6),
)
def test_probes_are_past_the_edge_a_step_apart(
    edge: int, step: int, count: int, room: int
) -> None:
    edge *= step
    high = edge + room * step
    sizes = probe_sizes(edge, step, high, count)
    assert len(sizes) <= count
    assert all(s % step == 0 and edge < s <= high for s in sizes)
    assert all(b - a >= step for a, b in zip((edge, *sizes), sizes, strict=False))


@given(st.lists(st.integers(0, 100), min_size=1, max_size=30))
def test_every_peak_below_a_smaller_sizes_is_a_jump(peaks: list[int]) -> None:
    points = [SearchPoint(i + 1, p, True) for i, p in enumerate(peaks)]
    jumps = find_jumps(points)
    falls = [i + 1 for i, p in enumerate(peaks) if i and p < max(peaks[:i])]
    assert [j.higher.size for j in jumps] == falls
    for j in jumps:  # paired with the highest peak before it
        assert j.lower.peak_bytes == max(peaks[: j.higher.size - 1])
        assert j.lower.size < j.higher.size and j.higher.peak_bytes < j.lower.peak_bytes

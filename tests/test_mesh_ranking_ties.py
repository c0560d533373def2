"""Mesh rankings that claim no more than the estimates know (issue 24, item 5).

Overlapping step-time ranges are equals, and every output says so; the order
note says how the rows are sorted; a rejected plan shows no figure of another
layout; a budget used under half says the batch can grow. Most cases build the
comparison's rows directly (a stand-in report holding only a peak: no
compile); one small real comparison checks the rejected row.
"""

import concurrent.futures
import dataclasses
import json
import types
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec as P

from nnx_introspect._render.table import Table
from nnx_introspect._sweep.mesh_comparison import (
    MeshCandidate,
    MeshComparison,
    compare_meshes,
)
from nnx_introspect._sweep.mesh_comparison.rows import sort_key
from tests.test_range_words import bound_words

GIB = 2**30
BUDGET = 60 * GIB


def stand_in(peak: int) -> Any:
    """What the comparison reads of a compiled row's report, with no compile."""
    return types.SimpleNamespace(
        peak_bytes=peak,
        roofline=None,
        compiler="XLA:GPU (stand-in)",
        compiler_message=None,
        backend="gpu",
        json_data=lambda: {"peak_bytes": peak},
        table=lambda: Table("the step (stand-in)", ("peak",), ((str(peak),),)),
    )


def row(
    mesh: str,
    peak: int | None,
    estimate: tuple[float, float] | None,
    outcome: Any = None,
) -> MeshCandidate:
    axes = tuple((a, int(s)) for a, s in (part.split("=") for part in mesh.split(",")))
    if outcome is None:
        outcome = "fits" if peak is not None and peak <= BUDGET else "does not fit"
    report = None if peak is None else stand_in(peak)
    return MeshCandidate(axes, outcome, None, report, 10 * 2**20, estimate)


def compare(*rows: MeshCandidate, budget: int | None = BUDGET) -> MeshComparison:
    """The rows ranked as ``compare_meshes`` ranks them."""
    ordered = sorted(enumerate(rows), key=lambda item: sort_key(*item))
    return MeshComparison(
        target="m:f",
        candidates=tuple(r for _, r in ordered),
        num_devices=256,
        max_device_bytes=budget,
        budget_basis="the budget given",
        topology="h100-256",
        auto_axes=None,
        batch=("int32[256,2048]",),
        step="forward + backward + optimizer update",
        compiles=len(rows),
        seconds=1.0,
        executor="a stand-in",
    )


# an earlier which-mesh.md sweep (roofline ranges only, no point estimate): two
# fit, their ranges overlap (0.789 <= 0.826).
SWEEP = (
    row("fsdp=128,tp=2", int(55.05 * GIB), (0.789, 1.16)),
    row("fsdp=32,tp=8", int(60.04 * GIB), (0.264, 0.775)),
    row("fsdp=64,tp=4", int(57.62 * GIB), (0.394, 0.826)),
    row("fsdp=256", None, None, "rejected"),
)


def test_overlapping_ranges_are_equals_in_every_output() -> None:
    comparison = compare(*SWEEP)
    names = [c.name for c in comparison.candidates]
    assert names == ["fsdp=64,tp=4", "fsdp=128,tp=2", "fsdp=32,tp=8", "fsdp=256"]
    assert [c.name for c in comparison.equals] == ["fsdp=64,tp=4", "fsdp=128,tp=2"]
    tie = "fsdp=64,tp=4 and fsdp=128,tp=2 are equal within the estimate"
    verdict = comparison.verdict
    assert verdict.startswith(f"No single best mesh: {tie} (step-time ranges overlap)")
    assert "Best mesh" not in verdict and "57.62 GiB and 55.05 GiB of 60 GiB" in verdict
    table = comparison.table()
    seconds = {r[0]: r[2] for r in table.rows}
    assert seconds["fsdp=64,tp=4"] == "0.394-0.826 (tied)"
    assert seconds["fsdp=128,tp=2"] == "0.789-1.16 (tied)"
    assert seconds["fsdp=32,tp=8"] == "0.264-0.775"  # does not fit: no tie
    notes = "\n".join(table.notes)
    assert f"{tie} (ranges overlap: fsdp=64,tp=4 0.394-0.826 s and " in notes
    assert tie in comparison.to_markdown() and tie in comparison.to_html()
    data = json.loads(comparison.to_json())
    assert data["equals"] == ["fsdp=64,tp=4", "fsdp=128,tp=2"]
    assert data["best"] == "fsdp=64,tp=4"  # unchanged: the first row


def test_ranges_apart_keep_one_best() -> None:
    apart = compare(
        row("fsdp=64,tp=4", 57 * GIB, (0.394, 0.78)),
        row("fsdp=128,tp=2", 55 * GIB, (0.789, 1.16)),
    )
    assert [c.name for c in apart.equals] == ["fsdp=64,tp=4"]
    assert apart.verdict.startswith("Best mesh: fsdp=64,tp=4, peak 57 GiB of 60 GiB")
    assert "(tied)" not in str(apart.table().rows)
    assert "equal within the estimate" not in apart.to_markdown()
    assert json.loads(apart.to_json())["equals"] == ["fsdp=64,tp=4"]
    touching = compare(  # ranges that only share an end do not overlap
        row("a=8", GIB, (1.0, 2.0)), row("b=8", GIB, (2.0, 3.0))
    )
    assert [c.name for c in touching.equals] == ["a=8"]
    inside = compare(  # a range inside another's overlaps it
        row("a=8", GIB, (1.0, 4.0)), row("b=8", GIB, (2.0, 3.0))
    )
    assert [c.name for c in inside.equals] == ["a=8", "b=8"]
    same = compare(row("a=8", GIB, (2.0, 2.0)), row("b=8", GIB, (2.0, 2.0)))
    assert len(same.equals) == 2  # the same point estimate
    none_fit = compare(row("a=8", 70 * GIB, (1.0, 2.0)), row("b=8", 70 * GIB, (1, 2)))
    assert none_fit.equals == () and json.loads(none_fit.to_json())["equals"] == []
    assert none_fit.verdict.startswith("No mesh fits")


def order_note(comparison: MeshComparison) -> str:
    return next(n for n in comparison.table().notes if n.startswith("Order:"))


def test_order_words_match_the_order() -> None:
    timed = order_note(compare(*SWEEP))
    assert timed.startswith(
        "Order: the meshes that fit first, fastest estimated step time first "
        "(the low end of its range, then the high end); then those that do not "
        "fit, lowest peak first; then those rejected by the planner"
    )
    assert "lowest peak first (by" not in timed
    # without estimates the rows are sorted by peak, and the words say so
    untimed = compare(row("a=8", 5 * GIB, None), row("b=8", 3 * GIB, None))
    assert [c.name for c in untimed.candidates] == ["b=8", "a=8"]
    assert order_note(untimed).startswith(
        "Order: the meshes that fit first, lowest peak first; then those that "
        "do not fit, lowest peak first; then"
    )
    mixed = compare(row("a=8", 3 * GIB, None), row("b=8", 5 * GIB, (1.0, 2.0)))
    assert [c.name for c in mixed.candidates] == ["b=8", "a=8"]
    assert "then those with no estimate, lowest peak first" in order_note(mixed)
    no_budget = compare(
        row("a=8", 5, None, "compiled"), row("b=8", 3, None, "compiled"), budget=None
    )
    assert [c.name for c in no_budget.candidates] == ["b=8", "a=8"]
    words = order_note(no_budget)
    assert words.startswith("Order: the meshes that compiled first, lowest peak")
    assert "do not fit" not in words


def test_a_budget_used_under_half_says_the_batch_can_grow() -> None:
    roomy = compare(
        row("fsdp=8", 20 * GIB, (1.0, 1.1)), row("fsdp=4,tp=2", 23 * GIB, (2.0, 2.2))
    )
    assert roomy.batch_headroom == 60 / 23
    note = next(n for n in roomy.table().notes if n.startswith("Every compiled"))
    assert note.startswith(
        "Every compiled mesh uses under 50% of the budget (the most, "
        "fsdp=4,tp=2, 38%): the batch can grow about 2.6x on each. An estimate: "
        "the budget over the highest peak"
    )
    assert "`--max-batch`" in note
    assert json.loads(roomy.to_json())["batch_headroom"] == 60 / 23
    tight = compare(row("fsdp=8", 20 * GIB, None), row("tp=8", 30 * GIB, None))
    assert tight.batch_headroom is None  # 30 of 60 GiB: not under half
    assert not any(n.startswith("Every compiled") for n in tight.table().notes)
    assert json.loads(tight.to_json())["batch_headroom"] is None
    assert compare(row("a=8", GIB, None), budget=None).batch_headroom is None
    wide = compare(row("a=8", GIB // 2, None))
    assert "the batch can grow about 120x on each" in wide.to_markdown()


def test_a_rejected_plan_shows_no_figure_of_another_layout() -> None:
    x = jax.ShapeDtypeStruct((8, 3), jnp.float32)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        comparison = compare_meshes(
            "nnx_introspect.examples:two_layer",
            ["data=8", "data=2,model=4"],
            x,
            rules=[("kernel", P(None, "model"))],  # data=8 has no model axis
            max_device_bytes="1MiB",
            executor=pool,
        )
    fits, rejected = comparison.candidates
    assert (fits.name, rejected.name, rejected.outcome) == (
        "data=2,model=4",
        "data=8",
        "rejected",
    )
    assert rejected.plan_bytes is None  # not the 144 replicated bytes
    assert rejected.status.startswith("rejected by the planner: ")
    assert fits.plan_bytes is not None and 0 < fits.plan_bytes < 144
    table = comparison.table()
    state = table.columns.index("state per device")
    assert {r[0]: r[state] for r in table.rows}["data=8"] == "-"
    notes = "\n".join(table.notes)
    assert "data=8: rejected by the planner: " in notes
    assert "'-' where the planner rejected the plan itself" in notes
    data = json.loads(comparison.to_json())
    assert [c["plan_bytes"] for c in data["candidates"]] == [fits.plan_bytes, None]
    # a tiny model in a 1 MiB budget: room for a far larger batch, said so
    assert comparison.batch_headroom == 2**20 / (fits.peak_bytes or 1)
    assert "the batch can grow about" in comparison.to_markdown()


# --- the point estimate (issue: every decision uses the calibrated estimate) ---


def timed(
    mesh: str,
    peak: int,
    estimate: float,
    error: float | None,
    bounds: tuple[float, float] = (0.2, 2.0),
) -> MeshCandidate:
    """A compiled row with a point estimate, its error bar and roofline range."""
    plain = row(mesh, peak, bounds)
    return dataclasses.replace(plain, estimate=estimate, error=error)


def test_rows_rank_by_the_point_estimate_not_the_bounds() -> None:
    # The bounds would rank close first (its low end, 0.3, is the lowest) and
    # tie all three (every range overlaps); the points rank fast first and tie
    # only close: |0.54 - 0.50| = 0.04 <= 10% of 0.54 = 0.054, while
    # |0.60 - 0.50| = 0.10 > 10% of 0.60 = 0.06.
    slow = timed("tp=8", 50 * GIB, 0.60, 0.10, (0.2, 2.0))
    close = timed("fsdp=4,tp=2", 55 * GIB, 0.54, 0.10, (0.3, 0.9))
    fast = timed("fsdp=8", 57 * GIB, 0.50, 0.10, (0.45, 0.9))
    big = timed("fsdp=2,tp=4", 70 * GIB, 0.30, 0.10)  # does not fit
    comparison = compare(slow, close, big, fast)
    names = [c.name for c in comparison.candidates]
    assert names == ["fsdp=8", "fsdp=4,tp=2", "tp=8", "fsdp=2,tp=4"]
    assert [c.name for c in comparison.equals] == ["fsdp=8", "fsdp=4,tp=2"]
    tie = "fsdp=8 and fsdp=4,tp=2 are equal within the estimate"
    assert comparison.verdict.startswith(
        f"No single best mesh: {tie} (step-time estimates within ±10% of each "
        "other), peaks 57 GiB and 55 GiB of 60 GiB per device (3 of 4 fit)"
    )
    table = comparison.table()
    seconds = {r[0]: r[2] for r in table.rows}
    assert seconds == {
        "fsdp=8": "0.5 ±10% (tied)",
        "fsdp=4,tp=2": "0.54 ±10% (tied)",
        "tp=8": "0.6 ±10%",
        "fsdp=2,tp=4": "0.3 ±10%",  # does not fit: never tied
    }
    bounds = table.columns.index("roofline range (s)")
    assert "roofline range (s)" in table.optional
    assert {r[0]: r[bounds] for r in table.rows}["fsdp=8"] == "0.45-0.9"
    notes = "\n".join(table.notes)
    assert f"{tie} (fsdp=8 0.5 s and fsdp=4,tp=2 0.54 s: within ±10% of each" in notes
    assert "fastest estimated step time first (the point estimate)" in order_note(
        comparison
    )
    assert "'roofline range (s)': the roofline's range" in notes
    assert "a range, not a bound: the program's bytes accessed" in notes
    data = json.loads(comparison.to_json())
    assert data["best"] == "fsdp=8" and data["equals"] == ["fsdp=8", "fsdp=4,tp=2"]
    first = data["candidates"][0]
    assert (first["estimate_seconds"], first["estimate_error"]) == (0.5, 0.1)
    assert first["roofline_bounds_seconds"] == [0.45, 0.9]
    page = comparison.to_html()
    assert "0.5 s per step (estimated; roofline range 0.45-0.9 s)" in page
    assert "dot: the estimate; line: roofline range" in page
    assert bound_words(page) == [] and bound_words(str(comparison)) == []
    assert bound_words(comparison.to_json().replace("roofline_bounds_", "")) == []


def test_estimates_apart_keep_one_best_and_name_its_estimate() -> None:
    # |0.53 - 0.50| = 0.03 > 5% of 0.53 = 0.0265: apart
    apart = compare(
        timed("fsdp=8", 57 * GIB, 0.50, 0.05), timed("tp=8", 55 * GIB, 0.53, 0.05)
    )
    assert [c.name for c in apart.equals] == ["fsdp=8"]
    assert apart.verdict.startswith(
        "Best mesh: fsdp=8, peak 57 GiB of 60 GiB per device, 500 ms per step "
        "(estimate, ±5%) (2 of 2 fit)"
    )
    assert "(tied)" not in str(apart.table().rows)
    # the larger error bar of the two decides: 0.03 <= 10% of 0.53 = 0.053
    wider = compare(
        timed("fsdp=8", 57 * GIB, 0.50, 0.02), timed("tp=8", 55 * GIB, 0.53, 0.10)
    )
    assert [c.name for c in wider.equals] == ["fsdp=8", "tp=8"]


def test_uncalibrated_estimates_tie_only_when_equal() -> None:
    same = compare(
        timed("fsdp=8", 57 * GIB, 0.5, None), timed("tp=8", 55 * GIB, 0.5, None)
    )
    assert [c.name for c in same.equals] == ["tp=8", "fsdp=8"]  # the lower peak first
    assert "(the same estimated step time)" in same.verdict
    assert "(tp=8 0.5 s and fsdp=8 0.5 s: the same, uncalibrated)" in str(
        same.table().notes
    )
    near = compare(
        timed("fsdp=8", 57 * GIB, 0.5, None), timed("tp=8", 55 * GIB, 0.5000001, None)
    )
    assert [c.name for c in near.equals] == ["fsdp=8"]
    assert "(estimate, uncalibrated)" in near.verdict
    assert {r[0]: r[2] for r in near.table().rows}["fsdp=8"] == "0.5"


def test_calibrated_constants_without_an_error_bar_are_not_uncalibrated() -> None:
    # XLA:TPU compiles for v5e-8 here deviceless; the v5e constants were fitted
    # on the chip's libtpu: a program another libtpu wrote claims no error bar,
    # yet its constants are calibrated, and the words must not say otherwise
    from nnx_introspect._roofline.timing import CONSTANTS
    from nnx_introspect._xla import libtpu_version

    version = libtpu_version()
    if version is None:
        pytest.skip("libtpu is not installed")
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        comparison = compare_meshes(
            "nnx_introspect.examples:two_layer",
            ["data=8", "data=2,model=4"],
            jax.ShapeDtypeStruct((64, 3), jnp.float32),
            topology="v5e-8",
            executor=pool,
        )
    c = CONSTANTS["v5e"]
    best = comparison.candidates[0]
    assert best.estimate is not None and best.report is not None
    roofline = best.report.roofline
    assert roofline is not None and roofline.time is not None
    assert roofline.time.constants.calibrated
    if f"libtpu {version}" == c.compiler:  # the chip's own compiler: its error bar
        assert best.error == c.error
        assert f"(estimate, ±{c.error:.0%})" in comparison.verdict
    else:
        assert best.error is None
        words = "(estimate, calibrated constants, no error bar claimed)"
        assert words in comparison.verdict
        assert "uncalibrated" not in comparison.verdict


def test_meshes_over_two_slices_rank_with_their_dcn_traffic() -> None:
    # 2xv5e-4: two slices of 4 chips; each mesh's leading axis crosses the
    # slices (MaxText's dcn_*_parallelism), its collectives over that axis
    # are the data-center network's, named and costed in the ranking
    from nnx_introspect._xla import libtpu_version

    if libtpu_version() is None:
        pytest.skip("libtpu is not installed")
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        comparison = compare_meshes(
            "nnx_introspect.examples:two_layer",
            ["data=8", "data=2,model=4"],
            jax.ShapeDtypeStruct((64, 3), jnp.float32),
            topology="2xv5e-4",
            executor=pool,
        )
    assert [c.outcome for c in comparison.candidates] == ["fits", "fits"]
    for c in comparison.candidates:
        axes = c.collective_bytes_by_axis or {}
        assert any(name.endswith("@DCN") for name in axes), (c.name, axes)
        assert c.report is not None and c.report.roofline is not None
        dcn = [t for t in c.report.roofline.comm if t.link == "dcn"]
        assert dcn and all(t.seconds > 0 for t in dcn), c.name
    estimates = [c.estimate for c in comparison.candidates]
    assert None not in estimates and estimates == sorted(estimates)  # type: ignore[type-var]
    assert "@DCN" in str(comparison)

"""compare_rl_layouts: GRPO step layouts compiled, ranked by estimated step time."""

import concurrent.futures
import dataclasses
from typing import Any

import pytest

from nnx_introspect import (
    ArgumentError,
    RLLayoutComparison,
    compare_rl_layouts,
    rl_memory_report,
)
from nnx_introspect._accelerators.budget import Budget
from nnx_introspect._rl.layouts import _order, _ties, rl_layouts
from nnx_introspect._rl.report import RLMemoryReport, RLPhase
from nnx_introspect.examples import LlamaConfig, llama
from tests.cli_helpers import run
from tests.test_range_words import bound_words

# programs asked for again (a report of a search's answer, a command line's
# of an API call's): the module's cache compiles each once
pytestmark = pytest.mark.usefixtures("one_compile_per_program")

SMALL = llama(LlamaConfig(vocab=64, d_model=32, n_layers=2, n_heads=2, d_ff=64))
KW: dict[str, Any] = {
    "batch": 2,
    "generations": 2,
    "prompt": 8,
    "completion": 8,
    "max_device_bytes": "64MiB",
}
LAYOUTS = [("data=4", None), ("data=2", {"rollout": "data=2"}), ("tp=4", None)]


def small(rngs: Any) -> Any:
    """The small Llama by name, for the command line."""
    return SMALL(rngs)


@pytest.fixture(scope="module")
def found() -> RLLayoutComparison:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return compare_rl_layouts(SMALL, LAYOUTS, executor=pool, **KW)


def test_each_layout_is_its_own_report(found: RLLayoutComparison) -> None:
    # tp=4 does not divide the small Llama's 2 heads: rejected, with the reason
    assert [m for m, _ in found.rejected] == ["colocated on tp=4"]
    assert "tp" in found.rejected[0][1]
    assert len(found.reports) == 2
    alone = rl_memory_report(SMALL, "data=2", role_meshes={"rollout": "data=2"}, **KW)
    split = next(r for r in found.reports if r.layout != "colocated")
    assert split.peak_bytes == alone.peak_bytes
    assert found.executor == "on a ThreadPoolExecutor"
    # no topology, no time: those that fit by peak, the smaller first
    assert found.reports[0].peak_bytes <= found.reports[1].peak_bytes
    assert found.ok and found.verdict.startswith("fastest that fits: ")


def _report(seconds: tuple[float, float] | None, peak: int, fits: bool) -> Any:
    phase = RLPhase("train", peak, (), not fits, seconds)
    return RLMemoryReport(
        "m",
        (("fsdp", 8),),
        "v5e-8",
        1,
        2,
        8,
        8,
        True,
        (),
        (phase,),
        Budget(100, "the budget given"),
    )


def test_ranking_by_step_time_with_ties() -> None:
    slow = _report((3.0, 4.0), 10, True)
    fast = _report((1.0, 2.0), 50, True)
    overlapping = _report((1.5, 2.5), 20, True)
    refused = _report((0.1, 0.2), 10, False)
    ranked = sorted([slow, refused, overlapping, fast], key=_order)
    assert ranked == [fast, overlapping, slow, refused]
    assert _ties(ranked) == ((0, 1),)  # [1, 2] and [1.5, 2.5] overlap
    table = RLLayoutComparison(tuple(ranked), _ties(ranked), "in order")
    assert "(tied with" in table.verdict
    assert [row[1] for row in table.table().rows] == ["1 (tie)", "2 (tie)", "3", "-"]


def test_auto_layouts() -> None:
    assert rl_layouts(4) == (
        ("fsdp=4", None),
        ("tp=4", None),
        ("fsdp=2", {"rollout": "tp=2"}),
        ("fsdp=1", {"rollout": "tp=2", "reference": "fsdp=1"}),
    )
    assert rl_layouts(2) == (
        ("fsdp=2", None),
        ("tp=2", None),
        ("fsdp=1", {"rollout": "tp=1"}),
    )


@pytest.mark.parametrize(
    ("layouts", "options", "argument"),
    [
        ("auto", {}, "layouts"),  # auto needs a topology
        ("some", {}, "layouts"),
        ([], {}, "layouts"),
        ([("data=4",)], {}, "layouts"),
        ([("data=4", None)], {"batch": 0}, "batch"),
        ([("tp=4", None)], {}, "layouts"),  # every candidate rejected
    ],
)
def test_bad_layouts_are_refused(
    layouts: Any, options: dict[str, Any], argument: str
) -> None:
    with pytest.raises(ArgumentError) as caught:
        compare_rl_layouts(SMALL, layouts, **(KW | options))
    assert caught.value.argument == argument


def test_cli_mesh_auto_needs_a_topology(capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "rl",
        "tests.test_rl_layouts:small",
        "--batch",
        "2",
        "--generations",
        "2",
        "--prompt",
        "8",
        "--completion",
        "8",
        "--mesh",
        "auto",
    ]
    code, _, err = run(args, capsys)
    assert code == 2 and "argument --mesh:" in err and "topology" in err
    code, _, err = run([*args, "--role-mesh", "rollout=tp=2"], capsys)
    assert code == 2 and "argument --mesh:" in err


def _timed(
    estimates: tuple[float, ...],
    errors: tuple[float | None, ...],
    bounds: tuple[float, float],
    fits: bool = True,
) -> Any:
    """A layout whose phases have point estimates; the bounds split evenly."""
    n = len(estimates)
    phases = tuple(
        RLPhase(
            f"phase {k}",
            10,
            (),
            not fits,
            (bounds[0] / n, bounds[1] / n),
            estimate=e,
            error=err,
        )
        for k, (e, err) in enumerate(zip(estimates, errors, strict=True))
    )
    return dataclasses.replace(_report(None, 10, fits), phases=phases)


def test_ranking_by_the_point_estimate_ties_within_the_error() -> None:
    # Step estimates: fast 1.0, close 1.08, slow 1.5 (the phases' sums); the
    # error bar is the phases' largest, 10%. |1.08 - 1.0| = 0.08 <= 0.108: a
    # tie; |1.5 - 1.08| = 0.42 > 0.15: apart. By the bounds slow would lead
    # (its range, 0.2-0.3 s, is the lowest) and fast and close would not tie.
    fast = _timed((0.4, 0.6), (0.05, 0.10), (2.0, 3.0))
    close = _timed((1.08,), (0.10,), (0.5, 0.6))
    slow = _timed((1.5,), (0.10,), (0.2, 0.3))
    refused = _timed((0.1,), (0.10,), (0.1, 0.2), fits=False)
    ranked = sorted([slow, refused, close, fast], key=_order)
    assert ranked == [fast, close, slow, refused]
    assert _ties(ranked) == ((0, 1),)
    table = RLLayoutComparison(tuple(ranked), _ties(ranked), "in order")
    assert table.verdict == (
        "fastest that fits: colocated on fsdp=8 (tied with colocated on fsdp=8: "
        "their estimates are within ±10%), 1 s per step (estimate, ±10%; "
        "roofline range 2 s-3 s); peak 10 B per device"
    )
    rendered = table.table()
    assert [row[1] for row in rendered.rows] == ["1 (tie)", "2 (tie)", "3", "-"]
    assert [row[2] for row in rendered.rows][:3] == [
        "1 s ±10%",
        "1.08 s ±10%",
        "1.5 s ±10%",
    ]
    assert rendered.columns[3] == "roofline range"
    assert rendered.rows[0][3] == "2 s-3 s"
    assert "a range, not a bound: the program's bytes accessed" in rendered.notes[0]
    assert bound_words(str(table)) == [] and bound_words(table.to_json()) == []
    # the phases' largest error bar: with 5% alone, 1.0 and 1.08 are apart
    tighter = _timed((1.0,), (0.05,), (2.0, 3.0))
    closer = _timed((1.08,), (0.05,), (0.5, 0.6))
    assert _ties([tighter, closer]) == ()
    # uncalibrated: a tie only when the estimates are the same
    same = [_timed((1.0,), (None,), (1, 2)), _timed((1.0,), (None,), (3, 4))]
    assert _ties(same) == ((0, 1),)
    assert "(tied with colocated on fsdp=8: the same estimate)" in (
        RLLayoutComparison(tuple(same), _ties(same), "in order").verdict
    )
    assert _ties([same[0], _timed((1.01,), (None,), (1, 2))]) == ()

"""fit_step ranks configurations by the point estimate, ties within its error.

Rows are built by hand with known estimates, error bars and roofline ranges
(no compile); every expected order and tie is the arithmetic of the comments:
two estimates are equal when they differ by at most the larger error bar times
the larger estimate, and, uncalibrated, only when they are the same.
"""

import json

import nnx_introspect as ni
from nnx_introspect._ranking import tie_error, tied
from nnx_introspect._sweep.fit.report import (
    FitStatus,
    same_speed,
    speed_key,
    surely_slower,
)
from tests.test_range_words import bound_words

GIB = 2**30
MESH = (("fsdp", 8),)


def row(
    k: int,
    estimate: float | None,
    error: float | None,
    bounds: tuple[float, float] | None,
    gib: float = 10,
    status: FitStatus = "fits",
    mfu: float | None = None,
) -> ni.FitRow:
    """Configuration ``k`` microbatches, with the step-time figures given."""
    return ni.FitRow(
        MESH,
        (),
        k,
        status,
        peak_bytes=int(gib * GIB),
        seconds=bounds,
        mfu_ceiling=None if bounds is None else 0.8,
        estimate=estimate,
        error=error,
        mfu=mfu,
    )


def search(rows: tuple[ni.FitRow, ...]) -> ni.FitSearch:
    """The search over ``rows``, the chosen one picked as ``fit_step`` picks it."""
    fitting = [r for r in rows if r.status == "fits"]
    chosen = min(fitting, key=speed_key) if fitting else None
    return ni.FitSearch(
        "m:f", ("int32[8,512]",), "v5e-8", 16 * GIB, "given", rows, chosen,
        None, "", len(rows), 1.0, "a pool",
    )  # fmt: skip


def test_tied_is_the_arithmetic_of_the_error_bar() -> None:
    assert tied(1.0, 1.1, 0.1)  # 0.1 <= 0.1 x 1.1
    assert not tied(1.0, 1.12, 0.1)  # 0.12 > 0.112
    assert tied(1.0, 1.1, 0.02, 0.1)  # the larger bar of the two
    assert tie_error(None, 0.05) == 0.05 and tie_error(None, None) is None
    assert tied(2.0, 2.0, None) and not tied(2.0, 2.0 + 1e-9, None)


def test_the_point_estimate_chooses_and_ties() -> None:
    # By the bounds, c (0.1-0.2 s) would be chosen and nothing would tie it.
    # By the points: a 1.0 s, b 1.08 s (|0.08| <= 10% of 1.08: tied with a),
    # c 1.3 s (|0.3| > 0.13: apart), d 0.5 s does not fit.
    a = row(1, 1.0, 0.10, (0.5, 3.0), mfu=0.41)
    b = row(2, 1.08, 0.10, (0.6, 3.0))
    c = row(4, 1.3, 0.10, (0.1, 0.2))
    d = row(1, 0.5, 0.10, (0.1, 0.2), gib=20, status="does not fit")
    found = search((d, c, b, a))
    assert found.chosen is a
    assert found.equals == (b,)
    assert [r.microbatches for r in sorted((a, b, c), key=speed_key)] == [1, 2, 4]
    table = found.table()
    assert table.columns[6:] == (
        "step seconds (est.)",
        "MFU (est.)",
        "roofline range (s)",
    )
    assert table.rows[0][6:] == ("1 ±10%", "41%", "0.5-3")
    assert table.rows[1][6:] == ("1.08 ±10%", "≤80%", "0.6-3")  # no MFU at a point
    assert "roofline range (s)" in table.optional
    assert table.lead[1] == (
        "Equal to it within the estimate (step-time estimates within ±10% of its "
        "own): fsdp=8 with no remat, 2 microbatches."
    )
    notes = "\n".join(table.notes)
    assert "Ranked by the estimated step time (each compiled program's" in notes
    assert (
        "±10%" in notes
        and "a range, not a bound: the program's bytes accessed" in notes
    )
    data = json.loads(found.to_json())
    chosen = data["chosen"]
    assert (chosen["estimate_seconds"], chosen["estimate_error"]) == (1.0, 0.1)
    assert chosen["roofline_bounds_seconds"] == [0.5, 3.0] and chosen["mfu"] == 0.41
    assert [r["microbatches"] for r in data["equals"]] == [2]
    page = found.to_html()
    assert "1 s per step (estimated; roofline range 0.5-3 s)" in page
    assert bound_words(page) == [] and bound_words(str(found)) == []
    assert bound_words(found.to_json().replace("roofline_bounds_", "")) == []


def test_a_start_is_pruned_only_when_slower_beyond_the_error() -> None:
    best = row(1, 1.0, 0.10, (0.5, 3.0))
    # 1.08 is within 10% of 1.08: not surely slower, so it is compiled
    assert not surely_slower(row(2, 1.08, 0.10, (2.0, 4.0)), best)
    # 1.2 is 0.2 over, more than 10% of 1.2: pruned, though its range overlaps
    assert surely_slower(row(2, 1.2, 0.10, (0.1, 4.0)), best)
    # uncalibrated: any estimate above the best's is slower
    assert surely_slower(row(2, 1.0001, None, None), row(1, 1.0, None, None))
    # with no point estimates, the old rule: the low bound above the high
    bounds_only = row(1, None, None, (0.5, 3.0))
    assert surely_slower(row(2, None, None, (3.5, 4.0)), bounds_only)
    assert not surely_slower(row(2, None, None, (2.5, 4.0)), bounds_only)
    assert not surely_slower(row(2, 5.0, 0.1, None), None)


def test_without_point_estimates_the_ranges_rank_as_before() -> None:
    a = row(1, None, None, (1.0, 2.0))
    b = row(2, None, None, (1.5, 2.5))  # overlaps a's
    c = row(4, None, None, (2.5, 3.0))  # apart from a's
    found = search((c, b, a))
    assert found.chosen is a and found.equals == (b,)
    assert same_speed(a, b) and not same_speed(a, c)
    table = found.table()
    assert "roofline range (s)" not in table.columns
    assert table.rows[0][6:] == ("1-2", "80%")
    assert "(their step-time ranges overlap)" in table.lead[1]
    # a point against a range: neither can rank the other, so no tie
    assert not same_speed(row(1, 1.0, 0.5, (1, 2)), b)

"""The serving frontier chart: sequences against context, every compile, the answer.

The geometry is read back from the SVG, as for the fit page's chart
(:mod:`tests.test_fit_chart_labels`): no label over another or past the canvas,
the answer ringed where its compiled sequences and context put it, and the
predicted frontier passing between the largest compile that fits and the
smallest that does not.
"""

import itertools
import json
import re

import pytest

from nnx_introspect import ServeSearch, max_sequences, serve_memory_report
from nnx_introspect._accelerators.budget import Budget
from nnx_introspect._serve.frontier import predict_frontier
from tests.llama_tiny_layers import llama_tiny_2_layers
from tests.test_fit_chart_labels import _attrs, _collisions, _labels

GIB = 2**30
BUDGET = int(59.33 * GIB)
BUDGET_2L = 30_000_000
# a stand-in search shaped as the 7B example's at 8,192 positions (an earlier
# answer of docs/howto/serve.md's, before the example's engine prefill)
SEQUENCES = ServeSearch(
    "sequences",
    115,
    1,
    (
        (1, 8192, int(2.31 * GIB), True),
        (115, 8192, int(59.10 * GIB), True),
        (116, 8192, int(59.60 * GIB), False),
    ),
    Budget(BUDGET, None),
    65536,
    1,
)
# a context search on two replicas: points either side, one far over
CONTEXT = ServeSearch(
    "context",
    16100,
    1,
    (
        (4, 1, 1 * GIB, True),
        (4, 20000, 70 * GIB, False),
        (4, 16000, 58 * GIB, True),
        (4, 16300, int(59.5 * GIB), False),
        (4, 16100, int(59.3 * GIB), True),
        (4, 16101, int(59.4 * GIB), False),
    ),
    Budget(BUDGET, None),
    2**20,
    2,
)
NOTHING_FITS = ServeSearch(
    "sequences", 0, 2, ((2, 64, 70 * GIB, False),), Budget(BUDGET, None), 4096, 2
)
SEARCHES = {"sequences": SEQUENCES, "context": CONTEXT, "none": NOTHING_FITS}


def _circles(chart: str) -> list[dict[str, str]]:
    return [_attrs(c) for c in re.findall(r"<circle ([^>]*)>", chart)]


def _axis(chart: str, along: str) -> tuple[float, float]:
    """``(pixel of 0, pixels per unit)`` read from two numeric tick labels."""
    ticks = []
    for attrs, content in re.findall(r"<text ([^>]*)>([\d,]+)</text>", chart):
        a = _attrs(attrs)
        if along == "x" and a.get("text-anchor") == "middle":
            ticks.append((int(content.replace(",", "")), float(a["x"])))
        if along == "y" and a.get("text-anchor") == "end":
            ticks.append((int(content.replace(",", "")), float(a["y"]) - 4))
    (v0, p0), (v1, p1) = sorted(ticks)[:2]
    per = (p1 - p0) / (v1 - v0)
    return p0 - v0 * per, per


def _pixel(chart: str, sequences: float, context: float) -> tuple[float, float]:
    x0, x_per = _axis(chart, "x")
    y0, y_per = _axis(chart, "y")
    return x0 + context * x_per, y0 + sequences * y_per


@pytest.mark.parametrize("name", sorted(SEARCHES))
def test_no_label_overprints_another_or_leaves_the_canvas(name: str) -> None:
    chart = SEARCHES[name].frontier_svg()
    assert _collisions(chart) == []
    height = float(re.search(r'<svg [^>]*height="([\d.]+)"', chart).group(1))  # type: ignore[union-attr]
    for text, (left, top, _, bottom) in _labels(chart):
        assert left >= 0 and top >= 0 and bottom <= height, text
    assert "budget 59.33 GiB per device" in chart


@pytest.mark.parametrize("name", ["sequences", "context"])
def test_the_answer_is_ringed_and_labelled_on_its_compiled_point(name: str) -> None:
    search = SEARCHES[name]
    chart = search.frontier_svg()
    s, t, _, ok = next(
        p
        for p in search.points
        if p[3] and p[0 if name == "sequences" else 1] == search.value
    )
    assert ok
    rings = [c for c in _circles(chart) if c.get("fill") == "none" and c["r"] == "9"]
    assert len(rings) == 1
    x, y = _pixel(chart, s, t)
    assert float(rings[0]["cx"]) == pytest.approx(x, abs=0.15)
    assert float(rings[0]["cy"]) == pytest.approx(y, abs=0.15)
    labels = [text for text, _ in _labels(chart)]
    assert f"answer: {search.value:,}" in labels
    assert f"the answer: {s:,} sequences x {t:,} positions (compiled)" in labels


def test_every_compile_is_drawn_filled_when_it_fits_hollow_when_not() -> None:
    chart = CONTEXT.frontier_svg()
    drawn = [c for c in _circles(chart) if c.get("r") == "4"]
    drawn = drawn[: len(CONTEXT.points)]  # the legend's marks come after
    at = {(float(c["cx"]), float(c["cy"])): c["fill"] == "#ffffff" for c in drawn}
    assert len(at) == len(CONTEXT.points)
    for s, t, _, ok in CONTEXT.points:
        x, y = _pixel(chart, s, t)
        near = min(at, key=lambda c: abs(c[0] - x) + abs(c[1] - y))
        assert near == pytest.approx((x, y), abs=0.15)
        assert at[near] == (not ok)
    # the points that fit are drawn last: the answer's is not under a failure
    assert [h for h in at.values()] == sorted(at.values(), reverse=True)


def _curve_at(chart: str, x: float) -> float:
    """The dashed curve's pixel y at pixel x (linear between its points)."""
    line = re.search(r'<polyline points="([^"]*)"[^>]*stroke-dasharray', chart)
    assert line is not None
    pts = [tuple(map(float, p.split(","))) for p in line.group(1).split()]
    for (x1, y1), (x2, y2) in itertools.pairwise(pts):
        if x1 <= x <= x2:
            return y1 if x2 == x1 else y1 + (y2 - y1) * (x - x1) / (x2 - x1)
    raise AssertionError(f"the curve does not reach x={x}")


@pytest.mark.parametrize("name", ["sequences", "context"])
def test_the_frontier_passes_between_the_largest_fit_and_the_smallest_failure(
    name: str,
) -> None:
    search = SEARCHES[name]
    fits = max((s * t, s, t) for s, t, _, ok in search.points if ok)
    fails = min(
        (s * t, s, t) for s, t, _, ok in search.points if not ok and s * t > fits[0]
    )
    frontier = search.frontier
    assert frontier is not None
    assert fits[0] <= frontier.product < fails[0]
    # drawn so: the curve between the two points (on the pixel grid: 0.1 px)
    chart = search.frontier_svg()
    (xf, yf), (xx, yx) = (_pixel(chart, s, t) for _, s, t in (fits, fails))
    assert _curve_at(chart, xf) <= yf + 0.1  # SVG's y grows downwards
    assert _curve_at(chart, xx) >= yx - 0.1
    if name == "sequences":  # one sequence apart: 2 pixels, the curve in between
        assert yx < _curve_at(chart, xf) < yf
    # b is the cache's, per device over the replicas; a the rest at the budget
    b = search.kv_bytes_per_token / search.data_parallel  # type: ignore[operator]
    assert frontier.bytes_per_position == b
    assert frontier.fixed_bytes == pytest.approx(BUDGET - b * frontier.product)


def test_the_frontier_by_hand() -> None:
    points = ((1, 100, 300, True), (5, 100, 1000, True), (6, 100, 1200, False))
    # the line through (500, 1000) and (600, 1200) meets 1100 at 550
    found = predict_frontier(points, 1100, 2.0)
    assert found is not None and found.product == 550
    assert found.fixed_bytes == 1100 - 2 * 550
    # nothing fits: from the failing point along b; no room at all: none
    only = predict_frontier(((1, 100, 1200, False),), 1100, 2.0)
    assert only is not None and only.product == 100 - 100 / 2
    assert predict_frontier(((1, 100, 5000, False),), 1100, 2.0) is None
    assert predict_frontier(((1, 100, 1200, False),), 1100, None) is None


def test_without_a_frontier_the_chart_says_so() -> None:
    chart = NOTHING_FITS.frontier_svg()
    assert NOTHING_FITS.frontier is None
    assert "stroke-dasharray" not in chart.split("compiled: does not fit")[0]
    assert "No frontier predicted at the budget 59.33 GiB per device." in chart


@pytest.fixture(scope="module")
def found() -> ServeSearch:
    # 2 of llama_tiny's 8 layers (tests/llama_tiny_layers.py): the same search
    # (8 compiles of both programs to an answer of 9 sequences) in half the time
    return max_sequences(
        llama_tiny_2_layers, "tp=2", context=64, max_device_bytes=BUDGET_2L
    )


def test_a_search_keeps_what_its_frontier_needs(found: ServeSearch) -> None:
    report = serve_memory_report(llama_tiny_2_layers, "tp=2", sequences=2, context=64)
    assert found.kv_bytes_per_token == report.kv_bytes_per_token
    assert found.data_parallel == 1
    fit = {s: ok for s, _, _, ok in found.points}
    assert fit[found.value] and not fit[found.value + 1]
    frontier = found.frontier
    assert frontier is not None
    assert found.value * 64 <= frontier.product < (found.value + 1) * 64
    data = json.loads(found.to_json())
    assert data["frontier"]["sequences_x_context"] == frontier.product
    page = found.to_html()
    assert page.index('class="verdict') < page.index("<svg") < page.index("<table")
    assert _collisions(page) == []


def test_the_curve_is_labelled_as_the_peak_the_points_are() -> None:
    # each point's peak is the larger program's (prefill or decode), not decode's
    search = SEARCHES["sequences"]
    assert {limit for limit in search.limits if limit} <= {"prefill", "decode"}
    chart = search.frontier_svg()
    assert "predicted frontier: peak = budget" in chart
    assert "Prefill and decode: sequences against context" in chart
    assert "decode peak" not in chart and "decode's" not in chart

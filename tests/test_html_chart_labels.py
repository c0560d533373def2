"""Every chart's labels inside its figure, the budget in zoom panels, no slivers.

Issue 44, newcomer item 5: a budget label cut at the right edge ("budget
59.33 G"), a zoom panel without its budget line, a tiny model's bars a sliver
against a large budget. The geometry is read back from the SVG: each
``<text>`` gets a box from its position, anchor and font size, 0.62 em a
letter (wider than the sans and monospace fonts browsers draw digits and
lower case with), 0.8 em above its baseline and 0.25 em below.
"""

import html
import re
from collections.abc import Callable

import pytest

from nnx_introspect._breakdown.chart import curve_svg, kinds_bar_svg
from nnx_introspect._render import PhaseBar, phase_chart_svg, svg
from nnx_introspect._render.batch_chart import chart_svg
from nnx_introspect._render.mesh_charts import bar_chart_html
from nnx_introspect._step.page import peak_bar_svg, peak_parts
from nnx_introspect._sweep.mesh_comparison.chart import peaks_svg, time_peak_svg

MiB, GiB = 2**20, 2**30
BUDGET = int(59.33 * GiB)  # the budget
RED = "#cf222e"
Box = tuple[float, float, float, float]

_SVG = re.compile(r"<svg [^>]*width=\"(\d+)\" height=\"(\d+)\"")
_TEXT = re.compile(r"<text ([^>]*)>([^<]*)</text>")
_LINE = re.compile(r"<line ([^>]*)/>")
_ATTR = re.compile(r'([\w-]+)="([^"]*)"')


def _attrs(element: str) -> dict[str, str]:
    return dict(_ATTR.findall(element))


def _size(page: str) -> tuple[float, float]:
    found = _SVG.search(page)
    assert found is not None
    return float(found.group(1)), float(found.group(2))


def _labels(page: str) -> list[tuple[str, Box]]:
    """Every label and its box, but the numbers drawn white inside their dots."""
    out = []
    for attrs, content in _TEXT.findall(page):
        a = _attrs(attrs)
        if a.get("fill") == "#ffffff":
            continue
        words = html.unescape(content)
        size = float(a["font-size"])
        width = len(words) * size * 0.62
        x, y = float(a["x"]), float(a["y"])
        left = {"start": x, "middle": x - width / 2, "end": x - width}[
            a.get("text-anchor", "start")
        ]
        out.append((words, (left, y - 0.8 * size, left + width, y + 0.25 * size)))
    return out


def _overlap(a: Box, b: Box) -> bool:
    return min(a[2], b[2]) > max(a[0], b[0]) and min(a[3], b[3]) > max(a[1], b[1])


def _budget_lines(page: str) -> list[tuple[int, dict[str, str]]]:
    """``(position in the page, attributes)`` of each dashed red line."""
    return [
        (m.start(), _attrs(m.group(1)))
        for m in _LINE.finditer(page)
        if _attrs(m.group(1)).get("stroke") == RED
        and "stroke-dasharray" in _attrs(m.group(1))
    ]


TIMES = list(range(0, 100, 10))
LIVE = [int(v * GiB) for v in (10, 30, 50, 59.2, 55, 40, 30, 20, 15, 12)]
NEAR_EDGE = (  # a max_batch search: doubling, then bisecting near the budget
    (4, int(0.19 * GiB), True),
    (64, int(0.27 * GiB), True),
    (256, int(0.72 * GiB), True),
    (352, int(0.945 * GiB), True),
    (368, int(0.982 * GiB), True),
    (372, int(0.991 * GiB), True),
    (376, int(1.0006 * GiB), False),
    (384, int(1.02 * GiB), False),
    (512, int(1.39 * GiB), False),
)
MESHES = (
    ("fsdp=8", int(59.2 * GiB), "fits", "fits", (1.0, 2.0)),
    ("tp=8", int(59.5 * GiB), "does not fit", "does not fit", (1.5, 2.5)),
    ("data=8", int(20 * GiB), "fits", "fits", (3.0, 4.0)),
)
PHASES = (
    PhaseBar("prefill", 12 * GiB, 40 * GiB, seconds=0.9, error=0.1),
    PhaseBar("critic train", 25 * GiB, 40 * GiB, refused=True),
)

CHARTS: dict[str, Callable[[], str]] = {
    # a budget near the bytes axis's end: its label centred there ran off
    "kinds bar": lambda: kinds_bar_svg(
        [("parameter", 30 * GiB), ("temporary", 29 * GiB)], 59 * GiB, BUDGET
    ),
    "peak bar": lambda: peak_bar_svg(peak_parts(30 * GiB, 0, 29 * GiB, 0), BUDGET),
    "mesh bars": lambda: bar_chart_html(
        "Bytes per device", [("total", 59 * GiB, 40 * GiB)], budget=BUDGET
    ),
    "mesh peaks": lambda: peaks_svg(MESHES, BUDGET),
    "mesh scatter": lambda: time_peak_svg(MESHES, BUDGET),
    "max batch": lambda: chart_svg(NEAR_EDGE, GiB),
    "curve": lambda: curve_svg(
        TIMES, LIVE, points=100, peak=(30, LIVE[3], "f"), budget=BUDGET,
        held=int(59.93 * GiB),
    ),
    "phases": lambda: phase_chart_svg(PHASES, BUDGET, "h100-8"),
    "phases, tiny": lambda: phase_chart_svg(
        [PhaseBar("train", 54 * MiB, 10 * MiB, seconds=3e-3, error=0.14)],
        int(15.75 * GiB),
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", CHARTS)
def test_every_label_lies_inside_the_figure(name: str) -> None:
    page = CHARTS[name]()
    width, height = _size(page)
    labels = _labels(page)
    assert any(words.startswith("budget ") for words, _ in labels)
    for words, (left, top, right, bottom) in labels:
        assert left >= 0 and right <= width, (words, left, right, width)
        assert top >= 0 and bottom <= height, (words, top, bottom, height)


def test_the_budget_label_never_covers_another() -> None:
    for name, chart in CHARTS.items():
        labels = _labels(chart())
        budgets = [box for words, box in labels if words.startswith("budget ")]
        others = [box for words, box in labels if not words.startswith("budget ")]
        for box in budgets:
            assert not any(_overlap(box, o) for o in others), name


# --- the budget in zoom panels -------------------------------------------------------


def test_the_curves_zoom_band_draws_the_budget_over_what_the_device_holds() -> None:
    page = CHARTS["curve"]()
    band_top = 300 + 20  # the band's plot starts under the whole curve's
    in_band = [(at, a) for at, a in _budget_lines(page) if float(a["y1"]) > band_top]
    assert len(in_band) == 1
    held = page.index('stroke="#24292f" stroke-dasharray="2 3"')
    assert in_band[0][0] > held  # drawn after, so never hidden under it
    labels = [(w, b) for w, b in _labels(page) if b[1] > band_top]
    budget = [b for w, b in labels if w == "budget 59.33 GiB"]
    holds = [b for w, b in labels if w.startswith("the device holds")]
    assert len(budget) == 1 and len(holds) == 1
    assert not _overlap(budget[0], holds[0])


def test_the_max_batch_chart_zooms_near_the_budget_and_draws_it_there() -> None:
    page = CHARTS["max batch"]()
    words = [w for w, _ in _labels(page)]
    assert "Zoom on the batches near the budget:" in words
    lines = _budget_lines(page)
    assert len(lines) == 2  # the whole curve's and the zoom's
    zoom_line = float(lines[1][1]["y1"])
    # where 1 GiB lies on the zoom's own ticks, read from its labels
    ticks = {
        float(w.split()[0]): b[3] - 0.25 * 11 - 4  # a tick label sits 4 px low
        for w, b in _labels(page)
        if b[1] > 340 and re.fullmatch(r"[\d.]+ GiB", w)
    }
    (v1, y1), (v2, y2) = sorted(ticks.items())[:2]
    assert zoom_line == pytest.approx(y1 + (1 - v1) * (y2 - y1) / (v2 - v1), abs=0.2)
    assert words.count("budget 1 GiB") == 2
    batches = [w for w, b in _labels(page) if b[1] > 340 and w.isdigit()]
    assert {"352", "372", "376", "384"} <= set(batches)


def test_a_budget_outside_a_zoom_band_is_said_to_be_so() -> None:
    frame = svg.Frame(720, 200, left=90, right=20, top=20, bottom=30)
    y = svg.Scale(50 * GiB, 60 * GiB, frame.baseline, frame.top)
    above = svg.budget_in_band(frame, y, 80 * GiB)
    assert "budget 80 GiB (above this band)" in above and "<polygon" in above
    below = svg.budget_in_band(frame, y, 10 * GiB)
    assert "budget 10 GiB (below this band)" in below
    assert "<line" in svg.budget_in_band(frame, y, 55 * GiB)
    assert svg.budget_in_band(frame, y, None) == ""


# --- small bars stay visible -------------------------------------------------------


def _widths(page: str, start: str) -> list[float]:
    return [
        float(_attrs(m.group(1))["width"])
        for m in re.finditer(r"<rect ([^>]*)><title>([^<]*)</title>", page)
        if m.group(2).startswith(start)
    ]


def test_a_small_part_of_a_bar_is_at_least_three_pixels_wide() -> None:
    kinds = kinds_bar_svg(
        [("parameter", 30 * MiB), ("gradient", 10 * MiB), ("temporary", 1000)],
        40 * MiB + 1000,
        50 * MiB,
    )
    assert _widths(kinds, "temporary")[0] >= 3
    rows = [
        svg.BarRow("big", (svg.Bar(10 * GiB, svg.GREEN, "big"),)),
        svg.BarRow("small", (svg.Bar(1024, svg.GREEN, "small"),)),
    ]
    _, body = svg.bar_rows(rows)
    assert _widths(body, "small")[0] >= 3


def test_a_tiny_model_against_a_large_budget_is_no_sliver() -> None:
    budget = 16 * GiB
    kinds = kinds_bar_svg(
        [("parameter", 30 * MiB), ("gradient", 10 * MiB)], 40 * MiB, budget
    )
    line = next(a for _, a in _budget_lines(kinds))
    bar = sum(_widths(kinds, "parameter") + _widths(kinds, "gradient"))
    assert bar > 0.5 * (float(line["x1"]) - 20)  # 20: the plot's left edge
    assert "The bytes axis is broken" in kinds and "0.24% of the budget" in kinds
    curve = curve_svg(TIMES, [v // 1000 for v in LIVE], points=100,
                      peak=(30, LIVE[3] // 1000, "f"), budget=budget)  # fmt: skip
    dot = float(re.search(r'<circle cx="[\d.]+" cy="([\d.]+)"', curve).group(1))  # type: ignore[union-attr]
    budget_y = float(next(a for _, a in _budget_lines(curve))["y1"])
    baseline = 300 - 46
    assert baseline - dot > 0.5 * (baseline - budget_y)
    # a budget within 8x of the largest value keeps one unbroken axis
    assert "broken" not in kinds_bar_svg([("parameter", 2 * GiB)], 2 * GiB, budget)


def test_a_broken_axis_keeps_values_to_scale_and_the_budget_at_its_end() -> None:
    ticks, cut = svg.budget_axis(40 * MiB, 16 * GiB)
    assert cut == 40 * MiB
    assert ticks[-1][0] == 16 * GiB and ticks[-1][1] == "16 GiB"
    scale = svg.Scale(0, ticks[-1][0], 0, 100, cut=cut)
    assert (scale(10 * MiB), scale(20 * MiB), scale(cut)) == pytest.approx((20, 40, 80))
    assert scale(16 * GiB) == 100 and scale.break_at == pytest.approx(85)
    assert svg.budget_axis(2 * GiB, 16 * GiB)[1] is None  # exactly 8x: unbroken
    assert svg.budget_axis(2 * GiB - 1, 16 * GiB)[1] is not None

"""The one SVG module and the charts drawn with it, from plain numbers."""

import itertools
import re
import xml.etree.ElementTree as ET

import pytest

from nnx_introspect._breakdown.chart import curve_svg, kinds_bar_svg
from nnx_introspect._render import svg
from nnx_introspect._render.mesh_charts import bar_chart_html
from nnx_introspect._sweep.mesh_comparison.chart import peaks_svg, time_peak_svg

NS = "{http://www.w3.org/2000/svg}"
MiB = 2**20


def _root(page: str) -> ET.Element:
    # the last closing tag: a zoom band nests an SVG in the chart's
    return ET.fromstring(page[page.index("<svg") : page.rindex("</svg>") + 6])


def _texts(page: str) -> list[str]:
    return [t.text or "" for t in _root(page).iter(f"{NS}text")]


def test_a_linear_scale_maps_its_ends_to_its_pixels() -> None:
    scale = svg.Scale(0, 80, 270, 20)  # a y axis: 0 at the bottom
    assert (scale(0), scale(80), scale(40)) == (270, 20, 145)


def test_a_log_scale_spaces_doublings_evenly() -> None:
    scale = svg.Scale(2, 32, 0, 400, log=True)
    places = [scale(2**k) for k in range(1, 6)]
    assert places == pytest.approx([0, 100, 200, 300, 400])


@pytest.mark.parametrize(
    ("top", "ticks"),
    [
        (0.42, (0, 0.1, 0.2, 0.3, 0.4, 0.5)),
        (7, (0, 2, 4, 6, 8)),
        (100, (0, 20, 40, 60, 80, 100)),
    ],
)
def test_round_ticks_cover_the_top_in_1_2_5_steps(
    top: float, ticks: tuple[float, ...]
) -> None:
    assert svg.round_ticks(top) == pytest.approx(ticks)


def test_byte_axis_labels_each_tick_in_one_unit() -> None:
    ticks = svg.byte_axis(300 * MiB)
    assert [label for _, label in ticks] == ["0 MiB", "100 MiB", "200 MiB", "300 MiB"]
    assert [value for value, _ in ticks] == [0, 100 * MiB, 200 * MiB, 300 * MiB]


def test_marks_are_valid_svg_and_escape_text() -> None:
    frame = svg.Frame(100, 50, 10, 10, 10, 10)
    body = (
        svg.line(0, 0, 10, 10, svg.GRID)
        + svg.text(1, 2, "a < b & 'c'")
        + svg.dot(3, 4, svg.RED, title="x > y")
        + svg.rect(0, 0, 5, 5, svg.BLUE)
    )
    root = _root(svg.figure(frame, "marks", body))
    assert [t.text for t in root.iter(f"{NS}text")] == ["a < b & 'c'"]
    assert root.find(f"{NS}circle/{NS}title").text == "x > y"  # type: ignore[union-attr]


def test_bar_rows_draw_one_bar_per_value_and_a_note_for_none() -> None:
    rows = [
        svg.BarRow("a", (svg.Bar(100, svg.GREEN, "a"),)),
        svg.BarRow("b", note="nothing compiled"),
    ]
    frame, body = svg.bar_rows(rows, budget=150)
    page = svg.figure(frame, "rows", body)
    root = _root(page)
    assert len(root.findall(f"{NS}rect")) == 1
    assert "nothing compiled" in _texts(page)
    assert "budget 150 B" in _texts(page)


def test_the_mesh_comparison_charts_take_plain_rows() -> None:
    rows = (
        ("data=8", 700 * MiB, "fits", "fits", (0.1, 0.2)),
        ("fsdp=8", 900 * MiB, "does not fit", "does not fit", (0.05, 0.1)),
        ("tp=8", None, "rejected", "rejected by the planner", None),
    )
    bars = peaks_svg(rows, 800 * MiB)
    fills = [r.get("fill") for r in _root(bars).iter(f"{NS}rect")]
    assert fills == [svg.GREEN, svg.RED]
    assert "rejected by the planner" in _texts(bars)
    scatter = time_peak_svg(rows, 800 * MiB)
    dots = _root(scatter).findall(f"{NS}circle")
    assert [d.get("fill") for d in dots] == [svg.GREEN, svg.RED]
    assert {"data=8", "fsdp=8", "budget 800 MiB"} <= set(_texts(scatter))
    assert time_peak_svg(rows[2:], None) == ""  # nothing estimated, no chart


def test_the_breakdown_charts_take_plain_numbers() -> None:
    page = curve_svg([0, 5, 9], [10, 40, 20], points=10, peak=(5, 40, "dot"))
    root = _root(page)
    assert len(root.findall(f"{NS}circle")) == 1
    assert "most live: 40 B" in _texts(page)
    assert curve_svg([], [], points=0, peak=(0, 0, "")) == ""
    bar = kinds_bar_svg([("parameter", 30), ("gradient", 10)], 40)
    assert "parameter: 30 B (75%)" in _texts(bar)
    assert kinds_bar_svg([], 0) == ""


def test_the_mesh_page_bars_keep_their_classes_and_name_no_address() -> None:
    page = bar_chart_html(
        "Bytes per device by kind",
        [("params", 300, 200.0), ("total", 300, 200.0)],
        budget=250,
    )
    assert page.count('class="bar actual"') == 2
    assert page.count('class="bar ideal"') == 2
    assert 'class="budget"' in page and "http" not in page
    assert page.index("Bytes per device by kind") < page.index("<svg")


# --- issue 24: comparison charts that show the comparison ----------------------------

GiB = 2**30
MESHES = (
    ("fsdp=8", int(60.4 * GiB), "fits", "fits", (14.8, 29.6)),
    ("fsdp=4,tp=2", 58 * GiB, "fits", "fits", (15.1, 30.2)),
    ("fsdp=2,tp=4", int(61.9 * GiB), "does not fit", "does not fit", (15.0, 31.0)),
    ("data=8", int(2.02 * 2**40), "does not fit", "does not fit", (0.123, 0.245)),
    ("data=2,fsdp=4", 10 * 2**40, "does not fit", "does not fit", (0.2, 0.4)),
)


def _is_round(value: float) -> bool:
    """1, 2 or 5 times a power of ten (or 0)."""
    if value == 0:
        return True
    mantissa = f"{value:e}".split("e")[0].rstrip("0").rstrip(".")
    return mantissa in ("1", "2", "5")


def test_the_scatter_numbers_its_points_and_names_them_in_a_legend() -> None:
    page = time_peak_svg(MESHES, 60 * GiB)
    texts = _texts(page)
    for name, *_ in MESHES:  # each name once, in the legend, not on a point
        assert texts.count(name) == 1
    for number in "12345":
        assert any(number in t.split(",") for t in texts)
    # round ticks on the log time axis, and on the bytes axes
    seconds = [float(t[:-2]) for t in texts if re.fullmatch(r"[\d.]+ s", t)]
    assert seconds and all(_is_round(s) for s in seconds)
    assert "log scale" in page
    # the meshes near the budget get a zoom panel of their own
    assert "Zoom on the meshes near the budget:" in texts
    root = _root(page)
    dots = [
        (float(c.get("cx") or 0), float(c.get("cy") or 0))
        for c in root.iter(f"{NS}circle")
    ]
    zoomed = [(x, y) for x, y in dots if y > 34 + 230 + 78]
    assert len(zoomed) == 3
    ys = sorted(y for _, y in zoomed)
    assert all(b - a >= 16 for a, b in itertools.pairwise(ys))


def test_bars_far_over_the_budget_run_off_the_chart() -> None:
    page = peaks_svg(MESHES, 60 * GiB)
    texts = _texts(page)
    assert "2 meshes are off the chart" in page
    assert page.count("<polygon") == 2  # one arrowhead per bar off the chart
    assert "10 TiB" in texts and "2.02 TiB" in texts  # written right of the plot
    assert (
        max(
            float(t.split()[0])
            for t in texts
            if t.endswith(" GiB")
            and t[0].isdigit()
            and t.split()[0].replace(".", "").isdigit()
        )
        < 400
    )


def test_without_a_budget_peaks_spanning_orders_get_a_log_axis() -> None:
    page = peaks_svg([(n, p, "compiled", s, e) for n, p, _, s, e in MESHES], None)
    assert {"10 GiB", "100 GiB", "1 TiB", "10 TiB"} <= set(_texts(page))
    assert "logarithmic" in page


def test_log_ticks_are_round() -> None:
    assert all(_is_round(t) for t in svg.log_ticks(0.123, 29.6))
    assert svg.log_ticks(0.123, 29.6)[0] <= 0.123
    assert svg.log_ticks(0.123, 29.6)[-1] >= 29.6


def test_the_curve_labels_its_dot_and_zooms_on_a_close_budget() -> None:
    times = list(range(0, 100, 10))
    live = [int(v * GiB) for v in (10, 30, 50, 60.5, 55, 40, 30, 20, 15, 12)]
    budget = int(59.33 * GiB)
    page = curve_svg(
        times,
        live,
        points=100,
        peak=(30, live[3], "fusion"),
        budget=budget,
        held=int(60.6 * GiB),
    )
    texts = _texts(page)
    assert "most live: 60.50 GiB" in texts
    assert "Zoom on the peak and the budget:" in texts
    assert "the device holds 60.60 GiB (the verdict's peak)" in texts
    assert "can differ from the most live" in page
    # far apart: no zoom band
    far = curve_svg(times, live, points=100, peak=(30, live[3], "f"), budget=80 * GiB)
    assert "Zoom" not in far


def test_the_kinds_bar_has_a_scale_and_a_budget_mark() -> None:
    bar = kinds_bar_svg(
        [("parameter", 30 * GiB), ("temporary", 10 * GiB)], 40 * GiB, 50 * GiB
    )
    texts = _texts(bar)
    assert "budget 50 GiB" in texts
    assert {"0 GiB", "20 GiB", "40 GiB"} <= set(texts)

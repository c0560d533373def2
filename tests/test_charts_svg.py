"""The one SVG module and the charts drawn with it, from plain numbers."""

import xml.etree.ElementTree as ET

import pytest

from nnx_introspect._breakdown.chart import curve_svg, kinds_bar_svg
from nnx_introspect._render import svg
from nnx_introspect._render.mesh_charts import bar_chart_html
from nnx_introspect._search.meshes.chart import peaks_svg, time_peak_svg

NS = "{http://www.w3.org/2000/svg}"
MiB = 2**20


def _root(page: str) -> ET.Element:
    return ET.fromstring(page[page.index("<svg") : page.index("</svg>") + 6])


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
    assert "peak 40 B" in _texts(page)
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

"""The fit page's chart (issue 28, item 10): no label overprints another or a
segment, nothing runs past the right edge, the chosen point stands out.

The geometry is read back from the SVG itself: each ``<text>`` is given a box
from its position, anchor and size (0.62 em a letter, wider than the sans and
monospace fonts browsers use), each segment ``<line>`` a box 6 px tall.
"""

import html
import re

import nnx_introspect as ni
from nnx_introspect._render import svg
from nnx_introspect._sweep.fit.report import FitStatus
from nnx_introspect._sweep.mesh_comparison.chart import time_peak_svg

GIB = 2**30
BUDGET = int(59.33 * GIB)
MESH = (("fsdp", 4), ("tp", 2))
Box = tuple[float, float, float, float]

_TEXT = re.compile(r"<text ([^>]*)>([^<]*)</text>")
_LINE = re.compile(r"<line ([^>]*)/>")
_ATTR = re.compile(r'([\w-]+)="([^"]*)"')


def _attrs(text: str) -> dict[str, str]:
    return dict(_ATTR.findall(text))


def _labels(page: str) -> list[tuple[str, Box]]:
    """Every label but the numbers inside the dots (white, drawn on their dot)."""
    out = []
    for attrs, content in _TEXT.findall(page):
        a = _attrs(attrs)
        if a.get("fill") == "#ffffff":
            continue
        size = float(a["font-size"])
        width = len(html.unescape(content)) * size * 0.62
        x, y = float(a["x"]), float(a["y"])
        left = {"start": x, "middle": x - width / 2, "end": x - width}[
            a.get("text-anchor", "start")
        ]
        # ascent 0.8 em (capitals and digits), descent 0.25 em
        out.append(
            (
                html.unescape(content),
                (left, y - 0.8 * size, left + width, y + 0.25 * size),
            )
        )
    return out


def _segments(page: str) -> list[Box]:
    """The points' segments: the solid 2-pixel lines."""
    out = []
    for attrs in _LINE.findall(page):
        a = _attrs(attrs)
        if a.get("stroke-width") == "2" and "stroke-dasharray" not in a:
            x1, y1, x2, y2 = (float(a[k]) for k in ("x1", "y1", "x2", "y2"))
            out.append((min(x1, x2), min(y1, y2) - 3, max(x1, x2), max(y1, y2) + 3))
    return out


def _apart(a: Box, b: Box) -> bool:
    return a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]


def _collisions(page: str) -> list[str]:
    labels = _labels(page)
    width = float(re.search(r'<svg [^>]*width="([\d.]+)"', page).group(1))  # type: ignore[union-attr]
    found = [f"{t!r} past the right edge" for t, box in labels if box[2] > width]
    for i, (t, box) in enumerate(labels):
        found += [
            f"{t!r} on {u!r}" for u, other in labels[i + 1 :] if not _apart(box, other)
        ]
        found += [
            f"{t!r} on a segment" for seg in _segments(page) if not _apart(box, seg)
        ]
    return found


def _row(remat: str, k: int, gib: float, seconds: float) -> ni.FitRow:
    peak = int(gib * GIB)
    pairs = ((remat, "dots_with_no_batch_dims_saveable"),) if remat else ()
    status: FitStatus = "fits" if peak <= BUDGET else "does not fit"
    return ni.FitRow(
        MESH, pairs, k, status, peak_bytes=peak, seconds=(seconds, seconds * 1.6)
    )


def _search(rows: tuple[ni.FitRow, ...], chosen: ni.FitRow) -> ni.FitSearch:
    return ni.FitSearch(
        "m:f",
        ("int32[32,2048]",),
        "h100-8",
        BUDGET,
        "given",
        rows,
        chosen,
        "DecoderLayer",
        "evidence",
        len(rows),
        1.0,
        "a pool",
    )


# tunix's Llama at B=32 (issue 28): long names, rows on both sides of the budget,
# and one whose segment runs under the budget label's usual place (right end)
ROWS = (
    _row("", 1, 60.57, 0.333),
    _row("DecoderLayer", 1, 36.39, 0.368),
    _row("", 2, 50.30, 0.316),
    _row("DecoderLayer", 2, 30.10, 0.441),
    _row("Attention", 1, 67.37, 0.335),
    _row("MLP", 1, 60.15, 0.341),
    _row("RMSNorm", 1, 59.40, 0.30),
    _row("Attention", 2, 58.90, 0.49),
)


def test_no_label_overprints_a_label_a_segment_or_the_edge() -> None:
    page = _search(ROWS, ROWS[2]).to_html()
    assert _labels(page) and _segments(page)
    assert _collisions(page) == []


def test_the_checker_sees_an_overprint_where_there_is_one() -> None:
    frame = svg.Frame(720, 300, 90, 30, 34, 34)
    # the old budget label, at the right end, over a segment drawn along the budget
    page = (
        '<svg width="720">'
        + svg.budget_across(frame, 100, BUDGET)
        + svg.line(500, 96, 700, 96, svg.RED, width=2)
        + svg.text(650, 200, "a long label that runs past the right edge")
        + "</svg>"
    )
    found = _collisions(page)
    assert any("on a segment" in f for f in found)
    assert any("past the right edge" in f for f in found)


def test_the_chosen_point_is_ringed_and_labelled_and_only_it() -> None:
    page = _search(ROWS, ROWS[2]).to_html()
    rings = re.findall(r'<circle [^>]*fill="none"[^>]*/>', page)
    assert len(rings) == 1
    ring = _attrs(rings[0])
    dots = [_attrs(c) for c in re.findall(r"<circle ([^>]*)>", page)]
    chosen_dot = [
        d for d in dots if d.get("fill") == svg.GREEN and d["cx"] == ring["cx"]
    ]
    assert chosen_dot and chosen_dot[0]["cy"] == ring["cy"]
    assert [t for t, _ in _labels(page)].count("chosen") == 1
    assert "the ringed point is the one chosen" in page
    # nothing chosen (nothing fits): no ring, no label
    none = _search(ROWS, ROWS[2])
    none = type(none)(**{**none.__dict__, "chosen": None})
    assert 'fill="none"' not in none.to_html()
    assert "chosen" not in [t for t, _ in _labels(none.to_html())]


def test_the_legend_keeps_two_columns_when_short_names_fit() -> None:
    rows = [
        (f"m{i}", (i + 1) * GIB, "fits", "fits", (0.1 * i + 0.1, 0.2 * i + 0.2))
        for i in range(6)
    ]
    page = time_peak_svg(rows, 10 * GIB)
    xs = {
        float(_attrs(a)["x"]) for a, c in _TEXT.findall(page) if re.fullmatch(r"m\d", c)
    }
    assert len(xs) == 2  # two columns
    assert _collisions(page) == []

"""The breakdown's charts as SVG: the memory curve and the peak by kind.

The curve is the bytes live at each program point as XLA scheduled the step,
XLA's peak point marked and the budget drawn; the bar splits the peak by kind.
Both follow the max-batch chart's style (:mod:`nnx_introspect._render.svg`).
"""

import html

from nnx_introspect._breakdown.report import KINDS, Breakdown
from nnx_introspect._render.svg import byte_ticks, nice_step
from nnx_introspect._render.table import format_bytes

__all__ = [
    "breakdown_html",
]

_WIDTH, _HEIGHT = 720, 300
_LEFT, _RIGHT, _TOP, _BOTTOM = 90, 20, 24, 46
_COLOURS = dict(
    zip(
        KINDS,
        (
            "#0969da",  # parameter
            "#8250df",  # optimizer state
            "#bf8700",  # other model state
            "#1a7f37",  # batch
            "#57606a",  # output
            "#cf222e",  # gradient
            "#e16f24",  # activation kept for backward
            "#1b7c83",  # collective buffer
            "#afb8c1",  # temporary
        ),
        strict=True,
    )
)


def curve_svg(breakdown: Breakdown, budget: int | None) -> str:
    """The memory curve: bytes live per program point, peak marked, budget dashed.

    Empty when the breakdown has no curve.
    """
    curve = breakdown.curve
    if curve is None or not curve.times:
        return ""
    esc = html.escape
    width, height = _WIDTH, _HEIGHT
    left, right, top, bottom = _LEFT, _RIGHT, _TOP, _BOTTOM
    highest = max(curve.live_bytes)
    unit, unit_bytes, ticks = byte_ticks(max(highest, budget or 0))
    y_max = ticks[-1] * unit_bytes or 1
    x_max = max(curve.points - 1, 1)

    def x(t: float) -> float:
        return left + (width - left - right) * t / x_max

    def y(v: float) -> float:
        return height - bottom - (height - top - bottom) * v / y_max

    parts = [
        '<figure class="bars"><svg xmlns="http://www.w3.org/2000/svg" '
        f'width="{width}" height="{height}" role="img" '
        'aria-label="bytes live at each program point of the step">'
    ]
    for tick in ticks:
        at = y(tick * unit_bytes)
        parts.append(
            f'<line x1="{left}" y1="{at:.1f}" x2="{width - right}" y2="{at:.1f}" '
            f'stroke="#d0d7de"/><text x="{left - 6}" y="{at + 4:.1f}" '
            f'font-size="11" text-anchor="end">{tick:g} {unit}</text>'
        )
    step = max(1, round(nice_step(x_max)))
    for t in range(0, x_max + 1, step):
        parts.append(
            f'<text x="{x(t):.1f}" y="{height - bottom + 16}" font-size="11" '
            f'text-anchor="middle">{t}</text>'
        )
    parts.append(
        f'<text x="{(left + width - right) / 2}" y="{height - 8}" font-size="12" '
        'text-anchor="middle">program point (XLA\'s schedule)</text>'
    )
    points = " ".join(
        f"{x(t):.1f},{y(b):.1f}"
        for t, b in zip(curve.times, curve.live_bytes, strict=True)
    )
    parts.append(
        f'<polyline points="{points}" fill="none" stroke="#0969da" stroke-width="1.2"/>'
    )
    if budget is not None:
        parts.append(
            f'<line x1="{left}" y1="{y(budget):.1f}" x2="{width - right}" '
            f'y2="{y(budget):.1f}" stroke="#cf222e" stroke-width="2" '
            'stroke-dasharray="6 4"/>'
            f'<text x="{width - right}" y="{y(budget) - 6:.1f}" font-size="11" '
            f'text-anchor="end" fill="#cf222e">budget '
            f"{esc(format_bytes(budget))}</text>"
        )
    peak = breakdown.live_peak_bytes
    at_x, at_y = x(breakdown.peak_time), y(peak)
    parts.append(
        f'<circle cx="{at_x:.1f}" cy="{at_y:.1f}" r="4" fill="#cf222e">'
        f"<title>XLA's peak: {esc(format_bytes(peak))} at point "
        f"{breakdown.peak_time} ({esc(breakdown.peak_instruction)})</title></circle>"
        f'<text x="{min(at_x + 6, width - right - 4):.1f}" y="{max(at_y - 6, 12):.1f}" '
        f'font-size="11" text-anchor="{"start" if at_x < width * 0.7 else "end"}">'
        f"peak {esc(format_bytes(peak))}</text>"
    )
    sampled = (
        f" (downsampled to {len(curve.times)} of {curve.points} points, each the "
        "most bytes live in its span)"
        if curve.downsampled
        else ""
    )
    parts.append(
        "</svg><figcaption>Bytes live at each program point of one device's "
        f"step, as XLA scheduled it{sampled}; the dot is XLA's peak, the dashed "
        "line the budget. Arguments and outputs count while live; XLA's "
        "preallocated temp buffer is not a value of its own.</figcaption></figure>"
    )
    return "".join(parts)


def kinds_bar_svg(breakdown: Breakdown) -> str:
    """One bar of the peak, split by kind, with a legend."""
    esc = html.escape
    peak = breakdown.live_peak_bytes
    groups = breakdown.by_kind()
    if peak <= 0 or not groups:
        return ""
    width, left, right = _WIDTH, 10, 10
    bar_y, bar_h = 10, 26
    legend_top = bar_y + bar_h + 20
    height = legend_top + 18 * len(groups) + 6
    parts = [
        '<figure class="bars"><svg xmlns="http://www.w3.org/2000/svg" '
        f'width="{width}" height="{height}" role="img" '
        'aria-label="the peak by kind">'
    ]
    at = float(left)
    span = width - left - right
    for group in groups:
        share = span * group.nbytes / peak
        colour = _COLOURS.get(group.label, "#afb8c1")
        parts.append(
            f'<rect x="{at:.1f}" y="{bar_y}" width="{share:.1f}" height="{bar_h}" '
            f'fill="{colour}"><title>{esc(group.label)}: '
            f"{esc(format_bytes(group.nbytes))}</title></rect>"
        )
        at += share
    for i, group in enumerate(groups):
        row_y = legend_top + 18 * i
        colour = _COLOURS.get(group.label, "#afb8c1")
        percent = (200 * group.nbytes + peak) // (2 * peak)
        parts.append(
            f'<rect x="{left}" y="{row_y - 10}" width="12" height="12" '
            f'fill="{colour}"/><text x="{left + 18}" y="{row_y}" font-size="12">'
            f"{esc(group.label)}: {esc(format_bytes(group.nbytes))} ({percent}%)"
            "</text>"
        )
    parts.append(
        "</svg><figcaption>The buffers live at XLA's peak "
        f"({esc(format_bytes(peak))}), by kind.</figcaption></figure>"
    )
    return "".join(parts)


def breakdown_html(breakdown: Breakdown, budget: int | None) -> str:
    """The curve, the bar by kind, then the breakdown's table (an HTML fragment).

    Example:
        >>> from nnx_introspect._breakdown.report import BreakdownRow
        >>> row = BreakdownRow("batch", "batch[0]", 96, (8, 3), "f32", "x", \
"parameter", "x", "batch[0]", None, 0, None)
        >>> breakdown = Breakdown("cpu", "jit_f", 3, "x", 96, 128, (row,))
        >>> page = breakdown_html(breakdown, None)
        >>> "batch: 96 B (100%)" in page, "<table>" in page
        (True, True)
    """
    from nnx_introspect._render.table import table_html

    return (
        "<h2>What the peak is made of</h2>"
        + curve_svg(breakdown, budget)
        + kinds_bar_svg(breakdown)
        + table_html(breakdown.table())
    )

"""The comparison's chart: each mesh's peak bytes per device as an inline SVG."""

import html
from typing import TYPE_CHECKING

from nnx_introspect._render.svg import byte_ticks
from nnx_introspect._render.table import format_bytes

if TYPE_CHECKING:
    from nnx_introspect._search.meshes.report import MeshCandidate


_BAR, _GAP, _CHART_WIDTH = 18, 8, 720


def _peaks_svg(rows: tuple["MeshCandidate", ...], budget: int | None) -> str:
    """Peak bytes per device of each mesh as horizontal bars, the budget dashed.

    Green fits, red does not, blue with no budget; a mesh with no compile has
    its outcome written where its bar would be.
    """
    esc = html.escape
    left = max(90, 7 * max(len(r.name) for r in rows) + 16)
    right, top, bottom = 24, 30, 40
    plot = _CHART_WIDTH - left - right
    height = top + len(rows) * (_BAR + _GAP) + bottom
    peaks = [r.peak_bytes for r in rows if r.peak_bytes is not None]
    unit, unit_bytes, ticks = byte_ticks(max([budget or 0, *peaks, 1]))
    x_max = ticks[-1] * unit_bytes or 1
    axis_y = height - bottom + 4

    def x(v: float) -> float:
        return left + plot * v / x_max

    parts = [
        '<figure class="bars"><svg xmlns="http://www.w3.org/2000/svg" '
        f'width="{_CHART_WIDTH}" height="{height}" role="img" '
        'aria-label="peak bytes per device of each mesh">'
    ]
    for tick in ticks:
        at = x(tick * unit_bytes)
        parts.append(
            f'<line x1="{at:.1f}" y1="{top - 4}" x2="{at:.1f}" y2="{axis_y}" '
            f'stroke="#d0d7de"/><text x="{at:.1f}" y="{axis_y + 14}" '
            f'font-size="11" text-anchor="middle">{tick:g} {unit}</text>'
        )
    for i, row in enumerate(rows):
        y = top + i * (_BAR + _GAP)
        parts.append(
            f'<text x="{left - 8}" y="{y + _BAR - 5}" font-size="12" '
            f'text-anchor="end" font-family="ui-monospace,monospace">'
            f"{esc(row.name)}</text>"
        )
        peak = row.peak_bytes
        if peak is None:
            parts.append(
                f'<text x="{left + 6}" y="{y + _BAR - 5}" font-size="12" '
                f'fill="#57606a" font-style="italic">{esc(row._short_status())}'
                "</text>"
            )
            continue
        colour = {"fits": "#1a7f37", "compiled": "#0969da"}.get(row.outcome, "#cf222e")
        parts.append(
            f'<rect x="{left}" y="{y}" width="{max(x(peak) - left, 1):.1f}" '
            f'height="{_BAR}" fill="{colour}"><title>{esc(row.name)}: '
            f"{esc(format_bytes(peak))} per device ({esc(row._short_status())})"
            "</title></rect>"
        )
    parts.append(
        f'<line x1="{left}" y1="{top - 4}" x2="{left}" y2="{axis_y}" stroke="#57606a"/>'
    )
    if budget is not None:
        at = x(budget)
        parts.append(
            f'<line x1="{at:.1f}" y1="{top - 12}" x2="{at:.1f}" y2="{axis_y}" '
            'stroke="#cf222e" stroke-width="2" stroke-dasharray="6 4"/>'
            f'<text x="{at:.1f}" y="{top - 16}" font-size="11" text-anchor="middle" '
            f'fill="#cf222e">budget {esc(format_bytes(budget))}</text>'
        )
    parts.append(
        "</svg><figcaption>Peak bytes per device of each mesh, best first: green "
        "fits, red does not"
        + ("" if budget is not None else ", blue: no budget to judge by")
        + "; the dashed line is the budget.</figcaption></figure>"
    )
    return "".join(parts)


def _time_peak_svg(rows: tuple["MeshCandidate", ...], budget: int | None) -> str:
    """Peak per device against the estimated step time, one point per mesh.

    Each compiled mesh with an estimate is a segment from its perfect-overlap
    time to its no-overlap time at its peak (a dot at the low end), labelled
    with its name; the budget is a dashed horizontal line. Empty when no row
    has an estimate.
    """
    points = [
        (r, r.estimated_seconds, r.peak_bytes)
        for r in rows
        if r.estimated_seconds is not None and r.peak_bytes is not None
    ]
    if not points:
        return ""
    esc = html.escape
    width, height = _CHART_WIDTH, 320
    left, right, top, bottom = 90, 30, 24, 46
    highest = max([budget or 0, *(p for _, _, p in points), 1])
    unit, unit_bytes, ticks = byte_ticks(highest)
    y_max = ticks[-1] * unit_bytes or 1
    t_max = max(high for _, (_, high), _ in points) * 1.05 or 1.0

    def x(t: float) -> float:
        return left + (width - left - right) * t / t_max

    def y(v: float) -> float:
        return height - bottom - (height - top - bottom) * v / y_max

    parts = [
        '<figure class="bars"><svg xmlns="http://www.w3.org/2000/svg" '
        f'width="{width}" height="{height}" role="img" '
        'aria-label="peak per device against the estimated step time">'
    ]
    for tick in ticks:
        at = y(tick * unit_bytes)
        parts.append(
            f'<line x1="{left}" y1="{at:.1f}" x2="{width - right}" y2="{at:.1f}" '
            f'stroke="#d0d7de"/><text x="{left - 6}" y="{at + 4:.1f}" '
            f'font-size="11" text-anchor="end">{tick:g} {unit}</text>'
        )
    for i in range(6):
        t = t_max * i / 5
        parts.append(
            f'<text x="{x(t):.1f}" y="{height - bottom + 16}" font-size="11" '
            f'text-anchor="middle">{t:.3g} s</text>'
        )
    parts.append(
        f'<text x="{(left + width - right) / 2}" y="{height - 8}" font-size="12" '
        'text-anchor="middle">estimated step time (roofline: perfect overlap '
        "to none)</text>"
    )
    if budget is not None:
        parts.append(
            f'<line x1="{left}" y1="{y(budget):.1f}" x2="{width - right}" '
            f'y2="{y(budget):.1f}" stroke="#cf222e" stroke-width="2" '
            'stroke-dasharray="6 4"/>'
            f'<text x="{width - right}" y="{y(budget) - 6:.1f}" font-size="11" '
            f'text-anchor="end" fill="#cf222e">budget {esc(format_bytes(budget))}'
            "</text>"
        )
    for row, (low, high), peak in points:
        colour = {"fits": "#1a7f37", "compiled": "#0969da"}.get(row.outcome, "#cf222e")
        parts.append(
            f'<line x1="{x(low):.1f}" y1="{y(peak):.1f}" x2="{x(high):.1f}" '
            f'y2="{y(peak):.1f}" stroke="{colour}" stroke-width="2"/>'
            f'<circle cx="{x(low):.1f}" cy="{y(peak):.1f}" r="4" fill="{colour}">'
            f"<title>{esc(row.name)}: {esc(format_bytes(peak))} per device, "
            f"{low:.3g}-{high:.3g} s per step (estimated)</title></circle>"
            f'<text x="{x(low) + 6:.1f}" y="{y(peak) - 6:.1f}" font-size="11" '
            f'font-family="ui-monospace,monospace">{esc(row.name)}</text>'
        )
    parts.append(
        "</svg><figcaption>Peak bytes per device against the estimated step time "
        "of each compiled mesh (an estimate, not a measurement): green fits, red "
        "does not; the dashed line is the budget. Lower and further left is "
        "better.</figcaption></figure>"
    )
    return "".join(parts)

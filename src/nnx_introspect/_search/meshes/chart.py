"""The comparison's charts: each mesh's peak, and its peak against its step time.

Both take one plain :data:`MeshRow` per candidate and draw with
:mod:`nnx_introspect._render.svg`. Their bytes axis keeps the meshes near the
budget readable: when some peaks are many times the budget, it stops at about
twice the budget and marks the others off the chart; without a budget, peaks
spanning orders of magnitude get a log axis. The scatter numbers its points
and names them in a legend below it, so no label lies over another.
"""

from collections.abc import Sequence
from typing import TypeAlias

from nnx_introspect._render import svg
from nnx_introspect._render.table import format_bytes

__all__ = [
    "MeshRow",
    "peaks_svg",
    "time_peak_svg",
]

MeshRow: TypeAlias = tuple[str, int | None, str, str, tuple[float, float] | None]
"""``(mesh name, peak bytes per device or None, outcome, status, (low, high)
estimated seconds per step or None)``, as a :class:`MeshCandidate` gives them."""


def _colour(outcome: str) -> str:
    """Green fits, blue with no budget to judge by, red otherwise."""
    return {"fits": svg.GREEN, "compiled": svg.BLUE}.get(outcome, svg.RED)


def _axis_words(ticks: Sequence[svg.Tick], off: int) -> str:
    """The caption's words on the bytes axis: log, or how many are off it."""
    if svg.is_log_axis(ticks):
        return " The bytes axis is logarithmic: the peaks span orders of magnitude."
    if off:
        return (
            f" {off} {'mesh is' if off == 1 else 'meshes are'} off the chart (above"
            f" {format_bytes(ticks[-1][0])}, arrowheads), so the ones near the"
            " budget stay readable."
        )
    return ""


def peaks_svg(rows: Sequence[MeshRow], budget: int | None) -> str:
    """Peak bytes per device of each mesh as horizontal bars, the budget dashed.

    Green fits, red does not, blue with no budget; a mesh with no compile has
    its status written where its bar would be. Each peak is written right of
    the plot; a bar many times the budget runs off the chart (an arrowhead)
    rather than flattening the others (see :func:`~nnx_introspect._render.\
ticks.peak_axis`).

    Example:
        >>> page = peaks_svg(
        ...     [("data=8", 3000, "fits", "fits", None),
        ...      ("tp=8", None, "rejected", "rejected by the planner", None)],
        ...     4096,
        ... )
        >>> page.count("<rect"), "rejected by the planner" in page
        (1, True)
    """
    peaks = [peak for _, peak, _, _, _ in rows if peak is not None]
    ticks = svg.peak_axis(peaks, budget)
    bars = [
        svg.BarRow(name, note=status)
        if peak is None
        else svg.BarRow(
            name,
            (
                svg.Bar(
                    peak,
                    _colour(outcome),
                    f"{name}: {format_bytes(peak)} per device ({status})",
                ),
            ),
            value=format_bytes(peak),
        )
        for name, peak, outcome, status, _ in rows
    ]
    frame, body = svg.bar_rows(bars, budget=budget, value_width=70, axis=ticks)
    off = sum(1 for peak in peaks if peak > ticks[-1][0])
    return svg.figure(
        frame,
        "peak bytes per device of each mesh",
        body,
        caption="Peak bytes per device of each mesh, in the table's order: green "
        "fits, red "
        "does not"
        + ("" if budget is not None else ", blue: no budget to judge by")
        + "; the dashed line is the budget."
        + _axis_words(ticks, off),
    )


_Point: TypeAlias = tuple[int, str, float, float, int, str]
"""``(number, mesh name, low seconds, high seconds, peak bytes, outcome)``."""


def _clusters(
    placed: list[tuple[float, float, _Point]],
) -> list[tuple[float, float, list[_Point]]]:
    """Points whose markers would overlap (within 16 pixels), drawn as one."""
    out: list[tuple[float, float, list[_Point]]] = []
    for px, py, point in placed:
        for cx, cy, members in out:
            if abs(cx - px) < 16 and abs(cy - py) < 16:
                members.append(point)
                break
        else:
            out.append((px, py, [point]))
    return out


def _time_axis(points: Sequence[_Point]) -> tuple[tuple[float, ...], bool]:
    """Round ticks of the time axis and whether it is logarithmic."""
    times = [t for p in points for t in (p[2], p[3])]
    if svg.wants_log(times):
        positive = [t for t in times if t > 0]
        return svg.log_ticks(min(positive), max(positive)), True
    return svg.round_ticks(max(times)), False


def _legend(points: Sequence[_Point], top: float, width: float) -> tuple[str, float]:
    """Number, mesh name and figures per point, in two columns; and its height."""
    half = (len(points) + 1) // 2
    parts = []
    for i, (number, name, low, high, peak, outcome) in enumerate(points):
        x = 16 + (width / 2) * (i // half)
        y = top + 18 * (i % half)
        parts += [
            svg.text(
                x + 14, y, str(number), size=12, anchor="end", colour=_colour(outcome)
            ),
            svg.text(x + 22, y, name, size=12, mono=True),
            svg.text(
                x + 30 + 7.3 * len(name),
                y,
                f"{format_bytes(peak)}, {low:.3g}-{high:.3g} s",
                size=12,
                colour=svg.AXIS,
            ),
        ]
    return "".join(parts), 18 * half


def _near(points: Sequence[_Point], budget: int | None) -> list[_Point]:
    """The points within 10% of the budget (none without one)."""
    if budget is None:
        return []
    return [p for p in points if abs(p[4] - budget) <= 0.1 * budget]


_PLOT = 230
"""The height of a panel's plot, in pixels."""
_GAP = 78
"""From one panel's plot to the next: tick labels, the axis title, a heading."""


def _panel(
    frame: svg.Frame,
    points: Sequence[_Point],
    ticks: Sequence[svg.Tick],
    times: tuple[tuple[float, ...], bool],
    budget: int | None,
) -> str:
    """One scatter panel: grid, axes, the budget, segments and numbered points.

    A point above the bytes axis's end sits on the top edge as an arrowhead.
    """
    top = ticks[-1][0] or 1
    y = svg.Scale(ticks[0][0], top, frame.baseline, frame.top, svg.is_log_axis(ticks))
    x_ticks, x_log = times
    x = frame.x_scale(x_ticks[-1] or 1.0, low=x_ticks[0] if x_log else 0, log=x_log)
    parts = [svg.y_grid(frame, y, ticks), svg.axes(frame)]
    parts += [
        svg.text(x(t), frame.baseline + 16, svg.seconds(t), anchor="middle")
        for t in x_ticks
    ]
    parts.append(
        svg.text(
            frame.middle,
            frame.baseline + 36,
            "estimated step time (roofline: perfect overlap to none)"
            + (", log scale" if x_log else ""),
            size=12,
            anchor="middle",
        )
    )
    if budget is not None and ticks[0][0] <= budget <= top:
        parts.append(svg.budget_across(frame, y(budget), budget))
    placed = []
    for point in points:
        _, _, low, high, peak, outcome = point
        at = -100.0  # off the chart: grouped only with the others off it
        if peak <= top:
            at = y(peak)
            parts.append(svg.line(x(low), at, x(high), at, _colour(outcome), width=2))
        placed.append((x(low), at, point))
    for px, py, members in _clusters(placed):
        label = ",".join(str(m[0]) for m in members)
        title = "; ".join(
            f"{m[0]} {m[1]}: {format_bytes(m[4])} per device, "
            f"{m[2]:.3g}-{m[3]:.3g} s per step (estimated)"
            for m in members
        )
        colours = {_colour(m[5]) for m in members}
        colour = colours.pop() if len(colours) == 1 else svg.AXIS
        if py < 0:  # off the chart: an arrowhead on the top edge
            parts += [
                svg.arrow(px, frame.top - 2, colour, up=True, size=10),
                svg.text(px + 8, frame.top - 4, label, size=11, colour=colour),
            ]
        else:
            parts.append(svg.numbered_dot(px, py, label, colour, title=title))
    return "".join(parts)


def time_peak_svg(rows: Sequence[MeshRow], budget: int | None) -> str:
    """Peak per device against the estimated step time, one numbered point per mesh.

    Each compiled mesh with an estimate is a segment from its perfect-overlap
    time to its no-overlap time at its peak, its number at the low end; the
    legend below the plot names each number's mesh with its figures (points
    that coincide share one marker, numbered ``1,3``, grey when their colours
    differ). Both axes have round ticks; each is logarithmic when its values
    span orders of magnitude. When the meshes within 10% of the budget lie
    too close together to read (less than 60 pixels apart, budget included),
    a second panel zooms on them: its bytes axis spans only them and the
    budget. The budget is a dashed line. Empty when no row has an estimate.

    Example:
        >>> page = time_peak_svg([("data=8", 3000, "fits", "fits", (0.2, 0.3))], None)
        >>> page.count("<circle"), "0.3 s" in page, ">data=8</text>" in page
        (1, True, True)
    """
    charted = [r for r in rows if r[1] is not None and r[4] is not None]
    points: list[_Point] = [
        (i, name, estimate[0], estimate[1], peak, outcome)
        for i, (name, peak, outcome, _, estimate) in enumerate(charted, start=1)
        if estimate is not None and peak is not None
    ]
    if not points:
        return ""
    peaks = [p[4] for p in points]
    every = [*peaks, budget or 0]
    ticks = (
        svg.log_byte_axis(min(v for v in every if v > 0), max(every))
        if svg.wants_log(every)
        else svg.byte_axis(max([*every, 1]))
    )
    times = _time_axis(points)
    near = _near(points, budget)
    zoom: tuple[svg.Tick, ...] = ()
    if near and budget is not None:
        y = svg.Scale(ticks[0][0], ticks[-1][0] or 1, _PLOT, 0, svg.is_log_axis(ticks))
        values = [p[4] for p in near] + [budget]
        if y(min(values)) - y(max(values)) < 60:
            low, high = min(values), max(values)
            pad = max(0.15 * (high - low), 0.01 * high)
            zoom = svg.byte_axis_between(low - pad, high + pad, 4)
    legend_rows = (len(points) + 1) // 2
    panels = 2 if zoom else 1
    height = 34 + panels * (_PLOT + _GAP) + 18 * legend_rows
    parts = []
    frame = svg.Frame(720, height, 90, 30, 34, height - 34 - _PLOT)
    parts.append(_panel(frame, points, ticks, times, budget))
    if zoom:
        second = 34 + _PLOT + _GAP
        frame = svg.Frame(720, height, 90, 30, second, height - second - _PLOT)
        parts.append(
            svg.text(
                16,
                second - 14,
                "Zoom on the meshes near the budget:",
                size=12,
                colour=svg.AXIS,
            )
            + _panel(frame, near, zoom, times, budget)
        )
    legend, _ = _legend(points, frame.baseline + 62, frame.width)
    parts.append(legend)
    return svg.figure(
        frame,
        "peak per device against the estimated step time",
        "".join(parts),
        caption="Peak bytes per device against the estimated step time of each "
        "compiled mesh (an estimate, not a measurement), numbered as in the "
        "legend: green fits, red does not; the dashed line is the budget. Lower "
        "and further left is better."
        + _axis_words(ticks, 0)
        + (
            f" The second panel zooms on the {len(near)} within 10% of the budget."
            if zoom
            else ""
        ),
    )

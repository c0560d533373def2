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

from nnx_introspect._render import format_bytes, svg

__all__ = [
    "MeshRow",
    "peaks_svg",
    "time_peak_svg",
]

MeshRow: TypeAlias = tuple[str, int | None, str, str, tuple[float, ...] | None]
"""``(mesh name, peak bytes per device or None, outcome, status, times or
None)``, as a :class:`MeshCandidate` gives them: the times are the roofline's
``(low, high)`` range of one step, then the point estimate when there is one
(``(low, high, estimate)``)."""


CHOSEN = "chosen"
"""The outcome of the configuration a search chose: green, ringed and labelled."""


def _colour(outcome: str) -> str:
    """Green fits (the chosen one too), blue with no budget to judge by, red else."""
    return {"fits": svg.GREEN, CHOSEN: svg.GREEN, "compiled": svg.BLUE}.get(
        outcome, svg.RED
    )


Box: TypeAlias = svg.Box
"""``(left, top, right, bottom)`` in pixels."""

text_box = svg.text_box
place = svg.place


def _axis_words(ticks: Sequence[svg.Tick], off: int, cut: float | None = None) -> str:
    """The caption's words on the bytes axis: broken, log, or how many are off it."""
    if cut is not None:
        return svg.break_words(cut, ticks[-1][0], "peaks")
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
ticks.peak_axis`). A budget many times every peak stands past a break in
    the axis (see :func:`~nnx_introspect._render.ticks.budget_axis`), each
    peak's share of it written beside it.

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
    ticks, cut = svg.budget_axis(max(peaks, default=1), budget)
    if cut is None:
        ticks = svg.peak_axis(peaks, budget)

    def value(peak: int) -> str:
        shown = format_bytes(peak)
        return (
            shown
            if cut is None or not budget
            else (f"{shown} ({svg.share_words(peak, budget)})")
        )

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
            value=value(peak),
        )
        for name, peak, outcome, status, _ in rows
    ]
    frame, body = svg.bar_rows(
        bars, budget=budget, value_width=70 if cut is None else 120, axis=ticks, cut=cut
    )
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
        + _axis_words(ticks, off, cut),
    )


_Point: TypeAlias = tuple[int, str, float, float, int, str, float | None]
"""``(number, mesh name, low seconds, high seconds, peak bytes, outcome, point
estimate or None)``."""


def _at(point: _Point) -> float:
    """Where a point's marker sits: its estimate, else its low bound."""
    return point[2] if point[6] is None else point[6]


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
    times = [t for p in points for t in (p[2], p[3], _at(p))]
    if svg.wants_log(times):
        positive = [t for t in times if t > 0]
        return svg.log_ticks(min(positive), max(positive)), True
    return svg.round_ticks(max(times)), False


_MONO = 12 * 0.62
"""The width of a letter of the legend's names (12 px monospace), generously."""
_SANS = 12 * 0.6
"""The width of a letter of the legend's figures (12 px), generously."""


def _legend_lines(
    points: Sequence[_Point], width: float
) -> list[tuple[float, int, _Point, bool]]:
    """``(x, line, point, figures on their own line)`` per legend entry.

    Two columns when every entry fits half the width, else one; an entry
    wider than its column puts its figures on the line below its name.
    """

    def wide(p: _Point) -> float:
        return 30 + _MONO * len(p[1]) + _SANS * len(_figures(p))

    column = (width - 32) / 2
    if all(wide(p) <= column for p in points):
        half = (len(points) + 1) // 2
        return [
            (16 + (width / 2) * (i // half), i % half, p, False)
            for i, p in enumerate(points)
        ]
    out, line = [], 0
    for p in points:
        apart = wide(p) > width - 32
        out.append((16.0, line, p, apart))
        line += 2 if apart else 1
    return out


def _figures(point: _Point) -> str:
    _, _, low, high, peak, _, at = point
    if at is None:
        return f"{format_bytes(peak)}, {low:.3g}-{high:.3g} s"
    return f"{format_bytes(peak)}, {at:.3g} s (roofline {low:.3g}-{high:.3g})"


def _legend(points: Sequence[_Point], top: float, width: float) -> tuple[str, float]:
    """Number, name and figures per point, never past ``width``; and its height."""
    parts = []
    lines = 0
    for x, line, point, apart in _legend_lines(points, width):
        number, name, _, _, _, outcome, _ = point
        y = top + 18 * line
        chosen = outcome == CHOSEN
        parts += [
            svg.text(
                x + 14,
                y,
                str(number),
                size=12,
                anchor="end",
                colour=_colour(outcome),
                bold=chosen,
            ),
            svg.text(x + 22, y, name, size=12, mono=True, bold=chosen),
            svg.text(
                x + 22 if apart else x + 30 + _MONO * len(name),
                y + 18 if apart else y,
                _figures(point),
                size=12,
                colour=svg.AXIS,
            ),
        ]
        lines = max(lines, line + (2 if apart else 1))
    return "".join(parts), 18 * lines


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
            (
                "estimated step time (dot: the estimate; line: roofline range, "
                "perfect overlap to none, not a bound)"
                if any(p[6] is not None for p in points)
                else "estimated step time (roofline: perfect overlap to none)"
            )
            + (", log scale" if x_log else ""),
            size=12,
            anchor="middle",
        )
    )
    placed = []
    taken: list[Box] = []
    for point in points:
        _, _, low, high, peak, outcome, _ = point
        at = -100.0  # off the chart: grouped only with the others off it
        if peak <= top:
            at = y(peak)
            parts.append(svg.line(x(low), at, x(high), at, _colour(outcome), width=2))
            taken.append((x(low) - 2, at - 3, x(high) + 2, at + 3))
        placed.append((x(_at(point)), at, point))
    marks, chosen_at = _marks(frame, _clusters(placed), taken)
    inside = (frame.left, frame.top - 14, frame.plot_right + 16, frame.baseline)
    if chosen_at is not None:
        px, py, r = chosen_at
        spots = [
            (px - r - 6, py + 4, "end"),
            (px, py - r - 6, "middle"),
            (px, py + r + 14, "middle"),
            (px + r + 6, py - 8, "start"),
        ]
        cx, cy, anchor, box = place("chosen", 11, spots, taken, inside)
        marks += svg.text(cx, cy, "chosen", anchor=anchor, colour=svg.GREEN, bold=True)
        taken.append(box)
    parts.append(svg.budget_in_band(frame, y, budget, taken=taken))
    return "".join(parts) + marks


def _marks(
    frame: svg.Frame,
    clusters: list[tuple[float, float, list[_Point]]],
    taken: list[Box],
) -> tuple[str, tuple[float, float, float] | None]:
    """The numbered points, a ring around the chosen one.

    Their boxes are added to ``taken``; returns the marks and the chosen
    point's ``(x, y, ring radius)``.
    """
    parts = []
    chosen_at = None
    for px, py, members in clusters:
        label = ",".join(str(m[0]) for m in members)
        title = "; ".join(
            f"{m[0]} {m[1]}: {format_bytes(m[4])} per device, "
            + (
                f"{m[2]:.3g}-{m[3]:.3g} s per step (estimated)"
                if m[6] is None
                else f"{m[6]:.3g} s per step (estimated; roofline range "
                f"{m[2]:.3g}-{m[3]:.3g} s)"
            )
            for m in members
        )
        colours = {_colour(m[5]) for m in members}
        colour = colours.pop() if len(colours) == 1 else svg.AXIS
        if py < 0:  # off the chart: an arrowhead on the top edge
            parts += [
                svg.arrow(px, frame.top - 2, colour, up=True, size=10),
                svg.text(px + 8, frame.top - 4, label, size=11, colour=colour),
            ]
            taken.append(text_box(px + 8, frame.top - 4, label, 11))
            continue
        r = max(8.0, 3.3 * len(label) + 3)
        parts.append(svg.numbered_dot(px, py, label, colour, title=title))
        if any(m[5] == CHOSEN for m in members):
            r += 5
            parts.append(svg.ring(px, py, r, svg.GREEN))
            chosen_at = (px, py, r)
        taken.append((px - r, py - r, px + r, py + r))
    return "".join(parts), chosen_at


def time_peak_svg(rows: Sequence[MeshRow], budget: int | None) -> str:
    """Peak per device against the estimated step time, one numbered point per mesh.

    Each compiled mesh with an estimate is a segment from its perfect-overlap
    time to its no-overlap time at its peak (the roofline's range), its
    number at its point estimate where it has one, else at the low end; the
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
        >>> page = time_peak_svg(
        ...     [("data=8", 3000, "fits", "fits", (0.2, 0.3, 0.25))], None)
        >>> "0.25 s per step (estimated; roofline range 0.2-0.3 s)" in page
        True
    """
    charted = [r for r in rows if r[1] is not None and r[4] is not None]
    points: list[_Point] = [
        (i, name, times[0], times[1], peak, outcome, times[2] if times[2:] else None)
        for i, (name, peak, outcome, _, times) in enumerate(charted, start=1)
        if times is not None and peak is not None
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
    legend_rows = max(
        line + (2 if apart else 1) for _, line, _, apart in _legend_lines(points, 720)
    )
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
        "legend: green fits, red does not"
        + (
            "; the ringed point is the one chosen"
            if any(p[5] == CHOSEN for p in points)
            else ""
        )
        + "; the dashed line is the budget. Lower and further left is better."
        + _axis_words(ticks, 0)
        + (
            f" The second panel zooms on the {len(near)} within 10% of the budget."
            if zoom
            else ""
        ),
    )

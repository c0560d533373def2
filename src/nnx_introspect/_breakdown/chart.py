"""The breakdown's charts as SVG: the memory curve and the peak by kind.

The curve is the bytes live at each program point as XLA scheduled the step,
XLA's peak point marked and the budget drawn; the bar splits the peak by kind.
Both take plain numbers and draw with :mod:`nnx_introspect._render.svg`;
:func:`breakdown_html` reads them off a :class:`Breakdown`.
"""

import html
from collections.abc import Sequence

from nnx_introspect._breakdown.report import Breakdown
from nnx_introspect._breakdown.rows import KINDS
from nnx_introspect._render import svg
from nnx_introspect._render.table import format_bytes, table_html

__all__ = [
    "breakdown_html",
    "curve_svg",
    "kinds_bar_svg",
]

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


def curve_svg(
    times: Sequence[int],
    live_bytes: Sequence[int],
    *,
    points: int,
    peak: tuple[int, int, str],
    budget: int | None = None,
    downsampled: bool = False,
) -> str:
    """The memory curve: bytes live per program point, peak marked, budget dashed.

    Args:
        times: The program points drawn, increasing.
        live_bytes: The bytes live at each of them.
        points: How many program points the schedule has.
        peak: XLA's peak as ``(program point, bytes, instruction)``.
        budget: The byte budget drawn as a dashed line, if any.
        downsampled: Whether ``times`` is a sample of the points, each
            standing for the most bytes live in its span (the caption says so).

    Returns:
        An SVG figure; empty without points.

    Example:
        >>> page = curve_svg([0, 1, 2], [10, 30, 20], points=3, peak=(1, 30, "dot"))
        >>> "peak 30 B" in page, page.count("<circle")
        (True, 1)
    """
    if not times:
        return ""
    frame = svg.Frame(720, 300, left=90, right=20, top=24, bottom=46)
    x_max = max(points - 1, 1)
    x = frame.x_scale(x_max)
    ticks = svg.byte_axis(max(*live_bytes, budget or 0))
    y = frame.y_scale(ticks[-1][0] or 1)
    step = max(1, round(svg.nice_step(x_max)))
    parts = [
        svg.y_grid(frame, y, ticks),
        svg.axes(frame),
        svg.x_labels(
            frame,
            x,
            [(t, str(t)) for t in range(0, x_max + 1, step)],
            "program point (XLA's schedule)",
        ),
        svg.polyline(
            [(x(t), y(b)) for t, b in zip(times, live_bytes, strict=True)],
            svg.BLUE,
            width=1.2,
        ),
    ]
    if budget is not None:
        parts.append(svg.budget_across(frame, y(budget), budget))
    time, nbytes, instruction = peak
    at_x, at_y = x(time), y(nbytes)
    parts += [
        svg.dot(
            at_x,
            at_y,
            svg.RED,
            title=f"XLA's peak: {format_bytes(nbytes)} at point {time} ({instruction})",
        ),
        svg.text(
            min(at_x + 6, frame.plot_right - 4),
            max(at_y - 6, 12),
            f"peak {format_bytes(nbytes)}",
            anchor="start" if at_x < frame.width * 0.7 else "end",
        ),
    ]
    sampled = (
        f" (downsampled to {len(times)} of {points} points, each the most bytes "
        "live in its span)"
        if downsampled
        else ""
    )
    return svg.figure(
        frame,
        "bytes live at each program point of the step",
        "".join(parts),
        caption="Bytes live at each program point of one device's step, as XLA "
        f"scheduled it{sampled}; the dot is XLA's peak, the dashed line the "
        "budget. Arguments and outputs count while live; XLA's preallocated "
        "temp buffer is not a value of its own.",
    )


def kinds_bar_svg(kinds: Sequence[tuple[str, int]], peak: int) -> str:
    """One bar of the peak split by kind, with a legend of bytes and shares.

    Args:
        kinds: ``(kind, bytes)`` per kind, largest first; a kind of
            :data:`~nnx_introspect._breakdown.rows.KINDS` has its own colour.
        peak: The bytes of the whole bar.

    Returns:
        An SVG figure; empty when there is nothing to split.

    Example:
        >>> page = kinds_bar_svg([("parameter", 96), ("temporary", 32)], 128)
        >>> "parameter: 96 B (75%)" in page, page.count("<rect")
        (True, 4)
    """
    if peak <= 0 or not kinds:
        return ""
    left, bar_y, bar_h = 10, 10, 26
    legend_top = bar_y + bar_h + 20
    frame = svg.Frame(720, legend_top + 18 * len(kinds) + 6, left, 10, bar_y, 0)
    colours = [_COLOURS.get(kind, "#afb8c1") for kind, _ in kinds]
    body = svg.stacked_bar(
        left,
        bar_y,
        frame.plot_right - left,
        bar_h,
        [
            (nbytes, colour, f"{kind}: {format_bytes(nbytes)}")
            for (kind, nbytes), colour in zip(kinds, colours, strict=True)
        ],
    ) + svg.legend(
        left,
        legend_top,
        [
            (colour, f"{kind}: {format_bytes(nbytes)} ({_percent(nbytes, peak)}%)")
            for (kind, nbytes), colour in zip(kinds, colours, strict=True)
        ],
    )
    return svg.figure(
        frame,
        "the peak by kind",
        body,
        caption="The buffers live at XLA's peak "
        f"({html.escape(format_bytes(peak))}), by kind.",
    )


def _percent(part: int, whole: int) -> int:
    """``part`` as a whole percent of ``whole``, halves rounded up."""
    return (200 * part + whole) // (2 * whole)


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
    curve = breakdown.curve
    peak = breakdown.live_peak_bytes
    return (
        "<h2>What the peak is made of</h2>"
        + (
            ""
            if curve is None
            else curve_svg(
                curve.times,
                curve.live_bytes,
                peak=(breakdown.peak_time, peak, breakdown.peak_instruction),
                points=curve.points,
                budget=budget,
                downsampled=curve.downsampled,
            )
        )
        + kinds_bar_svg([(g.label, g.nbytes) for g in breakdown.by_kind()], peak)
        + table_html(breakdown.table())
    )

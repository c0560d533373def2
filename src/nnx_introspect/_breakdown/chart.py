"""The breakdown's charts as SVG: the memory curve and the peak by kind.

The curve is the bytes live at each program point as XLA scheduled the step,
XLA's peak point marked and the budget drawn; the bar splits the peak by kind.
Both take plain numbers and draw with :mod:`nnx_introspect._render.svg`;
:func:`breakdown_html` reads them off a :class:`Breakdown`.
"""

import html
import re
from collections.abc import Sequence

from nnx_introspect._breakdown.report import Breakdown
from nnx_introspect._breakdown.rows import EXPERT_KINDS, KINDS
from nnx_introspect._render import format_bytes, svg, table_html

__all__ = [
    "advice_html",
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
            "#0550ae",  # weights (serving)
            "#953800",  # KV cache (serving)
            "#fb8f44",  # KV cache copy (serving)
            "#6639ba",  # reference (an RL step's reference model)
            "#218bff",  # rollout weights (an RL step's rollout)
            "#57606a",  # output
            "#cf222e",  # gradient
            "#e16f24",  # activation kept for backward
            "#4ac26b",  # collective in flight
            "#1b7c83",  # collective buffer
            "#eaeef2",  # empty buffer
            "#afb8c1",  # temporary
        ),
        strict=True,
    )
) | dict(
    zip(EXPERT_KINDS, ("#bc4c00", "#8a4600"), strict=True)  # dispatch, combine
)


def _zoom_ticks(
    values: Sequence[int], budget: int | None, top: float
) -> tuple[svg.Tick, ...]:
    """The zoom band's ticks when the peak and the budget are too close to see.

    ``values`` are the figures to tell apart from the budget (the most bytes
    live, what the device holds); empty when there is no budget or they are
    at least 5% of the axis apart from it.
    """
    if budget is None or not values:
        return ()
    spread = [*values, budget]
    low, high = min(spread), max(spread)
    if all(abs(v - budget) >= 0.05 * top for v in values) and high - low >= 0.05 * top:
        return ()
    pad = max(0.3 * (high - low), 0.005 * high, 1)
    return svg.byte_axis_between(max(low - pad, 0), high + pad, 3)


def _zoom(
    frame: svg.Frame,
    ticks: Sequence[svg.Tick],
    line: Sequence[tuple[float, float]],
    x: svg.Scale,
    marks: tuple[tuple[int, int], int | None, int | None],
) -> str:
    """The zoom band: the bytes near the budget, the curve clipped to them.

    ``marks`` is ``((peak point, most bytes live), held bytes, budget)``.
    """
    (time, nbytes), held, budget = marks
    y = svg.Scale(ticks[0][0], ticks[-1][0], frame.baseline, frame.top)
    width, height = frame.plot_right - frame.left, frame.baseline - frame.top
    box = f"{frame.left:g} {frame.top:g} {width:g} {height:g}"
    parts = [
        svg.text(
            16,
            frame.top - 10,
            "Zoom on the peak and the budget:",
            size=12,
            colour=svg.AXIS,
        ),
        svg.y_grid(frame, y, ticks),
        svg.axes(frame),
        # a nested SVG clips the curve to the band
        f'<svg x="{frame.left:g}" y="{frame.top:g}" width="{width:g}" '
        f'height="{height:g}" viewBox="{box}">'
        + svg.polyline([(px, y(b)) for px, b in line], svg.BLUE, width=1.2)
        + "</svg>",
    ]
    taken: list[svg.Box] = []
    if held is not None:
        words = f"the device holds {format_bytes(held)} (the verdict's peak)"
        parts.append(
            svg.line(
                frame.left, y(held), frame.plot_right, y(held), "#24292f", dash="2 3"
            )
            + svg.text(frame.left + 6, y(held) - 5, words, colour="#24292f")
        )
        taken.append(svg.text_box(frame.left + 6, y(held) - 5, words, 11))
        taken.append((frame.left, y(held) - 1, frame.plot_right, y(held) + 1))
    # drawn last, over the held line, its label clear of the held line's
    parts.append(svg.budget_in_band(frame, y, budget, taken=taken))
    parts.append(
        svg.dot(x(time), y(nbytes), svg.RED, title=f"most live: {format_bytes(nbytes)}")
    )
    return "".join(parts)


def curve_svg(
    times: Sequence[int],
    live_bytes: Sequence[int],
    *,
    points: int,
    peak: tuple[int, int, str],
    budget: int | None = None,
    downsampled: bool = False,
    held: int | None = None,
) -> str:
    """The memory curve: bytes live per program point, the most marked, budget dashed.

    The dot is the most bytes live at one point by XLA's live ranges,
    labelled ``most live: ...``; the verdict's peak is what the device holds
    (``held``), which the caption says can differ. The budget is a red dashed
    line with its own label, apart from the grey grid. When the budget is
    within 5% of the axis of the most live or of what the device holds, a zoom
    band below the chart spans just those bytes, so an overshoot of 2% shows.

    Args:
        times: The program points drawn, increasing.
        live_bytes: The bytes live at each of them.
        points: How many program points the schedule has.
        peak: The most bytes live as ``(program point, bytes, instruction)``.
        budget: The byte budget drawn as a dashed line, if any.
        downsampled: Whether ``times`` is a sample of the points, each
            standing for the most bytes live in its span (the caption says so).
        held: What the device holds for the step (the verdict's peak), if
            known: named in the caption and drawn in the zoom band.

    Returns:
        An SVG figure; empty without points.

    Example:
        >>> page = curve_svg([0, 1, 2], [10, 30, 20], points=3, peak=(1, 30, "dot"))
        >>> "most live: 30 B" in page, page.count("<circle")
        (True, 1)
    """
    if not times:
        return ""
    time, nbytes, instruction = peak
    ticks, cut = svg.budget_axis(max(*live_bytes, held or 0), budget)
    zoom = _zoom_ticks(
        [nbytes] + ([held] if held is not None else []), budget, ticks[-1][0] or 1
    )
    band = 190 if zoom else 0
    frame = svg.Frame(720, 300 + band, left=90, right=20, top=24, bottom=46 + band)
    x_max = max(points - 1, 1)
    x = frame.x_scale(x_max)
    y = frame.y_scale(ticks[-1][0] or 1, cut=cut)
    step = max(1, round(svg.nice_step(x_max)))
    line = [(x(t), b) for t, b in zip(times, live_bytes, strict=True)]
    parts = [
        svg.y_grid(frame, y, ticks),
        svg.axes(frame),
        svg.text(
            frame.middle,
            frame.baseline + 36,
            "program point (XLA's schedule)",
            size=12,
            anchor="middle",
        ),
        *(
            svg.text(x(t), frame.baseline + 16, str(t), anchor="middle")
            for t in range(0, x_max + 1, step)
        ),
        svg.polyline([(px, y(b)) for px, b in line], svg.BLUE, width=1.2),
    ]
    at_x, at_y = x(time), y(nbytes)
    most = f"most live: {format_bytes(nbytes)}"
    label_x, label_y = min(at_x + 6, frame.plot_right - 4), max(at_y - 6, 12)
    anchor = "start" if at_x < frame.width * 0.7 else "end"
    parts += [
        svg.dot(
            at_x,
            at_y,
            svg.RED,
            title=f"{most} at point {time} ({instruction})",
        ),
        svg.text(label_x, label_y, most, anchor=anchor),
    ]
    if y.break_at is not None:
        parts.append(svg.axis_break(frame.left, y.break_at, vertical=True))
    if budget is not None:
        taken = [svg.text_box(label_x, label_y, most, 11, anchor)]
        parts.append(svg.budget_across(frame, y(budget), budget, taken=taken))
    if zoom:
        below = svg.Frame(720, frame.height, 90, 20, 300 + 20, 46)
        parts.append(_zoom(below, zoom, line, x, ((time, nbytes), held, budget)))
    words = _curve_words(
        sampled=(len(times), points) if downsampled else None,
        held=held,
        zoom=bool(zoom),
        broken=None
        if cut is None or budget is None
        else svg.break_words(cut, budget, "bytes live", peak=nbytes),
    )
    return svg.figure(
        frame,
        "bytes live at each program point of the step",
        "".join(parts),
        caption=html.escape(words, quote=False),
    )


def _curve_words(
    *,
    sampled: tuple[int, int] | None,
    held: int | None,
    zoom: bool,
    broken: str | None,
) -> str:
    """The curve's caption: what is drawn, what the device holds, zoom, break."""
    shown = (
        ""
        if sampled is None
        else f" (downsampled to {sampled[0]} of {sampled[1]} points, each the most "
        "bytes live in its span)"
    )
    holds = "" if held is None else f" ({format_bytes(held)})"
    return (
        "Bytes live at each program point of one device's step, as XLA "
        f"scheduled it{shown}; the dot is the most bytes live at one point by "
        "XLA's live ranges, the dashed line the budget. Arguments and outputs "
        "count while live; XLA's preallocated temp buffer is not a value of its "
        f"own. The verdict's peak is what the device holds{holds}: arguments, "
        "outputs and that temp buffer for the whole step, less what is aliased, "
        "so it can differ from the most live."
        + (" The band below zooms on the peak and the budget." if zoom else "")
        + (broken or "")
    )


def kinds_bar_svg(
    kinds: Sequence[tuple[str, int]], peak: int, budget: int | None = None
) -> str:
    """One bar of the peak split by kind on a bytes scale, the budget marked.

    Args:
        kinds: ``(kind, bytes)`` per kind, largest first; a kind of
            :data:`~nnx_introspect._breakdown.kinds.KINDS` has its own colour.
        peak: The bytes of the whole bar.
        budget: The byte budget, drawn as a dashed line across the bar.

    Returns:
        An SVG figure: the bar over round byte ticks, then a legend of each
        kind's bytes and share; empty when there is nothing to split.

    Example:
        >>> page = kinds_bar_svg([("parameter", 96), ("temporary", 32)], 128)
        >>> "parameter: 96 B (75%)" in page, page.count("<rect")
        (True, 4)
    """
    if peak <= 0 or not kinds:
        return ""
    frame, body, cut = svg.split_bar(
        [(kind, nbytes, _COLOURS.get(kind, "#afb8c1")) for kind, nbytes in kinds],
        budget,
    )
    broken = (
        ""
        if cut is None or budget is None
        else html.escape(svg.break_words(cut, budget, "kinds", peak=peak))
    )
    return svg.figure(
        frame,
        "the peak by kind",
        body,
        caption="The buffers live at XLA's peak "
        f"({html.escape(format_bytes(peak))}), by kind"
        + ("" if budget is None else ", against the budget (dashed)")
        + "."
        + broken,
    )


def advice_html(facts: Sequence[str]) -> str:
    """"What to change" as an HTML list, each ```code``` span as ``<code>``.

    Empty when there is nothing to change (a step that fits).

    Example:
        >>> advice_html(["wrap `Block.__call__` in `nnx.remat` (a < b)."])
        '<h2>What to change</h2><ul class="advice"><li>wrap <code>Block.__call__\
</code> in <code>nnx.remat</code> (a &lt; b).</li></ul>'
        >>> advice_html([])
        ''
    """
    if not facts:
        return ""
    items = "".join(
        "<li>" + _CODE.sub(r"<code>\1</code>", html.escape(fact)) + "</li>"
        for fact in facts
    )
    return f'<h2>What to change</h2><ul class="advice">{items}</ul>'


_CODE = re.compile(r"`([^`]+)`")


def breakdown_html(
    breakdown: Breakdown, budget: int | None, advice: Sequence[str] = ()
) -> str:
    """"What to change" first, then the curve, the bar by kind and the table.

    An HTML fragment: ``advice`` (:func:`advice_html`; none on a step that
    fits), the memory curve (its dot the most bytes live, the caption naming
    what the device holds), the peak by kind against the budget, then the
    breakdown's table.

    Example:
        >>> from nnx_introspect._breakdown.report import BreakdownRow
        >>> row = BreakdownRow("batch", "batch[0]", 96, (8, 3), "f32", "x", \
"parameter", "x", "batch[0]", None, 0, None)
        >>> breakdown = Breakdown("cpu", "jit_f", 3, "x", 96, 128, (row,))
        >>> page = breakdown_html(breakdown, None, ["use `x`."])
        >>> "batch: 96 B (100%)" in page, "<table>" in page
        (True, True)
        >>> page.index("<code>x</code>") < page.index("What the peak is made of")
        True
    """
    curve = breakdown.curve
    peak = breakdown.live_peak_bytes
    return (
        advice_html(advice)
        + "<h2>What the peak is made of</h2>"
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
                held=breakdown.held_bytes,
            )
        )
        + kinds_bar_svg(
            [(g.label, g.nbytes) for g in breakdown.by_kind()], peak, budget
        )
        + table_html(breakdown.table())
    )

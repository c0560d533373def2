"""The max-batch chart: peak bytes per device against the batches tried.

Drawn with :mod:`~nnx_introspect._render.svg`'s primitives; the search that
fills it is :func:`~nnx_introspect.max_batch`. Near its answer the search
tries sizes a few percent apart, whose peaks lie a few pixels from each other
and from the budget on the whole curve: a second panel zooms on them, the
budget drawn there too.
"""

import math
from collections.abc import Callable, Sequence

from nnx_introspect._render.svg import (
    AXIS,
    BLUE,
    GREEN,
    RED,
    Frame,
    Point,
    Scale,
    axes,
    axis_break,
    break_words,
    budget_across,
    budget_axis,
    budget_in_band,
    byte_axis_between,
    dot,
    figure,
    nice_step,
    polyline,
    text,
    x_labels,
    y_grid,
)
from nnx_introspect._text import format_bytes

__all__ = ["NEAR", "chart_svg"]


def _batch_ticks(
    sizes: list[int], log: bool, share: Callable[[float], float], origin: int = 0
) -> list[int]:
    """The batches the x axis labels.

    Each one tried while their labels have room (``share`` gives a batch's
    place along the axis, 0 to 1), else round ones: powers of two on a log
    axis, 1-2-5 steps from the linear axis's ``origin`` on a linear one.
    """
    tried = sorted(set(sizes))
    places = [share(b) for b in tried]
    widths = [(len(str(b)) * 7 + 8) / _BATCH_FRAME_PLOT for b in tried]
    if all(
        places[i + 1] - places[i] >= (widths[i] + widths[i + 1]) / 2
        for i in range(len(tried) - 1)
    ):
        return tried
    x_min, x_max = tried[0], tried[-1]
    if not log:
        step = max(1, round(nice_step(max(x_max - origin, 1))))
        return list(range(-(-origin // step) * step, x_max + 1, step))
    exponents = range(math.ceil(math.log2(x_min)), math.floor(math.log2(x_max)) + 1)
    stride = max(1, math.ceil(len(exponents) / 8))
    return [2**e for e in exponents[::stride]]


_BATCH_FRAME = Frame(720, 320, left=90, right=20, top=20, bottom=50)
_BATCH_FRAME_PLOT = _BATCH_FRAME.plot_right - _BATCH_FRAME.left

NEAR = 0.1
"""Points whose peak is within this share of the budget are the zoom's."""

_ZOOM_PLOT = 150
"""The zoom panel's plot height, in pixels."""
_ZOOM_GAP = 70
"""From the whole curve's axis title to the zoom panel's plot."""


def _near(points: Sequence[Point], budget: int, y: Scale) -> list[Point]:
    """The points the zoom panel shows, or none when they are readable already.

    Those within :data:`NEAR` of the budget, when there are at least two and
    they, with the budget, span less than 40 pixels of the whole curve.
    """
    near = [p for p in points if abs(p[1] - budget) <= NEAR * budget]
    if len(near) < 2:
        return []
    values = [p for _, p, _ in near] + [budget]
    return near if y(min(values)) - y(max(values)) < 40 else []


def _marks(points: Sequence[Point], x: Scale, y: Scale) -> str:
    """The curve through ``points`` and a dot per point (green fits, red not)."""
    points = sorted(points)
    parts = [polyline([(x(b), y(p)) for b, p, _ in points], BLUE)] if points else []
    for b, peak, fits in points:
        parts.append(
            dot(
                x(b),
                y(peak),
                GREEN if fits else RED,
                title=f"batch {b}: {format_bytes(peak)} "
                f"({'fits' if fits else 'does not fit'})",
            )
        )
    return "".join(parts)


def _zoom(frame: Frame, near: Sequence[Point], budget: int) -> str:
    """The zoom panel: the points near the budget on axes of their own."""
    sizes = [b for b, _, _ in near]
    low, high = min(sizes), max(sizes)
    pad = max(1, round(0.05 * (high - low)))
    origin = max(low - pad, 0)
    x = frame.x_scale(high + pad, low=origin)
    values = [p for _, p, _ in near] + [budget]
    spread = max(values) - min(values)
    margin = max(0.15 * spread, 0.002 * max(values), 1)
    ticks = byte_axis_between(min(values) - margin, max(values) + margin, 3)
    y = Scale(ticks[0][0], ticks[-1][0], frame.baseline, frame.top)
    batches = _batch_ticks(sizes, False, x.share, origin)
    heading = "Zoom on the batches near the budget:"
    parts = [
        text(16, frame.top - 12, heading, size=12, colour=AXIS),
        y_grid(frame, y, ticks),
        axes(frame),
        x_labels(frame, x, [(b, str(b)) for b in batches], "global batch"),
        _marks(near, x, y),
    ]
    dots = [(x(b) - 5, y(p) - 5, x(b) + 5, y(p) + 5) for b, p, _ in near]
    parts.append(budget_in_band(frame, y, budget, taken=dots))
    return "".join(parts)


def chart_svg(points: tuple[Point, ...], budget: int) -> str:
    """Peak bytes per device against batch, the budget as a dashed line (SVG).

    The batch axis is logarithmic when the sizes tried span 16x or more (the
    search doubles), linear from 0 otherwise; it labels each batch tried, or
    round sizes when those labels would collide. The bytes axis is linear from
    0, with round ticks (1-2-5 steps in one unit), broken before a budget
    more than :data:`~nnx_introspect._render.ticks.BREAK_RATIO` times every
    peak; the budget line carries its own label, inside the figure. When the
    points within :data:`NEAR` of the budget crowd together, a second panel
    zooms on them, with the budget's line and label (or, were it outside the
    panel, where it is).

    Example:
        >>> svg = chart_svg(((8, 3000, True), (16, 6000, False)), 4096)
        >>> svg.count("<circle"), "budget 4 KiB" in svg
        (2, True)
    """
    whole = _BATCH_FRAME
    sizes = [b for b, _, _ in points] or [1]
    x_min, x_max = min(sizes), max(sizes)
    log = x_max >= 16 * x_min
    ticks, cut = budget_axis(max([p for _, p, _ in points] or [1]), budget)
    y = whole.y_scale(ticks[-1][0] or 1, cut=cut)
    near = _near(points, budget, y)
    height = whole.height + (_ZOOM_GAP + _ZOOM_PLOT + 50 if near else 0)
    frame = Frame(
        whole.width, height, whole.left, whole.right, whole.top, height - y.start
    )
    x = frame.x_scale(x_max, low=x_min, log=True) if log else frame.x_scale(x_max)
    batches = _batch_ticks(sizes, log, x.share)
    axis_title = "global batch (log scale)" if log else "global batch"
    parts = [
        y_grid(frame, y, ticks),
        axes(frame),
        x_labels(frame, x, [(b, str(b)) for b in batches], ""),
        text(frame.middle, frame.baseline + 36, axis_title, size=12, anchor="middle"),
        _marks(points, x, y),
    ]
    if y.break_at is not None:
        parts.append(axis_break(frame.left, y.break_at, vertical=True))
    dots = [(x(b) - 5, y(p) - 5, x(b) + 5, y(p) + 5) for b, p, _ in points]
    parts.append(budget_across(frame, y(budget), budget, taken=dots))
    if near:
        top = frame.baseline + _ZOOM_GAP
        band = Frame(frame.width, height, frame.left, frame.right, top, 50)
        parts.append(_zoom(band, near, budget))
    caption = (
        "Peak bytes per device against the global batch: green fits, red "
        "does not; the dashed line is the budget."
        + (
            ""
            if cut is None
            else break_words(
                cut,
                budget,
                "peaks",
                peak=max(p for _, p, _ in points),
                name="the largest peak",
            )
        )
        + (
            f" The second panel zooms on the {len(near)} batches within "
            f"{NEAR:.0%} of the budget."
            if near
            else ""
        )
    )
    return figure(
        frame,
        "peak bytes per device against global batch",
        "".join(parts),
        caption=caption,
    )

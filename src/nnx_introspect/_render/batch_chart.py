"""The max-batch chart: peak bytes per device against the batches tried.

Drawn with :mod:`~nnx_introspect._render.svg`'s primitives; the search that
fills it is :func:`~nnx_introspect.max_batch`.
"""

import math
from collections.abc import Callable

from nnx_introspect._render.svg import (
    BLUE,
    GREEN,
    RED,
    Frame,
    Point,
    axes,
    budget_across,
    byte_axis,
    dot,
    figure,
    nice_step,
    polyline,
    x_labels,
    y_grid,
)
from nnx_introspect._render.table import format_bytes

__all__ = ["chart_svg"]


def _batch_ticks(
    sizes: list[int], log: bool, share: Callable[[float], float]
) -> list[int]:
    """The batches the x axis labels.

    Each one tried while their labels have room (``share`` gives a batch's
    place along the axis, 0 to 1), else round ones: powers of two on a log
    axis, 1-2-5 steps from 0 on a linear one.
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
        step = max(1, round(nice_step(x_max)))
        return list(range(0, x_max + 1, step))
    exponents = range(math.ceil(math.log2(x_min)), math.floor(math.log2(x_max)) + 1)
    stride = max(1, math.ceil(len(exponents) / 8))
    return [2**e for e in exponents[::stride]]


_BATCH_FRAME = Frame(720, 320, left=90, right=20, top=20, bottom=50)
_BATCH_FRAME_PLOT = _BATCH_FRAME.plot_right - _BATCH_FRAME.left


def chart_svg(points: tuple[Point, ...], budget: int) -> str:
    """Peak bytes per device against batch, the budget as a dashed line (SVG).

    The batch axis is logarithmic when the sizes tried span 16x or more (the
    search doubles), linear from 0 otherwise; it labels each batch tried, or
    round sizes when those labels would collide. The bytes axis is linear from
    0, with round ticks (1-2-5 steps in one unit); the budget line carries its
    own label.

    Example:
        >>> svg = chart_svg(((8, 3000, True), (16, 6000, False)), 4096)
        >>> svg.count("<circle"), "budget 4 KiB" in svg
        (2, True)
    """
    frame = _BATCH_FRAME
    sizes = [b for b, _, _ in points] or [1]
    x_min, x_max = min(sizes), max(sizes)
    log = x_max >= 16 * x_min
    x = frame.x_scale(x_max, low=x_min, log=True) if log else frame.x_scale(x_max)
    ticks = byte_axis(max([budget, *(p for _, p, _ in points)]))
    y = frame.y_scale(ticks[-1][0] or 1)
    batches = _batch_ticks(sizes, log, x.share)
    parts = [
        y_grid(frame, y, ticks),
        axes(frame),
        x_labels(
            frame,
            x,
            [(b, str(b)) for b in batches],
            "global batch (log scale)" if log else "global batch",
        ),
        budget_across(frame, y(budget), budget),
    ]
    if points:
        parts.append(polyline([(x(b), y(p)) for b, p, _ in points], BLUE))
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
    return figure(
        frame,
        "peak bytes per device against global batch",
        "".join(parts),
        caption="Peak bytes per device against the global batch: green fits, red "
        "does not; the dashed line is the budget.",
    )

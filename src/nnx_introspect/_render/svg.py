"""The max-batch chart: peak bytes per device against the global batch, as SVG.

Round axes: byte ticks in 1-2-5 steps of one unit, every tried batch labelled
on the x axis (or round ticks when the labels would collide), and the budget
as a dashed line with its own label.
"""

import html
import math
from collections.abc import Callable

from nnx_introspect._render.table import format_bytes

__all__ = [
    "Point",
    "byte_ticks",
    "chart_svg",
    "nice_step",
]

Point = tuple[int, int, bool]
"""``(global batch, peak bytes per device, fits)``."""


_UNITS = (("B", 1), ("KiB", 2**10), ("MiB", 2**20), ("GiB", 2**30), ("TiB", 2**40))


def nice_step(span: float, intervals: int = 5) -> float:
    """The 1-2-5 step cutting ``span`` in about ``intervals`` pieces.

    1, 2, 5, 10, 20, 50...: ``nice_step(82.31) == 20``.
    """
    raw = max(span, 1e-12) / intervals
    magnitude = 10.0 ** math.floor(math.log10(raw))
    return next(
        round(m * magnitude, 12)
        for m in (1, 2, 5, 10)
        if m * magnitude >= raw * (1 - 1e-9)
    )


def byte_ticks(top: float) -> tuple[str, int, tuple[float, ...]]:
    """Round ticks of a bytes axis from 0 to at least ``top``.

    Returns:
        ``(unit, its bytes, ticks in that unit)``: ``top`` = 82.31 GiB gives
        ``("GiB", 2**30, (0, 20, 40, 60, 80, 100))``.
    """
    unit, size = next(((u, b) for u, b in reversed(_UNITS) if top >= b), _UNITS[0])
    span = max(top, 1) / size
    step = nice_step(span)
    count = math.ceil(span / step - 1e-9)
    return unit, size, tuple(round(i * step, 12) for i in range(count + 1))


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
    widths = [(len(str(b)) * 7 + 8) / _PLOT_WIDTH for b in tried]
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


_WIDTH, _HEIGHT = 720, 320
_LEFT, _RIGHT, _TOP, _BOTTOM = 90, 20, 20, 50
_PLOT_WIDTH = _WIDTH - _LEFT - _RIGHT


def chart_svg(points: tuple[Point, ...], budget: int) -> str:
    """Peak bytes per device against batch, the budget as a dashed line (SVG).

    The batch axis is logarithmic when the sizes tried span 16x or more (the
    search doubles), linear from 0 otherwise; it labels each batch tried, or
    round sizes when those labels would collide. The bytes axis is linear from
    0, with round ticks (1-2-5 steps in one unit); the budget line carries its
    own label.
    """
    esc = html.escape
    width, height = _WIDTH, _HEIGHT
    left, right, top, bottom = _LEFT, _RIGHT, _TOP, _BOTTOM
    sizes = [b for b, _, _ in points] or [1]
    x_min, x_max = min(sizes), max(sizes)
    log = x_max >= 16 * x_min
    unit, unit_bytes, y_ticks = byte_ticks(max([budget, *(p for _, p, _ in points)]))
    y_max = y_ticks[-1] * unit_bytes or 1

    def share(b: float) -> float:
        if log:
            return math.log2(b / x_min) / math.log2(x_max / x_min)
        return b / x_max

    def x(b: float) -> float:
        return left + _PLOT_WIDTH * share(b)

    def y(v: float) -> float:
        return height - bottom - (height - top - bottom) * v / y_max

    parts = [
        f'<figure class="bars"><svg xmlns="http://www.w3.org/2000/svg" '
        f'width="{width}" height="{height}" role="img" '
        f'aria-label="peak bytes per device against global batch">',
    ]
    for tick in y_ticks:
        at = y(tick * unit_bytes)
        parts.append(
            f'<line x1="{left}" y1="{at:.1f}" x2="{width - right}" y2="{at:.1f}" '
            f'stroke="#d0d7de"/><text x="{left - 6}" y="{at + 4:.1f}" '
            f'font-size="11" text-anchor="end">{tick:g} {unit}</text>'
        )
    parts += [
        f'<line x1="{left}" y1="{y(0):.1f}" x2="{width - right}" y2="{y(0):.1f}" '
        'stroke="#57606a"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{y(0):.1f}" stroke="#57606a"/>',
    ]
    for b in _batch_ticks(sizes, log, share):
        parts.append(
            f'<text x="{x(b):.1f}" y="{height - bottom + 16}" font-size="11" '
            f'text-anchor="middle">{b}</text>'
        )
    axis = "global batch (log scale)" if log else "global batch"
    parts.append(
        f'<text x="{(left + width - right) / 2}" y="{height - 10}" font-size="12" '
        f'text-anchor="middle">{axis}</text>'
    )
    parts.append(
        f'<line x1="{left}" y1="{y(budget):.1f}" x2="{width - right}" '
        f'y2="{y(budget):.1f}" stroke="#cf222e" stroke-width="2" '
        'stroke-dasharray="6 4"/>'
        f'<text x="{width - right}" y="{y(budget) - 6:.1f}" font-size="11" '
        f'text-anchor="end" fill="#cf222e">budget {esc(format_bytes(budget))}</text>'
    )
    if points:
        line = " ".join(f"{x(b):.1f},{y(p):.1f}" for b, p, _ in points)
        parts.append(
            f'<polyline points="{line}" fill="none" stroke="#0969da" '
            'stroke-width="1.5"/>'
        )
    for b, peak, fits in points:
        colour = "#1a7f37" if fits else "#cf222e"
        parts.append(
            f'<circle cx="{x(b):.1f}" cy="{y(peak):.1f}" r="4" fill="{colour}">'
            f"<title>batch {b}: {esc(format_bytes(peak))} "
            f"({'fits' if fits else 'does not fit'})</title></circle>"
        )
    parts.append(
        "</svg><figcaption>Peak bytes per device against the global batch: green "
        "fits, red does not; the dashed line is the budget.</figcaption></figure>"
    )
    return "".join(parts)

"""Scales and round ticks: where a value goes on an axis and which values it labels.

Linear axes from 0 carry ticks in 1-2-5 steps (:func:`round_ticks`,
:func:`byte_axis`); logarithmic ones, for values spanning orders of magnitude,
carry 1-2-5 or decade ticks (:func:`log_ticks`, :func:`log_byte_axis`).
:func:`wants_log` says which an axis needs. A budget far above every value
is drawn past a break in a linear axis (:func:`budget_axis`): the values keep
their own scale, so a small model's bars are not slivers.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

from nnx_introspect._text import format_bytes

__all__ = [
    "BREAK_RATIO",
    "LOG_SPAN",
    "Scale",
    "Tick",
    "budget_axis",
    "byte_axis",
    "byte_axis_between",
    "byte_ticks",
    "is_log_axis",
    "log_byte_axis",
    "log_ticks",
    "nice_step",
    "peak_axis",
    "round_ticks",
    "seconds",
    "share_words",
    "wants_log",
]

Tick = tuple[float, str]
"""A tick: its value in the axis's units and its label."""


_UNITS = (("B", 1), ("KiB", 2**10), ("MiB", 2**20), ("GiB", 2**30), ("TiB", 2**40))


def nice_step(span: float, intervals: int = 5) -> float:
    """The 1-2-5 step cutting ``span`` in about ``intervals`` pieces.

    1, 2, 5, 10, 20, 50...

    Example:
        >>> nice_step(82.31), nice_step(7), nice_step(0.3)
        (20.0, 2.0, 0.1)
    """
    raw = max(span, 1e-12) / intervals
    magnitude = 10.0 ** math.floor(math.log10(raw))
    return next(
        round(m * magnitude, 12)
        for m in (1, 2, 5, 10)
        if m * magnitude >= raw * (1 - 1e-9)
    )


def round_ticks(top: float) -> tuple[float, ...]:
    """Ticks in 1-2-5 steps from 0 to the first at or above ``top``.

    Example:
        >>> round_ticks(0.42)
        (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
    """
    step = nice_step(top)
    count = max(1, math.ceil(max(top, 0) / step - 1e-9))
    return tuple(round(i * step, 12) for i in range(count + 1))


def byte_ticks(top: float) -> tuple[str, int, tuple[float, ...]]:
    """Round ticks of a bytes axis from 0 to at least ``top``, in one unit.

    Returns:
        ``(unit, its bytes, ticks in that unit)``.

    Example:
        >>> byte_ticks(82.31 * 2**30)
        ('GiB', 1073741824, (0.0, 20.0, 40.0, 60.0, 80.0, 100.0))
    """
    unit, size = next(((u, b) for u, b in reversed(_UNITS) if top >= b), _UNITS[0])
    span = max(top, 1) / size
    step = nice_step(span)
    count = math.ceil(span / step - 1e-9)
    return unit, size, tuple(round(i * step, 12) for i in range(count + 1))


def byte_axis(top: float) -> tuple[Tick, ...]:
    """:func:`byte_ticks` as ``(bytes, label)`` pairs; the last one is the axis's end.

    Example:
        >>> byte_axis(3000)
        ((0.0, '0 KiB'), (1024.0, '1 KiB'), (2048.0, '2 KiB'), (3072.0, '3 KiB'))
    """
    unit, size, ticks = byte_ticks(top)
    return tuple((tick * size, f"{tick:g} {unit}") for tick in ticks)


@dataclass(frozen=True)
class Scale:
    """Data values to pixels: linear from ``low`` to ``high``, or logarithmic.

    Attributes:
        low: The value drawn at ``start``.
        high: The value drawn at ``end``.
        start: Its pixel.
        end: ``high``'s pixel (smaller than ``start`` on a y axis: SVG's y
            grows downwards).
        log: Whether the scale is logarithmic (``low`` must be positive): equal
            ratios get equal distances, whatever the base of the ticks
            (doublings for batches, decades for bytes and seconds).
        cut: Where a linear axis is broken (see :func:`budget_axis`), or
            ``None``: ``low`` to ``cut`` fill the first :data:`BREAK_AT` of
            the axis, ``cut`` to ``high`` its last stretch past the break.

    Example:
        >>> Scale(0, 100, 90, 700)(50), Scale(1, 16, 0, 400, log=True)(4)
        (395.0, 200.0)
        >>> broken = Scale(0, 1000, 0, 100, cut=10)
        >>> broken(5), broken(10), broken(1000)
        (40.0, 80.0, 100.0)
    """

    low: float
    high: float
    start: float
    end: float
    log: bool = False
    cut: float | None = None

    def share(self, value: float) -> float:
        """Where ``value`` lies from ``low`` (0) to ``high`` (1)."""
        if self.log:
            value = max(value, self.low)  # nothing below the axis's start
            return math.log2(value / self.low) / (math.log2(self.high / self.low) or 1)
        cut = self.cut
        if cut is not None and self.low < cut < self.high:
            if value <= cut:
                return BREAK_AT * (value - self.low) / (cut - self.low)
            past = (value - cut) / (self.high - cut)
            return BREAK_AT + BREAK_GAP + (1 - BREAK_AT - BREAK_GAP) * past
        return (value - self.low) / ((self.high - self.low) or 1)

    @property
    def break_at(self) -> float | None:
        """The pixel of the break's middle, or ``None`` on an unbroken axis."""
        if self.cut is None or self.log:
            return None
        return self.start + (self.end - self.start) * (BREAK_AT + BREAK_GAP / 2)

    def __call__(self, value: float) -> float:
        return self.start + (self.end - self.start) * self.share(value)


BREAK_AT = 0.8
"""The share of a broken axis (:class:`Scale`'s ``cut``) its values fill."""
BREAK_GAP = 0.1
"""The share of a broken axis its break takes, between the values and the end."""
BREAK_RATIO = 8.0
"""A budget more than this many times every value is drawn past a break
(:func:`budget_axis`): on an unbroken axis the values would fill less than an
eighth of it (under 80 pixels of a 640-pixel plot)."""


LOG_SPAN = 30.0
"""An axis is logarithmic when its largest value is more than this many times
its smallest: on a linear one, the small values would sit on the axis."""


def wants_log(values: Sequence[float]) -> bool:
    """Whether ``values`` (positive ones count) span more than :data:`LOG_SPAN`.

    Example:
        >>> wants_log([0.1, 2.0]), wants_log([0.1, 30.0, 0.0])
        (False, True)
    """
    positive = [v for v in values if v > 0]
    return bool(positive) and max(positive) > LOG_SPAN * min(positive)


def log_ticks(low: float, high: float) -> tuple[float, ...]:
    """Round ticks of a log axis covering ``low`` to ``high`` (both positive).

    Powers of ten from the one at or below ``low`` to the one at or above
    ``high``; 1-2-5 steps between them when that makes at most 12 ticks.

    Example:
        >>> log_ticks(0.12, 29.6)
        (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0)
        >>> log_ticks(3, 20000)
        (1.0, 10.0, 100.0, 1000.0, 10000.0, 100000.0)
    """
    first = math.floor(math.log10(low) + 1e-9)
    last = math.ceil(math.log10(high) - 1e-9)
    last = max(last, first + 1)
    decades = [10.0**e for e in range(first, last + 1)]
    if 3 * (last - first) + 1 > 12:
        return tuple(round(d, 12) for d in decades)
    steps = [d * m for d in decades[:-1] for m in (1, 2, 5)] + decades[-1:]
    # from the last step at or below ``low`` to the first at or above ``high``
    start = max(i for i, t in enumerate(steps) if t <= low * (1 + 1e-9))
    end = min(i for i, t in enumerate(steps) if t >= high * (1 - 1e-9))
    return tuple(float(f"{t:.12g}") for t in steps[start : end + 1])


def log_byte_axis(low: float, high: float) -> tuple[Tick, ...]:
    """Ticks of a log bytes axis: 1, 10 and 100 of each binary unit, as labels.

    With 2 and 5 too when the span is short; the first tick is at or below
    ``low``, the last at or above ``high`` (the axis's ends).

    Example:
        >>> [label for _, label in log_byte_axis(50 * 2**30, 10 * 2**40)]
        ['10 GiB', '100 GiB', '1 TiB', '10 TiB']
        >>> [label for _, label in log_byte_axis(3000, 20000)]
        ['2 KiB', '5 KiB', '10 KiB', '20 KiB']
    """
    low, high = max(low, 1), max(high, 2)
    # the unit of each value, then 1-2-5 of that unit
    unit_low = max(b for _, b in _UNITS if b <= low)
    unit_high = max(b for _, b in _UNITS if b <= high)
    if unit_low == unit_high:
        ticks = log_ticks(low / unit_low, high / unit_low)
        return tuple((t * unit_low, format_bytes(t * unit_low)) for t in ticks)
    values: list[float] = []
    for _, size in _UNITS:
        for m in (1, 10, 100):
            values.append(float(m * size))
    start = max(i for i, v in enumerate(values) if v <= low)
    end = min([i for i, v in enumerate(values) if v >= high] or [len(values) - 1])
    return tuple((v, format_bytes(v)) for v in values[start : end + 1])


def seconds(value: float) -> str:
    """A tick's seconds: ``"0.05 s"``, ``"2 s"``, ``"100 s"``.

    Example:
        >>> seconds(0.05), seconds(20.0), seconds(0.000125)
        ('0.05 s', '20 s', '0.000125 s')
    """
    return f"{value:g} s"


def byte_axis_between(low: float, high: float, intervals: int = 3) -> tuple[Tick, ...]:
    """Round ticks of a bytes axis from at or below ``low`` to at or above ``high``.

    For a zoom: ``intervals`` 1-2-5 steps in the unit of ``high``.

    Example:
        >>> [label for _, label in byte_axis_between(59.5 * 2**30, 62 * 2**30)]
        ['59 GiB', '60 GiB', '61 GiB', '62 GiB']
    """
    unit, size = next(((u, b) for u, b in reversed(_UNITS) if high >= b), _UNITS[0])
    step = nice_step((high - low) / size, intervals)
    first = math.floor(low / size / step + 1e-9)
    last = math.ceil(high / size / step - 1e-9)
    values = [round(i * step, 12) for i in range(first, max(last, first + 1) + 1)]
    return tuple((v * size, f"{v:g} {unit}") for v in values)


def peak_axis(values: Sequence[float], budget: float | None) -> tuple[Tick, ...]:
    """The bytes axis of peaks against a budget: its ticks, the last its end.

    Clipped at the round tick at or above twice the budget when some peak is
    more than three times the budget while another is within twice it (those
    near the budget stay readable; the caller marks the rest off the chart);
    else logarithmic (:func:`log_byte_axis`, see :func:`is_log_axis`) when the
    values and the budget span more than :data:`LOG_SPAN`; else linear from 0.

    Example:
        >>> GiB = 2**30
        >>> [t for _, t in peak_axis([50 * GiB, 60 * GiB, 2048 * GiB], 60 * GiB)]
        ['0 GiB', '50 GiB', '100 GiB', '150 GiB']
        >>> [t for _, t in peak_axis([50 * GiB, 2048 * GiB], None)]
        ['10 GiB', '100 GiB', '1 TiB', '10 TiB']
    """
    every = [v for v in (*values, budget or 0) if v > 0] or [1.0]
    if budget and max(every) > 3 * budget and min(every) <= 2 * budget:
        return byte_axis(2 * budget)
    if wants_log(every):
        return log_byte_axis(min(every), max(every))
    return byte_axis(max(every))


def is_log_axis(ticks: Sequence[Tick]) -> bool:
    """Whether ``ticks`` (of :func:`peak_axis`) are a log axis's: not from 0.

    Example:
        >>> is_log_axis(byte_axis(100)), is_log_axis(log_byte_axis(1, 2**30))
        (False, True)
    """
    return bool(ticks) and ticks[0][0] > 0


def budget_axis(
    top: float, budget: float | None
) -> tuple[tuple[Tick, ...], float | None]:
    """A linear bytes axis for values up to ``top`` against ``budget``, and its cut.

    Linear from 0 to the round tick at or above the larger of the two, and no
    cut, while the budget is at most :data:`BREAK_RATIO` times ``top``. Past
    that (a small model against a large device) the axis is broken: round
    ticks from 0 to at least ``top`` (the cut, where the break is), then the
    budget alone as the axis's end. The values keep a linear scale of their
    own, so a bar's parts stay in proportion and no bar is a sliver; the
    caller says how far the budget is (:func:`share_words`). A logarithmic
    axis would do neither: it shows no part of a stacked bar in proportion.

    Returns:
        The ticks (the last is the axis's end) and the cut (``None``: unbroken),
        for :class:`Scale`'s ``cut``.

    Example:
        >>> ticks, cut = budget_axis(40 * 2**20, 16 * 2**30)
        >>> [label for _, label in ticks], cut == 40 * 2**20
        (['0 MiB', '10 MiB', '20 MiB', '30 MiB', '40 MiB', '16 GiB'], True)
        >>> budget_axis(3000, 4096)
        (((0.0, '0 KiB'), (1024.0, '1 KiB'), (2048.0, '2 KiB'), (3072.0, '3 KiB'), \
(4096.0, '4 KiB')), None)
    """
    top = max(top, 1)
    if budget is None or budget <= BREAK_RATIO * top:
        return byte_axis(max(top, budget or 0)), None
    ticks = byte_axis(top)
    return (*ticks, (float(budget), format_bytes(budget))), ticks[-1][0]


def share_words(value: float, budget: float) -> str:
    """``value`` as a share of ``budget``, to two significant figures past 1%.

    Example:
        >>> share_words(64, 16384), share_words(1, 3), share_words(5, 4)
        ('0.39%', '33%', '125%')
    """
    share = 100 * value / budget if budget else 0.0
    return f"{share:.2g}%" if share < 10 else f"{share:.0f}%"

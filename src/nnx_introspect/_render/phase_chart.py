"""The phase chart: each phase of a step of several programs, its memory and time.

Serving runs two programs (prefill, decode), an RL step four to six (rollout,
reference, training...), one after another on the same devices. The chart
draws one row per phase: its peak per device as one bar, what stays resident
across phases (grey) then the phase's own program (green fits, red does not,
blue with no budget), against the budget's dashed line; below, the time of
each phase as a bar, its calibrated error bar as whiskers and a measured run
as a black diamond. It takes plain numbers (:class:`PhaseBar`), never a
report; a report offers them through ``phase_bars()`` (see
:meth:`~nnx_introspect._render.table.Report.to_html`).

A small model against a large device is the usual case: a 64 MiB step on a
16 GiB chip would be a bar of 2 pixels. The bytes axis is then broken before
the budget (:func:`~nnx_introspect._render.ticks.budget_axis`): the bars keep
a linear scale of their own, so their parts stay in proportion and their
lengths comparable, and each row writes its share of the budget, which the
break leaves out of the picture. A log axis would misdraw the stacked parts;
an inset would draw every bar twice.
"""

import html
from collections.abc import Sequence
from typing import NamedTuple

from nnx_introspect._render.svg import (
    AXIS,
    BLUE,
    GREEN,
    MIN_BAR,
    RED,
    Frame,
    Scale,
    axis_break,
    break_words,
    budget_axis,
    budget_up,
    figure,
    legend,
    line,
    log_ticks,
    polygon,
    rect,
    round_ticks,
    share_words,
    stacked_bar,
    text,
    wants_log,
    x_grid,
)
from nnx_introspect._text import format_bytes

__all__ = [
    "RESIDENT",
    "PhaseBar",
    "PhaseBars",
    "duration",
    "phase_chart_svg",
    "time_chart_svg",
]

RESIDENT = "#afb8c1"
"""The colour of what stays resident across phases."""

_WIDTH = 720
_THICK, _GAP = 18, 8
"""A row's bar height and the space between rows, in pixels."""


class PhaseBar(NamedTuple):
    """One phase of a step as the phase chart draws it: plain numbers per device.

    Attributes:
        name: The phase, as its row is labelled (``"prefill"``,
            ``"decode (one token)"``).
        program_bytes: The phase's own program: its peak per device, less
            the resident bytes counted in ``resident_bytes``.
        resident_bytes: What stays resident across phases while this one
            runs (weights, optimizer state, the KV cache, the other roles).
            The bar's length is the phase's peak: both together.
        seconds: The phase's estimated time, or ``None`` (no estimate).
        error: That estimate's calibrated error bar as a share (``0.14``:
            ±14%), or ``None`` (uncalibrated).
        refused: Whether the compiler refused the program for memory: red,
            whatever the bytes.
        measured: The phase's measured time in seconds, or ``None``.

    Example:
        >>> bar = PhaseBar("train", 54 * 2**20, 10 * 2**20, seconds=3e-3, error=0.14)
        >>> bar.peak_bytes == 64 * 2**20
        True
    """

    name: str
    program_bytes: int
    resident_bytes: int = 0
    seconds: float | None = None
    error: float | None = None
    refused: bool = False
    measured: float | None = None

    @property
    def peak_bytes(self) -> int:
        """The phase's peak per device: resident and program together."""
        return self.program_bytes + self.resident_bytes


class PhaseBars(NamedTuple):
    """What a report offers the phase chart: its phases, the budget, the device.

    A report with a ``phase_bars()`` method returning one of these gets the
    chart on its HTML page, after the verdict (``None``: no chart).

    Attributes:
        bars: One :class:`PhaseBar` per phase, in the order they run.
        budget: One device's budget in bytes, or ``None``.
        device: The device in words (``"TPU v5 lite"``, ``"v5e-4"``); ``""``
            leaves it out.
        resident: What the grey part is, in the legend's words (serving:
            ``"weights and KV cache"``; an RL step: ``"the other roles,
            resident"``).
    """

    bars: tuple[PhaseBar, ...]
    budget: int | None = None
    device: str = ""
    resident: str = "resident across phases"


def duration(seconds: float) -> str:
    """``0.0125`` -> ``"12.5 ms"``: three significant figures.

    Example:
        >>> duration(0.0125), duration(2.0), duration(3e-6), duration(0)
        ('12.5 ms', '2 s', '3 us', '0 s')
    """
    if seconds <= 0:
        return "0 s"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def _check(bars: Sequence[PhaseBar], budget: int | None) -> None:
    """One-line errors for what the chart cannot draw, naming the argument."""
    for i, bar in enumerate(bars):
        if not isinstance(bar, PhaseBar):
            raise TypeError(
                f"`bars[{i}]` must be a PhaseBar, got {type(bar).__name__}. Pass "
                "one PhaseBar(name, program_bytes, resident_bytes, ...) per phase."
            )
        for field in ("program_bytes", "resident_bytes"):
            value = getattr(bar, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(
                    f"`bars[{i}].{field}` must be a whole number of bytes, 0 or "
                    f"more, got {value!r}. Pass the bytes per device."
                )
        for field in ("seconds", "error", "measured"):
            value = getattr(bar, field)
            if value is not None and not value >= 0:
                raise ValueError(
                    f"`bars[{i}].{field}` must be None or 0 or more, got "
                    f"{value!r}. Leave it None where there is no figure."
                )
    if budget is not None and (isinstance(budget, bool) or budget <= 0):
        raise ValueError(
            f"`budget` must be a positive number of bytes or None, got {budget!r}. "
            "Pass one device's budget, or None for no budget."
        )


def _colour(bar: PhaseBar, budget: int | None) -> str:
    """The program's part: red refused or over the budget, blue with none."""
    if bar.refused or (budget is not None and bar.peak_bytes > budget):
        return RED
    return BLUE if budget is None else GREEN


def _memory_value(bar: PhaseBar, budget: int | None) -> str:
    """The text right of a memory row: the peak and its share of the budget."""
    if bar.refused:
        return f"{format_bytes(bar.peak_bytes)}, refused for memory"
    if budget is None:
        return format_bytes(bar.peak_bytes)
    return f"{format_bytes(bar.peak_bytes)} ({share_words(bar.peak_bytes, budget)})"


def _time_value(bar: PhaseBar) -> str:
    """The text right of a time row: the estimate, its error, the measured run."""
    if bar.seconds is None:
        shown = "no estimate"
    else:
        shown = duration(bar.seconds)
        if bar.error is not None:
            shown += f" ±{bar.error:.0%}"
    if bar.measured is not None:
        shown += f"; measured {duration(bar.measured)}"
    return shown


def _label(frame: Frame, y: float, name: str) -> str:
    """A row's label, right-aligned left of the plot."""
    return text(frame.left - 8, y + _THICK - 5, name, size=12, anchor="end", mono=True)


def _memory(
    frame: Frame, bars: Sequence[PhaseBar], budget: int | None
) -> tuple[str, float | None]:
    """The memory panel's rows, axis and budget; and the axis's cut."""
    ticks, cut = budget_axis(max(b.peak_bytes for b in bars), budget)
    x = frame.x_scale(ticks[-1][0] or 1, cut=cut)
    axis_y = frame.baseline + 4
    parts = [x_grid(x, ticks, top=frame.top - 4, bottom=axis_y)]
    for i, bar in enumerate(bars):
        y = frame.top + i * (_THICK + _GAP)
        segments = [
            (
                bar.resident_bytes,
                RESIDENT,
                f"{bar.name}: resident {format_bytes(bar.resident_bytes)}",
            ),
            (
                bar.program_bytes,
                _colour(bar, budget),
                f"{bar.name}: program {format_bytes(bar.program_bytes)}",
            ),
        ]
        wide = x(bar.peak_bytes) - frame.left
        parts += [
            _label(frame, y, bar.name),
            stacked_bar(frame.left, y, wide, _THICK, segments, minimum=MIN_BAR),
            text(
                frame.plot_right + 8,
                y + _THICK - 5,
                _memory_value(bar, budget),
                size=12,
                colour=RED if bar.refused else AXIS,
            ),
        ]
    parts.append(line(frame.left, frame.top - 4, frame.left, axis_y, AXIS))
    parts.append(line(frame.left, axis_y, frame.plot_right, axis_y, AXIS))
    if x.break_at is not None:
        parts.append(axis_break(x.break_at, axis_y))
    if budget is not None:
        top = frame.top - 12
        parts.append(budget_up(frame, x(budget), budget, top=top, bottom=axis_y))
    return "".join(parts), cut


def _time_scale(frame: Frame, bars: Sequence[PhaseBar]) -> tuple[Scale, list[float]]:
    """The time axis: its scale and round ticks (log when the times span decades)."""
    ends = [
        t
        for b in bars
        for t in (
            b.seconds,
            None if b.seconds is None else b.seconds * (1 + (b.error or 0)),
            b.measured,
        )
        if t is not None
    ]
    if wants_log(ends):
        positive = [t for t in ends if t > 0]
        # a decade's third below the shortest, so its bar has a length too
        ticks = list(log_ticks(min(positive) / 3, max(positive)))
        return frame.x_scale(ticks[-1], low=ticks[0], log=True), ticks
    ticks = list(round_ticks(max([*ends, 1e-9])))
    return frame.x_scale(ticks[-1] or 1), ticks


def _time(frame: Frame, bars: Sequence[PhaseBar]) -> tuple[str, bool]:
    """The time panel's rows (a bar per estimate, whiskers, measured diamonds).

    And whether its axis is logarithmic.
    """
    x, ticks = _time_scale(frame, bars)
    axis_y = frame.baseline + 4
    parts = [
        x_grid(x, [(t, duration(t)) for t in ticks], top=frame.top - 4, bottom=axis_y)
    ]
    for i, bar in enumerate(bars):
        y = frame.top + i * (_THICK + _GAP)
        middle = y + _THICK / 2
        parts.append(_label(frame, y, bar.name))
        if bar.seconds is not None:
            wide = max(x(bar.seconds) - frame.left, MIN_BAR if bar.seconds else 1)
            title = f"{bar.name}: {_time_value(bar)} (estimate)"
            parts.append(rect(frame.left, y + 3, wide, _THICK - 6, BLUE, title=title))
            if bar.error:
                low = x(max(bar.seconds * (1 - bar.error), x.low))
                high = x(bar.seconds * (1 + bar.error))
                parts.append(
                    line(low, middle, high, middle, "#24292f", width=1.5)
                    + line(low, y + 2, low, y + _THICK - 2, "#24292f", width=1.5)
                    + line(high, y + 2, high, y + _THICK - 2, "#24292f", width=1.5)
                )
        if bar.measured is not None:
            at = x(max(bar.measured, x.low))
            diamond = [(at, y), (at + 6, middle), (at, y + _THICK), (at - 6, middle)]
            parts.append(polygon(diamond, "#24292f"))
        parts.append(
            text(
                frame.plot_right + 8,
                y + _THICK - 5,
                _time_value(bar),
                size=12,
                colour=AXIS,
            )
        )
    parts.append(line(frame.left, frame.top - 4, frame.left, axis_y, AXIS))
    parts.append(line(frame.left, axis_y, frame.plot_right, axis_y, AXIS))
    return "".join(parts), x.log


def _legend(left: float, y: float, resident: str, budget: int | None) -> str:
    """The two swatches under the memory rows, side by side (or one per line)."""
    program = "the phase's own program" + (
        "" if budget is None else " (red: does not fit)"
    )
    second = left + 18 + 12 * 0.62 * len(resident) + 24
    beside = second + 18 + 12 * 0.62 * len(program) <= _WIDTH - 4
    return legend(left, y, [(RESIDENT, resident)]) + legend(
        second if beside else left,
        y if beside else y + 18,
        [(BLUE if budget is None else GREEN, program)],
    )


def _time_words(
    bars: Sequence[PhaseBar], lead: str = " Below, each phase's estimated time"
) -> str:
    """The caption's sentence on the time panel: what its marks are."""
    marks = [
        *(
            ["the whiskers are its calibrated error"]
            if any(b.error for b in bars)
            else []
        ),
        *(
            ["a black diamond is a measured run"]
            if any(b.measured is not None for b in bars)
            else []
        ),
    ]
    return (
        lead
        + " (an estimate, not a measurement)"
        + (": " + ", ".join(marks) if marks else "")
        + "."
    )


def phase_chart_svg(
    bars: Sequence[PhaseBar],
    budget: int | None = None,
    device: str = "",
    *,
    resident: str = "resident across phases",
) -> str:
    """Each phase's peak per device against the budget, then each phase's time (SVG).

    One row per phase, in order. Memory: the phase's peak as one bar, what
    stays resident across phases (grey) then the program's own part (green
    fits, red does not or was refused, blue with no budget), each part of
    more than 0 bytes at least :data:`~nnx_introspect._render.svg.MIN_BAR`
    pixels wide; the budget a dashed line labelled inside the figure; each
    row's peak and share of the budget right of the plot. Past a budget more
    than :data:`~nnx_introspect._render.ticks.BREAK_RATIO` times every peak
    the bytes axis is broken (the caption says so). Time, when any phase has
    one: the estimate as a bar (a log axis when the times span decades), its
    calibrated error as whiskers, a measured run as a black diamond.

    Args:
        bars: One :class:`PhaseBar` per phase.
        budget: One device's budget in bytes, or ``None``.
        device: The device in words, named in the headings (``""``: none).
        resident: What the grey part of each bar is, for the legend.

    Returns:
        An SVG figure with its caption; empty without bars.

    Raises:
        TypeError: A bar that is not a :class:`PhaseBar`.
        ValueError: Negative or fractional bytes, a negative time, a budget
            that is not positive.

    Example:
        >>> chart = phase_chart_svg(
        ...     [PhaseBar("prefill", 30, 70, seconds=0.002, error=0.1),
        ...      PhaseBar("decode", 50, 70, seconds=0.03)],
        ...     budget=100, device="v5e-4")
        >>> chart.count(": program "), "120 B (120%)" in chart, "budget 100 B" in chart
        (2, True, True)
    """
    bars = tuple(bars)
    _check(bars, budget)
    if not bars:
        return ""
    left = max(90.0, 7.5 * max(len(b.name) for b in bars) + 16)
    values = [_memory_value(b, budget) for b in bars] + [_time_value(b) for b in bars]
    right = 28 + 0.62 * 12 * max(len(v) for v in values)
    rows = len(bars) * (_THICK + _GAP) - _GAP
    timed = any(b.seconds is not None or b.measured is not None for b in bars)
    top = 50.0
    baseline = top + rows
    legend_y = baseline + 44
    time_top = legend_y + 62
    height = round((time_top + rows + 36) if timed else (legend_y + 14))
    where = f" ({device})" if device else ""
    log = False
    memory = Frame(_WIDTH, height, left, right, top, height - baseline)
    body, cut = _memory(memory, bars, budget)
    parts = [
        text(16, 16, f"Memory per device{where}", size=12, bold=True),
        body,
        _legend(left, legend_y, resident, budget),
    ]
    if timed:
        clock = Frame(_WIDTH, height, left, right, time_top, height - time_top - rows)
        heading = f"Estimated time per phase{where}"
        times, log = _time(clock, bars)
        parts += [text(16, time_top - 30, heading, size=12, bold=True), times]
    caption = (
        f"Each phase's peak per device: {resident} (grey), then the phase's own "
        "program ("
        + ("blue" if budget is None else "green fits, red does not")
        + ")"
        + ("" if budget is None else ", against the budget (dashed)")
        + "."
        + ("" if cut is None or budget is None else break_words(cut, budget))
        + (_time_words(bars) if timed else "")
        + (" The time axis is logarithmic: the times span decades." if log else "")
    )
    return figure(
        memory,
        "each phase's peak per device against the budget, and its time",
        "".join(parts),
        caption=html.escape(caption, quote=False),
    )


def time_chart_svg(bars: Sequence[PhaseBar], device: str = "", what: str = "") -> str:
    """The time panel of :func:`phase_chart_svg` alone, for a page with its own memory.

    One row per bar: the estimate as a bar, its calibrated error as
    whiskers, a measured run as a black diamond, the figures right of the
    plot (the step page's time, beside its own memory chart). The bars'
    bytes are not drawn.

    Args:
        bars: One :class:`PhaseBar` per row.
        device: The device in words, named in the heading (``""``: none).
        what: What the rows are, in the heading and the caption
            (``"one step"``; ``""``: each phase).

    Returns:
        An SVG figure with its caption; empty when no bar has a time.

    Raises:
        TypeError: A bar that is not a :class:`PhaseBar`.
        ValueError: Negative or fractional bytes, a negative time.

    Example:
        >>> chart = time_chart_svg([PhaseBar("step", 0, seconds=0.0125, error=0.1)],
        ...                        "v5e-4", what="one step")
        >>> "12.5 ms ±10%" in chart, "Estimated time of one step (v5e-4)" in chart
        (True, True)
        >>> time_chart_svg([PhaseBar("step", 0)])
        ''
    """
    bars = tuple(bars)
    _check(bars, None)
    if not any(b.seconds is not None or b.measured is not None for b in bars):
        return ""
    left = max(90.0, 7.5 * max(len(b.name) for b in bars) + 16)
    right = 28 + 0.62 * 12 * max(len(_time_value(b)) for b in bars)
    rows = len(bars) * (_THICK + _GAP) - _GAP
    top = 50.0
    height = round(top + rows + 36)
    where = f" ({device})" if device else ""
    frame = Frame(_WIDTH, height, left, right, top, height - top - rows)
    times, log = _time(frame, bars)
    heading = f"Estimated time of {what or 'each phase'}{where}"
    lead = f"The estimated time of {what}" if what else "Each phase's estimated time"
    caption = _time_words(bars, lead).strip() + (
        " The time axis is logarithmic: the times span decades." if log else ""
    )
    return figure(
        frame,
        f"the estimated time of {what or 'each phase'}",
        text(16, 16, heading, size=12, bold=True) + times,
        caption=html.escape(caption, quote=False),
    )

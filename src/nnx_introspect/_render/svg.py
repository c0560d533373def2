"""The one SVG module: scales, round ticks, axes and the marks every chart draws with.

Every chart of the library takes plain numbers and builds its figure from the
pieces here: a :class:`Frame` (the canvas and its plot area), a :class:`Scale`
(linear from 0, broken before a far budget, or logarithmic), round ticks
(:func:`nice_step`, :func:`round_ticks`, :func:`byte_ticks`,
:func:`budget_axis`), grid lines with their labels, the budget as a dashed red
line whose label stays inside the figure (:func:`budget_across`,
:func:`budget_up`, :func:`budget_in_band` for a zoom), and the marks of
:mod:`~nnx_introspect._render.marks` (:func:`line`, :func:`polyline`,
:func:`rect`, :func:`dot`, :func:`text`, and :func:`text_box`: where a label
lies); :func:`bar_rows` lays out horizontal bars, one row per label. The
charts themselves live beside their reports (the max-batch chart in
:mod:`~nnx_introspect._render.batch_chart`, the first, whose style the others
follow).
"""

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from nnx_introspect._render.formats import whole_percent
from nnx_introspect._render.marks import (
    AXIS,
    BLUE,
    GREEN,
    GREY,
    GRID,
    RED,
    Box,
    arrow,
    category_colour,
    dot,
    legend,
    line,
    numbered_dot,
    overlap,
    place,
    polygon,
    polyline,
    rect,
    ring,
    stacked_bar,
    text,
    text_box,
)
from nnx_introspect._render.ticks import (
    Scale,
    Tick,
    budget_axis,
    byte_axis,
    byte_axis_between,
    byte_ticks,
    is_log_axis,
    log_byte_axis,
    log_ticks,
    nice_step,
    peak_axis,
    round_ticks,
    seconds,
    share_words,
    wants_log,
)
from nnx_introspect._text import format_bytes

__all__ = [
    "AXIS",
    "BLUE",
    "GREEN",
    "GREY",
    "GRID",
    "MIN_BAR",
    "RED",
    "Bar",
    "BarRow",
    "Box",
    "Frame",
    "Point",
    "Scale",
    "Tick",
    "arrow",
    "axes",
    "axis_break",
    "bar_rows",
    "break_words",
    "budget_across",
    "budget_axis",
    "budget_in_band",
    "budget_up",
    "byte_axis",
    "byte_axis_between",
    "byte_ticks",
    "category_colour",
    "dot",
    "figure",
    "is_log_axis",
    "legend",
    "line",
    "log_byte_axis",
    "log_ticks",
    "nice_step",
    "numbered_dot",
    "overlap",
    "peak_axis",
    "place",
    "polygon",
    "polyline",
    "rect",
    "ring",
    "round_ticks",
    "seconds",
    "share_words",
    "split_bar",
    "stacked_bar",
    "text",
    "text_box",
    "wants_log",
    "x_grid",
    "x_labels",
    "y_grid",
]

Point = tuple[int, int, bool]
"""``(global batch, peak bytes per device, fits)``."""


@dataclass(frozen=True)
class Frame:
    """A chart's canvas: its size in pixels and the margins around the plot.

    Example:
        >>> frame = Frame(720, 320, left=90, right=20, top=20, bottom=50)
        >>> frame.plot_right, frame.baseline, frame.y_scale(10)(5)
        (700, 270, 145.0)
    """

    width: int
    height: int
    left: float
    right: float
    top: float
    bottom: float

    @property
    def plot_right(self) -> float:
        """The plot's right edge."""
        return self.width - self.right

    @property
    def baseline(self) -> float:
        """The plot's bottom edge: the y axis's 0."""
        return self.height - self.bottom

    @property
    def middle(self) -> float:
        """The plot's horizontal middle, where the x axis's title goes."""
        return (self.left + self.plot_right) / 2

    @property
    def inside(self) -> Box:
        """The whole canvas as a box: every label must stay within it."""
        return (0, 0, self.width, self.height)

    def x_scale(
        self,
        high: float,
        *,
        low: float = 0,
        log: bool = False,
        cut: float | None = None,
    ) -> Scale:
        """``low`` to ``high`` across the plot, left to right (broken at ``cut``)."""
        return Scale(low, high, self.left, self.plot_right, log, cut)

    def y_scale(
        self, high: float, *, low: float = 0, cut: float | None = None
    ) -> Scale:
        """``low`` to ``high`` up the plot, bottom to top (broken at ``cut``)."""
        return Scale(low, high, self.baseline, self.top, cut=cut)


def figure(
    frame: Frame,
    label: str,
    body: str,
    *,
    caption: str = "",
    before: str = "",
    after: str = "",
    xmlns: bool = True,
) -> str:
    """The chart as ``<figure>``: ``before``, the SVG, its caption, ``after``.

    ``label`` is the SVG's accessible name; ``caption``, ``before`` and
    ``after`` are HTML, escaped by the caller. ``xmlns=False`` leaves out the
    SVG namespace (an HTML page's parser gives inline SVG its namespace; a
    page may promise no address at all).

    Example:
        >>> figure(Frame(10, 10, 0, 0, 0, 0), "empty", "", caption="None.")
        '<figure class="bars"><svg xmlns="http://www.w3.org/2000/svg" width="10" \
height="10" role="img" aria-label="empty"></svg><figcaption>None.</figcaption></figure>'
    """
    return (
        f'<figure class="bars">{before}<svg '
        + ('xmlns="http://www.w3.org/2000/svg" ' if xmlns else "")
        + f'width="{frame.width}" height="{frame.height}" role="img" '
        f'aria-label="{html.escape(label)}">{body}</svg>'
        + (f"<figcaption>{caption}</figcaption>" if caption else "")
        + f"{after}</figure>"
    )


# --- axes -----------------------------------------------------------------------


def y_grid(frame: Frame, y: Scale, ticks: Sequence[Tick]) -> str:
    """Horizontal grid lines across the plot, each labelled left of it."""
    return "".join(
        line(frame.left, y(value), frame.plot_right, y(value), GRID)
        + text(frame.left - 6, y(value) + 4, label, anchor="end")
        for value, label in ticks
    )


def x_grid(x: Scale, ticks: Sequence[Tick], *, top: float, bottom: float) -> str:
    """Vertical grid lines from ``top`` to ``bottom``, each labelled below it."""
    return "".join(
        line(x(value), top, x(value), bottom, GRID)
        + text(x(value), bottom + 14, label, anchor="middle")
        for value, label in ticks
    )


def x_labels(frame: Frame, x: Scale, ticks: Sequence[Tick], title: str) -> str:
    """Tick labels under the plot, then the axis's ``title`` centred below them.

    No title when ``title`` is empty.
    """
    labels = "".join(
        text(x(value), frame.baseline + 16, label, anchor="middle")
        for value, label in ticks
    )
    if not title:
        return labels
    return labels + text(
        frame.middle, frame.height - 10, title, size=12, anchor="middle"
    )


def axes(frame: Frame) -> str:
    """The two axis lines: along the plot's bottom and up its left edge."""
    return line(
        frame.left, frame.baseline, frame.plot_right, frame.baseline, AXIS
    ) + line(frame.left, frame.top, frame.left, frame.baseline, AXIS)


def budget_label(budget: int) -> str:
    """The words a budget line is labelled with.

    Example:
        >>> budget_label(16 * 2**30)
        'budget 16 GiB'
    """
    return f"budget {format_bytes(budget)}"


def budget_across(
    frame: Frame, at: float, budget: int, *, taken: Sequence[Box] = ()
) -> str:
    """The budget as a dashed red line across the plot at height ``at``, labelled.

    The label goes above the line at the plot's right end, else below it, else
    at its left end, else in the middle (the first spot clear of ``taken``
    and inside the figure),
    so it is never cut at an edge. The line is drawn dashed and 2 pixels wide,
    over what the chart drew before it.

    Example:
        >>> frame = Frame(300, 100, left=40, right=10, top=10, bottom=20)
        >>> 'text-anchor="end"' in budget_across(frame, 50, 2**30)
        True
    """
    label = budget_label(budget)
    right, left = frame.plot_right, frame.left + 6
    spots = [
        (right, at - 6, "end"),
        (right, at + 15, "end"),
        (left, at - 6, "start"),
        (left, at + 15, "start"),
        (frame.middle, at - 6, "middle"),
        (frame.middle, at + 15, "middle"),
    ]
    x, y, anchor, _ = place(label, 11, spots, taken, frame.inside)
    return line(frame.left, at, right, at, RED, width=2, dash="6 4") + text(
        x, y, label, anchor=anchor, colour=RED
    )


def budget_up(
    frame: Frame, at: float, budget: int, *, top: float, bottom: float
) -> str:
    """The budget as a dashed red line up the plot at ``at``, labelled above it.

    The label is centred on the line, slid left or right as far as it takes
    to stay inside the figure (a budget at the axis's end would cut it).

    Example:
        >>> frame = Frame(300, 100, left=20, right=10, top=20, bottom=20)
        >>> budget_up(frame, 290, 2**30, top=10, bottom=80).split("<text ")[1][:9]
        'x="257.1"'
    """
    label = budget_label(budget)
    half = (text_box(0, 0, label, 11)[2]) / 2
    x = min(max(at, half + 2), frame.width - half - 2)
    return line(at, top, at, bottom, RED, width=2, dash="6 4", cls="budget") + text(
        x, top - 4, label, anchor="middle", colour=RED
    )


def budget_in_band(
    frame: Frame, y: Scale, budget: int | None, *, taken: Sequence[Box] = ()
) -> str:
    """The budget in a zoom band: its line and label, or where it is when outside.

    Within the band's bytes (``y``'s ``low`` to ``high``): the dashed line
    and its label (:func:`budget_across`). Above the band: an arrowhead at
    the band's top right and ``budget ... (above this band)``; below it,
    likewise at the bottom. Nothing without a budget.

    Example:
        >>> frame = Frame(300, 100, left=40, right=10, top=10, bottom=20)
        >>> "above this band" in budget_in_band(frame, frame.y_scale(100), 500)
        True
    """
    if budget is None:
        return ""
    if y.low <= budget <= y.high:
        return budget_across(frame, y(budget), budget, taken=taken)
    above = budget > y.high
    words = f"{budget_label(budget)} ({'above' if above else 'below'} this band)"
    tip = frame.top if above else frame.baseline
    mark = arrow(
        frame.plot_right - 4, tip + (8 if above else -8), RED, up=above, down=not above
    )
    return mark + (
        text(
            frame.plot_right - 12,
            tip + 12 if above else tip - 6,
            words,
            anchor="end",
            colour=RED,
        )
    )


def break_words(
    cut: float,
    budget: float,
    what: str = "bars",
    *,
    peak: float | None = None,
    name: str = "the peak",
) -> str:
    """A caption's sentence on a broken bytes axis (see :func:`budget_axis`).

    It names how far past the drawn scale the budget is, then where each
    share of the budget is written (beside each bar), or, given one ``peak``,
    that peak's share (``name`` says which peak it is).

    Example:
        >>> words = break_words(40 * 2**20, 16 * 2**30)
        >>> words.split(";")[0]
        ' The bytes axis is broken: the bars are drawn to scale up to 40 MiB, the \
budget (16 GiB, 410x that) stands past the break'
        >>> break_words(40 * 2**20, 16 * 2**30, "parts", peak=32 * 2**20).split("; ")[1]
        'the peak is 0.2% of the budget.'
    """
    ratio = budget / cut
    times = f"{ratio:,.0f}" if ratio >= 10 else f"{ratio:.1f}"
    share = (
        "each one's share of the budget is written beside it"
        if peak is None
        else f"{name} is {share_words(peak, budget)} of the budget"
    )
    return (
        f" The bytes axis is broken: the {what} are drawn to scale up to "
        f"{format_bytes(cut)}, the budget ({format_bytes(budget)}, {times}x "
        f"that) stands past the break; {share}."
    )


def axis_break(x: float, y: float, *, vertical: bool = False) -> str:
    """Two slanted strokes across an axis at ``(x, y)``: the axis is broken here.

    Across a horizontal axis by default; ``vertical`` for a y axis. A white
    gap between the strokes hides the axis line there.

    Example:
        >>> axis_break(100, 50).count("<line")
        3
    """
    if vertical:
        gap = line(x, y - 3, x, y + 3, "#ffffff", width=4)
        return gap + "".join(
            line(x - 6, y + d + 3, x + 6, y + d - 3, AXIS, width=1.5) for d in (-3, 3)
        )
    gap = line(x - 3, y, x + 3, y, "#ffffff", width=4)
    return gap + "".join(
        line(x + d - 3, y + 6, x + d + 3, y - 6, AXIS, width=1.5) for d in (-3, 3)
    )


# --- horizontal bars, one row per label ---------------------------------------


class Bar(NamedTuple):
    """One bar of a :class:`BarRow`: its value, colour and tooltip.

    ``cls`` names the bar's group (``"bar actual"``) for a page's tests and
    styles; ``share`` is its part of the row's height (the bars of a row stack
    top to bottom).
    """

    value: float
    colour: str
    title: str
    cls: str = ""
    share: float = 1.0


class BarRow(NamedTuple):
    """A row of :func:`bar_rows`: its label, its bars, a note or a value text.

    ``note`` is written in the plot where a row without bars would have them;
    ``value`` right of the plot.
    """

    label: str
    bars: tuple[Bar, ...] = ()
    note: str = ""
    value: str = ""


def split_bar(
    parts: Sequence[tuple[str, int, str]],
    budget: int | None = None,
    *,
    width: int = 720,
) -> tuple[Frame, str, float | None]:
    """One bar of ``(name, bytes, colour)`` parts on a bytes axis, a legend below.

    The parts run left to right in their order, each of more than 0 bytes at
    least :data:`MIN_BAR` pixels wide; round byte ticks as vertical grid
    lines; the budget, if any, a dashed line whose label stays inside the
    figure; below, one legend line per part: its name, bytes and share of the
    bar. The axis is broken before a budget far above the bar (see
    :func:`budget_axis`; the caller's caption says so with
    :func:`break_words`).

    Returns:
        The frame (for :func:`figure`), the SVG body and the axis's cut
        (``None``: unbroken).

    Example:
        >>> frame, body, cut = split_bar([("a", 96, BLUE), ("b", 32, RED)], 256)
        >>> "a: 96 B (75%)" in body, "budget 256 B" in body, cut
        (True, True, None)
    """
    left, bar_y, bar_h = 20, 24, 26
    legend_top = bar_y + bar_h + 44
    frame = Frame(width, legend_top + 18 * len(parts) + 6, left, 30, bar_y, 0)
    total = sum(nbytes for _, nbytes, _ in parts)
    ticks, cut = budget_axis(total, budget)
    x = frame.x_scale(ticks[-1][0] or 1, cut=cut)
    axis_y = bar_y + bar_h + 4
    segments = [(n, colour, f"{name}: {format_bytes(n)}") for name, n, colour in parts]
    labels = [
        (colour, f"{name}: {format_bytes(n)} ({whole_percent(n, total or 1)}%)")
        for name, n, colour in parts
    ]
    body = x_grid(x, ticks, top=bar_y - 4, bottom=axis_y) + stacked_bar(
        left, bar_y, x(total) - left, bar_h, segments, minimum=MIN_BAR
    )
    if x.break_at is not None:
        body += line(left, axis_y, frame.plot_right, axis_y, AXIS)
        body += axis_break(x.break_at, axis_y)
    if budget is not None:
        body += budget_up(frame, x(budget), budget, top=bar_y - 10, bottom=axis_y)
    return frame, body + legend(left, legend_top, labels), cut


MIN_BAR = 3.0
"""The fewest pixels a bar (or a part of one) of more than 0 bytes is drawn
wide: on any scale, a small value stays visible."""


def bar_rows(
    rows: Sequence[BarRow],
    *,
    budget: int | None = None,
    width: int = 720,
    value_width: int = 0,
    axis: Sequence[Tick] | None = None,
    cut: float | None = None,
) -> tuple[Frame, str]:
    """Horizontal bars on a bytes axis, one row per label.

    Labels right-aligned left of the plot (monospace), round byte ticks below
    it as vertical grid lines, and ``budget`` as a dashed vertical line;
    ``value_width`` pixels right of the plot hold each row's value text.
    ``axis`` gives the ticks (the first and last are the axis's ends; a first
    tick above 0 makes the axis logarithmic, see :func:`peak_axis`) and
    ``cut`` where that axis is broken (see :func:`budget_axis`); by default
    round ticks from 0 to the largest value, broken before the budget when
    the budget is far above every bar. A bar beyond the axis's end stops
    there with an arrowhead: it runs off the chart. A bar of more than 0
    bytes is at least :data:`MIN_BAR` pixels wide.

    Returns:
        The frame (for :func:`figure`) and the SVG body.

    Example:
        >>> frame, body = bar_rows([BarRow("a", (Bar(2048, GREEN, "a"),))])
        >>> frame.height, body.count("<rect"), "2 KiB" in body
        (96, 1, True)
    """
    thick, gap = 18, 8
    longest = max((len(row.label) for row in rows), default=0)
    frame = Frame(
        width,
        30 + len(rows) * (thick + gap) + 40,
        left=max(90, 7 * longest + 16),
        right=36 + value_width,
        top=30,
        bottom=40,
    )
    values = [bar.value for row in rows for bar in row.bars]
    if axis is None:
        axis, cut = budget_axis(max([*values, 1]), budget)
    ticks = axis
    log = is_log_axis(ticks)
    end = ticks[-1][0] or 1
    x = frame.x_scale(end, low=ticks[0][0], log=log, cut=None if log else cut)
    axis_y = frame.baseline + 4
    parts = [x_grid(x, ticks, top=frame.top - 4, bottom=axis_y)]
    for i, row in enumerate(rows):
        parts.append(_bar_row(frame, x, end, frame.top + i * (thick + gap), row))
    parts.append(line(frame.left, frame.top - 4, frame.left, axis_y, AXIS))
    if x.break_at is not None:
        parts.append(line(frame.left, axis_y, frame.plot_right, axis_y, AXIS))
        parts.append(axis_break(x.break_at, axis_y))
    if budget is not None:
        parts.append(
            budget_up(frame, x(budget), budget, top=frame.top - 12, bottom=axis_y)
        )
    return frame, "".join(parts)


def _bar_row(frame: Frame, x: Scale, end: float, y: float, row: BarRow) -> str:
    """One row of :func:`bar_rows` at height ``y``: label, note, bars, value."""
    thick = 18
    parts = [
        text(frame.left - 8, y + thick - 5, row.label, size=12, anchor="end", mono=True)
    ]
    if row.note:
        parts.append(
            text(
                frame.left + 6,
                y + thick - 5,
                row.note,
                size=12,
                colour=AXIS,
                italic=True,
            )
        )
    at = float(y)
    for bar in row.bars:
        height = thick * bar.share
        wide = x(min(bar.value, end)) - frame.left
        mark = rect(
            frame.left,
            at,
            max(wide, MIN_BAR if bar.value > 0 else 1),
            height,
            bar.colour,
            title=bar.title,
        )
        if bar.value > end:  # off the chart: an arrowhead past the axis's end
            mark += arrow(frame.plot_right, at + height / 2, bar.colour)
        parts.append(f'<g class="{bar.cls}">{mark}</g>' if bar.cls else mark)
        at += height
    if row.value:
        parts.append(
            text(frame.plot_right + 8, y + thick - 5, row.value, size=12, colour=AXIS)
        )
    return "".join(parts)

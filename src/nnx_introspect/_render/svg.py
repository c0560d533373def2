"""The one SVG module: scales, round ticks, axes and the marks every chart draws with.

Every chart of the library takes plain numbers and builds its figure from the
pieces here: a :class:`Frame` (the canvas and its plot area), a :class:`Scale`
(linear from 0, or logarithmic), round ticks (:func:`nice_step`, :func:`round_ticks`,
:func:`byte_ticks`), grid lines with their labels, the budget as a dashed red
line, and the marks (:func:`line`, :func:`polyline`, :func:`rect`,
:func:`dot`, :func:`text`); :func:`bar_rows` lays out horizontal bars, one row
per label. The charts themselves live beside their reports (the max-batch
chart in :mod:`~nnx_introspect._render.batch_chart`, the first, whose style
the others follow).
"""

import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from nnx_introspect._render.table import format_bytes
from nnx_introspect._render.ticks import (
    Scale,
    Tick,
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
    wants_log,
)

__all__ = [
    "AXIS",
    "BLUE",
    "GREEN",
    "GREY",
    "GRID",
    "RED",
    "Bar",
    "BarRow",
    "Frame",
    "Point",
    "Scale",
    "Tick",
    "arrow",
    "axes",
    "bar_rows",
    "budget_across",
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
    "peak_axis",
    "polygon",
    "polyline",
    "rect",
    "round_ticks",
    "seconds",
    "stacked_bar",
    "text",
    "wants_log",
    "x_grid",
    "x_labels",
    "y_grid",
]

GRID = "#d0d7de"
"""Grid lines."""
AXIS = "#57606a"
"""Axis lines and secondary text."""
BLUE = "#0969da"
"""A value with nothing to judge it by."""
GREEN = "#1a7f37"
"""Fits the budget."""
RED = "#cf222e"
"""Does not fit; the budget line."""
GREY = "#8c959f"
"""A reference value (an ideal share)."""

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

    def x_scale(self, high: float, *, low: float = 0, log: bool = False) -> Scale:
        """``low`` to ``high`` across the plot, left to right."""
        return Scale(low, high, self.left, self.plot_right, log)

    def y_scale(self, high: float, *, low: float = 0) -> Scale:
        """``low`` to ``high`` up the plot, bottom to top."""
        return Scale(low, high, self.baseline, self.top)


# --- marks --------------------------------------------------------------------


def _n(value: float) -> str:
    """A coordinate to one decimal, without a trailing ``.0``."""
    out = f"{value:.1f}"
    return out[:-2] if out.endswith(".0") else out


def _title(title: str | None) -> str:
    return "" if title is None else f"<title>{html.escape(title, quote=False)}</title>"


def line(
    x1: float,
    y1: float,
    x2: float,
    y2: float,
    colour: str,
    *,
    width: float | None = None,
    dash: str | None = None,
    cls: str | None = None,
) -> str:
    """A straight line; ``dash`` is an SVG dash array (``"6 4"``).

    Example:
        >>> line(0, 1.25, 10, 1.25, RED, dash="6 4")
        '<line x1="0" y1="1.2" x2="10" y2="1.2" stroke="#cf222e" \
stroke-dasharray="6 4"/>'
    """
    return (
        f'<line x1="{_n(x1)}" y1="{_n(y1)}" x2="{_n(x2)}" y2="{_n(y2)}" '
        f'stroke="{colour}"'
        + (f' stroke-width="{width:g}"' if width is not None else "")
        + (f' stroke-dasharray="{dash}"' if dash else "")
        + (f' class="{cls}"' if cls else "")
        + "/>"
    )


def polyline(
    points: Iterable[tuple[float, float]],
    colour: str,
    *,
    width: float = 1.5,
    dash: str | None = None,
) -> str:
    """A line through ``(x, y)`` pixel points, unfilled; ``dash`` as for :func:`line`.

    Example:
        >>> polyline([(0, 0), (5, 2.5)], BLUE)
        '<polyline points="0,0 5,2.5" fill="none" stroke="#0969da" stroke-width="1.5"/>'
    """
    joined = " ".join(f"{_n(x)},{_n(y)}" for x, y in points)
    return (
        f'<polyline points="{joined}" fill="none" stroke="{colour}" '
        f'stroke-width="{width:g}"'
        + (f' stroke-dasharray="{dash}"' if dash else "")
        + "/>"
    )


def polygon(
    points: Iterable[tuple[float, float]], colour: str, *, opacity: float = 1
) -> str:
    """A filled area bounded by ``(x, y)`` pixel points (a region, shaded).

    Example:
        >>> polygon([(0, 0), (5, 0), (5, 5)], GREEN, opacity=0.25)
        '<polygon points="0,0 5,0 5,5" fill="#1a7f37" fill-opacity="0.25"/>'
    """
    joined = " ".join(f"{_n(x)},{_n(y)}" for x, y in points)
    shade = f' fill-opacity="{opacity:g}"' if opacity != 1 else ""
    return f'<polygon points="{joined}" fill="{colour}"{shade}/>'


def rect(
    x: float,
    y: float,
    width: float,
    height: float,
    colour: str,
    *,
    title: str | None = None,
) -> str:
    """A filled rectangle (a bar), with an optional tooltip.

    Example:
        >>> rect(10, 0, 42.25, 18, GREEN, title="a: 1 KiB")
        '<rect x="10" y="0" width="42.2" height="18" fill="#1a7f37"><title>a: 1 KiB\
</title></rect>'
    """
    head = (
        f'<rect x="{_n(x)}" y="{_n(y)}" width="{_n(width)}" height="{_n(height)}" '
        f'fill="{colour}"'
    )
    return f"{head}/>" if title is None else f"{head}>{_title(title)}</rect>"


def dot(
    x: float,
    y: float,
    colour: str,
    *,
    title: str | None = None,
    r: float = 4,
    hollow: bool = False,
) -> str:
    """A scatter point: a filled circle (``hollow``: white, ringed), with a tooltip.

    Example:
        >>> dot(1, 2, RED)
        '<circle cx="1" cy="2" r="4" fill="#cf222e"></circle>'
        >>> dot(1, 2, RED, hollow=True)
        '<circle cx="1" cy="2" r="4" fill="#ffffff" stroke="#cf222e" stroke-width="2">\
</circle>'
    """
    paint = f'"#ffffff" stroke="{colour}" stroke-width="2"' if hollow else f'"{colour}"'
    return (
        f'<circle cx="{_n(x)}" cy="{_n(y)}" r="{r:g}" fill={paint}>'
        f"{_title(title)}</circle>"
    )


def ring(x: float, y: float, r: float, colour: str, *, width: float = 2.5) -> str:
    """An unfilled circle around a point: the one to look at.

    Example:
        >>> ring(1, 2, 12, GREEN)
        '<circle cx="1" cy="2" r="12" fill="none" stroke="#1a7f37" stroke-width="2.5"/>'
    """
    return (
        f'<circle cx="{_n(x)}" cy="{_n(y)}" r="{r:g}" fill="none" '
        f'stroke="{colour}" stroke-width="{width:g}"/>'
    )


def arrow(x: float, y: float, colour: str, *, up: bool = False, size: float = 7) -> str:
    """An arrowhead at ``(x, y)`` pointing right (or up): a value off the chart.

    Example:
        >>> arrow(10, 20, RED)
        '<polygon points="10,16.5 17,20 10,23.5" fill="#cf222e"/>'
    """
    half = size / 2
    if up:
        points = [(x - half, y), (x, y - size), (x + half, y)]
    else:
        points = [(x, y - half), (x + size, y), (x, y + half)]
    joined = " ".join(f"{_n(a)},{_n(b)}" for a, b in points)
    return f'<polygon points="{joined}" fill="{colour}"/>'


def numbered_dot(
    x: float, y: float, label: str, colour: str, *, title: str | None = None
) -> str:
    """A scatter point drawn as its number: a filled circle, ``label`` inside.

    The circle widens for a label of several numbers (points that coincide).

    Example:
        >>> numbered_dot(5, 5, "1", RED).count("<circle"), ">1</text>" in \
numbered_dot(5, 5, "1", RED)
        (1, True)
    """
    r = max(8.0, 3.3 * len(label) + 3)
    return dot(x, y, colour, title=title, r=r) + (
        f'<text x="{_n(x)}" y="{_n(y + 3.5)}" font-size="10" text-anchor="middle" '
        f'font-weight="700" fill="#ffffff">{html.escape(label, quote=False)}</text>'
    )


def text(
    x: float,
    y: float,
    content: str,
    *,
    size: int = 11,
    anchor: str = "start",
    colour: str | None = None,
    mono: bool = False,
    italic: bool = False,
    bold: bool = False,
) -> str:
    """A label; ``anchor`` is ``"start"``, ``"middle"`` or ``"end"``.

    Example:
        >>> text(5, 10, "a < b", anchor="end")
        '<text x="5" y="10" font-size="11" text-anchor="end">a &lt; b</text>'
    """
    return (
        f'<text x="{_n(x)}" y="{_n(y)}" font-size="{size}"'
        + (f' text-anchor="{anchor}"' if anchor != "start" else "")
        + (f' fill="{colour}"' if colour else "")
        + (' font-family="ui-monospace,monospace"' if mono else "")
        + (' font-style="italic"' if italic else "")
        + (' font-weight="700"' if bold else "")
        + f">{html.escape(content, quote=False)}</text>"
    )


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
    """Tick labels under the plot, then the axis's ``title`` centred below them."""
    return "".join(
        text(x(value), frame.baseline + 16, label, anchor="middle")
        for value, label in ticks
    ) + text(frame.middle, frame.height - 10, title, size=12, anchor="middle")


def axes(frame: Frame) -> str:
    """The two axis lines: along the plot's bottom and up its left edge."""
    return line(
        frame.left, frame.baseline, frame.plot_right, frame.baseline, AXIS
    ) + line(frame.left, frame.top, frame.left, frame.baseline, AXIS)


def budget_across(frame: Frame, at: float, budget: int) -> str:
    """The budget as a dashed red line across the plot at height ``at``, labelled."""
    return line(frame.left, at, frame.plot_right, at, RED, width=2, dash="6 4") + text(
        frame.plot_right,
        at - 6,
        f"budget {format_bytes(budget)}",
        anchor="end",
        colour=RED,
    )


def budget_up(at: float, top: float, bottom: float, budget: int) -> str:
    """The budget as a dashed red line up the plot at ``at``, labelled above it."""
    return line(at, top, at, bottom, RED, width=2, dash="6 4", cls="budget") + text(
        at, top - 4, f"budget {format_bytes(budget)}", anchor="middle", colour=RED
    )


def stacked_bar(
    x: float,
    y: float,
    width: float,
    height: float,
    segments: Sequence[tuple[float, str, str]],
) -> str:
    """One bar split into ``(value, colour, tooltip)`` segments, left to right.

    The segments share ``width`` in proportion to their values.

    Example:
        >>> stacked_bar(0, 0, 100, 10, [(3, RED, "a"), (1, BLUE, "b")]).count("<rect")
        2
    """
    total = sum(value for value, _, _ in segments) or 1
    parts = []
    for value, colour, title in segments:
        share = width * value / total
        parts.append(rect(x, y, share, height, colour, title=title))
        x += share
    return "".join(parts)


def legend(x: float, y: float, entries: Sequence[tuple[str, str]]) -> str:
    """A swatch and a label per ``(colour, label)``, one entry per 18-pixel line.

    Example:
        >>> legend(10, 20, [(RED, "a")])
        '<rect x="10" y="10" width="12" height="12" fill="#cf222e"/><text x="28" \
y="20" font-size="12">a</text>'
    """
    return "".join(
        rect(x, y + 18 * i - 10, 12, 12, colour)
        + text(x + 18, y + 18 * i, label, size=12)
        for i, (colour, label) in enumerate(entries)
    )


def category_colour(index: int) -> str:
    """A light colour per category, hues a golden angle apart so neighbours differ.

    Example:
        >>> category_colour(0), category_colour(1)
        ('hsl(0,65%,78%)', 'hsl(138,65%,78%)')
    """
    return f"hsl({(index * 137.508) % 360:.0f},65%,78%)"


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


def bar_rows(
    rows: Sequence[BarRow],
    *,
    budget: int | None = None,
    width: int = 720,
    value_width: int = 0,
    axis: Sequence[Tick] | None = None,
) -> tuple[Frame, str]:
    """Horizontal bars on a bytes axis, one row per label.

    Labels right-aligned left of the plot (monospace), round byte ticks below
    it as vertical grid lines, and ``budget`` as a dashed vertical line;
    ``value_width`` pixels right of the plot hold each row's value text.
    ``axis`` gives the ticks (the first and last are the axis's ends; a first
    tick above 0 makes the axis logarithmic, see :func:`peak_axis`); by
    default round ticks from 0 to the largest value. A bar beyond the axis's
    end stops there with an arrowhead: it runs off the chart.

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
    ticks = axis or byte_axis(max([budget or 0, *values, 1]))
    log = is_log_axis(ticks)
    end = ticks[-1][0] or 1
    x = frame.x_scale(end, low=ticks[0][0], log=log)
    axis_y = frame.baseline + 4
    parts = [x_grid(x, ticks, top=frame.top - 4, bottom=axis_y)]
    for i, row in enumerate(rows):
        y = frame.top + i * (thick + gap)
        parts.append(
            text(
                frame.left - 8,
                y + thick - 5,
                row.label,
                size=12,
                anchor="end",
                mono=True,
            )
        )
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
            mark = rect(
                frame.left,
                at,
                max(x(min(bar.value, end)) - frame.left, 1),
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
                text(
                    frame.plot_right + 8, y + thick - 5, row.value, size=12, colour=AXIS
                )
            )
    parts.append(line(frame.left, frame.top - 4, frame.left, axis_y, AXIS))
    if budget is not None:
        parts.append(budget_up(x(budget), frame.top - 12, axis_y, budget))
    return frame, "".join(parts)

"""The marks every chart draws with: lines, bars, dots, text, and where a label lies.

Plain SVG elements as strings, coordinates in pixels (one decimal), text
escaped; the colours the charts share; :func:`text_box` (a label's extent,
generously) and :func:`place` (a spot for a label clear of the others). The
charts reach them through :mod:`~nnx_introspect._render.svg`, which adds
frames, axes and the budget.
"""

import html
from collections.abc import Iterable, Sequence
from typing import TypeAlias

__all__ = [
    "AXIS",
    "BLUE",
    "GREEN",
    "GREY",
    "GRID",
    "RED",
    "Box",
    "arrow",
    "category_colour",
    "dot",
    "legend",
    "line",
    "numbered_dot",
    "overlap",
    "place",
    "polygon",
    "polyline",
    "rect",
    "ring",
    "stacked_bar",
    "text",
    "text_box",
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


def arrow(
    x: float,
    y: float,
    colour: str,
    *,
    up: bool = False,
    down: bool = False,
    size: float = 7,
) -> str:
    """An arrowhead at ``(x, y)``, pointing right, up or down: a value off the chart.

    Example:
        >>> arrow(10, 20, RED)
        '<polygon points="10,16.5 17,20 10,23.5" fill="#cf222e"/>'
        >>> arrow(10, 20, RED, down=True)
        '<polygon points="6.5,20 10,27 13.5,20" fill="#cf222e"/>'
    """
    half = size / 2
    if up:
        points = [(x - half, y), (x, y - size), (x + half, y)]
    elif down:
        points = [(x - half, y), (x, y + size), (x + half, y)]
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


def stacked_bar(
    x: float,
    y: float,
    width: float,
    height: float,
    segments: Sequence[tuple[float, str, str]],
    *,
    minimum: float = 0,
) -> str:
    """One bar split into ``(value, colour, tooltip)`` segments, left to right.

    The segments share ``width`` in proportion to their values; a segment of
    more than 0 is at least ``minimum`` pixels wide, what that adds taken
    from the larger ones in proportion, so the bar keeps its width and a
    small part stays visible.

    Example:
        >>> stacked_bar(0, 0, 100, 10, [(3, RED, "a"), (1, BLUE, "b")]).count("<rect")
        2
        >>> bar = stacked_bar(0, 0, 100, 10, [(999, RED, "a"), (1, BLUE, "b")], \
minimum=3)
        >>> 'width="97"' in bar, 'x="97" y="0" width="3"' in bar
        (True, True)
    """
    total = sum(value for value, _, _ in segments) or 1
    shares = [width * value / total for value, _, _ in segments]
    small = [0 < s < minimum for s in shares]
    if any(small):
        left = width - minimum * sum(small)
        rest = sum(s for s, tiny in zip(shares, small, strict=True) if not tiny) or 1
        scale = max(left, 0) / rest
        shares = [
            minimum if tiny else s * scale
            for s, tiny in zip(shares, small, strict=True)
        ]
    parts = []
    for (_, colour, title), share in zip(segments, shares, strict=True):
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


# --- where a label lies ------------------------------------------------------

Box: TypeAlias = tuple[float, float, float, float]
"""``(left, top, right, bottom)`` in pixels."""

LETTER = 0.62
"""A letter's width in ems, generously: wider than the sans and monospace
fonts browsers use for digits and lower case, so a box never undershoots."""


def text_box(
    x: float,
    y: float,
    content: str,
    size: float,
    anchor: str = "start",
    mono: bool = False,
) -> Box:
    """Where a label drawn by :func:`text` lies, generously (0.62 em a letter).

    ``mono`` is kept for the callers that say so; both fonts get 0.62 em.
    The box runs from the capitals' top (``size`` above the baseline) to the
    descenders (0.3 em below).

    Example:
        >>> text_box(100, 50, "abcd", 10, anchor="end")
        (75.2, 40, 100.0, 53.0)
    """
    del mono  # one width for both fonts: the wider one's
    width = len(content) * size * LETTER
    left = {"start": x, "middle": x - width / 2, "end": x - width}[anchor]
    return (round(left, 1), y - size, round(left + width, 1), y + 0.3 * size)


def overlap(a: Box, b: Box) -> float:
    """The area two boxes share (0 when apart).

    Example:
        >>> overlap((0, 0, 10, 10), (5, 5, 20, 20)), overlap((0, 0, 1, 1), (2, 2, 3, 3))
        (25, 0)
    """
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    return width * height if width > 0 and height > 0 else 0


def place(
    content: str,
    size: float,
    spots: Sequence[tuple[float, float, str]],
    taken: Sequence[Box],
    inside: Box,
) -> tuple[float, float, str, Box]:
    """Where to write ``content``: ``(x, y, anchor, its box)``.

    The first of ``spots`` (``(x, y, anchor)``) whose label overlaps nothing
    ``taken`` and stays ``inside``; else the one overlapping least, one that
    stays inside before any that does not.

    Example:
        >>> place("ab", 10, [(0, 10, "end"), (0, 10, "start")], [], (0, 0, 50, 20))
        (0, 10, 'start', (0, 0, 12.4, 13.0))
    """
    best: tuple[float, float, float, str, Box] | None = None
    for x, y, anchor in spots:
        box = text_box(x, y, content, size, anchor)
        out = (
            box[0] < inside[0]
            or box[2] > inside[2]
            or box[1] < inside[1]
            or box[3] > inside[3]
        )
        cost = sum(overlap(box, t) for t in taken) + (1e6 if out else 0)
        if cost == 0:
            return x, y, anchor, box
        if best is None or cost < best[0]:
            best = (cost, x, y, anchor, box)
    if best is None:
        raise ValueError(
            f"`spots` must name at least one spot for {content!r}, got none. Pass "
            "the places the label may go."
        )
    return best[1], best[2], best[3], best[4]

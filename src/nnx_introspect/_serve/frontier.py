"""The serving frontier: sequences against context, where serving meets the budget.

Each serving program's peak per device is affine in ``sequences x context``
(for a fixed prompt and prefill size; both programs hold the whole cache):
``a + b x sequences x context``, the points' peak the larger program's. ``b``
is the KV cache's bytes of one position of one sequence per device, over the
data-parallel replicas (exact: the cache's shapes, dtype and sharding); ``a``
is the rest (the weights, the program's working memory), as the compiled
points give it. The predicted frontier, where
the peak meets the budget, is the curve ``sequences x context = (budget - a) /
b``.

``a`` is fitted where the search settled: the line through the smallest compiled
point that does not fit (the edge) and the largest one below it that fits (the
answer) meets the budget at a ``sequences x context`` between theirs, so the
curve passes between the two (the compiled answer on its fitting side, one step
more on the other) whatever the compiles further away say: a point past the
edge that fits (the peak is not monotone) leaves the curve where it is.
:func:`frontier_svg` draws it: every compiled point, the answer ringed, the
region under the curve shaded, the budget named.
"""

from typing import NamedTuple

from nnx_introspect._render import format_bytes, svg

__all__ = ["Frontier", "frontier_svg", "predict_frontier"]

FrontierPoint = tuple[int, int, int, bool]
"""``(sequences, context, peak bytes per device, fits)``: one point compiled.

The peak is the larger of the two programs' (prefill and decode); the point fits
when both do."""


class Frontier(NamedTuple):
    """Where the predicted peak per device (the larger program's) meets the budget.

    Attributes:
        product: ``sequences x context`` on the frontier (the curve is
            ``sequences = product / context``).
        bytes_per_position: ``b``: bytes per device per position of a
            sequence (the KV cache's, over the data-parallel replicas), or
            ``None`` when not known.
        fixed_bytes: ``a = budget - b x product`` (the weights and the rest),
            or ``None`` without ``b``.

    Example:
        >>> Frontier(1000.0, 2.0, 48.0).product
        1000.0
    """

    product: float
    bytes_per_position: float | None
    fixed_bytes: float | None


def predict_frontier(
    points: tuple[FrontierPoint, ...], budget: int, bytes_per_position: float | None
) -> Frontier | None:
    """The frontier the compiled ``points`` predict, or ``None`` when they cannot.

    Between the smallest point that does not fit and the largest one below it
    that fits (the search's answer and its edge): where the line through them
    meets the budget. With only failing points
    (nothing fits), from the smallest one along ``bytes_per_position``;
    ``None`` when that leaves no room (the weights alone exceed the budget).

    Example:
        >>> points = ((1, 100, 300, True), (10, 100, 2100, False))
        >>> predict_frontier(points, 1100, 2.0)
        Frontier(product=500.0, bytes_per_position=2.0, fixed_bytes=100.0)
        >>> # a larger point that fits past the edge leaves the curve where it is
        >>> predict_frontier((*points, (14, 100, 1000, True)), 1100, 2.0).product
        500.0
    """
    bad = min(((s * t, peak) for s, t, peak, ok in points if not ok), default=None)
    fit = [(s * t, peak) for s, t, peak, ok in points if ok]
    good = max((p for p in fit if bad is None or p[0] < bad[0]), default=None)
    b = bytes_per_position
    if good is not None and bad is not None:
        (x1, y1), (x2, y2) = good, bad
        product = x1 + (budget - y1) * (x2 - x1) / (y2 - y1) if y2 > y1 else x1
        product = min(max(product, x1), x2)
    elif bad is not None and b:
        product = bad[0] - (bad[1] - budget) / b
    elif good is not None and b:
        product = good[0] + (budget - good[1]) / b
    else:
        return None
    if product <= 0:
        return None
    return Frontier(product, b, None if b is None else budget - b * product)


def _count(value: float) -> str:
    return f"{value:,.0f}"


_WIDTH, _LEFT, _RIGHT, _TOP, _PLOT = 720, 80, 30, 48, 300


def _ranges(
    points: tuple[FrontierPoint, ...], searched: str, frontier: Frontier | None
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Round ticks of context (x) and sequences (y), from 0.

    The searched axis reaches past both its compiled points and the frontier
    on the other's fixed value; the fixed one spans twice its value.
    """
    seqs = [s for s, _, _, _ in points] or [1]
    ctxs = [t for _, t, _, _ in points] or [1]
    product = frontier.product if frontier is not None else 0.0
    x_top: float
    y_top: float
    if searched == "sequences":
        x_top = 2 * max(ctxs)
        y_top = 1.15 * max(*seqs, product / max(ctxs))
    else:
        y_top = 2 * max(seqs)
        x_top = 1.15 * max(*ctxs, product / max(seqs))
    return svg.round_ticks(max(x_top, 1)), svg.round_ticks(max(y_top, 1))


def _region(
    frame: svg.Frame,
    x: svg.Scale,
    y: svg.Scale,
    product: float,
    through: list[int],
) -> str:
    """The frontier's curve, dashed, over the region under it, shaded."""
    x_end, y_end = x.high, y.high
    start = product / y_end  # where the curve comes in at the top
    if start >= x_end:  # the whole plot fits
        corners = [(0, 0), (0, y_end), (x_end, y_end), (x_end, 0)]
        return svg.polygon([(x(a), y(b)) for a, b in corners], svg.GREEN, opacity=0.12)
    n = 80
    contexts = {start * (x_end / start) ** (i / n) for i in range(n + 1)}
    contexts |= {t for t in through if start < t < x_end}  # exact at the compiles
    curve = [(x(t), y(product / t)) for t in sorted(contexts)]
    area = [(x(0), y(0)), (x(0), y(y_end)), *curve, (x(x_end), y(0))]
    return svg.polygon(area, svg.GREEN, opacity=0.12) + svg.polyline(
        curve, svg.GREEN, width=2, dash="7 4"
    )


def _marks(
    frame: svg.Frame,
    x: svg.Scale,
    y: svg.Scale,
    points: tuple[FrontierPoint, ...],
    searched: str,
    answer: FrontierPoint | None,
) -> str:
    """Every compile (filled fits, hollow does not), the answer ringed, labelled.

    The ring's inside is cleared (white) and the answer's dot drawn again on
    it, so a point that does not fit one step away (a pixel or two off)
    leaves no sliver beside the answer; the table lists it.
    """
    parts = []
    for s, t, peak, ok in sorted(points, key=lambda p: p[3]):  # fits on top
        words = "fits" if ok else "does not fit"
        title = f"{s} sequences x {t:,} positions: {format_bytes(peak)} ({words})"
        parts.append(
            svg.dot(
                x(t), y(s), svg.GREEN if ok else svg.RED, title=title, hollow=not ok
            )
        )
    if answer is None:
        return "".join(parts)
    s, t = answer[0], answer[1]
    px, py = x(t), y(s)
    parts.append(svg.dot(px, py, "#ffffff", r=8))
    parts.append(svg.dot(px, py, svg.GREEN))
    parts.append(svg.ring(px, py, 9, svg.GREEN))
    # short, under the curve: below and left of the point (the curve runs up
    # to its left and down to its right); the legend spells it out
    label = f"answer: {s if searched == 'sequences' else t:,}"
    width = len(label) * 11 * 0.62
    at_y = py + 22 if py + 25 < frame.baseline - 4 else py - 16
    if px - 12 - width >= frame.left + 4:
        parts.append(svg.text(px - 12, at_y, label, anchor="end", bold=True))
    else:
        parts.append(svg.text(px + 12, at_y, label, bold=True))
    return "".join(parts)


_SHADE = 0.15
"""The opacity of the region predicted to fit (and of its legend swatch)."""


_Entry = tuple[str, float, str]
"""A legend entry: its mark (``""``: none), its x offset, its words."""


def _legend_lines(
    budget: int, frontier: Frontier | None, answer: FrontierPoint | None
) -> list[list[_Entry]]:
    """Each line of the legend: its ``(mark, x offset, words)`` entries."""
    lines: list[list[_Entry]] = [
        [("fits", 0, "compiled: fits"), ("fails", 130, "compiled: does not fit")]
    ]
    if answer is not None:
        words = f"the answer: {answer[0]:,} sequences x {answer[1]:,} positions"
        lines.append([("answer", 0, words + " (compiled)")])
    named = f"budget {format_bytes(budget)} per device"
    if frontier is None:
        return [*lines, [("", 0, f"No frontier predicted at the {named}.")]]
    lines.append([("curve", 0, f"predicted frontier: peak = {named}")])
    lines.append([("region", 0, "predicted to fit (from the compiled points)")])
    b, a = frontier.bytes_per_position, frontier.fixed_bytes
    if b is not None and a is not None:
        fit = (
            f"peak = {format_bytes(a)} + {format_bytes(b)} x sequences x context "
            "(b: the KV cache's, exact; a: fitted)"
        )
        lines.append([("", 0, fit)])
    return lines


def _legend(top: float, lines: list[list[_Entry]]) -> str:
    """The legend from ``top``, one 18-pixel line each: a mark, then its words."""
    parts = []
    for i, entries in enumerate(lines):
        y = top + 18 * i
        for mark, offset, words in entries:
            x = _LEFT + offset
            if mark == "fits":
                parts.append(svg.dot(x + 9, y - 4, svg.GREEN))
            elif mark == "fails":
                parts.append(svg.dot(x + 9, y - 4, svg.RED, hollow=True))
            elif mark == "answer":
                parts.append(svg.ring(x + 9, y - 4, 6, svg.GREEN, width=2))
            elif mark == "curve":
                parts.append(
                    svg.line(x, y - 4, x + 18, y - 4, svg.GREEN, width=2, dash="7 4")
                )
            elif mark == "region":
                box = [(x, y - 10), (x + 18, y - 10), (x + 18, y + 2), (x, y + 2)]
                parts.append(svg.polygon(box, svg.GREEN, opacity=_SHADE))
            colour = None if mark else svg.AXIS
            parts.append(svg.text(x + (24 if mark else 0), y, words, colour=colour))
    return "".join(parts)


def frontier_svg(
    points: tuple[FrontierPoint, ...],
    budget: int,
    searched: str,
    value: int,
    frontier: Frontier | None,
    *,
    page: bool = False,
) -> str:
    """Sequences against context: every compile, the answer, the frontier (SVG).

    The x axis is the context (positions per sequence), the y axis the
    sequences, both linear from 0 with round ticks. Each compile is a point
    (green filled: fits; red hollow: does not); the answer (the largest
    ``value`` of ``searched`` that fits) is ringed and labelled; the predicted
    frontier (:func:`predict_frontier`) is a dashed curve with the region
    under it, predicted to fit, shaded; the budget is named.

    Args:
        points: The search's compiles.
        budget: The budget of one device in bytes.
        searched: ``"sequences"`` or ``"context"``.
        value: The answer (0: nothing fits).
        frontier: The predicted frontier, or ``None``.
        page: ``True``: a ``<figure>`` with its caption for an HTML page;
            ``False``: a standalone ``<svg>`` document.

    Example:
        >>> points = ((1, 100, 300, True), (5, 100, 1000, True),
        ...           (6, 100, 1200, False))
        >>> chart = frontier_svg(points, 1100, "sequences", 5,
        ...                      predict_frontier(points, 1100, 2.0))
        >>> chart.count("<circle"), "budget 1.07 KiB per device" in chart
        (9, True)

        (The three compiles; the answer's cleared disc, its dot again and its
        ring; three marks in the legend.)
    """
    answer = next(
        (p for p in points if p[3] and p[0 if searched == "sequences" else 1] == value),
        None,
    )
    lines = _legend_lines(budget, frontier, answer)
    height = _TOP + _PLOT + 60 + 18 * len(lines)
    frame = svg.Frame(_WIDTH, height, _LEFT, _RIGHT, _TOP, height - _TOP - _PLOT)
    x_ticks, y_ticks = _ranges(points, searched, frontier)
    x = frame.x_scale(x_ticks[-1])
    y = frame.y_scale(y_ticks[-1])
    named = f"budget {format_bytes(budget)} per device"
    parts = [
        svg.text(
            16,
            20,
            f"Prefill and decode: sequences against context at the {named}",
            size=12,
            bold=True,
        ),
        svg.text(16, _TOP - 14, "sequences", colour=svg.AXIS),
    ]
    if frontier is not None:
        through = [t for _, t, _, _ in points]
        parts.append(_region(frame, x, y, frontier.product, through))
    parts += [
        svg.y_grid(frame, y, [(v, _count(v)) for v in y_ticks]),
        svg.x_grid(
            x, [(v, _count(v)) for v in x_ticks], top=frame.top, bottom=frame.baseline
        ),
        svg.text(
            frame.middle,
            frame.baseline + 36,
            "context (positions per sequence)",
            size=12,
            anchor="middle",
        ),
        svg.axes(frame),
        _marks(frame, x, y, points, searched, answer),
        _legend(frame.baseline + 62, lines),
    ]
    label = "compiled points and predicted frontier, sequences against context"
    body = "".join(parts)
    if page:
        return svg.figure(frame, label, body, caption=_CAPTION, xmlns=False)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{frame.width}" '
        f'height="{frame.height}" role="img" aria-label="{label}">{body}</svg>'
    )


_CAPTION = (
    "Every compile of the search as sequences against context: green filled "
    "fits the budget, red hollow does not; the ringed point is the answer, a "
    "compiled one. The dashed curve is predicted, not compiled: the peak per "
    "device (the larger of prefill's and decode's) taken as a + b x sequences "
    "x context, b the KV cache's bytes per position per device (exact) and a "
    "fitted to the compiled points either side of the answer; the shaded region "
    "under it is predicted to fit."
)

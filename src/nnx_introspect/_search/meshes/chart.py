"""The comparison's charts: each mesh's peak, and its peak against its step time.

Both take one plain :data:`MeshRow` per candidate and draw with
:mod:`nnx_introspect._render.svg`.
"""

from collections.abc import Sequence
from typing import TypeAlias

from nnx_introspect._render import svg
from nnx_introspect._render.table import format_bytes

__all__ = [
    "MeshRow",
    "peaks_svg",
    "time_peak_svg",
]

MeshRow: TypeAlias = tuple[str, int | None, str, str, tuple[float, float] | None]
"""``(mesh name, peak bytes per device or None, outcome, status, (low, high)
estimated seconds per step or None)``, as a :class:`MeshCandidate` gives them."""


def _colour(outcome: str) -> str:
    """Green fits, blue with no budget to judge by, red otherwise."""
    return {"fits": svg.GREEN, "compiled": svg.BLUE}.get(outcome, svg.RED)


def peaks_svg(rows: Sequence[MeshRow], budget: int | None) -> str:
    """Peak bytes per device of each mesh as horizontal bars, the budget dashed.

    Green fits, red does not, blue with no budget; a mesh with no compile has
    its status written where its bar would be.

    Example:
        >>> page = peaks_svg(
        ...     [("data=8", 3000, "fits", "fits", None),
        ...      ("tp=8", None, "rejected", "rejected by the planner", None)],
        ...     4096,
        ... )
        >>> page.count("<rect"), "rejected by the planner" in page
        (1, True)
    """
    bars = [
        svg.BarRow(name, note=status)
        if peak is None
        else svg.BarRow(
            name,
            (
                svg.Bar(
                    peak,
                    _colour(outcome),
                    f"{name}: {format_bytes(peak)} per device ({status})",
                ),
            ),
        )
        for name, peak, outcome, status, _ in rows
    ]
    frame, body = svg.bar_rows(bars, budget=budget)
    return svg.figure(
        frame,
        "peak bytes per device of each mesh",
        body,
        caption="Peak bytes per device of each mesh, best first: green fits, red "
        "does not"
        + ("" if budget is not None else ", blue: no budget to judge by")
        + "; the dashed line is the budget.",
    )


def time_peak_svg(rows: Sequence[MeshRow], budget: int | None) -> str:
    """Peak per device against the estimated step time, one point per mesh.

    Each compiled mesh with an estimate is a segment from its perfect-overlap
    time to its no-overlap time at its peak (a dot at the low end), labelled
    with its name; the budget is a dashed horizontal line. Empty when no row
    has an estimate.

    Example:
        >>> page = time_peak_svg([("data=8", 3000, "fits", "fits", (0.2, 0.3))], None)
        >>> page.count("<circle"), "0.3 s" in page
        (1, True)
    """
    points = [
        (name, low, high, peak, outcome)
        for name, peak, outcome, _, estimate in rows
        if estimate is not None and peak is not None
        for low, high in (estimate,)
    ]
    if not points:
        return ""
    frame = svg.Frame(720, 320, left=90, right=30, top=24, bottom=46)
    ticks = svg.byte_axis(max([budget or 0, *(p[3] for p in points), 1]))
    y = frame.y_scale(ticks[-1][0] or 1)
    times = svg.round_ticks(max(p[2] for p in points))
    x = frame.x_scale(times[-1] or 1.0)
    parts = [
        svg.y_grid(frame, y, ticks),
        svg.axes(frame),
        svg.x_labels(
            frame,
            x,
            [(t, f"{t:.3g} s") for t in times],
            "estimated step time (roofline: perfect overlap to none)",
        ),
    ]
    if budget is not None:
        parts.append(svg.budget_across(frame, y(budget), budget))
    for name, low, high, peak, outcome in points:
        colour = _colour(outcome)
        parts += [
            svg.line(x(low), y(peak), x(high), y(peak), colour, width=2),
            svg.dot(
                x(low),
                y(peak),
                colour,
                title=f"{name}: {format_bytes(peak)} per device, "
                f"{low:.3g}-{high:.3g} s per step (estimated)",
            ),
            svg.text(x(low) + 6, y(peak) - 6, name, mono=True),
        ]
    return svg.figure(
        frame,
        "peak per device against the estimated step time",
        "".join(parts),
        caption="Peak bytes per device against the estimated step time of each "
        "compiled mesh (an estimate, not a measurement): green fits, red does "
        "not; the dashed line is the budget. Lower and further left is better.",
    )

"""Collectives over device groups that are not whole mesh axes (axes ``"?"``).

XLA partitions some ops with groups of its own making: a gather from a table
sharded over two axes (an embedding lookup under ``fsdp`` and ``tp``) can run
its all-gather over ``{0,1,2,3}``, ``{4,5,6,7}`` on an ``fsdp=4, tp=2`` mesh,
half of ``fsdp`` times all of ``tp``. Such a row's ``axes`` are ``("?",)``;
its *span* is the mesh axes along which some group's devices differ, the
smallest combination of whole axes each group lies inside, and so the links
its bytes can use. The step-time estimate counts them over their span.
"""

import math
from collections.abc import Sequence

import numpy as np

from nnx_introspect._render import format_bytes


def span_axes(
    groups: Sequence[Sequence[int]], mesh_axes: tuple[tuple[str, int], ...]
) -> tuple[str, ...]:
    """The mesh axes along which some group's devices differ, in the mesh's order.

    Every group lies inside one group of these whole axes, and no smaller
    combination holds them all.

    Example:
        >>> span_axes([(0, 1, 2, 3), (4, 5, 6, 7)], (("fsdp", 4), ("tp", 2)))
        ('fsdp', 'tp')
        >>> span_axes([(0, 2), (1, 3)], (("fsdp", 2), ("tp", 2)))
        ('fsdp',)
    """
    sizes = [size for _, size in mesh_axes]
    varying: set[int] = set()
    for group in groups:
        if not group or max(group) >= math.prod(sizes):
            continue
        coords = np.array(np.unravel_index(list(group), sizes)).T
        varying.update(
            d for d in range(len(sizes)) if len(set(coords[:, d].tolist())) > 1
        )
    return tuple(mesh_axes[d][0] for d in sorted(varying))


def _groups_text(groups: Sequence[Sequence[int]], most: int = 3) -> str:
    """``{0,1,2,3}, {4,5,6,7}`` (the first ``most``, then how many more)."""
    shown = ", ".join("{" + ",".join(map(str, g)) + "}" for g in groups[:most])
    more = len(groups) - most
    return shown + (f" and {more} more" if more > 0 else "")


def note_irregular(
    rows: Sequence[tuple[str, str, Sequence[Sequence[int]], int, str]],
    mesh_axes: tuple[tuple[str, int], ...],
    total_wire: int,
) -> str | None:
    """The note that explains the ``"?"`` axes, or ``None`` without any.

    ``rows`` are ``(name, kind, groups, wire bytes per step, source)`` of the
    collectives whose axes are ``"?"``, most wire bytes first.

    Example:
        >>> print(note_irregular(
        ...     [("ag.3", "all-gather", [(0, 1, 2, 3), (4, 5, 6, 7)], 3 << 20,
        ...       "examples.py:465")],
        ...     (("fsdp", 4), ("tp", 2)), 12 << 20))  # doctest: +NORMALIZE_WHITESPACE
        Axes '?': 3 MiB on the wire (25.0% of the collectives') over device
        groups that are not whole mesh axes: all-gather ag.3 (examples.py:465)
        over {0,1,2,3}, {4,5,6,7}, inside fsdp+tp. XLA makes such groups
        when it partitions an op whose operand is sharded over several axes
        (an embedding lookup's gather from a table sharded over two, a loss's
        take_along_axis on sharded logits); the step-time estimate counts
        these bytes over the axes each group lies inside, at those links'
        bandwidth.
    """
    if not rows:
        return None
    wire = sum(row[3] for row in rows)
    share = (
        f" ({100 * wire / total_wire:.1f}% of the collectives')" if total_wire else ""
    )
    alike: dict[tuple[str, str, str], list[str]] = {}
    for name, kind, groups, _, source in rows:
        alike.setdefault((kind, _groups_text(groups), source), []).append(name)
    spans = {
        _groups_text(groups): "+".join(span_axes(groups, mesh_axes)) or "one device"
        for _, _, groups, _, _ in rows
    }
    listed = [
        (f"{kind} {names[0]}" if len(names) == 1 else f"{len(names)} {kind}s")
        + (f" ({source})" if source else "")
        + f" over {groups}, inside {spans[groups]}"
        for (kind, groups, source), names in alike.items()
    ]
    more = f"; {len(listed) - 3} more" if len(listed) > 3 else ""
    return (
        f"Axes '?': {format_bytes(wire)} on the wire{share} over device groups "
        f"that are not whole mesh axes: {'; '.join(listed[:3])}{more}. XLA makes such "
        "groups when it partitions an op whose operand is sharded over several "
        "axes (an embedding lookup's gather from a table sharded over two, a "
        "loss's take_along_axis on sharded logits); the step-time estimate "
        "counts these bytes over the axes each group lies inside, at those "
        "links' bandwidth."
    )

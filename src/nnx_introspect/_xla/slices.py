"""Bytes occupied at each program point, each slice of an allocation counted once.

XLA's live ranges (``*-live-range.txt``) list every *value* live at a point,
but XLA may place several values in the same bytes: a fusion's output written
in place over its operand, a bitcast, a while loop's state, an output aliasing
a parameter. The buffer assignment (``*-buffer-assignment.txt``) says where
each value is: an allocation (by its index), an offset in it and a size, its
*slice*. Values in the same slice occupy its bytes once; values in overlapping
slices of one allocation, live at the same point, occupy the union of their
bytes.

The step's arguments and outputs (and what XLA may make an output) are
allocated by the runtime around the whole program, so their allocations are in
use at every point, whatever value they hold yet (:func:`held_spans`); the
temporaries' slices are in use while a value in them is live. Constants (in
the executable) and thread-local scalars are left out. So counted, the most
bytes at one point is XLA's own ``peak_memory_in_bytes`` on XLA:GPU and
XLA:TPU (within 4 KiB on the two-layer MLP's step: tuples' index tables), and
never exceeds what the device holds for the step (arguments + outputs +
temporaries - aliased) outside XLA:TPU's other memory spaces. XLA's own
live-range peak ("Live ranges at N (peak)") counts each value by its
instruction's shape instead: shared bytes twice, a multi-output fusion's
outputs as 8-byte pointers.

Nothing here reads a file: :mod:`nnx_introspect._xla.dump` reads the dump and
hands over each value's slice and live range.

Example:
    >>> spans = [
    ...     (Slice(0, 0, 64), 0, 2),  # an operand ...
    ...     (Slice(0, 0, 64), 2, 4),  # ... and the fusion written over it
    ...     (Slice(1, 0, 32), 1, 3),
    ... ]
    >>> occupied_curve(spans, 5).tolist()
    [64, 96, 96, 96, 64]
    >>> [(rows.nbytes, rows.members) for rows in occupied_at(
    ...     [(s, name, a, b) for (s, a, b), name in zip(spans, "xyz")], 2)]
    [(64, ('y', 'x')), (32, ('z',))]
"""

import itertools
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "Occupant",
    "Slice",
    "downsample",
    "held_spans",
    "occupied_at",
    "occupied_curve",
    "reserved",
]


class Slice(NamedTuple):
    """Where XLA placed a value: its allocation's index, offset and size in bytes.

    Example:
        >>> Slice(allocation=3, offset=0, size=4096).size
        4096
    """

    allocation: int
    offset: int
    size: int


@dataclass(frozen=True)
class Occupant:
    """One slice occupied at a program point and the values in it.

    Attributes:
        slice: the slice (for slices overlapping a larger one, its own).
        members: the values in it live at the point: the one the bytes hold
            longest first (the latest last use, then the latest start), then
            the others (an operand written over in place, a bitcast, an alias),
            which add no bytes; empty for a held allocation (:func:`held_spans`)
            that no value live at the point is in.
        nbytes: the bytes it adds: its size, less any bytes of a larger slice of
            the same allocation live at the same point (for a held allocation
            with no value of its own there, less those of the values in it).

    Example:
        >>> Occupant(Slice(0, 0, 8), ("a",), 8).nbytes
        8
    """

    slice: Slice
    members: tuple[Hashable, ...]
    nbytes: int


def held_spans(
    spans: Sequence[tuple[Slice, Hashable, int, int]],
    allocations: dict[int, int],
    length: int,
) -> list[tuple[Slice, Hashable, int, int]]:
    """Whole allocations held for the step, as spans from the first point to the last.

    The step's arguments and its outputs (with what XLA may make an output) are
    allocated before the program runs and freed after it, so their bytes are in
    use at every point, whatever value they hold yet. Each span's key is that
    of the allocation's value defined first: ``None`` when no value of it is in
    ``spans`` (then no span is made).

    Args:
        spans: each value's slice, key and live range, as for :func:`occupied_at`.
        allocations: the held allocations' sizes by index.
        length: how many program points.

    Example:
        >>> held_spans([(Slice(0, 0, 8), "p", 0, 1), (Slice(0, 0, 8), "q", 2, 3)],
        ...            {0: 8, 1: 16}, 4)
        [(Slice(allocation=0, offset=0, size=8), None, 0, 3)]
    """
    used = {where.allocation for where, *_ in spans}
    return [
        (Slice(index, 0, size), None, 0, length - 1)
        for index, size in sorted(allocations.items())
        if index in used
    ]


def occupied_curve(
    spans: Sequence[tuple[Slice, int, int]], length: int
) -> "np.ndarray[Any, np.dtype[np.int64]]":
    """The bytes occupied at each point ``0 .. length - 1``, each byte once.

    Args:
        spans: each value's slice and live range ``(slice, start, end)``,
            ``start`` to ``end`` inclusive, as XLA's ``BufferLiveRange`` gives it.
        length: how many program points.

    Returns:
        One count of bytes per point.
    """
    delta = np.zeros(length + 1, dtype=np.int64)
    by_allocation: dict[int, dict[Slice, list[tuple[int, int]]]] = {}
    for where, start, end in spans:
        by_allocation.setdefault(where.allocation, {}).setdefault(where, []).append(
            (start, end)
        )
    for slices in by_allocation.values():
        intervals = [
            (start, end, where)
            for where, ranges in slices.items()
            for start, end in _merged(ranges)
        ]
        if len(slices) == 1 or not _overlapping(intervals):
            for start, end, where in intervals:
                delta[start] += where.size
                delta[end + 1] -= where.size
        else:
            _add_unions(intervals, delta)
    return np.cumsum(delta)[:length]


def occupied_at(
    live: Sequence[tuple[Slice, Hashable, int, int]], point: int
) -> tuple[Occupant, ...]:
    """The slices occupied at ``point`` and the values in each, largest first.

    Args:
        live: each value's slice, its key (a name), and its live range
            ``start``-``end`` inclusive; those not live at ``point`` are skipped.
        point: the program point.

    Returns:
        One :class:`Occupant` per slice that adds bytes, largest first (then by
        allocation and offset); a slice wholly inside a larger one live there
        adds its values to that one's ``members``; a held allocation (key
        ``None``) adds the bytes no value live in it takes, with no members.
        The ``nbytes`` add up to :func:`occupied_curve` at ``point``.
    """
    groups: dict[Slice, list[tuple[int, int, Hashable]]] = {}
    for where, key, start, end in live:
        if start <= point <= end:
            groups.setdefault(where, []).append((end, start, key))
    # in an allocation, the values' slices first, larger ones first, so they
    # keep their bytes; a held allocation's (no value of its own) the rest
    ordered = sorted(
        groups,
        key=lambda s: (
            s.allocation,
            all(key is None for *_, key in groups[s]),
            -s.size,
            s.offset,
        ),
    )
    covered: dict[int, list[tuple[int, int]]] = {}
    kept: list[tuple[Slice, list[Hashable], int]] = []
    for where in ordered:
        ordered_keys = sorted(groups[where], key=_latest)
        members = [key for *_, key in ordered_keys if key is not None]
        mine = covered.setdefault(where.allocation, [])
        added = where.size - _covered_bytes(mine, where.offset, where.size)
        host = next(
            (
                k
                for k in kept
                if k[0].allocation == where.allocation and _meets(k[0], where)
            ),
            None,
        )
        if added == 0 and host is not None:
            host[1].extend(members)
            continue
        mine.append((where.offset, where.offset + where.size))
        kept.append((where, members, added))
    kept.sort(key=lambda k: (-k[2], k[0].allocation, k[0].offset))
    return tuple(Occupant(where, tuple(m), n) for where, m, n in kept)


def reserved(
    spans: Sequence[tuple[Slice, Hashable, int, int]], allocation: int, at: int
) -> Hashable:
    """The key of the value a held allocation is for at ``at``, no value live there.

    Of its largest values (the whole allocation, as a donated parameter and
    its update are), the one defined next after ``at``, else the last before.

    Example:
        >>> spans = [(Slice(0, 0, 8), "p", 0, 1), (Slice(0, 0, 2), "t", 4, 4),
        ...          (Slice(0, 0, 8), "q", 5, 6)]
        >>> reserved(spans, 0, 3)
        'q'
    """
    mine = [s for s in spans if s[1] is not None and s[0].allocation == allocation]
    largest = max(s[0].size for s in mine)
    mine = [s for s in mine if s[0].size == largest]
    later = [s for s in mine if s[2] > at]
    chosen = min(later, key=lambda s: s[2]) if later else max(mine, key=lambda s: s[3])
    return chosen[1]


def downsample(
    full: "np.ndarray[Any, np.dtype[np.int64]]", keep: int, max_points: int
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The points kept of a curve and its bytes there, at most ``max_points``.

    A longer curve keeps the most bytes in each of ``max_points`` equal spans,
    its highest point and ``keep`` exactly.

    Example:
        >>> downsample(np.array([1, 5, 2, 3, 9, 4]), 2, 3)
        ((0, 2, 4), (5, 2, 9))
    """
    live, highest = full, int(np.argmax(full))
    times = np.arange(len(full))
    if len(live) > max_points:
        edges = np.linspace(0, len(live), max_points - 1, dtype=np.int64)
        times = np.unique(np.concatenate([edges[:-1], [keep, highest]]))
        bounds = np.searchsorted(times, np.arange(len(live)), side="right") - 1
        kept = np.full(len(times), np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(kept, bounds, live)
        kept[np.searchsorted(times, keep)] = live[keep]
        live = kept
    return tuple(int(t) for t in times), tuple(int(b) for b in live)


def _latest(item: tuple[int, int, Hashable]) -> tuple[int, int, str]:
    end, start, key = item
    return (-end, -start, str(key))


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Inclusive ranges merged where they meet or touch."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _meets(a: Slice, b: Slice) -> bool:
    return a.offset < b.offset + b.size and b.offset < a.offset + a.size


def _overlapping(intervals: list[tuple[int, int, Slice]]) -> bool:
    """Whether two different slices of one allocation share bytes at one point."""
    active: list[tuple[int, int, Slice]] = []
    for start, end, where in sorted(intervals, key=lambda i: i[0]):
        active = [a for a in active if a[1] >= start]
        if any(a[2] != where and _meets(a[2], where) for a in active):
            return True
        active.append((start, end, where))
    return False


def _add_unions(
    intervals: list[tuple[int, int, Slice]],
    delta: "np.ndarray[Any, np.dtype[np.int64]]",
) -> None:
    """Add one allocation's bytes in use, point span by point span, to ``delta``."""
    bounds = sorted({i[0] for i in intervals} | {i[1] + 1 for i in intervals})
    for begin, after in itertools.pairwise(bounds):
        spans = sorted(
            (w.offset, w.offset + w.size)
            for start, end, w in intervals
            if start <= begin <= end
        )
        used, reach = 0, -1
        for low, high in spans:
            used += max(0, high - max(low, reach))
            reach = max(reach, high)
        delta[begin] += used
        delta[after] -= used


def _covered_bytes(covered: list[tuple[int, int]], offset: int, size: int) -> int:
    """How many of ``offset .. offset + size`` the (disjoint) ``covered`` hold."""
    low, high = offset, offset + size
    spans = sorted(
        (max(a, low), min(b, high)) for a, b in covered if a < high and low < b
    )
    used, reach = 0, low
    for a, b in spans:
        used += max(0, b - max(a, reach))
        reach = max(reach, b)
    return used

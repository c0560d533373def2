"""What to change, from a peak breakdown: only facts the breakdown supports."""

import os
from typing import Any, Final

from nnx_introspect._breakdown.report import (
    Breakdown,
    BreakdownRow,
    Group,
    _buffers,
    _percent,
)
from nnx_introspect._mesh import MeshConfigReport
from nnx_introspect._render.table import format_bytes
from nnx_introspect._typing import typechecked

__all__ = [
    "what_to_change",
]

_SHARE: Final = 0.10
"""A kind is stated when it holds at least this share of the peak."""
_ONE_BUFFER: Final = 0.20
"""One buffer is stated when it alone holds at least this share of the peak."""


@typechecked
def what_to_change(
    breakdown: Breakdown, plan: MeshConfigReport | None = None
) -> tuple[str, ...]:
    """Facts from the breakdown that point at what to change; no guesses.

    Stated, each only when the data holds it:

    - each kind holding at least 10% of the peak, with its share, bytes and
      count; for parameters and optimizer state, with a ``plan``, the mesh
      axes (of size 2 or more) over which most of those bytes are replicated
      (their spec does not name the axis); for the activations kept for
      the backward pass, the share of them from the one source function
      that made the most, with its line range and
      the most buffers one of those lines made (one per layer when a loop over
      layers runs it);
    - the largest collective buffer, whenever there is one;
    - one buffer holding at least 20% of the peak on its own;
    - the gap between what the device holds and the live-range peak when it is
      at least 10% of what the device holds, either sign.

    Args:
        breakdown: the classified peak.
        plan: the step's mesh plan, whose leaves' specs say what is replicated.

    Returns:
        Sentences, largest kind first.

    Example:
        >>> row = BreakdownRow("optimizer state", "opt/mu/w", 41, (41,), "u8", "p", \
"parameter", None, "opt/mu/w", None, 0, None)
        >>> rest = BreakdownRow("temporary", "t", 59, (59,), "u8", "t", \
"fusion", None, None, None, None, None)
        >>> what_to_change(Breakdown("cpu", "jit_f", 0, "t", 100, 100, (row, rest)))
        ('temporary is 59% of the peak (59 B in 1 buffer).', \
'optimizer state is 41% of the peak (41 B in 1 buffer).', \
'one buffer is 59% of the peak: t, u8[59] (59 B).')
    """
    peak = breakdown.live_peak_bytes
    facts: list[str] = []
    if peak <= 0:
        return ()
    for group in breakdown.by_kind():
        if group.nbytes < _SHARE * peak:
            continue
        if group.label == "activation kept for backward":
            facts.append(_activations(breakdown, group))
        else:
            replicated = _replicated(breakdown, group.label, plan)
            facts.append(
                f"{group.label} is {_percent(group.nbytes, peak)} of the peak"
                f" ({format_bytes(group.nbytes)} in {_buffers(group.count)})"
                f"{replicated}."
            )
    collectives = [r for r in breakdown.rows if r.kind == "collective buffer"]
    if collectives:
        largest = max(collectives, key=lambda r: r.nbytes)
        total = sum(r.nbytes for r in collectives)
        facts.append(
            f"the largest collective buffer is one {largest.opcode} buffer of"
            f" {format_bytes(largest.nbytes)} ({largest.type_str},"
            f" {largest.op_name or largest.instruction}); {len(collectives)}"
            f" collective buffers hold {format_bytes(total)},"
            f" {_percent(total, peak)} of the peak."
        )
    largest_row = max(breakdown.rows, key=lambda r: r.nbytes, default=None)
    if largest_row is not None and largest_row.nbytes >= _ONE_BUFFER * peak:
        facts.append(
            f"one buffer is {_percent(largest_row.nbytes, peak)} of the peak:"
            f" {largest_row.label}, {largest_row.type_str}"
            f" ({format_bytes(largest_row.nbytes)})."
        )
    gap, held = breakdown.gap_bytes, breakdown.held_bytes
    if held and abs(gap) >= _SHARE * held:
        if gap > 0:
            facts.append(
                f"the device holds {format_bytes(gap)} ({_percent(gap, held)} of"
                f" {format_bytes(held)}) beyond the buffers live at the peak."
            )
        else:
            facts.append(
                f"XLA's live-range peak is {format_bytes(-gap)} above the"
                f" {format_bytes(held)} memory_analysis() counts as held."
            )
    return tuple(facts)


def _replicated(breakdown: Breakdown, kind: str, plan: MeshConfigReport | None) -> str:
    """``", 80% of it replicated over `tp`"``: axes most of a kind's bytes skip."""
    if plan is None or kind not in ("parameter", "optimizer state"):
        return ""
    specs = {leaf.path: leaf.spec for leaf in plan.leaves + plan.optimizer_leaves}
    rows = [
        (r.nbytes, specs[r.path])
        for r in breakdown.rows
        if r.kind == kind and r.path is not None and r.path in specs
    ]
    total = sum(nbytes for nbytes, _ in rows)
    if not total:
        return ""
    clauses = []
    for axis, size in zip(plan.axis_names, plan.axis_sizes, strict=True):
        if size < 2:
            continue
        over = sum(n for n, spec in rows if str(axis) not in _spec_axes(spec))
        if 2 * over > total:
            clauses.append(f"{_percent(over, total)} of it replicated over `{axis}`")
    return (", " + ", ".join(clauses)) if clauses else ""


def _spec_axes(spec: Any) -> set[str]:
    axes: set[str] = set()
    for entry in tuple(spec):
        if entry is None:
            continue
        axes.update((entry,) if isinstance(entry, str) else tuple(entry))
    return axes


def _activations(breakdown: Breakdown, group: Group) -> str:
    peak = breakdown.live_peak_bytes
    kept = [r for r in breakdown.rows if r.kind == "activation kept for backward"]
    text = (
        f"activations kept for the backward pass: {_percent(group.nbytes, peak)} of"
        f" the peak ({format_bytes(group.nbytes)} in {_buffers(group.count)})"
    )
    by_function: dict[tuple[str, str], list[BreakdownRow]] = {}
    for row in kept:
        if row.source is not None:
            by_function.setdefault((row.source.file, row.source.function), []).append(
                row
            )
    if not by_function:
        return text + "."
    (file, function), rows = max(
        by_function.items(), key=lambda item: sum(r.nbytes for r in item[1])
    )
    lines = sorted({r.source.line for r in rows if r.source})
    span = f"line {lines[0]}" if len(lines) == 1 else f"lines {lines[0]}-{lines[-1]}"
    per_line = max(
        sum(1 for r in rows if r.source and r.source.line == line) for line in lines
    )
    repeat = f", up to {per_line} buffers per line" if per_line > 1 else ""
    by_type: dict[tuple[int, str], list[BreakdownRow]] = {}
    for r in rows:
        if r.source is not None:
            by_type.setdefault((r.source.line, r.type_str), []).append(r)
    (line, kind), most = max(
        by_type.items(), key=lambda item: sum(r.nbytes for r in item[1])
    )
    largest = (
        f"; the most from line {line}: {_buffers(len(most))} of {kind}"
        f" ({format_bytes(sum(r.nbytes for r in most))})"
        if len(lines) > 1
        else ""
    )
    return (
        f"{text}, {_percent(sum(r.nbytes for r in rows), group.nbytes)} of it from"
        f" `{function}` {span} of {os.path.basename(file)}{repeat}{largest}."
    )

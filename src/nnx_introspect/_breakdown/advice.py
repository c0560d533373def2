"""What to change, from a peak breakdown: only facts the breakdown supports."""

import math
import os
from typing import Any, Final

from nnx_introspect._breakdown.report import (
    Breakdown,
    BreakdownRow,
    Group,
    buffer_count,
    percent_text,
)
from nnx_introspect._mesh import MeshConfigReport
from nnx_introspect._render import format_bytes
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
    breakdown: Breakdown,
    plan: MeshConfigReport | None = None,
    *,
    fits: bool | None = None,
    fraction: float | None = None,
) -> tuple[str, ...]:
    """What the breakdown says about the peak, then the options to try; no guesses.

    Nothing on a step that fits (``fits=True``): there is nothing to change.
    Otherwise the facts, each said once and only when the data holds it:

    - each kind holding at least 10% of the peak, with its share, bytes and
      count; for parameters and optimizer state, with a ``plan``, the mesh
      axes (of size 2 or more) over which most of those bytes are replicated
      (their spec does not name the axis); for the activations kept for
      the backward pass, the share of them from the one source function
      that made the most, with its line range and
      the most buffers one of those lines made (one per layer when a loop over
      layers runs it); for collective buffers, the largest;
    - the largest collective buffer when collectives hold less than 10%;
    - one buffer holding at least 20% of the peak on its own, unless its kind
      is that one buffer (said already);
    - buffers that are one tensor in two layouts (one a copy, bitcast or
      transpose of the other, by their lineage: ``aliases``), together;
    - with a ``plan``, why the gradients at the peak are far fewer bytes than
      the plan's, by the peak's phase in the schedule: the optimizer update
      has begun and consumes them, or the peak is in the backward (forward)
      pass and most (all) are not made yet;
    - the gap between what the device holds and the live-range peak when it is
      at least 10% of what the device holds, either sign.

    Then each option whose trigger the breakdown holds, each checkable with
    one more compile, starting ``try:``: rematerialising the function that
    keeps the most activations; fused attention when the largest kept
    activations have the shape of attention probabilities (``[..., S, S]``);
    a smaller global batch when activations or the batch are a large share;
    a larger ``tp`` axis when parameters or optimizer state are; the GPU
    allocator's fraction (``fraction``) on a GPU.

    Args:
        breakdown: the classified peak.
        plan: the step's mesh plan, whose leaves' specs say what is replicated.
        fits: whether the step fits its budget (``None``: not judged, no
            budget); ``True`` says nothing.
        fraction: the ``XLA_CLIENT_MEM_FRACTION`` at which the step would fit,
            for a GPU step that does not.

    Returns:
        Sentences: facts, largest kind first, then options; ``()`` on a step
        that fits.

    Example:
        >>> row = BreakdownRow("optimizer state", "opt/mu/w", 41, (41,), "u8", "p", \
"parameter", None, "opt/mu/w", None, 0, None)
        >>> rest = BreakdownRow("temporary", "t", 59, (59,), "u8", "t", \
"fusion", None, None, None, None, None)
        >>> breakdown = Breakdown("cpu", "jit_f", 0, "t", 100, 100, (row, rest))
        >>> for line in what_to_change(breakdown):
        ...     print(line)
        temporary is 59% of the peak (59 B in 1 buffer).
        optimizer state is 41% of the peak (41 B in 1 buffer).
        try: a larger tp axis: the parameters and optimizer state split over \
more devices.
        try: `--fit` (`fit_step`) for all of them at once: it compiles the step \
with a layer rematerialised under each policy, with microbatches and on each \
mesh, and names the fastest configuration that fits.
        >>> what_to_change(breakdown, fits=True)
        ()
    """
    peak = breakdown.live_peak_bytes
    if peak <= 0 or fits:
        return ()
    facts = _kind_facts(breakdown, plan)
    facts += _layouts(breakdown)
    facts += _gradients(breakdown, plan)
    facts += _parameters(breakdown, plan)
    gap, held = breakdown.gap_bytes, breakdown.held_bytes
    if held and abs(gap) >= _SHARE * held:
        if gap > 0:
            facts.append(
                f"the device holds {format_bytes(gap)} ({percent_text(gap, held)} of"
                f" {format_bytes(held)}) beyond the buffers live at the peak."
            )
        else:
            facts.append(
                f"XLA's live-range peak is {format_bytes(-gap)} above the"
                f" {format_bytes(held)} memory_analysis() counts as held."
            )
    return tuple(facts + _options(breakdown, plan, fraction))


def _kind_facts(breakdown: Breakdown, plan: MeshConfigReport | None) -> list[str]:
    """Each large kind, the largest collective buffer and one large buffer."""
    peak = breakdown.live_peak_bytes
    facts: list[str] = []
    stated: dict[str, int] = {}
    collectives = [r for r in breakdown.rows if r.kind == "collective buffer"]
    for group in breakdown.by_kind():
        if group.nbytes < _SHARE * peak:
            continue
        stated[group.label] = group.count
        if group.label == "activation kept for backward":
            facts.append(_activations(breakdown, group))
            continue
        text = (
            f"{group.label} is {percent_text(group.nbytes, peak)} of the peak"
            f" ({format_bytes(group.nbytes)} in {buffer_count(group.count)})"
            f"{_replicated(breakdown, group.label, plan)}"
        )
        if group.label == "collective buffer":
            text += "; the largest is " + _largest_collective(collectives)
        facts.append(text + ".")
    if collectives and "collective buffer" not in stated:
        total = sum(r.nbytes for r in collectives)
        facts.append(
            "the largest collective buffer is "
            + _largest_collective(collectives)
            + f"; {len(collectives)} collective buffers hold {format_bytes(total)},"
            f" {percent_text(total, peak)} of the peak."
        )
    largest = max(breakdown.rows, key=lambda r: r.nbytes, default=None)
    if (
        largest is not None
        and largest.nbytes >= _ONE_BUFFER * peak
        and stated.get(largest.kind) != 1  # "temporary is 55% (in 1 buffer)"
    ):
        facts.append(
            f"one buffer is {percent_text(largest.nbytes, peak)} of the peak:"
            f" {largest.label}, {largest.type_str}"
            f" ({format_bytes(largest.nbytes)})."
        )
    return facts


def _largest_collective(rows: list[BreakdownRow]) -> str:
    """``one all-gather buffer of 2.10 GiB (f32[...], jit(train)/all_gather)``."""
    largest = max(rows, key=lambda r: r.nbytes)
    return (
        f"one {largest.opcode} buffer of {format_bytes(largest.nbytes)}"
        f" ({largest.type_str}, {largest.op_name or largest.instruction})"
    )


def _layouts(breakdown: Breakdown) -> list[str]:
    """Buffers that are one tensor in two (or more) layouts, by their lineage.

    Rows are one tensor when one's origin was followed to the other through
    layout changes only (a copy, bitcast, reshape or transpose of the same
    element type and count: :func:`~nnx_introspect._breakdown.rows.layout_links`,
    in each row's ``aliases``); rows that merely share a dtype, an element
    count and a source line are not. Tensors alike (the same kind, dtype and
    shapes: one per layer) make one sentence naming each shape with its
    count, when they hold at least 10% of the peak.
    """
    peak = breakdown.live_peak_bytes
    rows = breakdown.rows
    named: dict[str, list[int]] = {}
    for n, row in enumerate(rows):
        named.setdefault(row.instruction, []).append(n)
    parent = list(range(len(rows)))

    def root(n: int) -> int:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for n, row in enumerate(rows):
        for name in row.aliases:
            # the one row of that name, the same elements in another layout
            others = [
                m
                for m in named.get(name, [])
                if m != n
                and rows[m].dtype == row.dtype
                and math.prod(rows[m].shape) == math.prod(row.shape)
            ]
            if len(others) == 1:
                parent[root(others[0])] = root(n)
    tensors: dict[int, list[BreakdownRow]] = {}
    for n, row in enumerate(rows):
        tensors.setdefault(root(n), []).append(row)
    alike: dict[tuple[Any, ...], list[list[BreakdownRow]]] = {}
    for members in tensors.values():
        shapes = sorted({r.shape for r in members})
        if len(shapes) < 2:
            continue
        key = (members[0].kind, members[0].dtype, tuple(shapes))
        alike.setdefault(key, []).append(members)
    facts = []
    for (kind, dtype, shapes), groups in alike.items():
        members = [r for group in groups for r in group]
        total = sum(r.nbytes for r in members)
        if total < _SHARE * peak:
            continue
        listed = " and ".join(
            f"`{dtype}[{','.join(map(str, shape))}]` \u00d7"
            f"{sum(1 for r in members if r.shape == shape)}"
            for shape in shapes
        )
        source = next((r.source for r in members if r.source is not None), None)
        where = (
            f" from line {source.line} of {os.path.basename(source.file)}"
            if source is not None
            else ""
        )
        count = len(groups)
        facts.append(
            f"{listed} ({kind}){where} are {_tensors(count)} in two layouts (one"
            " a copy, bitcast or transpose of the other, both live at the peak):"
            f" {len(members)} buffers, {format_bytes(total)},"
            f" {percent_text(total, peak)} of the peak."
        )
    return facts


def _tensors(n: int) -> str:
    return "one tensor" if n == 1 else f"{n} tensors, each"


def _gradients(breakdown: Breakdown, plan: MeshConfigReport | None) -> list[str]:
    """Why the gradients at the peak are far fewer bytes than the plan's.

    By the peak's phase in the schedule: the optimizer update has begun
    (it consumes each gradient as it is made), the peak is in the backward
    pass (most are not made yet) or in the forward pass (none is). Nothing
    when the schedule's phases were not read.
    """
    if plan is None:
        return []
    planned = plan.bytes_by_category.get("gradients", 0)
    live = sum(r.nbytes for r in breakdown.rows if r.kind == "gradient")
    phase = breakdown.phase
    if not planned or 10 * live > planned or phase is None:
        return []
    head = (
        f"gradient buffers hold {format_bytes(live)} at the peak against the"
        f" plan's {format_bytes(planned)} of gradients: "
    )
    at, backward = breakdown.peak_time, breakdown.backward_start
    update = breakdown.optimizer_start
    if phase == "optimizer":
        why = (
            f"the optimizer update, begun at program point {update} (the peak is"
            f" at {at}), consumes each gradient as it is made, so they are never"
            " all live at once."
        )
    elif phase == "backward":
        later = f", the optimizer update at {update}" if update is not None else ""
        why = (
            f"the peak is {at - (backward or 0)} instructions into the backward"
            f" pass (program point {at}; the backward pass begins at {backward}"
            f"{later}), so most gradients are not made yet."
        )
    else:
        why = (
            f"the peak is in the forward pass (program point {at}; the backward"
            f" pass begins at {backward}), before any gradient is made."
        )
    return [head + why]


def _parameters(breakdown: Breakdown, plan: MeshConfigReport | None) -> list[str]:
    """Why more parameter bytes are live at the peak than the plan's, or in flight.

    The parameter rows beyond the plan's are copies, casts and gathers of
    parameters (labelled ``copy of``, ``all-gather of``, ...); the bytes of
    parameters' collectives in flight at the peak (kind ``collective in
    flight``) are said apart, whether or not a plan is given, when they hold
    at least 10% of the parameters' bytes at the peak or of the plan's.
    """
    rows = [r for r in breakdown.rows if r.kind == "parameter"]
    live = sum(r.nbytes for r in rows)
    copies = sum(r.nbytes for r in rows if r.parameter is None)
    flight = [r for r in breakdown.rows if r.kind == "collective in flight"]
    gathering = sum(r.nbytes for r in flight if " of " in r.label)
    planned = plan.bytes_by_category.get("params", 0) if plan is not None else 0
    facts = []
    if planned and live > planned + _SHARE * planned:
        facts.append(
            f"parameter buffers hold {format_bytes(live)} at the peak against"
            f" the plan's {format_bytes(planned)} of parameters:"
            f" {format_bytes(copies)} of them are copies, casts or gathers XLA"
            " makes of parameters (labelled `copy of`, `all-gather of`)."
        )
    if gathering and gathering >= _SHARE * max(live, planned):
        largest = max(flight, key=lambda r: r.nbytes)
        facts.append(
            f"{format_bytes(gathering)} of parameters are in collectives in"
            " flight at the peak, started before it and done after it (not"
            f" counted as parameters); the largest: {largest.label}"
            f" ({format_bytes(largest.nbytes)})."
        )
    return facts


def _options(
    breakdown: Breakdown, plan: MeshConfigReport | None, fraction: float | None
) -> list[str]:
    """What to try, each only when its trigger is in the breakdown."""
    peak = breakdown.live_peak_bytes
    shares = {g.label: g.nbytes for g in breakdown.by_kind()}
    kept = [r for r in breakdown.rows if r.kind == "activation kept for backward"]
    options = []
    if shares.get("activation kept for backward", 0) >= _SHARE * peak:
        function = _top_function(kept)
        if function is not None:
            options.append(
                f"try: rematerialise `{function}` (wrap it in `nnx.remat`): the"
                " backward pass recomputes its activations instead of keeping them."
            )
        attention = _attention(kept)
        if attention is not None:
            how = (
                "`jax.nn.dot_product_attention` with `implementation='cudnn'`"
                if breakdown.backend == "gpu"
                else "`jax.nn.dot_product_attention`; on GPUs with"
                " `implementation='cudnn'`"
            )
            options.append(
                f"try: fused attention ({how}): the largest kept activations,"
                f" `{attention}`, have the shape of attention probabilities"
                " (sequence \u00d7 sequence), which a fused kernel never stores."
            )
    batch_scaled = shares.get("activation kept for backward", 0) + shares.get(
        "batch", 0
    )
    if batch_scaled >= _SHARE * peak:
        options.append(
            "try: a smaller global batch (`--max-batch` finds the largest that"
            " fits): the activations and the batch shrink with it."
        )
    state = shares.get("parameter", 0) + shares.get("optimizer state", 0)
    if state >= _SHARE * peak:
        options.append("try: " + _larger_tp(plan) + ".")
    if breakdown.backend == "gpu" and fraction is not None:
        options.append(
            f"try: `XLA_CLIENT_MEM_FRACTION={fraction:.2f}`: the allocator's pool"
            " then holds the step."
        )
    if options:
        options.append(
            "try: `--fit` (`fit_step`) for all of them at once: it compiles the"
            " step with a layer rematerialised under each policy, with"
            " microbatches and on each mesh, and names the fastest configuration"
            " that fits."
        )
    return options


def _top_function(kept: list[BreakdownRow]) -> str | None:
    """The source function that keeps the most activation bytes, if any."""
    by_function: dict[str, int] = {}
    for row in kept:
        if row.source is not None:
            name = row.source.function
            by_function[name] = by_function.get(name, 0) + row.nbytes
    if not by_function:
        return None
    return max(by_function, key=lambda name: by_function[name])


def _attention(kept: list[BreakdownRow]) -> str | None:
    """The largest kept activations' type when shaped like attention probabilities.

    The type (``f32[4,8,2048,2048]``) of the most bytes kept by one type, when
    it has three dimensions or more and its last two are equal and at least
    128 (queries by keys).
    """
    by_type: dict[tuple[tuple[int, ...], str], int] = {}
    for row in kept:
        key = (row.shape, row.type_str)
        by_type[key] = by_type.get(key, 0) + row.nbytes
    if not by_type:
        return None
    shape, type_str = max(by_type, key=lambda key: by_type[key])
    if len(shape) >= 3 and shape[-1] == shape[-2] >= 128:
        return type_str
    return None


def _larger_tp(plan: MeshConfigReport | None) -> str:
    """``a larger tp axis (tp=8 in place of tp=4, ...)``: state over more devices."""
    text = "a larger tp axis"
    if plan is not None and "tp" in map(str, plan.axis_names):
        sizes = dict(zip(map(str, plan.axis_names), plan.axis_sizes, strict=True))
        other = next(
            (name for name, size in sizes.items() if name != "tp" and size % 2 == 0),
            None,
        )
        if other is not None:
            text = (
                f"a larger `tp` axis (`tp={2 * sizes['tp']}` with"
                f" `{other}={sizes[other] // 2}`)"
            )
    return text + ": the parameters and optimizer state split over more devices"


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
            clauses.append(
                f"{percent_text(over, total)} of it replicated over `{axis}`"
            )
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
        f"activations kept for the backward pass: {percent_text(group.nbytes, peak)} of"
        f" the peak ({format_bytes(group.nbytes)} in {buffer_count(group.count)})"
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
        f"; the most from line {line}: {buffer_count(len(most))} of {kind}"
        f" ({format_bytes(sum(r.nbytes for r in most))})"
        if len(lines) > 1
        else ""
    )
    return (
        f"{text}, {percent_text(sum(r.nbytes for r in rows), group.nbytes)} of it from"
        f" `{function}` {span} of {os.path.basename(file)}{repeat}{largest}."
    )

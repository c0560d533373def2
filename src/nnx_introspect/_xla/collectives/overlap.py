r"""What each asynchronous collective overlaps: the compute scheduled in its window.

A compiled program's schedule is its computations' instruction order. An
asynchronous collective is issued at its start and waited for at its done;
the instructions the schedule places between the two (in the same
computation) run while it is in flight, and those are all it can hide
behind. The forms read:

* ``all-gather-start`` / ``all-reduce-start`` / ``collective-permute-start``
  and their ``-done`` (XLA:GPU, XLA:TPU), and the wrappers XLA:GPU prints
  alike (``reduce-scatter-start``, ``all-to-all-start``);
* an ``async-start`` wrapping a collective (a reduce-scatter, an
  all-to-all), its ``async-update``\s and its ``async-done``;
* XLA:TPU's async collective fusions: a fusion whose computation ends in the
  ``AsyncCollectiveStart`` custom call, the continuation fusions of the same
  channel (each fused with a share of the compute: they are compute in the
  window) and the fusion ending in ``AsyncCollectiveDone``.

A synchronous collective has no window: it overlaps nothing. Neither does a
collective whose done is not found in its start's computation (a collective
pipelined across a loop's trips) nor one in a megascale transfer: their
time stays exposed.

The instructions between starts and dones are cut into *stretches* (one
between each two consecutive starts or dones of a computation): a collective
is in flight over the stretches from its start to its done, and several
collectives in flight together share each stretch's compute
(:mod:`~nnx_introspect._roofline.overlap` says how). Each instruction's work
is the time model's own (:func:`~nnx_introspect._xla.hlo.work.program_work`'s
``by_name``), its runs counted as there (a loop's body once per trip); the
collectives, asynchronous copies and the starts and dones themselves are no
compute. A loop inside a window counts its body's instructions, each with all
its trips.

Example:
    >>> text = "\n".join([
    ...     "HloModule jit_f, num_partitions=4",
    ...     "",
    ...     "ENTRY %main (p: f32[8], q: f32[8]) -> (f32[32], f32[8]) {",
    ...     "  %p = f32[8]{0} parameter(0)",
    ...     "  %q = f32[8]{0} parameter(1)",
    ...     "  %ags = (f32[8]{0}, f32[32]{0}) all-gather-start(%p), channel_id=1,"
    ...     " replica_groups=[1,4]<=[4], dimensions={0}, use_global_device_ids=true",
    ...     "  %e = f32[8]{0} exponential(%q)",
    ...     "  %agd = f32[32]{0} all-gather-done(%ags)",
    ...     "  ROOT %t = (f32[32]{0}, f32[8]{0}) tuple(%agd, %e)",
    ...     "}",
    ... ])
    >>> from nnx_introspect._xla.collectives import read_collectives
    >>> from nnx_introspect._xla.hlo import parse_module
    >>> work = windowed_work(parse_module(text), read_collectives(text, (("x", 4),)))
    >>> work.windows
    (CommWindow(collective='ags', axes=('x',), wire_bytes=96.0, first=0, last=1),)
    >>> [(op.kind, op.vector_flops) for op in work.stretches[0]]
    [('vector', 8.0)]
"""

import dataclasses
import itertools
from collections.abc import Iterator, Mapping
from typing import Final

from nnx_introspect._xla.collectives.errors import base_opcode
from nnx_introspect._xla.collectives.report import Collectives, axes_key
from nnx_introspect._xla.collectives.rows import KINDS
from nnx_introspect._xla.hlo import Instruction, Module
from nnx_introspect._xla.hlo.module import called_computations
from nnx_introspect._xla.hlo.work import (
    SCATTER_ROW_BYTES,
    CommWindow,
    OpWork,
    Work,
    program_work,
)

__all__ = ["AsyncPair", "async_pairs", "windowed_work"]


_START: Final = '"AsyncCollectiveStart"'
_DONE: Final = '"AsyncCollectiveDone"'
_NO_COMPUTE: Final = frozenset({"collective", "async", "loop"})


@dataclasses.dataclass(frozen=True)
class AsyncPair:
    """One asynchronous collective's start and done in its computation's schedule.

    Attributes:
        collective: The collective's row name (the start's, or for a wrapper
            or an XLA:TPU fusion, the collective instruction inside it).
        computation: The computation that schedules both.
        start: The start's position in it.
        done: The done's position in it; ``None``: not found there (the
            window cannot be read).
        names: The start's and the done's instruction names (and the
            continuation fusions' are not among them: they compute).
    """

    collective: str
    computation: str
    start: int
    done: int | None
    names: tuple[str, ...]


def async_pairs(module: Module) -> tuple[AsyncPair, ...]:
    r"""Every asynchronous collective of ``module``, in the order they start.

    Example:
        >>> from nnx_introspect._xla.hlo import parse_module
        >>> module = parse_module("\n".join([
        ...     "HloModule jit_f, num_partitions=2",
        ...     "ENTRY %main (p: f32[8]) -> f32[8] {",
        ...     "  %p = f32[8]{0} parameter(0)",
        ...     "  %s = f32[8]{0} all-reduce-start(%p), channel_id=1,"
        ...     " replica_groups={{0,1}}, to_apply=%add",
        ...     "  %e = f32[8]{0} exponential(%p)",
        ...     "  ROOT %d = f32[8]{0} all-reduce-done(%s)",
        ...     "}",
        ... ]))
        >>> async_pairs(module)
        (AsyncPair(collective='s', computation='main', start=1, done=3, names=('s', 'd')),)
    """  # noqa: E501
    pairs = []
    for computation, instructions in module.computations.items():
        at = {inst.name: i for i, inst in enumerate(instructions)}
        for i, inst in enumerate(instructions):
            inner = _started(inst, module)
            if inner is None:
                continue
            done = _done_of(inst, inner, module)
            position = None if done is None else at.get(done.name)
            names = (inst.name,) if done is None else (inst.name, done.name)
            pairs.append(AsyncPair(inner.name, computation, i, position, names))
    return tuple(pairs)


def windowed_work(
    module: Module,
    collectives: Collectives,
    *,
    scatter_row_bytes: int = SCATTER_ROW_BYTES,
) -> Work:
    """``module``'s :func:`~nnx_introspect._xla.hlo.work.program_work`, windows read.

    ``collectives``: the program's, read from the same text
    (:func:`~nnx_introspect._xla.collectives.read_collectives`); a window
    whose collective is not among its rows is left out.
    """
    by_name: dict[str, OpWork] = {}
    work = program_work(module, scatter_row_bytes=scatter_row_bytes, by_name=by_name)
    rows = {row.name: row for row in collectives.rows if row.network != "DCN"}
    pairs = async_pairs(module)
    halves = {name for pair in pairs for name in pair.names}
    read: dict[str, list[tuple[str, int, int]]] = {}
    for p in pairs:  # a pipelined one (no done here) or a DCN transfer: unread
        if p.done is not None and p.collective in rows:
            read.setdefault(p.computation, []).append((p.collective, p.start, p.done))
    windows: list[CommWindow] = []
    stretches: list[tuple[OpWork, ...]] = []
    for computation, found in read.items():
        events = sorted({start for _, start, _ in found} | {d for _, _, d in found})
        offset = len(stretches)
        instructions = module.computations[computation]
        for a, b in itertools.pairwise(events):
            ops = (
                op
                for inst in instructions[a + 1 : b]
                for op in _compute(inst, module, by_name, halves, 0)
            )
            stretches.append(_merged(ops))
        at = {event: offset + i for i, event in enumerate(events)}
        for name, start, done in found:
            row = rows[name]
            wire = float(row.total_wire_bytes)
            windows.append(CommWindow(name, axes_key(row), wire, at[start], at[done]))
    return dataclasses.replace(work, windows=tuple(windows), stretches=tuple(stretches))


def _done_opcode(start: Instruction) -> str | None:
    """The opcode of the done that ends ``start`` (``None``: not a start)."""
    if start.opcode == "async-start":
        return "async-done"
    if start.opcode.endswith("-start") and base_opcode(start.opcode) in KINDS:
        return f"{base_opcode(start.opcode)}-done"
    return None


def _started(inst: Instruction, module: Module) -> Instruction | None:
    """The collective ``inst`` starts asynchronously (itself, or inside it)."""
    if inst.opcode != "async-start" and _done_opcode(inst) is not None:
        return inst
    if inst.opcode == "async-start" or (
        inst.opcode == "fusion" and _target(inst, module) == _START
    ):
        return _inner(inst, module)
    return None


def _inner(inst: Instruction, module: Module) -> Instruction | None:
    """The collective instruction in the computation ``inst`` calls."""
    for name in called_computations(inst):
        for inner in module.computations.get(name, []):
            if base_opcode(inner.opcode) in KINDS:
                return inner
    return None


def _target(inst: Instruction, module: Module) -> str:
    """The custom-call target ending the computation a fusion calls, or ``""``."""
    for name in called_computations(inst):
        root = module.root(name)
        if root is not None and root.opcode == "custom-call":
            return root.attributes.get("custom_call_target", "")
    return ""


def _done_of(
    start: Instruction, inner: Instruction, module: Module
) -> Instruction | None:
    """The done of ``start``: its users followed through the async chain.

    The chain: ``get-tuple-element``, ``async-update`` and XLA:TPU's
    continuation fusions of the same channel; ``None`` when it leads out
    (a tuple into a loop: a collective pipelined across trips).
    """
    channel = inner.attributes.get("channel_id")
    done = _done_opcode(start)
    queue, seen = [start], {start.name}
    while queue:
        at = queue.pop(0)
        for user in module.users.get(at.name, []):
            if user.name in seen or user.computation != start.computation:
                continue
            seen.add(user.name)
            if done is not None and user.opcode == done:
                return user
            if user.opcode in ("get-tuple-element", "async-update"):
                queue.append(user)
                continue
            if user.opcode != "fusion" or start.opcode != "fusion":
                continue
            found = _inner(user, module)
            if found is None or found.attributes.get("channel_id") != channel:
                continue
            if _target(user, module) == _DONE:
                return user
            queue.append(user)  # a continuation of the same collective
    return None


def _compute(
    inst: Instruction,
    module: Module,
    by_name: Mapping[str, OpWork],
    halves: set[str],
    depth: int,
) -> Iterator[OpWork]:
    """The compute ``inst`` runs: its own work, or its loop's or call's."""
    if inst.name in halves:
        return
    op = by_name.get(inst.name)
    if op is not None and op.kind not in _NO_COMPUTE:
        yield op
    if inst.opcode in ("while", "call", "conditional") and depth < 16:
        for name in called_computations(inst):
            for inner in module.computations.get(name, []):
                yield from _compute(inner, module, by_name, halves, depth + 1)


def _merged(ops: Iterator[OpWork]) -> tuple[OpWork, ...]:
    """Equal instructions counted together, in the order first seen."""
    counts: dict[OpWork, int] = {}
    for op in ops:
        key = dataclasses.replace(op, count=0)
        counts[key] = counts.get(key, 0) + op.count
    return tuple(dataclasses.replace(op, count=n) for op, n in counts.items())

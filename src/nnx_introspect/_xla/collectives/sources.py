"""Where each array of a collective comes from, when the collective does not say.

XLA's combiners (``AllGatherCombiner``, ``ReduceScatterCombiner``,
``AllReduceCombiner``) merge many collectives into one instruction with a tuple
of arrays and no ``op_name`` or stack frame, and the reduce-scatters XLA makes
from an all-reduce and a slice carry none either. The arrays still say where
they come from: the ``get-tuple-element`` that takes array ``i`` out of the
combined result keeps the metadata of the collective it replaced, the
instructions that use the result are the model's (the matmul that uses a
gathered weight), and the instructions that made the operand are too (the
matmul whose gradient is reduce-scattered).

:func:`array_sources` reads, for each array, the first stack frame found in
that order: the array's own result value, then for a reducing collective
(all-reduce, reduce-scatter) its operand's producers before the result's
users, for the others the users first. The users are followed by the
array's tuple index (only its own ``get-tuple-element``; through fusions that
pass it on unchanged, as XLA:TPU's continuation fusions carry a collective in
flight while they compute something else) to the first instruction that
computes with it; the producers breadth-first through operands and from a
called computation's ``parameter`` to its caller's operand. Each side looks
at most at :data:`_MOST_VISITS` instructions.
"""

from collections import deque
from collections.abc import Callable, Iterator
from typing import Final

from nnx_introspect._xla.collectives.errors import base_opcode
from nnx_introspect._xla.hlo import (
    HloTextError,
    Instruction,
    Module,
    SourceLocation,
    metadata,
    parse_shape,
    source_stack,
    tuple_elements,
)
from nnx_introspect._xla.hlo.frames import user_frame

_MOST_VISITS: Final = 48
"""Instructions looked at on each side of one array before giving up."""

_REDUCING: Final = ("all-reduce", "reduce-scatter")


def _frame(at: Instruction, module: Module) -> SourceLocation | None:
    """The user frame of ``at``'s metadata (else its innermost), if any."""
    try:
        stack = source_stack(metadata(at.text), module.frames)
    except HloTextError:
        return None
    return user_frame(stack, stack[0] if stack else None)


def array_sources(
    instruction: Instruction, kind: str, arrays: int, module: Module
) -> tuple[SourceLocation | None, ...]:
    """One source per array of a collective's counted bytes (``None``: none found).

    ``instruction`` is the collective itself (the ``-start`` of a pair, the
    instruction inside an async wrapper or a fusion).
    """
    own = _frame(instruction, module)
    found: list[SourceLocation | None] = []
    for index in range(arrays):
        results = list(_result_values(instruction, index, arrays, module))
        operands = _operand_values(instruction, index, arrays, module)
        users_first = kind not in _REDUCING
        held = [at for at, part in results[:1] if part is None]
        source = next((_frame(at, module) for at in held), None)
        source = source or (own if arrays == 1 else None)
        for users in (users_first, not users_first):
            if source is None:
                source = (
                    _forward(results, module)
                    if users
                    else _search(operands, module, _producers)
                )
        found.append(source or own)
    return tuple(found)


def _search(
    start: list[Instruction],
    module: Module,
    step: Callable[[Instruction, Module], Iterator[Instruction]],
) -> SourceLocation | None:
    """The first frame breadth-first from ``start`` along ``step``."""
    queue = deque(start)
    seen = {at.name for at in start}
    while queue and len(seen) <= _MOST_VISITS:
        at = queue.popleft()
        frame = _frame(at, module)
        if frame is not None:
            return frame
        for nxt in step(at, module):
            if nxt.name not in seen:
                seen.add(nxt.name)
                queue.append(nxt)
    return None


def _forward(
    start: list[tuple[Instruction, int | None]], module: Module
) -> SourceLocation | None:
    """The first frame of what uses the value, breadth-first from ``start``.

    ``(instruction, tuple index)`` pairs: the value is that element of the
    instruction's result (``None``: all of it). It is followed through
    ``get-tuple-element`` of its own index only, into tuples, and through
    fusions that pass it to their result unchanged (XLA:TPU's continuation
    fusions carry a collective in flight while they run another op's work,
    whose frame is not the collective's); the first instruction that computes
    with it and has a frame is its source.
    """
    queue = deque(start)
    seen = {(at.name, part) for at, part in start}
    while queue and len(seen) <= _MOST_VISITS:
        at, part = queue.popleft()
        for user in module.users.get(at.name, []):
            carried = _carry(at, part, user, module)
            if carried is None:  # computes with it: its frame, or go on through it
                frame = _frame(user, module)
                if frame is not None:
                    return frame
                carried = [(user, None)]
            for item in carried:
                if (item[0].name, item[1]) not in seen:
                    seen.add((item[0].name, item[1]))
                    queue.append(item)
    return None


_MOVES: Final = frozenset(
    ("bitcast", "copy", "transpose", "reshape", "convert", "copy-start", "copy-done")
)
"""Opcodes that pass a value on (their frame, if any, still names the value's op)."""


def _carry(
    at: Instruction, part: int | None, user: Instruction, module: Module
) -> list[tuple[Instruction, int | None]] | None:
    """Where ``user`` carries ``at{part}``: ``[]`` not at all, ``None`` it computes."""
    if user.opcode == "get-tuple-element":
        index = user.attributes.get("index")
        return [(user, None)] if part is None or index == str(part) else []
    if part is not None:
        return []  # a whole tuple handed on: not followed
    if user.opcode == "tuple":
        return [(user, k) for k, name in enumerate(user.operands) if name == at.name]
    if user.opcode in _MOVES or user.opcode.endswith("-done"):
        frame = _frame(user, module)
        return None if frame is not None else [(user, None)]
    called = user.attributes.get("calls", "").lstrip("%")
    if user.opcode != "fusion" or called not in module.computations:
        return None
    outputs: list[tuple[Instruction, int | None]] = []
    for k, name in enumerate(user.operands):
        if name != at.name:
            continue
        passed = _passed(called, k, module)
        if passed is False:
            return None
        outputs.append((user, None if passed is True else passed))
    return outputs


def _passed(computation: str, number: int, module: Module) -> int | bool:
    """Whether a fusion's parameter ``number`` reaches its root unchanged.

    The root's tuple index it reaches (``True``: the root is the value), else
    ``False``: the fusion computes with it. Through moves, tuples and XLA:TPU's
    ``AsyncCollective*`` custom calls.
    """
    params = [
        i
        for i in module.computations[computation]
        if i.opcode == "parameter" and i.operand_text.strip() == str(number)
    ]
    todo = list(params)
    while todo:
        at = todo.pop()
        for user in module.users.get(at.name, []):
            if user.root and user.opcode == "tuple":
                return user.operands.index(at.name)
            target = user.attributes.get("custom_call_target", "")
            if user.opcode in _MOVES or "AsyncCollective" in target:
                if user.root:
                    return True
                todo.append(user)
            elif user.opcode != "get-tuple-element":
                return False
    return False


def _producers(at: Instruction, module: Module) -> Iterator[Instruction]:
    """What ``at`` reads; a called computation's parameter continues at its caller."""
    for name in at.operands:
        found = module.instructions.get(name)
        if found is not None:
            yield found
    if at.opcode == "parameter" and at.computation != module.entry:
        number = at.operand_text.strip()
        for caller in module.callers.get(at.computation, []):
            if number.isdigit() and int(number) < len(caller.operands):
                found = module.instructions.get(caller.operands[int(number)])
                if found is not None:
                    yield found


def _result_values(
    instruction: Instruction, index: int, arrays: int, module: Module
) -> Iterator[tuple[Instruction, int | None]]:
    """What holds array ``index`` of the collective's result, as ``(at, part)``.

    The ``get-tuple-element`` taking it out of a tuple result (of the
    instruction, of its ``-done``, of its async wrapper's ``async-done``),
    else, for one array, that result's holder itself; for a collective inside
    a fusion (XLA:TPU's async collective fusion), the fusion's result element
    the collective's result reaches.
    """
    holders = [instruction]
    opcode = instruction.opcode
    callers = module.callers.get(instruction.computation, [])
    if opcode.endswith("-start"):
        done = f"{base_opcode(opcode)}-done"
        holders = [
            u for u in module.users.get(instruction.name, []) if u.opcode == done
        ]
    elif instruction.root and instruction.computation != module.entry:
        holders = [
            user
            for caller in callers
            if caller.opcode == "async-start"
            for user in _async_dones(caller, module)
        ]
    elif instruction.computation != module.entry and arrays == 1:
        part = _fused_part(instruction, module)
        for caller in callers:
            if caller.opcode == "fusion" and part is not None:
                yield caller, None if part is True else part
        return
    for holder in holders:
        if arrays == 1:
            yield holder, None
            continue
        for user in module.users.get(holder.name, []):
            if user.opcode == "get-tuple-element" and user.attributes.get(
                "index"
            ) == str(index):
                yield user, None


def _fused_part(instruction: Instruction, module: Module) -> int | bool | None:
    """The element of its fusion's result a fused collective's result becomes.

    XLA:TPU's start fusion returns ``AsyncCollectiveStart(collective)``, a
    tuple whose elements are the operand, the result and the collective's
    state: the first element after the operand's with the result's type and
    dimensions. ``True``: the fusion's result is the value; ``None``: not
    found.
    """
    root = module.root(instruction.computation)
    if root is None or instruction.name not in root.operands:
        return True if root is instruction else None
    if root.opcode in _MOVES:
        return True
    wanted = _type(instruction.shape)
    for k, element in enumerate(tuple_elements(root.shape)):
        if k >= 1 and _type(element) == wanted:
            return k
    return None


def _type(shape: str) -> tuple[str, tuple[int, ...]] | None:
    try:
        return parse_shape(shape)
    except HloTextError:
        return None


def _async_dones(start: Instruction, module: Module) -> Iterator[Instruction]:
    """The ``async-done`` of an ``async-start``, through its ``async-update``s."""
    queue = [start]
    while queue:
        at = queue.pop()
        for user in module.users.get(at.name, []):
            if user.opcode == "async-update":
                queue.append(user)
            elif user.opcode == "async-done":
                yield user


def _operand_values(
    instruction: Instruction, index: int, arrays: int, module: Module
) -> list[Instruction]:
    """The instruction that makes array ``index`` of the collective's operands."""
    names = instruction.operands
    if len(names) != arrays or index >= len(names):
        names = names[:1] if arrays == 1 else ()
    else:
        names = names[index : index + 1]
    return [module.instructions[n] for n in names if n in module.instructions]

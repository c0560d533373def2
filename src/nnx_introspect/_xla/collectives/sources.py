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

:func:`_array_sources` reads, for each array, the first stack frame found in
that order: the array's own result value, then for a reducing collective
(all-reduce, reduce-scatter) its operand's producers before the result's
users, for the others the users first; each side followed breadth-first
through at most :data:`_MOST_VISITS` instructions, through ``parameter`` to a
fusion's or an async wrapper's operand and from a ``-start`` to its ``-done``.
"""

from collections import deque
from collections.abc import Callable, Iterator
from typing import Final

from nnx_introspect._xla.collectives.errors import _base
from nnx_introspect._xla.hlo import (
    HloTextError,
    Instruction,
    Module,
    SourceLocation,
    metadata,
    source_stack,
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


def _array_sources(
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
        sides = [(results, _users), (operands, _producers)]
        if kind in _REDUCING:
            sides.reverse()
        source = next((_frame(value, module) for value in results[:1]), None)
        source = source or (own if arrays == 1 else None)
        for values, step in sides:
            source = source or _search(values, module, step)
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


def _users(at: Instruction, module: Module) -> Iterator[Instruction]:
    """What uses ``at``; a called computation's root continues at its callers."""
    yield from module.users.get(at.name, [])
    if at.root and at.computation != module.entry:
        yield from module.callers.get(at.computation, [])


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
) -> Iterator[Instruction]:
    """The instructions that hold array ``index`` of the collective's result.

    The ``get-tuple-element`` taking it out of a tuple result (of the
    instruction, of its ``-done``, of its async wrapper's ``async-done``),
    else, for one array, that result's holder itself.
    """
    holders = [instruction]
    opcode = instruction.opcode
    if opcode.endswith("-start"):
        done = f"{_base(opcode)}-done"
        holders = [
            u for u in module.users.get(instruction.name, []) if u.opcode == done
        ]
    elif instruction.root and instruction.computation != module.entry:
        holders = [
            user
            for caller in module.callers.get(instruction.computation, [])
            if caller.opcode == "async-start"
            for user in _async_dones(caller, module)
        ]
    for holder in holders:
        if arrays == 1:
            yield holder
            continue
        for user in module.users.get(holder.name, []):
            if user.opcode == "get-tuple-element" and user.attributes.get(
                "index"
            ) == str(index):
                yield user


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

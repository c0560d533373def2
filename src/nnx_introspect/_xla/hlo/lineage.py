r"""Where a value comes from: its operands followed through copies and collectives.

A buffer's defining instruction says little of what the bytes are for: a
``copy`` or a ``transpose`` fusion re-lays out its operand, a ``bitcast`` or a
``reshape`` renames it, a ``convert`` casts it, an ``all-gather`` gathers it, a
``reduce-scatter`` sums and splits it. :func:`origin` follows a value's data
operand through such instructions (into fusions whose root only moves data,
out of the computation an async collective or a fusion calls, through
``get-tuple-element`` and the halves of async collectives) to the first
instruction that computes something, or to an entry parameter: its *origin*,
whose role (a parameter, a forward or a backward op) is the value's.

Example:
    >>> from nnx_introspect._xla.hlo.module import parse_module
    >>> module = parse_module("\n".join([
    ...     "HloModule jit_f",
    ...     "",
    ...     "ENTRY %main (p: f32[8,4]) -> f32[8,8] {",
    ...     "  %p = f32[8,4]{1,0} parameter(0)",
    ...     "  %t = f32[4,8]{1,0} transpose(%p), dimensions={1,0}",
    ...     "  ROOT %g = f32[8,8]{1,0} all-gather(%t), dimensions={0}",
    ...     "}",
    ... ]))
    >>> found = origin(module, "g")
    >>> found.instruction, found.parameter, found.through, found.layouts
    ('p', 0, ('all-gather', 'transpose'), ())
    >>> origin(module, "t").layouts
    ('p',)
"""

import re
from dataclasses import dataclass
from typing import Final

from nnx_introspect._xla.hlo.instructions import Instruction, metadata
from nnx_introspect._xla.hlo.module import Module
from nnx_introspect._xla.hlo.shapes import parse_shape, tuple_elements
from nnx_introspect._xla.hlo.text import HloTextError

__all__ = ["COLLECTIVES", "LAYOUT_OPS", "REDUCING", "Origin", "origin"]

COLLECTIVES: Final = frozenset(
    f"{op}{suffix}"
    for op in (
        "all-gather",
        "all-reduce",
        "reduce-scatter",
        "all-to-all",
        "collective-permute",
    )
    for suffix in ("", "-start", "-done")
)
"""The collectives' opcodes, their async halves included."""
REDUCING: Final = frozenset(
    op for op in COLLECTIVES if op.startswith(("all-reduce", "reduce-scatter"))
)
"""The collectives that sum their operands across devices."""
LAYOUT_OPS: Final = frozenset(
    ("copy", "bitcast", "transpose", "reshape", "copy-start", "copy-done")
)
"""The opcodes that lay a tensor out anew without changing its elements."""
_DATA_OPS: Final = LAYOUT_OPS | {"convert", "slice", "dynamic-slice"}
_INSIDE: Final = _DATA_OPS | {"parameter", "get-tuple-element", "tuple"}
_MOST_STEPS: Final = 64


@dataclass(frozen=True)
class Origin:
    """The instruction a value comes from and what it was looked through.

    Attributes:
        instruction: the first instruction that is neither a copy, a layout
            change, a cast, a slice nor a collective (the value's own when it
            is none of those), or an entry parameter.
        opcode: its opcode.
        op_name: its op name in JAX's metadata, if any.
        parameter: the entry parameter's number, when the origin is one.
        through: the opcodes followed from the value to its origin, nearest
            first (a fusion that only moves data as ``fusion``).
        layouts: the instructions passed while each step only re-laid out the
            tensor (same element type and count): the value in other layouts.
    """

    instruction: str
    opcode: str
    op_name: str | None
    parameter: int | None = None
    through: tuple[str, ...] = ()
    layouts: tuple[str, ...] = ()


def origin(module: Module, name: str, index: tuple[int, ...] = ()) -> Origin:
    """The :class:`Origin` of the value ``name{index}`` of ``module``.

    Args:
        module: the parsed module (:func:`parse_module`).
        name: the defining instruction's name.
        index: the value's index in that instruction's (tuple) shape.

    Returns:
        Its origin; the instruction itself when it is not followed (or when
        its data operands lead to different origins).
    """
    found = module.instructions.get(name)
    if found is None:
        return Origin(name, "", None)
    here = Origin(found.name, found.opcode, metadata(found.text).get("op_name"))
    through: list[str] = []
    layouts: list[str] = []
    same = True
    value = _value(found, index)
    current, at = found, index
    for _ in range(_MOST_STEPS):
        step = _follow(module, current, at)
        if step is None:
            break
        (current, at), opcode = step, current.opcode
        through.append(opcode)
        same = same and opcode in LAYOUT_OPS | {"fusion", "get-tuple-element"}
        same = same and _value(current, at) == value and value is not None
        if same:
            layouts.append(current.name)
    if current is found:
        return here
    parameter = _entry_parameter(module, current)
    return Origin(
        instruction=current.name,
        opcode=current.opcode,
        op_name=metadata(current.text).get("op_name"),
        parameter=parameter,
        through=tuple(through),
        layouts=tuple(layouts),
    )


def _follow(
    module: Module, at: Instruction, index: tuple[int, ...]
) -> tuple[Instruction, tuple[int, ...]] | None:
    """The value ``at{index}`` is read from, one step back; ``None`` to stop."""
    opcode, operands = at.opcode, at.operands
    targets: list[tuple[str, tuple[int, ...]]] = []
    if opcode == "get-tuple-element":
        number = re.fullmatch(r"\d+", at.attributes.get("index", ""))
        if number is None or not operands:
            return None
        targets = [(operands[0], (int(number[0]), *index))]
    elif opcode == "tuple" and index and index[0] < len(operands):
        targets = [(operands[index[0]], index[1:])]
    elif opcode in _DATA_OPS and operands:
        targets = [(operands[0], index)]
    elif opcode.endswith("-done") and operands:
        targets = [(operands[0], (1, *index))]
    elif opcode in COLLECTIVES or opcode == "async-start":
        targets = _collective_operands(module, at, index)
    elif opcode == "fusion":
        return _through_fusion(module, at, index)
    elif opcode == "parameter":
        return _caller_operand(module, at, index)
    if len({name for name, _ in targets}) != 1:
        return None
    name, rest = targets[0]
    found = module.instructions.get(name)
    return None if found is None else (found, rest)


def _collective_operands(
    module: Module, at: Instruction, index: tuple[int, ...]
) -> list[tuple[str, tuple[int, ...]]]:
    """The operand(s) a collective's (or an async start's) output ``index`` sums."""
    operands = at.operands
    if at.opcode.endswith("-start") or at.opcode == "async-start":
        if index[:1] == (0,):  # the operands, aliased by the start
            return [(operands[index[1]], index[2:])] if len(index) > 1 else []
        index = index[1:]
    if at.opcode == "async-start":
        called = at.attributes.get("calls", "").lstrip("%")
        root = module.root(called)
        return [] if root is None else [(root.name, index)]
    if len(operands) == 1:
        return [(operands[0], ())]
    if index and index[0] < len(operands):
        return [(operands[index[0]], ())]
    return [(name, ()) for name in operands]


def _through_fusion(
    module: Module, at: Instruction, index: tuple[int, ...]
) -> tuple[Instruction, tuple[int, ...]] | None:
    """A fusion's operand when its root only moves that operand's data."""
    called = at.attributes.get("calls", "").lstrip("%")
    inside = module.root(called)
    for _ in range(_MOST_STEPS):
        if inside is None or inside.opcode not in _INSIDE:
            return None
        if inside.opcode == "parameter":
            number = _number(inside)
            if number is None or number >= len(at.operands):
                return None
            found = module.instructions.get(at.operands[number])
            return None if found is None else (found, index)
        step = _follow(module, inside, index)
        inside, index = (None, ()) if step is None else step
    return None


def _caller_operand(
    module: Module, at: Instruction, index: tuple[int, ...]
) -> tuple[Instruction, tuple[int, ...]] | None:
    """A called computation's parameter as its one caller's operand."""
    callers = module.callers.get(at.computation, [])
    number = _number(at)
    if len(callers) != 1 or number is None or at.computation == module.entry:
        return None
    caller = callers[0]
    if caller.opcode not in ("fusion", "async-start", "call"):
        return None
    if number >= len(caller.operands):
        return None
    found = module.instructions.get(caller.operands[number])
    return None if found is None else (found, index)


def _number(parameter: Instruction) -> int | None:
    found = re.fullmatch(r"\s*(\d+)\s*", parameter.operand_text)
    return int(found[1]) if found else None


def _entry_parameter(module: Module, at: Instruction) -> int | None:
    if at.opcode != "parameter" or at.computation != module.entry:
        return None
    return _number(at)


def _value(at: Instruction, index: tuple[int, ...]) -> tuple[str, int] | None:
    """``(element type, element count)`` of ``at{index}``; ``None`` for a tuple."""
    text = at.shape
    try:
        for i in index:
            text = tuple_elements(text)[i]
        dtype, shape = parse_shape(text)
    except (HloTextError, IndexError, ValueError):
        return None
    if dtype == "tuple":
        return None
    count = 1
    for d in shape:
        count *= d
    return dtype, count

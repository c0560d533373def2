"""One instruction line: name, shape, opcode, operands, attributes, metadata."""

import re
from dataclasses import dataclass
from typing import Final

from nnx_introspect._xla.hlo.text import (
    COMMENT,
    HloTextError,
    closing_bracket,
    shape_end,
    structure_chars,
    top_level,
)

__all__ = [
    "Instruction",
    "definition",
    "instruction",
    "metadata",
    "names_in",
    "operand_shapes",
]


@dataclass(frozen=True)
class Instruction:
    """One HLO instruction line, parsed.

    Attributes:
        name: its name, without the ``%``.
        computation: the computation that holds it (``""`` for a line read
            alone).
        shape: its shape's text, layout included.
        opcode: ``fusion``, ``all-gather-start``, ``dot``...
        operands: the operands' names, in order.
        operand_text: the text between the opcode's parentheses.
        attributes: each ``key=value`` after the operands, values as printed.
        text: the whole line.
        root: whether it is its computation's ``ROOT``.
    """

    name: str
    computation: str
    shape: str
    opcode: str
    operands: tuple[str, ...]
    operand_text: str
    attributes: dict[str, str]
    text: str
    root: bool


_DEFINITION: Final = re.compile(r"^\s*(ROOT )?%(\S+) = (.*)$", re.DOTALL)
_NAME: Final = re.compile(r"%([A-Za-z0-9_.\-]+)")
_OPCODE: Final = re.compile(r" ([a-z][a-z0-9\-_]*)\(")
_ATTRIBUTE_START: Final = re.compile(r", ([a-z_][a-z0-9_]*)=")


def definition(line: str) -> tuple[str, str] | None:
    """``(name, shape)`` of an instruction line; ``None`` for another line.

    Cheaper than :func:`instruction`: nothing after the shape is read.

    Example:
        >>> definition("  ROOT %t = (f32[2]{0}, s32[]) tuple(%a, %b)")
        ('t', '(f32[2]{0}, s32[])')
        >>> definition("ENTRY %main () -> f32[] {") is None
        True
    """
    found = _DEFINITION.match(line)
    if found is None:
        return None
    return found[2], found[3][: shape_end(found[3])]


def instruction(line: str, computation: str = "") -> Instruction:
    """One instruction line (``%name = shape opcode(operands), key=value...``).

    Raises:
        HloTextError: the line is no instruction, or has no opcode or no
            closed operand list.

    Example:
        >>> found = instruction(
        ...     "  ROOT %ag = f32[32]{0} all-gather(f32[8]{0} %p), channel_id=1,"
        ...     " replica_groups={{0,1,2,3}}, dimensions={0}", "main")
        >>> found.opcode, found.operands, found.root, found.attributes["channel_id"]
        ('all-gather', ('p',), True, '1')
    """
    found = _DEFINITION.match(line)
    if found is None:
        raise HloTextError("an instruction", line)
    rest = found[3]
    end = shape_end(rest)
    opcode = _OPCODE.match(rest, end)
    if opcode is None:
        raise HloTextError("an instruction's opcode", line)
    start = opcode.end()
    close = closing_bracket(rest, start - 1)
    if close < 0:
        raise HloTextError("an instruction's operands", line)
    operand_text = rest[start:close]
    return Instruction(
        name=found[2],
        computation=computation,
        shape=rest[:end],
        opcode=opcode[1],
        operands=tuple(_NAME.findall(COMMENT.sub("", operand_text))),
        operand_text=operand_text,
        attributes=_attributes(rest[close + 1 :]),
        text=line,
        root=bool(found[1]),
    )


def operand_shapes(found: Instruction) -> list[tuple[str | None, str]]:
    """``(shape or None, name)`` of each operand, as the line prints them.

    XLA prints an operand's shape before its name except in fused
    computations of some backends (XLA:GPU), where the shape is ``None``.

    Example:
        >>> operand_shapes(instruction("  %d = f32[2]{0} add(f32[2]{0} %a, %b)"))
        [('f32[2]{0}', 'a'), (None, 'b')]
    """
    out: list[tuple[str | None, str]] = []
    for piece in top_level(COMMENT.sub("", found.operand_text)):
        head, _, name = piece.strip().rpartition(" ")
        if name.startswith("%"):
            out.append((head.strip() or None, name[1:]))
    return out


def _attributes(text: str) -> dict[str, str]:
    """``, key=value`` pairs after the operands; values may nest and quote."""
    out: dict[str, str] = {}
    at = 0
    while at < len(text):
        found = _ATTRIBUTE_START.match(text, at)
        if found is None:
            break
        key, start = found[1], found.end()
        at = len(text)
        for index, char, depth in structure_chars(text, start):
            if char == "," and depth == 0 and _ATTRIBUTE_START.match(text, index):
                at = index
                break
        out[key] = text[start:at]
    return out


_METADATA_ITEM: Final = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^\s}]+)')


def metadata(text: str) -> dict[str, str]:
    """The ``metadata={...}`` items of an instruction's text, strings unquoted.

    Example:
        >>> items = metadata('%a = f32[] add(%b, %c), metadata={op_name="jit(f)/add"'
        ...                  ' source_file="/x.py" source_line=7 stack_frame_id=2}')
        >>> items["op_name"], items["source_line"], items["stack_frame_id"]
        ('jit(f)/add', '7', '2')
    """
    start = text.find("metadata={")
    if start < 0:
        return {}
    items: dict[str, str] = {}
    for match in _METADATA_ITEM.finditer(text, start + len("metadata={")):
        items[match[1]] = (
            re.sub(r"\\(.)", r"\1", match[2][1:-1])
            if match[2].startswith('"')
            else match[2]
        )
        end = match.end()
        if end >= len(text) or text[end] == "}":
            break
    return items


def names_in(text: str) -> list[str]:
    """The ``%names`` in a piece of HLO text, without the ``%``.

    Example:
        >>> names_in("{%branch_0, %branch.1}")
        ['branch_0', 'branch.1']
    """
    return _NAME.findall(text)

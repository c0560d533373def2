"""XLA's HLO module text parsed: instructions, attributes, stack frames, shapes."""

import math
import re
from dataclasses import dataclass
from typing import Final

from nnx_introspect._xla.dump import (
    _FILE_LOCATION,
    _FILE_NAME,
    _STACK_FRAME,
    DumpFormatError,
    SourceLocation,
    _jaxlib,
)


class CollectiveFormatError(DumpFormatError):
    """XLA's HLO text holds a collective in a form this code does not read."""


# --- the module text -----------------------------------------------------------


@dataclass(frozen=True)
class _Instruction:
    name: str
    computation: str
    shape: str
    opcode: str
    operands: tuple[str, ...]
    operand_text: str
    attributes: dict[str, str]
    text: str
    root: bool


@dataclass(frozen=True)
class _Module:
    name: str
    num_partitions: int
    replica_count: int
    entry: str
    computations: dict[str, list[_Instruction]]
    instructions: dict[str, _Instruction]
    users: dict[str, list[_Instruction]]
    callers: dict[str, list[_Instruction]]
    frames: dict[int, tuple[SourceLocation, ...]]


_HEADER = re.compile(r"^HloModule (\S+?),?(?: |$)")


_COMPUTATION = re.compile(r"^(ENTRY )?%(\S+) \(.*\) -> .*\{$")


_INSTRUCTION = re.compile(r"^\s+(ROOT )?%(\S+) = (.*)$")


_NAME = re.compile(r"%([A-Za-z0-9_.\-]+)")


_OPCODE = re.compile(r" ([a-z][a-z0-9\-_]*)\(")


_ATTRIBUTE_START = re.compile(r", ([a-z_][a-z0-9_]*)=")


_SECTIONS = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")


def _format_error(what: str, line: str) -> CollectiveFormatError:
    shown = line.strip()
    shown = shown if len(shown) <= 400 else shown[:397] + "..."
    return CollectiveFormatError(
        f"XLA's HLO text holds {what} in a form this code does not read (written "
        f"for jaxlib 0.10.2 / libtpu 0.0.52; installed jaxlib {_jaxlib()}): "
        f"{shown!r}. No collective is skipped, so none is reported."
    )


def _parse_module(text: str) -> _Module:
    lines = text.splitlines()
    header = _HEADER.match(lines[0]) if lines else None
    if header is None:
        raise ValueError(
            "`hlo_text` must be an XLA HLO module (its first line 'HloModule "
            f"...'), got {text[:60]!r}; pass compiled_hlo_text(compiled)."
        )
    if sum(line.startswith("HloModule ") for line in lines) != 1:
        raise ValueError(
            "`hlo_text` holds several HLO modules; pass one module's text."
        )
    partitions = re.search(r"\bnum_partitions=(\d+)", lines[0])
    replicas = re.search(r"\breplica_count=(\d+)", lines[0])
    computations: dict[str, list[_Instruction]] = {}
    instructions: dict[str, _Instruction] = {}
    entry = ""
    current: str | None = None
    sections: dict[str, list[str]] = {}
    section = ""
    for line in lines[1:]:
        if current is None:
            if line in _SECTIONS:
                section = line
                sections[section] = []
                continue
            if not line.strip():
                section = ""
                continue
            if section:
                sections[section].append(line)
                continue
            found = _COMPUTATION.match(line)
            if found is None:
                raise _format_error("a computation header", line)
            current = found[2]
            computations[current] = []
            if found[1]:
                entry = current
            continue
        if line == "}":
            current = None
            continue
        instruction = _instruction(line, current)
        computations[current].append(instruction)
        instructions[instruction.name] = instruction
    if not entry:
        raise _format_error("an ENTRY computation", lines[0])
    users: dict[str, list[_Instruction]] = {}
    callers: dict[str, list[_Instruction]] = {}
    for instruction in instructions.values():
        for operand in instruction.operands:
            users.setdefault(operand, []).append(instruction)
        for called in _called(instruction):
            callers.setdefault(called, []).append(instruction)
    return _Module(
        name=header[1],
        num_partitions=int(partitions[1]) if partitions else 1,
        replica_count=int(replicas[1]) if replicas else 1,
        entry=entry,
        computations=computations,
        instructions=instructions,
        users=users,
        callers=callers,
        frames=_frames(sections),
    )


def _instruction(line: str, computation: str) -> _Instruction:
    found = _INSTRUCTION.match(line)
    if found is None:
        raise _format_error("an instruction", line)
    rest = found[3]
    end = _shape_end(rest)
    opcode = _OPCODE.match(rest, end)
    if opcode is None:
        raise _format_error("an instruction's opcode", line)
    start = opcode.end()
    close = _closing(rest, start - 1)
    if close < 0:
        raise _format_error("an instruction's operands", line)
    operand_text = rest[start:close]
    return _Instruction(
        name=found[2],
        computation=computation,
        shape=rest[:end],
        opcode=opcode[1],
        operands=tuple(_NAME.findall(re.sub(r"/\*.*?\*/", "", operand_text))),
        operand_text=operand_text,
        attributes=_attributes(rest[close + 1 :]),
        text=line,
        root=bool(found[1]),
    )


def _shape_end(text: str) -> int:
    """Where an instruction's shape (perhaps a nested tuple) ends."""
    depth = 0
    for at, char in enumerate(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == " " and depth == 0:
            return at
    return len(text)


def _closing(text: str, start: int) -> int:
    """The index of the bracket closing the one at ``start``, or -1."""
    depth = 0
    quote = ""
    at = start
    while at < len(text):
        char = text[at]
        if quote:
            if char == "\\":
                at += 1
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth == 0:
                return at
        at += 1
    return -1


def _attributes(text: str) -> dict[str, str]:
    """``, key=value`` pairs after the operands; values may nest and quote."""
    out: dict[str, str] = {}
    at = 0
    while at < len(text):
        found = _ATTRIBUTE_START.match(text, at)
        if found is None:
            break
        key, at = found[1], found.end()
        depth, quote, start = 0, "", at
        while at < len(text):
            char = text[at]
            if quote:
                if char == "\\":
                    at += 1
                elif char == quote:
                    quote = ""
            elif char in "\"'":
                quote = char
            elif char in "([{":
                depth += 1
            elif char in ")]}":
                depth -= 1
            elif depth == 0 and _ATTRIBUTE_START.match(text, at):
                break
            at += 1
        out[key] = text[start:at]
    return out


def _called(instruction: _Instruction) -> list[str]:
    """The computations ``instruction`` calls (async halves after the start: none)."""
    if instruction.opcode in ("async-update", "async-done"):
        return []
    names = []
    for key, value in instruction.attributes.items():
        if key in (
            "calls",
            "body",
            "condition",
            "to_apply",
            "branch_computations",
            "true_computation",
            "false_computation",
            "called_computations",
        ):
            names.extend(_NAME.findall(value))
    return names


def _frames(sections: dict[str, list[str]]) -> dict[int, tuple[SourceLocation, ...]]:
    """Stack frames by id (innermost first), as dump.py reads them from a dump."""
    tables: dict[str, dict[str, str]] = {}
    for name in ("FileNames", "FunctionNames"):
        table = {}
        for line in sections.get(name, []):
            row = _FILE_NAME.match(line)
            if row is None:
                raise _format_error("a numbered name", line)
            table[row[1]] = row[2]
        tables[name] = table
    locations: dict[int, SourceLocation] = {}
    for line in sections.get("FileLocations", []):
        row = _FILE_LOCATION.match(line)
        if (
            row is None
            or row[2] not in tables["FileNames"]
            or row[3] not in tables["FunctionNames"]
        ):
            raise _format_error("a file location", line)
        locations[int(row[1])] = SourceLocation(
            tables["FileNames"][row[2]], int(row[4]), tables["FunctionNames"][row[3]]
        )
    parents: dict[int, tuple[int, int | None]] = {}
    for line in sections.get("StackFrames", []):
        row = _STACK_FRAME.match(line)
        if row is None or int(row[2]) not in locations:
            raise _format_error("a stack frame", line)
        parents[int(row[1])] = (int(row[2]), int(row[3]) if row[3] else None)
    frames: dict[int, tuple[SourceLocation, ...]] = {}
    for frame in parents:
        stack, seen, at = [], set(), frame
        while at in parents and at not in seen:
            seen.add(at)
            location, parent = parents[at]
            stack.append(locations[location])
            # a frame's parent is printed as its id + 1, 1 for none (dump.py)
            at = parent - 1 if parent is not None else 0
        frames[frame] = tuple(stack)
    return frames


def _root(module: _Module, computation: str) -> _Instruction | None:
    found = [i for i in module.computations.get(computation, []) if i.root]
    return found[0] if len(found) == 1 else None


def _base(opcode: str) -> str:
    for suffix in ("-start", "-done"):
        if opcode.endswith(suffix):
            return opcode[: -len(suffix)]
    return opcode


# --- shapes and bytes ----------------------------------------------------------


_BITS: Final = {
    "pred": 8,
    **{t: 8 for t in ("s8", "u8")},
    **{t: 16 for t in ("s16", "u16", "f16", "bf16")},
    **{t: 32 for t in ("s32", "u32", "f32")},
    **{t: 64 for t in ("s64", "u64", "f64", "c64")},
    "c128": 128,
    **{t: 4 for t in ("s4", "u4", "f4e2m1fn")},
    **{t: 2 for t in ("s2", "u2")},
    **{t: 1 for t in ("s1", "u1")},
}


_ARRAY = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\](\{[^}]*\})?")


def _arrays(shape: str, line: str) -> list[tuple[str, tuple[int, ...], int]]:
    """``(dtype, dims, bytes)`` of each array of an XLA shape (tuples flattened)."""
    shape = re.sub(r"/\*.*?\*/", "", shape)
    out = []
    for item in re.finditer(r"[a-z][a-z0-9]*\[[^\]]*\](?:\{[^}]*\})?|token\b", shape):
        if item[0] == "token":
            continue
        array = _ARRAY.fullmatch(item[0])
        if array is None:  # pragma: no cover - the pattern above matched it
            raise _format_error("an array shape", line)
        dtype, dims_text, layout = array[1], array[2], array[3] or ""
        bits = 8 if dtype.startswith("f8") else _BITS.get(dtype)
        if bits is None:
            raise _format_error(f"an element type it knows ({dtype!r})", line)
        dims = tuple(int(d) for d in dims_text.replace("<=", "").split(",") if d)
        elements = math.prod(dims)
        packed = re.search(r"E\((\d+)\)", layout)
        if bits < 8:
            # sub-byte types take a byte each unless the layout packs them
            bits = int(packed[1]) if packed else 8
        out.append((dtype, dims, (elements * bits + 7) // 8))
    if not out and re.sub(r"[()\s,]|token(\[\])?", "", shape):
        raise _format_error("an array shape", line)
    return out


def _bytes(shape: str, line: str) -> int:
    return sum(nbytes for _, _, nbytes in _arrays(shape, line))


def _tuple_elements(shape: str) -> list[str]:
    """The top-level elements of a tuple shape (``[]`` for an array)."""
    shape = re.sub(r"/\*.*?\*/", "", shape).strip()
    if not shape.startswith("("):
        return []
    elements, depth, start = [], 0, 1
    for at, char in enumerate(shape):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth == 0:
                elements.append(shape[start:at].strip())
        elif char == "," and depth == 1:
            elements.append(shape[start:at].strip())
            start = at + 1
    return [e for e in elements if e]

"""A whole HLO module: its computations, instructions, users, callers and frames."""

import contextlib
import contextvars
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from nnx_introspect._xla.hlo.frames import SECTIONS, SourceLocation, stack_frames
from nnx_introspect._xla.hlo.instructions import Instruction, instruction, names_in
from nnx_introspect._xla.hlo.text import HloTextError, unclosed

__all__ = ["Module", "instruction_text", "parse_module", "parsed_once"]


@dataclass(frozen=True)
class Module:
    """One HLO module's text, parsed.

    Attributes:
        name: its name (``jit_train``).
        num_partitions: its header's ``num_partitions`` (1 when absent).
        replica_count: its header's ``replica_count`` (1 when absent).
        entry: the ENTRY computation's name.
        computations: each computation's instructions, in order.
        instructions: every instruction by name.
        users: the instructions that take each instruction as an operand.
        callers: the instructions that call each computation.
        frames: the stack-frame index (:func:`stack_frames`).
    """

    name: str
    num_partitions: int
    replica_count: int
    entry: str
    computations: dict[str, list[Instruction]]
    instructions: dict[str, Instruction]
    users: dict[str, list[Instruction]]
    callers: dict[str, list[Instruction]]
    frames: dict[int, tuple[SourceLocation, ...]]

    def root(self, computation: str) -> Instruction | None:
        """The ROOT of ``computation``; ``None`` unless it has exactly one."""
        found = [i for i in self.computations.get(computation, []) if i.root]
        return found[0] if len(found) == 1 else None


_HEADER: Final = re.compile(r"^HloModule (\S+?),?(?: |$)")
COMPUTATION: Final = re.compile(r"^(ENTRY )?%(\S+) \(.*\) -> .*\{$")
# a computation's end: HloComputation::Print names a thread other than the main
# one (XLA:TPU's "sparsecore") and may name the computation after a long one
CLOSING: Final = re.compile(r'^\}(?:, execution_thread="[^"]*")?(?: // \S+)?$')
_CALLED: Final = (
    "calls",
    "body",
    "condition",
    "to_apply",
    "branch_computations",
    "true_computation",
    "false_computation",
    "called_computations",
)


_STARTS: Final = re.compile(r"^\s*(?:ROOT )?%\S+ = ")


def instruction_text(lines: list[str], at: int) -> tuple[str, int]:
    r"""The instruction that starts at ``lines[at]``, and the index after it.

    An instruction whose attribute holds a line break (a Pallas kernel's
    ``kernel_metadata``, JSON printed over lines) goes on while its brackets
    or quotes stay open (:func:`~nnx_introspect._xla.hlo.text.unclosed`),
    never over a line that starts another instruction or a computation.

    Example:
        >>> lines = [
        ...     "  %k = f32[8]{0} custom-call(%a), frontend_attributes={m={",
        ...     '"x":"{\\"b\\": 1}"',
        ...     '}}, custom_call_target="tpu_custom_call"',
        ...     "  ROOT %r = f32[8]{0} negate(%k)",
        ... ]
        >>> text, after = instruction_text(lines, 0)
        >>> after, text.count("\n")
        (3, 2)
    """
    line, at = lines[at], at + 1
    while (
        at < len(lines)
        and unclosed(line)
        and not _STARTS.match(lines[at])
        and not COMPUTATION.match(lines[at])
    ):
        line, at = line + "\n" + lines[at], at + 1
    return line, at


_PARSED: contextvars.ContextVar[dict[str, Module] | None] = contextvars.ContextVar(
    "nnx_introspect_parsed_modules", default=None
)
"""Inside :func:`parsed_once`: each text parsed there, and its module."""


@contextlib.contextmanager
def parsed_once() -> Iterator[None]:
    r"""Inside: :func:`parse_module` parses a text once, its readers share the module.

    A compile's readers (its traffic, its collectives, its loops) each take
    the program's text; inside this context they share one parse of it. The
    modules are dropped when the context ends (or raises): nothing outlives it.

    Example:
        >>> text = "\n".join([
        ...     "HloModule jit_f",
        ...     "ENTRY %main (p: f32[8]) -> f32[8] {",
        ...     "  ROOT %p = f32[8]{0} parameter(0)",
        ...     "}",
        ... ])
        >>> with parsed_once():
        ...     parse_module(text) is parse_module(text)
        True
        >>> parse_module(text) is parse_module(text)
        False
    """
    token = _PARSED.set({})
    try:
        yield
    finally:
        _PARSED.reset(token)


def parse_module(text: str) -> Module:
    r"""A module's text (``compiled.as_text()``) parsed, every instruction read.

    Inside :func:`parsed_once`, a text parsed there before is not parsed again.

    Raises:
        HloTextError: no ``HloModule`` header, a computation header, an
            instruction or a stack frame this does not read, or no ENTRY.

    Example:
        >>> module = parse_module("\n".join([
        ...     "HloModule jit_f, num_partitions=2",
        ...     "",
        ...     "ENTRY %main (p: f32[8]) -> f32[8] {",
        ...     "  %p = f32[8]{0} parameter(0)",
        ...     "  ROOT %n = f32[8]{0} negate(%p)",
        ...     "}",
        ... ]))
        >>> module.entry, module.num_partitions, module.root("main").name
        ('main', 2, 'n')
        >>> [u.name for u in module.users["p"]]
        ['n']
    """
    parsed = _PARSED.get()
    if parsed is None:
        return _parse(text)
    if text not in parsed:
        parsed[text] = _parse(text)
    return parsed[text]


def _parse(text: str) -> Module:
    """:func:`parse_module`'s parse, every time."""
    lines = text.splitlines()
    header = _HEADER.match(lines[0]) if lines else None
    if header is None:
        raise HloTextError("an HloModule header", text[:60])
    partitions = re.search(r"\bnum_partitions=(\d+)", lines[0])
    replicas = re.search(r"\breplica_count=(\d+)", lines[0])
    computations: dict[str, list[Instruction]] = {}
    entry = ""
    current: str | None = None
    sections: dict[str, list[str]] = {}
    section = ""
    at = 1
    while at < len(lines):
        line, at = lines[at], at + 1
        if current is not None:
            if CLOSING.match(line):
                current = None
            else:
                line, at = instruction_text(lines, at - 1)
                computations[current].append(instruction(line, current))
        elif line in SECTIONS:
            section = line
            sections[section] = []
        elif not line.strip():
            section = ""
        elif section:
            sections[section].append(line)
        else:
            found = COMPUTATION.match(line)
            if found is None:
                raise HloTextError("a computation header", line)
            current = found[2]
            computations[current] = []
            entry = current if found[1] else entry
    if not entry:
        raise HloTextError("an ENTRY computation", lines[0])
    instructions = {i.name: i for body in computations.values() for i in body}
    users: dict[str, list[Instruction]] = {}
    callers: dict[str, list[Instruction]] = {}
    for found_instruction in instructions.values():
        for operand in found_instruction.operands:
            users.setdefault(operand, []).append(found_instruction)
        for called in called_computations(found_instruction):
            callers.setdefault(called, []).append(found_instruction)
    return Module(
        name=header[1],
        num_partitions=int(partitions[1]) if partitions else 1,
        replica_count=int(replicas[1]) if replicas else 1,
        entry=entry,
        computations=computations,
        instructions=instructions,
        users=users,
        callers=callers,
        frames=stack_frames(sections),
    )


def called_computations(found: Instruction) -> list[str]:
    """The computations ``found`` calls (async halves after the start: none)."""
    if found.opcode in ("async-update", "async-done"):
        return []
    return [
        name
        for key, value in found.attributes.items()
        if key in _CALLED
        for name in names_in(value)
    ]

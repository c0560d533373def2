"""Scanning HLO text: brackets, quotes, comments; the parser's one error."""

import re
from collections.abc import Iterator
from typing import Final

__all__ = ["HloTextError"]

COMMENT: Final = re.compile(r"/\*.*?\*/")


class HloTextError(ValueError):
    """A piece of HLO text this parser does not read.

    Attributes:
        what: what was expected (``"an instruction's opcode"``, ...).
        text: the text (usually the whole line) it was not found in.
        dtype: for an element type of unknown width, its name.

    Each reader turns it into its own error (``DumpFormatError``,
    ``CollectiveFormatError``) with its own wording.

    Example:
        >>> from nnx_introspect._xla.hlo import instruction
        >>> try:
        ...     instruction("  %x = f32[2]{0}")
        ... except HloTextError as error:
        ...     print(error.what)
        an instruction's opcode
    """

    def __init__(self, what: str, text: str, dtype: str | None = None) -> None:
        super().__init__(f"HLO text without {what}: {text[:200]!r}")
        self.what = what
        self.text = text
        self.dtype = dtype


def top_level(text: str) -> list[str]:
    """``text`` split at its commas outside brackets."""
    pieces, depth, start = [], 0, 0
    for at, char in enumerate(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            pieces.append(text[start:at])
            start = at + 1
    pieces.append(text[start:])
    return pieces


def shape_end(text: str) -> int:
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


_STRUCTURE: Final = re.compile(
    r"""(["'])(?:(?!\1)[^\\]|\\(?:.|\Z))*(?:\1|\Z)|[()\[\]{},]""", re.DOTALL
)
"""A quoted string (escapes inside, perhaps unterminated), a bracket or a comma."""


def structure_chars(text: str, start: int) -> Iterator[tuple[int, str, int]]:
    """``(index, bracket or comma, bracket depth after it)`` outside quoted strings.

    From ``start`` on; quote characters (``"`` or ``'``), what they enclose
    and escaped characters inside them are skipped, an unterminated quote
    runs to the end. The parser asks only where brackets close and which
    commas lie outside them: one regex jumps from one to the next, over the
    characters between (most of a line).

    Example:
        >>> for found in structure_chars('f(a, "b)", {c})', 0):
        ...     print(*found)
        1 ( 1
        3 , 1
        9 , 1
        11 { 2
        13 } 1
        14 ) 0
    """
    depth = 0
    for found in _STRUCTURE.finditer(text, start):
        if found[1] is not None:  # a quoted string: nothing in it counts
            continue
        char = found[0]
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        yield found.start(), char, depth


_QUOTED: Final = re.compile(
    r""""[^"\\]*(?:\\.[^"\\]*)*"|'[^'\\]*(?:\\.[^'\\]*)*'""", re.DOTALL
)
"""A whole quoted string (``"`` or ``'``), escapes inside."""


def unclosed(line: str) -> bool:
    r"""Whether ``line`` ends inside a bracket or a quoted string.

    XLA prints an attribute's value as it holds it: a Pallas kernel's
    ``kernel_metadata`` frontend attribute is JSON with line breaks in it,
    so one instruction can span lines; a line that leaves a bracket or a
    quote open goes on on the next. Quoted strings (escapes inside) are cut
    out, then the brackets left are counted.

    Example:
        >>> unclosed('%c = f32[] custom-call(), frontend_attributes={kernel_metadata={')
        True
        >>> unclosed('%c = f32[] custom-call(), backend_config={"a":"{\\"b\\": 1"}')
        False
        >>> unclosed('%c = f32[] custom-call(), backend_config="{(a"')
        False
        >>> unclosed('%c = f32[] custom-call(), backend_config="{(a')
        True
    """
    if '"' in line or "'" in line:
        line = _QUOTED.sub("", line)
        if '"' in line or "'" in line:
            return True  # a quote runs past the line's end
    opens = line.count("(") + line.count("[") + line.count("{")
    return opens > line.count(")") + line.count("]") + line.count("}")


def closing_bracket(text: str, start: int) -> int:
    """The index of the bracket closing the one at ``start``, or -1."""
    for at, char, depth in structure_chars(text, start):
        if char in ")]}" and depth == 0:
            return at
    return -1

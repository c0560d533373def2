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


def unquoted_chars(text: str, start: int) -> Iterator[tuple[int, str, int]]:
    """``(index, character, bracket depth after it)`` outside quoted strings.

    From ``start`` on; quote characters, what they enclose and escaped
    characters inside them are skipped.
    """
    depth, quote, at = 0, "", start
    while at < len(text):
        char = text[at]
        if quote:
            if char == "\\":
                at += 1
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        else:
            if char in "([{":
                depth += 1
            elif char in ")]}":
                depth -= 1
            yield at, char, depth
        at += 1


def closing_bracket(text: str, start: int) -> int:
    """The index of the bracket closing the one at ``start``, or -1."""
    for at, char, depth in unquoted_chars(text, start):
        if char in ")]}" and depth == 0:
            return at
    return -1

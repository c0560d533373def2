"""The collectives reader's error, and the HLO parser's pieces raising it."""

from nnx_introspect._xla.dump import DumpFormatError
from nnx_introspect._xla.hlo import HloTextError, Module, arrays, parse_module
from nnx_introspect._xla.toolchain import jaxlib_version

__all__ = ["CollectiveFormatError"]


class CollectiveFormatError(DumpFormatError):
    """XLA's HLO text holds a collective in a form this code does not read."""


def format_error(what: str, line: str) -> CollectiveFormatError:
    shown = line.strip()
    shown = shown if len(shown) <= 400 else shown[:397] + "..."
    return CollectiveFormatError(
        f"XLA's HLO text holds {what} in a form this code does not read (written "
        f"for jaxlib 0.10.2 / libtpu 0.0.52; installed jaxlib {jaxlib_version()}): "
        f"{shown!r}. No collective is skipped, so none is reported."
    )


def read_module(text: str) -> Module:
    """:func:`~nnx_introspect._xla.hlo.parse_module`, its error this reader's."""
    try:
        return parse_module(text)
    except HloTextError as error:
        raise format_error(error.what, error.text) from None


def shape_arrays(shape: str, line: str) -> list[tuple[str, tuple[int, ...], int]]:
    """``(dtype, dims, bytes)`` of each array of a shape (tuples flattened)."""
    try:
        return arrays(shape)
    except HloTextError as error:
        raise format_error(error.what, line) from None


def shape_bytes(shape: str, line: str) -> int:
    return sum(nbytes for _, _, nbytes in shape_arrays(shape, line))


def base_opcode(opcode: str) -> str:
    for suffix in ("-start", "-done"):
        if opcode.endswith(suffix):
            return opcode[: -len(suffix)]
    return opcode

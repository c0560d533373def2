"""Element types, shapes and their bytes, as XLA's shape printer writes them."""

import math
import re
from typing import Final

from nnx_introspect._xla.hlo.text import COMMENT, HloTextError

__all__ = [
    "ELEMENT_BITS",
    "array_bytes",
    "arrays",
    "element_bits",
    "memory_space",
    "parse_shape",
    "shape_bytes",
    "touched_tile_bytes",
    "tuple_elements",
]


ELEMENT_BITS: Final[dict[str, int]] = {
    "pred": 1,
    **{f"s{bits}": bits for bits in (1, 2, 4, 8, 16, 32, 64)},
    **{f"u{bits}": bits for bits in (1, 2, 4, 8, 16, 32, 64)},
    "f4e2m1fn": 4,
    "f6e2m3fn": 6,
    "f6e3m2fn": 6,
    **{
        name: 8
        for name in (
            "f8e3m4",
            "f8e4m3",
            "f8e4m3fn",
            "f8e4m3b11fnuz",
            "f8e4m3fnuz",
            "f8e5m2",
            "f8e5m2fnuz",
            "f8e8m0fnu",
        )
    },
    "f16": 16,
    "bf16": 16,
    "f32": 32,
    "f64": 64,
    "c64": 64,
    "c128": 128,
    "token": 0,
}
"""Bits of each XLA element type, as ``primitive_util::BitWidth`` gives them.

An element takes ``ceil(bits / 8)`` bytes (``primitive_util::ByteWidth``: a
``pred`` or an ``s4`` one byte each) unless its layout packs it (``E(bits)``);
a ``token`` takes none. ``tuple`` and ``opaque`` are not array types and have
no width. ``f6e2m3fn``/``f6e3m2fn`` (ml_dtypes' 6-bit floats) are listed for
a compiler that prints them.
"""

_FLOAT_FAMILIES: Final = {"f4": 4, "f6": 6, "f8": 8}
"""The width of a small float type this table does not list yet, by prefix."""


def element_bits(dtype: str) -> int | None:
    """The bits of XLA element type ``dtype``; ``None`` for one not known.

    Example:
        >>> element_bits("bf16"), element_bits("s4"), element_bits("pred")
        (16, 4, 1)
        >>> element_bits("f8e4m3b11fnuz"), element_bits("tuple")
        (8, None)
    """
    if dtype in ELEMENT_BITS:
        return ELEMENT_BITS[dtype]
    return _FLOAT_FAMILIES.get(dtype[:2]) if len(dtype) > 2 else None


_ARRAY: Final = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\](\{[^}]*\})?")


def parse_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """``(dtype, dims)`` of one shape's text; ``("tuple", ())`` for a tuple.

    Bounded dynamic dimensions (``<=8``) read as their bound; text that is no
    array (``token[]`` aside) gives its leading word and no dims.

    Example:
        >>> parse_shape("bf16[4,128,512]{2,1,0:T(8,128)(2,1)}")
        ('bf16', (4, 128, 512))
        >>> parse_shape("(f32[2]{0}, s32[])"), parse_shape("f32[<=8]")
        (('tuple', ()), ('f32', (8,)))
    """
    if text.startswith("("):
        return "tuple", ()
    array = _ARRAY.match(text)
    if array is None:
        return text.split("[")[0], ()
    dims = array[2].replace("<=", "")
    return array[1], tuple(int(d) for d in dims.split(",")) if dims else ()


def array_bytes(dtype: str, dims: tuple[int, ...], layout: str = "") -> int:
    """``ShapeUtil::ByteSizeOf`` of one array: elements times the element's bytes.

    A layout that packs its elements (``E(bits)``) takes ``ceil(elements *
    bits / 8)`` bytes; tiling padding is not counted (XLA's live ranges do
    not count it either).

    Raises:
        HloTextError: ``dtype`` is no element type this table knows.

    Example:
        >>> array_bytes("f32", (2, 3)), array_bytes("s4", (16,), "{0:E(4)}")
        (24, 8)
        >>> array_bytes("pred", (5,)), array_bytes("token", ())
        (5, 0)
    """
    bits = element_bits(dtype)
    if bits is None:
        raise HloTextError(f"an element type it knows ({dtype!r})", dtype, dtype)
    elements = math.prod(dims)
    packed = re.search(r"E\((\d+)\)", layout)
    if packed is not None:
        return -(-elements * int(packed[1]) // 8)
    return elements * -(-bits // 8)


def shape_bytes(text: str) -> int:
    """``ShapeUtil::ByteSizeOf(shape, 8)`` from a shape's text.

    An array: :func:`array_bytes`; a tuple: its index table, 8 bytes per
    element (its pointers); ``()`` none.

    Raises:
        HloTextError: an element type this table does not know.

    Example:
        >>> shape_bytes("f32[1024]{0}"), shape_bytes("(f32[8]{0}, (s32[], s32[]))")
        (4096, 16)
    """
    if text.startswith("("):
        return 8 * len(tuple_elements(text))
    dtype, dims = parse_shape(text)
    array = _ARRAY.match(text)
    layout = text[array.end(2) + 1 :] if array else ""
    return array_bytes(dtype, dims, layout)


def arrays(shape: str) -> list[tuple[str, tuple[int, ...], int]]:
    """``(dtype, dims, bytes)`` of each array of a shape, tuples flattened.

    Tokens hold no data and are left out.

    Raises:
        HloTextError: a piece that is no array, or an element type this table
            does not know.

    Example:
        >>> arrays("(f32[8]{0}, /*index=1*/bf16[2,2]{1,0}, token[])")
        [('f32', (8,), 32), ('bf16', (2, 2), 8)]
    """
    shape = COMMENT.sub("", shape)
    out = []
    for item in re.finditer(r"[a-z][a-z0-9]*\[[^\]]*\](?:\{[^}]*\})?|token\b", shape):
        array = _ARRAY.fullmatch(item[0])
        if item[0] == "token" or (array is not None and array[1] == "token"):
            continue
        if array is None:  # pragma: no cover - the pattern above matched it
            raise HloTextError("an array shape", shape)
        dtype, dims = parse_shape(item[0])
        out.append((dtype, dims, array_bytes(dtype, dims, array[3] or "")))
    if not out and re.sub(r"[()\s,]|token(\[\])?", "", shape):
        raise HloTextError("an array shape", shape)
    return out


def tuple_elements(shape: str) -> list[str]:
    """The top-level elements of a tuple shape (``[]`` for an array).

    Example:
        >>> tuple_elements("(f32[2]{0}, (s32[], u8[4]{0}))")
        ['f32[2]{0}', '(s32[], u8[4]{0})']
    """
    shape = COMMENT.sub("", shape).strip()
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


def memory_space(shape: str) -> int:
    """The ``S(n)`` memory space of an array's layout; 0 when it names none.

    Example:
        >>> memory_space("f32[8,128]{1,0:T(8,128)S(1)}"), memory_space("f32[8]{0}")
        (1, 0)
    """
    if shape.startswith("("):
        return 0
    layout = re.search(r"\{[^{}]*\}\s*$", shape)
    space = re.search(r"S\((\d+)\)", layout[0]) if layout else None
    return int(space[1]) if space else 0


_TILED: Final = re.compile(r"\{([\d,]*):T\((\d+),(\d+)\)(?:\((\d+),(\d+)\))?[^}]*\}")
"""A tiled layout: minor-to-major order, the first tile, an optional second."""


def touched_tile_bytes(shape: str, update: tuple[int, ...]) -> int | None:
    """Bytes of the whole tiles of ``shape`` an update of extent ``update`` touches.

    XLA:TPU stores an array in tiles (``T(8,128)``: 8 x 128 elements of the
    two minor-most dimensions of its layout; a second tile ``(2,1)`` packs
    two 16-bit elements into each 32-bit word along the second-minor one), and
    its memory moves whole tiles. An update one position wide along a tiled
    dimension (a decode step's new key and value, when the sequence is the
    cache's minor-most dimension) touches one tile per row of tiles: a 2-byte
    element can cost a 4 KiB tile. ``None`` when the layout states no tiling
    (XLA:GPU).

    Example:
        A decode step's update ``[128, 1, 6, 64]`` of a cache laid out with
        the sequence minor-most touches ``128 x 1 x 6 x 4`` tiles of 16 x 128
        bfloat16 (4 KiB): 12.6 MB, where its own elements are 98 KB.

        >>> cache = "bf16[128,1024,6,64]{1,3,2,0:T(8,128)(2,1)}"
        >>> touched_tile_bytes(cache, (128, 1, 6, 64))
        12582912
        >>> mqa = "bf16[16,4096,1,128]{3,1,2,0:T(8,128)(2,1)}"
        >>> touched_tile_bytes(mqa, (16, 1, 1, 128))
        65536
        >>> touched_tile_bytes("f32[8,16]{1,0}", (1, 16)) is None
        True
    """
    array = _ARRAY.match(COMMENT.sub("", shape).strip())
    layout = array[3] if array else None
    found = re.fullmatch(
        r"\{([\d,]*):T\((\d+),(\d+)\)(?:\((\d+),(\d+)\))?[^}]*\}", layout or ""
    )
    if array is None or found is None:
        return None
    dtype, dims = parse_shape(array[0])
    bits = element_bits(dtype)
    order = [int(d) for d in found[1].split(",") if d]
    if (
        bits is None
        or len(dims) != len(update)
        or len(order) != len(dims)
        or len(dims) < 2
    ):
        return None
    rows, lanes = int(found[2]), int(found[3])
    if found[4] is not None:  # the second tile packs narrow elements into words
        rows *= int(found[4])
        lanes *= int(found[5])
    minor, second = order[0], order[1]
    tile = {minor: lanes, second: rows}
    tiles = math.prod(
        -(-extent // tile[dim]) if dim in tile else extent
        for dim, extent in enumerate(update)
    )
    return tiles * rows * lanes * -(-bits // 8)

"""The dtype names ``--batch`` takes, checked without JAX or NumPy.

``--batch "int33[4,128]"`` is refused before JAX starts, with the closest
name. The names are those ``jnp.dtype`` reads as a number type (a test holds
each against it): NumPy's names and type codes, ``ml_dtypes``' narrow floats
and integers.
"""

import difflib

__all__ = ["DTYPES", "check_dtype"]

DTYPES = frozenset(
    {
        *("bool", "bool_", "b1"),
        *("int", "int_", "intc", "intp", "long", "longlong", "short", "byte"),
        *("int1", "int2", "int4", "int8", "int16", "int32", "int64"),
        *("uint", "uintc", "uintp", "ulong", "ulonglong", "ushort", "ubyte"),
        *("uint1", "uint2", "uint4", "uint8", "uint16", "uint32", "uint64"),
        *("i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8"),
        *("float", "half", "single", "double", "longdouble"),
        *("float16", "float32", "float64", "float128", "bfloat16"),
        *("f2", "f4", "f8", "f16"),
        *("float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn"),
        *("float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e5m3fnu"),
        *("float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"),
        *("complex", "complex32", "complex64", "complex128", "complex256"),
        *("csingle", "cdouble", "clongdouble", "c8", "c16", "c32"),
        *("b", "B", "h", "H", "i", "I", "l", "L", "q", "Q", "n", "N", "p", "P"),
        *("e", "f", "d", "g", "F", "D", "G"),
    }
)
"""Every dtype name ``--batch`` takes: the number types ``jnp.dtype`` reads."""

_SHOWN = ("int32", "float32", "bfloat16", "int8", "float16", "bool")


def check_dtype(name: str) -> None:
    """Raise ``ValueError`` (in ``--batch``'s words) unless ``name`` is a dtype.

    Example:
        >>> check_dtype("bfloat16")
        >>> check_dtype("int33")
        Traceback (most recent call last):
        ...
        ValueError: 'int33' is not a dtype (did you mean 'int32'?); use int32, \
float32, bfloat16, int8, float16, bool, ...
    """
    if name in DTYPES:
        return
    close = difflib.get_close_matches(name, sorted(DTYPES), 1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ValueError(f"{name!r} is not a dtype{hint}; use {', '.join(_SHOWN)}, ...")

"""How batch leaves, specs, errors and shares are written as text, specs as JSON.

JAX is imported only where a spec or a dtype is built, so the command line's
target lookup (which writes its errors here) starts without it.
"""

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jax
    from jax.sharding import PartitionSpec

__all__ = [
    "batch_str",
    "error_line",
    "spec_from_json",
    "spec_json",
    "spec_str",
    "whole_percent",
]


def error_line(error: BaseException) -> str:
    """``error`` as one line of at most 300 characters: its type and message.

    Survives what user code raises: ``SystemExit`` (its code is shown) and an
    exception whose ``__str__`` itself raises.

    Example:
        >>> error_line(ValueError("bad   value"))
        'ValueError: bad value'
        >>> error_line(SystemExit("stop"))
        "SystemExit('stop')"
    """
    name = type(error).__name__
    try:
        if isinstance(error, SystemExit):  # `sys.exit("message")` or a code
            text = f"{name}({error.code!r})"
        else:
            text = " ".join(str(error).split())
            text = f"{name}: {text}" if text else name
    except Exception:  # a user exception whose __str__ or __repr__ fails
        text = f"{name}: <unprintable>"
    return text if len(text) <= 300 else text[:297] + "..."


def batch_str(leaf: "jax.ShapeDtypeStruct") -> str:
    import jax.numpy as jnp

    return f"{jnp.dtype(leaf.dtype).name}[{','.join(str(d) for d in leaf.shape)}]"


def spec_str(spec: Iterable[Any]) -> str:
    """``P(...)`` as JAX writes it; list entries (orbax stores lists) as tuples.

    Example:
        >>> spec_str(("data", ["fsdp", "tp"], None))
        "P('data', ('fsdp', 'tp'), None)"
    """
    return (
        "P("
        + ", ".join(repr(tuple(a) if isinstance(a, list) else a) for a in spec)
        + ")"
    )


def spec_json(spec: "PartitionSpec") -> list[Any]:
    return [list(a) if isinstance(a, tuple) else a for a in spec]


def spec_from_json(entries: Any) -> "PartitionSpec":
    from jax.sharding import PartitionSpec

    return PartitionSpec(*(tuple(e) if isinstance(e, list) else e for e in entries))


def whole_percent(part: int, whole: int) -> int:
    """``part`` as a whole percent of ``whole``, halves rounded up, in exact ints.

    Example:
        >>> whole_percent(1, 8), whole_percent(1, 3)
        (13, 33)
    """
    return (200 * part + whole) // (2 * whole)

"""How batch leaves, specs and shares are written as text, and specs as JSON."""

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

# error_line lives in _text; kept here for _serve/programs.py and _step/loss.py
from nnx_introspect._text import error_line as error_line

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

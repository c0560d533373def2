"""How batch leaves, specs and errors are written as text, and specs as JSON."""

from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

__all__ = [
    "batch_str",
    "error_line",
    "spec_from_json",
    "spec_json",
    "spec_str",
]


def error_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    if len(text) > 300:
        text = text[:297] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def batch_str(leaf: jax.ShapeDtypeStruct) -> str:
    return f"{jnp.dtype(leaf.dtype).name}[{','.join(str(d) for d in leaf.shape)}]"


def spec_str(spec: PartitionSpec) -> str:
    return "P(" + ", ".join(repr(a) for a in spec) + ")"


def spec_json(spec: PartitionSpec) -> list[Any]:
    return [list(a) if isinstance(a, tuple) else a for a in spec]


def spec_from_json(entries: Any) -> PartitionSpec:
    return PartitionSpec(*(tuple(e) if isinstance(e, list) else e for e in entries))

"""Save-time shardings: as text for reports, as specs to compare with a target's."""

from typing import Any

from jax.sharding import NamedSharding, PartitionSpec

from nnx_introspect._inventory import VarRecord
from nnx_introspect._render import spec_str


def sharding_str(meta: Any) -> str:
    """A save-time sharding as text, or ``"-"`` if none was recorded."""
    if meta is None:
        return "-"
    spec = getattr(meta, "partition_spec", None)
    if spec is not None:
        # Orbax keeps the mesh shape as a NumPy array: never test its truth.
        names = getattr(meta, "axis_names", None)
        sizes = getattr(meta, "shape", None)
        mesh = ", ".join(
            f"{n}={int(s)}"
            for n, s in zip(
                () if names is None else names,
                () if sizes is None else sizes,
                strict=False,
            )
        )
        return f"{spec_str(tuple(spec))} on {mesh}"
    device = getattr(meta, "device_str", None)
    if device is not None:
        return f"single device {device}"
    return type(meta).__name__  # pragma: no cover - other sharding metadata


def normalize_spec(spec: tuple[Any, ...]) -> tuple[Any, ...]:
    """A spec with tuples for lists and no trailing ``None``."""
    out = [tuple(a) if isinstance(a, list) else a for a in spec]
    while out and out[-1] is None:
        out.pop()
    return tuple(out)


def target_spec(record: VarRecord) -> tuple[Any, ...] | None:
    """The spec a target record is annotated or placed with, or ``None``."""
    sharding = record.sharding
    if sharding is None and isinstance(
        getattr(record.array, "sharding", None), NamedSharding
    ):
        sharding = record.array.sharding
    if isinstance(sharding, NamedSharding):
        sharding = sharding.spec
    if isinstance(sharding, PartitionSpec | tuple | list):
        return normalize_spec(tuple(sharding))
    return None

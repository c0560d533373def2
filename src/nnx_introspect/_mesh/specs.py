"""Partition-spec entries: reading their axis names, writing and coercing specs."""

from collections.abc import Sequence
from typing import Any, TypeAlias

from jax.sharding import PartitionSpec

__all__ = [
    "Entry",
    "as_spec",
    "entry_axes",
    "entry_names",
    "spec_of",
]

Entry: TypeAlias = str | tuple[str, ...] | None


def entry_axes(entry: Any) -> tuple[str, ...]:
    if entry is None:
        return ()
    if isinstance(entry, tuple | list):
        return tuple(str(a) for a in entry if a is not None)
    return (str(entry),)


def entry_names(entry: Any) -> tuple[str, ...] | None:
    """The mesh axis names of a spec entry, or ``None`` if it is not a valid entry."""
    if entry is None:
        return ()
    if isinstance(entry, str):
        return (entry,)
    if isinstance(entry, tuple | list) and all(isinstance(a, str) for a in entry):
        return tuple(entry)
    return None


def as_spec(spec: Any, name: str) -> PartitionSpec:
    if spec is None:
        return PartitionSpec()
    if isinstance(spec, PartitionSpec):
        entries: Sequence[Any] = tuple(spec)
    elif isinstance(spec, tuple | list):
        entries = spec
    else:
        raise TypeError(
            f"`{name}` must be a PartitionSpec or a tuple of mesh axis names / None, "
            f"got {spec!r}. Write e.g. PartitionSpec(None, 'model')."
        )
    out: list[Entry] = []
    for entry in entries:
        if entry is None or isinstance(entry, str):
            out.append(entry)
        elif isinstance(entry, tuple | list) and all(isinstance(a, str) for a in entry):
            out.append(tuple(entry))
        else:
            raise TypeError(
                f"`{name}` entries must be None, an axis name or a tuple of axis "
                f"names, got {entry!r} in {spec!r}."
            )
    return PartitionSpec(*out)


def spec_of(entries: Sequence[Any]) -> PartitionSpec:
    """``PartitionSpec(*entries)``; entries it cannot hold are kept for the report."""
    try:
        return PartitionSpec(*entries)
    except Exception:
        return PartitionSpec(
            *(e if entry_names(e) is not None else repr(e) for e in entries)
        )

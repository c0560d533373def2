"""Partition-spec entries: reading their axis names, writing and coercing specs."""

from collections.abc import Iterable, Sequence
from typing import Any, TypeAlias

from jax.sharding import PartitionSpec

__all__ = [
    "EXPERT_AXIS",
    "EXPERT_MESH_AXES",
    "Entry",
    "as_spec",
    "entry_axes",
    "entry_names",
    "expert_mesh_axis",
    "spec_of",
]

Entry: TypeAlias = str | tuple[str, ...] | None

EXPERT_AXIS = "expert"
"""The logical name of an expert dimension: the first dimension of stacked expert
weights (``(experts, d_model, d_ff)``), as the examples' mixture of experts
annotates it. The plan splits it over :func:`expert_mesh_axis`'s axis unless
``logical_rules`` map it."""

EXPERT_MESH_AXES = ("expert", "ep", "fsdp")
"""The mesh axes an :data:`EXPERT_AXIS` dimension splits over, the first the mesh
has: an expert-parallel axis (``expert``, ``ep``), else ``fsdp`` (experts over
the data-parallel shards, as tunix's Qwen3 places them)."""


def expert_mesh_axis(axis_names: Iterable[str]) -> str | None:
    """The mesh axis experts split over: the first of :data:`EXPERT_MESH_AXES` named.

    The plan splits a dimension annotated ``"expert"`` over this axis of the
    mesh (``expert``, else ``ep``, else ``fsdp``); a model that constrains its
    activations by expert (the examples' mixture of experts) asks it too, so
    both agree. ``None`` when the mesh has none of them: the experts are
    replicated.

    Example:
        >>> expert_mesh_axis(("fsdp", "ep", "tp")), expert_mesh_axis(("fsdp", "tp"))
        ('ep', 'fsdp')
        >>> expert_mesh_axis(("tp",)) is None
        True
        >>> expert_mesh_axis("ep")
        Traceback (most recent call last):
        ...
        TypeError: `axis_names` must be a sequence of mesh axis names such as ...
    """
    if isinstance(axis_names, str) or not isinstance(axis_names, Iterable):
        raise TypeError(
            "`axis_names` must be a sequence of mesh axis names such as "
            f"('fsdp', 'ep'), got {axis_names!r:.60}. Pass mesh.axis_names."
        )
    names = set(axis_names)
    if not all(isinstance(name, str) for name in names):
        raise TypeError(
            "`axis_names` must hold mesh axis names (strings), got "
            f"{sorted(map(repr, names))!s:.80}. Pass mesh.axis_names."
        )
    return next((axis for axis in EXPERT_MESH_AXES if axis in names), None)


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

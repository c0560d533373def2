"""A mesh plan's repeated layers folded: one row for ``layers/*/q/kernel x32``.

A plan of a 32-layer model lists every layer's leaves, and a mesh that does
not divide them gives as many identical problems: over a thousand lines for
a 7B Llama with an optimizer. The plan's table folds the rows (and the
problems) that differ only in one list index into one, marked ``x32``, with
the rule :func:`~nnx_introspect.summarize` uses (``group_layers=True``; its
``fold_layers`` does the folding here too, on stand-in rows): a run is
folded only when it covers every index the model has at that position, so a
layer placed differently keeps its own rows. Folding is display only: the
report's leaves, problems, totals and JSON keep every leaf.
"""

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

from nnx_introspect._inventory import path_str
from nnx_introspect._mesh.records import LeafShard, MeshProblem
from nnx_introspect._render import spec_str
from nnx_introspect._summary import SummaryRow, fold_layers

__all__ = ["FoldedLeaf", "FoldedProblem", "fold", "short_source"]


@dataclasses.dataclass(frozen=True)
class FoldedLeaf:
    """One row of the plan's table: a leaf, or ``repeats`` leaves of a list.

    Attributes:
        path: The leaf's path; ``"*"`` stands for the folded list index.
        repeats: How many leaves the row stands for (1: one leaf).
        shape: One member's global shape.
        spec: The members' partition spec, as the table shows it.
        source: The members' source, as the table shows it.
        shard_shape: One member's shard shape (``None``: cannot be applied).
        replicated_over: The axes the members are replicated over.
        bytes_per_device: The members' bytes per device, summed.
        global_bytes: The members' global bytes, summed.
        num_devices: Devices in the mesh.
    """

    path: str
    repeats: int
    shape: tuple[int, ...]
    spec: str
    source: str
    shard_shape: tuple[int, ...] | None
    replicated_over: tuple[str, ...]
    bytes_per_device: int
    global_bytes: int
    num_devices: int

    @property
    def label(self) -> str:
        """The path, with ``x32`` when the row stands for 32 leaves."""
        return self.path + _times(self.repeats)

    @property
    def ideal_bytes(self) -> float:
        """The members' ideal share per device, summed."""
        return self.global_bytes / self.num_devices

    @property
    def waste_bytes(self) -> float:
        """The members' bytes per device above their ideal share, summed."""
        return self.bytes_per_device - self.ideal_bytes


@dataclasses.dataclass(frozen=True)
class FoldedProblem:
    """A problem, or the same problem of ``repeats`` layers, as the notes show it.

    Attributes:
        message: The message, naming the folded path (``layers/*/q/kernel``)
            followed by ``x32`` when it stands for several layers.
        severity: ``"error"`` or ``"warning"``.
        repeats: How many problems it stands for.
    """

    message: str
    severity: str
    repeats: int


class _LeafKey(NamedTuple):
    """What the table shows of one leaf besides its path and its bytes."""

    shape: tuple[int, ...]
    spec: str
    source: str
    shard_shape: tuple[int, ...] | None
    replicated_over: tuple[str, ...]
    dtype: str
    category: str


_PLACE = "\x00"
"""Where a problem's message names its own path, while problems are compared."""


def short_source(source: str) -> str:
    """The table's compact source: the path column already names the parameter."""
    if source.startswith("mirrors "):
        return "mirrors param"
    if source.startswith("gradient of "):
        return "as param"
    if source.startswith("rule "):
        return " ".join(source.split(" ")[:2])  # the notes list each rule's pattern
    return source


def _keys(path: str) -> tuple[str | int, ...]:
    """A ``/``-joined path's keys; an all-digit key is a list index."""
    return tuple(int(k) if k.isdigit() else k for k in path.split("/"))


def fold(
    leaves: Sequence[LeafShard],
    problems: Sequence[MeshProblem],
    num_devices: int,
    *,
    group: bool = True,
) -> tuple[tuple[FoldedLeaf, ...], tuple[FoldedProblem, ...]]:
    """``leaves`` and ``problems`` with the runs of a list of layers folded.

    Leaves fold when they differ only in one list index and agree on
    everything the table shows of one member (shape, spec, source, shard
    shape, replicated axes, dtype, category); problems when they differ only
    in that index (their messages equal once the path is set aside). Each
    run must cover every index the plan has at that position (leaves and
    problems share that census), else every member keeps its own row. With
    ``group=False`` nothing folds: one row per leaf and per problem.

    Example:
        >>> from flax import nnx
        >>> from nnx_introspect import mesh_config_report
        >>> class Stack(nnx.Module):
        ...     def __init__(self):
        ...         rngs = nnx.Rngs(0)
        ...         self.layers = nnx.List([nnx.Linear(4, 6, rngs=rngs) for _ in "abc"])
        >>> plan = mesh_config_report(Stack(), "model=4")
        >>> rows, _ = fold(plan.all_leaves, plan.problems, plan.num_devices)
        >>> [(row.path, row.repeats, row.bytes_per_device) for row in rows]
        [('layers/*/bias', 3, 72), ('layers/*/kernel', 3, 288)]
    """
    kinds: dict[_LeafKey | tuple[str, str, str], str] = {}
    stand_ins = []
    for leaf in leaves:
        leaf_key = _LeafKey(
            leaf.shape,
            spec_str(leaf.spec),
            short_source(leaf.source),
            leaf.shard_shape,
            leaf.replicated_over,
            leaf.dtype,
            leaf.category,
        )
        stand_ins.append(
            SummaryRow(
                path=_keys(leaf.path),
                kind=kinds.setdefault(leaf_key, f"leaf {len(kinds)}"),
                shape=leaf.shape,
                dtype=leaf.dtype,
                elements=leaf.bytes_per_device,
                nbytes=leaf.global_bytes,
            )
        )
    for problem in problems:
        named = f"`{problem.path}`"
        # A problem folds by its leaf's path; one that names no leaf never folds.
        own = bool(problem.path) and named in problem.message
        message = problem.message.replace(named, _PLACE) if own else problem.message
        stand_ins.append(
            SummaryRow(
                path=_keys(problem.path) if own else (problem.message,),
                kind=kinds.setdefault(
                    (problem.kind, problem.severity, message), f"problem {len(kinds)}"
                ),
                shape=None,
                dtype="",
                elements=0,
                nbytes=0,
            )
        )
    keys = {kind: key for key, kind in kinds.items()}
    rows: list[FoldedLeaf] = []
    notes: list[FoldedProblem] = []
    for row in fold_layers(stand_ins) if group else stand_ins:
        key = keys[row.kind]
        if isinstance(key, _LeafKey):
            rows.append(
                FoldedLeaf(
                    path=path_str(row.path),
                    repeats=row.repeats,
                    shape=key.shape,
                    spec=key.spec,
                    source=key.source,
                    shard_shape=key.shard_shape,
                    replicated_over=key.replicated_over,
                    bytes_per_device=row.elements,
                    global_bytes=row.nbytes,
                    num_devices=num_devices,
                )
            )
            continue
        _, severity, message = key
        label = f"`{path_str(row.path)}`" + _times(row.repeats)
        notes.append(
            FoldedProblem(message.replace(_PLACE, label), severity, row.repeats)
        )
    return tuple(rows), tuple(notes)


def _times(repeats: int) -> str:
    """``" x32"`` (a multiplication sign) for a row standing for 32; one: nothing."""
    return f" \u00d7{repeats}" if repeats > 1 else ""

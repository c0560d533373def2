"""Mesh configuration reports: how each state leaf would split over a device mesh.

All shard arithmetic is JAX's own: an ``AbstractMesh`` built from the proposed
axes, a ``NamedSharding`` per leaf, and ``NamedSharding.shard_shape``. No device
is needed, so a 2,048-device proposal can be planned on one CPU.
"""

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from flax import nnx
from jax.sharding import AbstractMesh, Mesh, NamedSharding, PartitionSpec

from nnx_introspect._inventory import VarRecord, dtype_nbytes, inventory
from nnx_introspect._render import Report, Table, format_bytes
from nnx_introspect._typing import IntLike, Target, as_int, typechecked

__all__ = ["LeafShard", "MeshConfigReport", "MeshProblem", "mesh_config_report"]

MeshLike = Mapping[str, IntLike] | Mesh | AbstractMesh


@dataclasses.dataclass(frozen=True)
class LeafShard:
    """How one state leaf is placed on the mesh.

    Attributes:
        path: The leaf's path, keys joined by ``/``.
        kind: The variable type's name (``"Param"``).
        shape: The global shape.
        dtype: The dtype's name.
        spec: The partition spec applied (``PartitionSpec()`` = replicated).
        shard_shape: The per-device shape from ``NamedSharding.shard_shape``, or
            ``None`` when the spec cannot be applied (see ``problems``).
        global_bytes: Bytes of the whole array.
        bytes_per_device: Bytes of one device's shard (the whole array when
            replicated; ``global_bytes`` when the spec cannot be applied).
    """

    path: str
    kind: str
    shape: tuple[int, ...]
    dtype: str
    spec: PartitionSpec
    shard_shape: tuple[int, ...] | None
    global_bytes: int
    bytes_per_device: int


@dataclasses.dataclass(frozen=True)
class MeshProblem:
    """A reason a leaf cannot be placed as specified.

    Attributes:
        path: The leaf's path (``""`` for mesh-wide problems).
        kind: A short code: ``"indivisible"``, ``"unknown-axis"``, ...
        message: A full sentence saying what is wrong and how to fix it.
    """

    path: str
    kind: str
    message: str


@dataclasses.dataclass(frozen=True)
class MeshConfigReport(Report):
    """Per-leaf placement of a model's state over a proposed mesh.

    Attributes:
        axis_names: The mesh axis names, in order.
        axis_sizes: The mesh axis sizes, in order.
        num_devices: The product of the axis sizes.
        n_state_leaves: Number of state leaves (every kind).
        n_params: Number of ``nnx.Param`` elements.
        param_bytes: Global bytes of the ``nnx.Param`` leaves.
        leaves: One :class:`LeafShard` per state leaf.
        problems: Every problem found, collected (never first-error-only).
    """

    SCHEMA = "nnx-introspect/mesh-config"
    SCHEMA_VERSION = 1

    axis_names: tuple[str, ...]
    axis_sizes: tuple[int, ...]
    num_devices: int
    n_state_leaves: int
    n_params: int
    param_bytes: int
    leaves: tuple[LeafShard, ...]
    problems: tuple[MeshProblem, ...] = ()

    @property
    def bytes_per_device(self) -> int:
        """Bytes each device holds for the whole state under this plan."""
        return sum(leaf.bytes_per_device for leaf in self.leaves)

    @property
    def ok(self) -> bool:
        """Whether every leaf could be placed as specified."""
        return not self.problems

    def table(self) -> Table:
        """The plan as a :class:`~nnx_introspect.Table`."""
        mesh = ", ".join(f"{n}={s}" for n, s in zip(self.axis_names, self.axis_sizes, strict=True))
        rows = tuple(
            (
                leaf.path,
                leaf.kind,
                str(leaf.shape),
                leaf.dtype,
                _spec_str(leaf.spec),
                "-" if leaf.shard_shape is None else str(leaf.shard_shape),
                format_bytes(leaf.bytes_per_device),
            )
            for leaf in self.leaves
        )
        totals = (("total per device", "", "", "", "", "", format_bytes(self.bytes_per_device)),)
        notes = tuple(p.message for p in self.problems)
        return Table(
            title=f"Mesh plan ({mesh}; {self.num_devices} devices)",
            columns=("path", "kind", "shape", "dtype", "spec", "shard shape", "bytes/device"),
            rows=rows,
            totals=totals,
            notes=notes,
        )

    def json_data(self) -> dict[str, Any]:
        """Exact figures for JSON output."""
        return {
            "mesh": dict(zip(self.axis_names, self.axis_sizes, strict=True)),
            "num_devices": self.num_devices,
            "n_state_leaves": self.n_state_leaves,
            "n_params": self.n_params,
            "param_bytes": self.param_bytes,
            "bytes_per_device": self.bytes_per_device,
            "leaves": [
                {
                    "path": leaf.path,
                    "kind": leaf.kind,
                    "shape": list(leaf.shape),
                    "dtype": leaf.dtype,
                    "spec": _spec_json(leaf.spec),
                    "shard_shape": None if leaf.shard_shape is None else list(leaf.shard_shape),
                    "global_bytes": leaf.global_bytes,
                    "bytes_per_device": leaf.bytes_per_device,
                }
                for leaf in self.leaves
            ],
            "problems": [dataclasses.asdict(p) for p in self.problems],
        }


def _spec_str(spec: PartitionSpec) -> str:
    return "P(" + ", ".join(repr(a) for a in spec) + ")"


def _spec_json(spec: PartitionSpec) -> list[Any]:
    return [list(a) if isinstance(a, tuple) else a for a in spec]


def as_abstract_mesh(mesh: Any, name: str = "mesh") -> AbstractMesh:
    """Turn a mapping, ``Mesh`` or ``AbstractMesh`` into an ``AbstractMesh``."""
    if isinstance(mesh, AbstractMesh):
        return mesh
    if isinstance(mesh, Mesh):
        return mesh.abstract_mesh
    if isinstance(mesh, Mapping):
        if not mesh:
            raise ValueError(f"`{name}` must name at least one axis, got {{}}.")
        names: list[str] = []
        sizes: list[int] = []
        for axis, size in mesh.items():
            if not isinstance(axis, str) or not axis:
                raise TypeError(
                    f"`{name}` axis names must be nonempty strings, got {axis!r}."
                )
            names.append(axis)
            sizes.append(as_int(size, f"{name}[{axis!r}]", minimum=1))
        return AbstractMesh(tuple(sizes), tuple(names))
    raise TypeError(  # pragma: no cover - beartype rejects these first
        f"`{name}` must be a mapping like {{'data': 2, 'model': 4}}, a Mesh or an "
        f"AbstractMesh, got {type(mesh).__name__}."
    )


def _metadata_spec(record: VarRecord) -> PartitionSpec:
    sharding = record.sharding
    if sharding is None:
        return PartitionSpec()
    if isinstance(sharding, NamedSharding):
        return sharding.spec
    if isinstance(sharding, PartitionSpec):
        return sharding
    return PartitionSpec(*sharding)


def plan_leaf(
    record: VarRecord, spec: PartitionSpec, mesh: AbstractMesh
) -> tuple[LeafShard, list[MeshProblem]]:
    """Place one leaf with ``spec`` on ``mesh`` using JAX's own arithmetic."""
    path = record.path_str
    problems: list[MeshProblem] = []
    known = set(mesh.axis_names)
    used: list[str] = []
    for entry in spec:
        axes = entry if isinstance(entry, tuple) else (entry,)
        for axis in axes:
            if axis is None:
                continue
            if axis not in known:
                problems.append(
                    MeshProblem(
                        path,
                        "unknown-axis",
                        f"`{path}`: spec {_spec_str(spec)} names axis {axis!r}, which "
                        f"the mesh {tuple(mesh.axis_names)} lacks. Add the axis or map "
                        "it with rules.",
                    )
                )
            elif axis in used:
                problems.append(
                    MeshProblem(
                        path,
                        "duplicate-axis",
                        f"`{path}`: spec {_spec_str(spec)} uses axis {axis!r} twice; "
                        "a mesh axis can split only one dimension.",
                    )
                )
            used.append(axis)
    if len(spec) > len(record.shape):
        problems.append(
            MeshProblem(
                path,
                "rank",
                f"`{path}`: spec {_spec_str(spec)} has {len(spec)} entries but the "
                f"array has rank {len(record.shape)}.",
            )
        )
    shard_shape: tuple[int, ...] | None = None
    if not problems:
        try:
            shard_shape = tuple(NamedSharding(mesh, spec).shard_shape(record.shape))
        except ValueError as err:  # jax's IndivisibleError is a ValueError
            problems.append(_indivisible(path, record.shape, spec, mesh, err))
    per_device = (
        record.nbytes if shard_shape is None else dtype_nbytes(record.dtype, math.prod(shard_shape))
    )
    leaf = LeafShard(
        path=path,
        kind=record.kind_name,
        shape=record.shape,
        dtype=str(record.dtype),
        spec=spec,
        shard_shape=shard_shape,
        global_bytes=record.nbytes,
        bytes_per_device=per_device,
    )
    return leaf, problems


def _indivisible(
    path: str, shape: tuple[int, ...], spec: PartitionSpec, mesh: AbstractMesh, err: Exception
) -> MeshProblem:
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes, strict=True))
    parts = []
    for dim, entry in enumerate(spec):
        if entry is None:
            continue
        axes = entry if isinstance(entry, tuple) else (entry,)
        factor = math.prod(sizes[a] for a in axes)
        if shape[dim] % factor:
            parts.append(
                f"dimension {dim} (size {shape[dim]}) over {'x'.join(axes)} "
                f"(product {factor})"
            )
    detail = "; ".join(parts) or str(err)
    return MeshProblem(
        path,
        "indivisible",
        f"`{path}` with shape {shape} does not divide: {detail}. Pad the dimension or "
        "choose axes whose product divides it.",
    )


@typechecked
def mesh_config_report(target: Target, mesh: MeshLike) -> MeshConfigReport:
    """Plan how every state leaf of ``target`` splits over ``mesh``.

    Each leaf gets the partition spec from its NNX sharding metadata
    (``nnx.with_partitioning`` / ``out_sharding``), or is replicated. Shard
    shapes come from ``NamedSharding(abstract_mesh, spec).shard_shape``; leaves
    whose spec cannot be applied are collected in ``problems``. No device is
    needed, and the model may be abstract.

    Args:
        target: An ``nnx.Module``, graph node or ``nnx.State``, concrete or
            abstract.
        mesh: A mapping axis name -> size (``{"data": 2, "model": 4}``), a
            ``jax.sharding.Mesh`` or an ``AbstractMesh``.

    Returns:
        A frozen :class:`MeshConfigReport`.

    Raises:
        TypeError: If ``mesh`` is not a mapping, ``Mesh`` or ``AbstractMesh``.
        ValueError: If a mesh size is not a positive integer.

    Example:
        >>> from flax import nnx
        >>> report = mesh_config_report(nnx.Linear(4, 3, rngs=nnx.Rngs(0)), {"model": 4})
        >>> report.num_devices, report.n_state_leaves, report.n_params
        (4, 2, 15)
        >>> report.leaves[1].path, report.leaves[1].shard_shape  # replicated
        ('kernel', (4, 3))
    """
    abstract = as_abstract_mesh(mesh)
    records = inventory(target)
    leaves: list[LeafShard] = []
    problems: list[MeshProblem] = []
    for record in records:
        leaf, found = plan_leaf(record, _metadata_spec(record), abstract)
        leaves.append(leaf)
        problems.extend(found)
    params = [r for r in records if issubclass(r.kind, nnx.Param)]
    return MeshConfigReport(
        axis_names=tuple(str(a) for a in abstract.axis_names),
        axis_sizes=tuple(int(s) for s in abstract.axis_sizes),
        num_devices=math.prod(int(s) for s in abstract.axis_sizes),
        n_state_leaves=len(records),
        n_params=sum(r.size for r in params),
        param_bytes=sum(r.nbytes for r in params),
        leaves=tuple(leaves),
        problems=tuple(problems),
    )



"""The mesh plan's records: how one leaf is placed (:class:`LeafShard`), and a problem.

:mod:`~nnx_introspect._mesh.plan` makes them, :mod:`~nnx_introspect._mesh.report`
totals and renders them.
"""

import dataclasses

from jax.sharding import PartitionSpec

__all__ = ["CATEGORIES", "LeafShard", "MeshProblem"]

CATEGORIES = ("params", "other state", "optimizer state", "gradients")
"""The kinds of memory a plan totals, in display order."""


@dataclasses.dataclass(frozen=True)
class LeafShard:
    """How one leaf is placed on the mesh.

    Attributes:
        path: The leaf's path, keys joined by ``/``.
        kind: The variable type's name (``"Param"``; ``"Gradient"`` for planned
            gradients).
        shape: The global shape.
        dtype: The dtype's name.
        spec: The partition spec applied (``PartitionSpec()`` = replicated).
        shard_shape: The per-device shape from ``NamedSharding.shard_shape``, or
            ``None`` when the spec cannot be applied (see ``problems``).
        global_bytes: Bytes of the whole array.
        bytes_per_device: Bytes of one device's shard (the whole array when
            replicated; ``global_bytes`` when the spec cannot be applied).
        category: One of :data:`CATEGORIES`.
        source: What gave the spec: ``"rule 0 'kernel$'"``, ``"metadata"``,
            ``"metadata + logical rules"``, ``"mirrors <param path>"``,
            ``"gradient of <param path>"`` or ``"default"`` (replicated).
        replicated_over: The mesh axes (of size > 1) the spec does not use: every
            device along them holds the same shard (every axis when the spec
            cannot be applied).
        num_devices: Devices in the mesh, for the ideal share.

    Example:
        >>> from flax import nnx
        >>> from nnx_introspect import mesh_config_report
        >>> model = nnx.Linear(4, 6, rngs=nnx.Rngs(0))
        >>> leaf = mesh_config_report(model, "model=4").leaves[1]
        >>> leaf.path, leaf.spec, leaf.shard_shape, leaf.bytes_per_device
        ('kernel', P(), (4, 6), 96)
        >>> leaf.replicated_over
        ('model',)
    """

    path: str
    kind: str
    shape: tuple[int, ...]
    dtype: str
    spec: PartitionSpec
    shard_shape: tuple[int, ...] | None
    global_bytes: int
    bytes_per_device: int
    category: str = "params"
    source: str = "default"
    replicated_over: tuple[str, ...] = ()
    num_devices: int = 1

    @property
    def ideal_bytes(self) -> float:
        """``global_bytes / num_devices``: accounting, not a placement."""
        return self.global_bytes / self.num_devices

    @property
    def waste_bytes(self) -> float:
        """Bytes per device above the ideal share (replication overhead)."""
        return self.bytes_per_device - self.ideal_bytes


@dataclasses.dataclass(frozen=True)
class MeshProblem:
    """A reason a leaf cannot be placed as specified, or a warning about the plan.

    Attributes:
        path: The leaf's path (``""`` for mesh-wide problems).
        kind: A short code: ``"indivisible"``, ``"unknown-axis"``,
            ``"duplicate-axis"``, ``"rank"``, ``"invalid-spec"`` (an entry or
            spec JAX refuses for another reason), ``"mesh-too-large"``,
            ``"unmatched-rule"``, ``"optimizer-metadata"``, ``"experts"`` (a
            mesh axis that does not divide a model's routed experts),
            ``"router"`` (a router sending each token to more experts than it
            has).
        message: A full sentence saying what is wrong and how to fix it.
        severity: ``"error"`` (the plan cannot be applied) or ``"warning"``.
        dimension: For ``"indivisible"``: the array dimension that does not divide.
        size: For ``"indivisible"``: that dimension's size.
        axes: The mesh axes involved.
        product: For ``"indivisible"``: the product of those axes' sizes.

    Example:
        >>> from flax import nnx
        >>> from jax.sharding import PartitionSpec as P
        >>> from nnx_introspect import mesh_config_report
        >>> model = nnx.Linear(4, 6, rngs=nnx.Rngs(0))
        >>> rules = [("kernel", P(None, "model"))]
        >>> report = mesh_config_report(model, "model=4", rules=rules)
        >>> problem = report.errors[0]
        >>> problem.kind, problem.path, problem.dimension, problem.size, problem.product
        ('indivisible', 'kernel', 1, 6, 4)
    """

    path: str
    kind: str
    message: str
    severity: str = "error"
    dimension: int | None = None
    size: int | None = None
    axes: tuple[str, ...] = ()
    product: int | None = None

"""Parameter fingerprints: cheap per-leaf evidence for comparing runs.

A fingerprint records, per leaf, a few statistics (sum, L2 norm, min, max) and a
SHA-256 hash of the leaf's bytes. Equal hashes are strong evidence that two
leaves hold the same bytes; equal statistics are weak evidence (``[1, 3]`` and
``[2, 2]`` have the same sum). Neither is a proof: to prove, compare the states
themselves with :func:`~nnx_introspect.compare_states`.
"""

import dataclasses
import hashlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nnx_introspect._compare import check_leaves, is_global, is_key_dtype, json_float
from nnx_introspect._inventory import VarRecord, inventory, require_values
from nnx_introspect._nnx import select_state
from nnx_introspect._render import Report, Table
from nnx_introspect._typing import ArgumentError, Target, typechecked

__all__ = [
    "LeafFingerprint",
    "ParamFingerprint",
    "param_fingerprint",
]


@dataclasses.dataclass(frozen=True)
class LeafFingerprint:
    """The fingerprint of one state leaf.

    Attributes:
        path: The leaf's path, keys joined by ``/``.
        kind: The variable type's name (``"Param"``).
        shape: The shape.
        dtype: The dtype's name.
        sum: Sum of the elements, accumulated in float64 (``None`` for PRNG keys
            and complex values).
        l2_norm: Square root of the sum of squares, in float64 (``None`` likewise).
        min: Smallest element (``None`` likewise, or for an empty leaf).
        max: Largest element (``None`` likewise, or for an empty leaf).
        sha256: Hex SHA-256 of the dtype name, the shape and the raw bytes (key
            data for PRNG keys).

    Example:
        >>> from flax import nnx
        >>> from nnx_introspect import param_fingerprint
        >>> leaf = param_fingerprint(nnx.Linear(4, 3, rngs=nnx.Rngs(0))).leaves[0]
        >>> leaf.path, leaf.sum, leaf.l2_norm, len(leaf.sha256)
        ('bias', 0.0, 0.0, 64)
    """

    path: str
    kind: str
    shape: tuple[int, ...]
    dtype: str
    sum: float | None
    l2_norm: float | None
    min: float | None
    max: float | None
    sha256: str


@dataclasses.dataclass(frozen=True)
class ParamFingerprint(Report):
    """Per-leaf fingerprints of a state: evidence, not proof, of equality.

    Attributes:
        leaves: One :class:`LeafFingerprint` per matching leaf, in state order.

    Example:
        >>> from flax import nnx
        >>> from nnx_introspect import param_fingerprint
        >>> a = param_fingerprint(nnx.Linear(4, 3, rngs=nnx.Rngs(0)))
        >>> b = param_fingerprint(nnx.Linear(4, 3, rngs=nnx.Rngs(1)))
        >>> a.changed_paths(b)
        ('kernel',)
    """

    SCHEMA = "nnx-introspect/param-fingerprint"
    SCHEMA_VERSION = 1

    leaves: tuple[LeafFingerprint, ...]

    @property
    def digest(self) -> str:
        """One SHA-256 over every leaf's path and hash: equal digests, equal bytes."""
        h = hashlib.sha256()
        for leaf in self.leaves:
            h.update(f"{leaf.path}\0{leaf.sha256}\0".encode())
        return h.hexdigest()

    def changed_paths(self, other: "ParamFingerprint") -> tuple[str, ...]:
        """Paths whose hash differs from ``other``'s, or present in only one of them.

        Example:
            >>> from flax import nnx
            >>> a = param_fingerprint(nnx.Linear(2, 2, rngs=nnx.Rngs(0)))
            >>> b = param_fingerprint(nnx.Linear(2, 2, rngs=nnx.Rngs(1)))
            >>> a.changed_paths(b)
            ('kernel',)
        """
        if not isinstance(other, ParamFingerprint):
            raise TypeError(
                "`other` must be a ParamFingerprint (from `param_fingerprint`), got "
                f"{type(other).__name__}. Fingerprint the other model first."
            )
        mine = {leaf.path: leaf.sha256 for leaf in self.leaves}
        theirs = {leaf.path: leaf.sha256 for leaf in other.leaves}
        paths = dict.fromkeys([*mine, *theirs])
        return tuple(p for p in paths if mine.get(p) != theirs.get(p))

    def table(self) -> Table:
        """The fingerprint as a :class:`~nnx_introspect.Table`."""

        def num(x: float | None) -> str:
            return "-" if x is None else f"{x:.6g}"

        rows = tuple(
            (
                leaf.path,
                leaf.kind,
                str(leaf.shape),
                leaf.dtype,
                num(leaf.sum),
                num(leaf.l2_norm),
                num(leaf.min),
                num(leaf.max),
                leaf.sha256[:16],
            )
            for leaf in self.leaves
        )
        return Table(
            title=f"Parameter fingerprint ({len(self.leaves)} leaves)",
            columns=(
                "path",
                "kind",
                "shape",
                "dtype",
                "sum",
                "L2",
                "min",
                "max",
                "sha256",
            ),
            rows=rows,
            totals=(("digest", "", "", "", "", "", "", "", self.digest[:16]),),
            notes=(
                "Evidence, not proof: equal statistics do not imply equal values; "
                "equal hashes mean equal bytes. Use compare_states to prove equality.",
            ),
        )

    def json_data(self) -> dict[str, Any]:
        """Full hashes and float64 statistics (non-finite values as strings)."""
        return {
            "digest": self.digest,
            "leaves": [
                {
                    "path": leaf.path,
                    "kind": leaf.kind,
                    "shape": list(leaf.shape),
                    "dtype": leaf.dtype,
                    "sum": json_float(leaf.sum),
                    "l2_norm": json_float(leaf.l2_norm),
                    "min": json_float(leaf.min),
                    "max": json_float(leaf.max),
                    "sha256": leaf.sha256,
                }
                for leaf in self.leaves
            ],
        }


def _leaf_fingerprint(record: VarRecord) -> LeafFingerprint:
    value = record.array
    key = is_key_dtype(record.dtype)
    if key:
        value = jax.random.key_data(value)
    host = np.ascontiguousarray(np.asarray(jax.device_get(value)))
    dtype_name = str(getattr(record.dtype, "name", record.dtype))
    h = hashlib.sha256(f"{dtype_name}{list(record.shape)}\0".encode())
    h.update(host.tobytes())
    stats: list[float | None] = [None, None, None, None]
    if not key and not jnp.issubdtype(host.dtype, jnp.complexfloating):
        wide = host.astype(np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            stats[0] = float(np.sum(wide))
            stats[1] = float(np.sqrt(np.sum(np.square(wide))))
            if wide.size:
                stats[2] = float(np.min(wide))
                stats[3] = float(np.max(wide))
    return LeafFingerprint(
        path=record.path_str,
        kind=record.kind_name,
        shape=record.shape,
        dtype=dtype_name,
        sum=stats[0],
        l2_norm=stats[1],
        min=stats[2],
        max=stats[3],
        sha256=h.hexdigest(),
    )


@typechecked
def param_fingerprint(target: Target, /, *filters: Any) -> ParamFingerprint:
    """Fingerprint every matching leaf: sum, L2 norm, min, max and a content hash.

    Cheap evidence for comparing runs, not proof: two leaves with equal
    statistics can differ, and only the hash (SHA-256 of the dtype, shape and
    raw bytes) tells equal bytes apart from unequal ones. By default only
    ``nnx.Param`` leaves are fingerprinted; pass ``...`` for the whole state.
    Statistics are accumulated in float64 on the host, so they are the same
    on every backend for the same bytes. PRNG keys are hashed by their key data
    and have no statistics. ``target`` is not modified.

    Args:
        target: A concrete ``nnx.Module``, graph node or ``nnx.State``.
        *filters: NNX filters; default ``nnx.Param``. Several select their union.

    Returns:
        A :class:`ParamFingerprint`; compare two with ``digest`` or
        ``changed_paths``.

    Raises:
        TypeError: If a leaf is not numeric (``None``, a string, an object).
        ValueError: If ``target`` is abstract (it has no values to fingerprint),
            or holds arrays sharded over several processes (``jax.distributed``):
            a content hash needs all bytes on one host. Use
            :func:`~nnx_introspect.compare_states` or
            :func:`~nnx_introspect.param_sum` there.

    Example:
        >>> from flax import nnx
        >>> fp = param_fingerprint(nnx.Linear(2, 2, rngs=nnx.Rngs(0)))
        >>> [(leaf.path, leaf.sum) for leaf in fp.leaves][0]
        ('bias', 0.0)
        >>> fp.digest == param_fingerprint(nnx.Linear(2, 2, rngs=nnx.Rngs(0))).digest
        True
    """
    selected = filters or (nnx.Param,)
    check_leaves(select_state(target, selected), "target")
    records = inventory(target, selected)
    require_values(
        records,
        "it has no values to fingerprint",
        "Build the model concretely, or compare shapes with `compare_states`.",
    )
    sharded = [r.path_str for r in records if is_global(r.array)]
    if sharded:
        raise ArgumentError(
            "target",
            f"`target` holds {len(sharded)} array(s) sharded over several processes "
            f"(first: {sharded[0]!r}); a SHA-256 of their bytes needs every byte on "
            "one host, and no process holds them all. Compare sharded models with "
            "`compare_states` or `param_sum`, which work where the shards live, or "
            "fingerprint a fully addressable copy (for example "
            "`jax.experimental.multihost_utils.process_allgather(x, tiled=True)` "
            "per leaf, which copies each whole array to every host).",
        )
    return ParamFingerprint(leaves=tuple(_leaf_fingerprint(r) for r in records))

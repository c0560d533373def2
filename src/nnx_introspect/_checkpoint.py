"""Checkpoint checks with orbax: read the metadata, compare it, then restore.

A restore that fails on a missing key or a shape mismatch fails after reading
gigabytes. These functions read an orbax checkpoint's metadata (its tree,
shapes, dtypes and shardings; no array) and compare it per path with a model
before any restore, and restore into a model's abstract state to compare values.

Accepted layouts (detected from the metadata, reported as ``layout``):

- ``"nnx-state"``: an ``nnx.State`` saved as is, the Flax way:
  ``ocp.StandardCheckpointer().save(path, nnx.state(model))``. Orbax stores each
  variable's array under an extra ``value`` key, which is dropped for comparison.
- ``"pure-dict"``: nested mappings of arrays, such as ``nnx.to_pure_dict(state)``.

Orbax stores arrays, not NNX variable types, so a checkpoint cannot tell a
``Param`` from a ``BatchStat``; PRNG keys are stored (and compared) as their
``uint32`` key data.
"""

import dataclasses
import os
import pathlib
from typing import Any, Literal

import jax
from jax.sharding import NamedSharding, PartitionSpec

from nnx_introspect._compare import (
    Comparable,
    StateDiff,
    Tolerance,
    check_tolerance,
    diff_records,
    is_key_dtype,
    records_of,
)
from nnx_introspect._inventory import VarRecord, metadata_inventory, require_values
from nnx_introspect._nnx import keypath_keys
from nnx_introspect._render import Report, Table, format_bytes
from nnx_introspect._typing import typechecked

__all__ = [
    "CheckpointLeaf",
    "CheckpointReport",
    "check_checkpoint",
    "checkpoint_report",
    "verify_restore",
]

PathLike = str | os.PathLike[str]
Layout = Literal["nnx-state", "pure-dict"]
Key = tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class CheckpointLeaf:
    """One array of a checkpoint, as its metadata describes it.

    Attributes:
        path: The array's path, keys joined by ``/`` (without the ``value`` key
            of the ``"nnx-state"`` layout).
        shape: The global shape.
        dtype: The stored dtype's name.
        size: Number of elements, an exact Python ``int``.
        nbytes: Packed bytes of the array (not of its compressed files).
        sharding: How it was sharded when saved (``"P(None, 'model') on
            model=8"``, ``"single device cpu:0"``), or ``"-"`` if not recorded.

    Example:
        >>> import tempfile, pathlib
        >>> import orbax.checkpoint as ocp
        >>> from flax import nnx
        >>> from nnx_introspect import checkpoint_report
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "ckpt"
        >>> with ocp.StandardCheckpointer() as checkpointer:
        ...     checkpointer.save(path, nnx.state(nnx.Linear(4, 3, rngs=nnx.Rngs(0))))
        >>> leaf = checkpoint_report(path).leaves[1]
        >>> leaf.path, leaf.shape, leaf.dtype, leaf.nbytes
        ('kernel', (4, 3), 'float32', 48)
    """

    path: str
    shape: tuple[int, ...]
    dtype: str
    size: int
    nbytes: int
    sharding: str


@dataclasses.dataclass(frozen=True)
class CheckpointReport(Report):
    """The contents of an orbax checkpoint, read from its metadata alone.

    Attributes:
        path: The checkpoint directory.
        layout: ``"nnx-state"`` or ``"pure-dict"`` (see the module docs).
        leaves: One :class:`CheckpointLeaf` per stored array, in tree order.

    Example:
        >>> import tempfile, pathlib
        >>> import orbax.checkpoint as ocp
        >>> from flax import nnx
        >>> from nnx_introspect import checkpoint_report
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "ckpt"
        >>> with ocp.StandardCheckpointer() as checkpointer:
        ...     checkpointer.save(path, nnx.state(nnx.Linear(4, 3, rngs=nnx.Rngs(0))))
        >>> report = checkpoint_report(path)
        >>> report.layout, [leaf.path for leaf in report.leaves]
        ('nnx-state', ['bias', 'kernel'])
    """

    SCHEMA = "nnx-introspect/checkpoint"
    SCHEMA_VERSION = 1

    path: str
    layout: Layout
    leaves: tuple[CheckpointLeaf, ...]

    @property
    def n_elements(self) -> int:
        """Elements stored, over every array."""
        return sum(leaf.size for leaf in self.leaves)

    @property
    def nbytes(self) -> int:
        """Packed bytes of every array (uncompressed)."""
        return sum(leaf.nbytes for leaf in self.leaves)

    def table(self) -> Table:
        """The checkpoint as a :class:`~nnx_introspect.Table`."""
        rows = tuple(
            (
                leaf.path,
                str(leaf.shape),
                leaf.dtype,
                f"{leaf.size:,}",
                format_bytes(leaf.nbytes),
                leaf.sharding,
            )
            for leaf in self.leaves
        )
        totals = (
            (
                f"{len(self.leaves)} arrays",
                "",
                "",
                f"{self.n_elements:,}",
                format_bytes(self.nbytes),
                "",
            ),
        )
        return Table(
            title=f"Checkpoint {self.path} ({self.layout} layout)",
            columns=("path", "shape", "dtype", "elements", "bytes", "sharding"),
            rows=rows,
            totals=totals,
            notes=("Read from metadata only: no array was loaded.",),
        )

    def json_data(self) -> dict[str, Any]:
        """Exact figures for JSON output."""
        return {
            "path": self.path,
            "layout": self.layout,
            "n_arrays": len(self.leaves),
            "n_elements": self.n_elements,
            "nbytes": self.nbytes,
            "leaves": [
                {**dataclasses.asdict(leaf), "shape": list(leaf.shape)}
                for leaf in self.leaves
            ],
        }


@dataclasses.dataclass(frozen=True)
class _Checkpoint:
    path: pathlib.Path
    tree: Any
    layout: Layout
    records: tuple[VarRecord, ...]  # paths without the nnx-state "value" key


def resolve_checkpoint(path: PathLike) -> pathlib.Path:
    """The absolute checkpoint directory, or the error a bad ``path`` deserves.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        ValueError: If it has no orbax ``_METADATA`` file (the message lists the
            checkpoints found one or two levels below, such as ``7/default``).
    """
    p = pathlib.Path(path).expanduser().absolute()
    if not p.exists():
        raise FileNotFoundError(
            f"`path` {os.fspath(path)!r} does not exist. Pass the directory an orbax "
            "checkpointer saved to (the one holding a `_METADATA` file)."
        )
    if not (p / "_METADATA").is_file():
        found = sorted(
            str(m.parent.relative_to(p))
            for pattern in ("*/_METADATA", "*/*/_METADATA")
            for m in p.glob(pattern)
        )
        hint = (
            f" It contains checkpoints at: {', '.join(found[:5])}; pass one of those."
            if found
            else " Pass the directory given to `save` (it holds `_METADATA`)."
        )
        raise ValueError(
            f"`path` {os.fspath(path)!r} is not an orbax PyTree checkpoint: it has no "
            f"`_METADATA` file.{hint}"
        )
    return p


def _read(path: PathLike) -> _Checkpoint:
    import orbax.checkpoint as ocp  # deferred: orbax is slow to import

    p = resolve_checkpoint(path)
    with ocp.PyTreeCheckpointer() as checkpointer:
        meta = checkpointer.metadata(p)
    item = getattr(meta, "item_metadata", meta)
    tree = getattr(item, "tree", item)
    raw = metadata_inventory(tree)
    state_layout = bool(raw) and all(
        len(r.path) >= 2 and str(r.path[-1]) == "value" for r in raw
    )
    records = tuple(
        dataclasses.replace(r, path=r.path[:-1]) if state_layout else r for r in raw
    )
    return _Checkpoint(
        path=p,
        tree=tree,
        layout="nnx-state" if state_layout else "pure-dict",
        records=records,
    )


def _key(path: tuple[Any, ...]) -> Key:
    return tuple(str(k) for k in path)


def _sharding_str(meta: Any) -> str:
    if meta is None:
        return "-"
    spec = getattr(meta, "partition_spec", None)
    if spec is not None:
        names = getattr(meta, "axis_names", None) or ()
        sizes = getattr(meta, "shape", None) or ()
        mesh = ", ".join(f"{n}={s}" for n, s in zip(names, sizes, strict=False))
        return f"{_spec_str(tuple(spec))} on {mesh}"
    device = getattr(meta, "device_str", None)
    if device is not None:
        return f"single device {device}"
    return type(meta).__name__  # pragma: no cover - other sharding metadata


def _spec_str(spec: tuple[Any, ...]) -> str:
    return "P(" + ", ".join(repr(a) for a in spec) + ")"


def _normalize_spec(spec: tuple[Any, ...]) -> tuple[Any, ...]:
    out = [tuple(a) if isinstance(a, list) else a for a in spec]
    while out and out[-1] is None:
        out.pop()
    return tuple(out)


def _target_spec(record: VarRecord) -> tuple[Any, ...] | None:
    sharding = record.sharding
    if sharding is None and isinstance(
        getattr(record.array, "sharding", None), NamedSharding
    ):
        sharding = record.array.sharding
    if isinstance(sharding, NamedSharding):
        sharding = sharding.spec
    if isinstance(sharding, PartitionSpec | tuple | list):
        return _normalize_spec(tuple(sharding))
    return None


def _as_stored(record: VarRecord) -> VarRecord:
    """A PRNG key record as orbax stores it: its ``uint32`` key data."""
    if not is_key_dtype(record.dtype):
        return record
    data = jax.eval_shape(
        jax.random.key_data, jax.ShapeDtypeStruct(record.shape, record.dtype)
    )
    shape = tuple(int(d) for d in data.shape)
    return dataclasses.replace(record, shape=shape, dtype=data.dtype)


def _notes(ckpt: _Checkpoint, target: tuple[VarRecord, ...]) -> list[str]:
    notes = [f"Checkpoint layout: {ckpt.layout}."]
    if any(is_key_dtype(r.dtype) for r in target):
        notes.append(
            "PRNG keys are compared as their uint32 key data, as orbax stores them."
        )
    saved = {_key(r.path): r for r in ckpt.records}
    for record in target:
        spec = _target_spec(record)
        stored = saved.get(_key(record.path))
        stored_spec = getattr(getattr(stored, "sharding", None), "partition_spec", None)
        if spec is None or stored_spec is None:
            continue
        if _normalize_spec(tuple(stored_spec)) != spec:
            notes.append(
                f"{record.path_str}: saved sharded as {_spec_str(tuple(stored_spec))}, "
                f"the target expects {_spec_str(spec)}; orbax reshards on restore."
            )
    return notes


def _check(
    path: PathLike, raw: tuple[VarRecord, ...]
) -> tuple[_Checkpoint, tuple[VarRecord, ...], list[str], StateDiff]:
    ckpt = _read(path)
    records = tuple(_as_stored(r) for r in raw)
    notes = _notes(ckpt, raw)
    diff = diff_records(
        records,
        ckpt.records,
        rtol=0.0,
        atol=0.0,
        a_label="target",
        b_label="checkpoint",
        compare_values=False,
        notes=notes,
    )
    return ckpt, records, notes, diff


@typechecked
def checkpoint_report(path: PathLike, /) -> CheckpointReport:
    """Describe an orbax checkpoint from its metadata, without loading any array.

    Reads the tree, shapes, dtypes and save-time shardings that orbax records
    beside the data, so a checkpoint of any size is described in milliseconds
    and nothing is allocated on any device.

    Args:
        path: The checkpoint directory (the one passed to ``save``; it holds
            ``_METADATA``).

    Returns:
        A :class:`CheckpointReport`.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        ValueError: If ``path`` is not an orbax PyTree checkpoint (the message
            lists checkpoints found inside it, such as a step's ``default``).

    Example:
        >>> import tempfile, pathlib
        >>> import orbax.checkpoint as ocp
        >>> from flax import nnx
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "ckpt"
        >>> with ocp.StandardCheckpointer() as checkpointer:
        ...     checkpointer.save(path, nnx.state(nnx.Linear(2, 3, rngs=nnx.Rngs(0))))
        >>> report = checkpoint_report(path)
        >>> report.layout, [(leaf.path, leaf.shape) for leaf in report.leaves]
        ('nnx-state', [('bias', (3,)), ('kernel', (2, 3))])
    """
    ckpt = _read(path)
    return CheckpointReport(
        path=str(ckpt.path),
        layout=ckpt.layout,
        leaves=tuple(
            CheckpointLeaf(
                path=r.path_str,
                shape=r.shape,
                dtype=str(getattr(r.dtype, "name", r.dtype)),
                size=r.size,
                nbytes=r.nbytes,
                sharding=_sharding_str(r.sharding),
            )
            for r in ckpt.records
        ),
    )


@typechecked
def check_checkpoint(path: PathLike, target: Comparable, /) -> StateDiff:
    """Compare a checkpoint's metadata with a model per path, before any restore.

    Reports every path the target has and the checkpoint lacks (``"missing"``),
    every stored array the target lacks (``"extra"``), and every shape or dtype
    mismatch, reading metadata only: no array is loaded or allocated, so an
    abstract target (``nnx.eval_shape``) of any size works. Values and variable
    types are not compared (the diff says so): use :func:`verify_restore` for
    values. Save-time shardings that differ from the target's annotations are
    listed in the notes; they do not fail the check, as orbax reshards.

    Args:
        path: The checkpoint directory.
        target: The model (concrete or abstract), ``nnx.State`` or pure dict you
            mean to restore into; the reference side (``a``) of the diff.

    Returns:
        A :class:`StateDiff` of target against checkpoint; ``.equal`` means a
        restore into ``target`` will find every array with the right shape and
        dtype.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        ValueError: If ``path`` is not an orbax PyTree checkpoint.

    Example:
        >>> import tempfile, pathlib
        >>> import orbax.checkpoint as ocp
        >>> from flax import nnx
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "ckpt"
        >>> with ocp.StandardCheckpointer() as checkpointer:
        ...     checkpointer.save(path, nnx.state(nnx.Linear(2, 3, rngs=nnx.Rngs(0))))
        >>> abstract = nnx.eval_shape(lambda: nnx.Linear(2, 4, rngs=nnx.Rngs(0)))
        >>> diff = check_checkpoint(path, abstract)
        >>> [(e.path, e.problem, e.a, e.b) for e in diff.entries]
        [('bias', 'shape', '(4,)', '(3,)'), ('kernel', 'shape', '(2, 4)', '(2, 3)')]
    """
    return _check(path, records_of(target, "target"))[3]


@typechecked
def verify_restore(
    path: PathLike,
    target: Comparable,
    /,
    *,
    rtol: Tolerance = 0.0,
    atol: Tolerance = 0.0,
) -> StateDiff:
    """Restore a checkpoint into the target's abstract state and compare values.

    First checks the metadata as :func:`check_checkpoint` does; then restores
    every array whose shape and dtype match, with the target's shapes, dtypes
    and shardings (orbax reshards as needed; mismatched and extra arrays are
    skipped, never read), and compares the restored values with the target's
    within the tolerance (exact by default). The target is not modified: the
    restored arrays are compared, then dropped. To restore for real after a
    clean verification, use ``nnx.update(model, restored_state)``.

    Args:
        path: The checkpoint directory.
        target: A concrete model, ``nnx.State`` or pure dict whose values the
            checkpoint should hold; the reference side (``a``).
        rtol: Relative tolerance for floating values, ``>= 0``.
        atol: Absolute tolerance for floating values, ``>= 0``.

    Returns:
        A :class:`StateDiff` of target against checkpoint, values included.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        TypeError: If a tolerance is not a float.
        ValueError: If ``path`` is not an orbax PyTree checkpoint, ``target``
            is abstract, or a tolerance is negative or not finite.

    Example:
        >>> import tempfile, pathlib
        >>> import orbax.checkpoint as ocp
        >>> from flax import nnx
        >>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "ckpt"
        >>> with ocp.StandardCheckpointer() as checkpointer:
        ...     checkpointer.save(path, nnx.state(model))
        >>> verify_restore(path, model).equal
        True
        >>> diff = verify_restore(path, nnx.Linear(2, 3, rngs=nnx.Rngs(1)))
        >>> [(e.path, e.problem, e.n_different) for e in diff.entries]
        [('kernel', 'value', 6)]
    """
    import orbax.checkpoint as ocp  # deferred: orbax is slow to import

    rtol_f = check_tolerance(rtol, "rtol")
    atol_f = check_tolerance(atol, "atol")
    raw = records_of(target, "target")
    require_values(
        raw,
        "there are no values to compare a restore with",
        "Pass the concrete model, or use `check_checkpoint` to compare "
        "shapes and dtypes only.",
    )
    ckpt, records, notes, meta_diff = _check(path, raw)
    mismatched = {e.path for e in meta_diff.entries}
    wanted = {_key(r.path): r for r in records if r.path_str not in mismatched}
    strip = ckpt.layout == "nnx-state"

    def restore_leaf(keypath: Any, leaf: Any) -> Any:
        k = _key(keypath_keys(keypath))
        record = wanted.get(k[:-1] if strip else k)
        if record is None:
            return ocp.PLACEHOLDER
        value = record.array
        sharding = getattr(value, "sharding", None)
        if not isinstance(sharding, jax.sharding.Sharding):
            sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
        if is_key_dtype(getattr(value, "dtype", None)):
            return jax.ShapeDtypeStruct(value.shape, value.dtype, sharding=sharding)
        return jax.ShapeDtypeStruct(record.shape, record.dtype, sharding=sharding)

    item = jax.tree_util.tree_map_with_path(restore_leaf, ckpt.tree)
    restored = _restore(ckpt, item) if wanted else {}
    return diff_records(
        records,
        ckpt.records,
        rtol=rtol_f,
        atol=atol_f,
        a_label="target",
        b_label="checkpoint",
        notes=notes,
        b_values=restored,
    )


def _restore(ckpt: _Checkpoint, item: Any) -> dict[Key, Any]:
    """Restore ``item`` (abstract leaves or ``ocp.PLACEHOLDER``) from ``ckpt``.

    Returns the restored arrays by path, placeholders left out; for the
    ``nnx-state`` layout orbax's trailing ``value`` key is stripped.
    """
    import orbax.checkpoint as ocp  # deferred: orbax is slow to import

    with ocp.PyTreeCheckpointer() as checkpointer:
        out = checkpointer.restore(
            ckpt.path,
            args=ocp.args.PyTreeRestore(
                item=item,
                restore_args=ocp.checkpoint_utils.construct_restore_args(item),
            ),
        )
    strip = ckpt.layout == "nnx-state"
    restored: dict[Key, Any] = {}
    for keypath, leaf in jax.tree_util.tree_flatten_with_path(out)[0]:
        if leaf is ocp.PLACEHOLDER:
            continue
        k = _key(keypath_keys(keypath))
        restored[k[:-1] if strip else k] = leaf
    return restored


def is_checkpoint_dir(path: PathLike) -> bool:
    """Whether ``path`` is a directory holding an orbax ``_METADATA`` file."""
    return (pathlib.Path(path).expanduser() / "_METADATA").is_file()


def _restore_all(ckpt: _Checkpoint) -> dict[str, Any]:
    """Every array of ``ckpt`` on the default device, as a pure nested dict."""
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    item = jax.tree.map(
        lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=device),
        ckpt.tree,
    )
    nested: dict[str, Any] = {}
    for k, leaf in _restore(ckpt, item).items():
        node = nested
        for part in k[:-1]:
            node = node.setdefault(part, {})
        node[k[-1]] = leaf
    return nested


def diff_checkpoints(
    path_a: PathLike,
    path_b: PathLike,
    *,
    values: bool = True,
    rtol: float = 0.0,
    atol: float = 0.0,
) -> StateDiff:
    """Compare two checkpoints per path (the CLI's ``diff`` of two directories).

    With ``values=False`` only their metadata is read and compared (structure,
    shapes, dtypes); otherwise both are restored to the default device and
    compared with :func:`~nnx_introspect.compare_states`. Layouts may differ.
    """
    a, b = _read(path_a), _read(path_b)
    if not values:
        return diff_records(
            a.records, b.records, rtol=rtol, atol=atol, compare_values=False
        )
    return diff_records(
        records_of(_restore_all(a), "a"),
        records_of(_restore_all(b), "b"),
        rtol=check_tolerance(rtol, "rtol"),
        atol=check_tolerance(atol, "atol"),
    )

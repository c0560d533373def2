"""verify_restore: restore a checkpoint into the target's shapes, compare values."""

import dataclasses
from typing import Any

import jax
import numpy as np

from nnx_introspect._checkpoint.compare import check_metadata
from nnx_introspect._checkpoint.encoding import as_restored, is_number, stored_number
from nnx_introspect._checkpoint.files import PathLike, damaged, one_line
from nnx_introspect._checkpoint.read import Checkpoint, Key, key_of
from nnx_introspect._checkpoint.store import is_read_error, store_error
from nnx_introspect._compare import (
    Comparable,
    StateDiff,
    Tolerance,
    check_tolerance,
    diff_records,
    is_key_dtype,
    records_of,
)
from nnx_introspect._inventory import VarRecord, require_values
from nnx_introspect._nnx import keypath_keys
from nnx_introspect._typing import ArgumentError, typechecked


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
        FileNotFoundError: If ``path`` does not exist (also a ``ValueError``).
        TypeError: If ``path`` is not a path or a tolerance is not a float.
        ValueError: If ``path`` is not an orbax PyTree checkpoint, is not UTF-8
            or is damaged (its metadata, its index or, found while restoring, its
            array data: the message names the damaged file); if ``target`` is
            abstract or holds arrays other processes share (a multi-process
            run: restore and compare on one process); or if a tolerance is
            negative or not finite.

    Example:
        >>> import pathlib, shutil, tempfile
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
        >>> shutil.rmtree(path.parent)  # the example's checkpoint
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
    require_addressable(raw)
    ckpt, records, notes, meta_diff = check_metadata(path, raw)
    mismatched = {e.path for e in meta_diff.entries}
    wanted = {key_of(r.path): r for r in records if r.path_str not in mismatched}
    strip = ckpt.layout == "nnx-state"
    stored = {key_of(r.path): r for r in ckpt.records}
    # A Python number restores as one where orbax stored one (compared exactly,
    # as Python numbers); elsewhere it is compared as the array JAX makes of it.
    records = tuple(
        dataclasses.replace(r, array=np.asarray(r.array, dtype=r.dtype))
        if is_number(r.array) and not stored_number(stored.get(key_of(r.path), r))
        else r
        for r in records
    )

    def restore_leaf(keypath: Any, leaf: Any) -> Any:
        k = key_of(keypath_keys(keypath))
        record = wanted.get(k[:-1] if strip else k)
        if record is None:
            return ocp.PLACEHOLDER
        value = record.array
        if is_number(value) and isinstance(leaf, ocp.metadata.ScalarMetadata):
            return value  # orbax restores a stored Python number as one
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
        tuple(as_restored(r) for r in ckpt.records),
        rtol=rtol_f,
        atol=atol_f,
        a_label="target",
        b_label="checkpoint",
        notes=notes,
        b_values=restored,
    )


def require_addressable(records: tuple[VarRecord, ...], name: str = "target") -> None:
    """Raise ``ValueError`` if a record holds an array this process cannot read whole.

    In a multi-process run (``jax.distributed``) an array sharded over the
    devices of several processes is not fully addressable from any one of them.
    """
    partial = [
        r.path_str
        for r in records
        if getattr(r.array, "is_fully_addressable", True) is False
    ]
    if partial:
        raise ArgumentError(
            name,
            f"`{name}` holds {len(partial)} array(s) that are not fully addressable "
            f"from this process (first: {partial[0]!r}), as in a multi-process "
            "`jax.distributed` run, and `verify_restore` restores and compares on one "
            "process. Run it in a single process, use `check_checkpoint` to check "
            "shapes and dtypes (it reads metadata only), or restore with orbax in "
            "every process and compare with `compare_states`.",
        )


def _restore(ckpt: Checkpoint, item: Any) -> dict[Key, Any]:
    """Restore ``item`` (abstract leaves or ``ocp.PLACEHOLDER``) from ``ckpt``.

    Returns the restored arrays by path, placeholders left out; for the
    ``nnx-state`` layout orbax's trailing ``value`` key is stripped. A read
    that fails (array data damaged in place, which the index checks of
    :func:`read_checkpoint` cannot see) is a ``ValueError`` naming the damaged file.
    """
    import orbax.checkpoint as ocp  # deferred: orbax is slow to import

    try:
        with ocp.PyTreeCheckpointer() as checkpointer:
            out = checkpointer.restore(
                ckpt.path,
                args=ocp.args.PyTreeRestore(
                    item=item,
                    restore_args=ocp.checkpoint_utils.construct_restore_args(item),
                ),
            )
    except Exception as error:  # tensorstore raises a bare `Exception`
        if is_read_error(error):
            raise damaged(
                ckpt.path, store_error(error, ckpt.path, ckpt.data_files)
            ) from error
        raise ValueError(
            f"orbax could not restore `path` {str(ckpt.path)!r}: "
            f"{one_line(str(error), ckpt.path)}."
        ) from error
    strip = ckpt.layout == "nnx-state"
    restored: dict[Key, Any] = {}
    for keypath, leaf in jax.tree_util.tree_flatten_with_path(out)[0]:
        if leaf is ocp.PLACEHOLDER:
            continue
        k = key_of(keypath_keys(keypath))
        restored[k[:-1] if strip else k] = leaf
    return restored


def restore_all(ckpt: Checkpoint) -> dict[str, Any]:
    """Every array of ``ckpt`` on the default device, as a pure nested dict."""
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    import orbax.checkpoint as ocp  # deferred: orbax is slow to import

    def abstract(leaf: Any) -> Any:
        if isinstance(leaf, ocp.metadata.ScalarMetadata):
            return np.dtype(leaf.dtype).type(0).item()  # restored as a Python number
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=device)

    item = jax.tree.map(abstract, ckpt.tree)
    nested: dict[str, Any] = {}
    for k, leaf in _restore(ckpt, item).items():
        node = nested
        for part in k[:-1]:
            node = node.setdefault(part, {})
        node[k[-1]] = leaf
    return nested

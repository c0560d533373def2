"""check_checkpoint: a checkpoint's metadata compared with a model, per path."""

import jax
import numpy as np

from nnx_introspect._checkpoint.encoding import as_restored, as_stored, stored_number
from nnx_introspect._checkpoint.files import PathLike
from nnx_introspect._checkpoint.read import Checkpoint, key_of, read_checkpoint
from nnx_introspect._checkpoint.shardings import normalize_spec, target_spec
from nnx_introspect._compare import (
    Comparable,
    StateDiff,
    diff_records,
    is_key_dtype,
    records_of,
)
from nnx_introspect._inventory import VarRecord
from nnx_introspect._render import spec_str
from nnx_introspect._typing import typechecked


def _notes(ckpt: Checkpoint, target: tuple[VarRecord, ...]) -> list[str]:
    notes = [f"Checkpoint layout: {ckpt.layout}."]
    if any(is_key_dtype(r.dtype) for r in target):
        notes.append(
            "PRNG keys are compared as their uint32 key data, as orbax stores them."
        )
    numbers = [r.path_str for r in ckpt.records if stored_number(r)]
    if numbers:
        shown = ", ".join(numbers[:3]) + (" ..." if len(numbers) > 3 else "")
        notes.append(
            f"Python numbers ({shown}) are stored by orbax as 64-bit scalars and "
            "compared in the dtype JAX gives them on restore "
            f"({jax.dtypes.canonicalize_dtype(np.float64).name} for a float)."
        )
    saved = {key_of(r.path): r for r in ckpt.records}
    for record in target:
        spec = target_spec(record)
        stored = saved.get(key_of(record.path))
        stored_spec = getattr(getattr(stored, "sharding", None), "partition_spec", None)
        if spec is None or stored_spec is None:
            continue
        if normalize_spec(tuple(stored_spec)) != spec:
            notes.append(
                f"{record.path_str}: saved sharded as {spec_str(tuple(stored_spec))}, "
                f"the target expects {spec_str(spec)}; orbax reshards on restore."
            )
    return notes


def check_metadata(
    path: PathLike, raw: tuple[VarRecord, ...]
) -> tuple[Checkpoint, tuple[VarRecord, ...], list[str], StateDiff]:
    """The checkpoint, the target as orbax stores it, the notes and the diff."""
    ckpt = read_checkpoint(path)
    records = tuple(as_stored(r) for r in raw)
    notes = _notes(ckpt, raw)
    diff = diff_records(
        records,
        tuple(as_restored(r) for r in ckpt.records),
        rtol=0.0,
        atol=0.0,
        a_label="target",
        b_label="checkpoint",
        compare_values=False,
        notes=notes,
    )
    return ckpt, records, notes, diff


@typechecked
def check_checkpoint(path: PathLike, target: Comparable, /) -> StateDiff:
    """Compare a checkpoint's metadata with a model per path, before any restore.

    Reports every path the target has and the checkpoint lacks (``"missing"``),
    every stored array the target lacks (``"extra"``), and every shape or dtype
    mismatch, reading metadata only: no array is loaded or allocated, so an
    abstract target (``nnx.eval_shape``) of any size works. Values and variable
    types are not compared (the diff says so): use :func:`verify_restore` for
    values. Save-time shardings that differ from the target's annotations are
    listed in the notes; they do not fail the check, as orbax reshards. A
    Python number saved from a variable (``nnx.Param(2.5)``; orbax stores it as
    a 64-bit scalar) is compared in the dtype JAX gives it, as a restore does.

    Args:
        path: The checkpoint directory.
        target: The model (concrete or abstract), ``nnx.State`` or pure dict you
            mean to restore into; the reference side (``a``) of the diff.

    Returns:
        A :class:`StateDiff` of target against checkpoint; ``.equal`` means a
        restore into ``target`` will find every array with the right shape and
        dtype.

    Raises:
        FileNotFoundError: If ``path`` does not exist (also a ``ValueError``).
        TypeError: If ``path`` is not a ``str``, ``bytes`` or ``os.PathLike``.
        ValueError: If ``path`` is not an orbax PyTree checkpoint, is not
            UTF-8, or is damaged (the message names the damaged file).

    Example:
        >>> import pathlib, shutil, tempfile
        >>> import orbax.checkpoint as ocp
        >>> from flax import nnx
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "ckpt"
        >>> with ocp.StandardCheckpointer() as checkpointer:
        ...     checkpointer.save(path, nnx.state(nnx.Linear(2, 3, rngs=nnx.Rngs(0))))
        >>> abstract = nnx.eval_shape(lambda: nnx.Linear(2, 4, rngs=nnx.Rngs(0)))
        >>> diff = check_checkpoint(path, abstract)
        >>> [(e.path, e.problem, e.a, e.b) for e in diff.entries]
        [('bias', 'shape', '(4,)', '(3,)'), ('kernel', 'shape', '(2, 4)', '(2, 3)')]
        >>> shutil.rmtree(path.parent)  # the example's checkpoint
    """
    return check_metadata(path, records_of(target, "target"))[3]

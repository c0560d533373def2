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
``uint32`` key data; a Python number (``nnx.Param(2.5)``) is stored as a 64-bit
scalar and compared in the dtype JAX gives it on restore.

A damaged checkpoint is an error, never an empty one: every function first
checks that the files orbax wrote are whole (its JSON metadata parses, and every
index node and data file the array store references exists and is long enough)
and raises a ``ValueError`` naming ``path`` and the damaged file otherwise. A
checkpoint that really holds no array reads as an empty report.

A checkpoint saved by several ``jax.distributed`` processes reads the same way,
in any number of processes: each process wrote its shards to its own
``ocdbt.process_<i>/`` data files and ``array_metadatas/process_<i>``, and the
merged index (``manifest.ocdbt``) names every data file, so damage to any
process's files is found and named.

Modules: ``files`` (the path and the JSON files orbax wrote), ``store`` (the
OCDBT array store's index), ``read`` (metadata to records), ``shardings`` and
``encoding`` (how orbax stores shardings, PRNG keys and Python numbers),
``report`` (:func:`checkpoint_report`), ``compare`` (:func:`check_checkpoint`),
``restore`` (:func:`verify_restore`) and ``diff`` (two checkpoints compared).
"""

from nnx_introspect._checkpoint.compare import check_checkpoint as check_checkpoint
from nnx_introspect._checkpoint.diff import diff_checkpoints as diff_checkpoints
from nnx_introspect._checkpoint.files import (
    CheckpointNotFoundError as CheckpointNotFoundError,
)
from nnx_introspect._checkpoint.files import PathLike as PathLike
from nnx_introspect._checkpoint.files import is_checkpoint_dir as is_checkpoint_dir
from nnx_introspect._checkpoint.files import resolve_checkpoint as resolve_checkpoint
from nnx_introspect._checkpoint.read import Layout as Layout
from nnx_introspect._checkpoint.report import CheckpointLeaf as CheckpointLeaf
from nnx_introspect._checkpoint.report import CheckpointReport as CheckpointReport
from nnx_introspect._checkpoint.report import checkpoint_report as checkpoint_report
from nnx_introspect._checkpoint.restore import (
    require_addressable as require_addressable,
)
from nnx_introspect._checkpoint.restore import verify_restore as verify_restore

__all__ = [
    "CheckpointLeaf",
    "CheckpointReport",
    "check_checkpoint",
    "checkpoint_report",
    "diff_checkpoints",
    "resolve_checkpoint",
    "verify_restore",
]

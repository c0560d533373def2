"""How orbax stores PRNG keys and Python numbers, and the dtypes they restore with."""

import dataclasses
from typing import Any

import jax
import numpy as np

from nnx_introspect._compare import is_key_dtype
from nnx_introspect._inventory import VarRecord


def as_stored(record: VarRecord) -> VarRecord:
    """A PRNG key record as orbax stores it: its ``uint32`` key data."""
    if not is_key_dtype(record.dtype):
        return record
    data = jax.eval_shape(
        jax.random.key_data, jax.ShapeDtypeStruct(record.shape, record.dtype)
    )
    shape = tuple(int(d) for d in data.shape)
    return dataclasses.replace(record, shape=shape, dtype=data.dtype)


def is_number(value: Any) -> bool:
    """Whether ``value`` is a Python number (``2.5``, ``7``), not a NumPy scalar."""
    return isinstance(value, bool | int | float | complex) and not isinstance(
        value, np.generic
    )


def stored_number(record: VarRecord) -> bool:
    """Whether orbax stored this checkpoint leaf from a Python number."""
    import orbax.checkpoint as ocp  # deferred: orbax is slow to import

    return isinstance(record.kind, type) and issubclass(
        record.kind, ocp.metadata.ScalarMetadata
    )


def as_restored(record: VarRecord) -> VarRecord:
    """A checkpoint record with the dtype a restore gives it.

    Orbax stores a Python number as ``np.asarray(number)``: ``float64`` or
    ``int64`` whatever JAX's default. A Python number is weakly typed in JAX,
    which holds it (and restores it) in its default dtype: ``float32`` /
    ``int32`` unless ``jax_enable_x64``. Arrays keep their stored dtype.
    """
    if not stored_number(record):
        return record
    return dataclasses.replace(
        record, dtype=jax.dtypes.canonicalize_dtype(record.dtype)
    )

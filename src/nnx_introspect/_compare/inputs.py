"""What a comparison accepts: states, mappings and tolerances, checked, as records."""

import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nnx_introspect._inventory import VarRecord, inventory
from nnx_introspect._nnx import keypath_keys
from nnx_introspect._typing import ArgumentError, Target

Comparable = Target | Mapping[Any, Any]
"""What :func:`compare_states` accepts: a module or graph node, an ``nnx.State``
(concrete or abstract) or a nested mapping of arrays / ``jax.ShapeDtypeStruct``."""
Tolerance = float | int | np.floating[Any]
"""A tolerance: a finite, nonnegative real (``0``, ``1e-6``)."""


def check_tolerance(value: object, name: str) -> float:
    """A finite, nonnegative tolerance as a Python ``float``, or raise."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating):
        raise TypeError(
            f"`{name}` must be a nonnegative float such as 1e-6, got {value!r} of "
            f"type {type(value).__name__}."
        )
    result = float(value)
    if not math.isfinite(result) or result < 0:
        raise ArgumentError(
            name,
            f"`{name}` must be a finite nonnegative float such as 1e-6, got "
            f"{result!r}.",
        )
    return result


def leaf_dtype(
    leaf: object, name: str, path: str, must: str = "must hold numeric arrays"
) -> np.dtype[Any] | None:
    """The dtype of a numeric state leaf, ``None`` for a PRNG key, or raise.

    Accepts arrays (JAX, NumPy, ``jax.ShapeDtypeStruct``, tracers) of a bool,
    integer, floating or complex dtype (int4, bfloat16 and float8 included) and
    Python or NumPy numbers. Anything else (``None``, a string, an object or
    string array, a datetime) raises a ``TypeError`` naming ``name`` and
    ``path``: "`name` {must}, got ...".
    """
    if isinstance(leaf, bool | int | float | complex):
        return np.dtype(jnp.result_type(leaf).name)
    dtype = getattr(leaf, "dtype", None)
    if dtype is not None:
        if is_key_dtype(dtype):
            return None
        try:
            numeric = bool(
                jnp.issubdtype(dtype, jnp.number) or jnp.issubdtype(dtype, np.bool_)
            )
        except TypeError:  # pragma: no cover - dtype objects NumPy cannot read
            numeric = False
        if numeric:
            result: np.dtype[Any] = np.dtype(dtype)
            return result
        what = f"an array of dtype {dtype}"
    elif leaf is None:
        what = "None"
    else:
        what = f"{leaf!r:.60} of type {type(leaf).__name__}"
    raise TypeError(
        f"`{name}` {must}, got {what} at {path!r}. Give every "
        "leaf a bool, integer, float or complex array (`jnp.asarray(...)`), or "
        "leave that entry out."
    )


def check_leaves(state: Any, name: str, must: str = "must hold numeric arrays") -> None:
    """Raise ``TypeError`` naming ``name`` and the path of the first non-numeric leaf.

    ``None`` counts as a leaf here (a variable or mapping entry without a value),
    so it is reported instead of silently vanishing from the tree.
    """
    pairs, _ = jax.tree_util.tree_flatten_with_path(state, is_leaf=_is_none)
    for keypath, leaf in pairs:
        leaf_dtype(leaf, name, keypath_str(keypath), must)


def _is_none(x: object) -> bool:
    return x is None


def keypath_str(keypath: Any) -> str:
    """A ``jax.tree_util`` key path as state keys joined by ``/`` (no ``value``)."""
    keys = [
        k
        for k in keypath
        if not (isinstance(k, jax.tree_util.GetAttrKey) and k.name == "value")
    ]
    return "/".join(str(k) for k in keypath_keys(tuple(keys)))


def records_of(x: object, name: str) -> tuple[VarRecord, ...]:
    """The inventory of a module, state or nested mapping (wrapped in a State).

    Every leaf is checked first (:func:`check_leaves`): a string, object or
    ``None`` leaf raises a ``TypeError`` naming ``name`` and the path.
    """
    if isinstance(x, nnx.State | nnx.Pytree):
        check_leaves(x if isinstance(x, nnx.State) else nnx.state(x), name)
        return inventory(x)
    if isinstance(x, Mapping):
        state = nnx.State(x)
        check_leaves(state, name)
        return inventory(state)
    raise TypeError(  # pragma: no cover - beartype rejects these first
        f"`{name}` must be an nnx.Module, an nnx.State or a mapping of arrays, "
        f"got {type(x).__name__}."
    )


def is_key_dtype(dtype: Any) -> bool:
    """Whether ``dtype`` is a typed PRNG key dtype (``key<fry>``)."""
    try:
        return bool(jnp.issubdtype(dtype, jax.dtypes.prng_key))
    except TypeError:  # pragma: no cover - exotic dtype objects
        return False

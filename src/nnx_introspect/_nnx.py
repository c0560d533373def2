"""The one place that touches version-sensitive Flax NNX behaviour.

Everything here has a public-API fallback, and ``tests/test_nnx.py`` proves the
two paths give the same answer. Other modules import from here instead of
reaching into ``flax.nnx`` internals themselves.
"""

from collections.abc import Iterator
from typing import Any

import jax
from flax import nnx

__all__ = [
    "flat_state",
    "flat_state_public",
    "iter_variable_leaves",
    "select_state",
    "variable_sharding",
]

Path = tuple[Any, ...]


def select_state(target: nnx.Pytree | nnx.State, filters: tuple[Any, ...]) -> nnx.State:
    """The state of ``target`` restricted to the variables matching any filter.

    No filter means every variable. Several filters mean their union (unlike
    ``nnx.state(node, f1, f2)``, which returns one state per filter). Shared
    variables appear once, as ``nnx.state`` gives them. Never mutates ``target``.
    """
    flt: Any = ... if not filters else (filters[0] if len(filters) == 1 else nnx.Any(*filters))
    if isinstance(target, nnx.State):
        if flt is ...:
            return target
        return nnx.filter_state(target, flt)
    return nnx.state(target, flt)


def flat_state(state: nnx.State) -> list[tuple[Path, Any]]:
    """``(path, variable_or_array)`` pairs of ``state`` in ``jax.tree.leaves`` order.

    Uses ``nnx.to_flat_state`` (sorted, like the state's pytree flattening); falls
    back to :func:`flat_state_public` where it is missing.
    """
    to_flat = getattr(nnx, "to_flat_state", None)
    if to_flat is None:  # pragma: no cover - older/newer flax without it
        return flat_state_public(state)
    return [(tuple(path), leaf) for path, leaf in to_flat(state)]


def flat_state_public(state: nnx.State) -> list[tuple[Path, Any]]:
    """The fallback for :func:`flat_state`, using only ``jax.tree_util``."""
    pairs, _ = jax.tree_util.tree_flatten_with_path(
        state, is_leaf=lambda x: isinstance(x, nnx.Variable)
    )
    return [(tuple(_key(k) for k in keypath), leaf) for keypath, leaf in pairs]


def _key(entry: Any) -> Any:
    for attr in ("key", "name", "idx"):
        if hasattr(entry, attr):
            return getattr(entry, attr)
    return entry  # pragma: no cover


def variable_sharding(variable: Any) -> Any:
    """The NNX sharding annotation of ``variable`` (``out_sharding``), or ``None``.

    Flax 0.12 stores it as ``out_sharding`` metadata; older releases used
    ``sharding_names`` / ``sharding``. Reads metadata without touching values.
    """
    if not isinstance(variable, nnx.Variable):
        return None
    metadata = _metadata(variable)
    for name in ("out_sharding", "sharding_names", "sharding"):
        value = metadata.get(name)
        if value is not None:
            return value
    return None


def _metadata(variable: nnx.Variable[Any]) -> dict[str, Any]:
    get = getattr(variable, "get_metadata", None)
    if get is not None:
        meta = get()
        if isinstance(meta, dict):
            return meta
    return dict(getattr(variable, "_var_metadata", {}))  # pragma: no cover


def iter_variable_leaves(leaf: Any) -> Iterator[tuple[Path, Any]]:
    """The array leaves held by one flat-state entry, with sub-paths.

    A variable normally holds one array (sub-path ``()``); a raw array is its own
    leaf. Reading goes through ``jax.tree_util`` so nothing is copied or mutated.
    """
    pairs, _ = jax.tree_util.tree_flatten_with_path(leaf)
    is_variable = isinstance(leaf, nnx.Variable)
    for keypath, value in pairs:
        sub = tuple(_key(k) for k in keypath)
        if is_variable and sub[:1] == ("value",):
            sub = sub[1:]
        yield sub, value

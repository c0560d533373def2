"""Leaf, element and share counts, and the parameter sum.

Counts are exact Python ``int`` computed from static shapes, so they work the
same for concrete models, abstract (``nnx.eval_shape``) models and states, at any
size. Nothing here reads a value except :func:`param_sum`.
"""

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from nnx_introspect import _nnx
from nnx_introspect._inventory import inventory
from nnx_introspect._typing import IntLike, Target, as_int, typechecked

__all__ = ["count_params", "count_state_leaves", "ideal_share", "param_sum"]


@typechecked
def count_state_leaves(target: Target, /, *filters: Any) -> int:
    """Count the array leaves of ``target``'s state.

    With no filter this is ``len(jax.tree.leaves(nnx.state(target)))``: every
    variable of every kind (parameters, batch statistics, RNG keys and counters,
    raw array attributes), shared variables once. With filters (``nnx.Param``,
    ``nnx.BatchStat``, any NNX filter) only the variables matching at least one
    of them count. A leaf is an array, not a scalar: see :func:`count_params`.

    Args:
        target: An ``nnx.Module`` (or other graph node such as an
            ``nnx.Optimizer``) or an ``nnx.State``, concrete or abstract.
        *filters: NNX filters; several filters select their union.

    Returns:
        The number of leaves, a Python ``int``.

    Example:
        >>> from flax import nnx
        >>> model = nnx.Linear(4, 3, rngs=nnx.Rngs(0))
        >>> count_state_leaves(model)
        2
        >>> count_state_leaves(model, nnx.BatchStat)
        0
    """
    return len(inventory(target, filters))


@typechecked
def count_params(target: Target, /, *filters: Any) -> int:
    """Count the scalar elements of ``target``'s parameters.

    By default only ``nnx.Param`` variables count: batch statistics, RNG state
    and optimizer state are not parameters. Pass filters to count other kinds
    (``count_params(model, ...)`` counts every element of the state). Shared
    (tied) variables count once. The count comes from shapes alone, so an
    abstract model with a 10^11-element kernel counts exactly.

    Args:
        target: An ``nnx.Module``, graph node or ``nnx.State``, concrete or
            abstract.
        *filters: NNX filters; default ``nnx.Param``. Several select their union.

    Returns:
        The number of elements, an exact Python ``int``.

    Example:
        >>> from flax import nnx
        >>> count_params(nnx.Linear(4, 3, rngs=nnx.Rngs(0)))  # 4 * 3 + 3
        15
    """
    return sum(record.size for record in inventory(target, filters or (nnx.Param,)))


@typechecked
def ideal_share(total: IntLike, num_shards: IntLike) -> float:
    """Divide a count evenly over ``num_shards``, without rounding.

    This is accounting, not a placement: no shard holds half a scalar, some
    arrays are replicated and dimensions may not divide. Use
    :func:`mesh_config_report` for the real per-device figures.

    Args:
        total: An integer-valued count, ``>= 0``.
        num_shards: An integer-valued number of shards, ``>= 1``.

    Returns:
        ``total / num_shards`` as a Python ``float`` (correctly rounded).

    Raises:
        TypeError: If an argument is not an integer-valued scalar.
        ValueError: If an argument is non-integral, non-finite or out of range.

    Example:
        >>> ideal_share(6, 4)
        1.5
    """
    return as_int(total, "total", minimum=0) / as_int(
        num_shards, "num_shards", minimum=1
    )


@typechecked
def param_sum(target: Target, /, *filters: Any) -> jax.Array:
    """Sum every value of ``target``'s parameters into one 0-d array.

    The sum of ``jnp.sum(leaf)`` over the matching leaves in
    ``jax.tree.leaves`` order (default filter ``nnx.Param``), so it is traceable
    and works inside ``jax.jit`` / ``nnx.jit``. PRNG key leaves are skipped:
    keys have no numeric value. A sum is a cheap fingerprint, not a proof of
    equality: ``[1, 3]`` and ``[2, 2]`` have the same sum.

    Args:
        target: A concrete ``nnx.Module``, graph node or ``nnx.State``.
        *filters: NNX filters; default ``nnx.Param``.

    Returns:
        A 0-d ``jax.Array`` (``0.0`` in float32 when nothing matches).

    Raises:
        ValueError: If ``target`` is abstract (its leaves have no values).

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
        >>> total = param_sum(model)
        >>> bool(jnp.allclose(total, model.kernel[...].sum() + model.bias[...].sum()))
        True
    """
    state = _nnx.select_state(target, filters or (nnx.Param,))
    total: jax.Array | None = None
    for leaf in jax.tree.leaves(state):
        if isinstance(leaf, jax.ShapeDtypeStruct):
            raise ValueError(
                "`target` is abstract (its leaves are jax.ShapeDtypeStruct), so it "
                "has no values to sum. Build the model concretely, or use "
                "`count_params` for shape-only questions."
            )
        if jnp.issubdtype(jnp.result_type(leaf), jax.dtypes.prng_key):
            continue
        part = jnp.sum(leaf)
        total = part if total is None else total + part
    if total is None:
        return jnp.zeros((), jnp.float32)
    return total

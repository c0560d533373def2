"""Leaf, element and share counts, and the parameter sum.

Counts are exact Python ``int`` computed from static shapes, so they work the
same for concrete models, abstract (``nnx.eval_shape``) models and states, at any
size. Nothing here reads a value except :func:`param_sum`.
"""

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nnx_introspect import _nnx
from nnx_introspect._compare import keypath_str, leaf_dtype
from nnx_introspect._experts import expert_groups, unused_params
from nnx_introspect._inventory import inventory
from nnx_introspect._typing import ArgumentError, IntLike, Target, as_int, typechecked

__all__ = [
    "count_active_params",
    "count_params",
    "count_state_leaves",
    "ideal_share",
    "param_sum",
]


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
def count_active_params(target: Target, /) -> int:
    """Count the parameters one token uses: all but the experts it is not routed to.

    For a mixture of experts, each router sends a token to ``top_k`` of its
    ``experts``, so the token uses ``top_k / experts`` of the routed experts'
    parameters and every other parameter (attention, embeddings, norms, the
    router, shared experts)::

        active = count_params(target) - sum(routed * (1 - top_k / experts))

    the sum over the model's routers. This is the ``N`` of a training step's
    ``6 N`` FLOPs per token. Routers and their experts are read from the
    model's structure, not from a forward pass: a module with an integer
    expert count and top-k attribute (tunix's Qwen3 ``MoELayer``:
    ``num_experts``, ``experts_per_tok``; the examples' ``MoeBlock``:
    ``num_experts``, ``top_k``), and under it the parameters with a dimension
    of that many experts (one named ``"expert"`` in their sharding, else the
    first of a stacked weight of rank 3 or more) or the members of a list of
    that many expert modules. A model without experts gives
    :func:`count_params`'s count. Shapes only: abstract models count alike.

    Args:
        target: An ``nnx.Module`` or graph node, concrete or abstract. An
            ``nnx.State`` holds no router: it counts as dense unless a
            dimension is named as experts, which is refused.

    Returns:
        The number of parameter elements a token uses, an exact Python ``int``.

    Raises:
        ValueError: If a router's top-k is not in ``1 .. experts``, or
            ``target`` is a state with a dimension named as experts.

    Example:
        >>> from nnx_introspect import abstract_model, count_params
        >>> from nnx_introspect.examples import llama_tiny, moe_tiny
        >>> model = abstract_model(moe_tiny)  # 2 layers, top-2 of 8 experts
        >>> experts = 2 * 3 * 8 * 64 * 32  # layers x (gate, up, down) x E x d x f
        >>> count_params(model), count_active_params(model)
        (214336, 140608)
        >>> count_params(model) - experts * 6 // 8
        140608
        >>> count_active_params(abstract_model(llama_tiny))  # dense: all of them
        10424576
    """
    return count_params(target) - unused_params(expert_groups(target))


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


def _x64() -> bool:
    """Whether 64-bit dtypes are enabled (``jax_enable_x64``)."""
    return bool(jax.dtypes.canonicalize_dtype(np.int64) == np.int64)


def sum_dtype(leaves: Sequence[tuple[Any, int]]) -> np.dtype[Any]:
    """The accumulator of :func:`param_sum` for ``(dtype, size)`` pairs.

    The narrowest of these that holds every input value: an integer dtype
    when every input is an integer or bool and the largest total the shapes
    allow (``sum(size * max|value|)``) fits, so an integer result is always
    exact; else float32 when every float has at most 32 bits and every integer
    at most 16 (float32 holds those exactly); else float64 with
    ``jax_enable_x64`` and float32 without (then integers beyond ``2**24`` are
    rounded). A complex input makes it the complex dtype of that float width.
    64-bit candidates exist only with ``jax_enable_x64``. No input: float32.
    """
    x64 = _x64()
    if not leaves:
        return np.dtype(np.float32)
    integers = [
        (dt, size) for dt, size in leaves if not jnp.issubdtype(dt, jnp.inexact)
    ]
    if len(integers) == len(leaves):
        unsigned = all(
            dt == np.bool_ or jnp.issubdtype(dt, jnp.unsignedinteger)
            for dt, _ in integers
        )
        bound = sum(size * _max_abs(dt) for dt, size in integers)
        candidates = [np.uint32, np.uint64] if unsigned else [np.int32, np.int64]
        for candidate in candidates[: 2 if x64 else 1]:
            if bound <= _max_abs(candidate) - (0 if unsigned else 1):
                return np.dtype(candidate)
    narrow = all(
        jax.dtypes.itemsize_bits(dt)
        <= (64 if jnp.issubdtype(dt, jnp.complexfloating) else 32)
        if jnp.issubdtype(dt, jnp.inexact)
        else _max_abs(dt) <= 2**24
        for dt, _ in leaves
    )
    wide = not narrow and x64
    if any(jnp.issubdtype(dt, jnp.complexfloating) for dt, _ in leaves):
        return np.dtype(np.complex128 if wide else np.complex64)
    return np.dtype(np.float64 if wide else np.float32)


def _max_abs(dtype: Any) -> int:
    """The largest magnitude an integer or bool dtype holds."""
    if dtype == np.bool_:
        return 1
    bits = int(jax.dtypes.itemsize_bits(dtype))
    if jnp.issubdtype(dtype, jnp.unsignedinteger):
        return int(2**bits - 1)
    return int(2 ** (bits - 1))


@typechecked
def param_sum(target: Target, /, *filters: Any) -> jax.Array:
    """Sum every value of ``target``'s parameters into one 0-d array.

    The sum of ``jnp.sum(leaf, dtype=acc)`` over the matching leaves, added in
    ``jax.tree.leaves`` order (default filter ``nnx.Param``), so it is
    traceable and works inside ``jax.jit`` / ``nnx.jit``, and on arrays
    sharded over several processes (``jax.distributed``): every process gets
    the same replicated total, and no process gathers an array. PRNG key
    leaves are skipped: keys have no numeric value. A sum is a cheap
    fingerprint, not a proof of equality: ``[1, 3]`` and ``[2, 2]`` have the
    same sum.

    The accumulator ``acc``, which is also the result's dtype, holds every
    input value:

    * float32 for float32 models (bitwise ``sum(jnp.sum(leaf) ...)``) and for
      any mix of floats of at most 32 bits (bfloat16, float16, float8, float4)
      with integers of at most 16 bits (int4, uint4, int8, ...): a quantized
      model's int4 kernels and float32 scales sum in float32;
    * an integer dtype when every leaf is an integer or bool (int32, or uint32
      when all are unsigned) *and* the shapes prove the total cannot overflow
      it, so an integer result is always exact; with ``jax_enable_x64``,
      int64 / uint64 when int32 / uint32 could overflow;
    * otherwise float64 with ``jax_enable_x64`` (float64 leaves, or int32
      next to floats), float32 without it: then integers beyond ``2**24``
      round to the nearest float32;
    * the complex dtype of that width when a leaf is complex.

    Like any floating sum, a float total is rounded at each addition.

    Args:
        target: A concrete ``nnx.Module``, graph node or ``nnx.State``.
        *filters: NNX filters; default ``nnx.Param``.

    Returns:
        A 0-d ``jax.Array`` of the dtype above (``0.0`` in float32 when
        nothing matches).

    Raises:
        ValueError: If ``target`` is abstract (its leaves have no values).
        TypeError: If a leaf is not numeric (a string, an object array).

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
        >>> total = param_sum(model)
        >>> bool(jnp.allclose(total, model.kernel[...].sum() + model.bias[...].sum()))
        True
        >>> quantized = nnx.State({"w": nnx.Param(jnp.array([-8, 7, 7], jnp.int4)),
        ...                        "scale": nnx.Param(jnp.array([0.5]))})
        >>> total = param_sum(quantized)
        >>> total.dtype.name, float(total)
        ('float32', 6.5)
    """
    state = _nnx.select_state(target, filters or (nnx.Param,))
    leaves: list[tuple[Any, np.dtype[Any]]] = []
    for keypath, leaf in jax.tree_util.tree_leaves_with_path(state):
        if isinstance(leaf, jax.ShapeDtypeStruct):
            raise ArgumentError(
                "target",
                "`target` is abstract (its leaves are jax.ShapeDtypeStruct), so it "
                "has no values to sum. Build the model concretely, or use "
                "`count_params` for shape-only questions.",
            )
        dtype = leaf_dtype(leaf, "target", keypath_str(keypath))
        if dtype is None:  # a PRNG key
            continue
        leaves.append((leaf, dtype))
    acc = sum_dtype([(dt, int(np.size(leaf))) for leaf, dt in leaves])
    total: jax.Array | None = None
    for leaf, dtype in leaves:
        part = jnp.sum(leaf) if dtype == acc else jnp.sum(leaf, dtype=acc)
        total = part if total is None else total + part
    if total is None:
        return jnp.zeros((), jnp.float32)
    return total

"""The four seed entrypoints, each a short composition of the public API.

Their contracts are fixed by the course specifications: inputs arrive as floats
or JAX scalars, outputs are float arrays of a fixed shape and order. Like
``optax.alias``, this module adds no logic of its own: it coerces arguments,
builds the layer the spec names, and calls public functions.
"""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, Float

from nnx_introspect import (
    count_params,
    count_state_leaves,
    fresh_init_forward,
    ideal_share,
    mesh_config_report,
    param_sum,
)
from nnx_introspect._typing import IntLike, as_int, check_finite, typechecked
from nnx_introspect.examples import TwoLayer

__all__ = [
    "graphdef_vs_state",
    "mesh_init_simulate",
    "orbax_load_simulate",
    "orbax_save_count",
]

_Matrix = Float[Array, "*batch in_dim"] | Float[np.ndarray, "*batch in_dim"]


@typechecked
def mesh_init_simulate(
    seed: IntLike, x: _Matrix, features: IntLike, mesh_axes: IntLike
) -> Float[Array, "3"]:
    """Report ``[features, mesh_axes, n_state_leaves]`` for ``nnx.Linear(D, features)``.

    Builds ``nnx.Linear(x.shape[-1], features, rngs=nnx.Rngs(seed))`` (default
    initializers, bias on), counts its state's array leaves and reports the
    proposed one-axis mesh size unchanged. ``x`` is not run through the layer:
    only its last dimension is read. No mesh is created; the size need not match
    the devices present or divide ``features``.

    Args:
        seed: Nonnegative integer-valued seed (may be a float).
        x: Input of shape ``(N, in_dim)``; only ``in_dim`` is used.
        features: Positive integer-valued output width.
        mesh_axes: Positive integer-valued size of the proposed ``"model"`` axis.

    Returns:
        A float32 array ``[features, mesh_axes, n_state_leaves]``.

    Example:
        >>> import jax.numpy as jnp
        >>> mesh_init_simulate(0.0, jnp.ones((2, 4)), 3.0, 4.0).tolist()
        [3.0, 4.0, 2.0]
    """
    seed_i = as_int(seed, "seed", minimum=0)
    features_i = as_int(features, "features", minimum=1)
    axes_i = as_int(mesh_axes, "mesh_axes", minimum=1)
    model = nnx.Linear(x.shape[-1], features_i, rngs=nnx.Rngs(seed_i))
    report = mesh_config_report(model, {"model": axes_i})
    return jnp.asarray(
        [features_i, report.num_devices, count_state_leaves(model)], dtype=jnp.float32
    )


@typechecked
def orbax_save_count(
    seed: IntLike, x: _Matrix, features: IntLike, num_shards: IntLike
) -> Float[Array, "2"]:
    """Return ``[total_params, ideal_share]`` for ``nnx.Linear(D, features)``.

    ``total_params`` is ``(D + 1) * features`` (kernel plus default bias); the
    share is plain division, accounting rather than a placement. Nothing is
    saved, no bytes are counted and ``x`` is only read for ``D``.

    Args:
        seed: Nonnegative integer-valued seed (may be a float).
        x: Finite input of shape ``(B, D)``.
        features: Positive integer-valued output width.
        num_shards: Positive integer-valued number of hypothetical shards.

    Returns:
        A float32 array ``[total_params, ideal_share]``.

    Example:
        >>> import jax.numpy as jnp
        >>> orbax_save_count(0, jnp.ones((2, 4)), 4, 2).tolist()
        [20.0, 10.0]
    """
    seed_i = as_int(seed, "seed", minimum=0)
    features_i = as_int(features, "features", minimum=1)
    shards_i = as_int(num_shards, "num_shards", minimum=1)
    check_finite(x, "x")
    model = nnx.Linear(x.shape[-1], features_i, rngs=nnx.Rngs(seed_i))
    total = count_params(model)
    return jnp.asarray([total, ideal_share(total, shards_i)], dtype=jnp.float32)


@typechecked
def graphdef_vs_state(
    seed: IntLike,
    x: _Matrix,
    features: object,
    hidden: IntLike,
) -> Float[Array, "3"]:
    """Count, sum and run the two-layer model: ``[leaves, param_sum, output_sum]``.

    Builds :class:`~nnx_introspect.examples.TwoLayer` with input width
    ``x.shape[-1]`` and ``hidden`` units from one ``nnx.Rngs(seed)``, sums its
    forward output, splits it and counts and sums its state leaves. The sums
    stay JAX scalars, so it works inside ``jax.jit`` with ``x`` traced. The
    legacy ``features`` argument is accepted and ignored.

    Args:
        seed: Nonnegative integer-valued seed (may be a float).
        x: Nonempty finite float32 vector.
        features: Unused; kept for the legacy signature.
        hidden: Positive integer-valued hidden width.

    Returns:
        A float32 array ``[num_leaves, total_param_sum, forward_output_sum]``.

    Example:
        >>> import jax.numpy as jnp
        >>> out = graphdef_vs_state(0.0, jnp.ones(3), 0.0, 4.0)
        >>> out.shape, out[0].item()
        ((3,), 4.0)
    """
    del features  # legacy argument, documented as unused
    seed_i = as_int(seed, "seed", minimum=0)
    hidden_i = as_int(hidden, "hidden", minimum=1)
    check_finite(x, "x")
    model = TwoLayer(x.shape[-1], hidden_i, rngs=nnx.Rngs(seed_i))
    forward_output_sum = jnp.sum(model(jnp.asarray(x)))
    _, state = nnx.split(model)
    num_leaves = jnp.float32(count_state_leaves(state))
    total_param_sum = param_sum(state, ...)
    return jnp.stack([num_leaves, total_param_sum, forward_output_sum])


@typechecked
def orbax_load_simulate(
    seed: IntLike, x: _Matrix, features: IntLike
) -> Float[Array, " flat"]:
    """Build ``nnx.Linear(D, features)`` twice from one seed; return ``second(x)`` flat.

    Each layer gets its own freshly created ``nnx.Rngs(seed)``, so both start
    from identical parameters; the second is applied to ``x`` (no activation)
    and the ``(B, features)`` output is flattened row-major. This recreates
    initial values only: no checkpoint is read, nothing trained is restored.
    Works inside ``jax.jit`` with ``x`` traced.

    Args:
        seed: Nonnegative integer-valued seed (may be a float).
        x: Finite input of shape ``(B, D)``; left unchanged.
        features: Positive integer-valued output width ``F``.

    Returns:
        A vector of shape ``(B * F,)``: ``(x @ kernel + bias).reshape(-1)``.

    Example:
        >>> import jax.numpy as jnp
        >>> orbax_load_simulate(0, jnp.zeros((2, 3)), 2).tolist()  # zero input: bias
        [0.0, 0.0, 0.0, 0.0]
    """
    seed_i = as_int(seed, "seed", minimum=0)
    features_i = as_int(features, "features", minimum=1)
    d = x.shape[-1]

    def factory(rngs: nnx.Rngs) -> nnx.Linear:
        return nnx.Linear(d, features_i, rngs=rngs)

    fresh_init_forward(factory, seed_i, x)  # the first, locally compared layer
    second: jax.Array = fresh_init_forward(factory, seed_i, x)
    return second.reshape(-1)

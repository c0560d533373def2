"""Reproducible initialization: build a module from a fresh seed and run it."""

from collections.abc import Callable

import jax
import numpy as np
from flax import nnx
from jaxtyping import Array, Shaped

from nnx_introspect._typing import IntLike, as_int, check_finite, typechecked

__all__ = ["fresh_init_forward"]


@typechecked
def fresh_init_forward(
    factory: Callable[[nnx.Rngs], nnx.Module],
    seed: IntLike,
    x: Shaped[Array, "..."] | Shaped[np.ndarray, "..."],
) -> jax.Array:
    """Build ``factory(nnx.Rngs(seed))`` from a fresh ``Rngs`` and return ``module(x)``.

    The result is bitwise equal to doing it by hand. Because the ``Rngs`` is
    created here, two calls with the same seed see the same keys; sharing one
    advancing ``Rngs`` between two builds does not. Works inside ``jax.jit``
    with ``x`` traced and ``seed`` static. A seeded initialization recreates
    initial values only, never trained ones.

    Args:
        factory: A callable taking ``rngs`` and returning an ``nnx.Module``.
        seed: An integer-valued seed, ``>= 0``.
        x: The input of the forward pass; must be finite when concrete.

    Returns:
        The module's output.

    Raises:
        TypeError: If ``seed`` is not an integer-valued scalar or ``factory``
            does not return an ``nnx.Module``.
        ValueError: If ``seed`` is negative or non-integral, or ``x`` holds NaN
            or infinity.

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> def factory(rngs):
        ...     return nnx.Linear(3, 2, rngs=rngs)
        >>> y = fresh_init_forward(factory, 0, jnp.ones((4, 3)))
        >>> y.shape
        (4, 2)
    """
    key = as_int(seed, "seed", minimum=0)
    check_finite(x, "x")
    module = factory(nnx.Rngs(key))
    if not isinstance(module, nnx.Module):
        raise TypeError(
            f"`factory` must return an nnx.Module, got {type(module).__name__}. "
            "Pass a callable such as `lambda rngs: nnx.Linear(3, 2, rngs=rngs)`."
        )
    out: jax.Array = module(x)
    return out

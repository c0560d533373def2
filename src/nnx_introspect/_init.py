"""Reproducible initialization: build a module from a fresh seed and run it."""

import functools
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from flax import nnx
from jaxtyping import Array, Shaped

from nnx_introspect._abstract import check_takes_rngs
from nnx_introspect._typing import (
    ArgumentError,
    IntLike,
    as_int,
    check_finite,
    typechecked,
)

__all__ = [
    "fresh_init_forward",
]


def _not_a_module(module: object) -> TypeError:
    return TypeError(
        f"`factory` must return an nnx.Module, got {type(module).__name__}. "
        "Pass a callable such as `lambda rngs: nnx.Linear(3, 2, rngs=rngs)`."
    )


def _jitted_build(factory: Callable[[nnx.Rngs], nnx.Module]) -> Any:
    """``factory`` built under ``nnx.jit`` from a traced key."""

    def build(key: jax.Array) -> nnx.Module:
        module = factory(nnx.Rngs(key))
        if not isinstance(module, nnx.Module):
            raise _not_a_module(module)
        return module

    return nnx.jit(build)


_cached_build = functools.lru_cache(maxsize=64)(_jitted_build)


def _compiled_init(factory: Callable[[nnx.Rngs], nnx.Module]) -> Any:
    """The jitted build of ``factory``: one compile per factory (if hashable)."""
    try:
        return _cached_build(factory)
    except TypeError:  # an unhashable callable: compile for this call only
        return _jitted_build(factory)


@typechecked
def fresh_init_forward(
    factory: Callable[[nnx.Rngs], nnx.Module],
    seed: IntLike,
    x: Shaped[Array, "..."] | Shaped[np.ndarray, "..."],
    *,
    compiled: bool = False,
) -> jax.Array:
    """Build ``factory(nnx.Rngs(seed))`` from a fresh ``Rngs`` and return ``module(x)``.

    The result is bitwise equal to doing it by hand. Because the ``Rngs`` is
    created here, two calls with the same seed see the same keys; sharing one
    advancing ``Rngs`` between two builds does not. Works inside ``jax.jit``
    with ``x`` traced and ``seed`` static. A seeded initialization recreates
    initial values only, never trained ones.

    With ``compiled=True`` (for sweeps over many seeds) the build is compiled
    once per ``factory`` with the seed's key traced
    (``nnx.Rngs(jax.random.key(seed))``, the key ``nnx.Rngs(seed)`` makes), and
    the forward pass runs op by op as in the eager path, whose compiled
    operations JAX caches per input shape. Checking 100 seeds thus costs one
    compile of the build, and each output is bitwise equal to the eager one
    (a forward compiled as a whole may fuse differently, which is why it is not).
    The factory must be pure: it is traced once and reused for every seed.
    Compiled builds are cached per ``factory`` object (64 at most), so pass the
    same function, not a fresh ``lambda``, on every call.

    Args:
        factory: A callable taking ``rngs`` and returning an ``nnx.Module``.
        seed: An integer-valued seed, ``>= 0``.
        x: The input of the forward pass; must be finite when concrete.
        compiled: Build under ``nnx.jit`` with the seed traced (see above).

    Returns:
        The module's output.

    Raises:
        TypeError: If ``seed`` is not an integer-valued scalar or ``factory``
            does not return an ``nnx.Module``.
        ValueError: If ``seed`` is negative or non-integral, ``x`` holds NaN
            or infinity, or the module rejects ``x`` (its shape or dtype).

    Example:
        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> from flax import nnx
        >>> def factory(rngs):
        ...     return nnx.Linear(3, 2, rngs=rngs)
        >>> y = fresh_init_forward(factory, 0, jnp.ones((4, 3)))
        >>> y.shape
        (4, 2)
        >>> ys = [fresh_init_forward(factory, s, jnp.ones((4, 3)), compiled=True)
        ...       for s in range(5)]
        >>> all(np.array_equal(y, fresh_init_forward(factory, s, jnp.ones((4, 3))))
        ...     for s, y in enumerate(ys))
        True
    """
    key = as_int(seed, "seed", minimum=0)
    check_finite(x, "x")
    check_takes_rngs(factory)
    if compiled:
        module = _compiled_init(factory)(jax.random.key(key))
    else:
        module = factory(nnx.Rngs(key))
    if not isinstance(module, nnx.Module):
        raise _not_a_module(module)
    try:
        out: jax.Array = module(x)
    except (TypeError, ValueError) as error:
        text = " ".join(str(error).split())
        raise ArgumentError(
            "x",
            f"`x` of shape {tuple(x.shape)} and dtype {x.dtype} cannot go through "
            f"the {type(module).__name__} that `factory` builds: {text[:300]} "
            "Pass an input the module accepts (check its last dimension).",
        ) from error
    return out

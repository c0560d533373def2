"""The type vocabulary of nnx-introspect and its argument checks.

Every public function is decorated with :data:`typechecked` (jaxtyping's
``jaxtyped`` with beartype as the checker), so a value of the wrong type or shape
raises a :class:`TypeError` that names the argument. Semantic checks that a type
cannot express (an integral float, a positive count, a finite array) live here as
small helpers so every function words its errors the same way.
"""

import math
import numbers
from collections.abc import Callable
from typing import Any, TypeAlias, TypeVar, cast

import jax
import numpy as np
from beartype import beartype
from flax import nnx
from jaxtyping import jaxtyped

__all__ = [
    "IntLike",
    "Target",
    "as_int",
    "check_finite",
    "is_traced",
    "short_repr",
    "typechecked",
]

_F = TypeVar("_F", bound=Callable[..., Any])


def typechecked(fn: _F) -> _F:
    """Runtime-check ``fn``'s annotations with jaxtyping + beartype.

    The one decorator every public function wears, so that shape variables are
    checked across arguments (bare ``@beartype`` would skip that).
    """
    return cast(_F, jaxtyped(fn, typechecker=beartype))


IntLike: TypeAlias = int | float | np.integer | np.floating | np.ndarray | jax.Array
"""An integer-valued scalar as users pass it: ``3``, ``3.0``, ``np.int32(3)``,
``jnp.asarray(3.0)``. :func:`as_int` turns it into a Python ``int``."""

Target: TypeAlias = nnx.Pytree | nnx.State[Any, Any]
"""What introspection functions accept: an NNX module or other graph node (an
``nnx.Optimizer``, say), concrete or abstract, or an ``nnx.State``."""


def short_repr(value: object, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters, for error messages."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_traced(value: object) -> bool:
    """Whether ``value`` is a JAX tracer (inside ``jit``, ``grad``, ``vmap``...)."""
    return isinstance(value, jax.core.Tracer)


def as_int(value: object, name: str, *, minimum: int = 0) -> int:
    """Coerce an integer-valued scalar to a Python ``int``, or raise.

    Accepts ``int``, an integral ``float``, NumPy scalars and 0-d NumPy or JAX
    arrays. Rejects ``bool``, strings, non-integral values, NaN, infinities,
    traced values and anything below ``minimum``, with a message that names the
    argument, shows the value and says what to pass instead.

    Example:
        >>> as_int(4.0, "features", minimum=1)
        4
    """
    need = (
        "a positive integer"
        if minimum == 1
        else ("a nonnegative integer" if minimum == 0 else f"an integer >= {minimum}")
    )
    if isinstance(value, bool | np.bool_):
        raise TypeError(f"`{name}` must be {need}, got the bool {value!r}.")
    if is_traced(value):
        raise TypeError(
            f"`{name}` must be a concrete {need.removeprefix('a ')}, got a traced "
            f"value {value!r}. Pass it as a static argument (for example with "
            f"`static_argnums` in `jax.jit`)."
        )
    if isinstance(value, np.ndarray | jax.Array):
        if value.ndim != 0:
            raise TypeError(
                f"`{name}` must be {need} (a scalar), got an array of shape "
                f"{tuple(value.shape)}."
            )
        if value.dtype == np.bool_:
            raise TypeError(f"`{name}` must be {need}, got the bool {value!r}.")
        value = value.item()
    if isinstance(value, numbers.Integral):
        result = int(value)
    elif isinstance(value, numbers.Real):
        real = float(value)
        if not math.isfinite(real):
            raise ValueError(f"`{name}` must be {need}, got {real!r}.")
        if not real.is_integer():
            raise ValueError(
                f"`{name}` must be {need}, got the non-integral value {real!r}."
            )
        result = int(real)
    else:
        raise TypeError(
            f"`{name}` must be {need}, got {value!r} of type {type(value).__name__}."
        )
    if result < minimum:
        raise ValueError(f"`{name}` must be {need}, got {result}.")
    return result


def check_finite(x: object, name: str) -> None:
    """Raise ``ValueError`` if the concrete array ``x`` holds NaN or infinity.

    Traced arrays (inside ``jit``) cannot be inspected and are let through.
    """
    if is_traced(x) or not isinstance(x, np.ndarray | jax.Array):
        return
    if not np.issubdtype(x.dtype, np.inexact):
        return
    finite = np.isfinite(np.asarray(x))
    if not finite.all():
        bad = int(finite.size - np.count_nonzero(finite))
        raise ValueError(
            f"`{name}` must be finite, got {bad} NaN or infinite value(s) among "
            f"{finite.size}. Clean the input (e.g. `jnp.nan_to_num`) first."
        )

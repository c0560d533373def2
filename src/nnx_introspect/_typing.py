"""The type vocabulary of nnx-introspect and its argument checks.

Every public function is decorated with :data:`typechecked` (jaxtyping's
``jaxtyped`` with beartype as the checker), so a value of the wrong type or shape
raises a :class:`TypeError` that names the argument. Semantic checks that a type
cannot express (an integral float, a positive count, a finite array) live here as
small helpers so every function words its errors the same way.
"""

import inspect
import math
import numbers
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, cast

import jax
import numpy as np
from beartype import beartype
from flax import nnx
from jaxtyping import jaxtyped

__all__ = [
    "ArgumentError",
    "IntLike",
    "ModulePaths",
    "Target",
    "as_int",
    "check_filters",
    "check_finite",
    "check_items",
    "is_traced",
    "short_repr",
    "typechecked",
]

_F = TypeVar("_F", bound=Callable[..., Any])


class ArgumentError(ValueError):
    """A bad argument's value: the message names it, and :attr:`argument` holds it.

    Raised wherever a value of the right type is wrong (out of range, not
    integral, a name no table holds). ``str(error)`` is the message alone, word
    for word as a plain ``ValueError`` would give it; the command line maps
    :attr:`argument` to its flag from one table instead of reading the message.

    Attributes:
        argument: The Python argument the value was passed as (``"batch"``,
            ``"max_device_bytes"``), or the root argument of a nested value
            (``"meshes"`` for ``meshes[1]``).

    Example:
        >>> from nnx_introspect import ArgumentError
        >>> from nnx_introspect._typing import as_int
        >>> try:
        ...     as_int(-1, "shape[1]")
        ... except ArgumentError as error:
        ...     print(error.argument, "|", error)
        shape | `shape[1]` must be a nonnegative integer, got -1.
    """

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(message)
        self.argument = re.split(r"[\[.]", argument, maxsplit=1)[0]

    def __reduce__(self) -> tuple[Any, ...]:  # survives pickling (process pools)
        return (type(self), (self.argument, str(self)))


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


if TYPE_CHECKING:
    ModulePaths: TypeAlias = Sequence[str]
else:
    # At run time only "a sequence" is checked by the decorator: beartype samples
    # one item of a container, so `("blocks", 3)` would fail about half the time
    # with a message that does not say which item is wrong. Functions taking
    # module paths check every item with :func:`check_items` instead.
    ModulePaths = Sequence[object]
"""Module paths such as ``["blocks", "encoder/layers"]``: a sequence of strings."""


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
            raise ArgumentError(name, f"`{name}` must be {need}, got {real!r}.")
        if not real.is_integer():
            raise ArgumentError(
                name, f"`{name}` must be {need}, got the non-integral value {real!r}."
            )
        result = int(real)
    else:
        raise TypeError(
            f"`{name}` must be {need}, got {value!r} of type {type(value).__name__}."
        )
    if result < minimum:
        raise ArgumentError(name, f"`{name}` must be {need}, got {result}.")
    return result


def check_finite(x: object, name: str) -> None:
    """Raise ``ValueError`` if the concrete array ``x`` holds NaN or infinity.

    Traced arrays (inside ``jit``) cannot be inspected and are let through.
    bfloat16 and float8 are checked too: ``ml_dtypes`` floats are not
    ``np.inexact``, so this asks JAX's dtype lattice.
    """
    if is_traced(x) or not isinstance(x, np.ndarray | jax.Array):
        return
    if not jax.numpy.issubdtype(x.dtype, jax.numpy.inexact):
        return
    finite = np.isfinite(np.asarray(x))
    if not finite.all():
        bad = int(finite.size - np.count_nonzero(finite))
        raise ArgumentError(
            name,
            f"`{name}` must be finite, got {bad} NaN or infinite value(s) among "
            f"{finite.size}. Clean the input (e.g. `jnp.nan_to_num`) first.",
        )


_FILTER_KINDS = (
    "an NNX filter: a Variable type (`nnx.Param`), a variable tag string "
    "(`'params'`), `True`/`False`, `...`, `None`, a callable `(path, value) -> "
    "bool` (such as `nnx.PathContains('kernel')`), or a list or tuple of filters"
)


def check_filters(filters: tuple[Any, ...], name: str = "filters") -> None:
    """Raise ``TypeError`` unless every item of ``filters`` is a valid NNX filter.

    What is valid is what ``flax.nnx.filterlib.to_predicate`` accepts (types,
    strings, bools, ``...``, ``None``, callables, lists and tuples of filters),
    checked recursively; callables must accept ``(path, value)``. The message names
    the offending item as ``filters[i]`` (``filters[i][j]`` inside a tuple), so a
    bad filter never reaches flax's own error path.

    Example:
        >>> from flax import nnx
        >>> check_filters((nnx.Param, "params", (nnx.BatchStat, ...)))
        >>> check_filters((nnx.Param, 3))
        Traceback (most recent call last):
        ...
        TypeError: `filters[1]` must be an NNX filter: ... got 3 of type int.
    """
    for index, item in enumerate(filters):
        _check_filter(item, f"{name}[{index}]")


def _check_filter(item: Any, where: str) -> None:
    if item is None or item is Ellipsis or isinstance(item, bool | str | type):
        return
    if isinstance(item, list | tuple):
        for index, sub in enumerate(item):
            _check_filter(sub, f"{where}[{index}]")
        return
    if callable(item):
        try:
            signature = inspect.signature(item)
        except (TypeError, ValueError):  # builtins without a signature
            return
        try:
            signature.bind((), None)
        except TypeError:
            raise TypeError(
                f"`{where}` must be {_FILTER_KINDS}; the callable "
                f"{short_repr(item)} cannot be called as `f(path, value)` (its "
                f"signature is {signature})."
            ) from None
        return
    raise TypeError(
        f"`{where}` must be {_FILTER_KINDS}; got {short_repr(item)} of type "
        f"{type(item).__name__}."
    )


def check_items(
    values: Any, name: str, item_type: type | tuple[type, ...], what: str
) -> None:
    """Raise ``TypeError`` naming ``name[i]`` for the first item not of ``item_type``.

    beartype samples one item of a container, so a ``Sequence[str]`` annotation
    alone lets ``("blocks", 3)`` through about half the time; functions that would
    crash later on a wrong item check every item with this helper.

    Example:
        >>> check_items(("blocks", 3), "stacked", str, "a module path string")
        Traceback (most recent call last):
        ...
        TypeError: `stacked[1]` must be a module path string, got 3 of type int.
    """
    types = item_type if isinstance(item_type, tuple) else (item_type,)
    for index, item in enumerate(values):
        is_bool_for_int = isinstance(item, bool) and bool not in types
        if not isinstance(item, types) or is_bool_for_int:
            raise TypeError(
                f"`{name}[{index}]` must be {what}, got {short_repr(item)} of type "
                f"{type(item).__name__}."
            )

"""The type vocabulary of nnx-introspect and its argument checks.

Every public function is decorated with :data:`typechecked` (jaxtyping's
``jaxtyped`` with beartype as the checker), so a value of the wrong type or shape
raises a :class:`TypeError` that names the argument. Semantic checks that a type
cannot express (an integral float, a positive count, a finite array) live here as
small helpers so every function words its errors the same way.
"""

import collections.abc
import functools
import inspect
import math
import numbers
import re
import types
import typing
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, cast

import jax
import numpy as np
from beartype import beartype
from beartype.door import is_bearable
from flax import nnx
from jaxtyping import TypeCheckError, jaxtyped

__all__ = [
    "ArgumentError",
    "ArgumentTypeError",
    "IntLike",
    "ModulePaths",
    "Target",
    "as_count",
    "as_int",
    "check_filters",
    "check_finite",
    "check_items",
    "describe_type",
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


class ArgumentTypeError(TypeError):
    """A bad argument's type: one line naming it, and :attr:`argument` holding it.

    What :data:`typechecked` raises in place of jaxtyping's and beartype's
    multi-line dumps: ``str(error)`` is one sentence (the argument, what it
    must be, what it got); the command line maps :attr:`argument` to its
    flag, as it does an :class:`ArgumentError`'s.

    Example:
        >>> error = ArgumentTypeError("topology", "`topology` must be ...")
        >>> error.argument, isinstance(error, TypeError)
        ('topology', True)
    """

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(message)
        self.argument = argument

    def __reduce__(self) -> tuple[Any, ...]:  # survives pickling (process pools)
        return (type(self), (self.argument, str(self)))


def typechecked(fn: _F) -> _F:
    """Runtime-check ``fn``'s annotations with jaxtyping + beartype, in one line.

    The one decorator every public function (or frozen dataclass: its
    ``__init__``) wears, so that shape variables are checked across arguments
    (bare ``@beartype`` would skip that). A value of the wrong type raises an
    :class:`ArgumentTypeError` (a ``TypeError``) of one line naming the
    argument, what it must be and the value given, never the checkers'
    many-line dump of every argument.

    Example:
        >>> @typechecked
        ... def f(topology: str | None = None, offload: bool = False) -> int:
        ...     return 1
        >>> f(topology=8)
        Traceback (most recent call last):
        ...
        nnx_introspect._typing.ArgumentTypeError: `topology` must be a string or \
None, got 8 of type int.
        >>> f(offload="yes")
        Traceback (most recent call last):
        ...
        nnx_introspect._typing.ArgumentTypeError: `offload` must be True or False, \
got 'yes' of type str.
    """
    if inspect.isclass(fn):
        checked_class = jaxtyped(fn, typechecker=beartype)
        init = checked_class.__init__
        checked_class.__init__ = _one_line_errors(init, init)  # type: ignore[method-assign]
        return cast(_F, checked_class)
    return cast(_F, _one_line_errors(jaxtyped(fn, typechecker=beartype), fn))


def _one_line_errors(checked: Callable[..., Any], fn: Callable[..., Any]) -> Any:
    """``checked`` (``fn`` with its checks), its type errors made one line.

    The checkers' error is caught where it is raised, by the function whose
    argument it names: an error of a checked function called deeper is
    already one line when it gets here, and passes through as it is.
    """
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return checked(*args, **kwargs)
        except TypeCheckError as error:
            raise _one_line(error, fn, signature, args, kwargs) from None

    return wrapper


_PARAMETER = re.compile(r"typechecking parameter '(\w+)'")


def _one_line(
    error: Exception,
    fn: Callable[..., Any],
    signature: inspect.Signature,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> TypeError:
    """The checkers' ``error`` about a call of ``fn`` as one sentence."""
    found = _PARAMETER.search(str(error))
    try:
        bound = signature.bind(*args, **kwargs).arguments
    except TypeError:
        bound = {}
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # an annotation that does not resolve here
        hints = {}
    name = found.group(1) if found is not None else _failing(bound, hints)
    if name is None or name not in bound:  # the return value's
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return TypeError(" ".join(first.split()) or f"{fn.__qualname__}: bad type")
    value = bound[name]
    annotation = hints.get(name, signature.parameters[name].annotation)
    if signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
        return TypeError(" ".join(str(error).split()[:40]))  # pragma: no cover
    shapes = _shape_words(str(error))
    return ArgumentTypeError(
        name,
        f"`{name}` must be {describe_type(annotation)}, got {short_repr(value)} "
        f"of type {type(value).__name__}{shapes}.",
    )


def _failing(bound: dict[str, Any], hints: dict[str, Any]) -> str | None:
    """The first argument in ``bound`` that is not of its type in ``hints``.

    Every item of a container is checked (:func:`_every_item`): beartype
    checks one, at random, so jaxtyping, asking it again which parameter a
    failed check was about, may sample a good item and name none.
    """
    for name, value in bound.items():
        hint = hints.get(name)
        if hint is None:
            continue
        try:
            if not _every_item(value, hint):
                return name
        except Exception:  # a hint beartype cannot check alone (a shape variable)
            continue
    return None


_SEQUENCES = (list, set, frozenset, collections.abc.Sequence, collections.abc.Set)
_CONTAINERS = (list, tuple, set, frozenset)


def _every_item(value: Any, hint: Any) -> bool:
    """Whether ``value`` is of ``hint``, every item of its containers checked.

    Example:
        >>> _every_item((("data", 4), ("tp", "2")), tuple[tuple[str, int], ...])
        False
        >>> _every_item({"a": [1, 2]}, dict[str, list[int]] | None)
        True
    """
    if not is_bearable(value, hint):
        return False
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_every_item(value, a) for a in args if is_bearable(value, a))
    if origin is tuple and args and isinstance(value, tuple):
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_every_item(v, args[0]) for v in value)
        return all(_every_item(v, a) for v, a in zip(value, args, strict=False))
    if (
        origin in _SEQUENCES
        and args
        and isinstance(value, list | tuple | set | frozenset)
    ):
        return all(_every_item(v, args[0]) for v in value)
    if (
        origin in (dict, collections.abc.Mapping)
        and len(args) == 2
        and isinstance(value, collections.abc.Mapping)
    ):
        return all(
            _every_item(k, args[0]) and _every_item(v, args[1])
            for k, v in value.items()
        )
    return True


def _shape_words(message: str) -> str:
    """The axis sizes jaxtyping saw so far, when its message gives them."""
    found = re.search(r"axis annotation are as follows\.\s*(.+)", message, re.DOTALL)
    if found is None:
        return ""
    sizes = " ".join(found.group(1).split())
    return f" (the sizes seen so far: {sizes})" if sizes else ""


_INT_LIKE_PARTS = frozenset({int, float, np.integer, np.floating, np.ndarray})
_PLAIN = {
    type(None): "None",
    bool: "True or False",
    int: "an integer",
    float: "a number",
    str: "a string",
    bytes: "bytes",
    list: "a list",
    tuple: "a tuple",
    dict: "a dict",
}
_COLLECTIONS = {
    "Callable": "a callable",
    "Mapping": "a mapping (such as a dict)",
    "Sequence": "a sequence (a list or a tuple)",
    "Iterable": "an iterable",
    "Collection": "a collection",
}


def describe_type(annotation: Any) -> str:
    """What a value of ``annotation`` is, in words: ``"a string or None"``.

    An integer-valued scalar (:data:`IntLike`: ``int``, ``float``, NumPy and
    JAX scalars) is ``"an integer"``.

    Example:
        >>> describe_type(str | None), describe_type(bool)
        ('a string or None', 'True or False')
        >>> describe_type(IntLike | str | None)
        'an integer (such as 8), a string or None'
        >>> import optax
        >>> describe_type(optax.GradientTransformation | str | None)
        'an optax.GradientTransformation, a string or None'
    """
    members = _members(annotation)
    words: list[str] = []
    if set(members) >= _INT_LIKE_PARTS:
        members = [
            m for m in members if m not in _INT_LIKE_PARTS and m is not jax.Array
        ]
        words.append("an integer (such as 8)")
    none = type(None) in members
    for member in members:
        if member is type(None):
            continue
        word = _one_type(member)
        if word not in words:
            words.append(word)
    if none:
        words.append("None")
    if not words:
        return "a value of another type"
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def _members(annotation: Any) -> list[Any]:
    """The types of a union, in order (one type: itself)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        out: list[Any] = []
        for arg in typing.get_args(annotation):
            out += _members(arg)
        return out
    return [annotation]


def _one_type(annotation: Any) -> str:
    """One member of a union in words, with its article."""
    if annotation in _PLAIN:
        return _PLAIN[annotation]
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        shown = ", ".join(repr(a) for a in typing.get_args(annotation))
        return f"one of {shown}"
    base = origin if origin is not None else annotation
    name = getattr(base, "__name__", None)
    if name in _COLLECTIONS and getattr(base, "__module__", "") in (
        "collections.abc",
        "typing",
    ):
        return _COLLECTIONS[name]
    if base in _PLAIN:
        return _PLAIN[base]
    if not isinstance(base, type) or name is None:
        return f"a {annotation}"
    if getattr(base, "__module__", "").startswith("jaxtyping"):
        return f"a {annotation}"  # an array annotation: Float[Array, 'b d']
    shown = f"{_module_alias(base.__module__)}{base.__qualname__}"
    vowel = shown[0].lower() in "aeiou" or shown.startswith(("nnx.", "np."))
    return f"{'an' if vowel else 'a'} {shown}"


def _module_alias(module: str) -> str:
    """``flax.nnx.module`` -> ``nnx.``, ``optax._src.base`` -> ``optax.``..."""
    if module.startswith("flax.nnx"):
        return "nnx."
    if module.startswith("nnx_introspect") or module == "builtins":
        return ""
    if module.startswith("numpy"):
        return "np."
    return module.split(".")[0] + "."


IntLike: TypeAlias = int | float | np.integer | np.floating | np.ndarray | jax.Array
"""An integer-valued scalar as users pass it: ``3``, ``3.0``, ``np.int32(3)``,
``jnp.asarray(3.0)``. :func:`as_int` turns it into a Python ``int``."""

Target: TypeAlias = nnx.Pytree | nnx.State[Any, Any]
"""What introspection functions accept: an NNX module or other graph node (an
``nnx.Optimizer``, say), concrete or abstract, or an ``nnx.State``."""


def short_repr(value: object, limit: int = 80) -> str:
    """``repr(value)`` on one line, cut to ``limit`` characters, for error messages.

    Example:
        >>> import numpy as np
        >>> short_repr(np.ones((2, 2)))
        'array([[1., 1.], [1., 1.]])'
    """
    text = " ".join(repr(value).split())
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


def as_count(value: object, name: str, *, minimum: int = 1) -> int:
    """A count of things (prompts, sequences, generations): an integer, never a float.

    :func:`as_int`'s checks, and a float refused even when integral: ``2.0``
    prompts is a value computed as a float by mistake more often than meant,
    and sizes that are counts take Python or NumPy integers (or 0-d integer
    arrays).

    Example:
        >>> as_count(2, "batch"), as_count(np.int64(3), "batch")
        (2, 3)
        >>> as_count(2.0, "batch")
        Traceback (most recent call last):
        ...
        nnx_introspect._typing.ArgumentTypeError: `batch` must be an integer (a \
count), got the float 2.0. Pass 2.
    """
    floating = isinstance(value, float | np.floating) or (
        isinstance(value, np.ndarray | jax.Array)
        and value.ndim == 0
        and np.issubdtype(value.dtype, np.floating)
    )
    if floating and not is_traced(value):
        real = float(value)  # type: ignore[arg-type]
        fix = f" Pass {int(real)}." if real.is_integer() else ""
        raise ArgumentTypeError(
            name,
            f"`{name}` must be an integer (a count), got the float {real!r}.{fix}",
        )
    return as_int(value, name, minimum=minimum)


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

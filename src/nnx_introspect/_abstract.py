"""Abstract models: the structure of a model without allocating it."""

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import flax.errors
from flax import nnx

from nnx_introspect import _nnx
from nnx_introspect._typing import (
    ArgumentError,
    IntLike,
    as_int,
    short_repr,
    typechecked,
)

__all__ = [
    "abstract_model",
    "check_takes_rngs",
]

M = TypeVar("M")

_EXAMPLE = "Pass a callable such as `lambda rngs: nnx.Linear(3, 2, rngs=rngs)`."


def check_takes_rngs(factory: Callable[..., Any]) -> None:
    """Raise if ``factory`` visibly cannot be called with one positional ``rngs``."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # builtins and C callables: just call it
        return
    try:
        signature.bind(None)
    except TypeError as error:
        raise TypeError(
            f"`factory` must take one positional argument, `rngs`, but "
            f"{short_repr(factory)} has the signature {signature} ({error}). "
            f"{_EXAMPLE}"
        ) from error


def _returning_a_graph_node(
    factory: Callable[[nnx.Rngs], M],
) -> Callable[[nnx.Rngs], M]:
    """``factory``, checked inside the build to return an NNX graph node."""

    def build(rngs: nnx.Rngs) -> M:
        module = factory(rngs)
        if not isinstance(module, nnx.Pytree):
            raise TypeError(
                "`factory` must return an nnx.Module (or another NNX graph node, "
                f"such as an nnx.Optimizer), got {short_repr(module)} of type "
                f"{type(module).__name__}. {_EXAMPLE}"
            )
        return module

    return build


@typechecked
def abstract_model(factory: Callable[[nnx.Rngs], M], /, *, seed: IntLike = 0) -> M:
    """Build ``factory(nnx.Rngs(seed))`` abstractly: shapes only, nothing allocated.

    The result is the module ``factory`` returns, with every array leaf a
    ``jax.ShapeDtypeStruct``, as ``nnx.eval_shape(lambda: factory(nnx.Rngs(seed)))``
    gives it, but built in time linear in the number of variables (plain
    ``nnx.eval_shape`` slows down quadratically: a 7B Llama takes seconds). No
    forward pass runs. Variables annotated with ``nnx.with_partitioning`` or
    ``out_sharding`` build even when no mesh is set (plain ``nnx.eval_shape``
    raises then) and keep their annotations for mesh planning. Use the result
    with every counting and reporting function.

    Args:
        factory: A callable taking an ``nnx.Rngs`` and returning a module (or
            other graph node), such as ``lambda rngs: nnx.Linear(2, 3, rngs=rngs)``.
        seed: The integer seed of the ``nnx.Rngs`` given to ``factory``, ``>= 0``.

    Returns:
        The abstract module.

    Raises:
        TypeError: If ``factory`` is not callable, cannot take ``rngs`` or does
            not return an NNX graph node (``nnx.Module``, ``nnx.Optimizer``...),
            or ``seed`` is not an integer-valued scalar.
        ValueError: If ``seed`` is negative or non-integral, or ``factory``
            draws from an ``nnx.Rngs`` (or changes a variable) created outside
            it, which flax refuses under the abstract build's trace (its
            ``TraceContextError`` is the ``__cause__``).

    Whatever else ``factory`` itself raises propagates unchanged (it is the
    caller's error); the garbage collector and flax's eager-sharding setting are left as
    they were.

    Example:
        >>> from flax import nnx
        >>> model = abstract_model(lambda rngs: nnx.Linear(4096, 4096, rngs=rngs))
        >>> model.kernel.shape, model.kernel.dtype
        ((4096, 4096), dtype('float32'))
    """
    key = as_int(seed, "seed", minimum=0)
    check_takes_rngs(factory)
    try:
        model: M = _nnx.abstract_build(_returning_a_graph_node(factory), key)
    except flax.errors.TraceContextError as err:
        # The build runs under a trace: an Rngs (or any variable) made outside
        # the factory cannot be drawn from or mutated there.
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ArgumentError(
            "factory",
            "`factory` changed flax state created outside it (typically an "
            "`nnx.Rngs` made before the call), which an abstract build cannot "
            "trace: draw from the rngs you are given and build every module "
            f"inside `factory`. {_EXAMPLE} flax said: {first}",
        ) from err
    return model

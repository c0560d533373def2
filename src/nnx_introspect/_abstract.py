"""Abstract models: the structure of a model without allocating it."""

from collections.abc import Callable
from typing import TypeVar

from flax import nnx

from nnx_introspect import _nnx
from nnx_introspect._typing import IntLike, as_int, typechecked

__all__ = ["abstract_model"]

M = TypeVar("M")


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
        TypeError: If ``factory`` is not callable or ``seed`` is not an
            integer-valued scalar.
        ValueError: If ``seed`` is negative or non-integral.

    Example:
        >>> from flax import nnx
        >>> model = abstract_model(lambda rngs: nnx.Linear(4096, 4096, rngs=rngs))
        >>> model.kernel.shape, model.kernel.dtype
        ((4096, 4096), dtype('float32'))
    """
    key = as_int(seed, "seed", minimum=0)
    model: M = _nnx.abstract_build(factory, key)
    return model

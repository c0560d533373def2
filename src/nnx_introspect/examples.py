"""Example models: factories ``(rngs) -> nnx.Module`` for docs, tests and the CLI.

Every factory takes an ``nnx.Rngs`` and returns a module, so each one works with
:func:`~nnx_introspect.fresh_init_forward`, abstract builds and the CLI's
``package.module:callable`` targets.
"""

import jax
from flax import nnx
from jaxtyping import Array, Float

__all__ = ["TwoLayer", "two_layer"]


class TwoLayer(nnx.Module):
    """Two ``nnx.Linear`` layers with no activation: the model of the specs.

    Args:
        in_features: Input width.
        hidden: Width of both layers' outputs.
        rngs: The RNG streams; ``l1`` is built before ``l2`` from the same ones.

    Example:
        >>> from flax import nnx
        >>> model = TwoLayer(3, 4, rngs=nnx.Rngs(0))
        >>> model.l1.kernel.shape, model.l2.kernel.shape
        ((3, 4), (4, 4))
    """

    def __init__(self, in_features: int, hidden: int, *, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(in_features, hidden, rngs=rngs)
        self.l2 = nnx.Linear(hidden, hidden, rngs=rngs)

    def __call__(self, x: Float[Array, "*batch d"]) -> Float[Array, "*batch h"]:
        """``l2(l1(x))``."""
        y: jax.Array = self.l2(self.l1(x))
        return y


def two_layer(rngs: nnx.Rngs) -> TwoLayer:
    """The spec's two-layer model with 3 inputs and 4 hidden units (36 parameters).

    Example:
        >>> from flax import nnx
        >>> from nnx_introspect import count_params
        >>> count_params(two_layer(nnx.Rngs(0)))
        36
    """
    return TwoLayer(3, 4, rngs=rngs)

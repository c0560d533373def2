"""The critic's value of each token: :data:`VALUES`, and :func:`token_values`.

What a PPO step's critic runs before the actor trains (tunix's
``RLCluster.get_values``): the forward pass over ``batch[0]``, integer tokens
``[B, T]``, and the model's one score a token, ``[B, T]``, the ``[B, T, 1]``
output of its value head without its last axis (tunix's ``compute_score``).
A program kind of the step's pipeline (:mod:`~nnx_introspect._step.program`):
built from the same request, compiled where a step compiles, read the same
way.
"""

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh, PartitionSpec
from jaxtyping import Array, Int, Shaped

from nnx_introspect._conventions import (
    follows_kv_cache_convention,
    logits_by_kv_cache_convention,
)
from nnx_introspect._step.inputs import Request
from nnx_introspect._step.program import Program, ProgramKind, forward_program
from nnx_introspect._typing import ArgumentError, typechecked

__all__ = ["VALUES", "token_values"]


@typechecked
def token_values(model: nnx.Module, tokens: Int[Array, "b t"]) -> Shaped[Array, "b t"]:
    """The critic's score of each token, ``[B, T]``, as tunix's ``compute_score``.

    The model is called as the policy is (:func:`per_token_logps`): the tunix
    and flax-gemma convention ``model(tokens, positions, None,
    attention_mask)``, or ``model(tokens)``; its ``[B, T, 1]`` output (the
    first item of a tuple) loses its last axis.

    Raises:
        ArgumentError: The model's output is not ``[B, T, 1]`` (naming
            ``critic``).

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> class Count(nnx.Module):  # each token's value is the token
        ...     def __call__(self, tokens):
        ...         return tokens[..., None].astype(jnp.float32)
        >>> token_values(Count(), jnp.array([[3, 4, 5]])).tolist()
        [[3.0, 4.0, 5.0]]
    """
    if follows_kv_cache_convention(model):
        out = logits_by_kv_cache_convention(model, tokens)
    else:
        out = model(tokens)
    out = out[0] if isinstance(out, tuple) else out
    shape = tuple(getattr(out, "shape", ()))
    if shape != (*tokens.shape, 1):
        raise ArgumentError(
            "critic",
            f"`critic` must return one value a token, [batch, sequence, 1], for "
            f"its {tuple(tokens.shape)} tokens, got {shape or type(out).__name__}. "
            "A critic is a model with a value head (tunix's compute_score "
            "convention); nnx_introspect.examples.llama_critic is one.",
        )
    values: jax.Array = jnp.squeeze(out, axis=-1)
    return values


def build(request: Request, mesh: Mesh, specs: Mapping[str, PartitionSpec]) -> Program:
    """The jitted values of ``request``'s tokens under its model (a critic)."""

    def values(model: Any, batch: tuple[Any, ...]) -> Any:
        return token_values(model, batch[0])

    return forward_program(request, mesh, specs, values, "values")


VALUES = ProgramKind(
    "values",
    build,
    "the critic's value of each of the batch's tokens (forward only)",
)
"""A PPO critic's program, as ``"values"`` names it in a child's request."""

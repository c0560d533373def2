"""The per-token log-probabilities of a batch of tokens: :data:`LOGPROBS`.

What an RL step's reference model runs (and the actor's old policy, where it
is recomputed): the forward pass over ``batch[0]``, integer tokens
``[B, T]``, and the log-probability the model gives each next token, float32
``[B, T - 1]``, without keeping the logits. A program kind of the step's
pipeline (:mod:`~nnx_introspect._step.program`): built from the same request,
compiled where a step compiles (this process or a child), read the same way.
"""

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec

from nnx_introspect._step.inputs import Request
from nnx_introspect._step.loss import _call_model
from nnx_introspect._step.program import Program, ProgramKind, forward_program

__all__ = ["LOGPROBS", "token_logprobs"]


def token_logprobs(logits: jax.Array, tokens: jax.Array) -> jax.Array:
    """The log-probability of each next token: float32 ``[B, T - 1]``.

    Example:
        >>> logits = jnp.zeros((1, 3, 4))  # uniform over 4 tokens
        >>> out = token_logprobs(logits, jnp.array([[0, 1, 2]]))
        >>> out.shape, [round(v, 4) for v in out[0].tolist()]  # log(1/4)
        ((1, 2), [-1.3863, -1.3863])
    """
    scores = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), axis=-1)
    picked = jnp.take_along_axis(scores, tokens[:, 1:, None], axis=-1)
    return picked[..., 0]


def build(request: Request, mesh: Mesh, specs: Mapping[str, PartitionSpec]) -> Program:
    """The jitted log-probabilities of ``request``'s tokens under its model."""

    def logprobs(model: Any, batch: tuple[Any, ...]) -> Any:
        return token_logprobs(_call_model(model, batch[:1], None), batch[0])

    return forward_program(request, mesh, specs, logprobs, "log-probabilities")


LOGPROBS = ProgramKind(
    "logprobs",
    build,
    "per-token log-probabilities of the batch's tokens (forward only)",
)
"""The reference model's program, as ``"logprobs"`` names it in a child's request."""

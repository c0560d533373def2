"""The PPO losses of google-tunix 0.1.7 under its default configuration.

tunix's PPO learner (``tunix/rl/ppo/ppo_learner.py``) trains two models each
step: the actor on ``ppo_policy_loss_fn`` and the critic on
``ppo_value_loss_fn`` (both ``tunix/rl/algo_core.py``, registered as
``"ppo"``). Written once for the library, so that both steps compile without
tunix installed. For completion token ``t`` of sequence ``b``, with ``logp``
the policy's log-probability of that token (temperature 1: the PPO loss
passes none), ``old`` the rollout policy's, ``A`` the token's advantage (GAE),
``v`` the critic's value at the token before it, ``v_old`` the values the
step's advantages were computed with and ``R`` the returns:

.. code-block:: text

    ratio  = exp(logp - old)
    policy = mean_mask(max(-A * ratio, -A * clip(ratio, 1 - eps, 1 + eps)))
    value  = 0.5 * mean_mask(max((v - R)^2, (clip(v, v_old - c, v_old + c) - R)^2))

``mean_mask`` is tunix's ``masked_mean``: the sum over the counted tokens
over their number (plus ``1e-8``). Under ``PPOConfig()``'s defaults there is
no KL term in the policy loss (the loss reads ``kl_coef``, which
``PPOConfig`` does not define: the KL to the reference enters the rewards),
no entropy term (``entropy_coef`` ``None``) and no dual clip (``epsilon_c``
``None``).

Example:
    >>> PPO_EPSILON, CLIP_RANGE_VALUE
    (0.2, 0.2)
"""

from typing import Final, TypeAlias

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float, Int, Shaped

from nnx_introspect._rl.loss import _coefficient, per_token_logps
from nnx_introspect._step import token_values
from nnx_introspect._typing import typechecked

__all__ = ["CLIP_RANGE_VALUE", "PPO_EPSILON", "ppo_loss", "value_loss"]

PPO_EPSILON: Final = 0.2
"""The ratio's clip, ``[1 - eps, 1 + eps]``: ``PPOConfig.epsilon``
(``epsilon_low`` and ``epsilon_high`` fall back on it)."""

CLIP_RANGE_VALUE: Final = 0.2
"""The values' clip around the old values: ``PPOConfig.clip_range_value``."""

_PolicyBatch: TypeAlias = tuple[
    Int[Array, "b p"],
    Int[Array, "b c"],
    Shaped[Array, "b c"],
    Float[Array, "b c"],
    Float[Array, "b c"],
]
"""``(prompt_ids, completion_ids, completion_mask, advantages,
old_per_token_logps)``: the fields of tunix's PPO ``TrainExample`` the policy
loss reads, in the step's positional order."""

_ValueBatch: TypeAlias = tuple[
    Int[Array, "b p"],
    Int[Array, "b c"],
    Shaped[Array, "b c"],
    Float[Array, "b c"],
    Float[Array, "b c"],
]
"""``(prompt_ids, completion_ids, completion_mask, returns, old_values)``: the
fields the value loss reads."""


def _masked_mean(x: jax.Array, mask: jax.Array) -> jax.Array:
    """Tunix's ``masked_mean`` (``algo_core.py``), op for op."""
    cast = mask.astype(x.dtype)
    out: jax.Array = jnp.sum(x * cast) / (jnp.sum(cast) + 1e-8)
    return out


@typechecked
def ppo_loss(
    model: nnx.Module, batch: _PolicyBatch, *, epsilon: float | int = PPO_EPSILON
) -> Float[Array, ""]:
    """Tunix's PPO policy loss for ``model`` on ``batch`` (the module's formula).

    Equal to ``tunix.rl.algo_core.ppo_policy_loss_fn(model, example,
    PPOConfig(), pad_id, eos_id)[0]`` for any ``pad_id`` no token equals.
    Usable as a step's ``loss=``; the actor's loss of
    :func:`~nnx_introspect.rl_memory_report` with a ``critic``.

    Args:
        model: The policy (called as :func:`per_token_logps` calls it).
        batch: ``(prompt_ids, completion_ids, completion_mask, advantages,
            old_per_token_logps)``: ``int[B, P]``, ``int[B, C]``, ``[B, C]``
            (1 for each counted token), the per-token advantages
            ``float[B, C]`` and the rollout policy's log-probabilities
            ``float[B, C]``.
        epsilon: The ratio's clip (:data:`PPO_EPSILON`).

    Returns:
        The loss, a float32 scalar.

    Example:
        With the rollout policy equal to the policy every ratio is 1: the loss
        is minus the mean advantage of the counted tokens.

        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> class Uniform(nnx.Module):
        ...     def __call__(self, tokens):
        ...         return jnp.zeros((*tokens.shape, 4))
        >>> prompt = jnp.ones((2, 1), jnp.int32)
        >>> completion = jnp.ones((2, 2), jnp.int32)
        >>> mine = per_token_logps(Uniform(), prompt, completion, temperature=1)
        >>> mask = jnp.array([[1, 1], [1, 0]])
        >>> advantages = jnp.array([[1.0, 2.0], [3.0, 9.0]])
        >>> batch = (prompt, completion, mask, advantages, mine)
        >>> round(float(ppo_loss(Uniform(), batch)), 4)  # -(1 + 2 + 3) / 3
        -2.0
    """
    epsilon = _coefficient(epsilon, "epsilon")
    prompt_ids, completion_ids, mask, advantages, old = batch
    logps = per_token_logps(model, prompt_ids, completion_ids, temperature=1.0)
    ratio = jnp.exp(logps - old.astype(jnp.float32))
    adv = advantages.astype(jnp.float32)
    per_token = jnp.maximum(
        -ratio * adv, -jnp.clip(ratio, 1 - epsilon, 1 + epsilon) * adv
    )
    loss: jax.Array = _masked_mean(per_token, mask).astype(jnp.float32)
    return loss


@typechecked
def value_loss(
    model: nnx.Module,
    batch: _ValueBatch,
    *,
    clip_range_value: float | int = CLIP_RANGE_VALUE,
) -> Float[Array, ""]:
    """Tunix's PPO value loss for the critic ``model`` on ``batch``.

    Equal to ``tunix.rl.algo_core.ppo_value_loss_fn(model, example,
    PPOConfig().clip_range_value, pad_id, eos_id)[0]`` for any ``pad_id`` no
    token equals: the value of completion token ``t`` is the critic's score
    of the token before it. The critic's loss of
    :func:`~nnx_introspect.rl_memory_report` with a ``critic``.

    Args:
        model: The critic, returning ``[B, T, 1]`` (:func:`token_values`).
        batch: ``(prompt_ids, completion_ids, completion_mask, returns,
            old_values)``: ``int[B, P]``, ``int[B, C]``, ``[B, C]``, and the
            returns and the old values, ``float[B, C]``.
        clip_range_value: The values' clip (:data:`CLIP_RANGE_VALUE`).

    Returns:
        The loss, a float32 scalar.

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> class Zero(nnx.Module):  # every value 0
        ...     def __call__(self, tokens):
        ...         return jnp.zeros((*tokens.shape, 1))
        >>> prompt = jnp.ones((1, 1), jnp.int32)
        >>> completion = jnp.ones((1, 2), jnp.int32)
        >>> mask, old = jnp.ones((1, 2)), jnp.zeros((1, 2))
        >>> returns = jnp.array([[1.0, 3.0]])
        >>> batch = (prompt, completion, mask, returns, old)
        >>> # 0.5 * mean(1^2, 3^2): the clip keeps 0 within 0.2 of 0
        >>> round(float(value_loss(Zero(), batch)), 4)
        2.5
    """
    clip = _coefficient(clip_range_value, "clip_range_value")
    prompt_ids, completion_ids, mask, returns, old = batch
    tokens = jnp.concatenate([prompt_ids, completion_ids], axis=1)
    completion = completion_ids.shape[1]
    vpreds = token_values(model, tokens)[:, -completion - 1 : -1]
    clipped = jnp.clip(vpreds, old - clip, old + clip)
    losses = jnp.maximum(jnp.square(vpreds - returns), jnp.square(clipped - returns))
    loss: jax.Array = (0.5 * _masked_mean(losses, mask)).astype(jnp.float32)
    return loss

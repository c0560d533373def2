"""The GRPO loss of google-tunix 0.1.7 under its default configuration.

What tunix's GRPO learner differentiates (``tunix/rl/algo_core.py``:
``grpo_loss_fn``, registered as ``"grpo"``), written once for the library so
that a step can be compiled with it (``step_memory_report(..., loss=grpo_loss)``)
without tunix installed. For completion token ``t`` of sequence ``b``, with
``logp`` the policy's log-probability of that token (its logits divided by the
sampling temperature), ``old`` and ``ref`` the rollout policy's and the
reference model's, and ``A_b`` the sequence's advantage:

.. code-block:: text

    ratio = exp(clip(logp - old, -20, 20))
    pg    = max(-A_b * ratio, -A_b * clip(ratio, 1 - epsilon, 1 + epsilon))
    kl    = logp - ref                                  (tunix's "kl" mode)
    loss  = agg(pg) + beta * agg(kl)                    (no KL term if beta == 0)

``agg`` is tunix's ``"sequence-mean-token-mean"``: each sequence's mean over
its masked completion tokens, then the mean over the sequences with at least
one such token. The tokens are the prompt followed by the completion, every
one of them valid: the model reads them at positions ``0 .. P+C-1`` under a
causal mask, which is what tunix builds for any ``pad_id`` no token equals
(``eos_id`` plays no part in the loss). What tunix computes beside the loss
(entropy, clip fractions and other logged diagnostics) is not computed here.

The defaults, each where tunix 0.1.7 defines it:

* :data:`BETA`, :data:`EPSILON`, :data:`LOSS_ALGO`, :data:`LOSS_AGG_MODE` and
  :data:`KL_LOSS_MODE`: ``GRPOConfig`` (``tunix/rl/grpo/grpo_learner.py``).
* :data:`TEMPERATURE`: ``RolloutConfig.temperature``
  (``tunix/rl/rollout/base_rollout.py``), which ``GRPOLearner.__init__`` copies
  into the loss's config.
* :data:`LOG_RATIO_CLIP`: hard-coded in ``grpo_loss_fn``.
* The upper clip ``1 + EPSILON``: ``GRPOConfig`` has no ``epsilon_high`` and
  ``grpo_loss_fn`` falls back on ``epsilon``; no dual clip (``epsilon_c`` unset),
  no KL clamp (``AlgorithmConfig.kl_clamp_value`` is ``None``).

Example:
    >>> BETA, EPSILON, TEMPERATURE, LOG_RATIO_CLIP
    (0.04, 0.2, 0.9, 20.0)
    >>> LOSS_ALGO, LOSS_AGG_MODE, KL_LOSS_MODE
    ('grpo', 'sequence-mean-token-mean', 'kl')
"""

import math
from typing import Final, Literal, TypeAlias

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float, Int, Shaped

from nnx_introspect._conventions import (
    follows_kv_cache_convention,
    logits_by_kv_cache_convention,
)
from nnx_introspect._typing import ArgumentError, typechecked

__all__ = [
    "BETA",
    "EPSILON",
    "KL_LOSS_MODE",
    "LOG_RATIO_CLIP",
    "LOSS_AGG_MODE",
    "LOSS_ALGO",
    "TEMPERATURE",
    "grpo_loss",
    "per_token_logps",
]

BETA: Final = 0.04
"""The KL penalty's coefficient: ``GRPOConfig.beta``
(``tunix/rl/grpo/grpo_learner.py:95``)."""

EPSILON: Final = 0.2
"""The ratio's clip, ``[1 - EPSILON, 1 + EPSILON]``: ``GRPOConfig.epsilon``
(``grpo_learner.py:97``); the upper bound too, since ``GRPOConfig`` has no
``epsilon_high`` (``tunix/rl/algo_core.py:371-375``)."""

TEMPERATURE: Final = 0.9
"""The sampling temperature the logits are divided by:
``RolloutConfig.temperature`` (``tunix/rl/rollout/base_rollout.py:81``), set
on the loss's config by ``GRPOLearner.__init__`` (``grpo_learner.py:169-171``)
and applied in ``compute_per_token_logps`` (``tunix/rl/common.py:379-380``;
``0.0`` and ``1.0`` leave the logits as they are)."""

LOG_RATIO_CLIP: Final = 20.0
"""The log-ratio ``logp - old`` is clipped to ``[-20, 20]`` before ``exp``
(``algo_core.py:414``)."""

LOSS_ALGO: Final[Literal["grpo"]] = "grpo"
"""Token-level ratios (not GSPO's sequence-level ones): ``GRPOConfig.loss_algo``
(``grpo_learner.py:87-92``)."""

LOSS_AGG_MODE: Final[Literal["sequence-mean-token-mean"]] = "sequence-mean-token-mean"
"""Per-sequence token means, averaged over non-empty sequences:
``GRPOConfig.loss_agg_mode`` (``grpo_learner.py:85``), computed by
``aggregate_loss`` (``tunix/rl/common.py:560-565``)."""

KL_LOSS_MODE: Final[Literal["kl"]] = "kl"
"""The KL estimate ``logp - ref``: ``GRPOConfig.kl_loss_mode``
(``grpo_learner.py:96``), computed by ``compute_kl_divergence``
(``tunix/rl/common.py:151-152``)."""

_Batch: TypeAlias = tuple[
    Int[Array, "b p"],
    Int[Array, "b c"],
    Shaped[Array, "b c"],
    Float[Array, " b"],
    Float[Array, "b c"],
    Float[Array, "b c"],
]
"""``(prompt_ids, completion_ids, completion_mask, advantages,
ref_per_token_logps, old_per_token_logps)``, the fields of tunix's
``TrainExample`` the loss reads, in the step's positional order."""


def _coefficient(value: float | int, name: str) -> float:
    """``value`` as a finite nonnegative Python ``float``, or raise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(
            f"`{name}` must be a nonnegative float, got {value!r} of type "
            f"{type(value).__name__}."
        )
    result = float(value)
    if not math.isfinite(result) or result < 0:
        raise ArgumentError(
            name, f"`{name}` must be a finite nonnegative float, got {result!r}."
        )
    return result


def _aggregate(
    per_token: Float[Array, "b c"], mask: Shaped[Array, "b c"]
) -> Float[Array, ""]:
    """Tunix's ``"sequence-mean-token-mean"`` (``common.py:550-565``), op for op."""
    per_token = per_token.astype(jnp.float32)
    tokens = mask.sum(axis=-1)
    rows = jnp.clip((tokens > 0).sum(), min=1)
    per_sequence = (per_token * mask).sum(axis=-1) / jnp.clip(tokens, min=1)
    return per_sequence.sum() / rows


@typechecked
def per_token_logps(
    model: nnx.Module,
    prompt_ids: Int[Array, "b p"],
    completion_ids: Int[Array, "b c"],
    *,
    temperature: float | int = TEMPERATURE,
) -> Float[Array, "b c"]:
    """Each completion token's float32 log-probability under ``model``, as tunix's.

    The model reads the prompt and the completion concatenated: a model whose
    ``__call__`` takes four positional arguments as
    ``model(tokens, positions, None, attention_mask)`` (the tunix and
    flax-gemma convention, positions ``0 .. P+C-1`` and a causal mask; the
    logits are the first item of the ``(logits, cache)`` it returns), any
    other as ``model(tokens)``. Completion token ``t`` is scored by the logits
    of the token before it, divided by ``temperature`` unless it is ``0`` or
    ``1`` (tunix's ``compute_per_token_logps``, ``common.py:368-383``, with no
    token equal to its ``pad_id``).

    Args:
        model: The policy, returning ``[B, P+C, vocab]`` logits.
        prompt_ids: The prompts' tokens, ``[B, P]`` with ``P >= 1``.
        completion_ids: The sampled completions' tokens, ``[B, C]``.
        temperature: The sampling temperature (:data:`TEMPERATURE`).

    Returns:
        ``float32[B, C]``: ``log softmax(logits / temperature)`` at each
        completion token.

    Raises:
        ArgumentError: An empty prompt, a negative or non-finite
            ``temperature``, or logits of another shape.

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> class Uniform(nnx.Module):  # the same logits for every token
        ...     def __call__(self, tokens):
        ...         return jnp.zeros((*tokens.shape, 4))
        >>> prompt = jnp.ones((3, 1), jnp.int32)
        >>> completion = jnp.ones((3, 2), jnp.int32)
        >>> logps = per_token_logps(Uniform(), prompt, completion)
        >>> logps.shape, [round(x, 4) for x in logps[0].tolist()]  # log(1/4)
        ((3, 2), [-1.3863, -1.3863])
    """
    temperature = _coefficient(temperature, "temperature")
    if prompt_ids.shape[1] < 1:
        raise ArgumentError(
            "prompt_ids",
            "`prompt_ids` must hold at least one token a sequence (the first "
            "completion token is scored by the logits of the last prompt "
            f"token), got shape {tuple(prompt_ids.shape)}.",
        )
    tokens = jnp.concatenate([prompt_ids, completion_ids], axis=1)
    if follows_kv_cache_convention(model):
        logits = logits_by_kv_cache_convention(model, tokens)
    else:
        logits = model(tokens)
    shape = tuple(getattr(logits, "shape", ()))
    if len(shape) != 3 or shape[:2] != tuple(tokens.shape):
        raise ArgumentError(
            "model",
            f"`model` must return [batch, sequence, vocab] logits for its "
            f"{tuple(tokens.shape)} tokens, got {shape or type(logits).__name__}. "
            "Wrap it in a module whose call returns the logits.",
        )
    completion = completion_ids.shape[1]
    logits = logits[:, -completion - 1 : -1, :]
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    chosen = jnp.take_along_axis(logits, completion_ids[..., None], axis=-1)
    normalizer = jax.nn.logsumexp(logits.astype(jnp.float32), axis=-1)
    logps: jax.Array = chosen[..., 0].astype(jnp.float32) - normalizer
    return logps


@typechecked
def grpo_loss(
    model: nnx.Module,
    batch: _Batch,
    *,
    beta: float | int = BETA,
    epsilon: float | int = EPSILON,
    temperature: float | int = TEMPERATURE,
) -> Float[Array, ""]:
    """The GRPO loss of tunix for ``model`` on ``batch`` (the module's formula).

    Equal to ``tunix.rl.algo_core.grpo_loss_fn(model, example, GRPOConfig(),
    pad_id, eos_id)[0]`` with the temperature of tunix's default rollout, for
    any ``pad_id`` no token equals. Usable as a step's ``loss=``:
    ``step_memory_report(target, mesh, batch, loss=grpo_loss)``, the batch the
    six arrays below (``functools.partial(grpo_loss, beta=0.0)`` for another
    coefficient). Only the loss is computed, not tunix's logged diagnostics.

    Args:
        model: The policy (see :func:`per_token_logps` for how it is called).
        batch: ``(prompt_ids, completion_ids, completion_mask, advantages,
            ref_per_token_logps, old_per_token_logps)``: ``int[B, P]``
            (``P >= 1``), ``int[B, C]``, ``[B, C]`` (1 for the completion
            tokens the loss counts, 0 for the others; bool or any number
            type), ``float[B]`` (one advantage a sequence), and the reference
            model's and the rollout policy's log-probabilities of the
            completion tokens, ``float[B, C]``.
        beta: The KL penalty's coefficient (:data:`BETA`); ``0`` drops the
            KL term altogether, as tunix does.
        epsilon: The ratio's clip (:data:`EPSILON`).
        temperature: The sampling temperature (:data:`TEMPERATURE`).

    Returns:
        The loss, a float32 scalar.

    Raises:
        ArgumentError: A negative or non-finite ``beta``, ``epsilon`` or
            ``temperature``, an empty prompt, or logits of another shape.
        TypeError: ``batch`` not six arrays of the shapes above.

    Example:
        With the rollout policy and the reference equal to the policy, every
        ratio is 1 and every KL 0: the loss is minus the mean advantage of the
        sequences with a counted token.

        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> class Uniform(nnx.Module):
        ...     def __call__(self, tokens):
        ...         return jnp.zeros((*tokens.shape, 4))
        >>> prompt = jnp.ones((3, 1), jnp.int32)
        >>> completion = jnp.ones((3, 2), jnp.int32)
        >>> mine = per_token_logps(Uniform(), prompt, completion)
        >>> mask = jnp.array([[1, 1], [1, 0], [0, 0]])
        >>> advantages = jnp.array([1.0, 2.0, 9.0])
        >>> batch = (prompt, completion, mask, advantages, mine, mine)
        >>> round(float(grpo_loss(Uniform(), batch)), 4)  # -(1 + 2) / 2
        -1.5
    """
    beta = _coefficient(beta, "beta")
    epsilon = _coefficient(epsilon, "epsilon")
    prompt_ids, completion_ids, mask, advantages, ref, old = batch
    logps = per_token_logps(model, prompt_ids, completion_ids, temperature=temperature)
    log_ratio = jnp.clip(
        logps - old.astype(jnp.float32), min=-LOG_RATIO_CLIP, max=LOG_RATIO_CLIP
    )
    ratio = jnp.exp(log_ratio)
    adv = advantages.astype(jnp.float32)[:, None]
    per_token = jnp.maximum(
        -adv * ratio, -adv * jnp.clip(ratio, 1 - epsilon, 1 + epsilon)
    )
    loss = _aggregate(per_token, mask)
    if beta != 0.0:
        kl = logps - ref.astype(jnp.float32)
        loss = loss + beta * _aggregate(kl, mask)
    result: jax.Array = loss.astype(jnp.float32)
    return result

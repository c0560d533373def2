"""tunix's GRPO loss, written once: hand arithmetic, gradients, and tunix itself.

Without tunix: the per-token log-probabilities against the model's own
``log_softmax``, and the loss by hand where the ratios and KLs are known
(old and reference log-probabilities set from the model's own). With tunix
(``pytest.importorskip``): the same numbers as ``grpo_loss_fn`` on tunix's own
Llama 3, and the defaults read from tunix's configs.
"""

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_introspect import ArgumentError, step_memory_report
from nnx_introspect._rl.loss import (
    BETA,
    EPSILON,
    KL_LOSS_MODE,
    LOG_RATIO_CLIP,
    LOSS_AGG_MODE,
    LOSS_ALGO,
    TEMPERATURE,
    grpo_loss,
    per_token_logps,
)
from nnx_introspect.examples import Llama, LlamaConfig, llama

CFG = LlamaConfig(vocab=64, d_model=16, n_layers=1, n_heads=2, d_ff=32)
B, P, C = 3, 3, 4
Batch = tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]
MASK = [[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]]
Outputs = tuple[np.ndarray, list[np.ndarray]]


@pytest.fixture(scope="module")
def model() -> Llama:
    built: Llama = nnx.jit(lambda: Llama(CFG, rngs=nnx.Rngs(0)))()  # one compile
    return built


def tokens(seed: int = 0) -> tuple[jax.Array, jax.Array]:
    rng = np.random.default_rng(seed)
    return (
        jnp.asarray(rng.integers(0, CFG.vocab, (B, P)), jnp.int32),
        jnp.asarray(rng.integers(0, CFG.vocab, (B, C)), jnp.int32),
    )


def own_logps(logits: Any, completion: Any, temperature: float) -> np.ndarray:
    """``log_softmax`` of the logits before each completion token, at that token.

    In NumPy float64: independent of JAX, and no op compiled.
    """
    before = np.asarray(logits, np.float64)[:, -completion.shape[1] - 1 : -1]
    scaled = before / (temperature or 1.0)
    top = scaled.max(-1, keepdims=True)
    logps = scaled - top - np.log(np.exp(scaled - top).sum(-1, keepdims=True))
    chosen = np.take_along_axis(logps, np.asarray(completion)[..., None], -1)
    return chosen[..., 0]


TEMPERATURES = (TEMPERATURE, 1.0, 0.0)


@nnx.jit
def read(model: Llama, prompt: jax.Array, completion: jax.Array) -> Any:
    """``model(tokens)``, and :func:`per_token_logps` at each of :data:`TEMPERATURES`.

    One compile (eager, each op would compile on its own).
    """
    logits = model(jnp.concatenate([prompt, completion], axis=1))
    logps = [
        per_token_logps(model, prompt, completion, temperature=t) for t in TEMPERATURES
    ]
    return logits, logps


@pytest.fixture(scope="module")
def outputs(model: Llama) -> Outputs:
    logits, logps = read(model, *tokens())
    return np.asarray(logits), [np.asarray(x) for x in logps]


def _batch(
    outputs: Outputs,
    advantages: list[float],
    mask: Any = MASK,
    *,
    old_shift: float = 0.0,
    ref_shift: float = 0.0,
) -> Batch:
    """A batch whose old and reference log-probs are the model's own, shifted."""
    prompt, completion = tokens()
    mine = own_logps(outputs[0], completion, TEMPERATURE)
    return (
        prompt,
        completion,
        jnp.asarray(mask, jnp.int32),
        jnp.asarray(advantages, jnp.float32),
        jnp.asarray(mine - ref_shift, jnp.float32),
        jnp.asarray(mine - old_shift, jnp.float32),
    )


# --- per-token log-probabilities ---------------------------------------------


def test_logps_are_the_models_own(
    outputs: Outputs,
) -> None:
    # the example Llama takes (tokens, positions, cache, attention_mask): read
    # through the KV-cache convention, it must give what `model(tokens)` gives
    logits, logps = outputs
    _, completion = tokens()
    for temperature, got in zip(TEMPERATURES, logps, strict=True):
        assert got.shape == (B, C) and got.dtype == np.float32
        expected = own_logps(logits, completion, temperature)
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


class Bigram(nnx.Module):
    """``model(tokens)`` alone: each token's logits are a row of a table."""

    def __init__(self, vocab: int, seed: int) -> None:
        table = np.random.default_rng(seed).normal(size=(vocab, vocab))
        self.table = nnx.Param(jnp.asarray(table, jnp.float32))

    def __call__(self, tokens: jax.Array) -> jax.Array:
        return self.table[...][tokens]


def test_a_model_of_tokens_alone_is_called_with_them() -> None:
    bigram = Bigram(CFG.vocab, seed=0)
    prompt, completion = tokens()
    table = np.asarray(bigram.table[...], np.float64) / TEMPERATURE
    before = np.concatenate([prompt[:, -1:], completion[:, :-1]], axis=1)
    chosen = np.take_along_axis(table[before], np.asarray(completion)[..., None], -1)
    expected = chosen[..., 0] - np.log(np.exp(table[before]).sum(-1))
    got = nnx.jit(per_token_logps)(bigram, prompt, completion)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    # ratio 1 and KL 0 with old = ref = the model's own, as in the next
    # test: -(0.5 - 1.5) / 2 (the doctests run both functions eagerly)
    mine = jnp.asarray(expected, jnp.float32)
    advantages = jnp.asarray([0.5, -1.5, 7.0])
    batch = (prompt, completion, jnp.asarray(MASK), advantages, mine, mine)
    loss = nnx.jit(grpo_loss)(bigram, batch)
    assert loss.shape == () and loss.dtype == jnp.float32
    assert float(loss) == pytest.approx(0.5, abs=1e-5)


# --- the loss by hand --------------------------------------------------------

MASK_DTYPES = (jnp.int32, jnp.float32, jnp.bfloat16, jnp.bool_)


@nnx.jit
def loss_by_mask_dtype(model: Llama, batch: Batch) -> Any:
    """:func:`grpo_loss` with the mask in each of :data:`MASK_DTYPES` (one compile)."""
    prompt, completion, mask, advantages, ref, old = batch
    return [
        grpo_loss(model, (prompt, completion, mask.astype(d), advantages, ref, old))
        for d in MASK_DTYPES
    ]


def test_ratio_one_and_kl_zero_leave_minus_the_mean_advantage(
    model: Llama, outputs: Outputs
) -> None:
    # every ratio exp(0) = 1 (unclipped) and every KL 0: each sequence's
    # token mean of -A_b is -A_b, averaged over the two non-empty sequences
    # (the empty one's 7.0 is not counted): -(0.5 - 1.5) / 2. A token mean
    # over the batch would give -(2 * 0.5 + 4 * -1.5) / 6 = 5/6 instead.
    batch = _batch(outputs, [0.5, -1.5, 7.0])
    for dtype, loss in zip(MASK_DTYPES, loss_by_mask_dtype(model, batch), strict=True):
        assert loss.shape == () and loss.dtype == jnp.float32, dtype
        assert float(loss) == pytest.approx(0.5, abs=1e-6), dtype


@nnx.jit
def loss_by_coefficients(model: Llama, batch: Batch) -> Any:
    """The default loss, without the KL term, and with ``epsilon=1.5``."""
    return (
        grpo_loss(model, batch),
        grpo_loss(model, batch, beta=0),  # an int as users type it
        grpo_loss(model, batch, beta=0.0, epsilon=1.5),
    )


def test_clipped_ratios_and_the_kl_term(model: Llama, outputs: Outputs) -> None:
    # old = mine - log 2: every ratio 2. A = +1 takes the clipped -(1 + 0.2),
    # A = -1 the unclipped +2 (the larger of the two); the third sequence has
    # no token. ref = mine - 0.5: every KL 0.5.
    mask = [[1, 1, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0]]
    batch = _batch(
        outputs, [1.0, -1.0, 5.0], mask, old_shift=math.log(2.0), ref_shift=0.5
    )
    loss, no_kl, wide = loss_by_coefficients(model, batch)
    expected_pg = (-(1 + EPSILON) * 1.0 + 2.0 * 1.0) / 2
    assert float(loss) == pytest.approx(expected_pg + BETA * 0.5, abs=1e-5)
    assert float(no_kl) == pytest.approx(expected_pg, abs=1e-5)
    assert float(wide) == pytest.approx((-2.0 + 2.0) / 2, abs=1e-5)  # 2 < 1 + 1.5
    # a log ratio of 30 is clipped to 20 before exp: -A * exp(20) for A = -1
    mask = [[1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0]]
    far = _batch(outputs, [-1.0, 0.0, 0.0], mask, old_shift=30.0)
    _, no_kl, _ = loss_by_coefficients(model, far)
    assert float(no_kl) == pytest.approx(math.exp(LOG_RATIO_CLIP), rel=1e-5)


def test_gradient_is_finite(model: Llama, outputs: Outputs) -> None:
    batch = _batch(outputs, [0.5, -1.5, 7.0], old_shift=0.1, ref_shift=-0.2)

    @nnx.jit
    @nnx.grad
    def grad(model: Llama) -> jax.Array:
        return grpo_loss(model, batch)

    leaves = [np.asarray(g) for g in jax.tree.leaves(grad(model))]
    assert len(leaves) == len(jax.tree.leaves(nnx.state(model, nnx.Param)))
    assert all(np.isfinite(g).all() for g in leaves)
    assert any((g != 0).any() for g in leaves)


def test_a_step_compiles_with_it() -> None:
    b = 8
    batch = (
        jax.ShapeDtypeStruct((b, P), jnp.int32),
        jax.ShapeDtypeStruct((b, C), jnp.int32),
        jax.ShapeDtypeStruct((b, C), jnp.int32),
        jax.ShapeDtypeStruct((b,), jnp.float32),
        jax.ShapeDtypeStruct((b, C), jnp.float32),
        jax.ShapeDtypeStruct((b, C), jnp.float32),
    )
    report = step_memory_report(
        llama(CFG), "data=8", batch, loss=grpo_loss, cache=False
    )
    assert any(n.startswith("Loss: ") for n in report.table().notes)


# --- bad input ---------------------------------------------------------------


BAD_COEFFICIENTS = {
    "beta": lambda m, b: grpo_loss(m, b, beta=-0.1),
    "epsilon": lambda m, b: grpo_loss(m, b, epsilon=math.nan),
    "temperature": lambda m, b: grpo_loss(m, b, temperature=math.inf),
}


@pytest.mark.parametrize(
    ("name", "got"), [("beta", "-0.1"), ("epsilon", "nan"), ("temperature", "inf")]
)
def test_bad_coefficients_are_named(
    model: Llama, outputs: Outputs, name: str, got: str
) -> None:
    batch = _batch(outputs, [0.5, -1.5, 7.0])
    match = rf"`{name}` must be a finite nonnegative float, got {got}\."
    with pytest.raises(ArgumentError, match=match) as caught:
        BAD_COEFFICIENTS[name](model, batch)
    assert caught.value.argument == name


def test_a_coefficient_of_another_type_is_a_type_error(
    model: Llama, outputs: Outputs
) -> None:
    batch = _batch(outputs, [0.5, -1.5, 7.0])
    with pytest.raises(TypeError, match="beta"):
        grpo_loss(model, batch, beta="0.1")  # type: ignore[arg-type]


def test_an_empty_prompt_is_refused(model: Llama) -> None:
    _, completion = tokens()
    with pytest.raises(ArgumentError, match=r"`prompt_ids` must hold at least one"):
        per_token_logps(model, jnp.zeros((B, 0), jnp.int32), completion)


def test_logits_of_another_shape_are_refused() -> None:
    class Pooled(nnx.Module):
        def __call__(self, tokens: jax.Array) -> jax.Array:
            return jnp.zeros((tokens.shape[0], 5))

    prompt, completion = tokens()
    with pytest.raises(ArgumentError, match=r"`model` must return \[batch, sequence"):
        per_token_logps(Pooled(), prompt, completion)


def test_a_batch_of_mismatched_shapes_is_a_type_error(
    model: Llama, outputs: Outputs
) -> None:
    batch = _batch(outputs, [0.5, -1.5, 7.0])
    with pytest.raises(TypeError, match="batch"):
        grpo_loss(model, (*batch[:3], batch[3][:2], *batch[4:]))
    with pytest.raises(TypeError, match="batch"):
        grpo_loss(model, batch[:5])  # type: ignore[arg-type]


# --- against tunix ------------------------------------------------------------


def test_the_defaults_are_tunixs() -> None:
    pytest.importorskip("tunix")
    from tunix.rl.grpo.grpo_learner import GRPOConfig
    from tunix.rl.rollout.base_rollout import RolloutConfig

    config = GRPOConfig()
    assert (config.beta, config.epsilon) == (BETA, EPSILON)
    assert config.loss_algo == LOSS_ALGO
    assert config.loss_agg_mode == LOSS_AGG_MODE
    assert config.kl_loss_mode == KL_LOSS_MODE
    assert not hasattr(config, "epsilon_high") and config.kl_clamp_value is None
    assert getattr(config, "epsilon_c", None) is None
    assert RolloutConfig().temperature == TEMPERATURE


@pytest.fixture(scope="module")
def tunix_llama() -> Any:
    pytest.importorskip("tunix")
    from tests.tunix_lm import tiny_llama3

    return tiny_llama3(nnx.Rngs(0))


@pytest.mark.parametrize(
    ("beta", "temperature"), [(BETA, TEMPERATURE), (0.0, TEMPERATURE), (BETA, 1.0)]
)
def test_equals_tunixs_grpo_loss_fn(
    tunix_llama: Any, beta: float, temperature: float
) -> None:
    from tunix.rl import algo_core, common
    from tunix.rl.grpo.grpo_learner import GRPOConfig

    from tests.tunix_lm import TINY

    b, p, c, pad_id, eos_id = 4, 5, 6, 0, 1
    rng = np.random.default_rng(1)
    # no token is pad or eos: every prompt and completion token is valid
    prompt = jnp.asarray(rng.integers(2, TINY.vocab_size, (b, p)), jnp.int32)
    completion = jnp.asarray(rng.integers(2, TINY.vocab_size, (b, c)), jnp.int32)
    mask_np = (rng.random((b, c)) < 0.5).astype(np.int32)
    mask_np[np.arange(b), np.arange(b) % c] = 1  # at least one token a sequence
    mask = jnp.asarray(mask_np)
    advantages = jnp.asarray(rng.normal(size=b), jnp.float32)

    graphdef, state = nnx.split(tunix_llama)
    theirs_logps = common.compute_per_token_logps(
        graphdef, state, prompt, completion, pad_id, eos_id, temperature=temperature
    )
    logps = nnx.jit(functools.partial(per_token_logps, temperature=temperature))
    mine = np.asarray(logps(tunix_llama, prompt, completion))
    np.testing.assert_allclose(mine, theirs_logps, rtol=0, atol=1e-5)

    # near the model's own: some ratios inside [0.8, 1.2], some clipped
    ref = jnp.asarray(mine + 0.3 * rng.normal(size=(b, c)), jnp.float32)
    old = jnp.asarray(mine + 0.3 * rng.normal(size=(b, c)), jnp.float32)
    config = GRPOConfig(beta=beta)
    config.temperature = temperature  # what GRPOLearner sets from the rollout
    example = common.TrainExample(
        prompt_ids=prompt,
        prompt_mask=jnp.ones_like(prompt),
        completion_ids=completion,
        completion_mask=mask,
        advantages=advantages,
        ref_per_token_logps=ref,
        old_per_token_logps=old,
    )

    def tunix_loss(model: Any) -> Any:
        return algo_core.grpo_loss_fn(model, example, config, pad_id, eos_id)

    batch = (prompt, completion, mask, advantages, ref, old)
    ours = functools.partial(grpo_loss, beta=beta, temperature=temperature)
    theirs, their_aux = nnx.jit(tunix_loss)(tunix_llama)
    assert 0 < float(their_aux["pg_clipfrac"]) < 1  # the clip is exercised
    assert float(theirs) != 0.0
    value = nnx.jit(ours)(tunix_llama, batch)
    assert value.dtype == jnp.float32
    assert float(value) == pytest.approx(float(theirs), abs=1e-5)
    if (beta, temperature) != (BETA, TEMPERATURE):
        return  # the gradients once: each compiles tunix's backward
    their_grads = nnx.jit(nnx.grad(lambda m: tunix_loss(m)[0]))(tunix_llama)
    our_grads = nnx.jit(nnx.grad(ours))(tunix_llama, batch)
    pairs = zip(jax.tree.leaves(their_grads), jax.tree.leaves(our_grads), strict=True)
    for theirs_g, ours_g in pairs:
        np.testing.assert_allclose(ours_g, theirs_g, rtol=0, atol=1e-5)

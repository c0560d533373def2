"""The built-in losses call models written in the tunix / flax-gemma convention.

``model(tokens, positions, cache, attention_mask) -> (logits, cache)``: the
step builds positions and a causal mask, passes no cache and takes the logits
from the pair; a model it cannot call is refused in one line naming a loss
callable. Each case is held against a hand-written loss in that convention.
"""

import functools
import re
from typing import Any

import jax
import jax.numpy as jnp
import optax
import pytest
from flax import nnx

from nnx_introspect import step_memory_report
from nnx_introspect._conventions import (
    accepts_positional,
    follows_kv_cache_convention,
)
from nnx_introspect._step.loss import _objective
from nnx_introspect.examples import Llama, LlamaConfig

CFG = LlamaConfig(vocab=64, d_model=16, n_layers=2, n_heads=2, d_ff=24)
TOKENS = jax.ShapeDtypeStruct((4, 8), jnp.int32)


class KVLlama(Llama):
    """The examples' Llama called only by the KV-cache convention (no defaults)."""

    def __call__(  # type: ignore[override]
        self, tokens: jax.Array, positions: jax.Array, cache: Any, attention_mask: Any
    ) -> tuple[jax.Array, Any]:
        out = super().__call__(tokens, positions, cache, attention_mask)
        return (out, None) if cache is None else out


def kv_llama(rngs: nnx.Rngs) -> KVLlama:
    return KVLlama(CFG, rngs=rngs)


def hand_lm(model: Any, batch: tuple[jax.Array, ...]) -> jax.Array:
    """Next-token cross-entropy written by hand in the convention."""
    tokens = batch[0]
    b, t = tokens.shape
    positions = jnp.broadcast_to(jnp.arange(t), (b, t))
    mask = jnp.broadcast_to(jnp.tril(jnp.ones((t, t), dtype=bool)), (b, t, t))
    logits, _ = model(tokens, positions, None, mask)
    value: jax.Array = optax.softmax_cross_entropy_with_integer_labels(
        logits[:, :-1].astype(jnp.float32), tokens[:, 1:]
    ).mean()
    return value


def _tokens() -> jax.Array:
    return jax.random.randint(jax.random.key(1), (4, 8), 0, CFG.vocab)


def test_lm_and_mean_values_match_the_plain_forward() -> None:
    model, tokens = kv_llama(nnx.Rngs(0)), _tokens()
    # independent: the same weights through the no-cache forward `model(tokens)`
    plain = Llama.__call__(model, tokens)
    expected = optax.softmax_cross_entropy_with_integer_labels(
        plain[:, :-1], tokens[:, 1:]
    ).mean()
    lm, aux = _objective("lm")(model, (tokens,))
    assert aux is None
    assert lm == pytest.approx(float(expected), rel=1e-6)
    assert lm == pytest.approx(float(hand_lm(model, (tokens,))), rel=1e-6)
    mean, _ = _objective("mean")(model, (tokens,))
    assert mean == pytest.approx(float(plain.mean()), rel=1e-6)


def test_lm_compiles_as_the_hand_written_loss() -> None:
    built_in = step_memory_report(kv_llama, "data=2", TOKENS, loss="lm")
    by_hand = step_memory_report(kv_llama, "data=2", TOKENS, loss=hand_lm)
    assert built_in.temp_bytes == by_hand.temp_bytes
    assert built_in.argument_bytes == by_hand.argument_bytes
    assert built_in.output_bytes == by_hand.output_bytes


def test_tunix_llama3_under_lm_compiles_as_its_hand_written_loss() -> None:
    pytest.importorskip("tunix")
    from tests.tunix_lm import lm_loss, tiny_llama3

    built_in = step_memory_report(tiny_llama3, "fsdp=2,tp=1", TOKENS, loss="lm")
    by_hand = step_memory_report(tiny_llama3, "fsdp=2,tp=1", TOKENS, loss=lm_loss)
    assert built_in.temp_bytes == by_hand.temp_bytes > 0
    assert built_in.argument_bytes == by_hand.argument_bytes
    model = tiny_llama3(nnx.Rngs(0))
    tokens = jax.random.randint(jax.random.key(2), (2, 8), 0, 512)
    value, _ = _objective("lm")(model, (tokens,))
    assert value == pytest.approx(float(lm_loss(model, (tokens,))), rel=1e-6)


class TwoInputs(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.embed = nnx.Embed(16, 4, rngs=rngs)

    def __call__(self, x: jax.Array, y: jax.Array) -> jax.Array:
        return self.embed(x) + self.embed(y)


X = jax.ShapeDtypeStruct((4, 4), jnp.int32)


@pytest.mark.parametrize("loss", ["mean", "lm"])
def test_an_unknown_signature_is_one_line_naming_a_loss_callable(loss: str) -> None:
    with pytest.raises(ValueError) as info:
        step_memory_report(TwoInputs, "data=2", X, loss=loss)
    message = str(info.value)
    assert "\n" not in message
    assert re.search(
        rf"`loss={loss!r}` cannot call `TwoInputs\(x, y\)` with `batch` "
        r"\(int32\[4,4\]\): the built-in losses call `model\(\*batch\)` or, "
        r"for one token array, `model\(tokens, positions, cache, attention_mask\)",
        message,
    )
    assert '`loss="pkg.mod:fn"` (--loss pkg.mod:fn)' in message


def test_a_batch_the_model_takes_is_passed_as_it_is() -> None:
    # the false side: two arrays for two parameters need no convention
    report = step_memory_report(TwoInputs, "data=2", (X, X), loss="mean")
    assert report.temp_bytes >= 0


def test_the_convention_needs_one_token_array() -> None:
    with pytest.raises(ValueError, match=r"cannot call `KVLlama\(tokens, pos"):
        step_memory_report(kv_llama, "data=2", (TOKENS, TOKENS), loss="lm")


def _named(fn: Any) -> Any:
    @functools.wraps(fn)
    def wrapper(*args: Any) -> Any:
        return fn(*args)

    return wrapper


class Decorated:
    @_named
    def __call__(self, tokens: Any, positions: Any, cache: Any, mask: Any) -> Any:
        return tokens, cache


class Plain:
    def __call__(self, x: Any, y: Any = None, *, z: Any = None) -> Any:
        return x


def test_the_recogniser_reads_through_decorators() -> None:
    assert follows_kv_cache_convention(Decorated())
    assert not accepts_positional(Decorated(), 1)
    assert not follows_kv_cache_convention(Plain())
    assert accepts_positional(Plain(), 1) and accepts_positional(Plain(), 2)
    assert not accepts_positional(Plain(), 3)


@pytest.mark.parametrize(
    ("mesh", "fix"),
    [
        ("fsdp=8", '`mesh "fsdp=8,tp=1"` (an axis of size 1 shards nothing)'),
        ("fsdp=2,tpp=4", "`mesh \"fsdp=2,tp=4\"` ('tpp' renamed 'tp', the axis"),
        ("data=2,tp=4", '`mesh "data=2,tp=4,fsdp=1"` (an axis of size 1'),
        ("data=2", None),  # two axes to add: the mesh follows another naming
    ],
)
def test_a_mesh_missing_an_axis_gets_the_fixed_mesh(mesh: str, fix: str | None) -> None:
    from nnx_introspect.examples import llama_tiny_sharded

    tokens = jax.ShapeDtypeStruct((8, 16), jnp.int32)
    with pytest.raises(ValueError) as info:
        step_memory_report(llama_tiny_sharded, mesh, tokens, loss="lm")
    text = str(info.value)
    assert "axes the mesh lacks" in text
    if fix is None:
        assert "e.g. `mesh" not in text
    else:
        assert f"name them in `mesh` (--mesh), e.g. {fix}" in text

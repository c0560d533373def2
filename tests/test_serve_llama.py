"""The examples' Llama: grouped-query attention, the KV-cache decode path, the 8B."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_introspect import abstract_model, count_params
from nnx_introspect._typing import ArgumentError
from nnx_introspect.examples import (
    LLAMA_TINY,
    Llama,
    LlamaConfig,
    llama3_8b,
    llama3_8b_sharded,
    llama_7b,
)

CFG = dataclasses.replace(LLAMA_TINY, vocab=97, d_model=32, n_layers=2, d_ff=48)
GQA = dataclasses.replace(CFG, n_kv_heads=2)


def _params(vocab: int, d: int, layers: int, heads: int, kv: int, ff: int) -> int:
    head = d // heads
    layer = 2 * d * d + 2 * d * kv * head + 3 * d * ff + 2 * d
    return 2 * vocab * d + layers * layer + d


def test_llama3_8b_params_by_arithmetic() -> None:
    expected = (
        2 * 128256 * 4096
        + 32 * (2 * 4096**2 + 2 * 4096 * 8 * 128 + 3 * 4096 * 14336 + 2 * 4096)
        + 4096
    )
    assert expected == 8_030_261_248
    assert count_params(abstract_model(llama3_8b)) == expected
    assert count_params(abstract_model(llama3_8b_sharded)) == expected


def test_default_kv_heads_keep_the_parameters() -> None:
    assert CFG.n_kv_heads is None and CFG.kv_heads == CFG.n_heads
    assert count_params(abstract_model(llama_7b)) == 6_738_415_616
    assert count_params(abstract_model(lambda r: Llama(CFG, rngs=r))) == _params(
        97, 32, 2, 4, 4, 48
    )
    model = abstract_model(lambda r: Llama(GQA, rngs=r))
    assert count_params(model) == _params(97, 32, 2, 4, 2, 48)
    assert model.layers[0].k.kernel.shape == (32, 16)


@pytest.mark.parametrize("kv", [3, 0, 8])
def test_kv_heads_must_divide_heads(kv: int) -> None:
    with pytest.raises(ArgumentError, match=rf"`n_kv_heads` {kv} must divide") as e:
        dataclasses.replace(CFG, n_kv_heads=kv)
    assert e.value.argument == "n_kv_heads"


@pytest.mark.parametrize("cfg", [CFG, GQA], ids=["mha", "gqa"])
def test_decode_with_cache_equals_the_full_forward(cfg: LlamaConfig) -> None:
    model = Llama(cfg, rngs=nnx.Rngs(0))
    b, s, context = 3, 7, 12
    tokens = jax.random.randint(jax.random.key(1), (b, s), 0, cfg.vocab)
    full = model(tokens)
    cache = model.init_cache(b, context, jnp.float32)
    # prefill all but the last token, then decode the last one
    logits, cache = model(tokens[:, :-1], None, cache, None)
    np.testing.assert_allclose(logits, full[:, :-1], rtol=2e-5, atol=2e-5)
    pos = jnp.full((b, 1), s - 1, jnp.int32)
    mask = jnp.arange(context)[None, None, :] <= pos[:, :, None]
    last, cache = model(tokens[:, -1:], pos, cache, mask)
    np.testing.assert_allclose(last[:, 0], full[:, -1], rtol=2e-5, atol=2e-5)
    # the positions past the last token stay empty
    assert not jnp.any(cache["layer_1"]["k"][:, s:])
    assert jnp.any(cache["layer_1"]["k"][:, s - 1])


def test_decode_with_a_wrong_mask_differs() -> None:
    """The mask is honoured: reading an unwritten position changes the logits."""
    model = Llama(GQA, rngs=nnx.Rngs(0))
    tokens = jnp.arange(10).reshape(2, 5) % GQA.vocab
    cache = model.init_cache(2, 8, jnp.float32)
    _, cache = model(tokens[:, :-1], None, cache, None)
    pos = jnp.full((2, 1), 4, jnp.int32)
    good, _ = model(tokens[:, -1:], pos, cache, None)
    everything = jnp.ones((2, 1, 8), bool)
    bad, _ = model(tokens[:, -1:], pos, cache, everything)
    assert not np.allclose(good, bad, atol=1e-4)


def test_init_cache_layout() -> None:
    model = abstract_model(lambda r: Llama(GQA, rngs=r))
    cache = jax.eval_shape(lambda: model.init_cache(4, 16, jnp.bfloat16))
    assert sorted(cache) == ["index", "layer_0", "layer_1"]
    assert cache["index"].shape == () and cache["index"].dtype == jnp.int32
    assert cache["layer_0"]["v"].shape == (4, 16, 2, 8)
    assert cache["layer_0"]["v"].dtype == jnp.bfloat16


def test_a_call_writes_at_the_shared_index_and_advances_it() -> None:
    """Every sequence's new keys land at the cache's index, which moves on by s."""
    model = Llama(GQA, rngs=nnx.Rngs(0))
    cache = model.init_cache(2, 8, jnp.float32)
    tokens = jnp.arange(6).reshape(2, 3) % GQA.vocab
    _, cache = model(tokens, None, cache, None)
    assert int(cache["index"]) == 3
    written = cache["layer_0"]["k"]
    assert jnp.all(jnp.any(written[:, :3] != 0, axis=(-1, -2)))
    assert not jnp.any(written[:, 3:])
    # the next token goes to slot 3 of both sequences, whatever its positions
    pos = jnp.array([[3], [5]], jnp.int32)  # the second sequence left-padded by 2
    _, cache = model(tokens[:, :1], pos, cache, None)
    assert int(cache["index"]) == 4
    assert jnp.all(jnp.any(cache["layer_0"]["k"][:, 3] != 0, axis=(-1, -2)))
    assert not jnp.any(cache["layer_0"]["k"][:, 4:])

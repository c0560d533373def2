"""The examples' Llama: grouped-query attention, the KV-cache decode path, the 8B."""

import dataclasses
import functools
from typing import Any

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


@functools.cache
def _model(cfg: LlamaConfig) -> Llama:
    """One model a configuration, shared by the tests (none changes its state)."""
    return Llama(cfg, rngs=nnx.Rngs(0))


def _forward(
    model: Llama,
    tokens: jax.Array,
    positions: Any,
    cache: Any,
    mask: Any,
    prefill: bool,
) -> Any:
    return model(tokens, positions, cache, mask, prefill=prefill)


_jitted: Any = nnx.jit(_forward, static_argnames="prefill")


def _call(
    model: Llama,
    tokens: jax.Array,
    positions: Any = None,
    cache: Any = None,
    mask: Any = None,
    prefill: bool = False,
) -> Any:
    """``model(...)`` compiled whole: one XLA compile a shape, not one an op."""
    return _jitted(model, tokens, positions, cache, mask, prefill=prefill)


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
    model = _model(cfg)
    b, s, context = 3, 7, 12
    tokens = jax.random.randint(jax.random.key(1), (b, s), 0, cfg.vocab)
    full = _call(model, tokens)
    cache = model.init_cache(b, context, jnp.float32)
    # prefill all but the last token, then decode the last one
    logits, cache = _call(model, tokens[:, :-1], None, cache, None)
    np.testing.assert_allclose(logits, full[:, :-1], rtol=2e-5, atol=2e-5)
    pos = jnp.full((b, 1), s - 1, jnp.int32)
    mask = jnp.arange(context)[None, None, :] <= pos[:, :, None]
    last, cache = _call(model, tokens[:, -1:], pos, cache, mask)
    np.testing.assert_allclose(last[:, 0], full[:, -1], rtol=2e-5, atol=2e-5)
    # the positions past the last token stay empty
    assert not jnp.any(cache["layer_1"]["k"][:, s:])
    assert jnp.any(cache["layer_1"]["k"][:, s - 1])


def test_decode_with_a_wrong_mask_differs() -> None:
    """The mask is honoured: reading an unwritten position changes the logits."""
    model = _model(GQA)
    tokens = jnp.arange(10).reshape(2, 5) % GQA.vocab
    cache = model.init_cache(2, 8, jnp.float32)
    _, cache = _call(model, tokens[:, :-1], None, cache, None)
    pos = jnp.full((2, 1), 4, jnp.int32)
    good, _ = _call(model, tokens[:, -1:], pos, cache, None)
    everything = jnp.ones((2, 1, 8), bool)
    bad, _ = _call(model, tokens[:, -1:], pos, cache, everything)
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
    model = _model(GQA)
    cache = model.init_cache(2, 8, jnp.float32)
    tokens = jnp.arange(6).reshape(2, 3) % GQA.vocab
    _, cache = _call(model, tokens, None, cache, None)
    assert int(cache["index"]) == 3
    written = cache["layer_0"]["k"]
    assert jnp.all(jnp.any(written[:, :3] != 0, axis=(-1, -2)))
    assert not jnp.any(written[:, 3:])
    # the next token goes to slot 3 of both sequences, whatever its positions
    pos = jnp.array([[3], [5]], jnp.int32)  # the second sequence left-padded by 2
    _, cache = _call(model, tokens[:, :1], pos, cache, None)
    assert int(cache["index"]) == 4
    assert jnp.all(jnp.any(cache["layer_0"]["k"][:, 3] != 0, axis=(-1, -2)))
    assert not jnp.any(cache["layer_0"]["k"][:, 4:])


BF16 = dataclasses.replace(GQA, dtype=jnp.bfloat16)


def _reference(
    model: Llama,
    tokens: jax.Array,
    positions: jax.Array,
    cache: dict[str, Any],
    mask: jax.Array,
) -> tuple[jax.Array, dict[str, Any]]:
    """The cached forward written out: every layer reads the whole cache."""
    b, s = tokens.shape
    index = cache["index"]
    x = model.embed(tokens)
    out: dict[str, Any] = {"index": index + s}
    for i, layer in enumerate(model.layers):
        hd = x.shape[-1] // layer.n_heads
        h = layer.attn_norm(x)
        q = layer.q(h).reshape(b, s, layer.n_heads, hd)
        k = layer.k(h).reshape(b, s, layer.n_kv_heads, hd)
        v = layer.v(h).reshape(b, s, layer.n_kv_heads, hd)
        angle = positions.astype(jnp.float32)[..., None] * 10000.0 ** (
            -jnp.arange(hd // 2, dtype=jnp.float32) / (hd // 2)
        )
        cos, sin = jnp.cos(angle)[:, :, None], jnp.sin(angle)[:, :, None]

        def rope(t: jax.Array, cos: jax.Array = cos, sin: jax.Array = sin) -> jax.Array:
            a, c = t[..., : t.shape[-1] // 2], t[..., t.shape[-1] // 2 :]
            y = jnp.concatenate([a * cos - c * sin, a * sin + c * cos], axis=-1)
            return y.astype(t.dtype)

        q, k = rope(q), rope(k)
        layer_cache = {
            name: jax.lax.dynamic_update_slice(
                cache[f"layer_{i}"][name],
                new.astype(cache[f"layer_{i}"][name].dtype),
                (0, index, 0, 0),
            )
            for name, new in (("k", k), ("v", v))
        }
        out[f"layer_{i}"] = layer_cache
        keys, values = (layer_cache[n].astype(q.dtype) for n in ("k", "v"))
        att = jax.nn.dot_product_attention(q, keys, values, mask=mask[:, None])
        x = x + layer.o(att.reshape(b, s, -1))
        h = layer.mlp_norm(x)
        x = x + layer.down(jax.nn.silu(layer.gate(h)) * layer.up(h))
    return model.lm_head(model.norm(x)), out


@pytest.mark.parametrize(
    ("cfg", "kv_dtype", "tol"),
    [
        (CFG, jnp.float32, 2e-5),
        (GQA, jnp.float32, 2e-5),
        (GQA, jnp.bfloat16, 2e-5),
        (BF16, jnp.bfloat16, 0.0),
    ],
    ids=["mha", "gqa", "gqa-bf16-cache", "bf16"],
)
@pytest.mark.parametrize("padded", [False, True], ids=["plain", "left-padded"])
def test_prefill_is_the_cached_forward_on_an_empty_cache(
    cfg: LlamaConfig, kv_dtype: jnp.dtype, tol: float, padded: bool
) -> None:
    """prefill=True gives the whole-cache forward's last logits and cache."""
    model = _model(cfg)
    b, s, context = 3, 7, 12
    tokens = jax.random.randint(jax.random.key(2), (b, s), 0, cfg.vocab)
    positions = jnp.broadcast_to(jnp.arange(s), (b, s))
    if padded:  # the first sequence starts 2 tokens late, at position 0
        positions = positions.at[0].set(jnp.maximum(jnp.arange(s) - 2, 0))
    # the serving programs' mask: each token reads the slots up to its position
    mask = jnp.arange(context)[None, None, :] <= positions[:, :, None]
    empty = model.init_cache(b, context, kv_dtype)
    want, want_cache = _reference(model, tokens, positions, empty, mask)
    called, called_cache = model(tokens, positions, empty, mask)
    last, cache = model(tokens, positions, empty, mask, prefill=True)
    assert last.shape == (b, 1, cfg.vocab)
    f32 = jnp.float32
    np.testing.assert_allclose(called.astype(f32), want.astype(f32), rtol=tol, atol=tol)
    np.testing.assert_allclose(
        last[:, 0].astype(f32), want[:, -1].astype(f32), rtol=tol, atol=tol
    )
    assert int(cache["index"]) == int(want_cache["index"]) == s
    for got, ref, other in zip(
        jax.tree.leaves(cache),
        jax.tree.leaves(want_cache),
        jax.tree.leaves(called_cache),
        strict=True,
    ):
        assert got.dtype == ref.dtype
        np.testing.assert_allclose(got.astype(f32), ref.astype(f32), rtol=tol, atol=tol)
        np.testing.assert_allclose(
            other.astype(f32), ref.astype(f32), rtol=tol, atol=tol
        )
    # the slots past the prompt stay empty
    assert not jnp.any(cache["layer_1"]["k"][:, s:])


def test_prefill_then_decode_equals_the_full_forward() -> None:
    model = _model(GQA)
    b, s, context = 2, 6, 10
    tokens = jax.random.randint(jax.random.key(3), (b, s), 0, GQA.vocab)
    full = _call(model, tokens)
    empty = model.init_cache(b, context, jnp.float32)
    last, cache = _call(model, tokens[:, :-1], None, empty, prefill=True)
    np.testing.assert_allclose(last[:, 0], full[:, -2], rtol=2e-5, atol=2e-5)
    pos = jnp.full((b, 1), s - 1, jnp.int32)
    step, _ = _call(model, tokens[:, -1:], pos, cache, None)
    np.testing.assert_allclose(step[:, 0], full[:, -1], rtol=2e-5, atol=2e-5)


def _prefill_flops(context: int, prefill: bool) -> float:
    """XLA:CPU's FLOPs of one 16-token prompt prefilled into ``context`` slots."""
    model = abstract_model(lambda r: Llama(GQA, rngs=r))
    graphdef, state = nnx.split(model)
    cache = jax.eval_shape(lambda: model.init_cache(2, context, jnp.float32))
    tokens = jax.ShapeDtypeStruct((2, 16), jnp.int32)

    def program(state: Any, cache: Any, tokens: Any) -> Any:
        return nnx.merge(graphdef, state)(tokens, None, cache, prefill=prefill)

    compiled = jax.jit(program).lower(state, cache, tokens).compile()
    costs: Any = compiled.cost_analysis()
    return float((costs[0] if isinstance(costs, list) else costs)["flops"])


def test_prefill_work_does_not_grow_with_the_cache() -> None:
    """The prompt scores its own 16 keys, not the cache's slots.

    The whole-cache forward's FLOPs grow by 19.4M from 64 to 2,048 slots
    (its scores and softmax); prefill's by 127k, the mask's comparisons.
    """
    grows = _prefill_flops(2048, False) - _prefill_flops(64, False)
    prefill_grows = _prefill_flops(2048, True) - _prefill_flops(64, True)
    assert grows > 1e7
    assert prefill_grows < 0.01 * grows


def test_the_serving_prefill_is_the_models_own() -> None:
    """serve_memory_report's prefill calls the Llama with ``prefill=True``.

    From 64 to 1,024 slots its FLOPs grow by 0.37M on XLA:CPU (the mask, the
    cache's elementwise work), a given ``decode`` call's, which scores the
    whole cache, by 9.8M.
    """
    from nnx_introspect import serve_memory_report
    from nnx_introspect.examples import llama

    def flops(context: int, **options: Any) -> float:
        report = serve_memory_report(
            llama(GQA), "tp=1", sequences=2, context=context, prompt=16, **options
        )
        assert report.prefill.flops is not None
        return float(report.prefill.flops)

    own = flops(1024) - flops(64)
    whole = flops(1024, decode=_whole_cache) - flops(64, decode=_whole_cache)
    assert own < 0.05 * whole


def _whole_cache(model: Any, tokens: Any, positions: Any, cache: Any) -> Any:
    context = cache["layer_0"]["k"].shape[1]
    mask = jnp.arange(context)[None, None, :] <= positions[:, :, None]
    return model(tokens, positions, cache, mask)


def test_prefill_needs_a_cache() -> None:
    model = _model(GQA)
    with pytest.raises(ArgumentError, match="pass `cache`") as e:
        model(jnp.zeros((1, 3), jnp.int32), prefill=True)
    assert e.value.argument == "prefill"

"""The examples' mixture of experts: both dispatch styles against a per-token loop.

The reference runs each token through each of its chosen experts one at a time
(NumPy, float64), so the grouped matmul, the one-hot einsums and the drop rule
of the capacity are checked against arithmetic that shares none of their code.
"""

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from nnx_introspect import ArgumentError
from nnx_introspect import examples as ex
from nnx_introspect.examples import MoeBlock

CFG = ex.MoeConfig(
    vocab=32,
    d_model=16,
    n_layers=2,
    n_heads=4,
    n_kv_heads=2,
    n_experts=4,
    top_k=2,
    moe_d_ff=8,
    shared_d_ff=12,
)


def reference(block: MoeBlock, x: jax.Array, capacity: int | None = None) -> np.ndarray:
    """Each token through its chosen experts, one by one; drops past ``capacity``.

    The router's choices are the block's own (``route``); the drop rule is
    GShard's: per sequence, every token's first choice before any second one,
    tokens in order, an expert full after ``capacity`` copies.
    """
    weights, experts = (np.asarray(a) for a in block.route(x))
    gate, up, down = (
        np.asarray(w[...], np.float64) for w in (block.w_gate, block.w_up, block.w_down)
    )
    xs = np.asarray(x, np.float64)
    b, s, _ = xs.shape
    out = np.zeros_like(xs)
    for i in range(b):
        taken = [0] * block.num_experts
        for j in range(block.top_k):
            for t in range(s):
                e = int(experts[i, t, j])
                taken[e] += 1
                if capacity is not None and taken[e] > capacity:
                    continue
                g, u = xs[i, t] @ gate[e], xs[i, t] @ up[e]
                hidden = g / (1 + np.exp(-g)) * u
                out[i, t] += float(weights[i, t, j]) * (hidden @ down[e])
    if block.shared is not None:
        sh = block.shared
        g = xs @ np.asarray(sh.gate.kernel[...], np.float64)
        u = xs @ np.asarray(sh.up.kernel[...], np.float64)
        out += (g / (1 + np.exp(-g)) * u) @ np.asarray(sh.down.kernel[...], np.float64)
    return out


forward = nnx.jit(lambda model, x: model(x))
"""One compiled call (an eager one dispatches every operation alone: slow)."""


@pytest.fixture(scope="module")
def inputs() -> jax.Array:
    return jax.random.normal(jax.random.key(1), (2, 7, CFG.d_model))


@pytest.mark.parametrize("dispatch", ["dropless", "capacity"])
def test_dispatch_equals_a_per_token_loop(
    dispatch: ex.Dispatch, inputs: jax.Array
) -> None:
    # capacity_factor 2 = experts / top_k: every expert can take every token
    cfg = dataclasses.replace(CFG, dispatch=dispatch, capacity_factor=2.0)
    assert cfg.capacity(7) == 7
    block = MoeBlock(cfg, rngs=nnx.Rngs(0))
    got = np.asarray(forward(block, inputs))
    np.testing.assert_allclose(got, reference(block, inputs), rtol=2e-5, atol=2e-5)


def test_capacity_drops_the_copies_past_it(inputs: jax.Array) -> None:
    cfg = dataclasses.replace(CFG, dispatch="capacity", capacity_factor=0.5)
    capacity = math.ceil(7 * 2 / 4 * 0.5)
    assert cfg.capacity(7) == capacity == 2
    block = MoeBlock(cfg, rngs=nnx.Rngs(0))
    dropped = reference(block, inputs, capacity)
    assert not np.allclose(dropped, reference(block, inputs))  # some were dropped
    np.testing.assert_allclose(np.asarray(forward(block, inputs)), dropped, atol=2e-5)


def test_both_dispatches_agree_inside_the_model() -> None:
    tokens = jnp.arange(2 * 9).reshape(2, 9) % CFG.vocab
    dropless = ex.moe(CFG)(nnx.Rngs(0))
    capacity = ex.moe(dataclasses.replace(CFG, dispatch="capacity", capacity_factor=2))(
        nnx.Rngs(0)
    )
    np.testing.assert_allclose(
        np.asarray(forward(dropless, tokens)),
        np.asarray(forward(capacity, tokens)),
        atol=1e-5,
    )


@pytest.mark.parametrize("dispatch", ["dropless", "capacity"])
def test_training_step_compiles_with_gradients_for_every_expert(
    dispatch: ex.Dispatch,
) -> None:
    cfg = dataclasses.replace(CFG, dispatch=dispatch)
    model = ex.moe(cfg)(nnx.Rngs(0))
    tokens = jax.random.randint(jax.random.key(2), (4, 16), 0, cfg.vocab)

    def loss(model: ex.MoeLlama, tokens: jax.Array) -> jax.Array:
        logits = model(tokens)[:, :-1]
        value: jax.Array = optax.softmax_cross_entropy_with_integer_labels(
            logits, tokens[:, 1:]
        ).mean()
        return value

    value, grads = nnx.jit(nnx.value_and_grad(loss))(model, tokens)
    assert np.isfinite(float(value))
    for name in ("w_gate", "w_up", "w_down"):
        g = np.asarray(grads["layers"][0]["moe"][name][...])
        assert g.shape[0] == cfg.n_experts and np.isfinite(g).all()
        # 64 token copies over 4 experts: each expert got some, so a gradient
        assert (np.abs(g).reshape(cfg.n_experts, -1).max(1) > 0).all()
    assert np.abs(np.asarray(grads["layers"][1]["moe"]["router"]["kernel"][...])).max()


def test_prefill_and_decode_reuse_the_llama_cache() -> None:
    model = ex.moe(CFG)(nnx.Rngs(0))
    tokens = jnp.arange(10).reshape(2, 5)
    empty = model.init_cache(2, 8, jnp.float32)
    assert empty["layer_1"]["k"].shape == (2, 8, 2, 4)
    prefill = nnx.jit(lambda m, t, c: m(t, None, c, prefill=True))
    decode = nnx.jit(lambda m, t, c: m(t, None, c))
    last, cache = prefill(model, tokens, empty)
    full = forward(model, tokens)
    np.testing.assert_allclose(
        np.asarray(last[:, 0]), np.asarray(full[:, -1]), atol=1e-5
    )
    step, _ = decode(model, jnp.array([[3], [4]]), cache)
    longer = forward(model, jnp.concatenate([tokens, jnp.array([[3], [4]])], axis=1))
    np.testing.assert_allclose(
        np.asarray(step[:, 0]), np.asarray(longer[:, -1]), atol=1e-5
    )


def test_wide_heads_and_remat_keep_the_forward() -> None:
    wide = dataclasses.replace(CFG, head_dim=8)  # 4 heads of 8 over a width of 16
    model = ex.moe(wide)(nnx.Rngs(0))
    assert model.layers[0].q.kernel.shape == (16, 32)
    assert model.layers[0].o.kernel.shape == (32, 16)
    tokens = jnp.arange(12).reshape(2, 6)
    remat = ex.moe(dataclasses.replace(wide, remat=True))(nnx.Rngs(0))
    np.testing.assert_allclose(
        np.asarray(forward(model, tokens)),
        np.asarray(forward(remat, tokens)),
        atol=1e-6,
    )


def test_capacity_shards_experts_over_the_expert_axis() -> None:
    cfg = dataclasses.replace(
        CFG, dispatch="capacity", capacity_factor=2.0, shard_activations=True
    )
    model = ex.moe(cfg)(nnx.Rngs(0))
    tokens = jnp.arange(4 * 6).reshape(4, 6) % CFG.vocab
    unsharded = ex.moe(dataclasses.replace(cfg, shard_activations=False))
    plain = np.asarray(forward(unsharded(nnx.Rngs(0)), tokens))
    mesh = jax.make_mesh(
        (2, 2, 2), ("ep", "fsdp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 3
    )
    with jax.set_mesh(mesh):
        jaxpr = jax.make_jaxpr(lambda t: model(t))(tokens)
        out = forward(model, tokens)
    specs = [
        tuple(eqn.params["sharding"].spec)
        for eqn in jaxpr.jaxpr.eqns
        if eqn.primitive.name == "sharding_constraint"
    ]
    # per layer: each expert's tokens, hidden units and outputs [b, E, C, ·] by
    # expert over ep (the batch keeps fsdp); the residual's batch over fsdp and ep
    assert specs.count(("fsdp", "ep", None, None)) == 2 * CFG.n_layers
    assert specs.count(("fsdp", "ep", None, "tp")) == CFG.n_layers
    assert (("fsdp", "ep"), "tp", None) in specs
    np.testing.assert_allclose(np.asarray(out), plain, atol=1e-5)


@pytest.mark.parametrize(
    ("change", "argument", "match"),
    [
        ({"top_k": 5}, "top_k", r"`top_k` must be at most `n_experts` \(4\), got 5"),
        ({"top_k": 0}, "top_k", r"`top_k` must be a positive integer, got 0"),
        ({"capacity_factor": 0.0}, "capacity_factor", r"`capacity_factor` must be a"),
        ({"capacity_factor": -1}, "capacity_factor", r"positive finite number"),
        ({"capacity_factor": float("nan")}, "capacity_factor", r"got nan"),
        ({"dispatch": "dense"}, "dispatch", r"`dispatch` must be one of"),
        ({"n_experts": 0}, "n_experts", r"`n_experts` must be a positive integer"),
        ({"n_kv_heads": 3}, "n_kv_heads", r"must divide `n_heads` 4"),
        ({"head_dim": 5}, "head_dim", r"`head_dim` must be even"),
    ],
)
def test_bad_config_is_one_line_naming_the_field(
    change: dict[str, Any], argument: str, match: str
) -> None:
    with pytest.raises(ArgumentError, match=match) as caught:
        dataclasses.replace(CFG, **change)
    assert caught.value.argument == argument
    assert "\n" not in str(caught.value)


def test_capacity_is_the_even_share_times_the_factor() -> None:
    cfg = dataclasses.replace(CFG, n_experts=8, top_k=2, capacity_factor=1.25)
    for tokens in (1, 7, 128, 1024):
        assert cfg.capacity(tokens) == min(tokens, math.ceil(tokens * 2 / 8 * 1.25))
    assert ex.QWEN3_30B_A3B.capacity(4096) == math.ceil(4096 * 8 / 128 * 1.25) == 320

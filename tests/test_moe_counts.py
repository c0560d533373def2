"""What a token uses of a mixture of experts: counts against hand arithmetic.

``active = total - routed * (1 - top_k / experts)``, each term written out from
the model's sizes here, never from the library's own figures. tunix's Qwen3
(google-tunix 0.1.7) is counted where tunix is importable.
"""

import json
from typing import Any

import flax
import jax.numpy as jnp
import pytest
from flax import nnx

from nnx_introspect import (
    ArgumentError,
    _nnx,
    abstract_model,
    count_active_params,
    count_params,
    summarize,
)
from nnx_introspect import examples as ex


def moe_params(
    vocab: int,
    d: int,
    layers: int,
    heads: int,
    kv: int,
    hd: int,
    experts: int,
    top_k: int,
    f: int,
    shared: int,
) -> tuple[int, int]:
    """(total, active) of the examples' MoE, from its sizes alone."""
    attention = d * heads * hd * 2 + d * kv * hd * 2  # q, o; k, v
    routed = 3 * experts * d * f  # gate, up (E x d x f), down (E x f x d)
    layer = attention + 2 * d + d * experts + routed + 3 * d * shared
    total = 2 * vocab * d + d + layers * layer  # embedding, head, final norm
    active = total - layers * routed + layers * 3 * top_k * d * f
    return total, active


def test_tiny_counts() -> None:
    model = abstract_model(ex.moe_tiny)
    total, active = moe_params(512, 64, 2, 4, 2, 16, 8, 2, 32, 64)
    assert (count_params(model), count_active_params(model)) == (total, active)
    assert (total, active) == (214_336, 140_608)


def test_400m_counts() -> None:
    model = abstract_model(ex.moe_400m)
    total, active = moe_params(32000, 1024, 6, 8, 4, 128, 16, 2, 1024, 1024)
    assert (count_params(model), count_active_params(model)) == (total, active)
    assert 395e6 < total < 415e6


def test_qwen3_30b_a3b_shape_counts() -> None:
    model = abstract_model(ex.qwen3_30b_a3b)
    total, active = moe_params(151936, 2048, 48, 32, 4, 128, 128, 8, 768, 0)
    assert (count_params(model), count_active_params(model)) == (total, active)
    assert round(total / 1e9, 1) == 30.5 and round(active / 1e9, 1) == 3.4
    # Qwen3's published 30.5B / 3.3B "activated" hold its q and k norms too
    assert total + 48 * 2 * 128 == 30_532_122_624


def test_dense_models_use_every_parameter() -> None:
    for factory in (ex.llama_tiny, ex.two_layer, ex.tied_embedding):
        model = abstract_model(factory)
        assert count_active_params(model) == count_params(model)


def test_summary_states_what_a_token_uses() -> None:
    summary = summarize(abstract_model(ex.moe_tiny))
    assert (summary.n_params, summary.n_active_params) == (214_336, 140_608)
    assert [(g.path_str, g.experts, g.top_k) for g in summary.experts] == [
        ("layers/0/moe", 8, 2),
        ("layers/1/moe", 8, 2),
    ]
    assert {leaf.path[-1] for g in summary.experts for leaf in g.leaves} == {
        "w_gate",
        "w_up",
        "w_down",
    }
    assert all(g.params == 3 * 8 * 64 * 32 for g in summary.experts)
    data = json.loads(summary.to_json())
    assert data["n_active_params"] == 140_608
    assert data["experts"][0] == {
        "path": "layers/0/moe",
        "experts": 8,
        "top_k": 2,
        "params": 49_152,
        "active_params": 12_288,
    }
    note = "Parameters a token uses: 140,608 of 214,336 (65.6%): 2 routers (top-2 "
    assert any(n.startswith(note) for n in summary.table().notes)
    assert "n_active_params=140608" in repr(summary)


def test_dense_summary_is_unchanged() -> None:
    summary = summarize(nnx.Linear(4, 3, rngs=nnx.Rngs(0)))
    assert summary.n_active_params == summary.n_params == 15
    assert summary.experts == ()
    assert "active" not in repr(summary) and "experts" not in repr(summary)
    assert not any("token" in n for n in summary.table().notes)
    assert json.loads(summary.to_json())["experts"] == []


class ListedExperts(nnx.Module):
    """Mixtral's layout: a router and a list of expert modules, top-2 of 4."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.num_experts = 4
        self.top_k = 2
        self.gate = nnx.Linear(6, 4, use_bias=False, rngs=rngs)  # the router
        self.experts = nnx.List(
            [nnx.Linear(6, 5, rngs=rngs) for _ in range(self.num_experts)]
        )
        self.shared_experts = nnx.List([nnx.Linear(6, 5, rngs=rngs)])


class Stacked(nnx.Module):
    """tunix's layout: stacked (experts, d, f) weights annotated on fsdp."""

    def __init__(self, top_k: int, rngs: nnx.Rngs) -> None:
        self.num_experts = 4
        self.experts_per_tok = top_k
        self.router = nnx.Linear(6, 4, use_bias=False, rngs=rngs)
        w = nnx.initializers.normal()(rngs.params(), (4, 6, 5))
        self.up = nnx.Param(w, out_sharding=("fsdp", None, "tp"))
        self.bias = nnx.Param(jnp.zeros((4, 5)))  # rank 2, unnamed: always used


def test_a_list_of_experts_counts_each_member() -> None:
    model = ListedExperts(nnx.Rngs(0))
    total = 6 * 4 + 4 * (6 * 5 + 5) + (6 * 5 + 5)
    assert count_params(model) == total
    assert count_active_params(model) == total - 2 * (6 * 5 + 5)


def test_stacked_experts_found_by_their_leading_dimension() -> None:
    with nnx.use_eager_sharding(False):
        model = abstract_model(lambda rngs: Stacked(1, rngs))
    total = 6 * 4 + 4 * 6 * 5 + 4 * 5
    assert count_params(model) == total
    assert count_active_params(model) == total - 3 * 6 * 5


def test_a_router_past_its_experts_is_refused() -> None:
    with nnx.use_eager_sharding(False):
        model = abstract_model(lambda rngs: Stacked(5, rngs))
    with pytest.raises(ArgumentError, match=r"routes each token to 5 of its 4") as e:
        count_active_params(model)
    assert e.value.argument == "target"
    with pytest.raises(ArgumentError, match=r"routes each token to 5 of its 4"):
        summarize(model)  # the router's cause, never "unknown" (issue 55)


def test_a_state_named_as_experts_is_refused() -> None:
    state = nnx.state(abstract_model(ex.moe_tiny_sharded))
    with pytest.raises(ArgumentError, match=r"a state holds no router") as e:
        count_active_params(state)
    assert e.value.argument == "target"
    summary = summarize(state)
    assert summary.n_active_params is None
    assert any("unknown" in n for n in summary.table().notes)
    # a dense state is all used
    dense = nnx.state(abstract_model(ex.llama_tiny))
    assert count_active_params(dense) == count_params(dense)


def test_module_walk_equals_its_public_fallback() -> None:
    for model in (abstract_model(ex.moe_tiny), ListedExperts(nnx.Rngs(0))):
        fast = [(p, type(m)) for p, m in _nnx.iter_modules(model)]
        public = [(p, type(m)) for p, m in _nnx.iter_modules_public(model)]
        assert fast == public and fast
    assert _nnx.iter_modules(nnx.state(ListedExperts(nnx.Rngs(0)))) == []


# --- tunix (google-tunix 0.1.7), where importable ---------------------------------


def _tunix_qwen3(**sizes: Any) -> Any:
    """tunix's Qwen3 of ``sizes`` (its ``qwen3_30b_a3b`` config with none), abstract."""
    qwen3 = pytest.importorskip("tunix.models.qwen3.model")
    cfg = qwen3.ModelConfig(**sizes) if sizes else qwen3.ModelConfig.qwen3_30b_a3b()
    before = flax.config.flax_always_shard_variable
    flax.config.update("flax_always_shard_variable", False)  # as tunix builds
    try:
        return abstract_model(lambda rngs: qwen3.Qwen3(cfg, rngs=rngs))
    finally:
        flax.config.update("flax_always_shard_variable", before)


def test_tunix_tiny_qwen3_moe() -> None:
    model = _tunix_qwen3(
        num_layers=2,
        vocab_size=1024,
        embed_dim=256,
        hidden_dim=128,
        num_heads=4,
        head_dim=64,
        num_kv_heads=2,
        rope_theta=1_000_000,
        norm_eps=1e-6,
        num_experts=8,
        num_experts_per_tok=2,
    )
    routed = 2 * 3 * 8 * 256 * 128  # layers x (gate, up, down) x E x d x f
    attention = 256 * 4 * 64 * 2 + 256 * 2 * 64 * 2 + 2 * 64  # q, o; k, v; q/k norms
    per_layer = attention + 2 * 256 + 256 * 8  # norms, router
    total = 2 * 1024 * 256 + 256 + 2 * per_layer + routed
    assert count_params(model) == total == 2_496_000
    assert count_active_params(model) == total - routed * 6 // 8 == 1_316_352


def test_tunix_qwen3_30b_a3b() -> None:
    model = _tunix_qwen3()  # its own config: 128 experts, 8 per token
    routed = 48 * 3 * 128 * 2048 * 768
    total = count_params(model)
    assert total == 30_532_122_624
    assert count_active_params(model) == total - routed * 120 // 128 == 3_353_032_704

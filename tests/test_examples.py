import dataclasses
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from nnx_introspect import (
    abstract_model,
    count_params,
    count_state_leaves,
    mesh_config_report,
)
from nnx_introspect import examples as ex


def llama_params(vocab: int, d: int, layers: int, f: int) -> int:
    # embedding + head, per layer q/k/v/o + gate/up/down + two norms, final norm
    return 2 * vocab * d + layers * (4 * d * d + 3 * d * f + 2 * d) + d


def test_llama_7b_counts_match_independent_arithmetic() -> None:
    model = abstract_model(ex.llama_7b)
    assert count_params(model) == 6_738_415_616
    assert count_params(model) == llama_params(32000, 4096, 32, 11008)
    assert count_state_leaves(model) == 1 + 32 * 9 + 1 + 1 == 291
    assert model.layers[0].gate.kernel.shape == (4096, 11008)
    assert model.layers[31].down.kernel.shape == (11008, 4096)
    assert model.lm_head.kernel.shape == (4096, 32000)


def test_llama_tiny_is_about_ten_million() -> None:
    model = abstract_model(ex.llama_tiny)
    assert count_params(model) == llama_params(8000, 256, 8, 688) == 10_424_576
    assert count_state_leaves(model) == 1 + 8 * 9 + 2


def test_llama_forward_and_bias_free_layers() -> None:
    cfg = ex.LlamaConfig(vocab=11, d_model=8, n_layers=2, n_heads=2, d_ff=12)
    model = ex.llama(cfg)(nnx.Rngs(0))
    logits = model(jnp.zeros((2, 5), jnp.int32))
    assert logits.shape == (2, 5, 11)
    assert model.layers[0].q.bias is None
    assert not hasattr(model.layers[0].attn_norm, "bias")
    assert count_params(model) == llama_params(11, 8, 2, 12)


def test_partitioned_llama_carries_annotations() -> None:
    cfg = dataclasses.replace(
        ex.LlamaConfig(vocab=11, d_model=8, n_layers=1, n_heads=2, d_ff=12),
        partitioned=True,
    )
    model = abstract_model(ex.llama(cfg))
    meta = model.layers[0].q.kernel.get_metadata()
    assert meta["out_sharding"] == ("fsdp", "tp")
    assert model.layers[0].down.kernel.get_metadata()["out_sharding"] == ("tp", "fsdp")
    scale = model.norm.scale
    assert scale is not None
    assert "out_sharding" not in scale.get_metadata()


def test_partitioned_moe_carries_expert_annotations() -> None:
    model = abstract_model(ex.moe_tiny_sharded)
    layer: Any = model.layers[1]
    moe = layer.moe
    assert moe.w_gate.get_metadata()["out_sharding"] == ("expert", "fsdp", "tp")
    assert moe.w_up.get_metadata()["out_sharding"] == ("expert", "fsdp", "tp")
    assert moe.w_down.get_metadata()["out_sharding"] == ("expert", "tp", "fsdp")
    assert moe.router.kernel.get_metadata()["out_sharding"] == ("fsdp", None)
    assert moe.shared.down.kernel.get_metadata()["out_sharding"] == ("tp", "fsdp")
    assert (moe.num_experts, moe.top_k, moe.dispatch) == (8, 2, "dropless")
    capacity: Any = abstract_model(ex.moe_tiny_capacity).layers[0]
    assert capacity.moe.dispatch == "capacity"
    plain: Any = abstract_model(ex.moe_tiny).layers[0]
    assert "out_sharding" not in plain.moe.w_gate.get_metadata()


def test_bn_dropout_mlp_kinds() -> None:
    model = ex.bn_dropout_mlp(nnx.Rngs(0))
    assert count_params(model) == (3 * 5 + 5) + (5 + 5) + (5 * 2 + 2)
    assert count_params(model, nnx.BatchStat) == 5 + 5
    assert count_state_leaves(model, nnx.RngState) == 2
    model.eval()  # type: ignore[no-untyped-call]
    assert model(jnp.ones((4, 3))).shape == (4, 2)


def test_tied_embedding_counts_table_once() -> None:
    model = ex.tied_embedding(nnx.Rngs(0))
    assert model.head is model.embed
    assert count_params(model) == 10 * 4
    assert count_state_leaves(model) == 1
    assert model(jnp.array([[1, 2, 3]])).shape == (1, 3, 10)


@pytest.mark.parametrize(
    "factory",
    [
        ex.two_layer,
        ex.bn_dropout_mlp,
        ex.tied_embedding,
        ex.llama_tiny,
        ex.moe_tiny,
        ex.moe_tiny_capacity,
        ex.moe_tiny_sharded,
    ],
)
def test_factories_return_modules(factory: Callable[[nnx.Rngs], nnx.Module]) -> None:
    assert isinstance(abstract_model(factory), nnx.Module)


def sharded_dims(vocab: int, d: int, layers: int, f: int) -> list[tuple[int, str]]:
    """Every (dimension size, mesh axis) pair the sharded Llama annotates."""
    col = [(d, "fsdp"), (d, "tp")]  # q, k, v (d x d): ("fsdp", "tp")
    dims = [(vocab, "tp"), (d, "fsdp")]  # embedding (vocab x d): ("tp", "fsdp")
    for _ in range(layers):
        dims += col * 3
        dims += [(d, "tp"), (d, "fsdp")]  # o (d x d): ("tp", "fsdp")
        dims += [(d, "fsdp"), (f, "tp")] * 2  # gate, up (d x f)
        dims += [(f, "tp"), (d, "fsdp")]  # down (f x d)
    dims += [(d, "fsdp"), (vocab, "tp")]  # lm_head (d x vocab)
    return dims


@pytest.mark.parametrize(
    ("factory", "sizes"),
    [
        (ex.llama_7b_sharded, (32000, 4096, 32, 11008)),
        (ex.llama_tiny_sharded, (8000, 256, 8, 688)),
    ],
)
def test_sharded_llamas_split_as_annotated(
    factory: Callable[[nnx.Rngs], nnx.Module], sizes: tuple[int, int, int, int]
) -> None:
    vocab, d, layers, f = sizes
    model = abstract_model(factory)
    assert count_params(model) == llama_params(vocab, d, layers, f)
    report = mesh_config_report(model, "fsdp=2,tp=4")
    assert report.ok
    split = [leaf for leaf in report.leaves if not leaf.replicated_over]
    replicated = [leaf for leaf in report.leaves if leaf.spec == P()]
    assert len(split) == 1 + 7 * layers + 1  # embedding, 7 kernels a layer, head
    assert len(replicated) == 2 * layers + 1  # the RMSNorm scales
    assert {leaf.path.rsplit("/", 1)[-1] for leaf in replicated} == {"scale"}
    leaves = {leaf.path: leaf for leaf in report.leaves}
    assert leaves["layers/0/down/kernel"].shard_shape == (f // 4, d // 2)
    assert leaves["embed/embedding"].shard_shape == (vocab // 4, d // 2)
    norms = (2 * layers + 1) * d
    params = llama_params(vocab, d, layers, f)
    assert report.bytes_per_device == (params - norms) // 8 * 4 + norms * 4


@pytest.mark.parametrize(
    ("factory", "sizes"),
    [
        (ex.llama_7b_sharded, (32000, 4096, 32, 11008)),
        (ex.llama_tiny_sharded, (8000, 256, 8, 688)),
    ],
)
def test_sharded_llamas_show_real_problems(
    factory: Callable[[nnx.Rngs], nnx.Module], sizes: tuple[int, int, int, int]
) -> None:
    mesh = {"fsdp": 3, "tp": 5}
    expected = sum(1 for size, axis in sharded_dims(*sizes) if size % mesh[axis])
    report = mesh_config_report(abstract_model(factory), mesh)
    assert not report.ok
    assert {p.kind for p in report.errors} == {"indivisible"}
    assert len(report.errors) == expected
    if factory is ex.llama_7b_sharded:
        assert expected == 1 + 32 * 14 + 1 == 450  # 4096, 11008 divide by neither
    first = report.errors[0]
    assert (first.path, first.dimension, first.size, first.axes) == (
        "embed/embedding",
        1,
        sizes[1],
        ("fsdp",),
    )

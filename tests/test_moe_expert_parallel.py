"""The examples' expert-parallel dispatch: what it computes and what XLA emits.

- **Values**: on 8 virtual CPU devices (``fsdp=2, ep=4, tp=1``),
  ``MoeBlock``'s ``"expert_parallel"`` dispatch gives the output and gradients
  of a dense reference written here (every token through each of its experts
  by plain einsums, weighted), when no copy is dropped; and with a small
  capacity, the copies it keeps are the first choices, first.
- **Program**: the compiled step of ``moe_tiny_expert_parallel`` on a
  deviceless ``v5p-8`` has, per layer, all-to-alls over ``ep`` only: the
  dispatch's and the combine's, forward and backward.
- **The how-to**: the sentence of ``docs/howto/moe.md`` that says experts over
  an expert axis add all-to-alls holds for the example it names.
"""

import dataclasses
import inspect
import re
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from nnx_introspect import abstract_model, step_memory_report
from nnx_introspect._xla.toolchain import libtpu_version
from nnx_introspect.examples import (
    MOE_TINY,
    MoeBlock,
    MoeLlama,
    ep_capacity,
    moe_tiny_expert_parallel,
)

EP_PY = Path(inspect.getsourcefile(ep_capacity) or "").read_text().splitlines()
HOWTO = Path(__file__).parents[1] / "docs" / "howto" / "moe.md"
needs_libtpu = pytest.mark.skipif(
    libtpu_version() is None, reason="libtpu is not installed (the tpu extra)"
)
needs_8 = pytest.mark.skipif(
    jax.device_count() < 8, reason="needs 8 devices (XLA_FLAGS host device count)"
)


def _per_copy(block: MoeBlock, x: jax.Array) -> jax.Array:
    """Each token copy's weighted expert output, ``[b, s, k, d]``."""
    weights, experts = block.route(x)
    gate, up, down = (w[...] for w in (block.w_gate, block.w_up, block.w_down))
    g = jnp.einsum("bsd,bskdf->bskf", x, gate[experts])
    u = jnp.einsum("bsd,bskdf->bskf", x, up[experts])
    out = jnp.einsum("bskf,bskfd->bskd", jax.nn.silu(g) * u, down[experts])
    return out * weights[..., None]


def _dense(block: MoeBlock, x: jax.Array) -> jax.Array:
    """Each token through each of its ``top_k`` experts, weighted: no dispatch."""
    return _per_copy(block, x).sum(2)


def _mesh() -> Any:
    auto = (jax.sharding.AxisType.Auto,) * 3
    return jax.make_mesh((2, 4, 1), ("fsdp", "ep", "tp"), axis_types=auto)


def _block(factor: float) -> MoeBlock:
    cfg = dataclasses.replace(
        MOE_TINY,
        shared_d_ff=0,
        dispatch="expert_parallel",
        capacity_factor=factor,
        shard_activations=True,
    )
    return MoeBlock(cfg, rngs=nnx.Rngs(0))


@needs_8
def test_expert_parallel_forward_and_gradients_match_a_dense_reference() -> None:
    block = _block(4.0)  # ep=4: each device may send all its copies anywhere
    x = jax.random.normal(jax.random.key(1), (8, 16, MOE_TINY.d_model))
    want = _dense(block, x)
    with jax.set_mesh(_mesh()):
        got = nnx.jit(lambda m, x: m(x))(block, x)
        grad = nnx.jit(nnx.grad(lambda m, x: (m(x) ** 2).sum()))(block, x)
    assert jnp.allclose(got, want, atol=1e-5, rtol=1e-5)
    want_grad = nnx.grad(lambda m, x: (_dense(m, x) ** 2).sum())(block, x)
    for name in ("w_gate", "w_up", "w_down"):
        assert jnp.allclose(
            grad[name][...], want_grad[name][...], atol=1e-4, rtol=1e-4
        ), name
    # without the mesh, the block dispatches locally: the same values
    assert jnp.allclose(block(x), want, atol=1e-5, rtol=1e-5)


@needs_8
def test_a_small_capacity_keeps_first_choices_first() -> None:
    # 8 sequences of 16 tokens over fsdp=2 x ep=4: a sequence a device, 32
    # copies; with factor 1.0 it sends at most ceil(32 / 4) = 8 to each device
    b, t, k, ep, local = 8, 16, MOE_TINY.top_k, 4, MOE_TINY.n_experts // 4
    capacity = ep_capacity(t * k, ep, 1.0)
    assert capacity == 8
    block = _block(1.0)
    x = jax.random.normal(jax.random.key(2), (b, t, MOE_TINY.d_model))
    with jax.set_mesh(_mesh()):
        got = nnx.jit(lambda m, x: m(x))(block, x)
    _, experts = block.route(x)
    kept = [[[False] * k for _ in range(t)] for _ in range(b)]
    for seq in range(b):
        sent = [0] * ep
        for choice in range(k):  # first choices of every token first
            for token in range(t):
                to = int(experts[seq, token, choice]) // local
                kept[seq][token][choice] = sent[to] < capacity
                sent[to] += 1
    mask = jnp.array(kept, dtype=x.dtype)
    dropped = int(mask.size - mask.sum())
    assert 0 < dropped < mask.size  # the test drops some copies, not all
    want = (_per_copy(block, x) * mask[..., None]).sum(2)
    assert jnp.allclose(got, want, atol=1e-5, rtol=1e-5)


@needs_8
def test_the_tokens_and_logits_split_over_the_expert_axis_too() -> None:
    cfg = dataclasses.replace(
        MOE_TINY, dispatch="expert_parallel", shard_activations=True
    )
    model = MoeLlama(cfg, rngs=nnx.Rngs(0))
    tokens = jnp.zeros((8, 16), jnp.int32)
    with jax.set_mesh(_mesh()):
        logits = nnx.jit(lambda m, t: m(t))(model, tokens)
    # each of the 8 devices holds one sequence's logits, not the batch's
    assert logits.sharding.spec[0] == ("fsdp", "ep")
    assert logits.addressable_shards[0].data.shape == (1, 16, MOE_TINY.vocab)
    dense = dataclasses.replace(cfg, dispatch="dropless")
    assert MoeLlama(dense, rngs=nnx.Rngs(0)).activation_batch_axes() == (
        "data",
        "fsdp",
    )


def _ep_line(text: str) -> int:
    found = [i + 1 for i, line in enumerate(EP_PY) if text in line]
    assert len(found) == 1, (text, found)
    return found[0]


@pytest.fixture(scope="module")
def ep_step() -> Any:
    return step_memory_report(
        "nnx_introspect.examples:moe_tiny_expert_parallel",
        "fsdp=1,ep=4,tp=1",
        jax.ShapeDtypeStruct((8, 128), jnp.int32),
        loss="lm",
        optimizer="adamw",
        topology="v5p-8",
    )


def _all_to_alls(report: Any) -> list[Any]:
    found = report.program.collectives
    assert found is not None
    return [row for row in found.rows if row.kind == "all-to-all"]


@needs_libtpu
def test_each_layer_dispatches_and_combines_by_all_to_all_over_ep(
    ep_step: Any,
) -> None:
    layers = MOE_TINY.n_layers
    rows = _all_to_alls(ep_step)
    assert rows and {row.axes for row in rows} == {("ep",)}
    by_line: dict[int, int] = {}
    for row in rows:
        assert row.source is not None and row.source.file.endswith("_moe_ep.py")
        by_line[row.source.line] = by_line.get(row.source.line, 0) + row.count
    dispatch = _ep_line("rows = jax.lax.all_to_all(")
    ids = _ep_line("held = jax.lax.all_to_all(")
    combine = _ep_line("back = jax.lax.all_to_all(")
    # forward and backward (an all-to-all's transpose is an all-to-all), per
    # layer; the experts' ids have no gradient
    assert by_line == {dispatch: 2 * layers, combine: 2 * layers, ids: layers}
    # each moves [ep, capacity, d_model]: a device's 8 x 128 / 4 tokens x 2
    # copies, ceil(512 / 4 x 1.25) = 160 rows to each of the 4 devices
    tokens = 8 * 128 // 4 * MOE_TINY.top_k
    capacity = -(-tokens * 5 // (4 * 4))
    assert capacity == 160
    shapes = {row.shapes[0] for row in rows if row.source.line != ids}
    assert shapes == {(4, capacity, MOE_TINY.d_model)}


def _howto_claim() -> str:
    text = " ".join(HOWTO.read_text().split())
    found = re.findall(
        r"experts sharded over an expert axis add all-to-alls[^;]*;", text
    )
    assert len(found) == 1, found
    claim: str = found[0]
    return claim


@needs_libtpu
def test_the_howto_all_to_all_sentence_holds_for_its_example(ep_step: Any) -> None:
    claim = _howto_claim()
    assert "over that axis" in claim and "`moe_tiny_expert_parallel`" in claim
    rows = _all_to_alls(ep_step)
    # "over that axis": the expert axis, ep, and no other
    assert rows and all(row.axes == ("ep",) for row in rows)
    # "three a layer in the forward pass": the copies, their ids, the results
    assert "three a layer in the forward pass" in claim
    lines = {row.source.line for row in rows}
    assert lines == {
        _ep_line("rows = jax.lax.all_to_all("),
        _ep_line("held = jax.lax.all_to_all("),
        _ep_line("back = jax.lax.all_to_all("),
    }
    # the backward pass adds the transposes of the two that carry values
    layers = MOE_TINY.n_layers
    assert sum(row.count for row in rows) == 3 * layers + 2 * layers


def test_the_howto_names_the_dispatch_it_describes() -> None:
    claim = _howto_claim()
    assert '`"expert_parallel"`' in claim
    model: Any = abstract_model(moe_tiny_expert_parallel)
    assert {layer.moe.dispatch for layer in model.layers} == {"expert_parallel"}

"""Write the compiled XLA:TPU programs of JAX's Pallas TPU kernels, as HLO text.

Each ``*.hlo`` file here is ``compiled.as_text()`` of one small program that
calls a kernel JAX ships for TPU (``jax.experimental.pallas.ops.tpu``),
compiled deviceless for a v5e topology through libtpu: splash attention
(forward and backward, causal and full masks, MHA and GQA, in a scanned
stack, over a long sequence), the flash attention kernel (causal and not,
forward and backward), ragged paged attention, decode paged attention,
megablox ``gmm`` and its gradient (``tgmm``), and an FSDP attention layer's
step that calls splash attention under ``shard_map`` over eight devices
(its weights all-gathered). The tests read these texts; nothing is compiled
when they run.

Regenerate (from the repository root, with libtpu installed)::

    JAX_PLATFORMS=cpu PYTHONPATH=src python tests/data/hlo/kernels/make_fixtures.py

The texts depend on the pinned jax and libtpu: regenerate them with those.
"""

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu import flash_attention as flash
from jax.experimental.pallas.ops.tpu import paged_attention as paged
from jax.experimental.pallas.ops.tpu import ragged_paged_attention as rpa
from jax.experimental.pallas.ops.tpu.megablox import ops as megablox
from jax.experimental.pallas.ops.tpu.splash_attention import (
    splash_attention_kernel as splash,
)
from jax.experimental.pallas.ops.tpu.splash_attention import (
    splash_attention_mask as masks,
)
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from nnx_introspect._xla import toolchain

HERE = Path(__file__).parent
HEADS, KV_HEADS, SEQ, DIM = 2, 1, 256, 128
"""Splash and flash attention's shapes: two query heads of 256 positions."""
LAYERS = 4
"""The scanned stack's layers."""


def _compile(
    fn: Callable[..., Any], shapes: Sequence[tuple[tuple[int, ...], Any]], mesh: Any
) -> str:
    replicated = NamedSharding(mesh, P())
    specs = [jax.ShapeDtypeStruct(s, d, sharding=replicated) for s, d in shapes]
    with jax.set_mesh(mesh):  # a kernel asks the mesh's device for its chip
        return str(jax.jit(fn).lower(*specs).compile().as_text())


def _splash(causal: bool, mqa: bool) -> Any:
    one: masks.Mask = (
        masks.CausalMask((SEQ, SEQ)) if causal else masks.FullMask((SEQ, SEQ))
    )
    mask = masks.MultiHeadMask([one] * HEADS)
    make = splash.make_splash_mqa if mqa else splash.make_splash_mha
    return make(mask, head_shards=1, q_seq_shards=1)


def _loss(attend: Callable[..., jax.Array]) -> Callable[..., Any]:
    def loss(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        return jnp.sum(attend(q, k, v).astype(jnp.float32) ** 2)

    return jax.grad(loss, argnums=(0, 1, 2))


def splash_programs(mesh: Any) -> dict[str, str]:
    """Splash attention forward, and forward with backward, by mask and heads."""
    qkv = [((HEADS, SEQ, DIM), jnp.bfloat16)] * 3
    gqa = [((HEADS, SEQ, DIM), jnp.bfloat16)] + [((SEQ, DIM), jnp.bfloat16)] * 2
    out = {}
    for causal in (True, False):
        mask = "causal" if causal else "full"
        mha = _splash(causal, mqa=False)
        out[f"splash_mha_{mask}_fwd"] = _compile(mha, qkv, mesh)
        out[f"splash_mha_{mask}_grad"] = _compile(_loss(mha), qkv, mesh)
    mqa = _splash(True, mqa=True)
    out["splash_gqa_causal_fwd"] = _compile(mqa, gqa, mesh)
    out["splash_gqa_causal_grad"] = _compile(_loss(mqa), gqa, mesh)
    return out


def scanned_and_long_splash_programs(mesh: Any) -> dict[str, str]:
    """Splash attention in a scanned stack, and over 2,048 positions.

    In the scan the block mask is carried into the loops; over 2,048
    positions it has 256 blocks, more than XLA prints of a constant.
    """

    def stack(weights: jax.Array, x: jax.Array) -> jax.Array:
        kernel = _splash(True, mqa=False)

        def layer(h: jax.Array, w: jax.Array) -> tuple[jax.Array, None]:
            h = (h @ w).astype(jnp.bfloat16)
            return kernel(h, h, h), None

        out, _ = jax.lax.scan(layer, x, weights)
        return jnp.sum(out.astype(jnp.float32))

    shapes = [((LAYERS, DIM, DIM), jnp.bfloat16), ((HEADS, SEQ, DIM), jnp.bfloat16)]
    long = 2048
    mask = masks.MultiHeadMask([masks.CausalMask((long, long))] * HEADS)
    kernel = splash.make_splash_mha(mask, head_shards=1, q_seq_shards=1)
    return {
        "splash_scan_grad": _compile(jax.grad(stack), shapes, mesh),
        "splash_long_causal_fwd": _compile(
            kernel, [((HEADS, long, DIM), jnp.bfloat16)] * 3, mesh
        ),
    }


def flash_programs(mesh: Any) -> dict[str, str]:
    """The flash attention kernel, forward with backward, causal and not."""
    qkv = [((1, HEADS, SEQ, DIM), jnp.bfloat16)] * 3
    out = {}
    for causal in (True, False):
        attend = functools.partial(flash.flash_attention, causal=causal)
        name = "causal" if causal else "full"
        out[f"flash_{name}_grad"] = _compile(_loss(attend), qkv, mesh)
    return out


def ragged_paged_program(mesh: Any) -> str:
    """Ragged paged attention: 16 tokens of 4 sequences over 32 pages of 16."""
    tokens, heads, kv_heads, pages, page, seqs, per_seq = 16, 4, 2, 32, 16, 4, 8
    shapes = [
        ((tokens, heads, DIM), jnp.bfloat16),
        ((pages, page, 2 * kv_heads, DIM), jnp.bfloat16),
        ((seqs,), jnp.int32),
        ((seqs, per_seq), jnp.int32),
        ((seqs + 1,), jnp.int32),
        ((1,), jnp.int32),
    ]
    attend = functools.partial(
        rpa.ragged_paged_attention, num_kv_pages_per_block=4, num_queries_per_block=8
    )
    return _compile(attend, shapes, mesh)


def paged_program(mesh: Any) -> str:
    """Decode paged attention: 4 sequences of 8 pages of 16, 4 heads over 2."""
    batch, heads, kv_heads, pages, page, per_seq = 4, 4, 2, 32, 16, 8
    shapes = [
        ((batch, heads, DIM), jnp.bfloat16),
        ((kv_heads, pages, page, DIM), jnp.bfloat16),
        ((kv_heads, pages, page, DIM), jnp.bfloat16),
        ((batch,), jnp.int32),
        ((batch, per_seq), jnp.int32),
    ]
    attend = functools.partial(paged.paged_attention, pages_per_compute_block=4)
    return _compile(attend, shapes, mesh)


def gmm_program(mesh: Any) -> str:
    """Megablox ``gmm`` forward and backward (``gmm`` and ``tgmm``): 4 groups."""
    m, k, n, groups = 512, 256, 384, 4

    def loss(lhs: jax.Array, rhs: jax.Array, sizes: jax.Array) -> jax.Array:
        out = megablox.gmm(lhs, rhs, sizes, jnp.float32, (128, 128, 128))
        return jnp.sum(out**2)

    shapes = [
        ((m, k), jnp.bfloat16),
        ((groups, k, n), jnp.bfloat16),
        ((groups,), jnp.int32),
    ]
    return _compile(jax.grad(loss, argnums=(0, 1)), shapes, mesh)


def sharded_splash_program() -> str:
    """Splash attention under ``shard_map`` over ``fsdp=8``, as MaxText calls it.

    An FSDP attention layer's forward and backward: the batch is sharded over
    the mesh, the projections' weights too (all-gathered before use, their
    gradients reduce-scattered), and the kernel runs on each device's batch
    rows under ``shard_map``.
    """
    mesh, _ = toolchain.topology_mesh("v5e-8", (("fsdp", 8),))
    batch, width = 8, 256
    kernel = splash.make_splash_mha(
        masks.MultiHeadMask([masks.CausalMask((SEQ, SEQ))] * HEADS),
        head_shards=1,
        q_seq_shards=1,
    )
    sharded = jax.shard_map(
        jax.vmap(kernel),
        mesh=mesh,
        in_specs=(P("fsdp"),) * 3,
        out_specs=P("fsdp"),
        check_vma=False,
    )

    def loss(weights: jax.Array, x: jax.Array) -> jax.Array:
        q, k, v = (
            (x @ w).reshape(batch, SEQ, HEADS, DIM).transpose(0, 2, 1, 3)
            for w in weights
        )
        out = sharded(q, k, v).transpose(0, 2, 1, 3).reshape(batch, SEQ, -1)
        return jnp.sum(out.astype(jnp.float32) ** 2)

    weights = jax.ShapeDtypeStruct(
        (3, width, HEADS * DIM),
        jnp.bfloat16,
        sharding=NamedSharding(mesh, P(None, "fsdp")),
    )
    x = jax.ShapeDtypeStruct(
        (batch, SEQ, width), jnp.bfloat16, sharding=NamedSharding(mesh, P("fsdp"))
    )
    with jax.set_mesh(mesh):
        lowered = jax.jit(jax.grad(loss)).lower(weights, x)
    return str(lowered.compile().as_text())


def main() -> None:
    """Write every program's text here."""
    mesh, _ = toolchain.topology_mesh("v5e-1", (("x", 1),))
    texts = {**splash_programs(mesh), **flash_programs(mesh)}
    texts |= scanned_and_long_splash_programs(mesh)
    texts["ragged_paged_attention"] = ragged_paged_program(mesh)
    texts["paged_attention"] = paged_program(mesh)
    texts["megablox_gmm_grad"] = gmm_program(mesh)
    texts["splash_shard_map_fsdp8"] = sharded_splash_program()
    for name, text in texts.items():
        (HERE / f"{name}.hlo").write_text(text)


if __name__ == "__main__":
    main()

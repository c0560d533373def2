"""Splash-attention models (MaxText's attention='flash' under shard_map) for the chip.

Targets ``splash_models:splash_a`` (4 layers, width 1,024), ``splash_b`` (6,
768) and ``splash_c`` (8, 512): 128-wide heads, causal masks, float32
parameters computing in bfloat16.
"""

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.experimental.pallas.ops.tpu.splash_attention import (
    splash_attention_kernel as splash,
)
from jax.experimental.pallas.ops.tpu.splash_attention import (
    splash_attention_mask as masks,
)
from jax.sharding import PartitionSpec as P


def make(layers: int, width: int, heads: int, dim: int, mlp: int):
    class Attention(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            kw: dict[str, Any] = {
                "use_bias": False,
                "rngs": rngs,
                "param_dtype": jnp.float32,
                "dtype": jnp.bfloat16,
            }
            self.qkv = nnx.Linear(width, 3 * heads * dim, **kw)
            self.out = nnx.Linear(heads * dim, width, **kw)
            self.up = nnx.Linear(width, mlp, **kw)
            self.down = nnx.Linear(mlp, width, **kw)

        def __call__(self, x: jax.Array) -> jax.Array:
            b, s, _ = x.shape
            qkv = self.qkv(x).reshape(b, s, 3 * heads, dim).transpose(0, 2, 1, 3)
            q, k, v = jnp.split(qkv, 3, axis=1)
            mask = masks.MultiHeadMask([masks.CausalMask((s, s))] * heads)
            kernel = splash.make_splash_mha(mask, head_shards=1, q_seq_shards=1)
            attend = jax.shard_map(
                jax.vmap(kernel),
                in_specs=(P("fsdp"),) * 3,
                out_specs=P("fsdp"),
                check_vma=False,
            )
            o = attend(q, k, v).transpose(0, 2, 1, 3).reshape(b, s, heads * dim)
            x = x + self.out(o)
            return x + self.down(jax.nn.gelu(self.up(x)))

    class Model(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.layers = nnx.List([Attention(rngs) for _ in range(layers)])

        def __call__(self, x: jax.Array) -> jax.Array:
            for layer in self.layers:
                x = layer(x)
            return x

    return Model


def splash_a(rngs: nnx.Rngs) -> Any:
    return make(4, 1024, 8, 128, 4096)(rngs)


def splash_b(rngs: nnx.Rngs) -> Any:
    return make(6, 768, 6, 128, 3072)(rngs)


def splash_c(rngs: nnx.Rngs) -> Any:
    return make(8, 512, 4, 128, 2048)(rngs)


def loss(model: Any, batch: Any) -> Any:
    (x,) = batch
    return jnp.mean(model(x).astype(jnp.float32) ** 2)

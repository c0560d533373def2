"""A small model written as google-tunix writes its models, for the serving tests.

tunix is no dependency of the project (its own models are tried where it is
installed); this model copies what the serving report must handle of them:

- ``model(tokens, positions, cache, attention_mask) -> (logits, cache)``, a
  cache of ``{"layer_i": {"k", "v", "end_index"}}``, ``k``/``v`` laid out
  ``[sequences, context, kv_heads, head_dim]`` and written with
  ``dynamic_update_slice`` at the shared ``end_index`` (tunix's
  ``llama3/model.py``);
- grouped-query attention as tunix's einsums, ``BTHGD,BSHD->BHGTS`` then
  ``BHGTS,BSHD->BTHGD``: on XLA:GPU the second makes a transposed copy of
  ``v`` for every layer;
- parameters annotated ``("fsdp", "tp", ...)`` and activations constrained
  over ``fsdp`` and ``tp`` only off the CPU (tunix's ``shard``), through the
  legacy physical mesh;
- :data:`QWEN_LIKE`: keys and values computed in float32 (Qwen3's default);
- :data:`GEMMA_LIKE`: layers alternating a sliding window and global
  attention (``attn_type`` / ``sliding_window_size``, as tunix's Gemma 2/3).
"""

import dataclasses
import enum
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.interpreters import pxla
from jax.sharding import NamedSharding, PartitionSpec


class AttentionType(enum.Enum):
    """tunix's Gemma attention kinds."""

    GLOBAL = 1
    LOCAL_SLIDING = 2


@dataclasses.dataclass(frozen=True)
class Config:
    """The sizes, and what makes it Qwen- or Gemma-like."""

    vocab: int = 128
    embed_dim: int = 32
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 8
    kv_float32: bool = False
    sliding_window_size: int | None = None


LLAMA_LIKE = Config()
QWEN_LIKE = Config(kv_float32=True)
GEMMA_LIKE = Config(num_layers=4, sliding_window_size=16)


def shard(x: jax.Array, spec: tuple[str | None, ...]) -> jax.Array:
    """tunix's ``shard``: a constraint on the legacy mesh, none on a CPU."""
    mesh = pxla.thread_resources.env.physical_mesh
    if mesh.empty or jax.devices()[0].platform == "cpu":
        return x
    out: jax.Array = jax.lax.with_sharding_constraint(
        x, NamedSharding(mesh, PartitionSpec(*spec))
    )
    return out


def _param(rngs: nnx.Rngs, shape: tuple[int, ...], names: tuple[Any, ...]) -> Any:
    value = nnx.initializers.normal(0.02)(rngs.params(), shape)
    return nnx.Param(value, out_sharding=names)


class Attention(nnx.Module):
    """One attention block, as tunix's Llama 3 writes it."""

    def __init__(self, cfg: Config, layer: int, *, rngs: nnx.Rngs) -> None:
        d, h, k, hd = cfg.embed_dim, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q = _param(rngs, (d, h, hd), ("fsdp", "tp", None))
        self.k = _param(rngs, (d, k, hd), ("fsdp", "tp", None))
        self.v = _param(rngs, (d, k, hd), ("fsdp", "tp", None))
        self.o = _param(rngs, (h, hd, d), ("tp", None, "fsdp"))
        self.kv_float32 = cfg.kv_float32
        local = cfg.sliding_window_size is not None and layer % 2 == 0
        self.attn_type = AttentionType.LOCAL_SLIDING if local else AttentionType.GLOBAL
        self.sliding_window_size = cfg.sliding_window_size

    def __call__(self, x: jax.Array, cache: Any, mask: jax.Array) -> Any:
        query = shard(
            jnp.einsum("BTD,DNH->BTNH", x, self.q[...]), ("fsdp", None, "tp", None)
        )
        key = jnp.einsum("BSD,DKH->BSKH", x, self.k[...])
        value = jnp.einsum("BSD,DKH->BSKH", x, self.v[...])
        if self.kv_float32:  # Qwen3 computes keys and values in float32
            key, value = key.astype(jnp.float32), value.astype(jnp.float32)
        key = shard(key, ("fsdp", None, "tp", None))
        value = shard(value, ("fsdp", None, "tp", None))
        if cache is not None:
            end = cache["end_index"][0]
            at = (0, end % cache["v"].shape[1], 0, 0)
            value = jax.lax.dynamic_update_slice(cache["v"], value, at)
            key = jax.lax.dynamic_update_slice(cache["k"], key, at)
        b, t, h, hd = query.shape
        kh = key.shape[2]
        grouped = query.reshape((b, t, kh, h // kh, hd))
        scores = jnp.einsum("BTHGD,BSHD->BHGTS", grouped, key.astype(query.dtype))
        scores = scores.reshape((b, h, t, -1))
        scores = jnp.where(mask[:, None], scores, -2.3819763e38)
        probs = jax.nn.softmax(scores.astype(jnp.float32), axis=-1).astype(x.dtype)
        probs = probs.reshape((b, kh, h // kh, t, -1))
        out = jnp.einsum("BHGTS,BSHD->BTHGD", probs, value.astype(query.dtype))
        out = jnp.einsum("BTNH,NHD->BTD", out.reshape((b, t, h, hd)), self.o[...])
        out = shard(out, ("fsdp", None, "tp"))
        if cache is None:
            return None, out
        return {"k": key, "v": value, "end_index": cache["end_index"] + t}, out


class Model(nnx.Module):
    """Embedding, ``num_layers`` attention blocks, a tied head."""

    def __init__(self, cfg: Config, *, rngs: nnx.Rngs) -> None:
        self.config = cfg
        self.embed = _param(rngs, (cfg.vocab, cfg.embed_dim), ("tp", "fsdp"))
        self.layers = nnx.List(
            [Attention(cfg, i, rngs=rngs) for i in range(cfg.num_layers)]
        )

    def __call__(
        self, tokens: jax.Array, positions: jax.Array, cache: Any, attention_mask: Any
    ) -> Any:
        del positions  # rotary angles left out: what matters here is memory
        x = self.embed[...][tokens]
        b, t = tokens.shape
        if attention_mask is None:
            attention_mask = jnp.tril(jnp.ones((b, t, t), bool))
        new: dict[str, Any] = {}
        for i, layer in enumerate(self.layers):
            part, x = layer(
                x, None if cache is None else cache[f"layer_{i}"], attention_mask
            )
            if part is not None:
                new[f"layer_{i}"] = part
        logits = jnp.einsum("BTD,VD->BTV", x, self.embed[...])
        return logits, (new or None)


def init_cache(model: Any, sequences: int, context: int, dtype: Any) -> Any:
    """tunix's sampler's cache: ``k``, ``v`` and an ``end_index`` per layer."""
    cfg = model.config
    shape = (sequences, context, cfg.num_kv_heads, cfg.head_dim)
    return {
        f"layer_{i}": {
            "k": jnp.zeros(shape, dtype),
            "v": jnp.zeros(shape, dtype),
            "end_index": jnp.zeros((sequences,), jnp.int32),
        }
        for i in range(cfg.num_layers)
    }


def llama_like(rngs: nnx.Rngs) -> Model:
    """The Llama-3-like model."""
    return Model(LLAMA_LIKE, rngs=rngs)


def qwen_like(rngs: nnx.Rngs) -> Model:
    """Keys and values in float32, as Qwen3's default config computes them."""
    return Model(QWEN_LIKE, rngs=rngs)


def gemma_like(rngs: nnx.Rngs) -> Model:
    """Every other layer attends over a 16-position sliding window."""
    return Model(GEMMA_LIKE, rngs=rngs)

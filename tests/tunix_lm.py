"""tunix's Llama 3 at a small size, a causal LM loss in its calling convention, its cache.

Only for tests and benchmarks that ``pytest.importorskip("tunix")`` first:
tunix (``google-tunix``) is no dependency of the library. Its layers' ``__call__``
are wrapped in ``jax.named_scope`` and ``DecoderLayer.__call__`` delegates to
``DecoderLayer.block``: what :func:`~nnx_introspect._sweep.fit.layers.
remat_candidates` must see through.
"""

from typing import Any

import flax
import jax.numpy as jnp
import optax
import pytest
from flax import nnx

# pytest imports this module for its doctests too (--doctest-modules): without
# tunix it is skipped, not an error
pytest.importorskip("tunix")

from tunix.models.llama3 import model as llama3

TINY = llama3.ModelConfig(
    num_layers=4,
    vocab_size=512,
    embed_dim=64,
    hidden_dim=192,
    num_heads=4,
    head_dim=16,
    num_kv_heads=2,
    rope_theta=500_000,
    norm_eps=1e-5,
    weight_tying=True,
)
"""Llama-3.2-1B's shape (tied embedding, grouped KV heads) at 4 layers of width 64."""


def tiny_llama3(rngs: nnx.Rngs) -> Any:
    """tunix's ``Llama3`` with :data:`TINY`'s sizes.

    Built as tunix builds it: importing tunix's models turns flax's
    ``flax_always_shard_variable`` off (annotations kept as metadata, no mesh
    needed); the test suite restores flax's own setting before each test, so
    this sets tunix's for the construction only.
    """
    before = flax.config.flax_always_shard_variable
    flax.config.update("flax_always_shard_variable", False)
    try:
        return llama3.Llama3(TINY, rngs=rngs)
    finally:
        flax.config.update("flax_always_shard_variable", before)


def lm_loss(model: Any, batch: tuple[Any, ...]) -> Any:
    """Next-token cross-entropy, calling ``model(tokens, positions, None, mask)``."""
    tokens = batch[0]
    b, t = tokens.shape
    positions = jnp.broadcast_to(jnp.arange(t), (b, t))
    mask = jnp.broadcast_to(jnp.tril(jnp.ones((t, t), dtype=bool)), (b, t, t))
    logits, _ = model(tokens, positions, None, mask)
    return optax.softmax_cross_entropy_with_integer_labels(
        logits[:, :-1].astype(jnp.float32), tokens[:, 1:]
    ).mean()


def tunix_cache(model: Any, sequences: int, context: int, dtype: Any) -> Any:
    """tunix's sampler's cache maker, called as the library's ``init_cache``."""
    from tunix.generate.sampler import _init_cache

    config = model.config
    return _init_cache(
        config.num_layers,
        context,
        sequences,
        config.num_kv_heads,
        config.head_dim,
        dtype,
    )

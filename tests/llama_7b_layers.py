"""The 7B example's layer shapes with 4 layers, for the activation-formula tests.

The formula of ``tests/test_examples_activations.py`` counts per layer, plus the
loss and the gathered weights: four layers of the Llama-2-7B shapes (width
4,096, 32 heads, SwiGLU 11,008, vocabulary 32,000) hold it as well as 32 do, and
XLA:GPU compiles them about eight times faster (CI's budget).
"""

import dataclasses

from flax import nnx

from nnx_introspect import examples as ex

LAYERS = 4


def llama_7b_4_layers_sharded(rngs: nnx.Rngs) -> ex.Llama:
    """:func:`~nnx_introspect.examples.llama_7b_sharded` with 4 layers (bf16 compute)."""
    cfg = dataclasses.replace(
        ex.LLAMA_7B, n_layers=LAYERS, partitioned=True, shard_activations=True
    )
    return ex.Llama(cfg, rngs=rngs)


def llama_7b_4_layers_sharded_f32(rngs: nnx.Rngs) -> ex.Llama:
    """:func:`~nnx_introspect.examples.llama_7b_sharded_f32` with 4 layers."""
    cfg = dataclasses.replace(
        ex.LLAMA_7B_F32, n_layers=LAYERS, partitioned=True, shard_activations=True
    )
    return ex.Llama(cfg, rngs=rngs)

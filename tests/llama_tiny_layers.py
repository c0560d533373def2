"""Smaller Llamas for the tests that compile one: fewer layers, narrower widths.

XLA's compile time grows with the unrolled layers (and XLA:TPU's with the
widths too), not with what the tests hold: two layers still repeat
``LlamaLayer`` (a remat candidate, a kept activation per instance) at about
half the compile of ``llama_tiny``'s eight, and a 2-layer Llama of width 32
compiles a step, with the same sharding annotations and activation
constraints, in a fraction of it. Importable by name for a child process:
``"tests.llama_tiny_layers:llama_tiny_2_layers_sharded"``.
"""

import dataclasses

from flax import nnx

from nnx_introspect import examples as ex

LAYERS = 2
TINY_2_LAYERS = dataclasses.replace(
    ex.LLAMA_TINY, n_layers=LAYERS, partitioned=True, shard_activations=True
)
TINY_1_LAYER = dataclasses.replace(TINY_2_LAYERS, n_layers=1)
"""``llama_tiny_sharded`` with 1 layer: for a test whose claim needs no repeated layer."""
TINY_2_LAYERS_8000 = dataclasses.replace(ex.LLAMA_TINY, n_layers=LAYERS)
"""``llama_tiny`` (no sharding annotations, vocabulary 8000) with 2 layers."""
TINY_2_LAYERS_PLAIN = dataclasses.replace(ex.LLAMA_TINY, vocab=512, n_layers=LAYERS)
"""``llama_tiny`` (no sharding annotations) with 2 layers and a vocabulary of 512."""
SMALL = dataclasses.replace(
    ex.LLAMA_TINY,
    vocab=64,
    d_model=32,
    n_layers=LAYERS,
    n_heads=4,
    d_ff=48,
    partitioned=True,
    shard_activations=True,
)
"""``llama_tiny_sharded``'s annotations on 2 layers of width 32 (vocabulary 64)."""
SMALL_PLAIN = dataclasses.replace(SMALL, partitioned=False, shard_activations=False)
""":data:`SMALL` without sharding annotations, as ``llama_tiny`` has none."""


def llama_tiny_2_layers_sharded(rngs: nnx.Rngs) -> ex.Llama:
    """:func:`~nnx_introspect.examples.llama_tiny_sharded` with 2 layers."""
    return ex.Llama(TINY_2_LAYERS, rngs=rngs)


def llama_tiny_1_layer_sharded(rngs: nnx.Rngs) -> ex.Llama:
    """:func:`~nnx_introspect.examples.llama_tiny_sharded` with 1 layer."""
    return ex.Llama(TINY_1_LAYER, rngs=rngs)


def llama_tiny_2_layers(rngs: nnx.Rngs) -> ex.Llama:
    """:data:`TINY_2_LAYERS_8000`: :func:`~nnx_introspect.examples.llama_tiny`, 2 layers."""
    return ex.Llama(TINY_2_LAYERS_8000, rngs=rngs)


def llama_tiny_2_layers_512(rngs: nnx.Rngs) -> ex.Llama:
    """:data:`TINY_2_LAYERS_PLAIN`: ``llama_tiny``'s widths, 2 layers, vocabulary 512."""
    return ex.Llama(TINY_2_LAYERS_PLAIN, rngs=rngs)


def llama_small(rngs: nnx.Rngs) -> ex.Llama:
    """:data:`SMALL_PLAIN`: 2 layers of width 32, no sharding annotations."""
    return ex.Llama(SMALL_PLAIN, rngs=rngs)


def llama_small_sharded(rngs: nnx.Rngs) -> ex.Llama:
    """:data:`SMALL`: ``llama_tiny_sharded``'s annotations, 2 layers of width 32."""
    return ex.Llama(SMALL, rngs=rngs)

"""``llama_tiny_sharded`` with 2 of its 8 layers, for the tests that compile it often.

XLA's compile time grows with the unrolled layers, not with their widths: two
layers still repeat ``LlamaLayer`` (a remat candidate, a kept activation per
instance) at about half the compile of eight. Importable by name for a child
process: ``"tests.llama_tiny_layers:llama_tiny_2_layers_sharded"``.
"""

import dataclasses

from flax import nnx

from nnx_introspect import examples as ex

LAYERS = 2
TINY_2_LAYERS = dataclasses.replace(
    ex.LLAMA_TINY, n_layers=LAYERS, partitioned=True, shard_activations=True
)


def llama_tiny_2_layers_sharded(rngs: nnx.Rngs) -> ex.Llama:
    """:func:`~nnx_introspect.examples.llama_tiny_sharded` with 2 layers."""
    return ex.Llama(TINY_2_LAYERS, rngs=rngs)

"""A model quantized by qwix (int8 weights) served at its packed size.

qwix's post-training quantization (``qwix.quantize_model`` with a
``PtqProvider``) replaces each kernel by an int8 ``qvalue`` and a float32
``scale``; the served weights are that model's own state, so with
``weights=None`` the report's weights are the sum of its leaves' bytes, and
with ``weights="bfloat16"`` only its floating-point leaves are cast.
"""

import math
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from nnx_introspect import serve_memory_report
from tests.llama_tiny_layers import llama_small

qwix = pytest.importorskip("qwix")

# qwix 0.1.8 reads `.value` and `nnx.VariableState`, which flax 0.12 deprecates
pytestmark = pytest.mark.filterwarnings(
    "ignore::DeprecationWarning:qwix._src.utils.flax_util"
)

KW: dict[str, Any] = {"sequences": 2, "context": 32, "prompt": 8}


@pytest.fixture(scope="module")
def quantized() -> Any:
    # a 2-layer Llama of width 32 (tests/llama_tiny_layers.py): the counts are
    # per leaf, the same for any size
    model = llama_small(nnx.Rngs(0))
    rules = [qwix.QuantizationRule(module_path=".*", weight_qtype=jnp.int8)]
    return qwix.quantize_model(
        model, qwix.PtqProvider(rules), jnp.zeros((2, 8), jnp.int32)
    )


def _bytes(model: Any, cast: Any = None) -> int:
    total = 0
    for leaf in jax.tree.leaves(nnx.state(model)):
        dtype = leaf.dtype
        if cast is not None and jnp.issubdtype(dtype, jnp.floating):
            dtype = jnp.dtype(cast)
        total += math.prod(leaf.shape) * jnp.dtype(dtype).itemsize
    return total


def test_int8_weights_are_counted_packed(quantized: Any) -> None:
    dtypes = {jnp.dtype(x.dtype).name for x in jax.tree.leaves(nnx.state(quantized))}
    assert "int8" in dtypes  # qwix did quantize the kernels
    report = serve_memory_report(
        quantized, "tp=1", weights=None, max_device_bytes="1GiB", **KW
    )
    plain = serve_memory_report(
        llama_small, "tp=1", weights=None, max_device_bytes="1GiB", **KW
    )
    assert report.decode.weights_bytes == _bytes(quantized)
    assert report.decode.weights_bytes < 0.5 * plain.decode.weights_bytes
    # XLA's arguments: the weights, the cache, the tokens and positions (int32)
    tokens = 2 * KW["sequences"] * 1 * 4
    assert report.decode.argument_bytes == (
        report.decode.weights_bytes + report.decode.kv_cache_bytes + tokens
    )
    assert report.decode.kv_cache_bytes == plain.decode.kv_cache_bytes
    assert report.fits()


def test_bf16_casts_only_the_floating_leaves(quantized: Any) -> None:
    report = serve_memory_report(quantized, "tp=1", max_device_bytes="1GiB", **KW)
    assert report.decode.weights_bytes == _bytes(quantized, jnp.bfloat16)

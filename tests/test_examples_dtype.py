"""``LlamaConfig.dtype``: bfloat16 compute, float32 storage (issue 25, item 3).

Mixed-precision trainers keep the parameters, their gradients and the
optimizer state in float32 and compute the activations and matmuls in
bfloat16. The forward's traced program shows it (every matmul reads bfloat16;
only attention's scores accumulate in float32, for the float32 softmax), the
parameters stay float32, and the compiled step holds the same arguments (the
state) with fewer temporaries (the activations).
"""

import dataclasses
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_introspect import abstract_model, count_params, step_memory_report
from nnx_introspect import examples as ex
from nnx_introspect._xla.toolchain import cuda_plugin_version

needs_plugin = pytest.mark.skipif(
    cuda_plugin_version() is None,
    reason='the CUDA PJRT plugin is not installed (pip install "nnx-introspect[gpu]")',
)

SMALL = dataclasses.replace(
    ex.LLAMA_TINY, vocab=64, d_model=32, n_layers=2, n_heads=4, d_ff=48
)
MIXED = dataclasses.replace(SMALL, dtype=jnp.bfloat16)
TOKENS = jnp.arange(32, dtype=jnp.int32).reshape(2, 16) % SMALL.vocab


def _equations(jaxpr: Any) -> Iterator[Any]:
    """Every equation of ``jaxpr``, inner jaxprs (pjit, remat, ...) included."""
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            inner = getattr(value, "jaxpr", None)
            if inner is not None:
                yield from _equations(getattr(inner, "jaxpr", inner))


def _forward_equations(cfg: ex.LlamaConfig) -> list[Any]:
    graphdef, state = nnx.split(ex.Llama(cfg, rngs=nnx.Rngs(0)))
    traced = jax.make_jaxpr(lambda s: nnx.merge(graphdef, s)(TOKENS))(state)
    return list(_equations(traced.jaxpr))


def test_bfloat16_compute_keeps_float32_parameters() -> None:
    model = ex.Llama(MIXED, rngs=nnx.Rngs(0))
    params = jax.tree.leaves(nnx.state(model, nnx.Param))
    assert len(params) == 1 + 9 * SMALL.n_layers + 2
    assert {p.dtype for p in params} == {jnp.dtype(jnp.float32)}
    assert model(TOKENS).dtype == jnp.bfloat16  # the logits: the compute dtype


def test_every_matmul_reads_bfloat16_and_only_attention_scores_are_float32() -> None:
    """The forward's ``dot_general``s: 7 kernels a layer, attention over V and
    the head produce bfloat16; the ``n_layers`` products of Q and K accumulate
    in float32 (``jax.nn.dot_product_attention``'s float32 softmax)."""
    dots = [e for e in _forward_equations(MIXED) if e.primitive.name == "dot_general"]
    assert len(dots) == 8 * SMALL.n_layers + 1 + SMALL.n_layers
    for eqn in dots:
        assert {v.aval.dtype for v in eqn.invars} == {jnp.dtype(jnp.bfloat16)}
    outputs = [eqn.outvars[0].aval for eqn in dots]
    f32 = [a for a in outputs if a.dtype == jnp.float32]
    b, s = TOKENS.shape
    assert len(f32) == SMALL.n_layers
    for aval in f32:  # the scores: (b, heads, s, s), with a group axis of 1
        assert aval.shape[:2] == (b, SMALL.n_heads) and aval.shape[-1] == s
        assert aval.size == b * SMALL.n_heads * s * s
    assert sum(a.dtype == jnp.bfloat16 for a in outputs) == 8 * SMALL.n_layers + 1


def test_norm_statistics_and_softmax_are_float32() -> None:
    """RMSNorm's mean square (``rsqrt``) and the softmax (``exp``) in float32."""
    eqns = _forward_equations(MIXED)
    for name, count in (("rsqrt", 2 * SMALL.n_layers + 1), ("exp", SMALL.n_layers)):
        avals = [e.outvars[0].aval for e in eqns if e.primitive.name == name]
        assert len(avals) == count
        assert {a.dtype for a in avals} == {jnp.dtype(jnp.float32)}


def test_the_default_computes_in_float32_as_before() -> None:
    """``dtype=None`` traces no bfloat16 at all: today's model, unchanged."""
    eqns = _forward_equations(SMALL)
    dtypes = {v.aval.dtype for e in eqns for v in e.outvars}
    assert jnp.dtype(jnp.bfloat16) not in dtypes
    assert ex.Llama(SMALL, rngs=nnx.Rngs(0))(TOKENS).dtype == jnp.float32


def test_bfloat16_logits_are_close_to_float32_ones() -> None:
    """The same parameters (same seed) give the same logits to bfloat16 rounding."""
    full = ex.Llama(SMALL, rngs=nnx.Rngs(0))(TOKENS)
    mixed = ex.Llama(MIXED, rngs=nnx.Rngs(0))(TOKENS)
    np.testing.assert_allclose(
        np.asarray(mixed, np.float32), np.asarray(full), rtol=0.05, atol=0.05
    )


def test_7b_examples_compute_in_bfloat16_and_f32_variants_in_float32() -> None:
    assert ex.LLAMA_7B.dtype == jnp.bfloat16
    assert ex.LLAMA_7B.param_dtype == jnp.float32
    assert dataclasses.replace(ex.LLAMA_7B, dtype=None) == ex.LLAMA_7B_F32
    pairs = [
        (ex.llama_7b_sharded, ex.llama_7b_sharded_f32),
        (ex.llama_7b_sharded_remat, ex.llama_7b_sharded_remat_f32),
    ]
    for mixed, full in pairs:
        a, b = abstract_model(mixed), abstract_model(full)
        assert count_params(a) == count_params(b) == 6_738_415_616
        assert jax.tree.map(lambda x: (x.shape, x.dtype), nnx.state(a)) == (
            jax.tree.map(lambda x: (x.shape, x.dtype), nnx.state(b))
        )
        assert a.lm_head.dtype == jnp.bfloat16 and b.lm_head.dtype is None
    assert abstract_model(ex.llama_7b).layers[0].q.dtype == jnp.bfloat16


STEP = dataclasses.replace(
    ex.LLAMA_TINY, vocab=512, d_model=256, n_layers=2, n_heads=4, d_ff=688
)
STEP_TOKENS = jax.ShapeDtypeStruct((16, 128), jnp.int32)


def _step(cfg: ex.LlamaConfig, mesh: str, **kwargs: Any) -> Any:
    return step_memory_report(
        ex.llama(cfg), mesh, STEP_TOKENS, loss="lm", optimizer="adamw", **kwargs
    )


def test_compiled_step_holds_the_same_state() -> None:
    """XLA:CPU, AdamW, ``lm`` loss: the arguments (parameters, optimizer state,
    tokens) and outputs are byte for byte the same in both compute dtypes.

    XLA:CPU's temporaries say little about bfloat16: it has no bfloat16 matmul
    here and computes them in float32 (float normalisation), keeping float32
    copies beside the bfloat16 ones (this config: 155.8 MB float32, 134.8 MB
    bfloat16; a wider one, ``d_model=512``, 60.9 MB against 74.0 MB). The GPU
    compile below is where the activations halve.
    """
    full = _step(STEP, "data=1")
    mixed = _step(dataclasses.replace(STEP, dtype=jnp.bfloat16), "data=1")
    assert mixed.argument_bytes == full.argument_bytes
    assert mixed.output_bytes == full.output_bytes
    assert mixed.alias_bytes == full.alias_bytes


@needs_plugin
def test_gpu_step_same_arguments_fewer_temporaries() -> None:
    """XLA:GPU (``h100-8``, ``data=8``): the same arguments, and the
    temporaries drop by a quarter (19.8 MB to 14.8 MB measured): the
    activations halve, while the float32 gradients, the attention softmax and
    the loss's float32 logits do not."""
    full = _step(STEP, "data=8", topology="h100-8")
    mixed = _step(
        dataclasses.replace(STEP, dtype=jnp.bfloat16), "data=8", topology="h100-8"
    )
    assert mixed.argument_bytes == full.argument_bytes
    assert mixed.output_bytes == full.output_bytes
    assert mixed.temp_bytes < 0.8 * full.temp_bytes, (
        f"temporaries {mixed.temp_bytes:,} (bfloat16) vs {full.temp_bytes:,} (float32)"
    )

"""``LlamaConfig.remat``: the same model and values, fewer activations kept.

The rematerialised layers compute the same forward and the same gradients
(to float32 rounding), and the step's breakdown shows what remat is for: the
activations kept for the backward pass shrink to the layers' inputs.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nnx_introspect import step_memory_report
from nnx_introspect.examples import LLAMA_TINY, Llama

CFG = dataclasses.replace(LLAMA_TINY, vocab=512, d_model=64, n_layers=2, d_ff=128)


def _pair() -> tuple[Llama, Llama]:
    plain = Llama(CFG, rngs=nnx.Rngs(0))
    remat = Llama(dataclasses.replace(CFG, remat=True), rngs=nnx.Rngs(0))
    return plain, remat


def test_same_forward_and_gradients() -> None:
    plain, remat = _pair()
    tokens = jax.random.randint(jax.random.key(1), (2, 16), 0, CFG.vocab)

    def loss(model: Llama) -> tuple[jax.Array, jax.Array]:
        logits = model(tokens)
        return jnp.mean(logits**2), logits

    # one program a model: the forward's logits and the gradients
    step = nnx.jit(nnx.grad(loss, has_aux=True))
    g_plain, f_plain = step(plain)
    g_remat, f_remat = step(remat)
    np.testing.assert_array_equal(f_plain, f_remat)
    for a, b in zip(jax.tree.leaves(g_plain), jax.tree.leaves(g_remat), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def _kept(model: Llama) -> int:
    graphdef, state = nnx.split(model)
    report = step_memory_report(
        nnx.merge(graphdef, state),
        "data=1",
        jax.ShapeDtypeStruct((4, 64), jnp.int32),
        loss="lm",
        breakdown=True,
    )
    assert report.breakdown is not None
    return sum(
        row.nbytes
        for row in report.breakdown.rows
        if row.kind == "activation kept for backward"
    )


def test_breakdown_shows_fewer_activations_kept() -> None:
    plain, remat = _pair()
    assert _kept(remat) < _kept(plain)

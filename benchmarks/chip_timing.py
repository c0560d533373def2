"""An independent timing of two calibration programs, written by hand.

``PYTHONPATH=src:. python benchmarks/chip_timing.py`` on the machine with the
chip: the 336M calibration Llama's AdamW training step (4 x 1024, next-token
cross-entropy, ``nnx.Optimizer`` + ``nnx.jit``) and its decode step (32
sequences, a 2,048-position bf16 cache, bf16 weights), each jitted here with
none of the library's lowering, one warm-up and 5 timed runs, the state fed
back. ``benchmarks/calibrate.py`` compares the medians with the report's
``measure=`` rows of the same programs.
"""

import json
import os
import statistics
import time
from typing import Any

import jax
import jax.numpy as jnp
import optax
from benchmarks.calibrate import llama_336m
from flax import nnx

from nnx_introspect.examples import llama_tiny

MODEL = llama_tiny if os.environ.get("CHIP_TIMING_TINY") else llama_336m
"""The calibration model (``CHIP_TIMING_TINY=1``: the tiny one, to try it here)."""


def _timed(step: Any, state: Any, runs: int = 5) -> list[float]:
    seconds = []
    for run in range(runs + 1):
        began = time.perf_counter()
        state = step(*state)
        jax.block_until_ready(state)
        if run:
            seconds.append(time.perf_counter() - began)
    return seconds


def train_step() -> list[float]:
    """The AdamW step at 4 x 1024, as a trainer writes it."""
    model = MODEL(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-4), wrt=nnx.Param)
    tokens = jnp.zeros((4, 1024), jnp.int32)

    @nnx.jit(donate_argnums=(0, 1))
    def step(model: Any, optimizer: Any, tokens: Any) -> Any:
        def loss(model: Any) -> Any:
            logits = model(tokens).astype(jnp.float32)
            return optax.softmax_cross_entropy_with_integer_labels(
                logits[:, :-1], tokens[:, 1:]
            ).mean()

        grads = nnx.grad(loss)(model)
        optimizer.update(model, grads)
        return model, optimizer, tokens

    return _timed(step, (model, optimizer, tokens))


def decode_step() -> list[float]:
    """One decode step of 32 sequences over a 2,048-position cache."""
    model = MODEL(nnx.Rngs(0))
    graphdef, params = nnx.split(model)
    params = jax.tree.map(lambda p: p.astype(jnp.bfloat16), params)
    cache = model.init_cache(32, 2048, jnp.bfloat16)
    tokens = jnp.zeros((32, 1), jnp.int32)

    def step(params: Any, cache: Any, tokens: Any) -> Any:
        logits, cache = nnx.merge(graphdef, params)(tokens, None, cache, None)
        return params, cache, jnp.argmax(logits[:, -1:], -1).astype(jnp.int32)

    step = jax.jit(step, donate_argnums=(1,))
    return _timed(step, (params, cache, tokens))


if __name__ == "__main__":
    for name, fn in (("train 4x1024", train_step), ("decode 32x2048", decode_step)):
        seconds = fn()
        print(
            json.dumps(
                {
                    "case": name,
                    "seconds": seconds,
                    "median_seconds": statistics.median(seconds),
                }
            )
        )

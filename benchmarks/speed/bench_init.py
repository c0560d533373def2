"""Seed sweeps: ``fresh_init_forward`` eager against ``compiled=True``, in one run.

Checks ``--seeds`` seeds of a small Llama (the build dominates: every seed builds
a new model), times both paths side by side, counts how often the factory was
traced, and confirms every compiled output is bitwise equal to the eager one.

    python benchmarks/speed/bench_init.py [--seeds 100]
"""

import os

# The CPU is all this measures; with libtpu installed, JAX would probe for a TPU.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse
import time

import jax.numpy as jnp
import numpy as np
from flax import nnx

import nnx_introspect as ni
from nnx_introspect.examples import Llama, LlamaConfig

CFG = LlamaConfig(vocab=512, d_model=64, n_layers=4, n_heads=4, d_ff=172)
TRACES = [0]


def factory(rngs: nnx.Rngs) -> Llama:
    TRACES[0] += 1
    return Llama(CFG, rngs=rngs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=100)
    args = parser.parse_args()
    tokens = jnp.arange(16, dtype=jnp.int32).reshape(2, 8)

    start = time.perf_counter()
    eager = [
        np.asarray(ni.fresh_init_forward(factory, s, tokens)) for s in range(args.seeds)
    ]
    t_eager = time.perf_counter() - start
    eager_calls = TRACES[0]

    TRACES[0] = 0
    start = time.perf_counter()
    compiled = [
        np.asarray(ni.fresh_init_forward(factory, s, tokens, compiled=True))
        for s in range(args.seeds)
    ]
    t_compiled = time.perf_counter() - start
    equal = all(
        a.tobytes() == b.tobytes() for a, b in zip(eager, compiled, strict=True)
    )

    print(f"seeds: {args.seeds}")
    print(f"eager:    {t_eager:7.2f} s  (factory ran {eager_calls} times)")
    print(f"compiled: {t_compiled:7.2f} s  (factory traced {TRACES[0]} time(s))")
    print(f"ratio eager / compiled: {t_eager / t_compiled:.1f}x")
    print(f"bitwise equal on every seed: {equal}")


if __name__ == "__main__":
    main()

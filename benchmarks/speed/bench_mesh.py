"""Mesh planning cost against the plain summary, for the 7B example, in one run.

Targets: planning Llama-2-7B shapes on a 2,048-device abstract mesh costs at most
1.5x ``summarize`` of the same abstract model (issue 4), and planning AdamW state
and gradients too costs at most 2x the plan without them (issue 9). All are
timed side by side (best of ``--repeat`` interleaved rounds, after one warm-up
each) on the same abstract model, whose build is timed once separately. The
last line times the abstract ``nnx.Optimizer`` the optimizer plan used to build,
for the before/after figure.

    python benchmarks/speed/bench_mesh.py [--repeat 15]
"""

import os

# The CPU is all this measures; with libtpu installed, JAX would probe for a TPU.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import optax
from flax import nnx

import nnx_introspect as ni
from nnx_introspect.examples import LLAMA_7B, llama

MESH = "fsdp=8,tp=256"
RULES = [("norm/scale$", ())]


def best_interleaved(
    fns: dict[str, Callable[[], Any]], repeat: int
) -> dict[str, float]:
    """Best time of each function, the functions taking turns in every round.

    Interleaving keeps the comparison fair on a loaded machine: a burst of load
    slows one round of every candidate, not all runs of one.
    """
    for fn in fns.values():
        fn()  # warm-up: imports, JAX caches
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: min(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()

    start = time.perf_counter()
    model = ni.abstract_model(llama(dataclasses.replace(LLAMA_7B, partitioned=True)))
    build = time.perf_counter() - start
    tx = optax.adamw(1e-3)

    def old_optimizer() -> None:  # what the plan did before: build an abstract one
        with nnx.use_eager_sharding(False):
            nnx.eval_shape(lambda m: nnx.Optimizer(m, tx, wrt=nnx.Param), model)

    t = best_interleaved(
        {
            "summary": lambda: ni.summarize(model),
            "plan": lambda: ni.mesh_config_report(model, MESH, rules=RULES),
            "train": lambda: ni.mesh_config_report(
                model, MESH, rules=RULES, optimizer=tx
            ),
            "old": old_optimizer,
        },
        args.repeat,
    )
    summary, plan, train, old = t["summary"], t["plan"], t["train"], t["old"]
    report = ni.mesh_config_report(model, MESH, rules=RULES, optimizer=tx)
    print(f"abstract 7B build (once):        {build * 1e3:8.1f} ms")
    print(f"summarize:                       {summary * 1e3:8.1f} ms")
    print(f"mesh_config_report (2048 dev):   {plan * 1e3:8.1f} ms")
    print(f"  + adamw state and gradients:   {train * 1e3:8.1f} ms")
    print(
        f"leaves planned: {len(report.leaves)} model, "
        f"{len(report.optimizer_leaves)} optimizer, {len(report.gradient_leaves)} grads"
    )
    print(f"ratio plan / summary:            {plan / summary:8.2f}x  (target <= 1.5x)")
    print(f"ratio plan+optimizer / summary:  {train / summary:8.2f}x")
    print(f"ratio plan+optimizer / plan:     {train / plan:8.2f}x  (target <= 2x)")
    print(
        f"before (abstract nnx.Optimizer):  {(plan + old) / plan:8.2f}x  "
        f"(plan + {old * 1e3:.1f} ms to build it)"
    )


if __name__ == "__main__":
    main()

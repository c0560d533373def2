"""Mesh planning cost against the plain summary, for the 7B example, in one run.

Targets: planning Llama-2-7B shapes on a 2,048-device abstract mesh costs at most
1.5x ``summarize`` of the same abstract model (issue 4), and planning AdamW state
and gradients too costs at most 2x the plan without them (issue 9). All are
timed side by side (best of ``--repeat`` runs, after one warm-up each) on the
same abstract model, whose build is timed once separately.

    python benchmarks/bench_mesh.py [--repeat 7]
"""

import argparse
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import optax

import nnx_introspect as ni
from nnx_introspect.examples import LLAMA_7B, llama

MESH = "fsdp=8,tp=256"
RULES = [("norm/scale$", ())]


def best(fn: Callable[[], Any], repeat: int) -> float:
    fn()  # warm-up: imports, JAX caches
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    start = time.perf_counter()
    model = ni.abstract_model(llama(dataclasses.replace(LLAMA_7B, partitioned=True)))
    build = time.perf_counter() - start

    summary = best(lambda: ni.summarize(model), args.repeat)
    plan = best(lambda: ni.mesh_config_report(model, MESH, rules=RULES), args.repeat)
    tx = optax.adamw(1e-3)
    train = best(
        lambda: ni.mesh_config_report(model, MESH, rules=RULES, optimizer=tx),
        args.repeat,
    )
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


if __name__ == "__main__":
    main()

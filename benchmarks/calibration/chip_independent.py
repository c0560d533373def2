"""An independent timing of one calibration program: ``measure=``'s own check.

``PYTHONPATH=src:. python benchmarks/calibration/chip_independent.py OUT.json`` on the
machine with one v5e chip: the 336M calibration Llama's decode step (32
sequences, a 2,048-slot bf16 cache), lowered as ``serve_memory_report``
lowers it and compiled once; then, twice over, the library's runner
(``run_compiled``, what ``measure=`` calls) and a plain loop written here
(inputs by ``jax.device_put``, the cache fed back by hand) time the same
executable, 5 runs after a warm-up each.
"""

import json
import statistics
import sys
import time
from typing import Any

import jax
import numpy as np
from benchmarks.calibration.calibrate import llama_336m

from nnx_introspect._serve.programs import (
    lower_program,
    program_args,
    programs,
    serve_inputs,
    serve_mesh,
)
from nnx_introspect._serve.spec import ServeOptions, ServeSpec
from nnx_introspect._xla.run import run_compiled


def independent(compiled: Any, args: Any, runs: int = 5) -> list[float]:
    """``runs`` timed runs of ``compiled`` after one warm-up, the cache fed back."""
    leaves = jax.tree.leaves(args)
    values = [jax.device_put(np.zeros(a.shape, a.dtype), a.sharding) for a in leaves]
    tree = jax.tree.structure(args)
    weights = len(jax.tree.leaves(args[0]))
    seconds = []
    for run in range(runs + 1):
        began = time.perf_counter()
        out = compiled(*jax.tree.unflatten(tree, values))
        jax.block_until_ready(out)
        if run:
            seconds.append(time.perf_counter() - began)
        cache = jax.tree.leaves(out[1])  # (logits, cache): the cache fed back
        values[weights : weights + len(cache)] = cache
    return seconds


def main() -> None:
    spec = ServeSpec(llama_336m, "tp=1", 32, 2048, 1024, 8, None, None, ServeOptions())
    mesh, trace = serve_mesh(spec)
    inputs = serve_inputs(spec, mesh)
    args = program_args(inputs, spec, mesh, "decode")
    jitted = programs(inputs, spec)["decode"]
    compiled = lower_program(jitted, args, mesh, trace, spec).compile()
    found = {}
    for round_ in range(2):
        library = run_compiled(compiled, 5)["seconds"]
        ours = independent(compiled, args)
        found[f"round{round_}"] = {
            "library": library,
            "independent": ours,
            "library_median": statistics.median(library),
            "independent_median": statistics.median(ours),
        }
        print(json.dumps(found[f"round{round_}"]))
    with open(sys.argv[1], "w") as out:
        json.dump(found, out)


if __name__ == "__main__":
    main()

"""XLA's side of the step: compile a lowered step, read its memory and cost analyses."""

import importlib.metadata
import math
import time
from typing import Any

from jax.sharding import Mesh

from nnx_introspect._step.topology import _libtpu_version

# LLVM's optimisation of the generated machine code dominates large XLA:CPU
# compiles (a 2,048-device Llama step spends minutes in LLVM loop analysis) and
# changes nothing the report reads: buffer assignment (memory_analysis) and
# cost_analysis are computed on the optimised HLO, before LLVM runs.
_CPU_COMPILER_OPTIONS: dict[str, Any] = {
    "xla_backend_optimization_level": 0,
    "xla_llvm_disable_expensive_passes": True,
}


def compile_lowered(lowered: Any, mesh: Mesh, start: float) -> dict[str, Any]:
    """Compile ``lowered`` for ``mesh``'s devices; XLA's numbers as plain values.

    ``start`` is the ``time.perf_counter()`` at which lowering began: the
    reported compile time covers lowering and compiling.
    """
    device = mesh.devices.flat[0]
    options = _CPU_COMPILER_OPTIONS if device.platform == "cpu" else None
    compiled = lowered.compile(compiler_options=options)
    seconds = time.perf_counter() - start
    memory = compiled.memory_analysis()
    if memory is None:  # pragma: no cover - every XLA backend we know gives one
        raise RuntimeError("XLA gave no memory analysis for the compiled step.")
    cost = compiled.cost_analysis()
    if isinstance(cost, list | tuple):  # pragma: no cover - older jax
        cost = cost[0] if cost else None
    flops = float(cost.get("flops", math.nan)) if isinstance(cost, dict) else math.nan
    return {
        "argument_bytes": int(memory.argument_size_in_bytes),
        "output_bytes": int(memory.output_size_in_bytes),
        "temp_bytes": int(memory.temp_size_in_bytes),
        "alias_bytes": int(memory.alias_size_in_bytes),
        "flops": flops if math.isfinite(flops) else None,
        "backend": str(device.platform),
        "device_kind": str(device.device_kind),
        "compile_seconds": seconds,
    }


def compiler_name(backend: str, device_kind: str) -> str:
    if backend == "tpu":
        return f"XLA:TPU (libtpu {_libtpu_version()}, {device_kind})"
    return f"XLA:{backend.upper()} (jaxlib {importlib.metadata.version('jaxlib')})"

"""Activation memory of the sharded 7B example: XLA:GPU's figure against the formula.

Measures (issue 17, item 4) the AdamW training step of the float32 7B example
``llama_7b_sharded_f32`` (all 32 layers; the tests compile 4 of them;
next-token loss, T=2048) on ``h100-8`` (``fsdp=2,tp=4``) at B=4, 8 and 16 and on
``h100-2048`` (``fsdp=256,tp=8``) at B=256, then the bfloat16 example
``llama_7b_sharded`` (float32 parameters, bfloat16 compute) on ``h100-8`` at B=8
and on ``h100-2048`` at B=256 against the same formula with 2-byte activations
(``expected_bf16_temp_bytes`` of ``tests/test_examples_dtype_activations.py``),
each compiled deviceless by XLA:GPU in a child process. Per step:

* **compiled temporaries**: the report's ``temp_bytes``, XLA's temporaries per
  device (saved activations, the loss's logits and their gradient, the
  FSDP-gathered weights, gradients, optimizer temporaries);
* **formula**: the activation count of Korthikanti et al. 2022 (sequence
  parallelism on, their eq. 4) adapted to the example (float32, no dropout,
  RMSNorm, SwiGLU, materialised attention scores, the LM loss) plus the
  FSDP-gathered weights: ``expected_temp_bytes`` of
  ``tests/test_examples_activations.py``, whose docstring lists every adapted
  term;
* **ratio**: compiled / formula (the tests hold float32 B=4 and B=256, and
  bfloat16 B=256, within 0.6-1.6);
* **constraints**: the sharding constraints in the lowered step (forward and
  transposed);
* **verdict**: the report's verdict line.

From B=8 on ``h100-8`` the float32 step reaches the memory XLA:GPU's scheduler
rematerialises towards, or the device's: the figure is then what
rematerialisation left of the step (or the compiler's required bytes), and the
ratio says less about the example's activations.

    python benchmarks/speed/bench_activations.py
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import functools
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from nnx_introspect import step_memory_report
from nnx_introspect._render.table import format_bytes

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.test_examples_activations import LAYERS, SEQ, expected_temp_bytes
from tests.test_examples_dtype_activations import expected_bf16_temp_bytes

# the whole 32-layer 7B (the tests compile 4 of its layers, for CI's time)
TARGET = "nnx_introspect.examples:llama_7b_sharded_f32"
BF16_TARGET = "nnx_introspect.examples:llama_7b_sharded"

F32_CASES = (
    ("h100-8", {"fsdp": 2, "tp": 4}, 4),
    ("h100-8", {"fsdp": 2, "tp": 4}, 8),
    ("h100-8", {"fsdp": 2, "tp": 4}, 16),
    ("h100-2048", {"fsdp": 256, "tp": 8}, 256),
)
BF16_CASES = (
    ("h100-8", {"fsdp": 2, "tp": 4}, 8),
    ("h100-2048", {"fsdp": 256, "tp": 8}, 256),
)
F32_FORMULA = functools.partial(expected_temp_bytes, layers=LAYERS)
BF16_FORMULA = functools.partial(expected_bf16_temp_bytes, layers=LAYERS)
CASES = tuple((TARGET, F32_FORMULA, *case) for case in F32_CASES) + tuple(
    (BF16_TARGET, BF16_FORMULA, *case) for case in BF16_CASES
)


def main() -> None:
    print(
        "| Step (AdamW, T=2048) | compiled temporaries | formula "
        "| ratio | constraints | verdict |"
    )
    print("| :--- | ---: | ---: | ---: | ---: | :--- |")
    for target, formula, topology, mesh, batch in CASES:
        start = time.perf_counter()
        report = step_memory_report(
            target,
            mesh,
            jax.ShapeDtypeStruct((batch, SEQ), jnp.int32),
            loss="lm",
            optimizer="adamw",
            topology=topology,
        )
        wall = time.perf_counter() - start
        expected = formula(batch, mesh["fsdp"], mesh["tp"])
        axes = ",".join(f"{a}={n}" for a, n in mesh.items())
        name = target.rsplit(":", 1)[1]
        print(
            f"| {name} {topology} ({axes}) B={batch} ({wall:.0f} s) "
            f"| {format_bytes(report.temp_bytes)} "
            f"| {format_bytes(round(expected))} "
            f"| {report.temp_bytes / expected:.2f} "
            f"| {report.sharding_constraints} "
            f"| {report.verdict} |"
        )


if __name__ == "__main__":
    main()

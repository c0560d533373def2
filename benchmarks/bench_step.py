"""Step memory reports: correctness ratios, speed and memory, side by side in one run.

Measures (issue 9), on 8 virtual CPU devices set before JAX starts:

* ``llama_tiny`` (fsdp/tp annotations, AdamW, next-token loss, B=8, T=128) on
  ``fsdp=4,tp=2``: the report's wall time (target <= 10 s), its FLOPs x devices
  against the ``6 x params x tokens`` training estimate (target 0.8-1.25);
* doubling the batch: ``temp_bytes(B=16) / temp_bytes(B=8)`` (target ~2);
* forward-only temporaries against training temporaries (target < 1);
* with libtpu installed: the same step on XLA:TPU for ``v5e-4`` against XLA:CPU;
* the 7B example (``llama_7b_sharded``, B=256, T=2048) on a 2,048-device mesh
  ``fsdp=256,tp=8`` compiled in a child process: wall time (target <= 120 s),
  the child's compile time, peak RSS of this process (target <= 2 GiB: nothing
  is allocated) and of the child, FLOPs ratio.

    python benchmarks/bench_step.py [--skip-7b] [--7b-mesh fsdp=256,tp=8]
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()

import argparse
import dataclasses
import math
import resource
import time

import jax
import jax.numpy as jnp

from nnx_introspect._render import format_bytes
from nnx_introspect._step import (
    StepMemoryReport,
    _libtpu_version,
    step_memory_report,
)
from nnx_introspect.examples import LLAMA_TINY, llama

TINY = llama(dataclasses.replace(LLAMA_TINY, partitioned=True))


def rss_gib(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 2**20  # KiB on Linux


def tokens(b: int, t: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct((b, t), jnp.int32)


def row(name: str, value: str, target: str = "") -> None:
    print(f"| {name} | {value} | {target} |")


def six_nt(report: StepMemoryReport, b: int, t: int) -> float:
    """FLOPs x devices over the ``6 x params x tokens`` training estimate."""
    return report.total_flops / (6 * report.plan.n_params * b * t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--skip-7b", action="store_true")
    parser.add_argument("--7b-mesh", dest="mesh_7b", default="fsdp=256,tp=8")
    parser.add_argument("--7b-batch", dest="batch_7b", type=int, default=256)
    args = parser.parse_args()

    print("| Measurement | Result | Target |")
    print("| :--- | ---: | ---: |")
    kwargs = {"loss": "lm", "optimizer": "adamw"}
    step_memory_report(TINY, "fsdp=4,tp=2", tokens(8, 16), **kwargs)  # warm-up
    start = time.perf_counter()
    train = step_memory_report(TINY, "fsdp=4,tp=2", tokens(8, 128), **kwargs)
    wall = time.perf_counter() - start
    row(
        "llama_tiny AdamW step report, 8 devices (compile)",
        f"{wall:.1f} s ({train.compile_seconds:.1f} s)",
        "<= 10 s",
    )
    row(
        "flops x devices / (6 N T), llama_tiny T=128",
        f"{six_nt(train, 8, 128):.3f}",
        "0.8-1.25",
    )
    double = step_memory_report(TINY, "fsdp=4,tp=2", tokens(16, 128), **kwargs)
    row(
        "temp_bytes B=16 / B=8",
        f"{format_bytes(double.temp_bytes)} / {format_bytes(train.temp_bytes)} = "
        f"{double.temp_bytes / train.temp_bytes:.2f}",
        "~2",
    )
    forward = step_memory_report(TINY, "fsdp=4,tp=2", tokens(8, 128), loss=None)
    row(
        "forward temps / training temps",
        f"{format_bytes(forward.temp_bytes)} / {format_bytes(train.temp_bytes)} = "
        f"{forward.temp_bytes / train.temp_bytes:.2f}",
        "< 1",
    )
    row("llama_tiny peak per device (XLA:CPU)", format_bytes(train.peak_bytes))
    if _libtpu_version() is not None:
        start = time.perf_counter()
        tpu = step_memory_report(
            TINY, "fsdp=2,tp=2", tokens(8, 128), topology="v5e-4", **kwargs
        )
        tpu_wall = time.perf_counter() - start
        row(
            "XLA:TPU v5e-4 temps / XLA:CPU 8-device temps",
            f"{format_bytes(tpu.temp_bytes)} / {format_bytes(train.temp_bytes)}",
        )
        row(
            "XLA:TPU v5e-4 report (compile)",
            f"{tpu_wall:.1f} s ({tpu.compile_seconds:.1f} s)",
        )
        row("XLA:TPU v5e-4 peak per chip", format_bytes(tpu.peak_bytes))
    else:
        row("XLA:TPU", "skipped: libtpu not installed")
    row("peak RSS of this process so far", f"{rss_gib(resource.RUSAGE_SELF):.2f} GiB")
    if args.skip_7b:
        return
    start = time.perf_counter()
    try:
        big = step_memory_report(
            "nnx_introspect.examples:llama_7b_sharded",
            args.mesh_7b,
            tokens(args.batch_7b, 2048),
            **kwargs,
        )
    except RuntimeError as error:  # the child compile timed out or crashed
        row(
            f"7B AdamW step, {args.mesh_7b} in a child",
            f"failed after {time.perf_counter() - start:.0f} s: {error}",
            "<= 120 s",
        )
        row(
            "7B peak RSS: this process / the child",
            f"{rss_gib(resource.RUSAGE_SELF):.2f} GiB / "
            f"{rss_gib(resource.RUSAGE_CHILDREN):.2f} GiB",
            "<= 2 GiB (this process)",
        )
        return
    wall = time.perf_counter() - start
    row(
        f"7B AdamW step, {big.num_devices} devices in a child: wall (child compile)",
        f"{wall:.1f} s ({big.compile_seconds:.1f} s)",
        "<= 120 s",
    )
    row(
        "7B peak RSS: this process / the child",
        f"{rss_gib(resource.RUSAGE_SELF):.2f} GiB / "
        f"{rss_gib(resource.RUSAGE_CHILDREN):.2f} GiB",
        "<= 2 GiB (this process)",
    )
    row(
        "7B flops x devices / (6 N T)",
        f"{six_nt(big, args.batch_7b, 2048):.3f}",
        "0.8-1.25",
    )
    row(
        "7B per device: arguments / temporaries / peak (XLA:CPU)",
        f"{format_bytes(big.argument_bytes)} / {format_bytes(big.temp_bytes)} / "
        f"{format_bytes(big.peak_bytes)}",
    )
    row("7B plan bytes per device", format_bytes(big.plan.bytes_per_device))
    assert math.isfinite(big.flops)


if __name__ == "__main__":
    main()

"""Step memory reports: correctness ratios, speed and memory, side by side in one run.

Measures (issue 9), on 8 virtual CPU devices set before JAX starts:

* ``llama_tiny`` (fsdp/tp annotations, AdamW, next-token loss, B=8, T=128) on
  ``fsdp=4,tp=2``: the report's wall time (target <= 10 s), its FLOPs x devices
  against the ``6 x params x tokens`` training estimate (target 0.8-1.25);
* doubling the batch: ``temp_bytes(B=16) / temp_bytes(B=8)`` (target ~2);
* forward-only temporaries against training temporaries (target < 1);
* with libtpu installed: the same step on XLA:TPU for ``v5e-4`` against XLA:CPU;
* the llama_tiny report by name on each backend: XLA:CPU (8 devices), XLA:TPU
  ``v5e-8`` and XLA:GPU ``h100-8`` (each compiled in a child; skipped without
  the ``tpu`` or ``gpu`` extra);
* the 7B example (``llama_7b_sharded``, B=256, T=2048, AdamW) on 256 and 2,048
  H100s and on v5e-256 and the 2,048-chip ``v5p-4096``: wall time (target
  <= 120 s), peak RSS of this process (target <= 2 GiB) and of the largest
  child, the verdict;
* a ``max_batch`` search (compiles, wall time) when the package has one.

    python benchmarks/bench_step.py [--skip-7b]
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
    parse_topology,
    step_memory_report,
)
from nnx_introspect._step.topology import check_compiler
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
    tiny_per_backend()
    if args.skip_7b:
        return
    for topology, mesh in (
        ("h100-256", "fsdp=32,tp=8"),
        ("h100-2048", "fsdp=256,tp=8"),
        ("v5e-256", "fsdp=32,tp=8"),
        ("v5p-4096", "fsdp=256,tp=8"),
    ):
        big_on(topology, mesh, args.batch_7b)
    search()


def _available(topology: str) -> str | None:
    """Why ``topology`` cannot compile here, or ``None``."""
    try:
        check_compiler(topology, (("d", parse_topology(topology)[1]),))
    except ImportError as error:
        return f"skipped: {str(error).split('Install')[0].strip()}"
    return None


def tiny_per_backend() -> None:
    """The llama_tiny AdamW report by name, on each backend: wall time."""
    name = "nnx_introspect.examples:llama_tiny_sharded"
    kwargs = {"loss": "lm", "optimizer": "adamw"}
    for topology in (None, "v5e-8", "h100-8"):
        skip = None if topology is None else _available(topology)
        label = f"llama_tiny report by name on {topology or 'XLA:CPU, 8 devices'}"
        if skip:
            row(label, skip)
            continue
        start = time.perf_counter()
        report = step_memory_report(
            name, "fsdp=4,tp=2", tokens(8, 128), topology=topology, **kwargs
        )
        row(
            label + ": wall (compile), peak",
            f"{time.perf_counter() - start:.1f} s ({report.compile_seconds:.1f} s), "
            f"{format_bytes(report.peak_bytes)}",
        )


def big_on(topology: str, mesh: str, batch: int) -> None:
    """The 7B example's AdamW step on a named topology, compiled in a child."""
    label = f"7B (llama_7b_sharded) B={batch} on {topology} ({mesh})"
    skip = _available(topology)
    if skip:
        row(label, skip)
        return
    start = time.perf_counter()
    report = step_memory_report(
        "nnx_introspect.examples:llama_7b_sharded",
        mesh,
        tokens(batch, 2048),
        loss="lm",
        optimizer="adamw",
        topology=topology,
    )
    row(
        label + ": wall (compile)",
        f"{time.perf_counter() - start:.1f} s ({report.compile_seconds:.1f} s)",
        "<= 120 s",
    )
    row(
        "  peak RSS: this process / largest child",
        f"{rss_gib(resource.RUSAGE_SELF):.2f} GiB / "
        f"{rss_gib(resource.RUSAGE_CHILDREN):.2f} GiB",
        "<= 2 GiB (this process)",
    )
    row(f"  verdict (fits={report.fits()})", report.verdict.split(";")[0])
    if math.isfinite(report.flops):
        row("  flops x devices / (6 N T)", f"{six_nt(report, batch, 2048):.3f}")


def search() -> None:
    """A max_batch search, when the package has one."""
    try:
        from nnx_introspect._step.search import max_batch
    except ImportError:
        row("max_batch search", "skipped: nnx_introspect._step.search.max_batch absent")
        return
    topology = "h100-8" if _available("h100-8") is None else None
    budget = "2GiB" if topology else "256MiB"
    start = time.perf_counter()
    found = max_batch(
        "nnx_introspect.examples:llama_tiny_sharded",
        "fsdp=4,tp=2",
        tokens(8, 128),
        loss="lm",
        optimizer="adamw",
        topology=topology,
        max_device_bytes=budget,
    )
    row(
        f"max_batch, llama_tiny AdamW T=128 on {topology or 'XLA:CPU'}, "
        f"budget {budget}: largest batch, compiles, wall",
        f"{found.best}, {found.compiles} compiles, {time.perf_counter() - start:.1f} s",
    )
    if found.best is not None:
        assert found.report is not None and found.report.fits()


if __name__ == "__main__":
    main()

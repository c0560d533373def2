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
* a ``max_batch`` search (compiles, wall time) when the package has one;
* ``--breakdown-cost`` (issue 18): the 7B report on 2,048 H100s and on
  ``v5p-4096`` without and with ``breakdown=True``, each in a fresh process,
  alternated twice (the faster of each kept): wall time (target: the
  breakdown adds <= 25%) and that process's peak RSS (target: <= 0.5 GiB
  more);
* ``--sweep`` (issue 19): ``compare_meshes`` of the 7B on ``h100-256``
  (B=256, AdamW, ``meshes="auto"``) with 1 and 2 local jobs and on a Dask
  ``LocalCluster`` of 2 workers: wall time (target <= 6 min with 2 jobs), the
  speed-up, and whether the rows agree;
* ``--fit`` (issue 25): ``fit_step`` on the float32 7B
  (``llama_7b_sharded_f32``, ``fsdp=2,tp=4``, B=8x2048, AdamW, ``h100-8``,
  60.60 GiB against a 59.33 GiB budget) with 2 local jobs: compiles (target
  <= 12), wall time (target <= 10 min), the chosen row and the change, and
  the chosen configuration reported alone by ``step_memory_report`` with the
  same options (its peak equals the row's).

    python benchmarks/speed/bench_step.py [--skip-7b] [--breakdown-cost] [--sweep]
        [--fit]
    python benchmarks/speed/bench_step.py --only --fit    # only the flagged rows
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
from typing import Any

import jax
import jax.numpy as jnp

from nnx_introspect import StepMemoryReport, step_memory_report
from nnx_introspect._render.table import format_bytes
from nnx_introspect._step import libtpu_version, parse_topology
from nnx_introspect._xla.toolchain import check_compiler
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
    parser.add_argument("--breakdown-cost", action="store_true")
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--fit", action="store_true")
    parser.add_argument("--only", action="store_true", help="only the flagged rows")
    args = parser.parse_args()
    if args.only:
        print("| Measurement | Result | Target |")
        print("| :--- | ---: | ---: |")
        if args.breakdown_cost:
            breakdown_cost()
        if args.sweep:
            sweep()
        if args.fit:
            fit()
        return

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
    if libtpu_version() is not None:
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
    if args.breakdown_cost:
        breakdown_cost()
    if args.sweep:
        sweep()
    if args.fit:
        fit()


_ONE_REPORT = """
import json, resource, sys, time
import jax, jax.numpy as jnp
from nnx_introspect import step_memory_report
topology, mesh, breakdown = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
start = time.perf_counter()
report = step_memory_report(
    "nnx_introspect.examples:llama_7b_sharded", mesh,
    jax.ShapeDtypeStruct((256, 2048), jnp.int32), loss="lm", optimizer="adamw",
    topology=topology, breakdown=breakdown,
)
print(json.dumps({
    "wall": time.perf_counter() - start,
    "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    "rows": None if report.breakdown is None else len(report.breakdown.rows),
    "warnings": [w for w in report.warnings if "breakdown" in w],
}))
"""


def breakdown_cost() -> None:
    """The breakdown's cost on the 7B at 2,048 devices, each run a fresh process."""
    import json
    import subprocess
    import sys

    for topology in ("h100-2048", "v5p-4096"):
        skip = _available(topology)
        if skip:
            row(f"breakdown cost on {topology}", skip)
            continue
        runs: dict[str, list[dict[str, Any]]] = {"0": [], "1": []}
        for breakdown in ("0", "1", "0", "1"):  # alternated: noise hits both
            done = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    _ONE_REPORT,
                    topology,
                    "fsdp=256,tp=8",
                    breakdown,
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode:
                tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
                row(f"breakdown cost on {topology}", f"failed: {tail[0][:150]}")
                break
            runs[breakdown].append(json.loads(done.stdout.strip().splitlines()[-1]))
        if len(runs["1"]) < 2:
            continue
        plain = min(runs["0"], key=lambda r: float(r["wall"]))
        full = min(runs["1"], key=lambda r: float(r["wall"]))
        row(
            f"7B B=256 on {topology}: wall without / with breakdown",
            f"{plain['wall']:.1f} s / {full['wall']:.1f} s = "
            f"{full['wall'] / plain['wall']:.2f}x ({full['rows']} buffers)",
            "<= 1.25x",
        )
        row(
            "  peak RSS of the calling process: without / with",
            f"{plain['rss']:.2f} GiB / {full['rss']:.2f} GiB "
            f"(+{full['rss'] - plain['rss']:.2f} GiB)",
            "<= +0.5 GiB",
        )
        if full["warnings"]:
            row("  breakdown warnings", "; ".join(full["warnings"])[:200])


def sweep() -> None:
    """compare_meshes('auto') of the 7B on h100-256: 1 and 2 jobs, Dask of 2."""
    import concurrent.futures

    from nnx_introspect import compare_meshes

    skip = _available("h100-256")
    if skip:
        row("mesh sweep on h100-256", skip)
        return
    common = {
        "loss": "lm",
        "optimizer": "adamw",
        "topology": "h100-256",
    }
    target = "nnx_introspect.examples:llama_7b_sharded"
    results = {}
    for jobs in (2, 1):
        start = time.perf_counter()
        results[jobs] = compare_meshes(
            target, "auto", tokens(256, 2048), max_workers=jobs, **common
        )
        results[jobs] = (results[jobs], time.perf_counter() - start)
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        dask = None
    else:
        with (
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True) as cluster,
            Client(cluster) as client,
        ):
            executor = client.get_executor()
            assert isinstance(executor, concurrent.futures.Executor)
            start = time.perf_counter()
            found = compare_meshes(
                target, "auto", tokens(256, 2048), executor=executor, **common
            )
            dask = (found, time.perf_counter() - start)
    two, two_wall = results[2]
    one, one_wall = results[1]
    out = os.environ.get("BENCH_SWEEP_OUT")
    if out:  # the 2-job comparison whole, for the how-to
        with open(out + ".txt", "w") as f:
            f.write(str(two) + "\n")
        with open(out + ".md", "w") as f:
            f.write(two.to_markdown())
        with open(out + ".json", "w") as f:
            f.write(two.to_json())
    compiled = sum(1 for c in two.candidates if c.report is not None)
    row(
        "7B mesh sweep (auto) on h100-256, B=256: candidates, compiled",
        f"{len(two.candidates)}, {compiled}",
    )
    row("  wall with 2 jobs", f"{two_wall:.0f} s", "<= 360 s")
    row(
        "  wall with 1 job / with 2 jobs",
        f"{one_wall:.0f} s / {two_wall:.0f} s = {one_wall / two_wall:.2f}x",
        "~2x",
    )

    def key(c: object) -> tuple[object, ...]:
        return (c.name, c.outcome, c.peak_bytes)  # type: ignore[attr-defined]

    same = [key(c) for c in one.candidates] == [key(c) for c in two.candidates]
    row("  rows identical, 1 job vs 2 jobs", str(same), "True")
    if dask is None:
        row("  Dask LocalCluster", "skipped: distributed not installed")
    else:
        found, wall = dask
        same = [key(c) for c in found.candidates] == [key(c) for c in two.candidates]
        row("  Dask LocalCluster(2 workers): wall", f"{wall:.0f} s")
        row("  rows identical, Dask vs local pool", str(same), "True")
    row("  best", two.verdict.split(";")[0][:160])


def fit() -> None:
    """fit_step on the float32 7B on h100-8 (60.60 GiB of 59.33), 2 local jobs."""
    from nnx_introspect import fit_step

    skip = _available("h100-8")
    label = "fit_step, 7B float32 (llama_7b_sharded_f32) B=8 on h100-8 (fsdp=2,tp=4)"
    if skip:
        row(label, skip)
        return
    target = "nnx_introspect.examples:llama_7b_sharded_f32"
    common: dict[str, Any] = {"loss": "lm", "optimizer": "adamw", "topology": "h100-8"}
    start = time.perf_counter()
    found = fit_step(target, "fsdp=2,tp=4", tokens(8, 2048), max_workers=2, **common)
    wall = time.perf_counter() - start
    row(label + ": compiles", str(found.compiles), "<= 12")
    row("  wall with 2 jobs", f"{wall:.0f} s", "<= 600 s")
    row("  rows: compiled / not compiled", _fit_counts(found))
    chosen = found.chosen
    if chosen is None:
        row("  chosen", f"none fits: {found.verdict[:160]}")
        return
    low, high = chosen.seconds or (math.nan, math.nan)
    row(
        "  chosen",
        f"{chosen.options}, {format_bytes(chosen.peak_bytes or 0)}, "
        f"{low:.3f}-{high:.3f} s",
    )
    row("  equals", "; ".join(r.options for r in found.equals) or "none")
    row("  change", str(found.change)[:200])
    start = time.perf_counter()
    alone = step_memory_report(
        target,
        "fsdp=2,tp=4",
        tokens(8, 2048),
        remat=dict(chosen.remat),
        microbatches=chosen.microbatches,
        **common,
    )
    row(
        "  chosen alone (step_memory_report): peak, fits, equals the row, wall",
        f"{format_bytes(alone.peak_bytes)}, {alone.fits()}, "
        f"{alone.peak_bytes == chosen.peak_bytes}, "
        f"{time.perf_counter() - start:.0f} s",
        "the row's peak, True, True",
    )


def _fit_counts(found: Any) -> str:
    compiled = sum(1 for r in found.rows if r.status != "not compiled")
    return f"{compiled} / {len(found.rows) - compiled}"


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
        from nnx_introspect import max_batch
    except ImportError:
        row("max_batch search", "skipped: nnx_introspect.max_batch absent")
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

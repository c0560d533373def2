"""Deviceless ``h200-1`` figures held against a real H200's allocator peak.

Three modes, one set of cases (the step each case compiles is built by the same
code as ``step_memory_report``'s, so both sides compile one program):

``python benchmarks/outside/h200_check.py deviceless OUT.json``
    Here, with no GPU: ``step_memory_report(..., topology="h200-1")`` for each
    case (XLA:GPU through the CUDA plugin, no device), its figures as JSON.

``python benchmarks/outside/h200_check.py measure OUT_DIR``
    On a machine with one H200 (the device tool): each case in a fresh process
    (so ``peak_bytes_in_use`` is that case's alone): the step lowered as the
    report lowers it, compiled for the real GPU (``memory_analysis()``), its
    arguments put on the device (zeros: the values do not change the bytes),
    run once, then five more times for a median step time; the device's
    ``memory_stats()`` before and after. Then, where the installed CUDA plugin
    can make compile-only devices, the same step compiled deviceless by that
    JAX (so version drift and deviceless-vs-real separate).

``python benchmarks/outside/h200_check.py compare DEVICELESS.json MEASURED.json``
    The table for benchmarks/README.md.
"""

import contextlib
import json
import os
import subprocess
import sys
import time
from typing import Any

CASES: dict[str, dict[str, Any]] = {
    # name: target, batch; every case: loss "lm", AdamW, one device
    "llama_tiny": {
        "target": "nnx_introspect.examples:llama_tiny",
        "batch": (8, 512),
    },
    "llama_1b_b2": {
        "target": "benchmarks.outside.h200_check:llama_1b",
        "batch": (2, 2048),
    },
    "llama_1b_b4": {
        "target": "benchmarks.outside.h200_check:llama_1b",
        "batch": (4, 2048),
    },
    # ours: needs 114.9 GB of the 113.5 GB JAX's allocator takes: the edge
    "llama_1b_b8": {
        "target": "benchmarks.outside.h200_check:llama_1b",
        "batch": (8, 2048),
    },
}


def llama_1b(rngs: Any) -> Any:
    """A Llama-3.2-1B-sized decoder (no GQA): 1.24B float32 params, bf16 compute."""
    import jax.numpy as jnp

    from nnx_introspect.examples import Llama, LlamaConfig

    cfg = LlamaConfig(
        vocab=32000,
        d_model=2048,
        n_layers=16,
        n_heads=32,
        d_ff=8192,
        dtype=jnp.bfloat16,
    )
    return Llama(cfg, rngs=rngs)


def _batch(case: dict[str, Any]) -> Any:
    import jax
    import jax.numpy as jnp

    return jax.ShapeDtypeStruct(case["batch"], jnp.int32)


def _spec(case: dict[str, Any], topology: str | None = None) -> Any:
    from nnx_introspect import StepSpec

    return StepSpec(
        case["target"],
        {"fsdp": 1},
        _batch(case),
        loss="lm",
        optimizer="adamw",
        topology=topology,
    )


def deviceless(out: str) -> None:
    """Our ``h200-1`` report for every case (run here, no GPU)."""
    from nnx_introspect import step_memory_report

    rows = {}
    for name, case in CASES.items():
        start = time.perf_counter()
        r = step_memory_report(
            case["target"],
            {"fsdp": 1},
            _batch(case),
            loss="lm",
            optimizer="adamw",
            topology="h200-1",
        )
        roof = r.roofline
        rows[name] = {
            "argument_bytes": r.argument_bytes,
            "output_bytes": r.output_bytes,
            "temp_bytes": r.temp_bytes,
            "alias_bytes": r.alias_bytes,
            "peak_bytes": r.peak_bytes,
            "xla_peak_bytes": r.xla_peak_bytes,
            "budget_bytes": r.max_device_bytes,
            "device_bytes": r.device_memory_bytes,
            "fits": r.fits(),
            "flops": r.flops,
            "time_low_s": None if roof is None else roof.low_seconds,
            "time_high_s": None if roof is None else roof.high_seconds,
            "versions": r.compiler,
            "wall_s": round(time.perf_counter() - start, 1),
        }
        print(name, json.dumps(rows[name]), flush=True)
    with open(out, "w") as f:
        json.dump(rows, f, indent=1)


def _lowered(case: dict[str, Any], mesh: Any, trace_devices: Any = None) -> Any:
    """The step lowered exactly as ``step_memory_report`` lowers it."""
    from nnx_introspect._step.compile import _lower
    from nnx_introspect._step.measure import plan_step

    spec = _spec(case)
    plan = plan_step(spec)
    lowered, seen, _ = _lower(spec.request(), mesh, plan, trace_devices)
    return lowered, seen


def _analysis(compiled: Any) -> dict[str, Any]:
    ma = compiled.memory_analysis()
    keys = (
        "argument_size_in_bytes",
        "output_size_in_bytes",
        "temp_size_in_bytes",
        "alias_size_in_bytes",
        "generated_code_size_in_bytes",
        "peak_memory_in_bytes",
    )
    return {k: getattr(ma, k, None) for k in keys}


def one_case(name: str) -> dict[str, Any]:
    """Compile and run one case on this process's first device."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh

    case = CASES[name]
    dev = jax.devices()[0]
    mesh = Mesh(np.array([dev]), ("fsdp",))
    row: dict[str, Any] = {"device": dev.device_kind, "platform": dev.platform}
    row["stats_start"] = dev.memory_stats()
    start = time.perf_counter()
    lowered, seen = _lowered(case, mesh)
    row["traced_platform"] = seen
    row["lower_s"] = round(time.perf_counter() - start, 2)
    start = time.perf_counter()
    compiled = lowered.compile()
    row["compile_s"] = round(time.perf_counter() - start, 2)
    row["real_compile"] = _analysis(compiled)
    infos = jax.tree.leaves(lowered.args_info)
    shardings = jax.tree.leaves(compiled.input_shardings)
    arrays = [
        jax.device_put(np.zeros(i.shape, i.dtype), s)
        for i, s in zip(infos, shardings, strict=True)
    ]
    jax.block_until_ready(arrays)
    row["stats_args"] = dev.memory_stats()
    args, kwargs = jax.tree.unflatten(lowered.in_tree, arrays)
    start = time.perf_counter()
    out = compiled(*args, **kwargs)
    jax.block_until_ready(out)
    row["first_step_s"] = round(time.perf_counter() - start, 3)
    row["stats_step"] = dev.memory_stats()
    try:  # the state back in: five more steps for a time
        times = []
        batch = args[-1]
        for _ in range(5):
            nxt = (out[2], out[3], out[4], out[5], batch)
            start = time.perf_counter()
            out = compiled(*nxt)
            jax.block_until_ready(out)
            times.append(time.perf_counter() - start)
        row["step_s"] = sorted(times)
        row["loss"] = float(jnp.asarray(out[0]))
    except Exception as error:  # timing is a bonus; the memory is the point
        row["step_error"] = f"{type(error).__name__}: {error}"[:300]
    row["stats_end"] = dev.memory_stats()
    return row


def one_case_deviceless(name: str) -> dict[str, Any]:
    """The same step compiled for a compile-only H200 by this process's JAX."""
    import numpy as np
    from jax.experimental import topologies
    from jax.sharding import Mesh

    from nnx_introspect._accelerators.topology import resolve_topology

    topo = resolve_topology("h200-1")
    desc = topologies.get_topology_desc(
        platform="cuda",
        target_config=topo.target_config,
        topology=topo.compiler_topology,
    )
    mesh = Mesh(np.array(desc.devices[:1]), ("fsdp",))
    start = time.perf_counter()
    lowered, seen = _lowered(CASES[name], mesh, desc.devices)
    compiled = lowered.compile()
    return {
        "deviceless_compile": _analysis(compiled),
        "traced_platform": seen,
        "wall_s": round(time.perf_counter() - start, 2),
    }


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {}
    for pkg in (
        "jax",
        "jaxlib",
        "flax",
        "optax",
        "jax-cuda13-plugin",
        "jax-cuda12-plugin",
    ):
        with contextlib.suppress(md.PackageNotFoundError):
            out[pkg] = md.version(pkg)
    return out


def _child(mode: str, name: str, env: dict[str, str], timeout: float) -> Any:
    try:
        done = subprocess.run(
            [sys.executable, __file__, mode, name],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": done.stderr.strip().splitlines()[-3:]}
    return json.loads(lines[-1])


def measure(out_dir: str, budget_s: float = 420.0) -> None:
    """Every case on the real device, then deviceless with this JAX; JSON out."""
    deadline = time.monotonic() + budget_s
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(
        [os.getcwd(), os.path.join(os.getcwd(), "src"), env.get("PYTHONPATH", "")]
    )
    result: dict[str, Any] = {"versions": _versions(), "cases": {}}
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv"],
        capture_output=True,
        text=True,
        check=False,
    )
    result["nvidia_smi"] = smi.stdout.strip()
    path = os.path.join(out_dir, "h200_measured.json")
    for name in CASES:
        left = deadline - time.monotonic()
        if left < 30:
            result["cases"][name] = {"error": "skipped: out of time"}
            continue
        result["cases"][name] = _child("case", name, env, left)
        print(name, json.dumps(result["cases"][name])[:2000], flush=True)
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
    cpu_env = dict(env, JAX_PLATFORMS="cpu")
    for name in CASES:
        left = deadline - time.monotonic()
        if left < 30:
            continue
        row = _child("case-deviceless", name, cpu_env, left)
        result["cases"][name]["same_jax_deviceless"] = row
        print(name, "deviceless", json.dumps(row)[:1000], flush=True)
        with open(path, "w") as f:
            json.dump(result, f, indent=1)


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def compare(deviceless_path: str, measured_path: str) -> None:
    """The markdown rows: our deviceless figure against the real peak."""
    with open(deviceless_path) as f:
        ours = json.load(f)
    with open(measured_path) as f:
        real = json.load(f)
    print(
        "| case | ours: peak (XLA's) | real compile: peak | allocator peak"
        " | ours / allocator |"
    )
    print("| :--- | ---: | ---: | ---: | ---: |")
    for name, row in real["cases"].items():
        if "stats_step" not in row or name not in ours:
            print(f"| {name} | - | - | {row.get('error', '-')} | - |")
            continue
        mine = ours[name]
        rc = row["real_compile"]
        real_peak = (
            rc["argument_size_in_bytes"]
            + rc["output_size_in_bytes"]
            + rc["temp_size_in_bytes"]
            - rc["alias_size_in_bytes"]
        )
        alloc = row["stats_step"]["peak_bytes_in_use"]
        print(
            f"| {name} | {_gib(mine['peak_bytes'])} ({_gib(mine['xla_peak_bytes'])}) "
            f"| {_gib(real_peak)} | {_gib(alloc)} | {mine['peak_bytes'] / alloc:.3f} |"
        )


def main() -> None:
    mode, *rest = sys.argv[1:]
    if mode == "deviceless":
        deviceless(rest[0])
    elif mode == "measure":
        measure(rest[0])
    elif mode == "case":
        print(json.dumps(one_case(rest[0])))
    elif mode == "case-deviceless":
        print(json.dumps(one_case_deviceless(rest[0])))
    elif mode == "compare":
        compare(rest[0], rest[1])
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()

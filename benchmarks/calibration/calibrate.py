"""Calibration: every estimate this project prints, held against a real TPU v5e chip.

Three steps, each a subcommand:

``python benchmarks/calibration/calibrate.py chip OUT.jsonl`` (on a machine with one v5e
chip): each case in turn (one process: the chip opened once), through the library's own
``measure=`` (``step_memory_report`` / ``serve_memory_report``): the program
compiled on the chip (its memory analysis), one warm-up and 5 timed runs, the
report's estimate beside them; the cases past a search's answer are compiled
and run to see the chip refuse them.

The ``rl`` cases are one GRPO step (:func:`nnx_introspect.rl_memory_report`,
colocated on the chip), each phase's program compiled and run in turn: the
table's rows are its phases, each phase's peak its program's plus what the
other roles keep resident, the decode's time one step's median times the
completion.

``python benchmarks/calibration/calibrate.py predict OUT.jsonl`` (anywhere, no TPU): the
same programs compiled deviceless for ``topology="v5e-1"`` with the libtpu
installed here (run it once with the chip image's libtpu 0.0.42.1 and once
with the ``tpu`` extra's).

``python benchmarks/calibration/calibrate.py table CHIP.jsonl SAME.jsonl OTHER.jsonl``:
the markdown table of ``benchmarks/README.md``: per program whether the
deviceless compile with the chip's libtpu (SAME) equals the chip's to the
byte, how far the other libtpu's (OTHER) temporaries drift, the report's peak
and verdict, what the chip did, the estimate and the measured time.

Run as ``PYTHONPATH=src:. python benchmarks/calibration/calibrate.py ...`` from
the repository root (the cases name their model
``benchmarks.calibration.calibrate:llama_336m``).
"""

import dataclasses
import json
import os
import sys
import time
from typing import Any

import jax.numpy as jnp
from flax import nnx

from nnx_introspect.examples import Llama, LlamaConfig

LLAMA_336M = LlamaConfig(
    vocab=32000,
    d_model=1024,
    n_layers=24,
    n_heads=16,
    d_ff=2816,
    n_kv_heads=4,
    dtype=jnp.bfloat16,
)
"""336,118,784 float32 parameters, GQA 16/4, bf16 compute: a model one v5e
chip trains (AdamW, 4 x 1024) and serves."""


def llama_336m(rngs: nnx.Rngs) -> Llama:
    """The calibration model."""
    return Llama(LLAMA_336M, rngs=rngs)


def llama_336m_critic(rngs: nnx.Rngs) -> Llama:
    """The calibration model with a value head: the PPO case's critic.

    303,351,808 float32 parameters: the head is ``1024 x 1``, not ``1024 x
    32000``.
    """
    return Llama(dataclasses.replace(LLAMA_336M, value_head=True), rngs=rngs)


TARGET = "benchmarks.calibration.calibrate:llama_336m"
TINY = "nnx_introspect.examples:llama_tiny"

# name -> (kind, arguments); "step": (target, batch, options); "serve": kwargs
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "serve 336M 32x2048 prompt 1024 by 8": (
        "serve",
        {"sequences": 32, "context": 2048, "prompt": 1024, "prefill_sequences": 8},
    ),
    "serve 336M 128x4096 prompt 512 by 8": (
        "serve",
        {"sequences": 128, "context": 4096, "prompt": 512, "prefill_sequences": 8},
    ),
    "step 336M 4x1024": ("step", {"target": TARGET, "batch": (4, 1024)}),
    "step tiny 8x128": ("step", {"target": TINY, "batch": (8, 128)}),
    "step 336M 8x1024 2 microbatches": (
        "step",
        {"target": TARGET, "batch": (8, 1024), "microbatches": 2},
    ),
    "step 336M 16x1024 remat": (
        "step",
        {"target": TARGET, "batch": (16, 1024), "remat": "LlamaLayer"},
    ),
    "rl 336M GRPO 2x4 256+256": (
        "rl",
        {"batch": 2, "generations": 4, "prompt": 256, "completion": 256},
    ),
    "rl 336M GRPO 2x4 256+256 LoRA 16": (
        "rl",
        {"batch": 2, "generations": 4, "prompt": 256, "completion": 256, "lora": 16},
    ),
    "rl 336M PPO 8x1 256+256 critic 336M": (
        "rl",
        {
            "batch": 8,
            "generations": 1,
            "prompt": 256,
            "completion": 256,
            "critic": "benchmarks.calibration.calibrate:llama_336m_critic",
        },
    ),
}
"""The calibration cases. The edges of ``max_batch`` and ``max_sequences``
(their answer and one step more) are added by :func:`edge_cases` from the
deviceless searches' answers."""

RUNS = 5

BUDGET = round(15.75 * 2**30)
"""The HBM XLA:TPU lets a program use on a v5e chip: the reports' budget."""


def edge_cases(batch: int, sequences: int) -> dict[str, tuple[str, dict[str, Any]]]:
    """Both sides of ``max_batch`` (seq 1024) and ``max_sequences`` (context 4096)."""
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for b in (batch, batch + 1):
        out[f"step 336M {b}x1024 (max_batch {batch})"] = (
            "step",
            {"target": TARGET, "batch": (b, 1024)},
        )
    for n in (sequences, sequences + 1):
        out[f"serve 336M {n}x4096 (max_sequences {sequences})"] = (
            "serve",
            {"sequences": n, "context": 4096, "prompt": 256, "prefill_sequences": 1},
        )
    return out


def _step(args: dict[str, Any], topology: str | None, measure: int | None) -> Any:
    import jax

    from nnx_introspect import step_memory_report

    b, t = args["batch"]
    options = {k: v for k, v in args.items() if k in ("microbatches", "remat") and v}
    return step_memory_report(
        args["target"],
        {"fsdp": 1},
        jax.ShapeDtypeStruct((b, t), jnp.int32),
        loss="lm",
        optimizer="adamw",
        topology=topology,
        measure=measure,
        cache=False,
        **options,
    )


def _serve(args: dict[str, Any], topology: str | None, measure: int | None) -> Any:
    from nnx_introspect import serve_memory_report

    return serve_memory_report(
        TARGET, "tp=1", topology=topology, measure=measure, cache=False, **args
    )


def _rl(args: dict[str, Any], topology: str | None, measure: int | None) -> Any:
    from nnx_introspect import rl_memory_report

    return rl_memory_report(
        TARGET, "fsdp=1", topology=topology, measure=measure, cache=False, **args
    )


def _rl_figures(report: Any) -> dict[str, Any]:
    """Each phase's program (its compile and run) and the phase's peak."""
    programs = {}
    for phase in report.phases:
        if phase.name in ("prefill", "decode"):
            found = _figures(report.programs["rollout"])["programs"][phase.name]
        else:
            found = _figures(report.programs[phase.name])["programs"]["step"]
        found["estimate"] = None if phase.seconds is None else list(phase.seconds)
        found["steps"] = phase.steps
        found["phase_peak_bytes"] = phase.peak_bytes
        found["resident"] = dict(phase.resident)
        programs[phase.name] = found
    return {
        "programs": programs,
        "fits": report.fits(),
        "peak_bytes": report.peak_bytes,
        "peak_phase": report.peak_phase.name,
        "step_seconds": report.step_seconds,
        "measured_step_seconds": report.measured_step_seconds,
        "compiler": None,
    }


def _figures(report: Any) -> dict[str, Any]:
    """What the table compares, from a step or serving report's JSON."""
    if hasattr(report, "phases"):  # an RL step
        return _rl_figures(report)
    data = report.json_data()
    if "prefill" not in data:  # a training step
        roof = data["roofline"] or {}
        return {
            "programs": {
                "step": {
                    "argument_bytes": data["argument_bytes"],
                    "output_bytes": data["output_bytes"],
                    "temp_bytes": data["temp_bytes"],
                    "alias_bytes": data["alias_bytes"],
                    "peak_bytes": data["peak_bytes"],
                    "out_of_memory": data["out_of_memory"],
                    "compiler_message": data["compiler_message"],
                    "flops": data["flops"],
                    "bytes_accessed": data["bytes_accessed"],
                    "estimate": [roof.get("low_seconds"), roof.get("high_seconds")],
                    "measured": data.get("measured"),
                }
            },
            "fits": data["fits"],
            "compiler": data["compiler"],
        }
    time_ = data["time"] or {}
    programs = {}
    for name, key in (
        ("prefill", "time_to_first_token"),
        ("decode", "seconds_per_token"),
    ):
        p = data[name]
        programs[name] = {
            "argument_bytes": p["argument_bytes"],
            "output_bytes": p["output_bytes"],
            "temp_bytes": p["temp_bytes"],
            "alias_bytes": p["alias_bytes"],
            "peak_bytes": p["peak_bytes"],
            "out_of_memory": p["out_of_memory"],
            "flops": p["flops"],
            "bytes_accessed": p["bytes_accessed"],
            "floor_bytes": p["weights_bytes"] + p["kv_cache_bytes"],
            "hbm_bytes": None if p["traffic"] is None else p["traffic"]["hbm_bytes"],
            "estimate": time_.get(key),
            "measured": p.get("measured"),
        }
    return {"programs": programs, "fits": data["fits"], "compiler": None}


def run_case(name: str, topology: str | None, measure: int | None) -> dict[str, Any]:
    """One case, in this process: its report's figures (or the error)."""
    cases = CASES | edge_cases(*json.loads(os.environ.get("CAL_EDGES", "[0, 0]")))
    kind, args = cases[name]
    began = time.perf_counter()
    try:
        report = {"step": _step, "serve": _serve, "rl": _rl}[kind](
            args, topology, measure
        )
        out = _figures(report)
    except Exception as error:  # a refusal or a failure: the answer itself
        out = {"error": f"{type(error).__name__}: {' '.join(str(error).split())[:400]}"}
    out |= {"case": name, "kind": kind, "seconds": time.perf_counter() - began}
    from nnx_introspect._xla.toolchain import libtpu_version

    out["libtpu"] = libtpu_version()
    return out


def _all(out: str, mode: str) -> None:
    """Every case, one after another, in this process (the chip opened once)."""
    cases = CASES | edge_cases(*json.loads(os.environ.get("CAL_EDGES", "[0, 0]")))
    only = os.environ.get("CAL_ONLY")
    topology = "v5e-1" if mode == "predict" else None
    measure = RUNS if mode == "chip" else None
    for name in cases:
        if only and only not in name:
            continue
        if "(max_" in name and os.environ.get("CAL_EDGES") is None:
            continue
        found = run_case(name, topology, measure)
        with open(out, "a") as f:
            f.write(json.dumps(found) + "\n")
        print(json.dumps(found)[:300], flush=True)


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.3g} s"


_ANALYSIS = ("argument_bytes", "output_bytes", "temp_bytes", "alias_bytes")


def _load(path: str) -> dict[str, dict[str, Any]]:
    with open(path) as f:
        return {d["case"]: d for d in map(json.loads, f)}


def _ratio(median: float, low: float, high: float) -> str:
    if low <= median <= high:
        return f"inside ({median / low:.2f}x low)"
    if median > high:
        return f"{median / high:.2f}x high"
    return f"{median / low:.2f}x low"


def _row(
    name: str,
    program: str,
    chip: dict[str, Any],
    same: dict[str, Any] | None,
    other: dict[str, Any] | None,
    verdict: str,
) -> str:
    """One table row: the compile against the chip's, then time against time."""
    if same is None:
        equal = "-"
    else:
        equal = "equal" if all(same[k] == chip[k] for k in _ANALYSIS) else "differs"
        if chip["out_of_memory"] and same["out_of_memory"]:
            equal = "both refused"
    drift = "-"
    if other is not None and same is not None and not same["out_of_memory"]:
        drift = (
            f"{other['temp_bytes'] / 2**20:,.1f} vs "
            f"{same['temp_bytes'] / 2**20:,.1f} MiB"
        )
    shown = same or chip
    # an RL phase: its program's peak plus the other roles resident meanwhile
    peak = f"{shown.get('phase_peak_bytes', shown['peak_bytes']) / 2**30:.2f} GiB"
    if "phase_peak_bytes" in shown:
        peak += f" (program {shown['peak_bytes'] / 2**30:.2f} GiB)"
    peak += f" {verdict}"
    measured = chip.get("measured") or {}
    median = measured.get("median_seconds")
    if median is not None:  # an RL decode phase is `steps` runs of one step
        median *= chip.get("steps", 1)
    if chip["out_of_memory"]:
        ran = "refused at compile"
    elif measured.get("error"):
        ran = f"failed to run: {measured['error'][:80]}"
    else:
        ran = _seconds(median)
    est = (same or chip).get("estimate")
    span = (
        "-" if not est or est[0] is None else f"{_seconds(est[0])}-{_seconds(est[1])}"
    )
    ratio = "" if median is None or span == "-" else _ratio(median, *est)
    return (
        f"| {name} | {program} | {equal} | {drift} | {peak} | {ran} | {span} "
        f"| {ratio} |"
    )


def _table(chip: str, same: str, other: str) -> str:
    """The calibration table: the chip's runs against both libtpus' predictions."""
    real, pred, drift = _load(chip), _load(same), _load(other)
    lines = [
        "| case | program | memory analysis, deviceless vs the chip's compile "
        "(same libtpu) | temporaries: the tpu extra's libtpu (0.0.52) vs the chip's "
        "| report's peak and verdict | on the chip (median of 5) | estimate "
        "| measured / estimate |",
        "|" + " --- |" * 8,
    ]
    for name, found in real.items():
        for program, fig in found["programs"].items():
            mine = pred.get(name, {}).get("programs", {}).get(program)
            theirs = drift.get(name, {}).get("programs", {}).get(program)
            verdict = ""
            if mine is not None:  # this program (an RL phase) against the budget
                peak = mine.get("phase_peak_bytes", mine["peak_bytes"])
                fits = not mine["out_of_memory"] and peak <= BUDGET
                verdict = "(fits)" if fits else "(does not fit)"
                verdict = "(refused)" if mine["out_of_memory"] else verdict
            lines.append(_row(name, program, fig, mine, theirs, verdict))
    return "\n".join(lines)


def main() -> None:
    command = sys.argv[1]
    if command in ("chip", "predict"):
        _all(sys.argv[2], command)
    elif command == "table":
        print(_table(sys.argv[2], sys.argv[3], sys.argv[4]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()

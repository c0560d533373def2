"""Fit the time model's constants on half of the chip table; check them on the other.

``python benchmarks/calibration/timefit.py table OUT.json CHIP.jsonl:HLO_DIR ...``
  joins the chip's measured programs (``timecal.py chip`` records, or the old
  ``calibrate.py`` records with the HLO of their deviceless twin) with each
  program's work (:func:`nnx_introspect._xla.program_work` of its optimized
  HLO) into one table, each row with its family and its half.

``python benchmarks/calibration/timefit.py fit TABLE.json...``
  pools the tables' programs and splits them in two halves (each family's
  programs, sorted by name, alternate), fits every variant of the model
  (which constants are free) on the calibration half (least squares of
  ``log(estimate / measured)``), prints each variant's error on both halves
  (and in 4-fold cross-validation inside the calibration half, which picks
  the variant: the smallest median error, a tie within half a point going
  to the least biased by kind), and the chosen constants as the Python of
  :data:`nnx_introspect._roofline.timing.CONSTANTS`.

``python benchmarks/calibration/timefit.py pins OUT.json PROFILE.jsonl.gz:HLO_DIR``
  the device's rates measured instruction by instruction in the chip's
  profile (``timecal.py chip`` with ``TIMECAL_PROFILE=1``): seconds per cycle
  of XLA:TPU's estimate, the on-chip vector fusions' seconds per cycle, the
  on-chip copies' bytes per second and the Mosaic grouped-matmul kernels'
  share of the dense peak. The variant "device rates from the profile" takes
  them as they are and fits the rest.

``python benchmarks/calibration/timefit.py report OUT.json TABLE.json...
[--blind=BLIND.json]``
  the accuracy page's tables: per program its measured time, the new
  estimate (the library's own :func:`~nnx_introspect._roofline.timing.program_time`
  with the constants it ships), the old range and its half (the blind
  programs, run after the constants were fixed, are a half of their own);
  per family and half the median, worst and mean signed error, the old
  roofline's beside.

Run from the repository root as
``PYTHONPATH=src:. python benchmarks/calibration/timefit.py``.
"""

import dataclasses
import gzip
import json
import math
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import minimize

from nnx_introspect._accelerators import hardware_for
from nnx_introspect._roofline.timing import (
    CONSTANTS,
    TimeConstants,
    program_time,
)
from nnx_introspect._xla import Work, program_work, work_from_json
from nnx_introspect._xla.costs import matmul_dtype
from nnx_introspect._xla.hlo import parse_module
from nnx_introspect._xla.hlo.work import instruction_work

HARDWARE = hardware_for("v5e-1")


# --- the table ----------------------------------------------------------------


def _read_hlo(path: Path) -> str:
    if path.suffix == ".gz":
        with gzip.open(path, "rt") as f:
            return f.read()
    return path.read_text()


def _split(rows: list[dict[str, Any]]) -> None:
    """Alternate each family's programs, sorted by name, between the halves."""
    by_family: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_family.setdefault(row["family"], []).append(row)
    for members in by_family.values():
        members.sort(key=lambda r: r["name"])
        for i, row in enumerate(members):
            row["half"] = "calibration" if i % 2 == 0 else "held-out"


def _records(path: str) -> dict[str, dict[str, Any]]:
    return {d["case"]: d for d in map(json.loads, Path(path).read_text().splitlines())}


def _row(
    case: str, program: str, measured: dict[str, Any], hlo: Path, source: str
) -> dict[str, Any] | None:
    """One program's table row; ``None`` when it did not run."""
    median = (measured.get("measured") or {}).get("median_seconds")
    if median is None or measured.get("out_of_memory"):
        return None
    text = _read_hlo(hlo)
    work = program_work(parse_module(text))
    family = measured.get("family") or program
    if family in ("train", "critic train") and case.startswith("rl "):
        family = "rl-train"
    return {
        "name": f"{case} / {program}",
        "case": case,
        "program": program,
        "family": FAMILIES.get(family, family),
        "source": source,
        "measured": median,
        "old": measured.get("estimate_per_token") or measured.get("estimate"),
        "steps": measured.get("steps"),
        "matmul_dtype": _dtype(matmul_dtype(text)),
        "work": work.json_data(),
    }


FAMILIES = {"step": "train", "critic train": "rl-train", "values": "reference"}
"""The table's program kinds: train, rl-train, prefill, decode, reference."""


def _dtype(found: str | None) -> str:
    return {"bf16": "bf16", "f32": "f32", "s8": "int8", "f8e4m3fn": "fp8"}.get(
        found or "bf16", "bf16"
    )


def table(out: str, sources: list[str]) -> None:
    """Join the measured programs with their work; write the table.

    Each source is ``chip:RECORDS:HLO_DIR`` (``timecal.py chip`` records, the
    HLO captured on the chip) or ``old:CHIP:PREDICT:HLO_DIR`` (the chip's
    ``calibrate.py`` records, the HLO of their deviceless twin compiled with
    the chip's libtpu, ``timecal.py predict --old``).
    """
    rows: list[dict[str, Any]] = []
    for source in sources:
        kind, *paths = source.split(":")
        if kind == "chip":
            records, hlo_dir = paths
            for case, record in _records(records).items():
                for program, found in record.get("programs", {}).items():
                    if not found.get("hlo"):
                        continue
                    row = _row(
                        case, program, found, Path(hlo_dir) / found["hlo"], source
                    )
                    rows += [row] if row else []
        elif kind == "old":
            chip, predict, hlo_dir = paths
            twins = _records(predict)
            for case, record in _records(chip).items():
                for program, found in record.get("programs", {}).items():
                    twin = twins.get(case, {}).get("programs", {}).get(program)
                    if not twin or not twin.get("hlo"):
                        continue
                    memory = ("argument_bytes", "output_bytes", "temp_bytes")
                    if any(twin.get(k) != found.get(k) for k in memory):
                        print(
                            f"skipped {case} / {program}: its deviceless twin "
                            "is not the program the chip ran (memory differs)"
                        )
                        continue
                    if "steps" in found and program == "decode":
                        found = found | {
                            "estimate_per_token": [
                                e / found["steps"] for e in found["estimate"]
                            ]
                        }
                    row = _row(
                        case, program, found, Path(hlo_dir) / twin["hlo"], source
                    )
                    rows += [row] if row else []
        else:
            raise SystemExit(f"unknown source {source!r}")
    _split(rows)
    Path(out).write_text(json.dumps(rows))
    print(f"{len(rows)} programs -> {out}")


# --- the fit ------------------------------------------------------------------

BASE = ("matmul_fraction", "hbm_fraction", "launch_seconds", "uncosted")
UPDATE = (
    "hbm_fraction",
    "cycles",
    "launch_seconds",
    "program",
    "uncosted",
    "cap",
    "update",
)
"""``tpu-v5e/3``'s free constants; the later variants add to them."""
PROFILED_FREE = (
    "hbm_fraction",
    "launch_seconds",
    "program",
    "uncosted",
    "cap",
    "update",
    "buffer",
)
"""What the variants whose device rates the profile measures still fit."""
VARIANTS: dict[str, tuple[str, ...]] = {
    "data sheet (nothing fitted)": (),
    "+ launch": BASE,
    "+ launch + vector": (*BASE, "vector"),
    "+ launch + cycles + program": (*BASE, "cycles", "program"),
    "+ launch + cycles + async + program": (*BASE, "cycles", "async", "program"),
    "+ launch + cycles + cap + program": (*BASE, "cycles", "cap", "program"),
    "+ an update rate (tpu-v5e/3)": UPDATE,
    "+ on-chip cycles": (*UPDATE, "onchip"),
    "+ a cost per argument and result buffer": (*UPDATE, "onchip", "buffer"),
    "+ on-chip copies at a rate of their own": (*UPDATE, "onchip", "buffer", "copy"),
    "device rates from the profile, the rest fitted (tpu-v5e/6)": PROFILED_FREE,
    "+ the asynchronous copies' waits from the profile (tpu-v5e/7)": PROFILED_FREE,
}
"""Which constants each variant fits (the rest: the data sheet's, or none)."""

PROFILED = frozenset(
    {
        "device rates from the profile, the rest fitted (tpu-v5e/6)",
        "+ the asynchronous copies' waits from the profile (tpu-v5e/7)",
    }
)
"""The variants whose device rates are :func:`pins`'s, measured per instruction."""

ASYNC_PINNED = frozenset(
    {"+ the asynchronous copies' waits from the profile (tpu-v5e/7)"}
)
"""The variants of :data:`PROFILED` that also take the copies' waits from it."""

ASYNC_DONE = frozenset({"copy-done", "slice-done", "copy-to-host-done"})
"""The halves of asynchronous copies a program waits at (``-start``'s pair)."""

PINS = Path(__file__).parent / "data" / "timecal-pins.json"
"""The rates :func:`pins` measured (``timefit.py pins``), read by the variants
of :data:`PROFILED`."""

START = {
    # the previous constants (tpu-v5e/2) where they exist: the fit starts there
    "matmul_fraction": 1.0,
    "hbm_fraction": 0.8055,
    "launch_seconds": 1.444e-6,
    "vector": 2e12,
    "cycles": 8.092e-10,
    "async": 0.2,
    "uncosted": 1.062e10,
    "floor": 3e-6,
    "program": 1.271e-3,
    "cap": 1.004,
    "update": 0.2,
    "onchip": 0.2,
    "buffer": 2.85e-6,
    "copy": 7.7e11,
}


def constants(
    free: tuple[str, ...],
    theta: np.ndarray,
    pinned: dict[str, float] | None = None,
    **fixed: Any,
) -> TimeConstants:
    """The constants with ``free`` taken from ``exp(theta)``, ``pinned`` as given."""
    # clipped: a constant no program of a fold constrains may drift, never to 0
    values = dict(zip(free, np.exp(np.clip(theta, -600.0, 600.0)), strict=True))
    values |= pinned or {}
    return TimeConstants(
        version=fixed.get("version", "fit"),
        calibrated=True,
        matmul_fraction=min(1.0, float(values.get("matmul_fraction", 1.0))),
        vector_flops_per_second=float(values["vector"]) if "vector" in values else None,
        hbm_fraction=min(1.0, float(values.get("hbm_fraction", 1.0))),
        seconds_per_cycle=float(values["cycles"]) if "cycles" in values else None,
        launch_seconds=float(values.get("launch_seconds", 0.0)),
        async_share=min(1.0, float(values.get("async", 0.0))),
        floor_seconds=float(values.get("floor", 0.0)),
        program_seconds=float(values.get("program", 0.0)),
        cycles_cap=float(values["cap"]) if "cap" in values else None,
        update_fraction=min(1.0, float(values.get("update", 1.0))),
        onchip_cycles_fraction=min(1.0, float(values.get("onchip", 1.0))),
        buffer_seconds=float(values.get("buffer", 0.0)),
        onchip_bytes_per_second=float(values["copy"]) if "copy" in values else None,
        uncosted_flops_per_second=float(values["uncosted"])
        if "uncosted" in values
        else None,
        error=fixed.get("error"),
        programs=fixed.get("programs", 0),
        held_out=fixed.get("held_out", 0),
        source=fixed.get("source", ""),
    )


def estimate(row: dict[str, Any], c: TimeConstants, work: Work | None = None) -> float:
    """One program's estimate under constants ``c``."""
    work = work or work_from_json(row["work"])
    return program_time(work, HARDWARE, dtype=row["matmul_dtype"], constants=c).seconds


def fit(
    rows: list[dict[str, Any]],
    free: tuple[str, ...],
    pinned: dict[str, float] | None = None,
) -> TimeConstants:
    """Least squares of the log ratios over ``rows``, from several starts.

    The fractions of the peak and of HBM's bandwidth are capped at 1: a rate
    above the data sheet's is no rate the chip has.
    """
    works = [work_from_json(r["work"]) for r in rows]
    measured = np.array([r["measured"] for r in rows])

    def loss(theta: np.ndarray) -> float:
        c = constants(free, theta, pinned)
        est = np.array([estimate(r, c, w) for r, w in zip(rows, works, strict=True)])
        return float(np.mean(np.log(est / measured) ** 2))

    if not free:
        return constants(free, np.array([]), pinned)
    best = None
    for scale in (1.0, 0.7, 1.4):
        start = np.log([START[name] * scale for name in free])
        options = {"maxiter": 3000, "xatol": 1e-4, "fatol": 1e-9}
        found = minimize(loss, start, method="Nelder-Mead", options=options)
        if best is None or found.fun < best.fun:
            best = found
    return constants(free, best.x, pinned)


def errors(rows: list[dict[str, Any]], c: TimeConstants) -> list[float]:
    """``measured / estimate - 1`` per row."""
    return [r["measured"] / estimate(r, c) - 1 for r in rows]


def summary(errs: list[float]) -> str:
    if not errs:
        return "-"
    absolute = sorted(abs(e) for e in errs)
    return (
        f"median {statistics.median(absolute):.1%}, worst {absolute[-1]:.1%}, "
        f"mean signed {statistics.mean(errs):+.1%}"
    )


def cross_validated(
    rows: list[dict[str, Any]],
    free: tuple[str, ...],
    pinned: dict[str, float] | None = None,
) -> list[float]:
    """4-fold cross-validation errors inside ``rows``."""
    out: list[float] = []
    for k in range(4):
        train = [r for i, r in enumerate(rows) if i % 4 != k]
        test = [r for i, r in enumerate(rows) if i % 4 == k]
        out += errors(test, fit(train, free, pinned))
    return out


def pooled(paths: list[str]) -> list[dict[str, Any]]:
    """Every program of the tables at ``paths``, split in two halves.

    Each family's programs, sorted by name, alternate between the calibration
    half and the held-out half (:func:`_split`), whichever table they came
    from; each row keeps its table's name as its ``set``.
    """
    rows: list[dict[str, Any]] = []
    for path in paths:
        for row in json.loads(Path(path).read_text()):
            rows.append(row | {"set": Path(path).stem.removeprefix("timecal-")})
    _split(rows)
    return rows


def _cv_order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` in the order :func:`cross_validated` returns their errors."""
    return [r for k in range(4) for i, r in enumerate(rows) if i % 4 == k]


def worst_bias(rows: list[dict[str, Any]], errs: list[float]) -> float:
    """The largest |mean signed error| of any kind of program."""
    by_kind: dict[str, list[float]] = {}
    for row, e in zip(rows, errs, strict=True):
        by_kind.setdefault(row["family"], []).append(e)
    return max(abs(statistics.mean(v)) for v in by_kind.values())


TIE = 0.005
"""Variants whose cross-validated median errors are within half a point of
the smallest are tied; the tie goes to the one that fits the fewest
constants (the sixth round's rule), then to the least biased by kind."""


def _pinned(name: str) -> dict[str, float] | None:
    if name not in PROFILED:
        return None
    rates = json.loads(PINS.read_text())["rates"]
    return {
        "cycles": rates["seconds_per_cycle"],
        "onchip": rates["onchip_seconds_per_cycle"] / rates["seconds_per_cycle"],
        "copy": rates["onchip_bytes_per_second"],
        "matmul_fraction": rates["kernel_matmul_fraction"],
    } | ({"async": rates["async_share"]} if name in ASYNC_PINNED else {})


def run_fit(paths: list[str]) -> None:
    rows = pooled(paths)
    cal = [r for r in rows if r["half"] == "calibration"]
    held = [r for r in rows if r["half"] == "held-out"]
    print(f"{len(rows)} programs: {len(cal)} calibration, {len(held)} held out")
    scored: list[tuple[float, float, str, tuple[str, ...]]] = []
    pins = {name: _pinned(name) for name in VARIANTS}
    only = os.environ.get("TIMEFIT_ONLY")  # a variant's name: that one alone
    for name, free in VARIANTS.items():
        if only and only != name:
            continue
        c = fit(cal, free, pins[name])
        cv = cross_validated(cal, free, pins[name]) if free else errors(cal, c)
        cv_median = statistics.median(abs(e) for e in cv)
        bias = worst_bias(_cv_order(cal) if free else cal, cv)
        print(f"\n{name}: {free}")
        print(f"  calibration: {summary(errors(cal, c))}")
        print(f"  4-fold CV  : {summary(cv)}, worst bias by kind {bias:.1%}")
        print(f"  held out   : {summary(errors(held, c))}")
        print(f"  constants  : {_constants_text(c)}")
        scored.append((cv_median, bias, name, free))
    best = min(s[0] for s in scored)
    _, _, name, free = min(
        (s for s in scored if s[0] <= best + TIE), key=lambda s: (len(s[3]), s[1])
    )
    c = fit(cal, free, pins[name])
    held_errors = sorted(abs(e) for e in errors(held, c))
    p90 = held_errors[min(len(held_errors) - 1, math.ceil(0.9 * len(held_errors)) - 1)]
    print(f"\nchosen by cross-validation: {name}")
    print(f"held-out 90th percentile |error|: {p90:.1%}")
    final = dataclasses.replace(
        c,
        version="tpu-v5e/7",
        error=math.ceil(p90 * 100) / 100,  # the bar holds 9 in 10, never fewer
        programs=len(cal),
        held_out=len(held),
        source="benchmarks/calibration/timefit.py fit " + " ".join(paths),
    )
    print(repr(final))


CLOCK_CAP = 1.25
"""An instruction whose cycles at the data-sheet clock are within this many
times its roofline is cycle-bound: its time is its cycles' (``tpu-v5e/5``'s
fitted cap, 1.247)."""


def pins(out: str, source: str) -> None:
    """The device's rates, from the chip's time of every instruction.

    ``source`` is ``PROFILE.jsonl.gz:HLO_DIR``: ``timecal.py chip`` records
    run with ``TIMECAL_PROFILE=1`` (each program's instructions, their runs and
    device time) and the HLO they captured. Each instruction's work is
    :func:`~nnx_introspect._xla.hlo.work.instruction_work`'s, so the rates
    follow the library's rules:

    * seconds per cycle: the device time over XLA:TPU's cycles of the matmul
      instructions whose cycles, at the data-sheet clock (the bf16 peak over
      four 128 x 128 matrix units, 1.5 GHz), are within :data:`CLOCK_CAP` of
      their roofline;
    * on-chip vector fusions (cycles, no matmul, no HBM bytes): their device
      time over their cycles;
    * on-chip copies (``chip_bytes``): their result's bytes over their time;
    * the grouped-matmul kernels (matmul FLOPs, no cycles stated): their
      FLOPs at the dense peak over their time, a share of the peak;
    * the asynchronous copies' waits: the time of their ``-done`` halves
      (the program stalled on them) over their bytes at the data-sheet
      bandwidth, the share of their HBM time the program does not hide.
    """
    profile, hlo_dir = source.split(":")
    peak = HARDWARE.peak_flops_per_second("bf16")
    clock = 1.0 / (peak / (4 * 128 * 128 * 2))
    sums = {k: [0.0, 0.0, 0] for k in ("cycles", "onchip", "copy", "kernel", "async")}
    with gzip.open(profile, "rt") as f:
        records = [json.loads(line) for line in f]
    for record in records:
        plane = record.get("profile", {}).get("planes", {}).get("/device:TPU:0")
        if not plane:
            continue
        for captured in record["hlo_captured"]:
            key = next(
                (k for k in plane["modules"] if k.startswith(captured["module"] + "(")),
                None,
            )
            if key is None:
                continue
            runs = plane["modules"][key][0]
            timed: dict[str, float] = {}
            for text, (_, nanoseconds) in plane["ops"].get(key, {}).items():
                name = text.split(" = ")[0].lstrip("%").strip()
                timed[name] = timed.get(name, 0.0) + nanoseconds * 1e-9 / runs
            module = parse_module(_read_hlo(Path(hlo_dir) / captured["file"]))
            # the waits for asynchronous copies: their ``-done`` halves' time
            sums["async"][0] += sum(
                seconds
                for name, seconds in timed.items()
                if name.split(".")[0] in ASYNC_DONE
            )
            for inst, op in instruction_work(module):
                if inst is not None and op.kind == "async":
                    sums["async"][1] += (
                        op.hbm_bytes * op.count / HARDWARE.hbm_bytes_per_second
                    )
                    sums["async"][2] += 1
                if inst is None or inst.name not in timed:
                    continue
                seconds, roof = (
                    timed[inst.name],
                    max(
                        op.matmul_flops / peak,
                        op.hbm_bytes / HARDWARE.hbm_bytes_per_second,
                    ),
                )
                if op.kind == "matmul" and op.cycles is not None:
                    if op.cycles * clock <= CLOCK_CAP * roof:
                        k, unit = "cycles", float(op.cycles * op.count)
                    else:
                        continue
                elif op.kind == "matmul":
                    k, unit = "kernel", op.matmul_flops / peak * op.count
                elif op.kind == "vector" and op.cycles is not None and roof == 0:
                    k, unit = "onchip", op.cycles * op.count
                elif op.chip_bytes:
                    k, unit = "copy", op.chip_bytes * op.count
                else:
                    continue
                sums[k][0] += seconds
                sums[k][1] += unit
                sums[k][2] += 1
    rates = {
        "seconds_per_cycle": sums["cycles"][0] / sums["cycles"][1],
        "onchip_seconds_per_cycle": sums["onchip"][0] / sums["onchip"][1],
        "onchip_bytes_per_second": sums["copy"][1] / sums["copy"][0],
        "kernel_matmul_fraction": sums["kernel"][1] / sums["kernel"][0],
        "async_share": sums["async"][0] / sums["async"][1],
    }
    found = {
        "source": f"benchmarks/calibration/timefit.py pins {Path(out).name} {source}",
        "rates": rates,
        "instructions": {k: v[2] for k, v in sums.items()},
        "device_seconds": {k: v[0] for k, v in sums.items()},
    }
    Path(out).write_text(json.dumps(found, indent=1) + "\n")
    print(json.dumps(found, indent=1))


def _constants_text(c: TimeConstants) -> str:
    parts = [f"matmul {c.matmul_fraction:.3f}", f"HBM {c.hbm_fraction:.3f}"]
    parts.append(f"launch {c.launch_seconds * 1e6:.2f} us")
    if c.vector_flops_per_second is not None:
        parts.append(f"vector {c.vector_flops_per_second / 1e12:.2f} TFLOP/s")
    if c.seconds_per_cycle is not None:
        parts.append(f"cycle {c.seconds_per_cycle * 1e9:.3f} ns")
    parts.append(f"async {c.async_share:.2f}")
    return ", ".join(parts)


KINDS = ("train", "rl-train", "prefill", "decode", "reference")


def _old_error(row: dict[str, Any]) -> float | None:
    """How far the run fell outside the old range: 0 inside, else the ratio - 1."""
    old = row.get("old")
    if not old or old[0] is None:
        return None
    low, high = old
    m = row["measured"]
    if low <= m <= high:
        return 0.0
    return m / low - 1 if m < low else m / high - 1


def _seconds(value: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value * 1e9:.3g} ns"


def accuracy(rows: list[dict[str, Any]], c: TimeConstants) -> dict[str, Any]:
    """Per program and per kind and half: the figures the accuracy page quotes."""
    for row in rows:
        row["estimate"] = estimate(row, c)
        row["error"] = row["measured"] / row["estimate"] - 1
        row["old_error"] = _old_error(row)
    groups: dict[str, dict[str, Any]] = {}
    for half in HALVES:
        for kind in (*KINDS, "all"):
            members = [
                r
                for r in rows
                if r["half"] == half and (kind == "all" or r["family"] == kind)
            ]
            if not members:
                continue
            errs = [r["error"] for r in members]
            olds = [r["old_error"] for r in members if r["old_error"] is not None]
            groups[f"{half}/{kind}"] = {
                "programs": len(members),
                "median_abs": statistics.median(abs(e) for e in errs),
                "worst_abs": max(abs(e) for e in errs),
                "mean_signed": statistics.mean(errs),
                "old_median_abs": statistics.median(abs(e) for e in olds)
                if olds
                else None,
                "old_worst_abs": max(abs(e) for e in olds) if olds else None,
            }
    return {"constants": c.version, "groups": groups, "rows": rows}


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


HALVES = ("calibration", "held-out", "blind")
"""The calibration half, the held-out half, and the programs run after the
constants were fixed (``timecal_unseen4.py``), never looked at before."""


def report(out: str, paths: list[str], blind: str | None = None) -> None:
    """The accuracy page's tables, from the tables and the shipped constants.

    The programs of ``paths`` are split as the fit split them
    (:func:`pooled`); ``blind``'s are a half of their own, ``"blind"``.
    """
    rows = pooled(paths)
    if blind is not None:
        for row in json.loads(Path(blind).read_text()):
            rows.append(
                row
                | {"half": "blind", "set": Path(blind).stem.removeprefix("timecal-")}
            )
    c = CONSTANTS["v5e"]
    found = accuracy(rows, c)
    lines = [
        "| program kind | half | programs | median \\|error\\| | worst \\|error\\| "
        "| mean signed error | old range: median outside | old range: worst outside |",
        "|" + " --- |" * 8,
    ]
    for key, g in found["groups"].items():
        half, kind = key.split("/")
        old_median = (
            "-" if g["old_median_abs"] is None else f"{g['old_median_abs']:.0%}"
        )
        old_worst = "-" if g["old_worst_abs"] is None else f"{g['old_worst_abs']:.0%}"
        lines.append(
            f"| {kind} | {half} | {g['programs']} | {g['median_abs']:.1%} "
            f"| {g['worst_abs']:.1%} | {g['mean_signed']:+.1%} | {old_median} "
            f"| {old_worst} |"
        )
    lines += [
        "",
        "| program | kind | half | measured | estimate | measured / estimate "
        "| old range | measured / old range |",
        "|" + " --- |" * 8,
    ]
    for r in sorted(
        rows,
        key=lambda r: (HALVES.index(r["half"]), KINDS.index(r["family"]), r["name"]),
    ):
        old = r.get("old")
        span = (
            "-"
            if not old or old[0] is None
            else f"{_seconds(old[0])}-{_seconds(old[1])}"
        )
        versus = "-"
        if old and old[0] is not None:
            low, high = old
            m = r["measured"]
            versus = (
                f"inside ({m / low:.2f}x low)"
                if low <= m <= high
                else (f"{m / high:.2f}x high" if m > high else f"{m / low:.2f}x low")
            )
        lines.append(
            f"| {r['name']} | {r['family']} | {r['half']} | {_seconds(r['measured'])} "
            f"| {_seconds(r['estimate'])} | {r['measured'] / r['estimate']:.2f} "
            f"| {span} | {versus} |"
        )
    print("\n".join(lines))
    if out:
        slim = [
            {
                k: r[k]
                for k in (
                    "name",
                    "family",
                    "half",
                    "set",
                    "measured",
                    "estimate",
                    "old",
                )
            }
            | {"work": r["work"], "matmul_dtype": r["matmul_dtype"]}
            for r in found["rows"]
        ]
        Path(out).write_text(
            json.dumps(
                {"constants": c.version, "groups": found["groups"], "rows": slim}
            )
        )


def main() -> None:
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command == "table":
        table(sys.argv[2], sys.argv[3:])
    elif command == "fit":
        run_fit(sys.argv[2:])
    elif command == "pins":
        pins(sys.argv[2], sys.argv[3])
    elif command == "report":
        blind = [
            a.removeprefix("--blind=") for a in sys.argv if a.startswith("--blind=")
        ]
        paths = [a for a in sys.argv[3:] if not a.startswith("--blind=")]
        report(sys.argv[2], paths, blind[0] if blind else None)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()

"""Fit the time model's constants on half of the chip table; check them on the other.

``python benchmarks/timefit.py table OUT.json CHIP.jsonl:HLO_DIR ...``
  joins the chip's measured programs (``timecal.py chip`` records, or the old
  ``calibrate.py`` records with the HLO of their deviceless twin) with each
  program's work (:func:`nnx_introspect._xla.program_work` of its optimized
  HLO) into one table, each row with its family and its half.

``python benchmarks/timefit.py fit TABLE.json``
  fits every variant of the model (which constants are free) on the
  calibration half (least squares of ``log(estimate / measured)``), prints
  each variant's error on both halves (and in 4-fold cross-validation inside
  the calibration half, which picks the variant), and the chosen constants
  as the Python of :data:`nnx_introspect._roofline.timing.CONSTANTS`.

``python benchmarks/timefit.py report TABLE.json``
  the accuracy page's tables: per program its measured time, the new
  estimate (the library's own :func:`~nnx_introspect._roofline.timing.program_time`
  with the constants it ships), the old range and its half; per family and
  half the median, worst and mean signed error, the old roofline's beside.

Run from the repository root as ``PYTHONPATH=src:. python benchmarks/timefit.py``.
"""

import dataclasses
import gzip
import json
import math
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
from nnx_introspect._xla.hlo import parse_module

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


def table(out: str, sources: list[str]) -> None:
    """Join the measured programs with their work; write the table."""
    rows: list[dict[str, Any]] = []
    for source in sources:
        records, _, hlo_dir = source.partition(":")
        for line in Path(records).read_text().splitlines():
            record = json.loads(line)
            for program in record.get("rows", []):
                hlo = program.get("hlo")
                if not hlo or program.get("measured_seconds") is None:
                    continue
                text = _read_hlo(Path(hlo_dir) / hlo)
                work = program_work(parse_module(text))
                rows.append(
                    {
                        "name": f"{record['case']} / {program['program']}",
                        "case": record["case"],
                        "program": program["program"],
                        "family": program["family"],
                        "source": source,
                        "measured": program["measured_seconds"],
                        "old": program.get("estimate"),
                        "matmul_dtype": program.get("matmul_dtype") or "bf16",
                        "steps": program.get("steps"),
                        "work": work.json_data(),
                    }
                )
    _split(rows)
    Path(out).write_text(json.dumps(rows))
    print(f"{len(rows)} programs -> {out}")


# --- the fit ------------------------------------------------------------------

FREE = ("matmul_fraction", "hbm_fraction", "launch_seconds", "vector", "cycles", "async")
VARIANTS: dict[str, tuple[str, ...]] = {
    "data sheet (nothing fitted)": (),
    "matmul + HBM fractions": ("matmul_fraction", "hbm_fraction"),
    "+ launch": ("matmul_fraction", "hbm_fraction", "launch_seconds"),
    "+ launch + vector": ("matmul_fraction", "hbm_fraction", "launch_seconds", "vector"),
    "+ launch + cycles": ("matmul_fraction", "hbm_fraction", "launch_seconds", "cycles"),
    "+ launch + vector + cycles": (
        "matmul_fraction",
        "hbm_fraction",
        "launch_seconds",
        "vector",
        "cycles",
    ),
    "+ launch + cycles + async": (
        "matmul_fraction",
        "hbm_fraction",
        "launch_seconds",
        "cycles",
        "async",
    ),
    "all": FREE,
}
START = {
    "matmul_fraction": 0.8,
    "hbm_fraction": 0.8,
    "launch_seconds": 2e-6,
    "vector": 2e12,
    "cycles": 1 / 1.5e9,
    "async": 0.2,
}


def constants(free: tuple[str, ...], theta: np.ndarray, **fixed: Any) -> TimeConstants:
    """The constants with ``free`` taken from ``exp(theta)``."""
    values = dict(zip(free, np.exp(theta), strict=True))
    return TimeConstants(
        version=fixed.get("version", "fit"),
        calibrated=True,
        matmul_fraction=float(values.get("matmul_fraction", 1.0)),
        vector_flops_per_second=float(values["vector"]) if "vector" in values else None,
        hbm_fraction=float(values.get("hbm_fraction", 1.0)),
        seconds_per_cycle=float(values["cycles"]) if "cycles" in values else None,
        launch_seconds=float(values.get("launch_seconds", 0.0)),
        async_share=min(1.0, float(values.get("async", 0.0))),
        error=fixed.get("error"),
        programs=fixed.get("programs", 0),
        held_out=fixed.get("held_out", 0),
        source=fixed.get("source", ""),
    )


def estimate(row: dict[str, Any], c: TimeConstants, work: Work | None = None) -> float:
    """One program's estimate under constants ``c``."""
    work = work or work_from_json(row["work"])
    return program_time(work, HARDWARE, dtype=row["matmul_dtype"], constants=c).seconds


def fit(rows: list[dict[str, Any]], free: tuple[str, ...]) -> TimeConstants:
    """Least squares of the log ratios over ``rows``, from several starts."""
    works = [work_from_json(r["work"]) for r in rows]
    measured = np.array([r["measured"] for r in rows])

    def loss(theta: np.ndarray) -> float:
        c = constants(free, theta)
        est = np.array([estimate(r, c, w) for r, w in zip(rows, works, strict=True)])
        return float(np.mean(np.log(est / measured) ** 2))

    if not free:
        return constants(free, np.array([]))
    best = None
    for scale in (1.0, 0.5, 2.0):
        start = np.log([START[name] * scale for name in free])
        found = minimize(loss, start, method="Nelder-Mead", options={"maxiter": 4000})
        if best is None or found.fun < best.fun:
            best = found
    return constants(free, best.x)


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


def cross_validated(rows: list[dict[str, Any]], free: tuple[str, ...]) -> list[float]:
    """4-fold cross-validation errors inside ``rows``."""
    out: list[float] = []
    for k in range(4):
        train = [r for i, r in enumerate(rows) if i % 4 != k]
        test = [r for i, r in enumerate(rows) if i % 4 == k]
        out += errors(test, fit(train, free))
    return out


def run_fit(path: str) -> None:
    rows = json.loads(Path(path).read_text())
    cal = [r for r in rows if r["half"] == "calibration"]
    held = [r for r in rows if r["half"] == "held-out"]
    print(f"{len(rows)} programs: {len(cal)} calibration, {len(held)} held out")
    chosen = None
    for name, free in VARIANTS.items():
        c = fit(cal, free)
        cv = cross_validated(cal, free) if free else errors(cal, c)
        cv_median = statistics.median(abs(e) for e in cv)
        print(f"\n{name}: {free}")
        print(f"  calibration: {summary(errors(cal, c))}")
        print(f"  4-fold CV  : {summary(cv)}")
        print(f"  held out   : {summary(errors(held, c))}")
        print(f"  constants  : {_constants_text(c)}")
        if chosen is None or cv_median < chosen[0]:
            chosen = (cv_median, name, free)
    assert chosen is not None
    _, name, free = chosen
    c = fit(cal, free)
    held_errors = sorted(abs(e) for e in errors(held, c))
    p90 = held_errors[min(len(held_errors) - 1, math.ceil(0.9 * len(held_errors)) - 1)]
    print(f"\nchosen by cross-validation: {name}")
    print(f"held-out 90th percentile |error|: {p90:.1%}")
    final = dataclasses.replace(
        c,
        version="tpu-v5e/1",
        error=round(p90, 2),
        programs=len(cal),
        held_out=len(held),
        source="benchmarks/timefit.py fit benchmarks/timecal-table.json; docs/accuracy.md",
    )
    print(repr(final))


def _constants_text(c: TimeConstants) -> str:
    parts = [f"matmul {c.matmul_fraction:.3f}", f"HBM {c.hbm_fraction:.3f}"]
    parts.append(f"launch {c.launch_seconds * 1e6:.2f} us")
    if c.vector_flops_per_second is not None:
        parts.append(f"vector {c.vector_flops_per_second / 1e12:.2f} TFLOP/s")
    if c.seconds_per_cycle is not None:
        parts.append(f"cycle {c.seconds_per_cycle * 1e9:.3f} ns")
    parts.append(f"async {c.async_share:.2f}")
    return ", ".join(parts)


def main() -> None:
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command == "table":
        table(sys.argv[2], sys.argv[3:])
    elif command == "fit":
        run_fit(sys.argv[2])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()

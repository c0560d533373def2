"""Fit the Pallas kernels' rate on the chip's kernel programs; check it on the rest.

Reads ``data/kernel-rates-v5e-0.0.42.1.json`` (each program's median time of
one kernel call, the program running it ``R = 10`` times in a loop) and
``data/kernel-hlo-v5e-0.0.42.1.json.gz`` (the compiled programs' text;
:mod:`kernel_rates` made both on one v5e chip). Each program with its text
and a Pallas kernel is read as the library reads any program
(``parse_module``, ``program_work``) and timed by ``program_time`` with the
shipped v5e constants, its kernels at a share ``kernel_fraction`` of the
dense bf16 peak (an attention kernel of head dim ``D < 128`` at ``D / 128``
of it). The measured time is ``median_s x R``.

The split: within each kernel family (the record's ``kernel``), programs
sorted by name, alternately fitted (``fit``) and held out (``held-out``).
``kernel_fraction`` minimises the sum of squared ``log(measured /
estimate)`` over the fitted half (a golden-section search), rounded to four
digits; the held-out half's ``|measured / estimate - 1|`` gives the median
and worst error the estimate's words state. The forward-only splash rows
kept no program text: they are left out.

Run from the repository root::

    PYTHONPATH=src python benchmarks/calibration/kernel_fit.py

Prints one line per program (measured, estimate, ratio, half) and the fitted
constant; writes ``data/kernel-fit-v5e.json``.
"""

import dataclasses
import gzip
import json
import math
import statistics
from pathlib import Path
from typing import Any

from nnx_introspect._accelerators import hardware_for
from nnx_introspect._roofline.timing import CONSTANTS, TimeConstants, program_time
from nnx_introspect._xla import Work, program_work
from nnx_introspect._xla.hlo import parse_module

DATA = Path(__file__).resolve().parent / "data"
RATES = DATA / "kernel-rates-v5e-0.0.42.1.json"
TEXTS = DATA / "kernel-hlo-v5e-0.0.42.1.json.gz"
OUT = DATA / "kernel-fit-v5e.json"
R = 10  # kernel calls per program run (kernel_rates.py)


def key(row: dict[str, Any]) -> str:
    """The program's name: its text's key in the records."""
    return f"{row['kernel']}-{'-'.join(str(v) for v in row['shape'].values())}"


def programs() -> list[dict[str, Any]]:
    """Each timed program with a text and a kernel: name, family, work, half."""
    rows = json.loads(RATES.read_text())
    with gzip.open(TEXTS, "rt") as fh:
        texts = json.load(fh)
    found = []
    for row in rows:
        text = texts.get(key(row))
        if not text:
            continue
        work = program_work(parse_module(text))
        if not work.kernels:
            continue
        share = computed_share(row)
        found.append(
            {
                "name": key(row),
                "kernel": row["kernel"],
                "shape": row["shape"],
                "measured": row["median_s"] * R,
                "work": work,
                "computed_work": scaled(work, share),
                "computed_share": share,
                "kernels": list(work.kernels),
                "bounded": list(work.bounded_kernels),
            }
        )
    for family in {p["kernel"] for p in found}:
        mine = sorted(
            (p for p in found if p["kernel"] == family), key=lambda p: p["name"]
        )
        for i, p in enumerate(mine):
            p["half"] = "fit" if i % 2 == 0 else "held-out"
    return sorted(found, key=lambda p: (p["kernel"], p["name"]))


def computed_share(row: dict[str, Any]) -> float:
    """The share of its kernels' counted FLOPs a program's kernels compute.

    A causal attention kernel computes ``blocks`` (the record's count) of its
    ``(S / block)^2`` blocks; the reader counts every one (splash: its mask
    not printed at 2048+ positions; flash: its own estimate counts every
    block). Any other kernel computes what is counted.
    """
    if not row["shape"].get("causal"):
        return 1.0
    side = int(row["shape"]["S"]) // int(row.get("block", 512))
    return float(row["blocks"]) / float(side**2)


def scaled(work: Work, share: float) -> Work:
    """``work`` with its kernels' FLOPs at ``share`` of those counted."""
    ops = tuple(
        dataclasses.replace(op, matmul_flops=op.matmul_flops * share)
        if op.kind == "kernel"
        else op
        for op in work.ops
    )
    return dataclasses.replace(work, ops=ops)


def estimate(work: Work, constants: TimeConstants) -> float:
    """The program's time, in seconds, with ``constants`` on one v5e chip."""
    return program_time(
        work, hardware_for("v5e-1"), dtype="bf16", constants=constants
    ).seconds


def loss(fraction: float, fitted: list[dict[str, Any]]) -> float:
    """Sum of squared ``log(measured / estimate)`` at ``kernel_fraction``."""
    c = dataclasses.replace(CONSTANTS["v5e"], kernel_fraction=fraction)
    return sum(
        math.log(p["measured"] / estimate(p["computed_work"], c)) ** 2 for p in fitted
    )


def fit(fitted: list[dict[str, Any]], low: float = 0.2, high: float = 1.5) -> float:
    """The ``kernel_fraction`` of least :func:`loss`: golden-section search."""
    golden = (math.sqrt(5) - 1) / 2
    a, b = low, high
    for _ in range(80):
        c, d = b - golden * (b - a), a + golden * (b - a)
        if loss(c, fitted) < loss(d, fitted):
            b = d
        else:
            a = c
    return round((a + b) / 2, 4)


def table(constants: TimeConstants) -> list[dict[str, Any]]:
    """Each program's measured time, estimate and ratio with ``constants``."""
    out = []
    for p in programs():
        seconds = estimate(p["work"], constants)
        out.append(
            {k: v for k, v in p.items() if not k.endswith("work")}
            | {"estimate": seconds, "ratio": p["measured"] / seconds}
        )
    return out


def main() -> None:
    found = programs()
    fraction = fit([p for p in found if p["half"] == "fit"])
    c = dataclasses.replace(CONSTANTS["v5e"], kernel_fraction=fraction)
    rows = table(c)
    held = [abs(r["ratio"] - 1) for r in rows if r["half"] == "held-out"]
    for r in rows:
        print(
            f"{r['name']:40s} measured {r['measured'] * 1e3:8.3f} ms  estimate "
            f"{r['estimate'] * 1e3:8.3f} ms  ratio {r['ratio']:5.2f}  {r['half']}"
        )
    summary = {
        "kernel_fraction": fraction,
        "mxu_width": c.mxu_width,
        "fitted": sum(r["half"] == "fit" for r in rows),
        "held_out": len(held),
        "held_out_median_error": statistics.median(held),
        "held_out_worst_error": max(held),
        "rows": rows,
    }
    print(
        f"kernel_fraction {fraction} on {summary['fitted']} programs; held-out "
        f"({len(held)}): median {statistics.median(held):.1%}, worst {max(held):.1%}"
    )
    OUT.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()

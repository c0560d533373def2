"""Pallas kernels' rate: the time model's kernel constants and docs/accuracy.md's table.

The kernel programs timed on a v5e chip (``benchmarks/calibration/data/
kernel-rates-v5e-0.0.42.1.json``, their text in ``kernel-hlo-...json.gz``)
are read here with the library (``parse_module``, ``program_work``,
``program_time``) and the shipped constants; the page's table, the
constants' held-out errors and the fit's optimum are recomputed from them by
plain arithmetic, never read from ``kernel_fit.py``'s output.
"""

import dataclasses
import gzip
import json
import math
import re
import statistics
from pathlib import Path
from typing import Any

import pytest

from nnx_introspect._accelerators.hardware import hardware_for
from nnx_introspect._roofline.timing import CONSTANTS, DATA_SHEET, program_time
from nnx_introspect._xla import OpWork, Work, program_work, work_from_json
from nnx_introspect._xla.hlo import parse_module

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "accuracy.md").read_text(encoding="utf-8")
DATA = ROOT / "benchmarks" / "calibration" / "data"
V5E = hardware_for("v5e-1")
PEAK = 197e12  # v5e's dense bf16 peak (data sheet)


def test_a_kernel_runs_at_the_kernel_fraction_of_the_peak() -> None:
    c = dataclasses.replace(
        DATA_SHEET, kernel_fraction=0.5, mxu_width=128, program_seconds=0.0
    )
    flops = 197e12
    for head_dim, seconds in ((0, 2.0), (128, 2.0), (256, 2.0), (64, 4.0), (32, 8.0)):
        work = Work((OpWork("kernel", flops, 0.0, 0, None, 1, head_dim=head_dim),))
        got = program_time(work, V5E, constants=c).seconds
        assert math.isclose(got, seconds), (head_dim, got)


def test_a_kind_with_no_chip_times_kernels_at_the_matmul_rate() -> None:
    work = Work((OpWork("kernel", 197e12, 0.0, 0, None, 1, head_dim=64),))
    t = program_time(work, V5E, constants=DATA_SHEET)
    assert math.isclose(t.seconds, 1.0)  # no width rule, the data-sheet peak


def test_the_kernel_rate_leaves_other_instructions_alone() -> None:
    ops = (
        OpWork("matmul", 1e12, 0.0, 10**8, None, 3),
        OpWork("vector", 0.0, 1e9, 10**9, 400, 2),
        OpWork("memory", 0.0, 0.0, 0, 50, 1, chip_bytes=4096),
    )
    c = CONSTANTS["v5e"]
    bare = dataclasses.replace(c, kernel_fraction=None, mxu_width=None)
    a = program_time(Work(ops, buffers=3), V5E, constants=c)
    b = program_time(Work(ops, buffers=3), V5E, constants=bare)
    assert a.seconds == b.seconds and a.words == b.words
    assert a.json_data()["constants"] == b.json_data()["constants"]
    assert "kernel_fraction" not in a.json_data()["constants"]


def test_an_attention_kernel_s_head_dim_survives_json() -> None:
    work = Work((OpWork("kernel", 8.0, 0.0, 64, None, 1, head_dim=64),))
    data = work.json_data()
    assert data["columns"][-1] == "head_dim" and data["ops"][0][-1] == 64
    assert work_from_json(data) == work


# the chip's kernel programs -------------------------------------------------


def _name(row: dict[str, Any]) -> str:
    return f"{row['kernel']}-{'-'.join(str(v) for v in row['shape'].values())}"


@pytest.fixture(scope="module")
def programs() -> list[dict[str, Any]]:
    """Each timed program with a text and a kernel, its half and estimate."""
    rows = json.loads((DATA / "kernel-rates-v5e-0.0.42.1.json").read_text())
    with gzip.open(DATA / "kernel-hlo-v5e-0.0.42.1.json.gz", "rt") as fh:
        texts = json.load(fh)
    out = []
    for row in rows:
        text = texts.get(_name(row))
        work = None if not text else program_work(parse_module(text))
        if work is None or not work.kernels:
            continue
        seconds = program_time(work, V5E, dtype="bf16").seconds
        measured = row["median_s"] * 10  # ten calls a run
        out.append(row | {"name": _name(row), "work": work, "measured": measured})
        out[-1] |= {"estimate": seconds, "ratio": measured / seconds}
    for family in {p["kernel"] for p in out}:
        mine = sorted(
            (p for p in out if p["kernel"] == family), key=lambda p: p["name"]
        )
        for i, p in enumerate(mine):
            p["half"] = "fit" if i % 2 == 0 else "held-out"
    return sorted(out, key=lambda p: (p["kernel"], p["name"]))


def _shape(shape: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in shape.items())


def test_the_page_s_kernel_table_is_the_library_s(
    programs: list[dict[str, Any]],
) -> None:
    section = PAGE.partition("## Pallas kernels")[2].partition("\n## ")[0]
    found = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in section.splitlines()
        if line.startswith("| `")
    ]
    expected = [
        [
            f"`{p['kernel']}`",
            _shape(p["shape"]),
            f"{p['measured'] * 1e3:.2f} ms",
            f"{p['estimate'] * 1e3:.2f} ms",
            f"{p['ratio']:.2f}",
            p["half"],
        ]
        for p in programs
    ]
    assert found == expected
    assert f"`kernel_fraction` = {CONSTANTS['v5e'].kernel_fraction}" in section


def test_the_constants_state_the_held_out_half(programs: list[dict[str, Any]]) -> None:
    c = CONSTANTS["v5e"]
    held = [abs(p["ratio"] - 1) for p in programs if p["half"] == "held-out"]
    assert c.kernel_held_out == len(held) == 7
    assert c.kernel_programs == sum(p["half"] == "fit" for p in programs) == 11
    assert c.kernel_median_error == round(statistics.median(held), 3)
    assert c.kernel_worst_error == round(max(held), 3)
    section = " ".join(PAGE.partition("## Pallas kernels")[2].split())
    assert (
        f"the median error is {statistics.median(held):.1%} and the worst "
        f"{max(held):.1%}" in section
    )
    exact = [abs(p["ratio"] - 1) for p in programs if not p["shape"].get("causal")]
    assert f"within {math.ceil(max(exact) * 100)}% of its estimate" in section


def _computed(p: dict[str, Any], fraction: float) -> float:
    """The estimate with a causal program's kernels at the blocks they compute."""
    share = 1.0
    if p["shape"].get("causal"):
        share = p["blocks"] / (p["shape"]["S"] // p.get("block", 512)) ** 2
    ops = tuple(
        dataclasses.replace(op, matmul_flops=op.matmul_flops * share)
        if op.kind == "kernel"
        else op
        for op in p["work"].ops
    )
    c = dataclasses.replace(CONSTANTS["v5e"], kernel_fraction=fraction)
    work = dataclasses.replace(p["work"], ops=ops)
    return program_time(work, V5E, dtype="bf16", constants=c).seconds


def test_the_shipped_fraction_is_the_fit_s_optimum(
    programs: list[dict[str, Any]],
) -> None:
    fitted = [p for p in programs if p["half"] == "fit"]

    def loss(fraction: float) -> float:
        return sum(
            math.log(p["measured"] / _computed(p, fraction)) ** 2 for p in fitted
        )

    best = CONSTANTS["v5e"].kernel_fraction
    assert best is not None
    assert loss(best) <= min(loss(best - 0.002), loss(best + 0.002))


def test_a_head_dim_of_64_runs_at_half_the_rate(programs: list[dict[str, Any]]) -> None:
    # the one program of D = 64, a full mask: within 5% at half the rate
    (narrow,) = [p for p in programs if p["shape"].get("D") == 64]
    assert {op.head_dim for op in narrow["work"].ops if op.kind == "kernel"} == {64}
    assert abs(narrow["ratio"] - 1) < 0.05
    assert re.search(r"\bD=64\b", _shape(narrow["shape"]))

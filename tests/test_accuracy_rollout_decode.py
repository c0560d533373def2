"""docs/accuracy.md's section on the RL rollout's decode follows from its records.

``benchmarks/calibration/data/timecal-unseen8.json`` holds the eighth set's
programs as run on the v5e chip (measured time, work read from the chip's
own HLO); ``timecal-chip/run13-unseen8-profiled.jsonl`` the chip's profile
of two of them. Each estimate is recomputed here with the shipped constants,
and each figure of the section's table and sentences from those estimates
and the profile by plain arithmetic.
"""

import json
import re
from pathlib import Path
from typing import Any

import pytest

from nnx_introspect._accelerators.hardware import hardware_for
from nnx_introspect._roofline.timing import CONSTANTS, program_time
from nnx_introspect._xla import work_from_json

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "accuracy.md").read_text(encoding="utf-8")
DATA = ROOT / "benchmarks" / "calibration" / "data"
ROWS = json.loads((DATA / "timecal-unseen8.json").read_text())
PROFILED = [
    json.loads(line)
    for line in (DATA / "timecal-chip" / "run13-unseen8-profiled.jsonl")
    .read_text()
    .splitlines()
    if line.strip()
]
SECTION = PAGE.split("### Where the error is largest")[1].split("\n### ")[0]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


@pytest.fixture(scope="module")
def decodes() -> list[dict[str, Any]]:
    """Each decode step with its estimate and its cache writes' charge."""
    v5e, c = hardware_for("v5e-1"), CONSTANTS["v5e"]
    out = []
    for row in ROWS:
        if row["family"] != "decode":
            continue
        work = work_from_json(row["work"])
        time = program_time(work, v5e, dtype=row["matmul_dtype"], constants=c)
        writes = [op for op in work.ops if op.kind == "update"]
        rate = c.update_fraction * v5e.hbm_bytes_per_second
        out.append(
            row
            | {
                "estimate": time.seconds,
                "launch": time.launch_seconds,
                "writes": sum(op.count for op in writes),
                "writes_seconds": sum(op.count * op.hbm_bytes for op in writes) / rate,
                "launches": work.launches,
            }
        )
    return out


def test_the_set_is_seven_decodes_each_in_the_table(
    decodes: list[dict[str, Any]],
) -> None:
    assert len(decodes) == 7
    table = [line for line in SECTION.splitlines() if line.startswith("| unseen8")]
    assert len(table) == len(decodes)
    for row in decodes:
        name = row["name"].removesuffix(" / decode")
        expected = (
            f"| {name} | {_ms(row['measured'])} | {_ms(row['estimate'])} | "
            f"{row['measured'] / row['estimate'] - 1:+.1%} | {row['writes']} | "
            f"{_ms(row['writes_seconds'])} | {_ms(row['launch'])} | "
            f"{row['launches']:,} |"
        )
        assert expected in table, expected


def test_the_most_over_estimated_are_the_deep_mha_ones(
    decodes: list[dict[str, Any]],
) -> None:
    errors = {r["name"]: r["measured"] / r["estimate"] - 1 for r in decodes}
    worst = sorted(errors, key=lambda name: errors[name])[:3]
    assert {re.search(r"d\d+ L\d+", w).group(0) for w in worst} == {  # type: ignore[union-attr]
        "d384 L32",
        "d512 L24",
        "d448 L20",
    }
    low, high = sorted(-errors[w] for w in worst)[::2]
    text = " ".join(SECTION.split())
    assert f"over-estimated ({low * 100:.0f}-{high:.0%})" in text
    charged = sorted(r["writes_seconds"] for r in decodes if r["name"] in worst)
    assert f"{_ms(charged[0])[:-3]}-{_ms(charged[-1])}" in text


def test_the_profile_sentences(decodes: list[dict[str, Any]]) -> None:
    case = PROFILED[0]
    assert case["case"].startswith("unseen8 rl d384 L32")
    modules = case["profile"]["device_modules"]
    (decode,) = (name for name in modules if name.startswith("jit_decode"))
    runs, device_ns = modules[decode]
    ops = case["profile"]["device_ops_by_opcode"][decode]
    writes_ns = (
        ops["dynamic-update-slice"]["ns"]
        + ops["fusion (a dynamic-update-slice fusion)"]["ns"]
    )
    assert ops["dynamic-update-slice"]["runs"] == 64 * runs  # one per cache
    text = " ".join(SECTION.split())
    device = _ms(device_ns / runs / 1e9)
    assert f"spent {_ms(writes_ns / runs / 1e9)} of the step's {device}" in text
    (row,) = (r for r in decodes if r["name"].startswith("unseen8 rl d384 L32"))
    assert f"charges them {_ms(row['writes_seconds'])}" in text
    assert f"busy {device} of the {_ms(row['measured'])} the step took" in text
    assert f"per-instruction term ({_ms(row['launch'])})" in text
    # the device's own time is well under the call's: the rest is not the chip's
    assert device_ns / runs / 1e9 < 0.5 * row["measured"]


def test_the_other_phases_ranges() -> None:
    v5e, c = hardware_for("v5e-1"), CONSTANTS["v5e"]
    spread: dict[str, list[float]] = {}
    for row in ROWS:
        if row["family"] == "decode":
            continue
        work = work_from_json(row["work"])
        time = program_time(work, v5e, dtype=row["matmul_dtype"], constants=c)
        spread.setdefault(row["family"], []).append(row["measured"] / time.seconds - 1)
    text = " ".join(SECTION.split())
    for family, words in (
        ("prefill", "prefills"),
        ("reference", "reference forwards"),
        ("rl-train", "training phases"),
    ):
        low, high = min(spread[family]), max(spread[family])
        assert f"{words} {low:+.1%} to {high:+.1%}" in text

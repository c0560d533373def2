"""The mesh comparison's utilisation column says what it is (issue 24, item 4).

An MFU (6·N·tokens) is headed "MFU ceiling (est.)"; the program's FLOPs are a
hardware FLOPs utilisation, and the column says so; a float32 step on an H100
runs at the TF32 peak, which the cell and the notes name, with the bf16-peak
figure beside it. Rows hold real roofline estimates in stand-in reports: no
compile.
"""

import dataclasses
import io
import json
import re
import types
from typing import Any

import pytest
from rich.console import Console

from nnx_introspect._accelerators.hardware import hardware_for
from nnx_introspect._render.table import Table, to_rich
from nnx_introspect._render.widths import cell_parts
from nnx_introspect._roofline.estimate import Roofline, roofline
from nnx_introspect._roofline.timing import program_time
from nnx_introspect._sweep.mesh_comparison import MeshCandidate, MeshComparison
from nnx_introspect._xla import OpWork, Work

GIB = 2**30
SIX_N_TOKENS = "6·N·tokens, attention not counted"


HBM = hardware_for("h100-8").hbm_bytes_per_second


def estimate(
    flops: float, dtype: str = "bf16", model: float | None = None, seconds: float = 0
) -> Roofline:
    """An estimate on h100-8: ``flops`` per device, memory-bound at ``seconds``."""
    return roofline(
        flops=flops,
        bytes_accessed=seconds * HBM,
        comm_bytes_by_axis={},
        mesh_axes=(("fsdp", 8),),
        hardware=hardware_for("h100-8"),
        dtype=dtype,
        model_flops=model,
        model_flops_basis=None if model is None else SIX_N_TOKENS,
    )


def row(mesh: str, est: Roofline | None, peak: int = 20 * GIB) -> MeshCandidate:
    report = types.SimpleNamespace(
        peak_bytes=peak,
        roofline=est,
        compiler="XLA:GPU (stand-in)",
        compiler_message=None,
        backend="gpu",
        json_data=lambda: {
            "peak_bytes": peak,
            "roofline": None if est is None else est.json_data(),
        },
        table=lambda: Table("the step (stand-in)", ("peak",), ((str(peak),),)),
    )
    axes = tuple((a, int(s)) for a, s in (p.split("=") for p in mesh.split(",")))
    seconds = None if est is None else (est.low_seconds, est.high_seconds)
    report_any: Any = report
    return MeshCandidate(axes, "fits", None, report_any, GIB, seconds)


def compare(*rows: MeshCandidate) -> MeshComparison:
    return MeshComparison(
        "m:f", rows, 8, 80 * GIB, "the budget given", "h100-8", None,
        ("int32[8,512]",), "forward + backward + optimizer update", len(rows),
        1.0, "a stand-in",
    )  # fmt: skip


def column(comparison: MeshComparison) -> tuple[str, list[str]]:
    table = comparison.table()
    return table.columns[3], [r[3] for r in table.rows]


def test_an_mfu_at_the_bf16_peak_is_headed_mfu() -> None:
    # 6·N·tokens = half the program's FLOPs: an MFU of 50% at a 100% hardware rate
    peak = hardware_for("h100-8").peak_flops_per_second("bf16")
    comparison = compare(
        row("fsdp=8", estimate(peak, model=4 * peak)),
        row("fsdp=4,tp=2", estimate(2 * peak, model=4 * peak)),
    )
    header, cells = column(comparison)
    assert header == "MFU ceiling (est.)"
    assert cells == ["50%", "25%"]
    notes = "\n".join(comparison.table().notes)
    assert "Step seconds and MFU ceiling are estimates, not measurements" in notes
    assert f"MFU ceiling: the model's FLOPs ({SIX_N_TOKENS})" in notes
    assert "the bf16 peak is 989.5 TFLOP/s per device." in notes
    assert "TF32" not in notes and "second figure" not in notes


def test_program_flops_at_the_tf32_peak_are_a_hardware_utilisation() -> None:
    tf32 = hardware_for("h100-8").peak_flops_per_second("float32")
    comparison = compare(
        row("fsdp=8", estimate(tf32, "float32")),
        row("fsdp=2,tp=4", estimate(tf32, "float32", seconds=4)),
        row("tp=8", None),
    )
    header, cells = column(comparison)
    assert header == "hardware FLOPs utilisation ceiling (est.)"
    assert "MFU" not in header
    # 494.5 of 989.5 TFLOP/s: the bf16 figure is about half the TF32 one
    assert cells == ["100% TF32; 50% bf16", "25% TF32; 12% bf16", "-"]
    notes = "\n".join(comparison.table().notes)
    assert "Step seconds and hardware FLOPs utilisation ceiling are estimates" in notes
    assert "hardware FLOPs utilisation ceiling (HFU), not an MFU: (the program's" in (
        notes
    )
    assert "recompute included" in notes
    assert "TF32, 494.5 TFLOP/s per device, is the rate of f32 matmuls" in notes
    assert "dense bf16 peak (989.5 TFLOP/s per device)" in notes
    assert "MFU ceiling (est.)" not in comparison.to_markdown()
    assert "hardware FLOPs utilisation ceiling (est.)" in comparison.to_markdown()
    assert "100% TF32; 50% bf16" in comparison.to_html()
    data = json.loads(comparison.to_json())  # the figures stay in each report
    first = data["candidates"][0]["report"]["roofline"]
    assert first["utilisation"] == "hardware FLOPs utilisation"
    assert first["peak_name"] == "TF32"
    assert first["mfu_bf16_ceiling"] == pytest.approx(tf32 / 989.5e12)


def test_mixed_kinds_name_each_cell() -> None:
    peak = hardware_for("h100-8").peak_flops_per_second("bf16")
    comparison = compare(
        row("fsdp=8", estimate(peak, model=4 * peak)),
        row("tp=8", estimate(peak, seconds=2)),
    )
    header, cells = column(comparison)
    assert header == "utilisation ceiling (est.)"
    assert cells == ["MFU 50%", "HFU 50%"]
    notes = comparison.table().notes
    assert sum(n.startswith("MFU ceiling:") for n in notes) == 1
    assert sum(n.startswith("hardware FLOPs utilisation ceiling") for n in notes) == 1


def test_no_estimate_keeps_the_column_as_it_was() -> None:
    stand_in = row("fsdp=8", None)
    timed = MeshCandidate(stand_in.mesh, "fits", None, stand_in.report, GIB, (1, 2))
    header, cells = column(compare(timed))
    assert (header, cells) == ("MFU ceiling (est.)", ["-"])


@pytest.mark.parametrize("width", [60, 100, 200])
def test_the_tf32_cells_are_never_cropped(width: int) -> None:
    tf32 = hardware_for("h100-8").peak_flops_per_second("float32")
    comparison = compare(
        row("fsdp=8", estimate(tf32, "float32")),
        row("fsdp=2,tp=4", estimate(3 * tf32, "float32")),
    )
    console = Console(width=width, file=io.StringIO(), record=True)
    console.print(to_rich(comparison.table()))
    lines = console.export_text().splitlines()
    assert max(len(line.rstrip()) for line in lines) <= width
    text = "\n".join(lines)
    # a narrow terminal may leave out optional columns, naming them after the
    # table (issue 28, item 13); every other cell is shown whole
    table = comparison.table()
    flat = re.sub(r"\s+", " ", text)
    note = re.search(r"Left out at this width: (.*?) \(a wider", flat)
    left_out = set(note.group(1).split(", ")) if note else set()
    assert left_out <= set(table.optional), left_out
    assert not left_out or width < 200
    for cells in table.rows:
        shown = [
            c for c, n in zip(cells, table.columns, strict=True) if n not in left_out
        ]
        for part in (p for cell in shown for p in cell_parts(cell)):
            assert part in text, (width, part)


def test_the_column_gives_the_mfu_at_the_point_estimate() -> None:
    # 6·N·tokens = 4 peak-seconds of one device over 8 devices: the roofline's
    # low bound is 1 s (a ceiling of 4 / 8 = 50%); the point estimate, the
    # matmul's 2 peak-seconds of instructions, is 2 s: an MFU of 4 / 16 = 25%.
    peak = hardware_for("h100-8").peak_flops_per_second("bf16")
    est = estimate(peak, model=4 * peak)
    work = Work((OpWork("matmul", 2 * peak, 0.0, 0, None, 1),))
    timed = dataclasses.replace(est, time=program_time(work, hardware_for("h100-8")))
    assert timed.seconds == 2.0
    with_point = dataclasses.replace(row("fsdp=8", timed), estimate=2.0)
    comparison = compare(with_point, row("tp=8", est))
    header, cells = column(comparison)
    assert header == "MFU (est.)"
    assert cells == ["25%", "≤50%"]  # the row with no point keeps its ceiling
    notes = "\n".join(comparison.table().notes)
    assert "Step seconds and MFU are estimates, not measurements" in notes
    assert "MFU: the model's FLOPs (6·N·tokens, attention not counted) / (the " in (
        notes
    )
    assert "estimated step time x the bf16 peak x devices), at the point" in notes
    assert "MFU ceiling: the model's FLOPs" in notes  # the other row's note

"""The mesh comparison states the time model's basis once, not once per row.

Two calibrated rows whose collectives differ used to repeat "±15%, calibrated
on TPU v5e from 51 programs, ..." with each row's own collective time; the
note now names the constants once and says once that the collectives are
uncalibrated. Stand-in reports, no compile.
"""

import dataclasses
import types
from typing import Any

from nnx_introspect._accelerators.hardware import hardware_for
from nnx_introspect._render.table import Table
from nnx_introspect._roofline.estimate import Roofline, roofline
from nnx_introspect._roofline.timing import CONSTANTS, program_time
from nnx_introspect._sweep.mesh_comparison import MeshCandidate, MeshComparison
from nnx_introspect._xla import OpWork, Work

GIB = 2**30
V5E = hardware_for("v5e-8")


def timed(matmul_seconds: float, comm_seconds: float) -> Roofline:
    peak = V5E.peak_flops_per_second("bf16")
    est = roofline(
        flops=matmul_seconds * peak,
        bytes_accessed=0.0,
        comm_bytes_by_axis={},
        mesh_axes=(("fsdp", 8),),
        hardware=V5E,
        dtype="bf16",
    )
    work = Work((OpWork("matmul", matmul_seconds * peak, 0.0, 0, None, 1),))
    time = program_time(work, V5E, comm_seconds=comm_seconds)
    return dataclasses.replace(est, time=time)


def row(mesh: str, est: Roofline) -> MeshCandidate:
    report = types.SimpleNamespace(
        peak_bytes=GIB,
        roofline=est,
        compiler="XLA:TPU (stand-in)",
        compiler_message=None,
        backend="tpu",
        json_data=lambda: {"peak_bytes": GIB, "roofline": est.json_data()},
        table=lambda: Table("the step (stand-in)", ("peak",), (("1",),)),
    )
    axes = tuple((a, int(s)) for a, s in (p.split("=") for p in mesh.split(",")))
    report_any: Any = report
    assert est.time is not None
    return MeshCandidate(
        axes, "fits", None, report_any, 16 * GIB, (est.low_seconds, est.high_seconds)
    )


def test_the_constants_are_named_once_and_collectives_said_uncalibrated_once() -> None:
    a, b = timed(0.010, 0.002), timed(0.012, 0.005)
    assert a.time is not None and b.time is not None
    rows = (
        dataclasses.replace(row("fsdp=8", a), estimate=a.time.seconds),
        dataclasses.replace(row("fsdp=4,tp=2", b), estimate=b.time.seconds),
    )
    comparison = MeshComparison(
        "m:f", rows, 8, 16 * GIB, "the budget given", "v5e-8", None,
        ("int32[8,512]",), "forward + backward + optimizer update", len(rows),
        1.0, "a stand-in",
    )  # fmt: skip
    notes = "\n".join(comparison.table().notes)
    c = CONSTANTS["v5e"]
    basis = (
        f"±{c.error:.0%}, calibrated on TPU v5e from {c.programs} programs, "
        f"constants {c.version}"
    )
    assert notes.count(basis) == 1
    # each row's own words still carry its collective time
    assert "2 ms of collectives are uncalibrated" in a.time.basis
    assert "5 ms of collectives are uncalibrated" in b.time.basis
    assert "ms of collectives are uncalibrated" not in notes
    assert notes.count("collectives are added uncalibrated") == 1

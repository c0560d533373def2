"""``nnx-introspect rl``'s exit codes and flags as ``step`` and ``serve`` have them.

A failed measured run exits 1 (after the report, its error on stderr); a
report that does not fit writes its verdict on stderr and exits 1;
``--topology`` names the extras. The reports are built from their phases' figures (no
compile): ``rl_memory_report`` is replaced where the command calls it.
"""

import json
from typing import Any

import pytest

import nnx_introspect
from nnx_introspect._accelerators import Budget
from nnx_introspect._rl.report import RLMemoryReport, RLPhase
from nnx_introspect._step import Measured
from nnx_introspect.cli.args import PROG
from tests.cli_helpers import run

TINY = "nnx_introspect.examples:llama_tiny"
ARGV = ["rl", TINY, "--mesh", "data=2", "--batch", "2", "--generations", "2"]
ARGV += ["--prompt", "4", "--completion", "4"]
FAILED = "RESOURCE_EXHAUSTED: Out of memory allocating 99 bytes."


def _report(budget: int, measured: dict[str, Measured] | None = None) -> Any:
    measured = measured or {}
    phases = tuple(
        RLPhase(name, 1000, (("actor parameters", 100),), measured=measured.get(name))
        for name in ("prefill", "decode", "reference", "train")
    )
    return RLMemoryReport(
        target=TINY,
        mesh_axes=(("data", 2),),
        topology=None,
        batch=2,
        generations=2,
        prompt=4,
        completion=4,
        reference=True,
        roles=(("actor parameters", 100),),
        phases=phases,
        budget=Budget(budget, "the budget given"),
    )


def _ran(error: str | None = None) -> Measured:
    seconds = () if error else (0.01,)
    return Measured("step", seconds, 0.02, "cpu", "cpu", 2, error=error)


def _returning(report: Any, seen: dict[str, Any]) -> Any:
    def rl_memory_report(*args: Any, **kwargs: Any) -> Any:
        seen.update(kwargs)
        return report

    return rl_memory_report


def test_a_failed_measured_run_exits_1_after_the_report(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = {"prefill": _ran(), "decode": _ran(FAILED), "train": _ran()}
    seen: dict[str, Any] = {}
    monkeypatch.setattr(
        nnx_introspect, "rl_memory_report", _returning(_report(10**6, runs), seen)
    )
    code, out, err = run([*ARGV, "--measure", "1", "--format", "json"], capsys)
    assert code == 1
    assert json.loads(out)["fits"] is True  # the report first, whole
    assert err == f"{PROG}: error: the measured run of decode failed: {FAILED}\n"
    assert seen["measure"] == 1
    # every run fine: 0
    fine = _report(10**6, {"decode": _ran()})
    monkeypatch.setattr(nnx_introspect, "rl_memory_report", _returning(fine, seen))
    code, out, err = run([*ARGV, "--measure", "1", "--format", "json"], capsys)
    assert (code, err) == (0, "")


def test_a_step_that_does_not_fit_says_so_on_stderr_and_exits_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _report(1050)  # every phase's peak is 1,100 B
    monkeypatch.setattr(nnx_introspect, "rl_memory_report", _returning(report, {}))
    code, out, err = run(ARGV, capsys)
    assert code == 1 and out
    assert err == f"{PROG}: {report.verdict}.\n"
    assert err.startswith(f"{PROG}: does NOT fit: peak 1.07 KiB per device")


def test_topology_help_names_the_extras(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["rl", "--help"], capsys)
    text = " ".join(out.split())
    assert code == 0
    assert 'pip install "nnx-introspect[tpu]"' in text
    assert 'pip install "nnx-introspect[gpu]"' in text

"""rl_memory_report(measure=N): each phase's program run on this process's devices.

The measured programs are the programs the report compiled: their memory
equals an unmeasured report's (the same compile), each phase holds its own
runs, and the step's measured time is the phases' one after another (the
decode's one step times the completion). A serving program whose inputs sit
on different device sets (a 2-device mesh) runs too.
"""

import json
import math
from typing import Any

import pytest

from nnx_introspect import (
    ArgumentError,
    RLMemoryReport,
    rl_memory_report,
    serve_memory_report,
)
from nnx_introspect.examples import LlamaConfig, llama
from tests.cli_helpers import run

SMALL = llama(LlamaConfig(vocab=64, d_model=32, n_layers=2, n_heads=2, d_ff=64))
KW: dict[str, Any] = {
    "batch": 2,
    "generations": 2,
    "prompt": 8,
    "completion": 8,
    "max_device_bytes": "64MiB",
}


def small(rngs: Any) -> Any:
    """The small Llama by name, for the command line."""
    return SMALL(rngs)


@pytest.fixture(scope="module")
def both() -> tuple[RLMemoryReport, RLMemoryReport]:
    plain = rl_memory_report(SMALL, "data=2", **KW)
    measured = rl_memory_report(SMALL, "data=2", measure=2, **KW)
    return plain, measured


def test_every_phase_runs_its_own_program(
    both: tuple[RLMemoryReport, RLMemoryReport],
) -> None:
    plain, measured = both
    units = {
        "prefill": "prefill",
        "decode": "decode step",
        "reference": "forward (log-probabilities)",
        "train": "step",
    }
    for a, b in zip(plain.phases, measured.phases, strict=True):
        assert a.measured is None and a.measured_seconds is None
        assert b.measured is not None and b.measured.error is None
        assert b.measured.runs == 2 and b.measured.platform == "cpu"
        assert b.measured.devices == 2  # the mesh's, data=2
        assert b.measured.unit == units[b.name]
        # the same program as the unmeasured report's, byte for byte
        assert b.program_peak_bytes == a.program_peak_bytes
        assert b.resident == a.resident


def test_the_decode_phase_is_one_step_times_the_completion(
    both: tuple[RLMemoryReport, RLMemoryReport],
) -> None:
    _, measured = both
    phases = {p.name: p for p in measured.phases}
    decode = phases["decode"]
    assert decode.steps == KW["completion"]
    assert decode.measured is not None
    assert decode.measured_seconds == pytest.approx(
        decode.measured.median * KW["completion"]
    )
    for name in ("prefill", "reference", "train"):
        phase = phases[name]
        assert phase.steps == 1
        assert phase.measured is not None
        assert phase.measured_seconds == pytest.approx(phase.measured.median)
    total = sum(p.measured_seconds or math.nan for p in measured.phases)
    assert measured.measured_step_seconds == pytest.approx(total)


def test_the_renderings_carry_the_measurement(
    both: tuple[RLMemoryReport, RLMemoryReport],
) -> None:
    plain, measured = both
    data = measured.json_data()
    assert data["measured_step_seconds"] == measured.measured_step_seconds
    for phase, got in zip(measured.phases, data["phases"], strict=True):
        assert got["measured_seconds"] == phase.measured_seconds
        assert len(got["measured"]["seconds"]) == 2
        # no topology: no data sheet to hold the run against, and it says so
        assert got["measured"]["versus_estimate"].startswith("no estimate")
    json.dumps(data)
    text = measured.to_markdown()
    assert "Step time, measured:" in text
    assert "train: measured" in text and "decode: measured" in text
    assert "Step time, measured" not in plain.to_markdown()
    assert "train: measured" in measured.to_html()
    assert plain.json_data()["measured_step_seconds"] is None


def test_a_phase_against_its_estimate_is_one_run_against_one_run() -> None:
    from nnx_introspect._rl.report import RLPhase
    from nnx_introspect._step import Measured

    run_ = Measured("decode step", (0.002, 0.002, 0.002), 0.01, "tpu", "v5e", 1)
    # the phase's estimate is 8 steps of 1-3 ms: one run is held against 1-3 ms
    phase = RLPhase("decode", 10, seconds=(0.008, 0.024), measured=run_, steps=8)
    assert phase.measured_seconds == pytest.approx(0.016)
    assert phase.versus().startswith("inside the estimate 1 ms-3 ms")
    failed = Measured("step", (), 0.0, "tpu", "v5e", 1, error="RESOURCE_EXHAUSTED")
    broken = RLPhase("train", 10, seconds=(0.1, 0.2), measured=failed)
    assert broken.measured_seconds is None
    assert broken.versus() == "not measured: the run failed"


def test_measure_with_role_meshes_is_refused_before_any_compile() -> None:
    with pytest.raises(ArgumentError, match="`measure` runs a colocated step") as e:
        rl_memory_report(
            SMALL, "data=2", role_meshes={"rollout": "tp=2"}, measure=2, **KW
        )
    assert e.value.argument == "measure"


@pytest.mark.parametrize("value", [0, -1, 1.5, "5"])
def test_bad_measure_is_refused_naming_it(value: object) -> None:
    with pytest.raises((ArgumentError, TypeError, ValueError), match="measure"):
        rl_memory_report(SMALL, "data=2", measure=value, **KW)


def test_measure_needs_this_processes_devices() -> None:
    with pytest.raises(ArgumentError, match="measure") as e:
        rl_memory_report(SMALL, "data=2", topology="v5e-2", measure=2, **KW)
    assert e.value.argument == "measure"


def test_serving_measured_on_two_devices_makes_every_input() -> None:
    # Its inputs sit on two device sets (a scalar on one device, the weights
    # on the mesh's two): each is made on its own, and both programs run.
    report = serve_memory_report(
        SMALL, "data=2", sequences=4, context=16, prompt=8, measure=1
    )
    for program in (report.prefill, report.decode):
        assert program.measured is not None and program.measured.error is None
        assert program.measured.devices == 2 and program.measured.runs == 1


def test_cli_measure_and_its_conflicts(capsys: pytest.CaptureFixture[str]) -> None:
    sizes = ["--generations", "2", "--prompt", "8", "--completion", "8"]
    base = ["rl", "tests.test_rl_measure:small", "--mesh", "data=2", *sizes]
    base += ["--max-device-bytes", "64MiB"]
    argv = [*base, "--batch", "2", "--measure", "1", "--format", "json"]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["measured_step_seconds"] > 0
    assert all(len(p["measured"]["seconds"]) == 1 for p in data["phases"])
    for extra in (["--max-batch"], ["--batch", "2", "--role-mesh", "rollout=data=1"]):
        code, out, err = run([*base, *extra, "--measure"], capsys)
        assert code == 2 and out == ""
        assert err.count("\n") == 1 and "argument --measure" in err

"""``measure=``: the compiled program run on this process's devices (XLA:CPU here)."""

import json
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nnx_introspect import serve_memory_report, step_memory_report
from nnx_introspect._step.measured import Measured, as_measure
from nnx_introspect._typing import ArgumentError
from nnx_introspect._xla.run import run_compiled
from nnx_introspect.examples import LlamaConfig, llama
from tests.cli_helpers import run

TINY = llama(LlamaConfig(vocab=64, d_model=32, n_layers=2, n_heads=2, d_ff=64))
BATCH = jax.ShapeDtypeStruct((2, 16), jnp.int32)


@pytest.fixture(scope="module")
def report():  # type: ignore[no-untyped-def]
    return step_memory_report(
        TINY, {"data": 1}, BATCH, loss="lm", optimizer="adamw", measure=3, cache=False
    )


def test_the_step_runs_with_its_state_fed_back(report) -> None:  # type: ignore[no-untyped-def]
    run = report.measured
    assert run is not None and run.error is None
    assert run.unit == "step" and run.runs == 3 and run.platform == "cpu"
    assert all(s > 0 for s in run.seconds) and run.warmup_seconds > 0
    assert run.fastest <= run.median <= run.slowest
    assert run.tokens == 2 * 16
    assert run.tokens_per_second == pytest.approx(32 / run.median)
    # XLA:CPU keeps no allocator statistics, and the report says so
    assert run.allocator is None
    assert "XLA:CPU keeps no allocator statistics" in report.measured.sentence()


def test_every_rendering_has_the_measured_row(report) -> None:  # type: ignore[no-untyped-def]
    markdown = report.to_markdown()
    assert "| time per step: measured |" in markdown
    assert "no estimate to hold it against" in markdown  # XLA:CPU: no data sheet
    data = json.loads(json.dumps(report.json_data()))["measured"]
    assert data["seconds"] == list(report.measured.seconds)
    assert data["median_seconds"] == report.measured.median
    assert data["versus_estimate"]["measured_seconds"] == report.measured.median
    assert data["versus_estimate"]["estimate_low_seconds"] is None
    assert "time per step: measured" in report.to_html()


def test_donated_inputs_are_fed_back_or_the_second_run_fails() -> None:
    """Without feeding the donated buffer back, run 2 would read a deleted one."""
    step = jax.jit(lambda w, x: (w + x.sum(), x * 2), donate_argnums=0)
    compiled = step.lower(jnp.zeros((64, 64)), jnp.ones((8,), jnp.int32)).compile()
    found = run_compiled(compiled, 4)
    assert "error" not in found and len(found["seconds"]) == 4


@pytest.mark.filterwarnings("ignore:Some donated buffers were not usable")
def test_a_donated_input_no_output_matches_is_made_anew() -> None:
    step = jax.jit(lambda w: w.sum(), donate_argnums=0)  # nothing like w comes out
    compiled = step.lower(jnp.zeros((16,))).compile()
    found = run_compiled(compiled, 3)
    assert "error" not in found and len(found["seconds"]) == 3


def test_the_measured_time_is_the_programs_own() -> None:
    """A program of known cost: the median is within a timing of our own."""
    x = jnp.ones((512, 512))
    f = jax.jit(lambda a: jnp.linalg.matrix_power(a, 8))
    compiled = f.lower(x).compile()
    found = run_compiled(compiled, 5)
    ours = []
    for _ in range(5):
        began = time.perf_counter()
        jax.block_until_ready(compiled(x))
        ours.append(time.perf_counter() - began)
    median = float(np.median(found["seconds"]))
    # a shared CPU: the same order of magnitude, not a timing test
    assert 0.2 < median / float(np.median(ours)) < 5


def test_serving_measures_both_programs() -> None:
    report = serve_memory_report(
        TINY, "tp=1", sequences=4, context=32, prompt=8, measure=2, cache=False
    )
    prefill, decode = report.prefill.measured, report.decode.measured
    assert prefill is not None and decode is not None
    assert (prefill.unit, decode.unit) == ("prefill", "decode step")
    assert prefill.tokens == 4 * 8 and decode.tokens == 4
    assert decode.tokens_per_second == pytest.approx(4 / decode.median)
    text = report.to_markdown()
    assert "| time (measured, median) |" in text and "| estimate vs measured |" in text
    data = report.json_data()
    assert data["decode"]["measured"]["seconds"] == list(decode.seconds)
    assert data["prefill"]["measured"]["tokens"] == 4 * 8


@pytest.mark.parametrize("value", [0, -1, 1001, 2.5, "5"])
def test_bad_measure_is_refused_naming_it(value: object) -> None:
    with pytest.raises((ArgumentError, TypeError), match="measure"):
        as_measure(value)  # type: ignore[arg-type]


def test_measure_true_is_five_and_false_none() -> None:
    assert (
        as_measure(True) == 5 and as_measure(False) is None and as_measure(None) is None
    )


def test_measure_needs_this_processes_devices() -> None:
    with pytest.raises(ArgumentError, match="not `topology` 'v5e-1'") as error:
        step_memory_report(
            TINY, {"data": 1}, BATCH, loss="lm", topology="v5e-1", measure=2
        )
    assert error.value.argument == "measure"
    with pytest.raises(ArgumentError, match="needs 16 and this process has") as error:
        step_memory_report(TINY, {"data": 16}, jnp.zeros((16, 4), jnp.int32), measure=2)
    assert error.value.argument == "measure"


def test_a_failed_run_is_said_not_timed() -> None:
    run = Measured("decode step", (), 0.0, "tpu", "TPU v5 lite", 1, error="oom")
    assert run.versus((0.1, 0.2)) == "not measured: the run failed"
    assert "it failed: oom" in run.sentence()
    assert run.json_data()["median_seconds"] is None


def test_cli_measure_flag_and_its_conflicts(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        [
            "step",
            "tests.llama_tiny_layers:llama_small",  # 2 layers of width 32
            "--mesh",
            "data=1",
            "--batch",
            "int32[1,8]",
            "--loss",
            "lm",
            "--measure",
            "2",
            "--format",
            "json",
        ],
        capsys,
    )
    assert code == 0, err
    assert len(json.loads(out)["measured"]["seconds"]) == 2
    code, out, err = run(
        [
            "step",
            "nnx_introspect.examples:llama_tiny",
            "--mesh",
            "data=1",
            "--batch",
            "int32[1,8]",
            "--max-batch",
            "--max-device-bytes",
            "1GiB",
            "--measure",
        ],
        capsys,
    )
    assert code == 2 and "argument --measure:" in err
    assert len(err.strip().splitlines()) == 1

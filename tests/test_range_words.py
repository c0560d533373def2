"""The roofline's range is never called a bound; a point estimate names its basis.

XLA's bytes accessed overcount what crosses HBM, so runs land below the
roofline's "every term overlapped" time: the range bounds nothing. Beside a
point estimate a report shows that estimate, one utilisation at it, and the
range said to be no bound; a calibrated estimate's label names its
calibration, not "data-sheet peaks (a roofline)".
"""

import json
import re
from typing import Any

import jax
import jax.numpy as jnp
import pytest

from nnx_introspect import serve_memory_report, step_memory_report
from nnx_introspect._accelerators.hardware import hardware_for
from nnx_introspect._roofline.estimate import LABEL, roofline
from nnx_introspect._roofline.program import with_time
from nnx_introspect._roofline.timing import program_time
from nnx_introspect._step.report_render import roofline_note
from nnx_introspect._xla import OpWork, Work, libtpu_version

needs_libtpu = pytest.mark.skipif(
    libtpu_version() is None, reason="libtpu is not installed (the tpu extra)"
)

TARGET = "tests.llama_tiny_layers:llama_small"  # 2 layers of width 32
_SAID = (
    "not a bound",
    "-bound at best",
    "bound by ",
    "makes it a lower bound",
    "its time is a lower bound",
)
"""The phrases with "bound" a report may hold: the range said to be none,
which term limits the program (compute, memory, a link), and the assumptions
that one term (compute at the matmul peak, an all-to-all's hops) is low."""

_UTILISATION = re.compile(r"(?:MFU|utilisation)(?: ceiling)? [\d.]+%")
"""A utilisation figure as a report's words give it."""


def bound_words(text: str) -> list[str]:
    """The words around each "bound" of ``text`` that calls a figure a bound."""
    for said in _SAID:
        text = text.replace(said, "")
    return [
        text[max(0, m.start() - 40) : m.end() + 20] for m in re.finditer("bound", text)
    ]


def test_bound_words_finds_the_old_label() -> None:
    assert bound_words("Roofline bounds at bf16: 1 ms to 2 ms") != []
    assert bound_words("'roofline bounds (s)': a bound, not an estimate") != []
    assert (
        bound_words("1 ms to 2 ms (compute-bound at best; a range, not a bound)") == []
    )


def _one_program() -> Any:
    """A roofline of 197 TFLOP on one v5e chip, timed: 1 s at the peak."""
    hardware = hardware_for("v5e-1")
    estimate = roofline(
        flops=197e12,
        bytes_accessed=0.0,
        comm_bytes_by_axis={},
        mesh_axes=(("data", 1),),
        hardware=hardware,
        tokens=1000,
        model_flops=98.5e12,
        model_flops_basis="6·N·tokens, attention not counted",
    )
    work = Work((OpWork("matmul", 197e12, 0.0, 0, None, 1),))
    return with_time(estimate, program_time(work, hardware))


def test_a_calibrated_label_names_its_calibration() -> None:
    timed = _one_program()
    assert timed.time is not None and timed.time.constants.calibrated
    assert not timed.label.startswith(LABEL)
    assert "calibrated on TPU v5e" in timed.label
    assert "a range, not a bound" in timed.label
    assert bound_words(timed.label) == []
    data = json.loads(json.dumps(timed.json_data()))
    assert data["label"] == timed.label


def test_one_utilisation_beside_a_point_estimate() -> None:
    timed = _one_program()
    assert timed.time is not None and timed.mfu is not None
    # the model's FLOPs over the point estimate's seconds at the 197 TFLOP/s peak
    at_point = 98.5e12 / (timed.time.seconds * 197e12)
    assert timed.mfu == pytest.approx(at_point)
    note = roofline_note(timed)
    assert _UTILISATION.findall(note) == [f"MFU {at_point * 100:.3g}%"]
    assert "Roofline range at bf16" in note and bound_words(note) == []
    lines = [line for line in timed.to_text().splitlines() if _UTILISATION.search(line)]
    assert len(lines) == 1 and len(_UTILISATION.findall(lines[0])) == 1
    assert f"MFU {at_point:.1%} at the point estimate" in lines[0]


@pytest.fixture(scope="module")
def step() -> Any:
    return step_memory_report(
        TARGET,
        "fsdp=8",
        jax.ShapeDtypeStruct((8, 32), jnp.int32),
        loss="lm",
        optimizer="adamw",
        topology="v5e-8",
    )


@needs_libtpu
def test_a_step_report_calls_no_figure_a_bound(step: Any) -> None:
    estimate = step.roofline
    assert estimate is not None and estimate.time is not None
    text = " ".join(str(step).split())
    assert bound_words(text) == []
    assert "Roofline range at bf16" in text
    assert len(_UTILISATION.findall(text)) == 1  # at the point estimate only
    data = json.loads(step.to_json())
    label = data["roofline"]["label"]
    assert "calibrated on TPU v5e" in label and not label.startswith(LABEL)
    assert bound_words(label) == []


@needs_libtpu
def test_a_serving_report_calls_no_figure_a_bound() -> None:
    report = serve_memory_report(
        TARGET, "data=8", sequences=8, context=32, prompt=16, topology="v5e-8"
    )
    assert report.time is not None and report.time.decode.time is not None
    text = " ".join(str(report).split())
    assert bound_words(text) == []
    assert "time (roofline range)" in text
    label = json.loads(report.to_json())["time"]["label"]
    assert "calibrated on TPU v5e" in label and not label.startswith(LABEL)
    assert bound_words(label) == []

"""Issue 55, item 6: a count of devices (or chips, GPUs, runs) is said in words.

One device is ``1 device``, never ``1 devices`` or ``1 cpu device(s)``: in the
step's verdict and page, the mesh plan's title and page, a measured run's
sentence and the command line's refusal of a mesh of another size.
"""

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from nnx_introspect import mesh_config_report, step_memory_report
from nnx_introspect._step.measured import Measured
from tests.cli_helpers import run


def _linear(rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(4, 3, rngs=rngs)


def test_one_device_in_the_step_report_and_the_mesh_plan() -> None:
    x = jax.ShapeDtypeStruct((2, 4), jnp.float32)
    step = step_memory_report(_linear(nnx.Rngs(0)), {"data": 1}, x, loss=None)
    assert "one step on 1 device (data=1; cpu)" in step.verdict
    assert "(1 device)" in step.to_html()
    plan = mesh_config_report(_linear(nnx.Rngs(0)), {"data": 1})
    assert plan.table().title == "Mesh plan (data=1; 1 device)"
    assert "<h1>Mesh plan: data=1 (1 device)</h1>" in plan.to_html()
    two = mesh_config_report(_linear(nnx.Rngs(0)), {"data": 2})
    assert two.table().title == "Mesh plan (data=2; 2 devices)"


def test_one_device_and_one_run_measured() -> None:
    one = Measured("step", (0.5,), 1.0, "cpu", "cpu", 1)
    assert one.sentence().startswith(
        "Measured on this process's 1 cpu device, 1 timed run after one warm-up"
    )
    failed = Measured("step", (), 1.0, "cpu", "cpu", 1, error="RESOURCE_EXHAUSTED")
    assert failed.sentence().startswith("Run on this process's 1 cpu device: ")
    two = Measured("step", (0.5, 0.5), 1.0, "tpu", "TPU v5 lite", 2)
    assert "2 TPU v5 lite devices, 2 timed runs after" in two.sentence()


def test_one_chip_against_a_mesh_of_two(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["step", "nnx_introspect.examples:two_layer", "--batch", "float32[8,3]"]
    code, _, err = run([*argv, "--topology", "v5e-1", "--mesh", "data=2"], capsys)
    assert code == 2
    assert (
        "--topology v5e-1 has 1 chip (one JAX device each) but --mesh data=2 has "
        "2 devices." in err
    )

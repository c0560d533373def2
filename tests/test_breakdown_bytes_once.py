"""Issue 24, item 1: the step breakdown counts each byte of the device once.

XLA places several values in the same bytes (a fusion's output written in
place over its operand, an output aliasing a donated parameter, bitcasts);
the breakdown counts each slice of an allocation once, so its peak is never
above what the step holds (arguments + outputs + temporaries - aliased), and
not below XLA's own live-range figure where that figure is a floor (it sizes a
multi-output fusion's outputs as 8-byte tuple pointers). On XLA:GPU the peak is
XLA's own ``peak_memory_in_bytes``.

The two-layer MLP (f32, 512 -> 4096 -> 512, B=1024) is compiled with XLA:CPU in
this process (a model object on a one-device mesh) and for one deviceless H100
(``h100-1``) in a child process, which builds it by name.
"""

import os
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from nnx_introspect import step_memory_report
from nnx_introspect._xla.dump import dump_options, read_peak
from nnx_introspect._xla.toolchain import cuda_plugin_version

ROOT = Path(__file__).resolve().parent.parent
BATCH = jax.ShapeDtypeStruct((1024, 512), jnp.float32)

needs_plugin = pytest.mark.skipif(
    cuda_plugin_version() is None, reason="the CUDA PJRT plugin is not installed"
)


class MLP(nnx.Module):
    """f32 ``512 -> 4096 -> 512`` with biases."""

    def __init__(self, *, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(512, 4096, rngs=rngs)
        self.l2 = nnx.Linear(4096, 512, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.l2(jax.nn.relu(self.l1(x)))


def mlp(rngs: nnx.Rngs) -> MLP:
    """The factory the step's child process builds by name."""
    return MLP(rngs=rngs)


@pytest.fixture(autouse=True)
def _child_imports_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child process rebuilds ``tests.test_breakdown_bytes_once`` by name."""
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))


def _report(topology: str | None, optimizer: str | None) -> Any:
    target: Any = "tests.test_breakdown_bytes_once:mlp"
    if topology is None:
        target = MLP(rngs=nnx.Rngs(0))
    return step_memory_report(
        target,
        "data=1",
        BATCH,
        optimizer=optimizer,
        topology=topology,
        breakdown=True,
    )


def _held(report: Any) -> int:
    return int(
        report.argument_bytes
        + report.output_bytes
        + report.temp_bytes
        - report.alias_bytes
    )


@pytest.fixture(
    scope="module",
    params=[
        (None, None),
        (None, "adamw"),
        pytest.param(("h100-1", None), marks=needs_plugin),
        pytest.param(("h100-1", "adamw"), marks=needs_plugin),
    ],
    ids=["cpu", "cpu-adamw", "h100-1", "h100-1-adamw"],
)
def report(request: pytest.FixtureRequest) -> Any:
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    topology, optimizer = request.param
    return _report(topology, optimizer)


def test_listed_peak_within_held_and_above_xlas_floor(report: Any) -> None:
    breakdown = report.breakdown
    assert breakdown is not None, report.warnings
    listed, held = breakdown.live_peak_bytes, _held(report)
    floor = breakdown.xla_peak_bytes
    assert floor is not None
    assert listed == sum(row.nbytes for row in breakdown.rows)
    assert breakdown.held_bytes == held
    assert listed <= held
    if floor <= held:
        assert listed >= floor
    else:
        # XLA's own list counts the bytes a fusion writes in place over its
        # operand (the optimizer's update) twice: above what is held
        assert report.backend == "gpu" and listed < floor
    curve = breakdown.curve
    assert curve is not None and curve.highest_bytes == listed
    assert curve.live_bytes[curve.times.index(breakdown.peak_time)] == listed


def test_gpu_peak_is_xlas_peak_memory(report: Any) -> None:
    if report.backend != "gpu":
        pytest.skip("XLA:CPU's peak_memory_in_bytes leaves out the temporaries")
    floor, peak = report.breakdown.xla_peak_bytes, report.xla_peak_bytes
    assert peak is not None and floor is not None
    if peak >= floor or report.breakdown.live_peak_bytes < floor:
        assert abs(report.breakdown.live_peak_bytes - peak) <= peak // 100


def test_no_row_counts_bytes_twice(report: Any) -> None:
    """No row is more than its own array's bytes."""
    for row in report.breakdown.rows:
        if row.dtype != "tuple":
            width = {"f32": 4, "s32": 4, "u32": 4}[row.dtype]
            elements = 1
            for n in row.shape:
                elements *= n
            assert row.nbytes <= width * elements, row


def test_a_value_written_in_place_is_an_alias(tmp_path: Path) -> None:
    """A donated parameter updated in place: one buffer, the parameter its alias.

    XLA's own list counts ``w`` and the fusion written over it both (three
    arrays' bytes, above the two the step holds).
    """

    def update(w: jax.Array, g: jax.Array) -> jax.Array:
        return w - 0.1 * jnp.tanh(g) * w

    shape = jax.ShapeDtypeStruct((256, 256), jnp.float32)
    compiled = (
        jax.jit(update, donate_argnums=0)
        .lower(shape, shape)
        .compile(compiler_options=dump_options(tmp_path))
    )
    memory = compiled.memory_analysis()
    assert memory is not None
    held = (
        memory.argument_size_in_bytes
        + memory.output_size_in_bytes
        + memory.temp_size_in_bytes
        - memory.alias_size_in_bytes
    )
    array = 256 * 256 * 4
    peak = read_peak(tmp_path, backend="cpu")
    assert peak.xla_peak_bytes == 3 * array
    assert peak.peak_bytes == held == 2 * array
    assert sum(b.nbytes for b in peak.buffers) == peak.peak_bytes
    written = [b for b in peak.buffers if b.aliases]
    assert [(b.opcode, b.aliases, b.nbytes) for b in written] == [
        ("fusion", ("w.1",), array)
    ]
    assert written[0].is_output

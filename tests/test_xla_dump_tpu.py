"""XLA:TPU's dump of a while loop: the widened loop parameters' phi values are read.

XLA:TPU widens a while loop's tuple parameter (``wide.param.N``) and prints
the values merged at the loop as phis, ``<id name{index} (phi) @color>``
(``HloValue::ToShortString``), in both the buffer-assignment file and its
values file. A scanned step compiled deviceless for a ``v5p-8`` holds them at
its peak; the reader must read them, and the breakdown classify them.
"""

import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from nnx_introspect._breakdown.report import argument_leaves, classify
from nnx_introspect._xla import analysis, collectives, costs, toolchain
from nnx_introspect._xla.dump import PeakBuffers, dump_options, module_text, read_peak

pytestmark = pytest.mark.skipif(
    toolchain.libtpu_version() is None, reason="libtpu is not installed"
)

LAYERS, WIDTH, BATCH = 4, 512, 64


def _loss(weights: jax.Array, x: jax.Array) -> jax.Array:
    def layer(h: jax.Array, w: jax.Array) -> tuple[jax.Array, None]:
        return jnp.tanh(h @ w), None

    h, _ = jax.lax.scan(layer, x, weights)
    return jnp.mean(h**2)


def _step(weights: jax.Array, x: jax.Array) -> Any:
    loss, grad = jax.value_and_grad(_loss)(weights, x)
    return loss, weights - 0.1 * grad


MESH_AXES = (("fsdp", 4),)


@pytest.fixture(scope="module")
def dumped() -> Iterator[tuple[Path, Any]]:
    mesh, _ = toolchain.topology_mesh("v5p-8", MESH_AXES)
    weights = jax.ShapeDtypeStruct(
        (LAYERS, WIDTH, WIDTH),
        jnp.float32,
        sharding=NamedSharding(mesh, P(None, "fsdp")),
    )
    x = jax.ShapeDtypeStruct(
        (BATCH, WIDTH), jnp.float32, sharding=NamedSharding(mesh, P("fsdp"))
    )
    directory = tempfile.mkdtemp(prefix="nnx-introspect-tpu-while-")
    try:
        compiled = (
            jax.jit(_step)
            .lower(weights, x)
            .compile(compiler_options=dump_options(directory))
        )
        yield Path(directory), compiled
    finally:
        shutil.rmtree(directory)


def _text(directory: Path, suffix: str) -> str:
    return next(directory.rglob(f"*after_optimizations{suffix}")).read_text()


def test_the_dump_holds_widened_parameter_phis(dumped: tuple[Path, Any]) -> None:
    directory, _ = dumped
    phi = r"<\d+ wide\.param\.\d+\{[\d,]*\} \(phi\) @\d+>"
    assert re.search(
        rf"^ value: {phi} \(size=\d+,offset=\d+\): ",
        _text(directory, "-buffer-assignment.txt"),
        re.M,
    )
    assert re.search(
        rf"^{phi}$", _text(directory, "-buffer-assignment-values.txt"), re.M
    )


def test_the_peak_reads_and_adds_up(dumped: tuple[Path, Any]) -> None:
    directory, _ = dumped
    peak = read_peak(directory, backend="tpu")
    assert sum(b.nbytes for b in peak.buffers) == peak.peak_bytes
    stated = re.search(
        r"^  Stack trace breakdown for peak usage: ([\d ]+) bytes$",
        _text(directory, "-live-range.txt"),
        re.M,
    )
    assert stated and peak.xla_peak_bytes == int(stated[1].replace(" ", ""))
    widened = [b for b in peak.buffers if b.instruction.startswith("wide.param.")]
    assert widened, [b.instruction for b in peak.buffers]
    assert {b.opcode for b in widened} == {"parameter"}
    # a loop's parameter is no entry parameter
    assert all(b.parameter is None for b in widened)


def test_the_breakdown_classifies_it(dumped: tuple[Path, Any]) -> None:
    directory, compiled = dumped
    peak: PeakBuffers = read_peak(directory, backend="tpu")
    memory = compiled.memory_analysis()
    held = int(
        memory.argument_size_in_bytes
        + memory.output_size_in_bytes
        + memory.temp_size_in_bytes
        - memory.alias_size_in_bytes
    )
    breakdown = classify(
        peak,
        argument_leaves(["weights"], [], [], 1),
        held_bytes=held,
        outputs=("loss", "weights"),
    )
    assert sum(row.nbytes for row in breakdown.rows) == peak.peak_bytes


def test_the_dumped_text_reads_as_the_printed_one(dumped: tuple[Path, Any]) -> None:
    directory, compiled = dumped
    dumped_text = module_text(directory, backend="tpu")
    printed = collectives.compiled_hlo_text(compiled)
    from_dump = collectives.read_collectives(dumped_text, MESH_AXES)
    from_print = collectives.read_collectives(printed, MESH_AXES)
    assert from_dump.rows and from_dump.json_data() == from_print.json_data()
    assert costs.matmul_dtype(dumped_text) == costs.matmul_dtype(printed)


def test_a_program_jaxlib_cannot_print_is_read_from_the_dump(
    dumped: tuple[Path, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """libtpu's 7B program on v5p-4096 holds an async-update jaxlib refuses."""
    directory, compiled = dumped
    mesh, _ = toolchain.topology_mesh("v5p-8", MESH_AXES)
    expected = analysis.program_figures(compiled, mesh)

    def refuse(_: Any) -> str:
        raise collectives.CollectiveFormatError("XLA could not print the program")

    monkeypatch.setattr(collectives, "compiled_hlo_text", refuse)
    assert analysis.program_figures(compiled, mesh, dump_to=str(directory)) == expected
    alone = analysis.program_figures(compiled, mesh)
    assert alone["collectives"] is None
    assert alone["collectives_error"] == "XLA could not print the program"

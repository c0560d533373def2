"""A collective's ``source`` is the user's frame, not the library's it called.

Issue 24, item 3: on tunix's Llama 128 of 346 collectives pointed into flax's
``nn/linear.py``, flax's ``variablelib.py`` and optax, because a collective
took the innermost frame of its stack. It now takes the innermost frame
outside JAX, jaxlib, flax, optax and numpy (``user_frame``, the breakdown's
rule too), and keeps its whole ``stack``.

The libraries' directories are found here from the imported packages'
``__file__``, independently of how the library finds them.
"""

import inspect
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import flax
import jax
import jax.numpy as jnp
import jaxlib
import numpy
import optax
import pytest

import nnx_introspect
import nnx_introspect._xla.collectives as collectives_package
from nnx_introspect import StepMemoryReport, examples
from nnx_introspect._xla.collectives import Collectives
from nnx_introspect._xla.hlo.frames import SourceLocation, user_frame
from nnx_introspect._xla.toolchain import cuda_plugin_version

TARGET = "tests.llama_tiny_layers:llama_tiny_2_layers_sharded"  # the examples' Llama
MESH = "fsdp=2,tp=4"
TOKENS = jax.ShapeDtypeStruct((8, 128), jnp.int32)
LIBRARY_ROOTS = tuple(
    os.path.join(os.path.dirname(os.path.realpath(module.__file__ or "")), "")
    for module in (flax, optax, jax, jaxlib, numpy)
)
EXAMPLES = os.path.realpath(inspect.getsourcefile(examples.Llama) or "")


def in_library(frame: SourceLocation) -> bool:
    return os.path.realpath(frame.file).startswith(LIBRARY_ROOTS)


def check_sources(report: StepMemoryReport) -> None:
    """No source in a library; some in the model's own file, _llama.py."""
    found = report.program.collectives
    assert found is not None and found.rows
    inside = [
        (row.name, row.source)
        for row in found.rows
        if row.source is not None and in_library(row.source)
    ]
    assert inside == []
    assert any(
        row.source is not None and os.path.realpath(row.source.file) == EXAMPLES
        for row in found.rows
    )


# --- XLA:CPU, in this process --------------------------------------------------


@pytest.fixture(scope="module")
def cpu() -> Iterator[tuple[StepMemoryReport, Collectives]]:
    """The step report on 8 CPU devices and the collectives it read, stacks whole.

    The report keeps a collective's innermost frame only (its JSON), so the
    reader's own result is caught on its way to the report.
    """
    read: list[Collectives] = []
    original = collectives_package.read_collectives

    def spy(*args: Any, **kwargs: Any) -> Collectives:
        found = original(*args, **kwargs)
        read.append(found)
        return found

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(collectives_package, "read_collectives", spy)
        report = nnx_introspect.step_memory_report(
            TARGET, MESH, TOKENS, loss="lm", optimizer="adamw"
        )
    assert len(read) == 1, "the step was not compiled in this process"
    yield report, read[0]


def test_no_collective_source_lies_in_a_library_on_xla_cpu(
    cpu: tuple[StepMemoryReport, Collectives],
) -> None:
    check_sources(cpu[0])


def test_the_report_shows_the_sources_the_reader_found(
    cpu: tuple[StepMemoryReport, Collectives],
) -> None:
    report, found = cpu
    assert report.program.collectives is not None
    shown = [row.source for row in report.program.collectives.rows]
    assert shown == [row.source for row in found.rows]


def test_the_stack_keeps_the_library_frames(
    cpu: tuple[StepMemoryReport, Collectives],
) -> None:
    _, found = cpu
    called = [row for row in found.rows if row.stack and in_library(row.stack[0])]
    # nnx.Linear's and nnx.Embed's matmuls, optax's cross-entropy: almost all
    assert len(called) > len(found.rows) // 2
    for row in called:
        assert row.source is not None and row.source != row.stack[0]
        assert row.source == next(f for f in row.stack if not in_library(f))
        assert row.stack.index(row.source) > 0  # the library's frames stay first
    # the linear layers' gathers and reductions point at the model's layer
    functions = {row.source.function for row in called if row.source is not None}
    assert "LlamaLayer.__call__" in functions
    assert "Linear.__call__" in {row.stack[0].function for row in called}


# --- the one function ------------------------------------------------------------


def test_user_frame_skips_the_libraries_and_falls_back() -> None:
    linear = SourceLocation(
        os.path.join(LIBRARY_ROOTS[0], "nnx", "nn", "linear.py"), 422, "__call__"
    )
    update = SourceLocation(os.path.join(LIBRARY_ROOTS[1], "update.py"), 1, "f")
    model = SourceLocation(EXAMPLES, 359, "LlamaLayer.__call__")
    assert user_frame((linear, update, model, linear)) == model
    assert user_frame((model,)) == model
    assert user_frame((linear, update)) is None
    assert user_frame((linear, update), linear) == linear
    assert user_frame((), model) == model


def test_user_frame_resolves_symlinks_into_a_library(tmp_path: Path) -> None:
    link = tmp_path / "flax"
    link.symlink_to(LIBRARY_ROOTS[0], target_is_directory=True)
    linked = SourceLocation(str(link / "nnx" / "nn" / "linear.py"), 422, "__call__")
    mine = SourceLocation(str(tmp_path / "model.py"), 3, "f")
    assert user_frame((linked, mine)) == mine


# --- a deviceless XLA:GPU compile, in a child process -----------------------------


@pytest.mark.skipif(
    cuda_plugin_version() is None, reason="the CUDA PJRT plugin is absent"
)
def test_no_collective_source_lies_in_a_library_on_h100_8() -> None:
    report = nnx_introspect.step_memory_report(
        TARGET, MESH, TOKENS, loss="lm", optimizer="adamw", topology="h100-8"
    )
    check_sources(report)

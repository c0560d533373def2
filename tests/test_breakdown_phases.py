"""The step's phases read off XLA:CPU's schedule of the tiny Llama's training step
(``llama_tiny_sharded`` on 2 of its 8 layers, ``tests/llama_tiny_layers.py``).

The backward pass must begin at the first backward op that needs the logits
(found here by walking the program from the head's matmul, by its output's
vocabulary dimension), not at the transposed weights and index arithmetic
XLA:CPU schedules early; the optimizer update at the first optax op that
needs a backward op. The gradients sentence follows the phase found.
"""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest

from nnx_introspect import abstract_model, mesh_config_report, step_memory_report
from nnx_introspect._breakdown.advice import what_to_change
from nnx_introspect._step import compile as step_compile
from nnx_introspect._xla import dump
from nnx_introspect._xla.hlo import metadata, source_stack
from nnx_introspect._xla.hlo.frames import in_package
from nnx_introspect.examples import LLAMA_TINY
from tests.llama_tiny_layers import llama_tiny_2_layers_sharded

MESH = "fsdp=4,tp=2"


@pytest.fixture(scope="module")
def compiled() -> Iterator[tuple[Any, dict[int, str], Any]]:
    """``(report, schedule, module)`` of the tiny Llama's step on XLA:CPU."""
    kept: dict[str, Any] = {}
    read = getattr(step_compile, "read_peak")  # noqa: B009

    def reading(directory: str | Path, **options: Any) -> Any:
        stem, _ = dump._entry_stem(Path(directory), options["backend"])
        kept["sequence"] = dump._read_sequence(stem)
        kept["module"] = dump._read_module(stem)
        return read(directory, **options)

    setattr(step_compile, "read_peak", reading)  # noqa: B010
    try:
        report = step_memory_report(
            abstract_model(llama_tiny_2_layers_sharded),
            MESH,
            jax.ShapeDtypeStruct((8, 64), jnp.int32),
            loss="lm",
            optimizer="adamw",
            breakdown=True,
        )
    finally:
        setattr(step_compile, "read_peak", read)  # noqa: B010
    yield report, kept["sequence"], kept["module"]


def _op_name(module: Any, name: str) -> str:
    return metadata(module.instructions[name].text).get("op_name", "")


def _first_user(sequence: dict[int, str], module: Any, source: int, test: Any) -> int:
    """The first point after ``source`` whose instruction needs it and passes ``test``."""
    needs = {sequence[source]}
    for point in sorted(sequence):
        found = module.instructions.get(sequence[point])
        if point <= source or found is None:
            continue
        if any(op in needs for op in found.operands):
            needs.add(found.name)
            if test(found):
                return point
    raise AssertionError("no user")


def test_the_backward_pass_begins_at_the_logits_gradient(compiled: Any) -> None:
    report, sequence, module = compiled
    breakdown = report.breakdown
    assert breakdown is not None
    vocab = LLAMA_TINY.vocab // 2  # the head's output, split over tp
    head = next(
        p
        for p in sorted(sequence)
        if sequence[p] in module.instructions
        and "jvp()/dot_general" in _op_name(module, sequence[p])
        and f",{vocab}]" in module.instructions[sequence[p]].shape
    )
    first = _first_user(
        sequence, module, head, lambda i: "transpose(" in _op_name(module, i.name)
    )
    assert breakdown.backward_start == first
    # backward ops XLA:CPU schedules before it (what a first-op rule would take)
    early = [
        p
        for p in sorted(sequence)
        if p < first
        and sequence[p] in module.instructions
        and "transpose(" in _op_name(module, sequence[p])
    ]
    assert early
    # the update: an optax op needing the backward pass, after it begins
    update = breakdown.optimizer_start
    assert update is not None and update > first
    found = module.instructions[sequence[update]]
    stack = source_stack(metadata(found.text), module.frames)
    assert any(in_package(f.file, "optax") for f in stack)
    assert breakdown.phase == (
        "forward"
        if breakdown.peak_time < first
        else "backward"
        if breakdown.peak_time < update
        else "optimizer"
    )


def test_the_gradients_sentence_names_the_phase(compiled: Any) -> None:
    report, _, _ = compiled
    breakdown = report.breakdown
    plan = mesh_config_report(
        abstract_model(llama_tiny_2_layers_sharded), MESH, optimizer="adamw"
    )
    facts = what_to_change(breakdown, plan, fits=False)
    said = [f for f in facts if f.startswith("gradient buffers hold")]
    words = {
        "forward": "the peak is in the forward pass",
        "backward": "instructions into the backward pass",
        "optimizer": "the optimizer update, begun at program point",
    }
    if said:
        assert words[breakdown.phase] in said[0]
        assert all(w not in said[0] for p, w in words.items() if p != breakdown.phase)

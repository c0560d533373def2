"""Issue 24, item 2: kinds by role, operands followed through copies and collectives.

On ``llama_tiny_sharded`` (2 of its 8 layers, ``tests/llama_tiny_layers.py``;
``fsdp=4,tp=2``, XLA:CPU) the weights gathered over ``fsdp`` and their
transposed copies live at the peak are parameters, not collective buffers or
temporaries; a combined reduce-scatter of backward partial sums is a gradient.
"""

from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from nnx_introspect import abstract_model, step_memory_report
from nnx_introspect._breakdown.report import classify
from nnx_introspect._xla.dump import PeakBuffer, PeakBuffers
from nnx_introspect._xla.hlo.lineage import Origin
from tests.llama_tiny_layers import llama_tiny_2_layers_sharded


@pytest.fixture(scope="module")
def breakdown() -> Any:
    report = step_memory_report(
        abstract_model(llama_tiny_2_layers_sharded),
        "fsdp=4,tp=2",
        jax.ShapeDtypeStruct((8, 64), jnp.int32),
        loss="lm",
        optimizer="adamw",
        breakdown=True,
    )
    assert report.breakdown is not None
    return report.breakdown


def _parameter_paths() -> set[str]:
    model = abstract_model(llama_tiny_2_layers_sharded)
    state = nnx.state(model, nnx.Param)
    return {"/".join(map(str, path)) for path, _ in nnx.to_flat_state(state)}


def test_gathered_and_copied_weights_are_parameters(breakdown: Any) -> None:
    paths = _parameter_paths()
    gathered = [r for r in breakdown.rows if r.opcode == "all-gather"]
    assert gathered
    for row in gathered:
        # a forward or backward all-gather is never a collective buffer once
        # its operand's role is known: the weight it gathers
        assert row.kind != "collective buffer", row
        if row.kind == "parameter":
            verb, _, path = row.label.partition(" of ")
            assert verb == "all-gather" and path in paths, row
    weights = [r for r in gathered if r.kind == "parameter"]
    assert weights
    # XLA's transposed copies of gathered weights (wrapped_copy fusions)
    copies = [r for r in breakdown.rows if r.instruction.startswith("wrapped_copy")]
    assert copies and all(r.kind == "parameter" for r in copies)
    assert all(r.label.partition(" of ")[2] in paths for r in copies)
    # each byte once: the rows still add up to the peak
    assert sum(r.nbytes for r in breakdown.rows) == breakdown.live_peak_bytes
    assert "collective buffer" not in {g.label for g in breakdown.by_kind()}


def test_rows_carry_aliases_in_json(breakdown: Any) -> None:
    data = breakdown.json_data()
    assert all(isinstance(row["aliases"], list) for row in data["rows"])
    assert type(breakdown).from_json_data(data) == breakdown


def test_internals_note_only_when_debugging(breakdown: Any) -> None:
    from dataclasses import replace

    marker = "HloLiveRange::ComputePeakMemoryMoment"
    assert breakdown.xla_peak_bytes != breakdown.live_peak_bytes
    assert not any(marker in n for n in breakdown.table().notes)
    assert any(marker in n for n in replace(breakdown, debug=True).table().notes)
    with pytest.raises(TypeError, match="`debug` must be a bool"):
        replace(breakdown, debug="yes")


def _buffer(
    name: str,
    opcode: str,
    shape: tuple[int, ...],
    found: Origin | None,
    op_name: str | None = None,
    index: tuple[int, ...] = (),
) -> PeakBuffer:
    nbytes = 4
    for d in shape:
        nbytes *= d
    return PeakBuffer(nbytes, shape, "f32", name, index, opcode, op_name, None, (),
                      None, None, None, "temp", origin=found)  # fmt: skip


def test_combined_reduce_scatter_of_partial_sums_is_a_gradient() -> None:
    backward = "jit(train)/transpose(jvp())/dot_general"
    buffers = (
        # a combined reduce-scatter's element: no op name; its operand is a
        # backward dot's partial sum of a [128, 256] gradient's shard, whole
        # over fsdp=4 in dimension 0
        _buffer("reduce-scatter.3", "reduce-scatter", (512, 256),
                Origin("dot.9", "fusion", backward, None, ("reduce-scatter",)),
                index=(0,)),
        # a forward activation's reduce-scatter: kept, not a collective buffer
        _buffer("reduce-scatter.4", "reduce-scatter", (2, 32, 256),
                Origin("dot.2", "fusion", "jit(train)/jvp()/dot_general", None,
                       ("reduce-scatter",))),
        _buffer("fusion.1", "fusion", (8,), None, backward),
    )  # fmt: skip
    peak = PeakBuffers("cpu", "jit_train", 5, "fusion.1", 0, buffers)
    found = classify(peak, [], held_bytes=0, gradient_types=[("f32", (128, 256))])
    kinds = {r.instruction: r.kind for r in found.rows}
    assert kinds == {
        "reduce-scatter.3": "gradient",
        "reduce-scatter.4": "activation kept for backward",
        "fusion.1": "temporary",
    }

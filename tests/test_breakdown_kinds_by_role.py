"""Issue 24, item 2: each buffer live at the peak is labelled by its role first.

A kept forward all-gather is an activation, a transposed copy of a parameter a
parameter, a reducing collective's gradient-typed result a gradient; only a
collective's own buffer that is none of those is a collective buffer.
"""

from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from nnx_introspect import abstract_model, step_memory_report
from nnx_introspect._breakdown.report import classify
from nnx_introspect._breakdown.rows import ArgumentLeaf
from nnx_introspect._xla.dump import PeakBuffer, PeakBuffers, SourceLocation
from nnx_introspect._xla.toolchain import cuda_plugin_version

D, H, B, T = 256, 1024, 8, 64


def _constrain(x: jax.Array, *spec: str | None) -> jax.Array:
    if "tp" not in jax.sharding.get_abstract_mesh().axis_names:
        return x
    out: jax.Array = jax.lax.with_sharding_constraint(x, P(*spec))
    return out


class _MLP(nnx.Module):
    """Sequence-parallel MLP: its input is gathered over ``tp`` for ``up``."""

    def __init__(self, *, rngs: nnx.Rngs) -> None:
        self.up = nnx.Linear(
            D, H, use_bias=False, rngs=rngs,
            kernel_metadata={"out_sharding": ("fsdp", "tp")},
        )  # fmt: skip
        self.down = nnx.Linear(
            H, D, use_bias=False, rngs=rngs,
            kernel_metadata={"out_sharding": ("tp", "fsdp")},
        )  # fmt: skip

    def __call__(self, x: jax.Array) -> jax.Array:
        x = _constrain(jnp.tanh(_constrain(x, "fsdp", "tp", None)), "fsdp", "tp", None)
        y: jax.Array = self.down(jax.nn.gelu(self.up(x)))
        return _constrain(y, "fsdp", "tp", None)


def _rows(topology: str | None) -> Any:
    model = abstract_model(lambda rngs: _MLP(rngs=rngs))
    report = step_memory_report(
        model,
        "fsdp=2,tp=4",
        (jax.ShapeDtypeStruct((B, T, D), jnp.float32),),
        loss="mean",
        optimizer="adamw",
        breakdown=True,
        topology=topology,
    )
    assert report.breakdown is not None
    return report.breakdown


def _has_cuda() -> bool:
    try:
        return cuda_plugin_version() is not None
    except Exception:
        return False


@pytest.mark.skipif(not _has_cuda(), reason="the CUDA plugin is not installed")
def test_h100_kinds_by_role() -> None:
    breakdown = _rows("h100-8")
    by_name = {row.instruction: row for row in breakdown.rows}
    # the tp-gathered tanh activation, made by the forward pass and live in the
    # backward: a kept activation, though its opcode is a collective's
    gathered = by_name["all-gather-start"]
    assert gathered.opcode == "all-gather-start"
    assert gathered.op_name == "jit(train)/jvp()/dot_general"
    assert gathered.type_str == f"f32[{B // 2},{T},{D}]"
    assert gathered.kind == "activation kept for backward"
    # the down kernel's transposed copy, named by XLA after the parameter
    copies = [r for r in breakdown.rows if r.label == "copy of down/kernel"]
    assert [(r.kind, r.op_name, r.type_str) for r in copies] == [
        ("parameter", "params['down']['kernel'].value", f"f32[{D // 2},{H // 4}]")
    ]
    # independent arithmetic: the parameter bytes at the peak are the up
    # kernel's shard (the entry parameter) and the down kernel's copy
    parameter = sum(r.nbytes for r in breakdown.rows if r.kind == "parameter")
    assert parameter == 2 * (D // 2) * (H // 4) * 4
    # no forward value is a collective buffer once the backward has begun
    assert not [
        r
        for r in breakdown.rows
        if r.kind == "collective buffer" and r.op_name and "jvp(" in r.op_name
        and "transpose(" not in r.op_name
    ]  # fmt: skip


def test_cpu_kinds_by_role() -> None:
    breakdown = _rows(None)
    by_name = {row.instruction: row for row in breakdown.rows}
    # the forward values that consume the tp-gathered activation are kept
    assert by_name["copy_bitcast_fusion.1"].kind == "activation kept for backward"
    for row in breakdown.rows:
        if row.op_name and row.op_name.startswith("params[") and row.parameter is None:
            assert row.kind == "parameter", row
        if row.opcode.startswith(("all-gather", "reduce-scatter", "all-reduce")):
            assert "jvp(" not in (row.op_name or "") or row.kind != "collective buffer"


def _buffer(
    name: str,
    opcode: str,
    op_name: str | None,
    shape: tuple[int, ...],
    *,
    index: tuple[int, ...] = (),
    parameter: int | None = None,
    stack: tuple[SourceLocation, ...] = (),
) -> PeakBuffer:
    nbytes = 4
    for d in shape:
        nbytes *= d
    return PeakBuffer(
        nbytes=nbytes,
        shape=shape,
        dtype="f32",
        instruction=name,
        shape_index=index,
        opcode=opcode,
        op_name=op_name,
        source=stack[0] if stack else None,
        stack=stack,
        parameter=parameter,
        parameter_index=() if parameter is not None else None,
        output_index=None,
        allocation="temp",
    )


def test_hand_made_peak_kinds_by_role() -> None:
    """Each rule of the module docstring on one buffer, as XLA:GPU names them."""
    buffers = (
        _buffer("param.1", "parameter", "params['up']['kernel'].value", (128, 256),
                parameter=0),
        _buffer("param.3", "parameter", "opt_state[0].mu['up']['kernel']", (128, 256),
                parameter=1),
        _buffer("all-gather-start", "all-gather-start",
                "jit(train)/jvp()/dot_general", (4, 64, 256), index=(1,)),
        _buffer("wrapped_transpose", "fusion", "params['up']['kernel'].value",
                (256, 128)),
        _buffer("copy.7", "copy", "opt_state[0].mu['up']['kernel']", (256, 128)),
        # a combined reduce-scatter of two gradients: no op name
        _buffer("reduce-scatter-start.1", "reduce-scatter-start", None, (128, 256),
                index=(1, 0)),
        _buffer("reduce-scatter-done.1", "reduce-scatter-done", None, (128, 256),
                index=(1,)),
        _buffer("all-reduce.5", "all-reduce",
                "jit(train)/(jvp()/reduce_sum:transpose(jvp())/dot_general)",
                (128, 256), index=(1,)),
        # a forward collective still in flight, no gradient's type: a collective
        _buffer("reduce-scatter.5", "reduce-scatter", None, (4, 16, 256)),
        _buffer("all-gather-start.9", "all-gather-start",
                "jit(train)/(jvp()/dot_general:transpose(jvp())/dot_general)",
                (256, 256)),
        _buffer("fusion.3", "fusion", "jit(train)/transpose(jvp())/dot_general",
                (4, 64, 256)),
    )  # fmt: skip
    peak = PeakBuffers(
        "gpu", "jit_train", 9, "fusion.3", sum(b.nbytes for b in buffers), buffers
    )
    arguments = [
        ArgumentLeaf(0, "up/kernel", "parameter"),
        ArgumentLeaf(1, "optimizer/opt_state/0/mu/up/kernel", "optimizer state"),
    ]
    breakdown = classify(
        peak,
        arguments,
        held_bytes=peak.peak_bytes,
        gradient_types=[("f32", (128, 256))],
    )
    kinds = {row.instruction: row.kind for row in breakdown.rows}
    assert kinds == {
        "param.1": "parameter",
        "param.3": "optimizer state",
        "all-gather-start": "activation kept for backward",
        "wrapped_transpose": "parameter",
        "copy.7": "optimizer state",
        "reduce-scatter-start.1": "gradient",
        "reduce-scatter-done.1": "gradient",
        "all-reduce.5": "gradient",
        "reduce-scatter.5": "collective buffer",
        "all-gather-start.9": "collective buffer",
        "fusion.3": "temporary",
    }
    labels = {row.instruction: row.label for row in breakdown.rows}
    assert labels["wrapped_transpose"] == "copy of up/kernel"
    assert labels["copy.7"] == "copy of optimizer/opt_state/0/mu/up/kernel"
    # before the backward pass begins nothing is a gradient or kept
    forward = PeakBuffers("gpu", "jit_train", 1, "x", 0, buffers[2:3] + buffers[5:7])
    early = classify(forward, [], held_bytes=0, gradient_types=[("f32", (128, 256))])
    assert [row.kind for row in early.rows] == ["collective buffer"] * 3


def test_hand_made_expert_kinds_by_their_steps_frames() -> None:
    """Rule 4b: a buffer takes the role of the innermost frames naming a step."""
    moe = "/m/moe.py"

    def at(*lines: int) -> tuple[SourceLocation, ...]:
        return tuple(SourceLocation(moe, line, "f") for line in lines)

    steps = {
        ((moe, 12), (moe, 40)): "expert dispatch",  # the sort, called from 40
        ((moe, 30), (moe, 40)): "expert combine",
        ((moe, 20), (moe, 40)): None,  # the experts' matmul
    }
    buffers = (
        # made at the dispatch's line
        _buffer("gather.1", "fusion", "jit(train)/jvp()/gather", (64, 64),
                stack=at(12, 40)),
        # made inside a call the traced program took as one step (line 12)
        _buffer("gather.2", "fusion", "jit(train)/jvp()/gather", (64, 64),
                stack=at(99, 12, 40)),
        # the backward pass of the combine's step: its line
        _buffer("scatter.3", "fusion", "jit(train)/transpose(jvp())/scatter-add",
                (64, 64), stack=at(30, 40)),
        # the experts' own activation: another step, never its caller's role
        _buffer("dot.4", "fusion", "jit(train)/jvp()/ragged_dot_general", (64, 32),
                stack=at(20, 40)),
        # a gradient stays a gradient, whatever line made it
        _buffer("fusion.5", "fusion", "jit(train)/transpose(jvp())/dot_general",
                (128, 256), stack=at(30, 40)),
    )  # fmt: skip
    peak = PeakBuffers(
        "tpu", "jit_train", 9, "fusion.5", sum(b.nbytes for b in buffers), buffers
    )
    found = classify(
        peak,
        [],
        held_bytes=peak.peak_bytes,
        gradient_types=[("f32", (128, 256))],
        experts=steps,  # type: ignore[arg-type]
    )
    kinds = {row.instruction: row.kind for row in found.rows}
    assert kinds == {
        "gather.1": "expert dispatch",
        "gather.2": "expert dispatch",
        "scatter.3": "expert combine",
        "dot.4": "activation kept for backward",
        "fusion.5": "gradient",
    }
    # without the steps, the same buffers keep the kinds of rules 4 to 7
    plain = classify(peak, [], held_bytes=peak.peak_bytes, gradient_types=[])
    assert not {row.kind for row in plain.rows} & {"expert dispatch", "expert combine"}

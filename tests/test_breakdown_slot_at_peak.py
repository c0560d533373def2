"""What a slot holds at the peak: an empty held slot, a collective in flight.

Rows classified from hand-made buffers against each rule and where it is
false (a slot with its value live; a collective done before the peak; no
peak point), and the sentences on parameters beyond the plan.
"""

import dataclasses

from flax import nnx

from nnx_introspect import mesh_config_report
from nnx_introspect._breakdown.advice import what_to_change
from nnx_introspect._breakdown.report import Breakdown
from nnx_introspect._breakdown.rows import (
    ArgumentLeaf,
    classify_buffer,
    row_from_json,
    row_json,
)
from nnx_introspect._render.table import format_bytes
from nnx_introspect._xla.dump import PeakBuffer
from nnx_introspect._xla.hlo.lineage import Origin

ARGS = {0: ArgumentLeaf(0, "embedder/input_embedding", "parameter")}
OUTPUTS = ("loss", "new params embedder/input_embedding")
MB = 131 * 2**20


def _buffer(**changes: object) -> PeakBuffer:
    base = PeakBuffer(
        nbytes=MB,
        shape=(MB // 4,),
        dtype="f32",
        instruction="x",
        shape_index=(),
        opcode="fusion",
        op_name="jit(train)/add",
        source=None,
        stack=(),
        parameter=None,
        parameter_index=None,
        output_index=None,
        allocation="temp",
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def _classify(buffer: PeakBuffer, peak_time: int | None = 3000) -> tuple[str, str]:
    row = classify_buffer(buffer, ARGS, OUTPUTS, True, peak_time=peak_time)
    assert row_from_json(row_json(row)) == row
    return row.kind, row.label


def test_an_empty_output_slot_is_no_output() -> None:
    update = _buffer(
        instruction="new_embedding", output_index=(1,), live_range=(4173, 4200)
    )
    assert _classify(dataclasses.replace(update, empty=True)) == (
        "empty buffer",
        "empty: held for output new params embedder/input_embedding, its value"
        " written at point 4173",
    )
    # the same slot with its value live at the peak: the output
    assert _classify(update) == ("output", "new params embedder/input_embedding")


def test_an_empty_donated_parameter_slot_is_no_parameter() -> None:
    old = _buffer(
        instruction="p", opcode="parameter", parameter=0, live_range=(0, 1510)
    )
    assert _classify(dataclasses.replace(old, empty=True)) == (
        "empty buffer",
        "empty: held for argument embedder/input_embedding, its value last used"
        " at point 1510",
    )
    assert _classify(old) == ("parameter", "embedder/input_embedding")


GATHER = _buffer(
    instruction="all-gather-start",
    opcode="all-gather-start",
    op_name=None,
    live_range=(1455, 1470),
    done_at=1465,
    origin=Origin("p", "parameter", None, 0, ("all-gather-start",)),
)


def test_a_collective_in_flight_over_the_peak() -> None:
    assert _classify(GATHER, 1462) == (
        "collective in flight",
        "all-gather of embedder/input_embedding (in flight: points 1455-1465)",
    )
    # done by the peak (its buffer the gathered parameter), or no peak point
    assert _classify(GATHER, 1465) == (
        "parameter",
        "all-gather of embedder/input_embedding",
    )
    assert _classify(GATHER, None)[0] == "parameter"
    # started after the peak: not in flight there
    assert _classify(GATHER, 1400)[0] == "parameter"


def test_parameters_beyond_the_plan_say_why() -> None:
    class One(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.w = nnx.Linear(512, 512, rngs=rngs)

    plan = mesh_config_report(One(nnx.Rngs(0)), "fsdp=2,tp=4", optimizer="adamw")
    planned = plan.bytes_by_category["params"]
    peak = 1462

    def rows(*buffers: PeakBuffer) -> Breakdown:
        found = tuple(
            classify_buffer(b, ARGS, OUTPUTS, True, peak_time=peak) for b in buffers
        )
        total = sum(r.nbytes for r in found)
        return Breakdown("gpu", "jit_train", peak, "x", total, total, found)

    own = _buffer(instruction="p", opcode="parameter", parameter=0, nbytes=planned)
    copy = dataclasses.replace(GATHER, nbytes=planned, done_at=1462)
    flight = dataclasses.replace(GATHER, nbytes=planned)
    over = [
        f
        for f in what_to_change(rows(own, copy), plan)
        if f.startswith("parameter buffers hold")
    ]
    assert over == [
        f"parameter buffers hold {format_bytes(2 * planned)} at the peak against"
        f" the plan's {format_bytes(planned)} of parameters:"
        f" {format_bytes(planned)} of them are copies, casts or gathers XLA makes"
        " of parameters (labelled `copy of`, `all-gather of`)."
    ]
    facts = what_to_change(rows(own, flight), plan)
    assert not any(f.startswith("parameter buffers hold") for f in facts)
    assert (
        f"{format_bytes(planned)} of parameters are in collectives in flight at"
        " the peak, started before it and done after it (not counted as"
        " parameters); the largest: all-gather of embedder/input_embedding (in"
        f" flight: points 1455-1465) ({format_bytes(planned)})."
    ) in facts

"""A step report states a ragged all-to-all's worst-case receive buffer.

An MoE's dispatch sends each device's rows (a 256 KiB payload here) into a
receive buffer XLA sizes statically for the worst case (1 MiB: every row of
all 8 devices). The step report's notes carry the collectives' ragged note,
read from a hand-written program, so that buffer is named where the step's
memory is.
"""

import types

from nnx_introspect._step.report_render import _program_notes
from nnx_introspect._xla.collectives import read_collectives

AXES = (("fsdp", 8),)
DISPATCH = 256 * 256 * 4  # the send buffer f32[256,256], all of it sent
WORST = 1024 * 256 * 4  # the receive buffer f32[1024,256]

PROGRAM = (
    "HloModule jit_moe, num_partitions=8\n\n"
    "ENTRY %main (x: f32[256,256], o: s32[8]) -> f32[1024,256] {\n"
    "  %x = f32[256,256]{1,0} parameter(0)\n"
    "  %o = s32[8]{0} parameter(1)\n"
    "  %zero = f32[] constant(0)\n"
    "  %buf = f32[1024,256]{1,0} broadcast(%zero), dimensions={}\n"
    "  ROOT %r = f32[1024,256]{1,0} ragged-all-to-all(%x, %buf, %o, %o, %o, %o), "
    "channel_id=1, replica_groups={{0,1,2,3,4,5,6,7}}\n}\n"
)


def _notes(collectives: object) -> list[str]:
    program = types.SimpleNamespace(
        flops=float("nan"),
        loop_trips=(),
        collective_wire_bytes=None,
        collectives=collectives,
    )
    report = types.SimpleNamespace(
        program=program, num_devices=8, roofline=None, measured=None
    )
    return _program_notes(report)


def test_the_ragged_note_names_the_worst_case_buffer() -> None:
    found = read_collectives(PROGRAM, AXES)
    (row,) = found.rows
    assert (row.nbytes, row.worst_case_receive_bytes) == (DISPATCH, WORST)
    notes = _notes(found)
    ragged = [n for n in notes if n.startswith("Ragged all-to-all")]
    assert ragged == [found.ragged_note()]
    # 1 MiB over 256 KiB, by hand: 4x
    assert "1 MiB for a 256 KiB payload (4.0x; 1 run)" in ragged[0]
    assert "statically for the worst case" in ragged[0]


def test_no_ragged_all_to_all_no_note() -> None:
    plain = PROGRAM.replace(
        "ragged-all-to-all(%x, %buf, %o, %o, %o, %o)",
        "all-to-all(%buf), dimensions={0}",
    )
    found = read_collectives(plain, AXES)
    assert [row.kind for row in found.rows] == ["all-to-all"]
    notes = _notes(found)
    assert not any(n.startswith("Ragged") for n in notes)
    assert not any(n.startswith("Ragged") for n in _notes(None))

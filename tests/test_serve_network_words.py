"""A serving report does not tell the user to override a rate it takes no argument for.

The GPU network rate's source says how a step report overrides it
(``network_bytes_per_second``, the step command's ``--network-bandwidth``);
``serve_memory_report`` and ``nnx-introspect serve`` take no such argument,
so the serving notes leave that remark out. Stand-in rooflines, no compile.
"""

from nnx_introspect._accelerators import NETWORK_OVERRIDE, hardware_for
from nnx_introspect._roofline.estimate import roofline
from nnx_introspect._serve.timing import ServeTime


def test_the_serving_notes_leave_out_the_steps_override() -> None:
    h100 = hardware_for("h100-16")  # two hosts: the network note is stated
    est = roofline(
        flops=1e12,
        bytes_accessed=1e9,
        comm_bytes_by_axis={},
        mesh_axes=(("tp", 16),),
        hardware=h100,
        dtype="bf16",
    )
    # the roofline's own assumptions say how a step overrides the rate
    assert any(NETWORK_OVERRIDE in a for a in est.assumptions)
    timing = ServeTime(
        decode=est, prefill=est, sequences=8, replicas=1, read_bytes=10**9
    )
    notes = " ".join(timing.basis)
    assert "NIC per GPU" in notes  # the network's source is still named
    assert "network_bytes_per_second" not in notes

"""How much of a program's communication its compute hides, as the schedule runs it.

An asynchronous collective is in flight from its start to its done; the
compute the schedule places between them
(:mod:`~nnx_introspect._xla.collectives.overlap`'s windows) runs meanwhile.
:func:`hidden_comm_seconds` takes, for each such collective:

* its time: its wire bytes over the bandwidth of its mesh axes' links, the
  same rate its communication term uses (:class:`~nnx_introspect._roofline.
  estimate.CommTerm`);
* the compute in its window: each instruction's time as the time model gives
  it (:func:`~nnx_introspect._roofline.timing.program_time`: the longest of
  its terms, at least the floor, plus its launch), every run counted;

and hides ``min(its time, the compute in its window)``. Several collectives
in flight together share the compute: each stretch between two consecutive
starts or dones hides the collectives in flight over it in the order they
started, the first taking what it still needs before the next gets what is
left, so no instruction's time hides two collectives (but for a loop run
inside a window: its body's instructions count there, and hide the body's own
collectives as well). What no compute hides is exposed: it adds to the
step's time. A synchronous collective hides nothing, nor does one whose window
could not be read, nor one over device groups that are not whole mesh axes:
all of their time is exposed.
"""

import dataclasses
from collections.abc import Sequence

from nnx_introspect._accelerators import Hardware
from nnx_introspect._roofline.estimate import CommTerm
from nnx_introspect._roofline.timing import TimeConstants, _op_times
from nnx_introspect._xla import DCN_MARK, OpWork, Work

__all__ = ["CommOverlap", "hidden_comm_seconds", "op_seconds"]


@dataclasses.dataclass(frozen=True)
class CommOverlap:
    """The communication the compute hides.

    Attributes:
        hidden_seconds: Communication time hidden behind compute.
        windowed_seconds: The time of the asynchronous collectives whose
            windows were read (the most that could be hidden).
        windows: How many of them.
    """

    hidden_seconds: float
    windowed_seconds: float
    windows: int


def op_seconds(op: OpWork, c: TimeConstants, hardware: Hardware, peak: float) -> float:
    """One run of ``op``'s time, as :func:`program_time` counts it.

    Its launch, plus the longest of its terms (at least the floor); an
    unfused update's tiles at the updates' rate. Collectives, asynchronous
    copies and loops' control are no compute: 0.

    Example:
        >>> from nnx_introspect._accelerators.hardware import hardware_for
        >>> from nnx_introspect._roofline.timing import DATA_SHEET
        >>> h100 = hardware_for("h100-1")
        >>> peak = h100.peak_flops_per_second("bf16")
        >>> op_seconds(OpWork("matmul", peak, 0.0, 0, None, 1), DATA_SHEET, h100, peak)
        1.0
    """
    if op.kind in ("collective", "async", "loop"):
        return 0.0
    if op.kind == "update":
        rate = c.update_fraction * hardware.hbm_bytes_per_second
        return c.launch_seconds + op.hbm_bytes / rate
    times = _op_times(op, c, hardware, peak)
    return c.launch_seconds + max(max(times.values()), c.floor_seconds)


def hidden_comm_seconds(
    work: Work,
    comm: Sequence[CommTerm],
    hardware: Hardware,
    constants: TimeConstants,
    *,
    dtype: str = "bf16",
) -> CommOverlap:
    """The communication ``work``'s compute hides (see the module's text).

    Args:
        work: The program's work, its windows read
            (:func:`~nnx_introspect._xla.collectives.overlap.windowed_work`).
        comm: The estimate's communication terms, whose rates time each
            collective.
        hardware: One device of the target.
        constants: The time model's rates.
        dtype: The program's matmul dtype (``f32`` where the chip has no
            peak for it).

    Example:
        >>> from nnx_introspect._accelerators.hardware import hardware_for
        >>> from nnx_introspect._roofline.timing import DATA_SHEET
        >>> from nnx_introspect._xla.hlo.work import CommWindow
        >>> h100 = hardware_for("h100-8")
        >>> peak = h100.peak_flops_per_second("bf16")
        >>> work = Work(
        ...     (),
        ...     windows=(CommWindow("ag", ("tp",), 900e9, 0, 1),),
        ...     stretches=((OpWork("matmul", 0.5 * peak, 0.0, 0, None, 1),),),
        ... )
        >>> term = CommTerm(("tp",), 8, 900 * 10**9, "nvlink", 1, 450e9, 2.0)
        >>> hidden_comm_seconds(work, [term], h100, DATA_SHEET)  # 2 s, 0.5 s of compute
        CommOverlap(hidden_seconds=0.5, windowed_seconds=2.0, windows=1)
    """
    try:
        peak = hardware.peak_flops_per_second(dtype)
    except ValueError:
        peak = hardware.peak_flops_per_second("f32")
    compute = [
        sum(op.count * op_seconds(op, constants, hardware, peak) for op in stretch)
        for stretch in work.stretches
    ]
    rates = {(t.axes, t.link == "dcn"): t.bytes_per_second for t in comm}
    left: dict[int, float] = {}
    for i, window in enumerate(work.windows):
        across = bool(window.axes) and all(a.endswith(DCN_MARK) for a in window.axes)
        axes = tuple(a.removesuffix(DCN_MARK) for a in window.axes)
        rate = rates.get((axes, across))
        if rate:
            left[i] = window.wire_bytes / rate
    windowed = sum(left.values())
    hidden = 0.0
    for s, budget in enumerate(compute):
        for i, window in enumerate(work.windows):  # in the order they start
            if i in left and window.first <= s < window.last and budget > 0:
                take = min(left[i], budget)
                left[i] -= take
                budget -= take
                hidden += take
    return CommOverlap(hidden, windowed, len(left))

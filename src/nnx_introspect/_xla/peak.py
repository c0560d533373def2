"""What :func:`~nnx_introspect._xla.dump.read_peak` returns: the peak and its buffers.

Plain records of XLA's peak of one compiled module, with no reading of files:
each buffer live at the peak (:class:`PeakBuffer`), the bytes live at every
program point (:class:`LiveCurve`) and the peak itself (:class:`PeakBuffers`).

Example:
    >>> PeakBuffers("cpu", "jit_f", 0, "x", 0, ()).buffers
    ()
"""

from dataclasses import dataclass

from nnx_introspect._xla.hlo import SourceLocation
from nnx_introspect._xla.hlo.lineage import Origin
from nnx_introspect._xla.hlo.phases import Phases

__all__ = ["LiveCurve", "PeakBuffer", "PeakBuffers"]


@dataclass(frozen=True)
class PeakBuffer:
    """One buffer live at the peak.

    Attributes:
        nbytes: the bytes of its slice of an allocation (XLA's buffer
            assignment), less any a larger slice live at the peak holds.
        shape: the array shape (``()`` for a tuple's index table).
        dtype: XLA's element type (``f32``, ``bf16``, ...; ``tuple`` for an index
            table).
        instruction: the HLO instruction that defines it.
        shape_index: its index in that instruction's (tuple) shape.
        opcode: the instruction's opcode (``fusion``, ``parameter``, ``dot``, ...).
        op_name: JAX's op name from the metadata, if any.
        source: the innermost frame, if the metadata carries one (the breakdown
            takes the innermost user frame of ``stack``).
        stack: every frame, innermost first.
        parameter: the entry parameter number when it is an entry parameter.
        parameter_index: the index inside that parameter's (tuple) shape.
        output_index: its index in the entry's output when it is (part of) it.
        allocation: the kind of XLA allocation that holds it (``parameter``,
            ``output``, ``maybe-live-out``, ``preallocated-temp``, ``constant``,
            ``thread-local``, ``temp``).
        memory_space: the memory space in its layout (``S(1)`` on XLA:TPU is
            its on-chip VMEM, outside the HBM figures); 0, the device's main
            memory, when the layout names none.
        aliases: the other values live at the peak in the same bytes (an operand
            written over in place, an alias), as ``name{index}``: no bytes.
        operands: its defining instruction's operands' names, in order.
        origin: where its bytes come from, its operands followed through
            copies, layout changes and collectives
            (:func:`~nnx_introspect._xla.hlo.lineage.origin`); ``None`` when
            not read.
        live_range: the program points of its value's first and last use
            (XLA's ``BufferLiveRange``), when read.
        empty: whether no value is live in its bytes at the peak: an argument's
            or output's allocation, held for the whole step, between its old
            value's last use and its new value's definition (the value it is
            for is ``instruction``).
        done_at: for an asynchronous collective's ``-start``, the program
            point of its ``-done``: it is in flight from ``live_range[0]`` to
            there.
    """

    nbytes: int
    shape: tuple[int, ...]
    dtype: str
    instruction: str
    shape_index: tuple[int, ...]
    opcode: str
    op_name: str | None
    source: SourceLocation | None
    stack: tuple[SourceLocation, ...]
    parameter: int | None
    parameter_index: tuple[int, ...] | None
    output_index: tuple[int, ...] | None
    allocation: str
    memory_space: int = 0
    aliases: tuple[str, ...] = ()
    operands: tuple[str, ...] = ()
    origin: Origin | None = None
    live_range: tuple[int, int] | None = None
    empty: bool = False
    done_at: int | None = None

    @property
    def is_output(self) -> bool:
        """Whether the buffer is (part of) the entry computation's output."""
        return self.output_index is not None


@dataclass(frozen=True)
class LiveCurve:
    """Bytes live at each program point of the step, as XLA scheduled it.

    A value is live from the point its instruction runs to its last use,
    inclusive (``start-end`` in XLA's live-range dump), in its slice of an
    allocation (XLA's buffer assignment); the bytes at a point are those of
    the slices in use there, each counted once, and of the arguments' and
    outputs' allocations (see :class:`PeakBuffers` and
    :mod:`nnx_introspect._xla.slices`).

    Attributes:
        points: program points in the schedule (``HloLiveRange (max N)``).
        times: the program points kept, ascending (every one, or at most
            ``max_points`` after downsampling).
        live_bytes: the bytes live at each of ``times``; after downsampling,
            the most live at any point a kept point stands for.
        highest_time: the program point where the most bytes are in use.
        highest_bytes: the bytes live there.
    """

    points: int
    times: tuple[int, ...]
    live_bytes: tuple[int, ...]
    highest_time: int
    highest_bytes: int

    @property
    def downsampled(self) -> bool:
        """Whether fewer points are kept than the schedule has."""
        return len(self.times) < self.points


@dataclass(frozen=True)
class PeakBuffers:
    """XLA's peak of one compiled module and every buffer live there.

    Attributes:
        backend: ``cpu``, ``gpu`` or ``tpu``.
        module: the module's name (``jit_step``).
        peak_time: the program point of the peak, as XLA's live-range dump numbers it.
        peak_instruction: the instruction scheduled at that point.
        peak_bytes: the most bytes in use at one point, each slice of an
            allocation once; the buffers add up to it exactly.
        buffers: the buffers live at the peak, largest first as XLA lists them.
        curve: the bytes live at every program point, or ``None`` when not read.
        xla_peak_time: the point XLA's live-range dump names its peak, when read.
        xla_peak_bytes: the bytes XLA lists live there.
        phases: where the backward pass and the optimizer update begin in
            the schedule, when read.

    The peak is the point where the most bytes are in use by
    :mod:`nnx_introspect._xla.slices` (each slice of an allocation once; the
    arguments' and outputs' allocations at every point; XLA's
    ``peak_memory_in_bytes`` on XLA:GPU and XLA:TPU): XLA's own point ("Live
    ranges at N (peak)") when it ties. XLA's own figure is neither a floor nor
    the truth: its sweep (``HloLiveRange::ComputePeakMemoryMoment``) sizes a
    value by its defining instruction's whole shape, so bytes two values share
    count twice and a multi-output fusion's outputs as the tuple's 8-byte
    pointers. ``xla_peak_*`` keep XLA's point and figure.
    """

    backend: str
    module: str
    peak_time: int
    peak_instruction: str
    peak_bytes: int
    buffers: tuple[PeakBuffer, ...]
    curve: LiveCurve | None = None
    xla_peak_time: int | None = None
    xla_peak_bytes: int | None = None
    phases: Phases | None = None

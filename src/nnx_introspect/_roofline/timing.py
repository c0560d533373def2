"""One time per program: the compiled program's instructions at calibrated rates.

:func:`program_time` turns a program's :class:`~nnx_introspect._xla.hlo.work.Work`
(every instruction it runs, with its matmul FLOPs, vector FLOPs, HBM bytes and
XLA:TPU's own cycle estimate) into one time with an error bar:

* **within an instruction, its units overlap**: an instruction takes the
  longest of its matmul FLOPs at the matrix unit's rate (on XLA:TPU, where
  the compiler states its cycle estimate, that estimate instead, capped at
  the instruction's data-sheet roofline: the chip ran attention fusions over
  prompt-by-prompt scores and int8 matmuls 2-3x faster than XLA:TPU's cycles
  say, never slower than the roofline), its vector FLOPs at the vector
  unit's, its HBM bytes at HBM's rate, plus a fixed cost per launch;
* **instructions run one after another**: a TPU core runs one fusion at a
  time, so the program's time is the sum over its instructions, each as often
  as its loops run it;
* **asynchronous copies** (XLA:TPU's prefetches into on-chip memory and
  evictions from it) overlap the instructions around them: the program
  waits for a share of their bytes' time at the data-sheet bandwidth (on a
  v5e chip measured in its profile, the time of the copies' ``-done``
  halves);
* **Pallas kernels** (ops of kind ``"kernel"``: their FLOPs from their own
  estimate or a rule) run at a rate of their own, a share of the dense peak
  fitted on kernel programs timed on the chip
  (``benchmarks/calibration/kernel_fit.py``), and an attention kernel whose
  head dim ``D`` is narrower than the matrix unit (128 on a v5e chip) at
  ``D`` of its width; a kind with no chip measured times them at the
  data-sheet matmul rate, and says so;
* **collectives** are timed at their links' data-sheet bandwidth, uncalibrated
  (a single chip has no links to calibrate them on: the words say so), and
  added but for what the compute scheduled while an asynchronous one is in
  flight hides (:mod:`~nnx_introspect._roofline.overlap`).

The rates are **calibrated per device kind** (:data:`CONSTANTS`): a fraction of
the data-sheet matmul peak and HBM bandwidth, the seconds per cycle of the
compiler's estimate, the cap on them, on-chip rates and a cost per launch,
some measured instruction by instruction in the chip's profile
(``benchmarks/calibration/timefit.py pins``), the rest fitted on one half of
the chip table (``benchmarks/calibration/timefit.py fit``) and checked on the
other half, whose error is the error bar. A kind with no chip to calibrate on
(every GPU, every TPU but v5e) keeps data-sheet rates and no launch cost, and
its estimate says "uncalibrated".
"""

import dataclasses
from typing import Any, Final

from nnx_introspect._accelerators import Hardware
from nnx_introspect._roofline.kernel_time import kernel_seconds, kernel_words
from nnx_introspect._xla import OpWork, Work

__all__ = [
    "CONSTANTS",
    "ProgramTime",
    "TimeConstants",
    "constants_for",
    "kernel_words",
    "program_time",
    "same_time",
]


@dataclasses.dataclass(frozen=True)
class TimeConstants:
    """The rates a device kind's programs run at: the time model's constants.

    Attributes:
        version: The constants' name and version (``"tpu-v5e/7"``): a report
            names it, and a new fit gets a new one.
        calibrated: Whether a chip of this kind was measured to fit them.
        matmul_fraction: The share of the dtype's dense data-sheet peak a
            matmul instruction runs at where the compiler states no cycles
            for it (every one on a GPU; on a TPU, the Mosaic grouped-matmul
            kernels: 0.84 on a v5e chip).
        vector_flops_per_second: The vector unit's rate, in the vector FLOPs
            :mod:`~nnx_introspect._xla.hlo.work` counts; ``None``: not timed.
        hbm_fraction: The share of the data-sheet HBM bandwidth an
            instruction's HBM bytes move at.
        seconds_per_cycle: Seconds per cycle of XLA:TPU's estimate;
            ``None``: the estimate is not used.
        launch_seconds: A fixed cost per instruction run.
        program_seconds: A fixed cost per run of the program (its launch,
            its arguments' and outputs' bookkeeping, the wait for its end).
        floor_seconds: The least time any instruction run takes (a short
            instruction's issue and synchronisation), overlapping its work.
        cycles_cap: XLA:TPU's cycles count at most this many times the
            instruction's data-sheet roofline (its matmul FLOPs at the peak or
            its HBM bytes at the data-sheet bandwidth, the longer); ``None``:
            uncapped.
        uncosted_flops_per_second: The rate of the vector work of
            instructions XLA:TPU's cost model gives up on (kind
            ``"uncosted"``); ``None``: timed as any other.
        async_share: The share of asynchronous copies' HBM time (their bytes
            at the data-sheet bandwidth) not hidden by the instructions
            around them: the time the program waits for them.
        update_fraction: The share of the data-sheet HBM bandwidth at which
            an unfused in-place update (kind ``"update"``) moves the tiles it
            touches.
        onchip_cycles_fraction: XLA:TPU's cycles of an instruction that runs
            no matmul and moves no HBM bytes (a vector fusion whose operands
            and results all stay in on-chip memory, which the cap cannot
            bound: its roofline is zero) count at this fraction of
            ``seconds_per_cycle``; the chip's profile ran such fusions at
            78 ps per cycle, 0.12 of a cycle at the chip's clock.
        onchip_bytes_per_second: The rate at which a memory instruction
            wholly in on-chip memory (a copy, transpose, relayout, gather or
            sort between on-chip buffers:
            :attr:`~nnx_introspect._xla.hlo.work.OpWork.chip_bytes`) writes
            its result, where that takes longer than its cycles say (those
            with no cycles stated: always); ``None``: timed by its cycles
            alone.
        buffer_seconds: A fixed cost per run for each array the program
            takes or returns (:attr:`~nnx_introspect._xla.hlo.work.Work.buffers`):
            the chip's profile put each run's host time beyond the device's
            at about 0.85 ms plus 2.1 us per array taken or returned.
        error: The error bar: on the half of the chip table the fit never
            saw, 9 in 10 programs ran within this fraction of their estimate;
            ``None`` when uncalibrated.
        programs: Programs of the chip table the constants were fitted on.
        held_out: Programs of the chip table they were checked on.
        source: Where the fit and its table are.
        compiler: The compiler whose programs the constants were fitted on
            and held against (``"libtpu 0.0.42.1"``); ``""`` for data-sheet
            constants. A program another compiler wrote gets no error bar
            (:attr:`ProgramTime.compiled_by`).
        kernel_fraction: The share of the dtype's dense data-sheet peak at
            which Pallas kernels' FLOPs run (ops of kind ``"kernel"``);
            ``None``: at ``matmul_fraction``, uncalibrated for kernels.
        mxu_width: The matrix unit's width: an attention kernel whose head
            dim ``D`` is narrower runs at ``D / mxu_width`` of the kernels'
            rate (its matmuls contract over ``D`` or produce ``D``
            columns); ``None``: no such rule.
        kernel_programs: Kernel programs timed on the chip that
            ``kernel_fraction`` was fitted on.
        kernel_held_out: Kernel programs it was checked on.
        kernel_median_error: On those, the median of ``|measured / estimate
            - 1|``; ``None`` when uncalibrated for kernels.
        kernel_worst_error: On those, the largest.
        kernel_source: Where the kernels' fit and its data are.
    """

    version: str
    calibrated: bool
    matmul_fraction: float
    vector_flops_per_second: float | None
    hbm_fraction: float
    seconds_per_cycle: float | None
    launch_seconds: float
    async_share: float
    error: float | None
    uncosted_flops_per_second: float | None = None
    floor_seconds: float = 0.0
    program_seconds: float = 0.0
    cycles_cap: float | None = None
    update_fraction: float = 1.0
    onchip_cycles_fraction: float = 1.0
    buffer_seconds: float = 0.0
    onchip_bytes_per_second: float | None = None
    programs: int = 0
    held_out: int = 0
    source: str = ""
    compiler: str = ""
    kernel_fraction: float | None = None
    mxu_width: int | None = None
    kernel_programs: int = 0
    kernel_held_out: int = 0
    kernel_median_error: float | None = None
    kernel_worst_error: float | None = None
    kernel_source: str = ""

    def json_data(self, *, kernels: bool = False) -> dict[str, Any]:
        """Every constant as JSON data; the kernels' only where ``kernels``.

        A program without Pallas kernels states no kernel constants (its
        data as before them).

        Example:
            >>> CONSTANTS["v5e"].json_data()["version"]
            'tpu-v5e/7'
            >>> "kernel_fraction" in CONSTANTS["v5e"].json_data()
            False
            >>> CONSTANTS["v5e"].json_data(kernels=True)["mxu_width"]
            128
        """
        data = dataclasses.asdict(self)
        if kernels:
            return data
        return {k: v for k, v in data.items() if k not in _KERNEL_CONSTANTS}

    @property
    def kernels_calibrated(self) -> bool:
        """Whether Pallas kernels' rate was fitted on a chip of this kind.

        Example:
            >>> CONSTANTS["v5e"].kernels_calibrated, DATA_SHEET.kernels_calibrated
            (True, False)
        """
        return self.kernel_fraction is not None and self.kernel_median_error is not None


_KERNEL_CONSTANTS: Final = frozenset(
    f.name
    for f in dataclasses.fields(TimeConstants)
    if f.name.startswith("kernel_") or f.name == "mxu_width"
)


DATA_SHEET = TimeConstants(
    version="data-sheet/1",
    calibrated=False,
    matmul_fraction=1.0,
    vector_flops_per_second=None,
    hbm_fraction=1.0,
    seconds_per_cycle=None,
    launch_seconds=0.0,
    async_share=0.0,
    error=None,
    source="data-sheet peaks (Hardware.sources), no chip measured",
)
"""The constants of a kind with no chip to calibrate on: data-sheet rates."""

CONSTANTS: dict[str, TimeConstants] = {
    "v5e": TimeConstants(
        version="tpu-v5e/7",
        calibrated=True,
        matmul_fraction=0.8428,
        vector_flops_per_second=None,
        hbm_fraction=0.8312,
        seconds_per_cycle=6.649e-10,
        launch_seconds=8.999e-07,
        async_share=0.8597,
        error=0.10,
        uncosted_flops_per_second=9.860e09,
        program_seconds=9.264e-04,
        cycles_cap=1.203,
        update_fraction=0.2008,
        onchip_cycles_fraction=0.11755,
        buffer_seconds=2.145e-06,
        onchip_bytes_per_second=4.566e11,
        programs=99,
        held_out=97,
        compiler="libtpu 0.0.42.1",
        source=(
            "benchmarks/timefit.py fit benchmarks/timecal-table.json "
            "benchmarks/timecal-unseen.json benchmarks/timecal-unseen2.json "
            "benchmarks/timecal-unseen3.json benchmarks/timecal-unseen4.json "
            "benchmarks/timecal-unseen5.json benchmarks/timecal-unseen6.json, "
            "its device rates and the asynchronous copies' waits from "
            "benchmarks/timecal-pins.json (TPU v5e, libtpu 0.0.42.1; "
            "docs/accuracy.md)"
        ),
        kernel_fraction=0.6559,
        mxu_width=128,
        kernel_programs=11,
        kernel_held_out=7,
        kernel_median_error=0.021,
        kernel_worst_error=0.335,
        kernel_source=(
            "benchmarks/calibration/kernel_fit.py on "
            "benchmarks/calibration/data/kernel-rates-v5e-0.0.42.1.json and "
            "kernel-hlo-v5e-0.0.42.1.json.gz (TPU v5e, libtpu 0.0.42.1; "
            "docs/accuracy.md, Pallas kernels)"
        ),
    ),
}
"""The calibrated constants by hardware family (``Hardware.family``)."""


def constants_for(hardware: Hardware) -> TimeConstants:
    """The time model's constants for ``hardware``: calibrated, else the data sheet.

    Example:
        >>> from nnx_introspect._accelerators.hardware import hardware_for
        >>> constants_for(hardware_for("v5e-8")).calibrated
        True
        >>> constants_for(hardware_for("h100-8")).version
        'data-sheet/1'
    """
    return CONSTANTS.get(hardware.family, DATA_SHEET)


@dataclasses.dataclass(frozen=True)
class ProgramTime:
    """One program's time from its instructions: the point estimate and its terms.

    Attributes:
        seconds: The estimate: the instructions' times summed, plus the
            unhidden share of asynchronous copies, plus the communication no
            compute hides (:attr:`comm_exposed_seconds`).
        error: The error bar as a fraction (``0.09``: ±9%), or ``None``
            (uncalibrated).
        constants: The :class:`TimeConstants` used.
        matmul_seconds: Time of the instructions bound by their matmuls.
        vector_seconds: Time of those bound by vector work.
        memory_seconds: Time of those bound by HBM bytes.
        cycles_seconds: Time of those bound by XLA:TPU's cycle estimate.
        launch_seconds: The launch costs together (the program's fixed cost
            included), and what instructions shorter than the floor add up to.
        uncosted_seconds: Time of the instructions XLA:TPU could not cost,
            at their fitted rate.
        async_seconds: The unhidden share of asynchronous copies.
        comm_seconds: Communication, all of it (uncalibrated).
        comm_hidden_seconds: The share of it hidden behind the compute
            scheduled while asynchronous collectives are in flight.
        comm_windows: The asynchronous collectives whose windows were read
            (0: none; all communication is added).
        launches: Instructions run, loops' trips included.
        kernels: The Pallas kernels timed (their FLOPs from their own
            estimate or a rule) at the kernels' rate
            (:attr:`TimeConstants.kernel_fraction`; :attr:`Work.kernels
            <nnx_introspect._xla.Work>`).
        uncosted_kernels: The Pallas kernels whose FLOPs are not known:
            their matmul time is missing from the estimate.
        bounded_kernels: Those of ``kernels`` whose FLOPs are an upper bound.
        compiled_by: The compiler that wrote the program (``"libtpu
            0.0.52"``), where known. When it is not the one the constants
            were fitted on (:attr:`TimeConstants.compiler`), ``error`` is
            ``None``: no error bar is claimed for that compiler's programs.
    """

    seconds: float
    error: float | None
    constants: TimeConstants
    matmul_seconds: float
    vector_seconds: float
    memory_seconds: float
    cycles_seconds: float
    launch_seconds: float
    async_seconds: float
    comm_seconds: float
    launches: int
    uncosted_seconds: float = 0.0
    kernels: tuple[str, ...] = ()
    uncosted_kernels: tuple[str, ...] = ()
    bounded_kernels: tuple[str, ...] = ()
    compiled_by: str | None = None
    comm_hidden_seconds: float = 0.0
    comm_windows: int = 0

    @property
    def comm_exposed_seconds(self) -> float:
        """The communication added to the estimate: what no compute hides."""
        return self.comm_seconds - self.comm_hidden_seconds

    @property
    def other_compiler(self) -> bool:
        """Whether another compiler wrote the program than the constants' own."""
        known = self.constants.compiler and self.compiled_by
        return bool(known) and self.compiled_by != self.constants.compiler

    @property
    def calibrated(self) -> bool:
        """Whether the estimate's constants were fitted on a chip of its kind."""
        return self.constants.calibrated and self.comm_seconds == 0

    @property
    def words(self) -> str:
        """The estimate with its basis: ``"111 ms (±9%, calibrated on ...)"``.

        Example:
            >>> from nnx_introspect._accelerators.hardware import hardware_for
            >>> from nnx_introspect._xla import OpWork, Work
            >>> work = Work((OpWork("matmul", 197e9, 0.0, 0, None, 1),))
            >>> print(program_time(work, hardware_for("h100-1"), dtype="bf16").words)
            199 us (uncalibrated: data-sheet peaks, no chip of this kind measured)
        """
        return f"{_duration(self.seconds)} ({self.basis})"

    @property
    def constants_basis(self) -> str:
        """The error bar and what it was calibrated on, collectives left out.

        Example:
            >>> from nnx_introspect._accelerators.hardware import hardware_for
            >>> from nnx_introspect._xla import OpWork, Work
            >>> work = Work((OpWork("matmul", 1e9, 0.0, 0, None, 1),))
            >>> t = program_time(work, hardware_for("v5e-8"), comm_seconds=1e-3)
            >>> t.constants_basis
            '±10%, calibrated on TPU v5e from 99 programs, constants tpu-v5e/7'
        """
        c = self.constants
        if not c.calibrated or c.error is None:
            return "uncalibrated: data-sheet peaks, no chip of this kind measured"
        kind = c.version.split("/")[0][4:]
        if self.other_compiler:
            return (
                f"calibrated on TPU {kind} from {c.programs} programs compiled by "
                f"{c.compiler}, constants {c.version}; this program was compiled "
                f"by {self.compiled_by}, whose programs were never timed on a "
                "chip: no error bar is claimed"
            )
        if self.error is None:  # a program with Pallas kernels
            return (
                f"calibrated on TPU {kind} from {c.programs} programs without "
                f"Pallas kernels, constants {c.version}"
            )
        return (
            f"±{c.error:.0%}, calibrated on TPU {kind} "
            f"from {c.programs} programs, constants {c.version}"
        )

    @property
    def basis(self) -> str:
        """How far to trust it: the error bar and what it was calibrated on."""
        c = self.constants
        text = self.constants_basis
        hidden, exposed = self.comm_hidden_seconds, self.comm_exposed_seconds
        if self.comm_seconds and (hidden or (c.calibrated and c.error)):
            text += f"; its {_duration(self.comm_seconds)} of collectives are "
            text += "uncalibrated (data-sheet links, " + (
                f"{_duration(hidden)} hidden behind the compute scheduled while "
                f"they are in flight, {_duration(exposed)} exposed)"
                if self.comm_windows
                else "not overlapped)"
            )
        return text + kernel_words(
            self.kernels, self.uncosted_kernels, self.bounded_kernels, c
        )

    def json_data(self) -> dict[str, Any]:
        """The estimate, its terms and its constants as JSON data."""
        data = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name != "constants"
            and not f.name.endswith(("kernels", "hidden_seconds", "windows"))
        }
        if self.comm_seconds:  # a program without collectives: as before
            data |= {"comm_hidden_seconds": self.comm_hidden_seconds}
            data |= {"comm_exposed_seconds": self.comm_exposed_seconds}
            data |= {"comm_windows": self.comm_windows}
        for key in ("kernels", "uncosted_kernels", "bounded_kernels"):
            if getattr(self, key):  # a program without kernels: as before them
                data[key] = list(getattr(self, key))
        data["constants"] = self.constants.json_data(kernels=bool(self.kernels))
        data["calibrated"] = self.calibrated
        data["words"] = self.words
        return data


def _duration(seconds: float) -> str:
    """``0.1113`` -> ``"111 ms"``: three significant figures."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def _cycles_seconds(
    op: OpWork, c: TimeConstants, peak: float, hbm_bytes_per_second: float
) -> float:
    """XLA:TPU's cycles of ``op`` in seconds, capped at its roofline's multiple.

    An instruction with no roofline (no matmul, no HBM bytes) has its cycles
    at :attr:`TimeConstants.onchip_cycles_fraction` instead.
    """
    if c.seconds_per_cycle is None or op.cycles is None:
        return 0.0
    cycles = op.cycles * c.seconds_per_cycle
    roof = max(op.matmul_flops / peak, op.hbm_bytes / hbm_bytes_per_second)
    if roof == 0:
        # all on chip, no matmul: nothing bounds the cycles but the chip's rate
        return cycles * c.onchip_cycles_fraction
    if c.cycles_cap is not None and cycles:
        cycles = min(cycles, c.cycles_cap * roof)
    return cycles


def program_time(
    work: Work,
    hardware: Hardware,
    *,
    dtype: str = "bf16",
    comm_seconds: float = 0.0,
    comm_hidden: tuple[float, int] = (0.0, 0),
    constants: TimeConstants | None = None,
    compiled_by: str | None = None,
) -> ProgramTime:
    """The time of one run of a program whose work is ``work``, on ``hardware``.

    Args:
        work: The program's work (:func:`~nnx_introspect._xla.hlo.work.program_work`).
        hardware: One device of the target.
        dtype: The program's matmul dtype, whose dense peak its matmuls run at
            (``f32`` where the chip has no peak for it).
        comm_seconds: The program's communication time (its collectives'
            wire bytes over their links).
        comm_hidden: Of it, the seconds compute hides and the asynchronous
            collectives whose windows were read (:mod:`~nnx_introspect.
            _roofline.overlap`); the rest is added.
        constants: The rates; default :func:`constants_for` ``hardware``.
        compiled_by: The compiler that wrote the program (``"libtpu
            0.0.52"``); where it is not the constants' own
            (:attr:`TimeConstants.compiler`), no error bar is claimed.

    Returns:
        The :class:`ProgramTime`.

    Example:
        >>> from nnx_introspect._accelerators.hardware import hardware_for
        >>> from nnx_introspect._xla import OpWork, Work
        >>> h100 = hardware_for("h100-1")
        >>> work = Work((
        ...     OpWork("matmul", h100.peak_flops_per_second("bf16"), 0.0, 0, None, 2),
        ...     OpWork("vector", 0.0, 1e6, h100.hbm_bytes_per_second, None, 1),
        ... ))
        >>> t = program_time(work, h100)
        >>> t.seconds, t.matmul_seconds, t.memory_seconds  # 2 s of matmul + 1 s of HBM
        (3.0, 2.0, 1.0)
    """
    c = constants if constants is not None else constants_for(hardware)
    try:
        peak = hardware.peak_flops_per_second(dtype)
    except ValueError:
        peak = hardware.peak_flops_per_second("f32")
    terms = {
        "matmul": 0.0,
        "vector": 0.0,
        "memory": 0.0,
        "cycles": 0.0,
        "uncosted": 0.0,
    }
    launch = hidden = 0.0
    for op in work.ops:
        if op.kind == "async":
            hidden += op.count * op.hbm_bytes / hardware.hbm_bytes_per_second
            continue
        launch += op.count * c.launch_seconds
        if op.kind == "loop":
            continue
        if op.kind == "update":
            # whole tiles read and written, at the updates' own rate
            update = op.hbm_bytes / (c.update_fraction * hardware.hbm_bytes_per_second)
            terms["memory"] += op.count * update
            continue
        times = _op_times(op, c, hardware, peak)
        bound = max(times, key=lambda name: times[name])
        if times[bound] < c.floor_seconds:
            launch += op.count * (c.floor_seconds - times[bound])
        terms[bound] += op.count * times[bound]
    unhidden = c.async_share * hidden
    launch += c.program_seconds + c.buffer_seconds * work.buffers
    total = sum(terms.values()) + launch + unhidden + comm_seconds - comm_hidden[0]
    other = bool(c.compiler and compiled_by) and compiled_by != c.compiler
    # the error bar is the table's, whose programs call no Pallas kernel
    claimed = not other and not work.kernels and not work.uncosted_kernels
    return ProgramTime(
        seconds=total,
        error=c.error if claimed else None,
        constants=c,
        matmul_seconds=terms["matmul"],
        vector_seconds=terms["vector"],
        memory_seconds=terms["memory"],
        cycles_seconds=terms["cycles"],
        launch_seconds=launch,
        async_seconds=unhidden,
        comm_seconds=comm_seconds,
        launches=work.launches,
        uncosted_seconds=terms["uncosted"],
        kernels=work.kernels,
        uncosted_kernels=work.uncosted_kernels,
        bounded_kernels=work.bounded_kernels,
        compiled_by=compiled_by,
        comm_hidden_seconds=comm_hidden[0],
        comm_windows=comm_hidden[1],
    )


def _op_times(
    op: OpWork, c: TimeConstants, hardware: Hardware, peak: float
) -> dict[str, float]:
    """One run of ``op``'s time by each term that may bound it."""
    matmul_rate = c.matmul_fraction * peak
    hbm_rate = c.hbm_fraction * hardware.hbm_bytes_per_second
    # where XLA:TPU states its cycles, they are its matrix unit's time:
    # FLOPs at a fraction of the peak only time what it did not cost
    cycled = c.seconds_per_cycle is not None and op.cycles is not None
    cycles = _cycles_seconds(op, c, peak, hardware.hbm_bytes_per_second)
    memory = op.hbm_bytes / hbm_rate
    if op.chip_bytes and c.onchip_bytes_per_second is not None:
        memory = max(memory, op.chip_bytes / c.onchip_bytes_per_second)
    if op.kind == "kernel":  # no cycles stated: FLOPs at the kernels' rate
        matmul = kernel_seconds(op, c, peak)
    else:
        matmul = 0.0 if cycled else op.matmul_flops / matmul_rate
    times = {
        "matmul": matmul,
        "memory": memory,
        "vector": 0.0
        if c.vector_flops_per_second is None
        else op.vector_flops / c.vector_flops_per_second,
        "cycles": cycles,
    }
    if op.kind == "uncosted" and c.uncosted_flops_per_second is not None:
        times["uncosted"] = op.vector_flops / c.uncosted_flops_per_second
    return times


def same_time(a: float, b: float, error: float | None) -> bool:
    """Whether two estimates are equal within the calibrated ``error``.

    Two candidates whose estimates differ by less than the error bar cannot be
    ranked by them; uncalibrated (``error`` ``None``) they are equal only when
    their estimates are.

    Example:
        >>> same_time(0.100, 0.105, 0.09), same_time(0.100, 0.150, 0.09)
        (True, False)
    """
    if error is None:
        return a == b
    return abs(a - b) <= error * max(a, b)

r"""The work of a compiled program, instruction by instruction: what a time model reads.

XLA's ``cost_analysis()`` gives one total of FLOPs and one of bytes accessed;
a program's time is not a function of those two totals (a step whose matmuls
run at 60% of the peak and a step of thousands of small vector fusions can
have the same totals). :func:`program_work` lists, for every instruction the
program runs (each fusion as one), what it asks of each unit of the chip:

* ``matmul_flops``: the FLOPs of its dots and convolutions (``2 x output
  elements x contracted size``; a grouped matmul, ``ragged_dot`` or XLA:TPU's
  Mosaic kernel of it, each row through its one group), the matrix unit's
  work (a GPU's tensor cores);
* ``vector_flops``: one per output element of each arithmetic or
  transcendental operation it fuses (one per input element of a reduction),
  the vector unit's work;
* ``hbm_bytes``: the bytes it reads from and writes to HBM, by the rules of
  :mod:`~nnx_introspect._xla.hlo.traffic` (operands XLA:TPU's memory-space
  assignment keeps on chip, ``S(1)``, do not cross HBM);
* ``cycles``: XLA:TPU's own cost model of the instruction
  (``estimated_cycles`` in its ``window_config``), where the compiler states
  one;
* ``chip_bytes``: for a memory instruction (a copy, a transpose) that moves
  no HBM bytes, its operands and result all in on-chip memory, the bytes of
  its result: on a v5e chip such copies of 4 MB and more ran at about 0.77 TB/s
  of their result, where XLA:TPU's cycles said a tenth of their time.

Each instruction runs as often as its loops say (a while loop's body once per
trip, :func:`~nnx_introspect._xla.hlo.loops.trip_count`; a conditional's
costliest branch once), and each trip of a loop is one more launch (its
condition and its bookkeeping). Asynchronous copies (``copy-start``,
``slice-start``: XLA:TPU's prefetches into on-chip memory) are their own kind,
``"async"``: they move HBM bytes while other instructions compute.

Identical instructions are counted together: the result is a short table of
``(kind, matmul FLOPs, vector FLOPs, HBM bytes, cycles, on-chip bytes) x
count``, the whole
input of :func:`~nnx_introspect._roofline.timing.program_time`.

Example:
    >>> from nnx_introspect._xla.hlo import parse_module
    >>> module = parse_module("\n".join([
    ...     "HloModule jit_f",
    ...     "",
    ...     "ENTRY %main (a: f32[8,16], b: f32[16,4]) -> f32[8,4] {",
    ...     "  %a = f32[8,16]{1,0} parameter(0)",
    ...     "  %b = f32[16,4]{1,0} parameter(1)",
    ...     "  %d = f32[8,4]{1,0} dot(%a, %b), lhs_contracting_dims={1},"
    ...     " rhs_contracting_dims={0}",
    ...     "  ROOT %e = f32[8,4]{1,0} exponential(%d)",
    ...     "}",
    ... ]))
    >>> work = program_work(module)
    >>> [(op.kind, op.matmul_flops, op.vector_flops, op.hbm_bytes) for op in work.ops]
    [('matmul', 1024.0, 0.0, 896), ('vector', 0.0, 32.0, 256)]

    The dot: ``2 x 32 x 16`` FLOPs, reading 512 + 256 B and writing 128 B; the
    exponential: 32 elements, 128 B in and out.
    >>> work.matmul_flops, work.launches
    (1024.0, 2)
"""

import dataclasses
import math
import re
from collections.abc import Iterator
from typing import Any, Final, Literal

from nnx_introspect._xla.hlo.flops import (
    ASYNC_COPIES,
    COLLECTIVES,
    body_of,
    dims_of,
    instruction_flops,
    shape_of,
)
from nnx_introspect._xla.hlo.instructions import Instruction
from nnx_introspect._xla.hlo.kernels import OWN_ESTIMATE, KernelCost, kernel_cost
from nnx_introspect._xla.hlo.module import Module
from nnx_introspect._xla.hlo.shapes import arrays, touched_tile_bytes
from nnx_introspect._xla.hlo.traffic import (
    bytes_moved,
    executed,
    hbm_bytes_of,
    moves_nothing,
)

__all__ = [
    "CommWindow",
    "OpKind",
    "OpWork",
    "Work",
    "instruction_work",
    "program_work",
    "ruled_kernel_flops",
    "work_from_json",
]

OpKind = Literal[
    "matmul",
    "vector",
    "memory",
    "update",
    "async",
    "collective",
    "loop",
    "uncosted",
    "kernel",
]
"""What an instruction mostly is: a matmul (it holds a dot or a convolution),
a Pallas kernel whose FLOPs are known (``"kernel"``: its own estimate's or a
rule's, :mod:`~nnx_introspect._xla.hlo.kernels`, timed at the kernels' own
rate),
vector work (it computes, without a matmul), a memory operation (a copy, a
slice, a fused update in place, a gather: it moves bytes and computes
nothing), an unfused ``dynamic-update-slice`` in place (``"update"``: it
moves the whole tiles it touches, read and written, at a rate of its own:
on a v5e chip a decode step's one-position update of a cache whose sequence
is its minor-most dimension took 144 us for 98 KB of elements, the time of
its 12.6 MB of touched tiles at a fifth of HBM's bandwidth; a scatter
XLA:TPU gives no cycles, per index the larger of its row and 512 B, read and
written, at the same rate), an
asynchronous copy, a collective, one trip of a loop's control, or an
instruction XLA:TPU's own cost model gives up on (``estimated_cycles`` at
its largest value: on a v5e chip such a fusion, a reduction emitted as a
sublane reduce-window over a long sequence's attention scores, ran 10x
slower than its bytes and FLOPs say)."""

UNCOSTED_CYCLES: Final = 2**62
"""At or over this many ``estimated_cycles`` (XLA:TPU writes ``INT64_MAX``),
the compiler could not cost the instruction."""

_CYCLES: Final = re.compile(r'"estimated_cycles":"(\d+)"')


@dataclasses.dataclass(frozen=True)
class OpWork:
    """One kind of instruction's work, and how many times the program runs it.

    Attributes:
        kind: What it is (:data:`OpKind`).
        matmul_flops: FLOPs of its dots and convolutions, one run.
        vector_flops: Its vector work, one run: an output element per
            arithmetic or transcendental operation, an input element per
            reduction.
        hbm_bytes: Bytes it reads from and writes to HBM, one run.
        cycles: XLA:TPU's ``estimated_cycles`` for it, one run; ``None`` where
            the compiler states none.
        count: How many times it runs: its copies in the program times their
            loops' trips.
        chip_bytes: The bytes of its result where it is a memory instruction
            wholly in on-chip memory (no HBM bytes); 0 otherwise.
        head_dim: The head dim ``D`` of an attention kernel (kind
            ``"kernel"``, :attr:`KernelCost.head_dim
            <nnx_introspect._xla.hlo.kernels.KernelCost>`); 0 otherwise.
    """

    kind: OpKind
    matmul_flops: float
    vector_flops: float
    hbm_bytes: int
    cycles: int | None
    count: int
    chip_bytes: int = 0
    head_dim: int = 0

    def json_data(self) -> list[Any]:
        """``[kind, matmul_flops, vector_flops, hbm_bytes, cycles, count, chip_bytes]``.

        An attention kernel has an eighth column, its ``head_dim``.

        Example:
            >>> OpWork("vector", 0.0, 8.0, 64, None, 3).json_data()
            ['vector', 0.0, 8.0, 64, None, 3, 0]
            >>> OpWork("kernel", 8.0, 0.0, 64, None, 1, head_dim=64).json_data()
            ['kernel', 8.0, 0.0, 64, None, 1, 0, 64]
        """
        data = [
            self.kind,
            self.matmul_flops,
            self.vector_flops,
            self.hbm_bytes,
            self.cycles,
            self.count,
            self.chip_bytes,
        ]
        return [*data, self.head_dim] if self.head_dim else data


@dataclasses.dataclass(frozen=True)
class CommWindow:
    """An asynchronous collective and the compute scheduled while it is in flight.

    Its compute is that of :attr:`Work.stretches` ``first`` to ``last - 1``:
    the instructions its computation runs between its start and its done
    (:mod:`~nnx_introspect._xla.collectives.overlap` reads them).

    Attributes:
        collective: Its row's name (:attr:`Collective.name
            <nnx_introspect._xla.collectives.Collective>`).
        axes: The mesh axes its groups span, keyed as the program's wire
            bytes are (:func:`~nnx_introspect._xla.collectives.axes_key`).
        wire_bytes: Bytes one device puts on the wire for it, every run of it
            together.
        first: The first stretch it is in flight over.
        last: One past the last (``first == last``: nothing is scheduled
            between its start and its done).

    Example:
        >>> CommWindow("all-gather-start.1", ("fsdp",), 96.0, 0, 2).json_data()
        ['all-gather-start.1', ['fsdp'], 96.0, 0, 2]
    """

    collective: str
    axes: tuple[str, ...]
    wire_bytes: float
    first: int
    last: int

    def json_data(self) -> list[Any]:
        """``[collective, axes, wire_bytes, first, last]``."""
        return [
            self.collective,
            list(self.axes),
            self.wire_bytes,
            self.first,
            self.last,
        ]


@dataclasses.dataclass(frozen=True)
class Work:
    """A program's work: every kind of instruction it runs, with its count.

    Attributes:
        ops: One :class:`OpWork` per distinct instruction, most matmul FLOPs,
            then most HBM bytes, first.
        unknown_trips: Loops whose trip count the program does not state
            (their bodies counted once).
        buffers: The arrays the program takes and returns (its entry's
            parameters and its result, tuples flattened): the runtime handles
            each one on every run.
        kernels: The Pallas kernels it runs whose FLOPs are counted (by
            their own estimate or a rule:
            :mod:`~nnx_introspect._xla.hlo.kernels`): its ops of kind
            ``"kernel"``, timed at the kernels' rate.
        uncosted_kernels: The Pallas kernels it runs whose FLOPs are not
            known (no estimate, no rule): their matmul FLOPs are missing.
        bounded_kernels: Those of ``kernels`` whose FLOPs are an upper
            bound (a splash mask whose blocks could not be read, counted
            whole; ragged paged attention over every page).
        windows: Its asynchronous collectives whose windows were read, in
            the order they start (:class:`CommWindow`).
        stretches: The instructions between consecutive starts and dones of
            those collectives, one tuple per stretch, each instruction counted
            as in ``ops`` (its runs, loops' trips included), collectives and
            asynchronous copies left out.
    """

    ops: tuple[OpWork, ...]
    unknown_trips: tuple[str, ...] = ()
    buffers: int = 0
    kernels: tuple[str, ...] = ()
    uncosted_kernels: tuple[str, ...] = ()
    bounded_kernels: tuple[str, ...] = ()
    windows: tuple[CommWindow, ...] = ()
    stretches: tuple[tuple[OpWork, ...], ...] = ()

    @property
    def matmul_flops(self) -> float:
        """Matmul FLOPs of the whole program."""
        return sum(op.matmul_flops * op.count for op in self.ops)

    @property
    def vector_flops(self) -> float:
        """Vector FLOPs of the whole program."""
        return sum(op.vector_flops * op.count for op in self.ops)

    @property
    def hbm_bytes(self) -> int:
        """HBM bytes of the whole program, asynchronous copies included."""
        return sum(op.hbm_bytes * op.count for op in self.ops)

    @property
    def launches(self) -> int:
        """Instructions run, loops' trips included."""
        return sum(op.count for op in self.ops)

    def json_data(self) -> dict[str, Any]:
        """The work as JSON data (:func:`work_from_json` reads it back).

        Example:
            >>> work = Work((OpWork("matmul", 2.0, 0.0, 8, 100, 1),))
            >>> work_from_json(work.json_data()) == work
            True
        """
        data: dict[str, Any] = {
            "columns": [
                "kind",
                "matmul_flops",
                "vector_flops",
                "hbm_bytes",
                "cycles",
                "count",
                "chip_bytes",
            ],
            "ops": [op.json_data() for op in self.ops],
            "unknown_trips": list(self.unknown_trips),
            "buffers": self.buffers,
        }
        if any(op.head_dim for op in self.ops):
            data["columns"].append("head_dim")
        for key, names in (
            ("kernels", self.kernels),
            ("uncosted_kernels", self.uncosted_kernels),
            ("bounded_kernels", self.bounded_kernels),
        ):
            if names:  # a program without kernels: its data as before them
                data[key] = list(names)
        if self.windows:  # a program without asynchronous collectives: as before
            data["windows"] = [window.json_data() for window in self.windows]
            data["stretches"] = [
                [op.json_data() for op in stretch] for stretch in self.stretches
            ]
        return data


def work_from_json(data: dict[str, Any]) -> Work:
    """The :class:`Work` that :meth:`Work.json_data` wrote.

    A row of six columns (tables written before ``chip_bytes``) has none; a
    row of seven, no ``head_dim``.

    Example:
        >>> work_from_json({"ops": [["loop", 0.0, 0.0, 0, None, 24]]}).launches
        24
    """
    return Work(
        tuple(_op_from_json(row) for row in data["ops"]),
        tuple(data.get("unknown_trips", ())),
        int(data.get("buffers", 0)),
        tuple(data.get("kernels", ())),
        tuple(data.get("uncosted_kernels", ())),
        tuple(data.get("bounded_kernels", ())),
        tuple(
            CommWindow(name, tuple(axes), float(wire), int(first), int(last))
            for name, axes, wire, first, last in data.get("windows", ())
        ),
        tuple(
            tuple(_op_from_json(row) for row in stretch)
            for stretch in data.get("stretches", ())
        ),
    )


def _op_from_json(row: list[Any]) -> OpWork:
    kind, matmul, vector, hbm, cycles, count, *rest = row
    return OpWork(
        kind,
        float(matmul),
        float(vector),
        int(hbm),
        None if cycles is None else int(cycles),
        int(count),
        int(rest[0]) if rest else 0,
        int(rest[1]) if len(rest) > 1 else 0,
    )


SCATTER_ROW_BYTES: Final = 512
"""The least a scatter reads and writes per index on a TPU: one row of 128
lanes of 32-bit words. On a v5e chip an MoE's count of tokens per expert
(16,384 indices, each adding one int32 into 16 counters) took 144 us: the
time of 16,384 x 512 B read and written at the in-place update rate, not of
its 64 KB of updates. A TPU's row, measured on a TPU: other programs (XLA:GPU,
XLA:CPU) are read with no such floor (``scatter_row_bytes=0``)."""


def _scattered(module: Module, inst: Instruction, row_bytes: int) -> int | None:
    """Bytes a scatter reads and writes per its indices (``None``: no scatter).

    A ``scatter`` (or a fusion of one) that XLA:TPU gives no cycle estimate
    updates its rows one index at a time; on a v5e chip an MoE step's
    dispatch gradients (16,384 rows of 2 KiB) ran 4-5x slower than their HBM
    bytes say, and an embedding gradient's on-chip scatter-add took 233 us
    that HBM bytes (none) do not see. Each index's row is read and written:
    twice the larger of the updates' bytes and ``row_bytes`` per index
    (:data:`SCATTER_ROW_BYTES` on a TPU), at the in-place update rate (kind
    ``"update"``).
    """
    found = _scatter_in(module, inst, 0)
    if found is None or len(found.operands) < 3:
        return None
    arrays_in = (len(found.operands) - 1) // 2
    updates = found.operands[arrays_in + 1 :]
    total = sum(
        size for name in updates for _, _, size in arrays(shape_of(module, name))
    )
    indices = dims_of(module, found.operands[arrays_in]) or ()
    vector_dim = int(found.attributes.get("index_vector_dim", len(indices)))
    rows = math.prod(d for i, d in enumerate(indices) if i != vector_dim)
    touched = max(total, rows * row_bytes)
    return 2 * touched if touched else None


def _scatter_in(module: Module, inst: Instruction, seen: int) -> Instruction | None:
    if inst.opcode == "scatter":
        return inst
    if inst.opcode != "fusion" or seen >= 4:
        return None
    found = (_scatter_in(module, inner, seen + 1) for inner in body_of(module, inst))
    return next((f for f in found if f is not None), None)


def _kind(inst: Instruction, matmul: float, vector: float) -> OpKind:
    op = inst.opcode
    if op in ASYNC_COPIES:
        return "async"
    if op in COLLECTIVES or (op.startswith("async-start") and "collective" in op):
        return "collective"
    if matmul > 0:
        return "matmul"
    if vector > 0:
        return "vector"
    return "memory"


def _cycles(inst: Instruction) -> int | None:
    found = _CYCLES.search(inst.attributes.get("backend_config", ""))
    return int(found[1]) if found else None


def _uncosted(cycles: int | None) -> bool:
    return cycles is not None and cycles >= UNCOSTED_CYCLES


def _touched(module: Module, inst: Instruction) -> int | None:
    """Bytes of the tiles an unfused ``dynamic-update-slice`` reads and writes.

    ``None`` when it is not one, or its buffer's layout states no tiling.
    """
    if inst.opcode != "dynamic-update-slice" or len(inst.operands) < 2:
        return None
    buffer = module.instructions.get(inst.operands[0])
    update = dims_of(module, inst.operands[1])
    if buffer is None or update is None:
        return None
    touched = touched_tile_bytes(buffer.shape, update)
    return None if touched is None else 2 * touched


def instruction_work(
    module: Module,
    unknown: list[str] | None = None,
    *,
    scatter_row_bytes: int = SCATTER_ROW_BYTES,
    kernels: list[KernelCost] | None = None,
) -> Iterator[tuple[Instruction | None, OpWork]]:
    r"""Each instruction ``module`` runs, with its work (``count``: its trips).

    ``None`` stands for one loop's trips (kind ``"loop"``); instructions that
    run nothing (views, bookkeeping, custom calls naming bytes that exist) are
    left out. Loops whose trips the program does not state are appended to
    ``unknown``, the Pallas kernels it runs to ``kernels`` (a kernel's bytes
    are its own estimate's where it has one). A scatter reads and writes at
    least ``scatter_row_bytes`` per index (:data:`SCATTER_ROW_BYTES`, a
    TPU's row; ``0`` for a program of another backend). :func:`program_work`
    adds these up.

    Example:
        >>> from nnx_introspect._xla.hlo import parse_module
        >>> module = parse_module("\n".join([
        ...     "HloModule jit_f",
        ...     "ENTRY %main (a: f32[8]) -> f32[8] {",
        ...     "  %a = f32[8]{0} parameter(0)",
        ...     "  ROOT %e = f32[8]{0} exponential(%a)",
        ...     "}",
        ... ]))
        >>> [(inst.name, op.kind, op.count) for inst, op in instruction_work(module)]
        [('e', 'vector', 1)]
    """
    unknown = [] if unknown is None else unknown
    for inst, trips in executed(module, module.entry, 1, unknown):
        if inst is None:
            yield None, OpWork("loop", 0.0, 0.0, 0, None, trips)
            continue
        if moves_nothing(inst):
            continue  # a custom call naming bytes that exist: no work, no run
        matmul, vector = instruction_flops(module, inst)
        hbm = sum(bytes_moved(module, inst, hbm_bytes_of))
        kernel = kernel_cost(module, inst)
        head_dim = 0
        if kernel is not None:
            if kernels is not None:
                kernels.append(kernel)
            if kernel.bytes_accessed is not None:
                hbm = kernel.bytes_accessed
        kind = _kind(inst, matmul, vector)
        if kernel is not None and kernel.flops is not None:
            kind, head_dim = "kernel", kernel.head_dim
        cycles = _cycles(inst)
        touched = _touched(module, inst)
        if touched is not None:
            kind, hbm = "update", touched
        elif cycles is None and kind in ("memory", "vector"):
            scattered = _scattered(module, inst, scatter_row_bytes)
            if scattered is not None:
                kind, hbm = "update", max(hbm, scattered)
        chip = 0
        if kind == "memory" and hbm == 0:
            # wholly on chip: a relayout, gather or sort between on-chip
            # buffers runs (a v5e profile timed every one), a tuple of no
            # bytes is bookkeeping
            chip = sum(size for _, _, size in arrays(inst.shape))
            if chip == 0 and cycles is None:
                continue
        if _uncosted(cycles) and kind != "kernel":
            kind, cycles = "uncosted", None
        yield inst, OpWork(kind, matmul, vector, hbm, cycles, trips, chip, head_dim)


def program_work(
    module: Module,
    *,
    scatter_row_bytes: int = SCATTER_ROW_BYTES,
    by_name: dict[str, OpWork] | None = None,
) -> Work:
    """The work of ``module`` (one device's optimized program), by instruction.

    See the module's text for what each figure counts;
    ``scatter_row_bytes`` as in :func:`instruction_work`. Given, ``by_name``
    gets each instruction's own work by its name (the collectives' windows
    are read from it).
    """
    unknown: list[str] = []
    kernels: list[KernelCost] = []
    counts: dict[OpWork, int] = {}
    found = instruction_work(
        module, unknown, scatter_row_bytes=scatter_row_bytes, kernels=kernels
    )
    for inst, op in found:
        if by_name is not None and inst is not None:
            seen = by_name.get(inst.name)  # a computation called twice: both runs
            by_name[inst.name] = (
                op
                if seen is None
                else dataclasses.replace(op, count=seen.count + op.count)
            )
        key = dataclasses.replace(op, count=0)
        counts[key] = counts.get(key, 0) + op.count
    ops = tuple(dataclasses.replace(op, count=count) for op, count in counts.items())
    ordered = sorted(
        ops, key=lambda op: (-op.matmul_flops * op.count, -op.hbm_bytes * op.count)
    )
    return Work(
        tuple(ordered),
        tuple(unknown),
        _buffers(module),
        tuple(dict.fromkeys(k.name for k in kernels if k.flops is not None)),
        tuple(dict.fromkeys(k.name for k in kernels if k.flops is None)),
        tuple(
            dict.fromkeys(
                k.name for k in kernels if k.flops is not None and not k.exact_blocks
            )
        ),
    )


def ruled_kernel_flops(module: Module) -> float:
    r"""FLOPs of the Pallas kernels costed by a rule, each run counted.

    XLA:TPU's ``cost_analysis()`` counts a kernel's own cost estimate and
    nothing of a kernel without one (splash attention, the flash attention
    kernel's backward): these are the FLOPs it leaves out.

    Example:
        >>> from nnx_introspect._xla.hlo import parse_module
        >>> module = parse_module("\n".join([
        ...     "HloModule jit_f",
        ...     "ENTRY %main (q: bf16[1,2,128,64]) -> bf16[1,2,128,64] {",
        ...     "  %q = bf16[1,2,128,64]{3,2,1,0} parameter(0)",
        ...     "  ROOT %flash_mha_bwd_dq.1 = bf16[1,2,128,64]{3,2,1,0} custom-call("
        ...     '%q, %q), custom_call_target="tpu_custom_call",'
        ...     " frontend_attributes={kernel_metadata={}}",
        ...     "}",
        ... ]))
        >>> ruled_kernel_flops(module) == 6 * 2 * 128 * 128 * 64
        True
    """
    total = 0.0
    for inst, op in instruction_work(module):
        found = None if inst is None else kernel_cost(module, inst)
        # XLA counted a kernel's own estimate: only a rule's FLOPs are added
        if found is not None and found.flops is not None and found.rule != OWN_ESTIMATE:
            total += found.flops * op.count
    return total


def _buffers(module: Module) -> int:
    """Arrays the entry computation takes (its parameters) and returns (its root)."""
    entry = module.computations.get(module.entry, [])
    taken = sum(len(arrays(i.shape)) for i in entry if i.opcode == "parameter")
    returned = sum(len(arrays(i.shape)) for i in entry if i.root)
    return taken + returned

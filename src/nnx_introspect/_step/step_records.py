"""The step report's records: its memory, its budget, its program, its compile.

A :class:`~nnx_introspect.StepMemoryReport` holds one record per concern, each
frozen and each holding figures and kinds, never sentences: the words a
verdict or a note shows are derived from them where they are rendered, so two
reports compare by what they measured.

* :class:`StepMemory`: XLA's bytes per device, its peak, and the compiler's
  figures when it refused the step for memory;
* :class:`StepBudget`: the device's memory and the budget a verdict is held
  to, with the kind of budget it is;
* :class:`StepProgram`: what the compiled program does: FLOPs, bytes accessed,
  its collectives (once, as :class:`~nnx_introspect._xla.collectives.Collectives`),
  sharding constraints, rematerialization;
* :class:`StepCompilation`: how it was compiled: by which compiler, where,
  in what device order, in how long.
"""

import dataclasses
from typing import Any, Literal

from nnx_introspect._accelerators import Budget
from nnx_introspect._render import format_bytes
from nnx_introspect._text import plural
from nnx_introspect._typing import as_int
from nnx_introspect._xla import (
    Collective,
    Collectives,
    CompilerFlag,
    SourceLocation,
    XlaReadings,
)

__all__ = [
    "BudgetBasis",
    "CompiledIn",
    "StepBudget",
    "StepCompilation",
    "StepKind",
    "StepMemory",
    "StepProgram",
    "collectives_from_json",
    "memory_from_readings",
    "step_kind",
]

StepKind = Literal[
    "forward", "forward + backward", "forward + backward + optimizer update"
]
"""What one step compiles: the forward pass, with the backward, with the update."""


def step_kind(loss: object, optimizer: object) -> StepKind:
    """What a step with ``loss`` and ``optimizer`` (either may be ``None``) compiles.

    Example:
        >>> step_kind(None, None), step_kind("loss", None)
        ('forward', 'forward + backward')
    """
    if loss is None:
        return "forward"
    if optimizer is None:
        return "forward + backward"
    return "forward + backward + optimizer update"


CompiledIn = Literal["this process", "virtual CPU child", "target child"]
"""Where a step compiled: here, in a child process with virtual CPU devices, or in
a child process started for the named ``topology``'s compiler."""

BudgetBasis = Literal["given", "tpu usable hbm", "gpu allocator pool"]
"""What a budget is: ``max_device_bytes`` as given, the HBM XLA:TPU lets a program
use, or the pool JAX's GPU allocator takes of the device's memory."""

_PLACES: tuple[CompiledIn, ...] = ("this process", "virtual CPU child", "target child")


@dataclasses.dataclass(frozen=True)
class StepMemory:
    """XLA's bytes for one device of the step, and the compiler's refusal if any.

    Attributes:
        argument_bytes: The step's arguments on one device (when the compiler
            refused the step: the plan's exact shards).
        output_bytes: Its outputs (0 when refused: not given).
        temp_bytes: Its temporaries (when refused: the compiler's required
            figure less the arguments).
        alias_bytes: Output bytes that reuse a donated argument's buffer.
        xla_peak_bytes: XLA's ``peak_memory_in_bytes``, or ``None``.
        xla_peak_complete: Whether that figure counts the temporaries, so can
            raise :attr:`peak_bytes`: ``False`` on XLA:CPU, whose executable
            (jaxlib 0.10.2) clears its heap traces before computing it.
        xla_peak_lowers: Whether XLA's peak, where it is below
            :attr:`held_bytes`, is the peak (XLA:TPU): on a v5e chip two
            programs whose larger figure exceeded the chip's allocator limit
            ran (a 336M Llama's step in two microbatches, XLA's peak 15.32 GB
            against 17.02 GB held; a decode of 161 x 4,096 positions, held
            16.89 GB against XLA's 17.01 GB), the limit 16.91 GB, and each
            smaller figure was under it (``benchmarks/README.md``).
        out_of_memory: The compiler refused the step for memory, or its peak
            exceeds the device's memory (XLA:GPU compiles such a step).
        compiler_message: The compiler's words when it refused, else ``None``.
        compiler_required_bytes: The bytes it said it needed, or ``None``.
        compiler_available_bytes: The bytes it said the device has, or ``None``.

    Example:
        >>> memory = StepMemory(100, 40, 60, 40, xla_peak_bytes=190)
        >>> memory.peak_bytes, memory.peak_basis.startswith("XLA's")
        (190, True)
        >>> dataclasses.replace(memory, xla_peak_complete=False).peak_bytes
        160
        >>> dataclasses.replace(memory, xla_peak_lowers=True).peak_bytes  # TPU
        160
    """

    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    alias_bytes: int
    xla_peak_bytes: int | None = None
    xla_peak_complete: bool = True
    xla_peak_lowers: bool = False
    out_of_memory: bool = False
    compiler_message: str | None = None
    compiler_required_bytes: int | None = None
    compiler_available_bytes: int | None = None

    @property
    def held_bytes(self) -> int:
        """``argument + output + temp - alias``: what XLA allocates for the step."""
        return (
            self.argument_bytes + self.output_bytes + self.temp_bytes - self.alias_bytes
        )

    @property
    def peak_bytes(self) -> int:
        """:attr:`held_bytes`, or XLA's complete peak where that is larger.

        On XLA:TPU (:attr:`xla_peak_lowers`) the smaller of the two: the chip
        ran programs whose larger figure exceeded its memory.
        """
        if self.xla_peak_bytes is None or not self.xla_peak_complete:
            return self.held_bytes
        if self.xla_peak_lowers:
            return min(self.held_bytes, self.xla_peak_bytes)
        return max(self.held_bytes, self.xla_peak_bytes)

    @property
    def peak_basis(self) -> str:
        """Which figure :attr:`peak_bytes` is, in words."""
        if self.peak_bytes > self.held_bytes:
            return (
                "XLA's peak_memory_in_bytes, above arguments + outputs + "
                "temporaries - aliased"
            )
        if self.peak_bytes < self.held_bytes:
            return (
                "XLA:TPU's peak_memory_in_bytes, below arguments + outputs + "
                "temporaries - aliased (on a v5e chip the smaller figure is the "
                "one that holds: programs whose larger one exceeded the chip ran)"
            )
        return "arguments + outputs + temporaries - aliased"

    @property
    def refused(self) -> bool:
        """Whether the compiler refused the step (its words are then kept)."""
        return self.compiler_message is not None


def memory_from_readings(
    readings: XlaReadings,
    budget: Budget,
    planned: int,
    *,
    trust_tpu: bool = True,
) -> StepMemory:
    """XLA's bytes of one compiled program as a :class:`StepMemory`.

    A program the compiler refused for memory has no analysis: its arguments
    are ``planned`` (the plan's exact shards) and its temporaries what the
    compiler said it required beyond them. XLA:GPU compiles a program over
    the device's memory (``budget.device_memory_bytes``), which cannot run:
    it is out of memory here. XLA:TPU refuses such a program itself; with
    ``trust_tpu`` its compile is taken as the answer, without it (serving,
    where a decode at the limit compiled and then failed to allocate on the
    chip) a peak over the device is out of memory on TPU too.
    """
    arguments = readings.argument_bytes
    if arguments is None:
        arguments = planned
    temp = readings.temp_bytes
    if temp is None:
        temp = max(0, (readings.compiler_required_bytes or 0) - arguments)
    memory = StepMemory(
        argument_bytes=arguments,
        output_bytes=readings.output_bytes or 0,
        temp_bytes=temp,
        alias_bytes=readings.alias_bytes or 0,
        xla_peak_bytes=readings.xla_peak_bytes,
        xla_peak_complete=readings.backend != "cpu",
        xla_peak_lowers=readings.backend == "tpu",
        out_of_memory=bool(readings.out_of_memory),
        compiler_message=readings.compiler_message,
        compiler_required_bytes=readings.compiler_required_bytes,
        compiler_available_bytes=readings.compiler_available_bytes,
    )
    device = budget.device_memory_bytes
    over = device is not None and memory.peak_bytes > device
    if over and not (trust_tpu and readings.backend == "tpu"):
        return dataclasses.replace(memory, out_of_memory=True)
    return memory


@dataclasses.dataclass(frozen=True)
class StepBudget:
    """The memory of one device and the budget a step is held to.

    Attributes:
        device_memory_bytes: One device's memory for a named ``topology`` (TPU
            HBM per chip, the GPU's memory), or ``None`` on XLA:CPU.
        max_device_bytes: The budget: ``max_device_bytes`` as given, else the
            HBM XLA:TPU lets a program use, else a GPU allocator's pool, else
            ``None``.
        basis: Which of those it is (a :data:`BudgetBasis`), ``None`` without
            a budget.
        allocator_fraction: A GPU pool's share of the device's memory, else
            ``None``.
        fraction_variable: The variable that set that share, as it was set
            (``"XLA_CLIENT_MEM_FRACTION=.9"``); ``None`` for JAX's default.
        chip: The TPU chip the usable HBM is of (``"v5e"``), else ``None``.

    Example:
        >>> budget = StepBudget(16 * 2**30, round(15.75 * 2**30), "tpu usable hbm",
        ...     chip="v5e")
        >>> print(budget.basis_words)
        the 15.75 GiB of HBM XLA:TPU lets a program use on a v5e chip; the rest of
        its 16 GiB is the TPU runtime's
        >>> StepBudget(None, 2**20, "given").basis_words
        'the budget given'
    """

    device_memory_bytes: int | None = None
    max_device_bytes: int | None = None
    basis: BudgetBasis | None = None
    allocator_fraction: float | None = None
    fraction_variable: str | None = None
    chip: str | None = None

    @classmethod
    def from_budget(cls, budget: Budget, topology: str | None) -> "StepBudget":
        """The record of a :class:`~nnx_introspect._accelerators.budget.Budget`.

        Example:
            >>> from nnx_introspect._accelerators.budget import step_budget
            >>> found = step_budget(None, "h100-8", {"XLA_CLIENT_MEM_FRACTION": ".9"})
            >>> budget = StepBudget.from_budget(found, "h100-8")
            >>> budget.basis, budget.basis_words == found.basis
            ('gpu allocator pool', True)
        """
        basis: BudgetBasis | None = None
        if budget.basis == "the budget given":
            basis = "given"
        elif budget.fraction is not None:
            basis = "gpu allocator pool"
        elif budget.bytes is not None:
            basis = "tpu usable hbm"
        source = budget.fraction_source
        return cls(
            device_memory_bytes=budget.device_memory_bytes,
            max_device_bytes=budget.bytes,
            basis=basis,
            allocator_fraction=budget.fraction,
            fraction_variable=None if source == "JAX's default" else source,
            chip=None
            if basis != "tpu usable hbm" or topology is None
            else topology.rsplit("-", 1)[0],
        )

    @property
    def basis_words(self) -> str | None:
        """What :attr:`max_device_bytes` is, in words; ``None`` without a budget."""
        memory = format_bytes(self.device_memory_bytes or 0)
        if self.basis == "given":
            return "the budget given"
        if self.basis == "tpu usable hbm":
            return (
                f"the {format_bytes(self.max_device_bytes or 0)} of HBM XLA:TPU lets "
                f"a program use on a {self.chip} chip; the rest of its {memory} is "
                "the TPU runtime's"
            )
        if self.basis == "gpu allocator pool":
            source = self.fraction_variable or "JAX's default"
            return (
                f"the {self.allocator_fraction or 0:.0%} of the device's {memory} "
                f"that JAX's GPU allocator takes ({source})"
            )
        return None

    def needed_fraction(self, peak_bytes: int) -> float | None:
        """The GPU allocator fraction at which ``peak_bytes`` fits, or ``None``.

        See :meth:`~nnx_introspect._accelerators.budget.Budget.needed_fraction`.

        Example:
            >>> pool = StepBudget(100 * 2**30, 75 * 2**30, "gpu allocator pool", 0.75)
            >>> pool.needed_fraction(80 * 2**30), pool.needed_fraction(2**30)
            (0.8, None)
        """
        peak_bytes = as_int(peak_bytes, "peak_bytes")
        budget = Budget(
            self.max_device_bytes,
            self.basis_words,
            self.device_memory_bytes,
            self.allocator_fraction,
        )
        return budget.needed_fraction(peak_bytes)


@dataclasses.dataclass(frozen=True)
class StepProgram:
    """What the compiled program of one device does.

    Attributes:
        flops: Its floating-point operations (``cost_analysis()["flops"]``;
            ``nan`` when XLA gives none).
        bytes_accessed: The bytes it reads and writes, or ``None``.
        matmul_dtype: The operand type of the dots doing most of its matmul
            FLOPs (``"bf16"``, ``"f32"``), or ``None``.
        collectives: Every collective of the program (its HLO's stack frames
            beyond the innermost are not kept), or ``None`` when not read.
        sharding_constraints: The activation sharding constraints the lowered
            step holds, or ``None`` when not counted.
        remat_limit_bytes: The limit XLA said rematerialization could not
            bring the step under, else ``None``.
        remat_reduced_to_bytes: What it brought the step down to then.
        loop_trips: ``(name, trips)`` of each while loop of the program, whose
            body ``flops`` and ``bytes_accessed`` count once per trip (XLA's
            own cost analysis counts it once); ``()`` without loops.
        work: Its work by instruction, as JSON data
            (:meth:`~nnx_introspect._xla.Work.json_data`), what the point
            estimate of its time reads; ``None`` when not read.

    Example:
        >>> StepProgram(1e9, collectives=None).collective_wire_bytes is None
        True
        >>> empty = Collectives("jit_step", (("data", 8),), ())
        >>> StepProgram(1e9, collectives=empty).collective_wire_bytes
        ()
    """

    flops: float
    bytes_accessed: float | None = None
    matmul_dtype: str | None = None
    collectives: Collectives | None = None
    sharding_constraints: int | None = None
    remat_limit_bytes: int | None = None
    remat_reduced_to_bytes: int | None = None
    loop_trips: tuple[tuple[str, int | None], ...] = ()
    work: dict[str, Any] | None = dataclasses.field(
        default=None, compare=False, repr=False
    )

    @property
    def collective_wire_bytes(
        self,
    ) -> tuple[tuple[tuple[str, ...], int, int], ...] | None:
        """``(axes, bytes, wire bytes)`` per mesh-axis combination, most wire first.

        From :meth:`~nnx_introspect._xla.collectives.Collectives.by_axis`, per
        device and step, wire bytes rounded to an integer; ``None`` when the
        collectives were not read.
        """
        if self.collectives is None:
            return None
        return tuple(
            (axes, total.nbytes, round(total.wire_bytes))
            for axes, total in self.collectives.by_axis().items()
        )


@dataclasses.dataclass(frozen=True)
class StepCompilation:
    """How the step was compiled: by what, where, in what order, in how long.

    Attributes:
        backend: The platform that compiled (``"cpu"``, ``"gpu"``, ``"tpu"``).
        compiler: The compiler and its version, e.g. ``"XLA:CPU (jaxlib
            0.10.2)"``.
        device_kind: The devices' kind (``"cpu"``, ``"TPU v5 lite"``).
        compiled_in: Where (a :data:`CompiledIn`).
        seconds: Wall time of lowering and compiling.
        device_order: How the mesh's devices were laid out, in words (with
            ``make_mesh``'s error when it could not lay the mesh out).
        traced_platform: The platform the model's code saw while tracing, or
            ``None`` when not known.
        log: What the compiler and the child process wrote to stderr, with
            ``debug=True``; else ``None``.
        cached: When the program was compiled (ISO 8601, UTC) if its readings
            came from the cache of compile results, else ``None``;
            ``seconds`` is then the time spent now (tracing and lowering).
        compiler_flags: Every compiler flag the step was compiled with, and
            where it came from (``compiler_flags``, ``XLA_FLAGS`` or
            ``LIBTPU_INIT_ARGS``; the library's own
            ``--xla_force_host_platform_device_count`` is left out).

    Example:
        >>> compiled = StepCompilation("cpu", "XLA:CPU (jaxlib 0.10.2)", "cpu")
        >>> compiled.compiled_in, compiled.device_order
        ('this process', 'plain device order')
    """

    backend: str
    compiler: str
    device_kind: str
    compiled_in: CompiledIn = "this process"
    seconds: float = 0.0
    device_order: str = "plain device order"
    traced_platform: str | None = None
    log: str | None = None
    cached: str | None = None
    compiler_flags: tuple[CompilerFlag, ...] = ()


def compiled_in_words(where: CompiledIn, devices: int, topology: str | None) -> str:
    """Where a step compiled, in words.

    Example:
        >>> compiled_in_words("virtual CPU child", 16, None)
        'a child process with 16 virtual CPU devices'
    """
    if where == "virtual CPU child":
        return f"a child process with {plural(devices, 'virtual CPU device')}"
    if where == "target child":
        return f"a child process ({topology})"
    return "this process"


def compiled_in_kind(words: str, devices: int, topology: str | None) -> CompiledIn:
    """The :data:`CompiledIn` of :func:`compiled_in_words`' words.

    Example:
        >>> compiled_in_kind("a child process (h100-8)", 8, "h100-8")
        'target child'
    """
    for kind in _PLACES:
        if compiled_in_words(kind, devices, topology) == words:
            return kind
    raise AssertionError(f"unknown place of compile: {words!r}")


def collectives_from_json(data: dict[str, Any] | None) -> Collectives | None:
    """The :class:`Collectives` of its JSON data (``Collectives.json_data()``).

    A row's stack (beyond its ``source``, the user's frame) is not in the
    JSON, so not in the result; everything its ``json_data()`` shows
    round-trips exactly.

    Example:
        >>> found = collectives_from_json(
        ...     {"module": "jit_f", "mesh_axes": [["data", 2]], "rows": []}
        ... )
        >>> found.module, found.mesh_axes, found.rows
        ('jit_f', (('data', 2),), ())
    """
    if data is None:
        return None
    return Collectives(
        module=data["module"],
        mesh_axes=tuple((str(name), int(size)) for name, size in data["mesh_axes"]),
        rows=tuple(_collective(row) for row in data["rows"]),
        dcn_axes=tuple((str(n), int(f)) for n, f in data.get("dcn_axes", ())),
    )


def _collective(row: dict[str, Any]) -> Collective:
    source = row["source"]
    pairs = row["source_target_pairs"]
    return Collective(
        kind=row["kind"],
        name=row["name"],
        opcode=row["opcode"],
        form=row["form"],
        computation=row["computation"],
        nbytes=row["bytes"],
        result_bytes=row["result_bytes"],
        operand_bytes=row["operand_bytes"],
        dtypes=tuple(row["dtypes"]),
        shapes=tuple(tuple(shape) for shape in row["shapes"]),
        group_size=row["group_size"],
        groups=tuple(tuple(group) for group in row["groups"]),
        axes=tuple(row["axes"]),
        source_target_pairs=None if pairs is None else tuple(tuple(p) for p in pairs),
        channel_id=row["channel_id"],
        op_name=row["op_name"],
        source=None if source is None else SourceLocation(**source),
        stack=(),
        count=row["count"],
        trip_count_known=row["trip_count_known"],
        loops=tuple(row["loops"]),
        sources=tuple(
            None if s is None else SourceLocation(**s) for s in row.get("sources", ())
        ),
        network=row.get("network"),
    )

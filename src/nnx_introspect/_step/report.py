"""The step memory report: XLA's bytes per device beside the plan, and its renderers.

:class:`StepMemoryReport` holds one record per concern (its memory, budget,
program and compile, :mod:`nnx_introspect._step.step_records`), the roofline
estimated once when it was assembled, and what was compiled; every flat
attribute of schema v4 reads through to its record. The words it shows are
made in :mod:`nnx_introspect._step.report_render`.
"""

import dataclasses
from typing import Any, Generic, Never, TypeVar, overload

from jax.sharding import PartitionSpec

from nnx_introspect._breakdown import Breakdown, what_to_change
from nnx_introspect._mesh import MeshConfigReport, parse_bytes
from nnx_introspect._render import (
    Report,
    Table,
    table_text,
    to_markdown,
    to_rich,
)
from nnx_introspect._roofline import Roofline
from nnx_introspect._step.measured import Measured, measured_with
from nnx_introspect._step.page import (
    compiled_html,
    peak_bar_svg,
    peak_parts,
    step_time_svg,
)
from nnx_introspect._step.report_render import step_json, step_table, step_verdict
from nnx_introspect._step.step_estimate import step_roofline
from nnx_introspect._step.step_records import (
    StepBudget,
    StepCompilation,
    StepKind,
    StepMemory,
    StepProgram,
    compiled_in_words,
)
from nnx_introspect._typing import ArgumentError, IntLike, typechecked

__all__ = [
    "StepMemoryReport",
]

_REPR_NAMES = (
    "num_devices",
    "argument_bytes",
    "output_bytes",
    "temp_bytes",
    "alias_bytes",
    "flops",
    "backend",
    "compiler",
    "device_kind",
    "compile_seconds",
    "step",
    "loss",
    "optimizer",
    "batch",
    "batch_specs",
    "topology",
    "compiled_in",
    "device_memory_bytes",
    "max_device_bytes",
    "out_of_memory",
    "compiler_message",
    "compiler_required_bytes",
    "compiler_available_bytes",
    "warnings",
    "device_order",
    "sharding_constraints",
    "budget_basis",
    "allocator_fraction",
    "traced_platform",
    "compiler_log",
    "xla_peak_bytes",
    "remat_limit_bytes",
    "remat_reduced_to_bytes",
    "bytes_accessed",
    "matmul_dtype",
    "collective_wire_bytes",
    "collectives_data",
    "network_bytes_per_second",
)
"""The leading attributes the ``repr`` shows, in schema v4's order."""


_T = TypeVar("_T")


class _Alias(Generic[_T]):
    """A flat name of schema v4 that reads one field of one of the report's records.

    ``report.temp_bytes`` is ``report.memory.temp_bytes``: the table of these
    aliases in :class:`StepMemoryReport` is the whole mapping.
    """

    def __init__(self, record: str, field: str, doc: str) -> None:
        self.record, self.field, self.__doc__ = record, field, doc

    @overload
    def __get__(self, report: None, owner: type) -> "_Alias[_T]": ...
    @overload
    def __get__(self, report: object, owner: type) -> _T: ...
    def __get__(self, report: object, owner: type) -> "_T | _Alias[_T]":
        if report is None:
            return self
        value: _T = getattr(getattr(report, self.record), self.field)
        return value

    def __set__(self, report: object, value: Never) -> None:
        # read-only, for type checkers too (the frozen report refuses it first)
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {self.field!r}")


_PEAK_DOC = """The memory one device holds during the step.

``argument + output + temp - alias``: XLA allocates the arguments, the
outputs (less those that reuse a donated argument's buffer) and one
preallocated buffer for every temporary, and holds them for the whole
step. Where XLA's own ``peak_memory_in_bytes`` (:attr:`xla_peak_bytes`)
is larger, it is the peak (XLA:TPU reports small programs with no HBM
temporaries but a larger peak); it never lowers the figure. XLA:CPU's
is not used: jaxlib 0.10.2's CPU executable clears its heap traces
before the figure is computed, so it counts no temporary."""


@dataclasses.dataclass(frozen=True)
class StepMemoryReport(Report):
    """What XLA's compile of one step says each device needs, beside the plan.

    Per-device figures are XLA's own accounting of the compiled SPMD program
    (``compiled.memory_analysis()``): the arguments each device holds (its
    shards of the parameters, optimizer state and batch), the outputs, the
    temporaries of the step (activations kept for the backward pass, gradients,
    the logits' softmax...), and the bytes of outputs that reuse a donated
    argument's buffer (``alias_bytes``). ``peak_bytes`` is
    ``argument + output + temp - alias``.

    The report is grouped: :attr:`memory` (:class:`StepMemory`: XLA's bytes,
    the peak, the compiler's refusal), :attr:`budget` (:class:`StepBudget`:
    the device's memory and the budget, with its kind), :attr:`program`
    (:class:`StepProgram`: FLOPs, bytes accessed, the collectives,
    rematerialization), :attr:`compilation` (:class:`StepCompilation`: the
    compiler, where and how long) and :attr:`roofline`. Every figure also
    reads flat, as in schema v4: ``report.temp_bytes`` is
    ``report.memory.temp_bytes``, ``report.compiled_in`` the words of
    ``report.compilation.compiled_in``.

    Attributes:
        num_devices: Devices in the mesh.
        plan: The :class:`MeshConfigReport` of the same model, mesh and rules
            (with the optimizer's state and the gradients when ``optimizer``
            is given).
        step: What was compiled (a :data:`StepKind`): ``"forward"``,
            ``"forward + backward"`` or ``"forward + backward + optimizer
            update"``.
        loss: The loss's name (``"mean"``, ``"lm"``, a callable's name) or
            ``None`` for forward only.
        optimizer: The optimizer's name, or ``None``.
        batch: Each batch leaf as ``"int32[8,128]"``.
        batch_specs: Each batch leaf's partition spec.
        memory: XLA's bytes per device (:class:`StepMemory`). When the
            compiler refused the step for memory, ``temp_bytes`` is its
            required figure for temporaries, ``argument_bytes`` the plan's
            exact shards, and output and aliased bytes are 0 (not known).
        budget: The device's memory and the budget (:class:`StepBudget`).
        program: The compiled program's figures (:class:`StepProgram`).
        compilation: How it was compiled (:class:`StepCompilation`).
        topology: The TPU or GPU topology name, or ``None``.
        network_bytes_per_second: The network bandwidth per GPU between
            hosts the :attr:`roofline` uses (``None``: the family's default).
        warnings: The compiler's warnings and the caveats of this compile
            (XLA:GPU without autotuning, rematerialization that fell short).
        breakdown: With ``step_memory_report(..., breakdown=True)``: every
            buffer live at XLA's peak of the step, with its kind and its state
            path or source line, the grouped views and the memory curve
            (:class:`~nnx_introspect.Breakdown`); ``None`` otherwise, or when
            it could not be made (``warnings`` says why).
        remat: The ``(module class, policy)`` pairs rematerialised while the
            step was traced (``remat=``); empty when none.
        lora: The LoRA rank the step trained adapters of, ``"model"`` (the
            model's own ``nnx.LoRAParam`` leaves) or ``None`` (every
            parameter trained; ``lora=``).
        microbatches: How many microbatches the step accumulated its
            gradients over (``microbatches=``; 1: one pass over the batch).
        target: The model's ``"package.module:factory"`` name, when it has
            one (shown on the HTML page).
        tokens_per_step: The tokens per step given for the MFU
            (``tokens_per_step=``), or ``None``: the batch's.
        active_params: For a mixture of experts, the plan's parameters one
            token uses (each router's ``top_k`` of its experts: the ``N`` of
            the MFU's ``6·N_active·tokens``); ``None`` for a model without
            routed experts.
        measured: The step run on this process's devices (``measure=``):
            times, tokens per second, MFU and the allocator's figures, or
            ``None``.
        roofline: A step-time estimate for the named ``topology``, computed
            once when the report is made (not an argument):
            :func:`~nnx_introspect._step.step_estimate.step_roofline` of the
            program's FLOPs, bytes accessed and collective wire bytes per mesh
            axis, at the peak of its matmul dtype; a range from perfect
            overlap to none, never a measurement. ``None`` without a
            topology, for a step the compiler refused, or when the
            collectives could not be read (an estimate without its
            communication would be too low).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from flax import nnx
        >>> from nnx_introspect import step_memory_report
        >>> batch = jax.ShapeDtypeStruct((8, 4), jnp.float32)
        >>> report = step_memory_report(
        ...     lambda rngs: nnx.Linear(4, 6, rngs=rngs), "data=8", batch
        ... )
        >>> report.argument_bytes  # kernel + bias replicated, 1 of 8 rows of x
        136
        >>> report.peak_bytes == (
        ...     report.argument_bytes + report.output_bytes + report.temp_bytes
        ...     - report.alias_bytes
        ... )
        True
        >>> report.fits(1024**2), report.backend
        (True, 'cpu')
        >>> report.memory.argument_bytes, report.compilation.compiled_in
        (136, 'this process')
    """

    SCHEMA = "nnx-introspect/step-memory"
    SCHEMA_VERSION = 4

    num_devices: int
    plan: MeshConfigReport
    step: StepKind
    loss: str | None
    optimizer: str | None
    batch: tuple[str, ...]
    batch_specs: tuple[PartitionSpec, ...]
    memory: StepMemory
    budget: StepBudget
    program: StepProgram
    compilation: StepCompilation
    topology: str | None = None
    network_bytes_per_second: int | None = None
    warnings: tuple[str, ...] = ()
    breakdown: Breakdown | None = None
    remat: tuple[tuple[str, str], ...] = ()
    microbatches: int = 1
    lora: int | str | None = None
    target: str | None = None
    tokens_per_step: int | None = None
    measured: Measured | None = None
    active_params: int | None = None
    roofline: Roofline | None = dataclasses.field(
        init=False, default=None, compare=False
    )

    def __post_init__(self) -> None:
        # once per report: dataclasses.replace makes a new one, estimated anew
        estimate = step_roofline(
            self.topology,
            self.plan,
            self.memory,
            self.program,
            step=self.step,
            loss=self.loss,
            batch=self.batch,
            network_bytes_per_second=self.network_bytes_per_second,
            tokens_per_step=self.tokens_per_step,
            active_params=self.active_params,
        )
        object.__setattr__(self, "roofline", estimate)
        if self.measured is not None and estimate is not None:
            object.__setattr__(self, "measured", measured_with(self.measured, estimate))

    # --- schema v4's flat names: one alias each, read from its record ----------
    # (total_flops, collectives_data and compiled_in, derived, are properties)

    argument_bytes = _Alias[int](
        "memory", "argument_bytes", "Bytes of the step's arguments on one device."
    )
    output_bytes = _Alias[int](
        "memory", "output_bytes", "Bytes of the step's outputs on one device."
    )
    temp_bytes = _Alias[int](
        "memory", "temp_bytes", "Bytes of temporaries on one device."
    )
    alias_bytes = _Alias[int](
        "memory", "alias_bytes", "Output bytes that reuse donated argument buffers."
    )
    xla_peak_bytes = _Alias[int | None](
        "memory", "xla_peak_bytes", "XLA's own ``peak_memory_in_bytes``, or ``None``."
    )
    peak_bytes = _Alias[int]("memory", "peak_bytes", _PEAK_DOC)
    peak_basis = _Alias[str](
        "memory", "peak_basis", "Which figure :attr:`peak_bytes` is, in words."
    )
    out_of_memory = _Alias[bool](
        "memory",
        "out_of_memory",
        "Whether the step is out of memory: refused, or over the device's memory.",
    )
    compiler_message = _Alias[str | None](
        "memory",
        "compiler_message",
        "The compiler's words when it refused the step, or ``None``.",
    )
    compiler_required_bytes = _Alias[int | None](
        "memory",
        "compiler_required_bytes",
        "The bytes the compiler said it needed (two decimals), or ``None``.",
    )
    compiler_available_bytes = _Alias[int | None](
        "memory",
        "compiler_available_bytes",
        "The bytes the compiler said the device has, or ``None``.",
    )
    device_memory_bytes = _Alias[int | None](
        "budget",
        "device_memory_bytes",
        "The memory of one device of ``topology``, or ``None`` on XLA:CPU.",
    )
    max_device_bytes = _Alias[int | None](
        "budget",
        "max_device_bytes",
        "The budget :meth:`fits` uses by default: the one given, else the "
        "device's usable memory; or ``None``.",
    )
    budget_basis = _Alias[str | None](
        "budget",
        "basis_words",
        "What ``max_device_bytes`` is, in words (``budget.basis_words``); "
        "``None`` without a budget.",
    )
    allocator_fraction = _Alias[float | None](
        "budget",
        "allocator_fraction",
        "The share of a GPU's memory JAX's allocator takes (a GPU target "
        "without ``max_device_bytes``), else ``None``.",
    )
    flops = _Alias[float](
        "program",
        "flops",
        "Floating-point operations of one device's program (``nan``: none).",
    )
    bytes_accessed = _Alias[float | None](
        "program",
        "bytes_accessed",
        "Bytes one device's program reads and writes, or ``None``.",
    )
    matmul_dtype = _Alias[str | None](
        "program",
        "matmul_dtype",
        "The operand type of the dots doing most matmul FLOPs, or ``None``.",
    )
    collective_wire_bytes = _Alias[
        "tuple[tuple[tuple[str, ...], int, int], ...] | None"
    ](
        "program",
        "collective_wire_bytes",
        "``(axes, bytes, wire bytes)`` per mesh-axis combination, per device "
        "and step, or ``None`` when the collectives were not read.",
    )
    sharding_constraints = _Alias[int | None](
        "program",
        "sharding_constraints",
        "Activation sharding constraints in the lowered step, or ``None``.",
    )
    remat_limit_bytes = _Alias[int | None](
        "program",
        "remat_limit_bytes",
        "The limit XLA said rematerialization could not bring the step under.",
    )
    remat_reduced_to_bytes = _Alias[int | None](
        "program",
        "remat_reduced_to_bytes",
        "What XLA's rematerialization brought the step down to then.",
    )
    backend = _Alias[str](
        "compilation",
        "backend",
        'The platform that compiled (``"cpu"``, ``"tpu"``...).',
    )
    compiler = _Alias[str](
        "compilation",
        "compiler",
        'The compiler and its version, e.g. ``"XLA:CPU (jaxlib 0.10.2)"``.',
    )
    device_kind = _Alias[str](
        "compilation",
        "device_kind",
        'The devices\' kind (``"cpu"``, ``"TPU v5 lite"``).',
    )
    compile_seconds = _Alias[float](
        "compilation",
        "seconds",
        "Wall time of lowering and compiling (in the child process if any).",
    )
    device_order = _Alias[str](
        "compilation", "device_order", "How the mesh's devices were laid out, in words."
    )
    traced_platform = _Alias[str | None](
        "compilation",
        "traced_platform",
        "The platform the model's code saw while tracing, or ``None``.",
    )
    compiler_log = _Alias[str | None](
        "compilation",
        "log",
        "With ``debug=True``, what the compiler wrote to stderr; else ``None``.",
    )

    @property
    def total_flops(self) -> float:
        """``flops * num_devices``: the whole step's floating-point operations."""
        return self.program.flops * self.num_devices

    @property
    def collectives_data(self) -> dict[str, Any] | None:
        """Every collective of the program as the JSON ``collectives`` key shows it."""
        found = self.program.collectives
        return None if found is None else found.json_data()

    @property
    def compiled_in(self) -> str:
        """Where it compiled, in words (from ``compilation.compiled_in``).

        ``"this process"``, ``"a child process with N virtual CPU devices"``
        or ``"a child process (h100-8)"``.
        """
        kind = self.compilation.compiled_in
        return compiled_in_words(kind, self.num_devices, self.topology)

    # --- the verdict --------------------------------------------------------------

    @typechecked
    def fits(self, max_device_bytes: IntLike | str | None = None) -> bool:
        """Whether the step fits: compiled, and ``peak_bytes`` within the budget.

        Args:
            max_device_bytes: A byte count (``>= 0``) or a size such as
                ``"16GiB"``; default: the report's ``max_device_bytes`` (the
                argument given to the report, else the device's memory).

        Returns:
            ``False`` when the compiler refused the step for memory, else
            ``peak_bytes <= max_device_bytes``.

        Raises:
            ValueError: If ``max_device_bytes`` is negative or not a size, or
                is not given and the report has no budget (XLA:CPU without
                one).

        Example:
            >>> import jax, jax.numpy as jnp
            >>> from flax import nnx
            >>> from nnx_introspect import step_memory_report
            >>> x = jax.ShapeDtypeStruct((8, 4), jnp.float32)
            >>> linear = lambda rngs: nnx.Linear(4, 6, rngs=rngs)
            >>> report = step_memory_report(linear, "data=8", x, max_device_bytes=100)
            >>> report.fits(), report.fits("1MiB"), report.ok
            (False, True, False)
        """
        if max_device_bytes is None:
            if self.max_device_bytes is None:
                raise ArgumentError(
                    "max_device_bytes",
                    "`max_device_bytes` must be given: this report has no budget "
                    f"(compiled by {self.compiler}, no device memory known). Pass "
                    "a size such as '16GiB', or a `topology` to the report.",
                )
            budget = self.max_device_bytes
        else:
            budget = parse_bytes(max_device_bytes)
        remat = self.remat_reduced_to_bytes
        if remat is not None and remat > budget:  # XLA says it stays above
            return False
        return not self.out_of_memory and self.peak_bytes <= budget

    @property
    def ok(self) -> bool:
        """``False`` when out of memory or over the budget, else ``True``.

        ``True`` also when there is no budget to hold the step to.
        """
        if self.out_of_memory:
            return False
        return self.max_device_bytes is None or self.fits()

    @property
    def needed_fraction(self) -> float | None:
        """The allocator fraction at which a GPU step that does not fit would.

        ``XLA_CLIENT_MEM_FRACTION`` rounded up to two decimals; ``None`` off
        GPU targets, with a budget given, when the step fits, or when no
        fraction up to 0.95 makes it fit (the CUDA context and NCCL's buffers
        need the rest of the device).
        """
        if self.out_of_memory and self.memory.refused:
            return None
        return self.budget.needed_fraction(self.peak_bytes)

    @property
    def verdict(self) -> str:
        """One line, the answer first: fits or not, the peak, the budget."""
        return step_verdict(self)

    def table(self) -> Table:
        """The report as a :class:`~nnx_introspect.Table`, the verdict first."""
        return step_table(self)

    @property
    def what_to_change(self) -> tuple[str, ...]:
        """Facts from the breakdown that point at what to change, then options.

        See :func:`~nnx_introspect.what_to_change`; each fact is of this
        compile (shares of the peak, where the bytes come from, what is
        replicated over which mesh axis), never a guess; each option
        (``try: ...``) is checkable with one more compile. ``()`` without a
        breakdown, or when the step fits its budget.
        """
        if self.breakdown is None:
            return ()
        return what_to_change(
            self.breakdown,
            self.plan,
            fits=None if self.max_device_bytes is None else self.fits(),
            fraction=self.needed_fraction,
        )

    # --- output -------------------------------------------------------------------

    def _repr_items(self) -> dict[str, Any]:
        # the verdict and the peak first: the repr is cut at 300 characters
        items: dict[str, Any] = {
            "ok": self.ok,
            "peak_bytes": self.peak_bytes,
            "max_device_bytes": self.max_device_bytes,
            "out_of_memory": self.out_of_memory,
        }
        for name in _REPR_NAMES:  # as schema v4's flat fields showed them
            if name in items:
                continue
            value = getattr(self, name)
            if value is None or isinstance(value, bool | int | float):
                items[name] = value
            elif isinstance(value, str):
                items[name] = value if len(value) <= 60 else value[:57] + "..."
            elif isinstance(value, tuple | dict):
                short = len(repr(value)) <= 60 and all(
                    isinstance(v, str | int | float) for v in value
                )
                items[name] = value if short else _Len(len(value))
        return items

    def _breakdown_table(self) -> Table | None:
        if self.breakdown is None:
            return None
        table = self.breakdown.table()
        facts = self.what_to_change
        if not facts:
            return table
        return dataclasses.replace(
            table,
            lead=(
                *table.lead,
                "What to change, from the breakdown:",
                *(f"- {fact}" for fact in facts),
            ),
        )

    def __str__(self) -> str:
        """The verdict, the report's table, then the breakdown of the peak (if any)."""
        text = super().__str__()
        table = self._breakdown_table()
        if table is None:
            return text
        return text + "\n\n" + table_text(table)

    def __rich__(self) -> Any:
        """The report's rich table, then the breakdown's (if any)."""
        table = self._breakdown_table()
        if table is None:
            return super().__rich__()
        from rich.console import Group
        from rich.text import Text

        return Group(to_rich(self.table()), Text(""), to_rich(table))

    def to_markdown(self) -> str:
        """The report's table, then the breakdown's (if any), as markdown."""
        text = super().to_markdown()
        table = self._breakdown_table()
        if table is None:
            return text
        return text.rstrip("\n") + "\n\n" + to_markdown(table)

    def _body_html(self, table: Table) -> str:
        body = super()._body_html(table)
        where = self.topology or "this process's devices"
        timed = step_time_svg(self.roofline, self.measured, where)
        if self.breakdown is None:
            memory = self.memory
            parts = peak_parts(
                memory.argument_bytes,
                memory.output_bytes,
                memory.temp_bytes,
                memory.alias_bytes,
            )
            return body + peak_bar_svg(parts, self.max_device_bytes) + timed
        from nnx_introspect._breakdown import breakdown_html

        return body + breakdown_html(self.breakdown, self.max_device_bytes) + timed

    def _after_verdict_html(self) -> str:
        """What was compiled, then what to change (none on a step that fits)."""
        from nnx_introspect._breakdown import advice_html

        return compiled_html(self) + advice_html(self.what_to_change)

    def json_data(self) -> dict[str, Any]:
        """Exact figures for JSON output."""
        breakdown = None if self.breakdown is None else self.breakdown.json_data()
        return step_json(self, breakdown)


class _Len(int):
    """A container's length in the ``repr`` (``batch_specs=2``)."""

    def __repr__(self) -> str:
        return str(int(self))

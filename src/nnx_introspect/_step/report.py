"""The step memory report: XLA's bytes per device beside the plan, and its renderers."""

import dataclasses
import html
import math
from typing import Any

from jax.sharding import PartitionSpec

from nnx_introspect._accelerators.budget import MAX_ADVISED_FRACTION, Budget
from nnx_introspect._breakdown.advice import what_to_change
from nnx_introspect._breakdown.report import Breakdown
from nnx_introspect._mesh import MeshConfigReport, parse_bytes
from nnx_introspect._render.formats import spec_json, spec_str
from nnx_introspect._render.table import (
    Report,
    Table,
    format_bytes,
    table_text,
    to_markdown,
    to_rich,
)
from nnx_introspect._roofline.estimate import Roofline
from nnx_introspect._typing import IntLike, typechecked

__all__ = [
    "StepMemoryReport",
]

_CPU_CAVEAT = (
    "XLA:CPU produced these numbers: its temporaries (buffer assignment, fusion, "
    "layouts) can differ from an accelerator's many times over; argument, output "
    "and alias bytes are exact on any backend. For TPU numbers pass a TPU "
    "`topology` (XLA:TPU compiles here without a TPU)."
)


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

    Attributes:
        num_devices: Devices in the mesh.
        argument_bytes: Bytes of the step's arguments on one device.
        output_bytes: Bytes of the step's outputs on one device.
        temp_bytes: Bytes of temporaries on one device.
        alias_bytes: Output bytes that reuse donated argument buffers.
        flops: Floating-point operations of one device's program
            (``cost_analysis()["flops"]``; ``nan`` when XLA gives none).
        plan: The :class:`MeshConfigReport` of the same model, mesh and rules
            (with the optimizer's state and the gradients when ``optimizer``
            is given).
        backend: The platform that compiled (``"cpu"``, ``"tpu"``...).
        compiler: The compiler and its version, e.g. ``"XLA:CPU (jaxlib
            0.10.2)"`` or ``"XLA:TPU (libtpu 0.0.52, TPU v5 lite)"``.
        device_kind: The devices' kind (``"cpu"``, ``"TPU v5 lite"``).
        compile_seconds: Wall time of lowering and compiling (in the child
            process when there was one).
        step: What was compiled: ``"forward"``, ``"forward + backward"`` or
            ``"forward + backward + optimizer update"``.
        loss: The loss's name (``"mean"``, ``"lm"``, a callable's name) or
            ``None`` for forward only.
        optimizer: The optimizer's name, or ``None``.
        batch: Each batch leaf as ``"int32[8,128]"``.
        batch_specs: Each batch leaf's partition spec.
        topology: The TPU or GPU topology name, or ``None``.
        compiled_in: ``"this process"``, ``"a child process with N virtual
            CPU devices"`` or ``"a child process (h100-8)"``.
        device_memory_bytes: The memory of one device of ``topology`` (TPU
            HBM per chip, the GPU's memory), or ``None`` on XLA:CPU.
        max_device_bytes: The budget :meth:`fits` uses by default: the
            ``max_device_bytes`` given, else ``device_memory_bytes``, else
            ``None``.
        out_of_memory: Whether the compiler refused the step for memory, or
            its peak exceeds the device's memory.
        compiler_message: The compiler's own words when it refused the step
            (``"RESOURCE_EXHAUSTED: ... CompileTimeHbmOom ..."``), or ``None``.
        compiler_required_bytes: The bytes the compiler said it needed (its
            two-decimal figure), or ``None``.
        compiler_available_bytes: The bytes it said the device has, or ``None``.
        warnings: The compiler's warnings and the caveats of this compile
            (XLA:GPU without autotuning, rematerialization that fell short).
        device_order: How the mesh's devices were laid out:
            ``"physical (topologies.make_mesh)"``, or ``"plain device order
            (make_mesh could not lay ...)"``.
        sharding_constraints: How many sharding constraints (activation
            ``with_sharding_constraint`` s, forward and transposed) the lowered
            step holds; ``None`` when not counted.
        budget_basis: What ``max_device_bytes`` is, in words: ``"the budget
            given"``, ``"the device's memory"`` (TPU) or, on a GPU target,
            ``"the 75% of the device's 79.11 GiB that JAX's GPU allocator
            takes (JAX's default)"``; ``None`` without a budget.
        allocator_fraction: On a GPU target without ``max_device_bytes``, the
            share of the device's memory JAX's allocator takes (from
            ``XLA_CLIENT_MEM_FRACTION`` / ``XLA_PYTHON_CLIENT_MEM_FRACTION``,
            else 0.75); else ``None``.
        traced_platform: The platform the model's code saw while the step
            was traced (``jax.devices()[0].platform``): a named target's
            (``"gpu"``, ``"tpu"``) unless ``trace_as_target=False`` or the
            step compiled in this process; ``None`` when not known.
        compiler_log: With ``debug=True``, what the compiler and the child
            process wrote to stderr (kept off the caller's); else ``None``.
        xla_peak_bytes: XLA's own ``memory_analysis().peak_memory_in_bytes``:
            the static buffers plus the peak of live temporaries, without
            their packing into one buffer (see :attr:`peak_bytes` for when it
            is used); ``None`` when not given.
        remat_limit_bytes: When XLA warned that rematerialization could not
            bring the step under its limit: that limit (on XLA:GPU, its
            scheduler's: 80% of the device's memory less the step's arguments
            and outputs, times 0.95, plus the outputs); else ``None``.
        remat_reduced_to_bytes: What XLA brought the step down to then.
        bytes_accessed: Bytes one device's program reads and writes
            (``cost_analysis()["bytes accessed"]``), or ``None``.
        matmul_dtype: The operand type of the dots doing most of the
            program's matmul FLOPs (``"bf16"``, ``"f32"``), or ``None``.
        collective_wire_bytes: Per mesh-axis combination the collectives of
            the compiled program run over: ``(axes, bytes, wire bytes)`` per
            device and step (``axes`` ``("?",)`` when XLA's groups are not
            whole mesh axes); ``None`` when not read. Wire bytes use the ring
            algorithm's factors (all-gather and reduce-scatter ``(n-1)/n``,
            all-reduce ``2(n-1)/n``).
        collectives_data: Every collective of the compiled program, as the
            JSON ``collectives`` key shows it; ``None`` when not read.
        network_bytes_per_second: The network bandwidth per GPU between
            hosts the :attr:`roofline` uses (``None``: the family's default).
        breakdown: With ``step_memory_report(..., breakdown=True)``: every
            buffer live at XLA's peak of the step, with its kind and its state
            path or source line, the grouped views and the memory curve
            (:class:`~nnx_introspect.Breakdown`); ``None`` otherwise, or when
            it could not be made (``warnings`` says why).

    When the compiler refused the step for memory, ``temp_bytes`` is its
    required figure for temporaries, ``argument_bytes`` the plan's exact
    shards, and output and aliased bytes are 0 (not known).

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
    """

    SCHEMA = "nnx-introspect/step-memory"
    SCHEMA_VERSION = 4

    num_devices: int
    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    alias_bytes: int
    flops: float
    plan: MeshConfigReport
    backend: str
    compiler: str
    device_kind: str
    compile_seconds: float
    step: str
    loss: str | None
    optimizer: str | None
    batch: tuple[str, ...]
    batch_specs: tuple[PartitionSpec, ...]
    topology: str | None = None
    compiled_in: str = "this process"
    device_memory_bytes: int | None = None
    max_device_bytes: int | None = None
    out_of_memory: bool = False
    compiler_message: str | None = None
    compiler_required_bytes: int | None = None
    compiler_available_bytes: int | None = None
    warnings: tuple[str, ...] = ()
    device_order: str = "plain device order"
    sharding_constraints: int | None = None
    budget_basis: str | None = None
    allocator_fraction: float | None = None
    traced_platform: str | None = None
    compiler_log: str | None = None
    xla_peak_bytes: int | None = None
    remat_limit_bytes: int | None = None
    remat_reduced_to_bytes: int | None = None
    breakdown: Breakdown | None = None
    bytes_accessed: float | None = None
    matmul_dtype: str | None = None
    collective_wire_bytes: tuple[tuple[tuple[str, ...], int, int], ...] | None = None
    collectives_data: dict[str, Any] | None = dataclasses.field(
        default=None, compare=False
    )
    network_bytes_per_second: int | None = None

    def __post_init__(self) -> None:
        # XLA:TPU refuses a program over its available HBM itself; XLA:GPU
        # compiles one over the device's memory, which cannot run
        over = (
            self.device_memory_bytes is not None
            and self.backend != "tpu"
            and self.peak_bytes > self.device_memory_bytes
        )
        if over and not self.out_of_memory:
            object.__setattr__(self, "out_of_memory", True)

    @property
    def peak_bytes(self) -> int:
        """The memory one device holds during the step.

        ``argument + output + temp - alias``: XLA allocates the arguments, the
        outputs (less those that reuse a donated argument's buffer) and one
        preallocated buffer for every temporary, and holds them for the whole
        step. Where XLA's own ``peak_memory_in_bytes`` (:attr:`xla_peak_bytes`)
        is larger, it is the peak (XLA:TPU reports small programs with no HBM
        temporaries but a larger peak); it never lowers the figure. XLA:CPU's
        is not used: jaxlib 0.10.2's CPU executable clears its heap traces
        before the figure is computed, so it counts no temporary.
        """
        held = (
            self.argument_bytes + self.output_bytes + self.temp_bytes - self.alias_bytes
        )
        if self.xla_peak_bytes is None or self.backend == "cpu":
            return held
        return max(held, self.xla_peak_bytes)

    @property
    def peak_basis(self) -> str:
        """Which figure :attr:`peak_bytes` is, in words."""
        held = (
            self.argument_bytes + self.output_bytes + self.temp_bytes - self.alias_bytes
        )
        if self.peak_bytes > held:
            return (
                "XLA's peak_memory_in_bytes, above arguments + outputs + "
                "temporaries - aliased"
            )
        return "arguments + outputs + temporaries - aliased"

    @property
    def total_flops(self) -> float:
        """``flops * num_devices``: the whole step's floating-point operations."""
        return self.flops * self.num_devices

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
                raise ValueError(
                    "`max_device_bytes` must be given: this report has no budget "
                    f"(compiled by {self.compiler}, no device memory known). Pass "
                    "a size such as '16GiB', or a `topology` to the report."
                )
            budget = self.max_device_bytes
        else:
            budget = _budget(max_device_bytes)
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

    def table(self) -> Table:
        """The report as a :class:`~nnx_introspect.Table`, the verdict first."""
        cats = self.plan.bytes_by_category
        refused = self.compiler_message is not None
        rows: list[tuple[str, str, str]] = [
            (
                "arguments (the plan's shards)" if refused else "arguments",
                format_bytes(self.argument_bytes),
                _n(self.argument_bytes),
            ),
            ("outputs", "not given", "-")
            if refused
            else ("outputs", format_bytes(self.output_bytes), _n(self.output_bytes)),
            (
                "temporaries (the compiler's figure)" if refused else "temporaries",
                format_bytes(self.temp_bytes),
                _n(self.temp_bytes),
            ),
            ("aliased (donated)", "not given", "-")
            if refused
            else (
                "aliased (donated)",
                _minus(format_bytes(self.alias_bytes), self.alias_bytes),
                _minus(_n(self.alias_bytes), self.alias_bytes),
            ),
        ]
        totals: tuple[tuple[str, str, str], ...] = (
            ("peak per device", format_bytes(self.peak_bytes), _n(self.peak_bytes)),
        )
        if self.xla_peak_bytes is not None and self.backend != "cpu":
            xla_peak = self.xla_peak_bytes
            totals += (
                (
                    "XLA's peak_memory_in_bytes",
                    format_bytes(xla_peak),
                    _n(xla_peak),
                ),
            )
        if self.max_device_bytes is not None:
            budget = self.max_device_bytes
            name = (
                "device memory (budget)"
                if budget == self.device_memory_bytes
                else "budget per device"
            )
            totals = ((name, format_bytes(budget), _n(budget)), *totals)
        if (
            self.device_memory_bytes is not None
            and self.device_memory_bytes != self.max_device_bytes
        ):
            memory = self.device_memory_bytes
            totals += (("device memory", format_bytes(memory), _n(memory)),)
        plan_rows = tuple(
            (f"plan: {cat}", format_bytes(cats[cat]), _n(cats[cat]))
            for cat in cats
            if cats[cat]
        )
        notes = [*self._verdict_notes()]
        notes += [
            f"Compiled in {self.compiled_in}, "
            f"{self.compile_seconds:.1f} s; step: {self.step}; batch: "
            f"{', '.join(self.batch)} split as "
            f"{', '.join(spec_str(s) for s in self.batch_specs)}."
        ]
        if self.topology is not None:
            notes.append(f"Device order: {self.device_order}.")
        notes.append(f"Peak per device: {self.peak_basis}.")
        if self.budget_basis is not None:
            notes.append(f"Budget: {self.budget_basis}.")
        if self.sharding_constraints is not None:
            seen = (
                ""
                if self.traced_platform is None
                else f"; the model saw the platform {self.traced_platform!r}"
            )
            notes.append(
                "Activation sharding constraints in the lowered step: "
                f"{self.sharding_constraints}{seen}."
            )
        notes += [f"Warning: {w}" for w in self.warnings]
        if self.backend == "cpu":
            notes.append(_CPU_CAVEAT)
        if math.isfinite(self.flops):
            notes.append(
                f"{self.flops:.4g} FLOPs per device, {self.total_flops:.4g} in all."
            )
        if self.collective_wire_bytes:
            parts = [
                f"{','.join(axes) or 'one device'}: {format_bytes(wire)}"
                for axes, _, wire in self.collective_wire_bytes
                if wire
            ]
            if parts:
                notes.append(
                    "Collectives on the wire per device and step (ring algorithm): "
                    + "; ".join(parts)
                    + "."
                )
        estimate = self.roofline
        if estimate is not None:
            notes.append(_roofline_note(estimate))
        notes.append(
            "Plan rows: the exact bytes per device of parameters, other state, "
            "optimizer state and gradients under the same mesh and rules; XLA's "
            "arguments hold the parameters, state and batch shards."
        )
        return Table(
            title=self.verdict,
            columns=("", "per device", "bytes"),
            rows=tuple(rows),
            totals=totals + plan_rows,
            notes=tuple(notes),
        )

    @property
    def needed_fraction(self) -> float | None:
        """The allocator fraction at which a GPU step that does not fit would.

        ``XLA_CLIENT_MEM_FRACTION`` rounded up to two decimals; ``None`` off
        GPU targets, with a budget given, when the step fits, or when no
        fraction up to 0.95 makes it fit (the CUDA context and NCCL's buffers
        need the rest of the device).
        """
        if self.out_of_memory and self.compiler_message is not None:
            return None
        budget = Budget(
            self.max_device_bytes,
            self.budget_basis,
            self.device_memory_bytes,
            self.allocator_fraction,
        )
        return budget.needed_fraction(self.peak_bytes)

    @property
    def verdict(self) -> str:
        """One line, the answer first: fits or not, the peak, the budget."""
        where = (
            f"one step on {self.num_devices} devices ({_mesh_str(self.plan)}; "
            f"{self.device_kind}), by {self.compiler}"
        )
        peak = format_bytes(self.peak_bytes)
        budget = self.max_device_bytes
        basis = "" if self.budget_basis is None else f" ({self.budget_basis})"
        if self.out_of_memory:
            has = self.device_memory_bytes
            available = self.compiler_available_bytes
            what = " (the compiler refused the step)" if self.compiler_message else ""
            if available is not None and available != has:
                of = "" if has is None else f" of the device's {format_bytes(has)}"
                has_text = f", the compiler has {format_bytes(available)}{of}"
            else:
                has_text = (
                    "" if has is None else f", the device has {format_bytes(has)}"
                )
            return f"Out of memory{what}: needs {peak} per device{has_text}; {where}"
        if budget is None:
            return f"Peak {peak} per device for {where}"
        if self.fits():
            of = format_bytes(budget)
            return f"Fits in {peak} of {of} per device{basis}: {where}"
        return (
            f"Does not fit: needs {peak} per device, the budget is "
            f"{format_bytes(budget)}{basis}{self._fraction_advice()}; {where}"
        )

    def _fraction_advice(self) -> str:
        if self.allocator_fraction is None:
            return ""
        needed = self.needed_fraction
        if needed is None:
            return f"; no allocator fraction up to {MAX_ADVISED_FRACTION} makes it fit"
        return f"; it fits with XLA_CLIENT_MEM_FRACTION={needed:.2f}"

    def _verdict_notes(self) -> list[str]:
        if self.compiler_message is None:
            return []
        return [f"The compiler's words: {self.compiler_message}"]

    @property
    def roofline(self) -> Roofline | None:
        """A step-time estimate for the named ``topology``; ``None`` without one.

        ``None`` too when the program's collectives could not be read (the
        warnings say why): an estimate without its communication would be
        too low.

        :func:`~nnx_introspect._roofline.estimate.roofline` of this program's FLOPs,
        bytes accessed and collective wire bytes per mesh axis on the target's
        data-sheet figures, at the peak of :attr:`matmul_dtype`: a range from
        perfect overlap to none, always an estimate, never a measurement.
        Collectives over groups that are not whole mesh axes are left out (a
        note in its assumptions says how many bytes). MFU counts ``6 N`` FLOPs
        per token for a training step with the ``"lm"`` loss (``2 N``
        forward only; ``N`` the parameters), else the program's FLOPs.
        """
        if (
            self.topology is None
            or (self.out_of_memory and self.compiler_message is not None)
            or not math.isfinite(self.flops)
            or self.bytes_accessed is None
            or self.collective_wire_bytes is None  # unread: no honest estimate
        ):
            return None
        from nnx_introspect._accelerators.hardware import hardware_for
        from nnx_introspect._roofline.estimate import roofline

        sizes = dict(zip(self.plan.axis_names, self.plan.axis_sizes, strict=True))
        comm: dict[tuple[str, ...], int] = {}
        left_out = 0
        for axes, _, wire in self.collective_wire_bytes or ():
            if axes and all(a in sizes for a in axes):
                if math.prod(sizes[a] for a in axes) > 1 and wire:
                    comm[tuple(axes)] = comm.get(tuple(axes), 0) + wire
            else:
                left_out += wire
        tokens = _tokens(self.batch) if self.loss == "lm" else None
        model_flops = None
        if tokens is not None:
            per_token = 2 if self.step == "forward" else 6
            model_flops = per_token * self.plan.n_params * tokens
        hardware = hardware_for(
            self.topology, network_bytes_per_second=self.network_bytes_per_second
        )
        dtype = self.matmul_dtype or "bf16"
        try:
            hardware.peak_flops_per_second(dtype)
        except ValueError:
            dtype = "f32"
        estimate = roofline(
            flops=self.flops,
            bytes_accessed=self.bytes_accessed,
            comm_bytes_by_axis=comm,
            mesh_axes=tuple(sizes.items()),
            hardware=hardware,
            dtype=dtype,
            tokens=tokens,
            model_flops=model_flops,
        )
        if left_out:
            note = (
                f"{format_bytes(left_out)} on the wire over device groups that are "
                "not whole mesh axes are left out of the communication terms."
            )
            estimate = dataclasses.replace(
                estimate, assumptions=(*estimate.assumptions, note)
            )
        return estimate

    @property
    def what_to_change(self) -> tuple[str, ...]:
        """Facts from the breakdown that point at what to change; ``()`` without one.

        See :func:`~nnx_introspect.what_to_change`; each sentence is a fact of
        this compile (shares of the peak, where the bytes come from, what is
        replicated over which mesh axis), never a guess.
        """
        if self.breakdown is None:
            return ()
        return what_to_change(self.breakdown, self.plan)

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
        if self.breakdown is None:
            return body
        from nnx_introspect._breakdown.chart import breakdown_html

        facts = self.what_to_change
        advice = ""
        if facts:
            items = "".join(f"<li>{html.escape(fact)}</li>" for fact in facts)
            advice = (
                '<p class="lead">What to change, from the breakdown:</p>'
                f"<ul>{items}</ul>"
            )
        return body + breakdown_html(self.breakdown, self.max_device_bytes) + advice

    def json_data(self) -> dict[str, Any]:
        """Exact figures for JSON output."""
        return {
            "ok": self.ok,
            "fits": None if self.max_device_bytes is None else self.fits(),
            "max_device_bytes": self.max_device_bytes,
            "device_memory_bytes": self.device_memory_bytes,
            "out_of_memory": self.out_of_memory,
            "verdict": self.verdict,
            "num_devices": self.num_devices,
            "mesh": dict(zip(self.plan.axis_names, self.plan.axis_sizes, strict=True)),
            "peak_bytes": self.peak_bytes,
            "peak_basis": self.peak_basis,
            "xla_peak_bytes": self.xla_peak_bytes,
            "remat_limit_bytes": self.remat_limit_bytes,
            "remat_reduced_to_bytes": self.remat_reduced_to_bytes,
            "argument_bytes": self.argument_bytes,
            "output_bytes": self.output_bytes,
            "temp_bytes": self.temp_bytes,
            "alias_bytes": self.alias_bytes,
            "flops": self.flops if math.isfinite(self.flops) else None,
            "backend": self.backend,
            "compiler": self.compiler,
            "device_kind": self.device_kind,
            "topology": self.topology,
            "compiled_in": self.compiled_in,
            "compile_seconds": self.compile_seconds,
            "compiler_message": self.compiler_message,
            "compiler_required_bytes": self.compiler_required_bytes,
            "compiler_available_bytes": self.compiler_available_bytes,
            "warnings": list(self.warnings),
            "device_order": self.device_order,
            "sharding_constraints": self.sharding_constraints,
            "budget_basis": self.budget_basis,
            "allocator_fraction": self.allocator_fraction,
            "needed_fraction": self.needed_fraction,
            "traced_platform": self.traced_platform,
            "bytes_accessed": self.bytes_accessed,
            "matmul_dtype": self.matmul_dtype,
            "collective_wire_bytes": None
            if self.collective_wire_bytes is None
            else [
                {"axes": list(axes), "bytes": n, "wire_bytes": wire}
                for axes, n, wire in self.collective_wire_bytes
            ],
            "collectives": self.collectives_data,
            "roofline": None if self.roofline is None else self.roofline.json_data(),
            "breakdown": None if self.breakdown is None else self.breakdown.json_data(),
            "what_to_change": list(self.what_to_change),
            "step": self.step,
            "loss": self.loss,
            "optimizer": self.optimizer,
            "batch": list(self.batch),
            "batch_specs": [spec_json(s) for s in self.batch_specs],
            "temporaries_caveat": _CPU_CAVEAT if self.backend == "cpu" else None,
            "plan": {
                "bytes_per_device": self.plan.bytes_per_device,
                "bytes_per_device_by_category": self.plan.bytes_by_category,
                "n_params": self.plan.n_params,
                "ok": self.plan.ok,
            },
        }


def _tokens(batch: tuple[str, ...]) -> int | None:
    """Tokens in a step: the elements of the first batch leaf (``int32[8,2048]``)."""
    if not batch:
        return None
    dims = batch[0].partition("[")[2].rstrip("]")
    try:
        return math.prod(int(d) for d in dims.split(",") if d.strip())
    except ValueError:
        return None


def _roofline_note(estimate: Roofline) -> str:
    """One sentence: the range, what bounds it, the MFU ceiling, tokens per second."""

    def seconds(value: float) -> str:
        return f"{value * 1e3:.3g} ms" if value < 1 else f"{value:.3g} s"

    tokens = ""
    if estimate.tokens_per_second_low is not None:
        tokens = (
            f"; {estimate.tokens_per_second_low:,.0f} to "
            f"{estimate.tokens_per_second_high:,.0f} tokens/s"
        )
    return (
        f"Step time, estimated (a roofline from the compiled program and "
        f"data-sheet peaks at {estimate.dtype}, not a measurement): "
        f"{seconds(estimate.low_seconds)} (perfect overlap) to "
        f"{seconds(estimate.high_seconds)} (none), bound by {estimate.bound}; "
        f"MFU ceiling {estimate.mfu_ceiling:.0%}{tokens}."
    )


def _n(value: int) -> str:
    return f"{value:,}"


def _mesh_str(plan: MeshConfigReport) -> str:
    return ", ".join(
        f"{n}={s}" for n, s in zip(plan.axis_names, plan.axis_sizes, strict=True)
    )


def _minus(text: str, value: int) -> str:
    """``"-" + text`` for a deduction, never a negative zero."""
    return text if value == 0 else "-" + text


def _budget(value: Any) -> int:
    return parse_bytes(value)

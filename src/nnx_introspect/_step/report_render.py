"""The step report's words: its verdict, its table, its notes and its JSON.

Every sentence a :class:`~nnx_introspect.StepMemoryReport` shows is made here,
from its records (:mod:`nnx_introspect._step.step_records`) and the few facts
of the step beside them; the report stores figures and kinds, never these
words. The functions take any object with the report's attributes
(:class:`RenderedStep`), so this module does not import the report's.
"""

import datetime
import math
import re
from collections.abc import Callable
from typing import Any, Protocol

from jax.sharding import PartitionSpec

from nnx_introspect._accelerators import MAX_ADVISED_FRACTION
from nnx_introspect._mesh import MeshConfigReport, mesh_str
from nnx_introspect._render import Table, format_bytes, spec_json, spec_str
from nnx_introspect._roofline import RANGE_WORDS, Roofline
from nnx_introspect._step.lora import lora_text
from nnx_introspect._step.measured import Measured, measured_rows, versus_json
from nnx_introspect._step.step_records import (
    StepBudget,
    StepCompilation,
    StepMemory,
    StepProgram,
)
from nnx_introspect._text import plural
from nnx_introspect._xla import flags_text

__all__ = [
    "CPU_CAVEAT",
    "RenderedStep",
    "cached_date",
    "cached_json",
    "compiled_words",
    "options_text",
    "roofline_note",
    "split_cached",
    "step_json",
    "step_table",
    "step_verdict",
]

CPU_CAVEAT = (
    "XLA:CPU produced these numbers: its temporaries (buffer assignment, fusion, "
    "layouts) can differ from an accelerator's many times over; argument, output "
    "and alias bytes are exact on any backend. For TPU numbers pass a TPU "
    "`topology` (XLA:TPU compiles here without a TPU)."
)
"""The note every report compiled by XLA:CPU carries."""

_Row = tuple[str, str, str]


class RenderedStep(Protocol):
    """What the renderers read of a step report (its records and its words)."""

    @property
    def num_devices(self) -> int: ...
    @property
    def plan(self) -> MeshConfigReport: ...
    @property
    def step(self) -> str: ...
    @property
    def loss(self) -> str | None: ...
    @property
    def optimizer(self) -> str | None: ...
    @property
    def batch(self) -> tuple[str, ...]: ...
    @property
    def batch_specs(self) -> tuple[PartitionSpec, ...]: ...
    @property
    def topology(self) -> str | None: ...
    @property
    def remat(self) -> tuple[tuple[str, str], ...]: ...
    @property
    def microbatches(self) -> int: ...
    @property
    def lora(self) -> int | str | None: ...
    @property
    def tokens_per_step(self) -> int | None: ...
    @property
    def memory(self) -> StepMemory: ...
    @property
    def budget(self) -> StepBudget: ...
    @property
    def program(self) -> StepProgram: ...
    @property
    def compilation(self) -> StepCompilation: ...
    @property
    def roofline(self) -> Roofline | None: ...
    @property
    def measured(self) -> Measured | None: ...
    @property
    def warnings(self) -> tuple[str, ...]: ...
    @property
    def compiled_in(self) -> str: ...
    @property
    def budget_basis(self) -> str | None: ...
    @property
    def needed_fraction(self) -> float | None: ...
    @property
    def ok(self) -> bool: ...
    @property
    def verdict(self) -> str: ...
    @property
    def what_to_change(self) -> tuple[str, ...]: ...
    def fits(self, max_device_bytes: Any = None) -> bool: ...


def step_verdict(report: RenderedStep) -> str:
    """One line, the answer first: fits or not, the peak, the budget."""
    plan, memory, budget = report.plan, report.memory, report.budget
    compiled = report.compilation
    where = (
        f"one step on {plural(report.num_devices, 'device')} ({mesh_str(plan)}; "
        f"{compiled.device_kind}), by {compiled.compiler}"
    )
    seen = compiled.traced_platform
    if (
        seen is not None
        and compiled.backend in ("gpu", "tpu")
        and seen != compiled.backend
    ):
        where += (
            f", the model traced as on {seen!r}, not as on its target (code that"
            " asks for its platform took that path)"
        )
    peak = format_bytes(memory.peak_bytes)
    basis = "" if report.budget_basis is None else f" ({report.budget_basis})"
    if memory.out_of_memory:
        has = budget.device_memory_bytes
        available = memory.compiler_available_bytes
        what = " (the compiler refused the step)" if memory.refused else ""
        if available is not None and available != has:
            of = "" if has is None else f" of the device's {format_bytes(has)}"
            has_text = f", the compiler has {format_bytes(available)}{of}"
        else:
            has_text = "" if has is None else f", the device has {format_bytes(has)}"
        return f"Out of memory{what}: needs {peak} per device{has_text}; {where}"
    if budget.max_device_bytes is None:
        return f"Peak {peak} per device for {where}"
    limit = format_bytes(budget.max_device_bytes)
    if report.fits():
        return f"Fits in {peak} of {limit} per device{basis}: {where}"
    return (
        f"Does not fit: needs {peak} per device, the budget is "
        f"{limit}{basis}{_fraction_advice(report)}; {where}"
    )


def _fraction_advice(report: RenderedStep) -> str:
    if report.budget.allocator_fraction is None:
        return ""
    needed = report.needed_fraction
    if needed is None:
        return f"; no allocator fraction up to {MAX_ADVISED_FRACTION} makes it fit"
    return f"; it fits with XLA_CLIENT_MEM_FRACTION={needed:.2f}"


def step_table(report: RenderedStep) -> Table:
    """The report as a :class:`~nnx_introspect.Table`, the verdict first."""
    cats = report.plan.bytes_by_category
    plan_rows = tuple(
        (f"plan: {cat}", format_bytes(cats[cat]), _n(cats[cat]))
        for cat in cats
        if cats[cat]
    )
    return Table(
        title=report.verdict,
        columns=("", "per device", "bytes"),
        rows=_memory_rows(report.memory),
        totals=_totals(report.memory, report.budget)
        + plan_rows
        + measured_rows(
            report.measured, _range(report.roofline), "step", _point(report.roofline)
        ),
        notes=tuple(_notes(report)),
        emphasis=_EMPHASIS,
    )


_EMPHASIS = ("peak per device", "budget per device", "device memory (budget)")
"""The totals rows in bold: the peak and the budget, nothing else."""


def _memory_rows(memory: StepMemory) -> tuple[_Row, ...]:
    """Arguments, outputs, temporaries and aliased bytes (the compiler's if refused)."""
    refused = memory.refused
    alias = memory.alias_bytes
    return (
        (
            "arguments (the plan's shards)" if refused else "arguments",
            format_bytes(memory.argument_bytes),
            _n(memory.argument_bytes),
        ),
        ("outputs", "not given", "-")
        if refused
        else ("outputs", format_bytes(memory.output_bytes), _n(memory.output_bytes)),
        (
            "temporaries (the compiler's figure)" if refused else "temporaries",
            format_bytes(memory.temp_bytes),
            _n(memory.temp_bytes),
        ),
        ("aliased (donated)", "not given", "-")
        if refused
        else (
            "aliased (donated)",
            _minus(format_bytes(alias), alias),
            _minus(_n(alias), alias),
        ),
    )


def _totals(memory: StepMemory, budget: StepBudget) -> tuple[_Row, ...]:
    """The budget, the peak, XLA's own peak and the device's memory."""
    peak = memory.peak_bytes
    totals: tuple[_Row, ...] = (("peak per device", format_bytes(peak), _n(peak)),)
    if memory.xla_peak_bytes is not None and memory.xla_peak_complete:
        xla_peak = memory.xla_peak_bytes
        name = "XLA's peak_memory_in_bytes"
        totals += ((name, format_bytes(xla_peak), _n(xla_peak)),)
    limit, device = budget.max_device_bytes, budget.device_memory_bytes
    if limit is not None:
        name = "device memory (budget)" if limit == device else "budget per device"
        totals = ((name, format_bytes(limit), _n(limit)), *totals)
    if device is not None and device != limit:
        totals += (("device memory", format_bytes(device), _n(device)),)
    return totals


def _notes(report: RenderedStep) -> list[str]:
    """The compiler's words, how it was compiled, the warnings, the program."""
    memory, program, compiled = report.memory, report.program, report.compilation
    notes = []
    if memory.compiler_message is not None:
        notes.append(f"The compiler's words: {memory.compiler_message}")
    when = compiled_words(compiled.seconds, compiled.cached)
    notes.append(
        f"Compiled in {report.compiled_in}, "
        f"{when}; step: {report.step}; batch: "
        f"{', '.join(report.batch)} split as "
        f"{', '.join(spec_str(s) for s in report.batch_specs)}."
    )
    flags = flags_text(compiled.compiler_flags)
    if flags is not None:
        notes.append(flags)
    notes.append(loss_text(report.loss, report.batch))
    if report.remat or report.microbatches > 1 or report.lora is not None:
        notes.append(options_text(report.remat, report.microbatches, report.lora))
    if report.topology is not None:
        notes.append(f"Device order: {compiled.device_order}.")
    notes.append(f"Peak per device: {memory.peak_basis}.")
    if report.budget_basis is not None:
        notes.append(f"Budget: {report.budget_basis}.")
    if program.sharding_constraints is not None:
        seen = (
            ""
            if compiled.traced_platform is None
            else f"; the model saw the platform {compiled.traced_platform!r}"
        )
        notes.append(
            "Activation sharding constraints in the lowered step: "
            f"{program.sharding_constraints}{seen}."
        )
    notes += [f"Warning: {w}" for w in report.warnings]
    if compiled.backend == "cpu":
        notes.append(CPU_CAVEAT)
    return notes + _program_notes(report)


def _program_notes(report: RenderedStep) -> list[str]:
    """FLOPs, the collectives' wire bytes, the roofline, what the plan rows are."""
    program, notes = report.program, []
    if math.isfinite(program.flops):
        total = program.flops * report.num_devices
        counted = [f"{name} \u00d7{trips}" for name, trips in program.loop_trips]
        each = (
            f" (each while loop's body counted once per trip: {', '.join(counted)})"
            if counted
            else ""
        )
        notes.append(f"{program.flops:.4g} FLOPs per device, {total:.4g} in all{each}.")
    parts = [
        f"{','.join(axes) or 'one device'}: {format_bytes(wire)}"
        for axes, _, wire in program.collective_wire_bytes or ()
        if wire
    ]
    if parts:
        notes.append(
            "Collectives on the wire per device and step (ring algorithm): "
            + "; ".join(parts)
            + "."
        )
    irregular = (
        None if program.collectives is None else program.collectives.irregular_note()
    )
    if irregular is not None:
        notes.append(irregular)
    ragged = None if program.collectives is None else program.collectives.ragged_note()
    if ragged is not None:  # the receive buffer XLA sizes for the worst case
        notes.append(ragged)
    if report.roofline is not None:
        notes.append(roofline_note(report.roofline))
    if report.measured is not None:
        notes.append(report.measured.sentence())
    notes.append(
        "Plan rows: the exact bytes per device of parameters, other state, "
        "optimizer state and gradients under the same mesh and rules; XLA's "
        "arguments hold the parameters, state and batch shards."
    )
    return notes


def _range(estimate: Roofline | None) -> tuple[float, float] | None:
    return None if estimate is None else (estimate.low_seconds, estimate.high_seconds)


def _point(estimate: Roofline | None) -> tuple[float, str] | None:
    """The point estimate and its basis, or ``None``."""
    if estimate is None or estimate.time is None:
        return None
    return estimate.time.seconds, estimate.time.basis


def roofline_note(estimate: Roofline) -> str:
    """One sentence: the estimate, what bounds it, the utilisation, tokens per second.

    With a point estimate, its one utilisation is at that estimate, and the
    roofline's range follows, said to be no bound (:data:`RANGE_WORDS`).

    The utilisation says what it counts: an MFU of ``6·N·tokens`` when the
    tokens are known, else the hardware FLOPs utilisation of the program's
    FLOPs. It is given at the peak that bounds compute (named: ``TF32`` for
    f32 matmuls on a GPU) and, where that is not the bf16 dense peak, at the
    bf16 peak too.

    Example:
        >>> from nnx_introspect._accelerators.hardware import hardware_for
        >>> from nnx_introspect._roofline.estimate import roofline
        >>> est = roofline(
        ...     flops=197e12, bytes_accessed=0.0, comm_bytes_by_axis={},
        ...     mesh_axes=(("data", 4),), hardware=hardware_for("v5e-4"),
        ... )
        >>> print(roofline_note(est))  # doctest: +NORMALIZE_WHITESPACE
        Step time, estimated (a roofline from the compiled program and data-sheet
        peaks at bf16, not a measurement): 1 s (perfect overlap) to 1 s (none),
        bound by compute; hardware FLOPs utilisation ceiling 100% (the program's
        FLOPs x devices, recompute included).
        >>> tf32 = roofline(
        ...     flops=494.5e12, bytes_accessed=0.0, comm_bytes_by_axis={},
        ...     mesh_axes=(("data", 8),), hardware=hardware_for("h100-8"),
        ...     dtype="f32", tokens=8 * 1024, model_flops=8 * 400e12,
        ...     model_flops_basis="6·N·tokens, attention not counted",
        ... )
        >>> print(roofline_note(tf32))  # doctest: +NORMALIZE_WHITESPACE
        Step time, estimated (a roofline from the compiled program and data-sheet
        peaks at TF32, the rate of f32 matmuls at JAX's default precision, not
        a measurement): 1 s (perfect overlap) to 1 s (none), bound by compute;
        MFU ceiling 80.9% at the TF32 peak, 40.4% at the bf16 peak
        (6·N·tokens, attention not counted); 8,192 to 8,192 tokens/s.
    """

    def seconds(value: float) -> str:
        return f"{value * 1e3:.3g} ms" if value < 1 else f"{value:.3g} s"

    if estimate.time is not None and estimate.mfu is not None:
        return _point_note(estimate, seconds)
    tokens = ""
    if estimate.tokens_per_second_low is not None:
        tokens = (
            f"; {estimate.tokens_per_second_low:,.0f} to "
            f"{estimate.tokens_per_second_high:,.0f} tokens/s"
        )
    utilisation = f"{estimate.utilisation} ceiling {_percent(estimate.mfu_ceiling)}"
    if estimate.bf16_peak_flops_per_second != estimate.peak_flops_per_second:
        utilisation += (
            f" at the {estimate.peak_name} peak, "
            f"{_percent(estimate.mfu_bf16_ceiling)} at the bf16 peak"
        )
    return (
        f"Step time, estimated (a roofline from the compiled program and "
        f"data-sheet peaks at {estimate.peak_words}, not a measurement): "
        f"{seconds(estimate.low_seconds)} (perfect overlap) to "
        f"{seconds(estimate.high_seconds)} (none), bound by {estimate.bound}; "
        f"{utilisation} ({estimate.mfu_basis}){tokens}."
    )


def _point_note(estimate: Roofline, seconds: Callable[[float], str]) -> str:
    """:func:`roofline_note` of an estimate with a point time."""
    time = estimate.time
    assert time is not None and estimate.mfu is not None  # the caller checked
    utilisation = f"{estimate.utilisation} {_percent(estimate.mfu)}"
    if estimate.bf16_peak_flops_per_second != estimate.peak_flops_per_second:
        utilisation += (
            f" at the {estimate.peak_name} peak, "
            f"{_percent(estimate.mfu_bf16 or 0.0)} at the bf16 peak"
        )
    tokens = ""
    if estimate.tokens_per_second is not None:
        tokens = f"; {estimate.tokens_per_second:,.0f} tokens/s"
    return (
        f"Step time, estimated from the compiled program's instructions (not a "
        f"measurement): {seconds(time.seconds)} ({time.basis}); {utilisation} "
        f"({estimate.mfu_basis}){tokens}. Roofline range at {estimate.peak_words}: "
        f"{seconds(estimate.low_seconds)} (every term overlapped) to "
        f"{seconds(estimate.high_seconds)} (none), {RANGE_WORDS}."
    )


def _percent(fraction: float) -> str:
    """``0.0477`` -> ``"4.77%"``: three figures, so a 5% difference shows."""
    return f"{fraction * 100:.3g}%"


def step_json(report: RenderedStep, breakdown: dict[str, Any] | None) -> dict[str, Any]:
    """The report's exact figures, in the order of schema v4, as JSON data.

    A report from the cache of compile results adds ``"cached"`` (when the
    program was compiled) and ``"cached_compile_seconds"`` (how long that
    compile took) after ``"compile_seconds"`` (the seconds this run took to
    find it).
    """
    compiled = report.compilation
    data = _step_data(report, breakdown)
    if compiled.cached is None:
        return data
    # present only on a report from the cache: a fresh one's JSON is schema v4's
    at = list(data).index("compile_seconds") + 1
    items = list(data.items())
    return dict([*items[:at], *cached_json(compiled.cached).items(), *items[at:]])


def split_cached(cached: str) -> tuple[str, float | None]:
    """``(when the compile ended, its seconds or None)`` of a report's ``cached``.

    The cache of compile results writes ``cached`` as an ISO 8601 interval of
    the first compile's duration and its end
    (:func:`~nnx_introspect._xla.cache.cached_interval`); an entry written
    before it kept the time alone.

    Example:
        >>> split_cached("PT31.25S/2026-12-05T07:30:12+00:00")
        ('2026-12-05T07:30:12+00:00', 31.25)
        >>> split_cached("2026-12-05T07:30:12+00:00")
        ('2026-12-05T07:30:12+00:00', None)
    """
    found = re.fullmatch(r"PT([0-9]+(?:\.[0-9]*)?)S/(.*)", cached)
    if found is None:
        return cached, None
    return found.group(2), float(found.group(1))


def cached_json(cached: str) -> dict[str, Any]:
    """``{"cached": <when>, "cached_compile_seconds": <seconds or null>}``.

    Example:
        >>> cached_json("PT31.25S/2026-12-05T07:30:12+00:00")
        {'cached': '2026-12-05T07:30:12+00:00', 'cached_compile_seconds': 31.25}
    """
    when, seconds = split_cached(cached)
    return {"cached": when, "cached_compile_seconds": seconds}


def compiled_words(seconds: float, cached: str | None, name: str = "") -> str:
    """How a program compiled, in words: its seconds, or when the cache had it.

    The one wording of a step's, a serving program's and an RL phase's
    compile: ``seconds`` is what this run took (to lower and compile, or, from
    the cache of compile results, to trace and find the program), ``cached``
    the cache's interval (:func:`cached_date`) or ``None``; ``name`` the
    program's, put first.

    Example:
        >>> compiled_words(2.5, None, "decode")
        'decode 2.5 s'
        >>> print(compiled_words(4.31, "PT31.25S/2026-12-05T07:30:12+00:00"))
        from the cache (compiled on 2026-12-05 07:30 UTC in 31.2 s; found in 4.3 s \
this run)
    """
    took = f"{seconds:.1f} s"
    if cached is not None:
        took = (
            f"from the cache (compiled on {cached_date(cached)}; found in {took} "
            "this run)"
        )
    return f"{name} {took}" if name else took


def cached_date(cached: str) -> str:
    """When (and in how long) a program from the cache was compiled, in words.

    Example:
        >>> cached_date("PT31.25S/2026-12-05T07:30:12+00:00")
        '2026-12-05 07:30 UTC in 31.2 s'
        >>> cached_date("2026-12-05T07:30:12+00:00")
        '2026-12-05 07:30 UTC'
        >>> cached_date("not a date")
        'not a date'
    """
    iso, seconds = split_cached(cached)
    took = "" if seconds is None else f" in {seconds:.1f} s"
    try:
        when = datetime.datetime.fromisoformat(iso).astimezone(datetime.UTC)
    except ValueError:
        return iso + took
    return when.strftime("%Y-%m-%d %H:%M UTC") + took


def _step_data(
    report: RenderedStep, breakdown: dict[str, Any] | None
) -> dict[str, Any]:
    """:func:`step_json` of a freshly compiled report."""
    memory, budget, program = report.memory, report.budget, report.program
    compiled, plan = report.compilation, report.plan
    wire = program.collective_wire_bytes
    collectives = program.collectives
    return {
        "ok": report.ok,
        "fits": None if budget.max_device_bytes is None else report.fits(),
        "max_device_bytes": budget.max_device_bytes,
        "device_memory_bytes": budget.device_memory_bytes,
        "out_of_memory": memory.out_of_memory,
        "verdict": report.verdict,
        "num_devices": report.num_devices,
        "mesh": dict(zip(plan.axis_names, plan.axis_sizes, strict=True)),
        "peak_bytes": memory.peak_bytes,
        "peak_basis": memory.peak_basis,
        "xla_peak_bytes": memory.xla_peak_bytes,
        "remat_limit_bytes": program.remat_limit_bytes,
        "remat_reduced_to_bytes": program.remat_reduced_to_bytes,
        "argument_bytes": memory.argument_bytes,
        "output_bytes": memory.output_bytes,
        "temp_bytes": memory.temp_bytes,
        "alias_bytes": memory.alias_bytes,
        "flops": program.flops if math.isfinite(program.flops) else None,
        "backend": compiled.backend,
        "compiler": compiled.compiler,
        "device_kind": compiled.device_kind,
        "topology": report.topology,
        "compiled_in": report.compiled_in,
        "compile_seconds": compiled.seconds,
        "compiler_message": memory.compiler_message,
        "compiler_required_bytes": memory.compiler_required_bytes,
        "compiler_available_bytes": memory.compiler_available_bytes,
        "warnings": list(report.warnings),
        "device_order": compiled.device_order,
        "sharding_constraints": program.sharding_constraints,
        "budget_basis": report.budget_basis,
        "allocator_fraction": budget.allocator_fraction,
        "needed_fraction": report.needed_fraction,
        "traced_platform": compiled.traced_platform,
        "bytes_accessed": program.bytes_accessed,
        "matmul_dtype": program.matmul_dtype,
        "collective_wire_bytes": None
        if wire is None
        else [{"axes": list(a), "bytes": n, "wire_bytes": w} for a, n, w in wire],
        "collectives": None if collectives is None else collectives.json_data(),
        "roofline": None if report.roofline is None else report.roofline.json_data(),
        "breakdown": breakdown,
        "what_to_change": list(report.what_to_change),
        "step": report.step,
        "loss": report.loss,
        "optimizer": report.optimizer,
        "remat": dict(report.remat),
        "microbatches": report.microbatches,
        "tokens_per_step": report.tokens_per_step,
        "lora": report.lora,
        "compiler_flags": [f._asdict() for f in compiled.compiler_flags],
        "batch": list(report.batch),
        "batch_specs": [spec_json(s) for s in report.batch_specs],
        "temporaries_caveat": CPU_CAVEAT if compiled.backend == "cpu" else None,
        "plan": {
            "bytes_per_device": plan.bytes_per_device,
            "bytes_per_device_by_category": plan.bytes_by_category,
            "n_params": plan.n_params,
            "ok": plan.ok,
        },
        "measured": None
        if report.measured is None
        else report.measured.json_data()
        | {
            "versus_estimate": versus_json(
                report.measured,
                _range(report.roofline),
                None if report.roofline is None else report.roofline.seconds,
            )
        },
    }


def loss_text(loss: str | None, batch: tuple[str, ...]) -> str:
    """What the step differentiated, in one sentence; the likely fix for ``mean``.

    Example:
        >>> text = loss_text("mean", ("int32[8,2048]",))
        >>> text.startswith("Loss: mean — the mean of the model's outputs, not a")
        True
        >>> text.endswith('pass loss="lm" (--loss lm).')
        True
        >>> loss_text("mean", ("float32[8,4]",)).endswith("not a training loss.")
        True
        >>> loss_text(None, ("float32[8,4]",))
        'Loss: none — the forward pass only.'
    """
    if loss is None:
        return "Loss: none — the forward pass only."
    if loss == "lm":
        return "Loss: lm — the next-token cross-entropy of the logits against batch[0]."
    if loss != "mean":
        return f"Loss: {loss} — the callable given."
    text = "Loss: mean — the mean of the model's outputs, not a training loss"
    tokens = batch[0] if batch else ""
    if tokens.startswith(("int", "uint")) and tokens.count(",") == 1:
        text += (
            "; the batch is integer token ids: for a language model's training "
            'step pass loss="lm" (--loss lm)'
        )
    return text + "."


def options_text(
    remat: tuple[tuple[str, str], ...],
    microbatches: int,
    lora: int | str | None = None,
) -> str:
    """The step's options in one sentence, applied or not (LoRA when set).

    Example:
        >>> options_text((("LlamaLayer", "nothing_saveable"),), 4)
        'Options: rematerialised: LlamaLayer (nothing_saveable); gradients \
accumulated over 4 microbatches.'
        >>> options_text((), 1)
        'Options: no layer rematerialised; one pass over the batch (no \
microbatches).'
        >>> options_text((), 1, 16)
        'Options: no layer rematerialised; one pass over the batch (no \
microbatches); LoRA rank 16 on every nnx.Linear, the rest frozen.'
    """
    layers = (
        "no layer rematerialised"
        if not remat
        else "rematerialised: " + ", ".join(f"{c} ({p})" for c, p in remat)
    )
    passes = (
        "one pass over the batch (no microbatches)"
        if microbatches == 1
        else f"gradients accumulated over {microbatches} microbatches"
    )
    if lora is None:
        return f"Options: {layers}; {passes}."
    return f"Options: {layers}; {passes}; {lora_text(lora)}."


def _n(value: int) -> str:
    return f"{value:,}"


def _minus(text: str, value: int) -> str:
    """``"-" + text`` for a deduction, never a negative zero."""
    return text if value == 0 else "-" + text

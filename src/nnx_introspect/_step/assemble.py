"""The step report assembled from a compile's readings, its plan and its budget.

:func:`assemble_report` is where the readings a compile returned (in this
process or a child's) become a :class:`StepMemoryReport`: XLA's warnings
quoted, rematerialisation read, the out-of-memory case sized from the plan,
and the caveats judged on the finished report.
"""

import math

import jax.numpy as jnp
from jax.sharding import NamedSharding

from nnx_introspect._accelerators import Budget
from nnx_introspect._breakdown import Breakdown
from nnx_introspect._mesh import MeshConfigReport, as_abstract_mesh
from nnx_introspect._render import batch_str, format_bytes
from nnx_introspect._step.inputs import Request
from nnx_introspect._step.measured import Measured
from nnx_introspect._step.report import StepMemoryReport
from nnx_introspect._step.step_estimate import active_params, batch_tokens
from nnx_introspect._step.step_records import (
    StepBudget,
    StepCompilation,
    StepProgram,
    collectives_from_json,
    compiled_in_kind,
    memory_from_readings,
    step_kind,
)
from nnx_introspect._xla import (
    CompilerFlag,
    RematStatement,
    XlaReadings,
    compiler_name,
)

__all__ = ["NO_CONSTRAINT_WARNING", "assemble_report"]


def _planned_argument_bytes(request: Request, plan: MeshConfigReport) -> int:
    """Bytes of the step's arguments on one device, from the plan's shards.

    What XLA's ``argument_size_in_bytes`` counts, without the compiler's
    padding: for a compile refused for memory, which gives no analysis.
    """
    state = sum(leaf.bytes_per_device for leaf in plan.leaves)
    if request.tx is not None:
        state += sum(leaf.bytes_per_device for leaf in plan.optimizer_leaves)
    abstract = as_abstract_mesh(dict(request.mesh_axes))
    for leaf, spec in zip(request.batch, request.batch_specs, strict=True):
        shard = NamedSharding(abstract, spec).shard_shape(leaf.shape)
        state += math.prod(shard) * jnp.dtype(leaf.dtype).itemsize
    return state


def assemble_report(
    request: Request,
    plan: MeshConfigReport,
    readings: XlaReadings,
    topology: str | None,
    compiled_in: str,
    budget: Budget,
    debug: bool = False,
    network: int | None = None,
) -> StepMemoryReport:
    tx, optimizer_name = request.tx, request.optimizer_name
    # This module's own readings first, then the records built from them.
    warnings = list(readings.warnings)
    warnings += [_remat_warning(s, budget, readings.backend) for s in readings.remat]
    if readings.collectives_error:
        warnings.append(
            "The compiled program's collectives could not be read: "
            f"{readings.collectives_error}"
        )
    found = readings.breakdown
    if request.breakdown and found is None:
        why = readings.breakdown_error or "XLA wrote no dump to read"
        warnings.append(f"No breakdown of the peak: {why}.")
    warnings += _caveats(readings.sharding_constraints, request, plan)
    order = _device_order(readings.device_order, topology)
    refused = readings.argument_bytes is None  # no analysis: the plan's shards
    planned = _planned_argument_bytes(request, plan) if refused else 0
    program = _program(readings)
    memory = memory_from_readings(readings, budget, planned)
    batch = tuple(batch_str(b) for b in request.batch)
    return StepMemoryReport(
        num_devices=request.num_devices,
        plan=plan,
        step=step_kind(request.loss, tx),
        loss=request.loss_name,
        optimizer=optimizer_name if tx is None or optimizer_name else "optax object",
        batch=batch,
        batch_specs=request.batch_specs,
        memory=memory,
        budget=StepBudget.from_budget(budget, topology),
        program=program,
        compilation=StepCompilation(
            backend=readings.backend,
            compiler=compiler_name(readings.backend, readings.device_kind),
            device_kind=readings.device_kind,
            compiled_in=compiled_in_kind(compiled_in, request.num_devices, topology),
            seconds=float(readings.compile_seconds),
            device_order=order,
            traced_platform=readings.traced_platform,
            log=readings.compiler_log if debug else None,
            cached=readings.cached,
            compiler_flags=tuple(CompilerFlag(*f) for f in readings.compiler_flags),
        ),
        topology=topology,
        network_bytes_per_second=network,
        warnings=tuple(warnings),
        breakdown=None if found is None else Breakdown.from_json_data(found),
        remat=request.remat,
        microbatches=request.microbatches,
        lora=request.lora,
        target=request.target_name,
        tokens_per_step=request.tokens_per_step,
        active_params=active_params(plan),
        measured=None
        if readings.measured is None
        else Measured.from_run(
            readings.measured,
            "step",
            tokens=request.tokens_per_step or batch_tokens(batch),
        ),
    )


def _program(readings: XlaReadings) -> StepProgram:
    """The program's figures; its collectives read back from their JSON data."""
    flops, remat = readings.flops, readings.remat
    return StepProgram(
        flops=math.nan if flops is None else float(flops),
        bytes_accessed=readings.bytes_accessed,
        matmul_dtype=readings.matmul_dtype,
        collectives=collectives_from_json(readings.collectives),
        sharding_constraints=readings.sharding_constraints,
        remat_limit_bytes=max((r.limit for r in remat), default=None),
        remat_reduced_to_bytes=max(
            (r.reduced_to for r in remat if r.reduced_to is not None),
            default=None,
        ),
        loop_trips=readings.loop_trips,
        work=readings.work,
    )


NO_CONSTRAINT_WARNING = (
    "The compiled step holds no activation sharding constraint, so XLA chose every "
    "activation's layout. If your model constrains activations only under a "
    "condition this compile did not meet (tunix, for one, skips them when "
    "jax.devices()[0].platform == 'cpu'), your trainer's temporaries may differ."
)


def _caveats(
    constraints: int | None, request: Request, plan: MeshConfigReport
) -> list[str]:
    """Warnings on what the report's numbers may not show.

    ``constraints`` is the lowered program's count of sharding constraints.
    """
    out: list[str] = []
    sharded = any(leaf.bytes_per_device < leaf.global_bytes for leaf in plan.leaves)
    if constraints == 0 and request.num_devices > 1 and sharded:
        out.append(NO_CONSTRAINT_WARNING)
    return out


def _remat_warning(statement: RematStatement, budget: Budget, backend: str) -> str:
    """XLA's rematerialization line, quoted whole, and what its limit is."""
    limit = format_bytes(statement.limit)
    if backend == "gpu":
        what = (
            f"{limit} is XLA:GPU's scheduler limit (80% of the device's memory as "
            "CUDA reports it, less the step's arguments and outputs, times 0.95, "
            "plus the outputs: the same on a real GPU), not the device's memory"
        )
    else:
        what = (
            f"{limit} is the limit XLA rematerialised towards, not the device's memory"
        )
    text = f'XLA: "{statement.quote}". {what}'
    if budget.bytes is not None:
        text += f"; the budget is {format_bytes(budget.bytes)}"
    return text + "."


def _device_order(order: str, topology: str | None) -> str:
    if order == "plain":
        return "plain device order" if topology is None else order
    if order == "the mesh's":
        return "the given mesh's device order"
    return order

"""The step-time estimate of a step report, from its records and its plan.

:func:`step_roofline` is what :class:`~nnx_introspect.StepMemoryReport`
computes once when it is made (and again when :func:`dataclasses.replace`
makes a new one, e.g. with another ``network_bytes_per_second``): the
:func:`~nnx_introspect._roofline.program.program_roofline` of its program on
the named topology, with the model FLOPs an ``"lm"`` step counts for its MFU.
"""

import math

from nnx_introspect._mesh import MeshConfigReport
from nnx_introspect._roofline.estimate import Roofline
from nnx_introspect._roofline.program import program_roofline
from nnx_introspect._step.step_records import StepKind, StepMemory, StepProgram

__all__ = ["step_roofline"]


def step_roofline(
    topology: str | None,
    plan: MeshConfigReport,
    memory: StepMemory,
    program: StepProgram,
    *,
    step: StepKind,
    loss: str | None,
    batch: tuple[str, ...],
    network_bytes_per_second: int | None = None,
) -> Roofline | None:
    """The step-time estimate on a named ``topology``, or ``None``.

    ``None`` without a topology, for a step the compiler refused, without
    FLOPs or bytes accessed, or when the collectives could not be read (an
    estimate without its communication would be too low). MFU counts ``6 N``
    FLOPs per token for a training step with the ``"lm"`` loss (``2 N``
    forward only; ``N`` the parameters), else the program's FLOPs.

    Example:
        >>> from flax import nnx
        >>> from nnx_introspect import mesh_config_report
        >>> from nnx_introspect._xla.collectives import Collectives
        >>> plan = mesh_config_report(nnx.Linear(4, 6, rngs=nnx.Rngs(0)), "data=8")
        >>> program = StepProgram(
        ...     1e12, bytes_accessed=1e9, collectives=Collectives("jit_f", (), ())
        ... )
        >>> est = step_roofline("h100-8", plan, StepMemory(1, 0, 0, 0), program,
        ...     step="forward", loss=None, batch=("f32[8,4]",))
        >>> est.bound, est.topology
        ('compute', 'h100-8')
        >>> step_roofline(None, plan, StepMemory(1, 0, 0, 0), program,
        ...     step="forward", loss=None, batch=()) is None
        True
    """
    wire = program.collective_wire_bytes
    if (
        topology is None
        or (memory.out_of_memory and memory.refused)
        or not math.isfinite(program.flops)
        or program.bytes_accessed is None
        or wire is None  # unread: no honest estimate
    ):
        return None
    tokens = _tokens(batch) if loss == "lm" else None
    model_flops = None
    if tokens is not None:
        per_token = 2 if step == "forward" else 6
        model_flops = float(per_token * plan.n_params * tokens)
    return program_roofline(
        topology,
        flops=program.flops,
        bytes_accessed=program.bytes_accessed,
        wire_bytes_by_axes=tuple((axes, w) for axes, _, w in wire),
        mesh_axes=tuple(zip(plan.axis_names, plan.axis_sizes, strict=True)),
        matmul_dtype=program.matmul_dtype,
        tokens=tokens,
        model_flops=model_flops,
        network_bytes_per_second=network_bytes_per_second,
    )


def _tokens(batch: tuple[str, ...]) -> int | None:
    """Tokens in a step: the elements of the first batch leaf (``int32[8,2048]``)."""
    if not batch:
        return None
    dims = batch[0].partition("[")[2].rstrip("]")
    try:
        return math.prod(int(d) for d in dims.split(",") if d.strip())
    except ValueError:
        return None

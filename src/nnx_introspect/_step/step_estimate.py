"""The step-time estimate of a step report, from its records and its plan.

:func:`step_roofline` is what :class:`~nnx_introspect.StepMemoryReport`
computes once when it is made (and again when :func:`dataclasses.replace`
makes a new one, e.g. with another ``network_bytes_per_second``): the
:func:`~nnx_introspect._roofline.program.program_roofline` of its program on
the named topology, with the model FLOPs its MFU counts: ``6·N·tokens`` for a
training step (``2·N·tokens`` forward only) whenever the batch carries integer
token ids (a ``[batch, sequence]`` integer leaf), whatever the loss is called;
otherwise the program's FLOPs, labelled a hardware FLOPs utilisation.
"""

import math

from nnx_introspect._mesh import MeshConfigReport
from nnx_introspect._roofline import Roofline, program_roofline
from nnx_introspect._step.step_records import StepKind, StepMemory, StepProgram

__all__ = ["batch_tokens", "step_roofline"]


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
    tokens_per_step: int | None = None,
) -> Roofline | None:
    """The step-time estimate on a named ``topology``, or ``None``.

    ``None`` without a topology, for a step the compiler refused, without
    FLOPs or bytes accessed, or when the collectives could not be read (an
    estimate without its communication would be too low). The MFU counts
    ``6 N`` FLOPs per token for a training step (``2 N`` forward only; ``N``
    the plan's parameters) when the batch has a ``[B, T]`` integer leaf (its
    first: ``B·T`` tokens), with any loss, so a custom loss and the built-in
    ``"lm"`` give the same MFU; attention's FLOPs are not counted (the step
    does not know the model's shape), and the basis says so. Without token
    ids it is a hardware FLOPs utilisation: the program's FLOPs, recompute
    included. ``tokens_per_step`` gives the tokens where the batch's leaves
    do not (packed or float inputs); it wins over the batch's.

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
        >>> est.bound, est.topology, est.utilisation
        ('compute', 'h100-8', 'hardware FLOPs utilisation')
        >>> tokens = step_roofline("h100-8", plan, StepMemory(1, 0, 0, 0), program,
        ...     step="forward", loss=None, batch=("int32[8,4]",))
        >>> tokens.mfu_basis, tokens.model_flops == 2 * plan.n_params * 8 * 4
        ('2·N·tokens, attention not counted', True)
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
    del loss  # the basis is the same whatever the loss is called
    tokens = tokens_per_step if tokens_per_step is not None else batch_tokens(batch)
    model_flops = basis = None
    if tokens is not None:
        per_token = 2 if step == "forward" else 6
        model_flops = float(per_token * plan.n_params * tokens)
        basis = f"{per_token}·N·tokens, attention not counted"
    return program_roofline(
        topology,
        flops=program.flops,
        bytes_accessed=program.bytes_accessed,
        wire_bytes_by_axes=tuple((axes, w) for axes, _, w in wire),
        mesh_axes=tuple(zip(plan.axis_names, plan.axis_sizes, strict=True)),
        matmul_dtype=program.matmul_dtype,
        tokens=tokens,
        model_flops=model_flops,
        model_flops_basis=basis,
        network_bytes_per_second=network_bytes_per_second,
        irregular_wire_bytes=None
        if program.collectives is None
        else program.collectives.irregular_wire_bytes(),
        work=program.work,
    )


def batch_tokens(batch: tuple[str, ...]) -> int | None:
    """Tokens in a step: ``B·T`` of the first ``[B, T]`` integer leaf, or ``None``.

    Example:
        >>> batch_tokens(("float32[8,16]", "int32[8,2048]", "int32[8,2048]"))
        16384
        >>> batch_tokens(("float32[8,16]", "int32[8]")) is None
        True
    """
    for leaf in batch:
        dtype, _, rest = leaf.partition("[")
        dims = [d for d in rest.rstrip("]").split(",") if d.strip()]
        if dtype.startswith(("int", "uint")) and len(dims) == 2:
            try:
                return math.prod(int(d) for d in dims)
            except ValueError:
                continue
    return None

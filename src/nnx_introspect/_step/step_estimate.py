"""The step-time estimate of a step report, from its records and its plan.

:func:`step_roofline` is what :class:`~nnx_introspect.StepMemoryReport`
computes once when it is made (and again when :func:`dataclasses.replace`
makes a new one, e.g. with another ``network_bytes_per_second``): the
:func:`~nnx_introspect._roofline.program.program_roofline` of its program on
the named topology, with the model FLOPs its MFU counts: ``6·N·tokens`` for a
training step (``2·N·tokens`` forward only) whenever the batch carries integer
token ids (a ``[batch, sequence]`` integer leaf), whatever the loss is called;
otherwise the program's FLOPs, labelled a hardware FLOPs utilisation. For a
mixture of experts ``N`` is the parameters a token uses (:func:`active_params`:
``6·N_active·tokens``, each router's ``top_k`` of its experts), and the basis
names both counts.
"""

import math

from nnx_introspect._experts import unused_params
from nnx_introspect._mesh import MeshConfigReport
from nnx_introspect._roofline import Roofline, program_roofline
from nnx_introspect._step.step_records import StepKind, StepMemory, StepProgram

__all__ = ["active_params", "batch_tokens", "model_flops_basis", "step_roofline"]


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
    active_params: int | None = None,
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
    ``active_params`` (:func:`active_params`) is a mixture of experts' ``N``:
    the parameters a token uses, of the plan's ``n_params``; the basis then
    reads ``"6·N_active·tokens, N_active = 1,316,352 of 2,496,000
    parameters, attention not counted"``.

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
        model_flops, basis = model_flops_basis(
            per_token, plan.n_params, tokens, active_params
        )
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


def model_flops_basis(
    per_token: int, n_params: int, tokens: int, active: int | None = None
) -> tuple[float, str]:
    """``(per_token x N x tokens, its basis in words)``: the FLOPs an MFU counts.

    ``N`` is ``active`` (a mixture of experts' parameters a token uses) when
    it is given and below ``n_params``, else ``n_params``; the words say which.

    Example:
        >>> model_flops_basis(6, 2_496_000, 1024, 1_316_352)
        (8087666688.0, '6·N_active·tokens, N_active = 1,316,352 of 2,496,000 \
parameters, attention not counted')
        >>> model_flops_basis(2, 100, 8)
        (1600.0, '2·N·tokens, attention not counted')
    """
    if active is not None and active < n_params:
        return (
            float(per_token * active * tokens),
            f"{per_token}·N_active·tokens, N_active = {active:,} of {n_params:,} "
            "parameters, attention not counted",
        )
    return float(per_token * n_params * tokens), (
        f"{per_token}·N·tokens, attention not counted"
    )


def active_params(plan: MeshConfigReport) -> int | None:
    """The plan's parameters one token uses, for a mixture of experts; else ``None``.

    ``plan.n_params`` less the routed experts' parameters a token is not
    sent to (the plan's :attr:`~nnx_introspect.MeshConfigReport.experts`, read
    from the model once when it was planned: each router sends a token to
    ``top_k`` of its ``experts``); ``None`` for a model without routed experts,
    or one whose routers cannot be read (a state, a ``top_k`` out of range:
    the plan's ``N`` is then all there is).

    Example:
        >>> from nnx_introspect import abstract_model, mesh_config_report
        >>> from nnx_introspect.examples import moe_tiny, two_layer
        >>> active_params(mesh_config_report(abstract_model(moe_tiny), "data=1"))
        140608
        >>> dense = abstract_model(two_layer)
        >>> active_params(mesh_config_report(dense, "data=1")) is None
        True
    """
    unused = unused_params(plan.experts)
    return plan.n_params - unused if unused else None


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

"""The public :func:`step_memory_report`: check, plan, compile, report."""

import math
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, PartitionSpec

from nnx_introspect._mesh import (
    LogicalRulesLike,
    MeshConfigReport,
    MeshLike,
    RulesLike,
    as_abstract_mesh,
    mesh_config_report,
)
from nnx_introspect._step.child import _child_request, _run_child
from nnx_introspect._step.compile import _compile
from nnx_introspect._step.formats import _batch_str
from nnx_introspect._step.inputs import (
    BatchLike,
    LossLike,
    SpecsLike,
    _as_batch,
    _as_batch_specs,
    _as_loss,
    _as_model,
    _as_optimizer,
    _importable_name,
    _loss_name,
    _Request,
    _spec_problems,
)
from nnx_introspect._step.report import StepMemoryReport
from nnx_introspect._step.topology import _topology, _tpu_mesh
from nnx_introspect._step.xla import compiler_name
from nnx_introspect._typing import typechecked


@typechecked
def step_memory_report(
    target: nnx.Module | nnx.State[Any, Any] | Callable[..., Any] | str,
    mesh: MeshLike,
    batch: BatchLike,
    /,
    *,
    loss: LossLike = "mean",
    optimizer: optax.GradientTransformation | str | None = None,
    rules: RulesLike | None = None,
    logical_rules: LogicalRulesLike | None = None,
    batch_spec: SpecsLike = None,
    topology: str | None = None,
) -> StepMemoryReport:
    """Compile one step of ``target`` on ``mesh`` and report XLA's bytes per device.

    The step is compiled, never run: parameters, state, optimizer state and the
    batch are ``jax.ShapeDtypeStruct`` s with ``NamedSharding`` s whose specs
    come from :func:`~nnx_introspect.mesh_config_report` (same ``rules``,
    ``logical_rules`` and metadata, so the two never disagree). The model runs
    inside the step as ``nnx.merge(graphdef, params, other_state)``. What is
    compiled:

    * ``loss=None``: the forward pass ``model(*batch)``;
    * a loss and ``optimizer=None``: forward and backward, returning the loss,
      the gradients (sharded like the parameters) and the updated other state;
    * a loss and an ``optimizer``: the full step: gradients, the
      ``nnx.Optimizer`` update, new parameters, other state and optimizer
      state, with the old ones donated as a training loop does.

    Every argument counts, used or not (``keep_unused=True``): a batch leaf the
    step ignores still sits on the device.

    The numbers come from the compiler: XLA:CPU on this process's devices, or
    in a child process with ``prod(mesh)`` virtual CPU devices (at most
    :data:`MAX_CHILD_DEVICES`) when this process has fewer; XLA:TPU when a
    ``topology`` is named (needs ``pip install "nnx-introspect[tpu]"``, no TPU).
    Argument bytes are exact anywhere; temporaries depend on the compiler, and
    XLA:CPU's can differ from an accelerator's many times over.

    Args:
        target: An ``nnx.Module`` (concrete or abstract; it is not touched), a
            factory taking ``rngs`` or a ``"package.module:factory"`` string.
            A child compile needs the string, or a factory importable by name.
        mesh: As in :func:`~nnx_introspect.mesh_config_report`: a mapping,
            ``"data=2,model=4"``, a ``Mesh`` (whose devices are used) or an
            ``AbstractMesh``.
        batch: The model's positional arguments: a tuple of
            ``jax.ShapeDtypeStruct`` or arrays (one may be passed bare).
        loss: ``None`` (forward only), ``"mean"`` (the float32 mean of the
            output), ``"lm"`` (next-token cross-entropy of ``(B, T, V)`` logits
            against the ``(B, T)`` integer tokens of ``batch[0]``) or a callable
            ``loss(model, batch) -> scalar`` (``batch`` is the tuple).
        optimizer: An optax transformation or a name (``"adamw"``, ...); needs
            a loss.
        rules: ``(regular expression, PartitionSpec)`` pairs, as in
            :func:`~nnx_introspect.mesh_config_report`.
        logical_rules: ``(logical name, mesh axis)`` pairs, as there.
        batch_spec: A ``PartitionSpec`` for every batch leaf or one per leaf;
            default: each leaf's leading dimension split over the mesh's first
            axis (scalars replicated).
        topology: A Cloud TPU slice such as ``"v5e-4"``, ``"v6e-256"``,
            ``"v5p-8"`` or ``"v4-16"`` (see :func:`parse_topology`): compile
            with XLA:TPU for it; the mesh must have one device per chip.

    Returns:
        A frozen :class:`StepMemoryReport`.

    Raises:
        TypeError: If an argument has the wrong type (``target`` an
            ``nnx.State``, a batch leaf without shape and dtype...).
        ValueError: If the plan has problems (every one is listed; nothing is
            compiled), the batch does not divide over the mesh, the model cannot
            take the batch, the loss fails, ``topology`` is unknown or does not
            match the mesh, or a child compile cannot rebuild a target by name.
        ImportError: If ``topology`` is given and ``libtpu`` is not installed.
        RuntimeError: If a child compile crashes or times out.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from flax import nnx
        >>> def mlp(rngs):
        ...     return nnx.Sequential(
        ...         nnx.Linear(16, 64, rngs=rngs), nnx.relu,
        ...         nnx.Linear(64, 16, rngs=rngs),
        ...     )
        >>> x = jax.ShapeDtypeStruct((32, 16), jnp.float32)
        >>> report = step_memory_report(mlp, {"data": 4}, x, optimizer="adamw")
        >>> report.num_devices, report.step
        (4, 'forward + backward + optimizer update')
        >>> params = (16 * 64 + 64 + 64 * 16 + 16) * 4  # replicated float32
        >>> report.argument_bytes == 3 * params + 8 * 16 * 4 + 8  # + 2 counters
        True
        >>> report.plan.bytes_by_category["optimizer state"] == 2 * params + 8
        True
    """
    model = _as_model(target)
    abstract_mesh = as_abstract_mesh(mesh)
    mesh_axes = tuple(
        (str(a), int(s))
        for a, s in zip(abstract_mesh.axis_names, abstract_mesh.axis_sizes, strict=True)
    )
    leaves = _as_batch(batch)
    specs, spec_name = _as_batch_specs(batch_spec, leaves, mesh_axes[0][0])
    loss = _as_loss(loss, leaves)
    tx, optimizer_name = _as_optimizer(optimizer)
    _check_optimizer_has_a_loss(optimizer, tx, loss)
    if topology is not None:
        _topology(topology)  # a bad name is reported before any work
    plan = mesh_config_report(
        model, mesh, rules=rules, logical_rules=logical_rules, optimizer=tx
    )
    _check_shardable(plan, spec_name, leaves, specs, mesh_axes)
    request = _Request(
        model=model,
        target_name=_importable_name(target)
        if not isinstance(target, nnx.Module)
        else None,
        mesh_axes=mesh_axes,
        batch=leaves,
        batch_specs=specs,
        loss=loss,
        loss_name=_loss_name(loss),
        tx=tx,
        optimizer_name=optimizer_name,
        rules=rules,
        logical_rules=logical_rules,
    )
    numbers, compiled_in = _compile_where_the_devices_are(
        request, mesh, abstract_mesh.axis_names, plan, topology
    )
    return _report(request, plan, numbers, topology, compiled_in)


def _check_optimizer_has_a_loss(optimizer: Any, tx: Any, loss: Any) -> None:
    if tx is not None and loss is None:
        raise ValueError(
            f"`optimizer` {optimizer!r} needs a loss to differentiate, but "
            "`loss=None` compiles the forward pass only. Pass `loss='mean'`, "
            "'lm' or a callable."
        )


def _check_shardable(
    plan: MeshConfigReport,
    spec_name: str,
    leaves: tuple[jax.ShapeDtypeStruct, ...],
    specs: tuple[PartitionSpec, ...],
    mesh_axes: tuple[tuple[str, int], ...],
) -> None:
    """Raise every problem of the plan and of the batch's split, or none."""
    problems = [p.message for p in plan.errors]
    problems += _spec_problems(spec_name, leaves, specs, dict(mesh_axes))
    if problems:
        raise ValueError(
            f"The step cannot be sharded as planned ({len(problems)} problem(s); "
            "nothing was compiled):\n- " + "\n- ".join(problems)
        )


def _compile_where_the_devices_are(
    request: _Request,
    mesh: MeshLike,
    axis_names: tuple[Any, ...],
    plan: MeshConfigReport,
    topology: str | None,
) -> tuple[dict[str, Any], str]:
    """XLA's numbers and where they were compiled.

    On a TPU topology, on a concrete ``mesh``'s own devices, on this process's
    first devices, or in a child process with enough virtual CPU devices.
    """
    n = request.num_devices
    if topology is not None:
        tpu_mesh = _tpu_mesh(topology, request.mesh_axes)
        return _compile(request, tpu_mesh, plan), "this process"
    if isinstance(mesh, Mesh):
        return _compile(request, mesh, plan), "this process"
    if n <= jax.device_count():
        sizes = [s for _, s in request.mesh_axes]
        devices = np.array(jax.devices()[:n]).reshape(sizes)
        return _compile(request, Mesh(devices, axis_names), plan), "this process"
    numbers = _run_child(_child_request(request, n), n)
    return numbers, f"a child process with {n} virtual CPU devices"


def _step_name(loss: LossLike, tx: optax.GradientTransformation | None) -> str:
    if loss is None:
        return "forward"
    return (
        "forward + backward" if tx is None else "forward + backward + optimizer update"
    )


def _report(
    request: _Request,
    plan: MeshConfigReport,
    numbers: dict[str, Any],
    topology: str | None,
    compiled_in: str,
) -> StepMemoryReport:
    tx, optimizer_name = request.tx, request.optimizer_name
    flops = numbers["flops"]
    return StepMemoryReport(
        num_devices=request.num_devices,
        argument_bytes=numbers["argument_bytes"],
        output_bytes=numbers["output_bytes"],
        temp_bytes=numbers["temp_bytes"],
        alias_bytes=numbers["alias_bytes"],
        flops=math.nan if flops is None else float(flops),
        plan=plan,
        backend=numbers["backend"],
        compiler=compiler_name(numbers["backend"], numbers["device_kind"]),
        device_kind=numbers["device_kind"],
        compile_seconds=float(numbers["compile_seconds"]),
        step=_step_name(request.loss, tx),
        loss=request.loss_name,
        optimizer=optimizer_name if tx is None or optimizer_name else "optax object",
        batch=tuple(_batch_str(b) for b in request.batch),
        batch_specs=request.batch_specs,
        topology=topology,
        compiled_in=compiled_in,
    )

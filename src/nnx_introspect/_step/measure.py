"""The public :func:`step_memory_report`: check, plan, compile, report."""

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, PartitionSpec

from nnx_introspect._accelerators.budget import step_budget
from nnx_introspect._mesh import (
    LogicalRulesLike,
    MeshConfigReport,
    MeshLike,
    RulesLike,
    as_abstract_mesh,
    mesh_config_report,
    parse_bytes,
)
from nnx_introspect._step.assemble import assemble_report
from nnx_introspect._step.child import _child_request, _run_child
from nnx_introspect._step.compile import _compile
from nnx_introspect._step.inputs import (
    BatchLike,
    LossLike,
    SpecsLike,
    _loss_name,
    _Request,
    as_batch,
    as_batch_specs,
    as_loss,
    as_model,
    as_optimizer,
    importable_name,
    spec_problems,
)
from nnx_introspect._step.report import StepMemoryReport
from nnx_introspect._typing import IntLike, typechecked
from nnx_introspect._xla.toolchain import check_compiler, topology_mesh

__all__ = [
    "check_optimizer_has_a_loss",
    "check_shardable",
    "step_memory_report",
]


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
    max_device_bytes: IntLike | str | None = None,
    trace_as_target: bool = True,
    debug: bool = False,
    breakdown: bool = False,
    network_bytes_per_second: IntLike | str | None = None,
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
    :data:`MAX_CHILD_DEVICES`) when this process has fewer; XLA:TPU for a named
    TPU ``topology`` (``pip install "nnx-introspect[tpu]"``) and XLA:GPU for a
    named NVIDIA one (``pip install "nnx-introspect[gpu]"``), with no TPU or
    GPU present. A named topology compiles in a child process with a
    controlled environment (it needs ``target`` and a callable ``loss`` by
    name; a TPU compile of an unnamed target runs in this process instead).
    Argument bytes are exact anywhere; temporaries depend on the compiler, and
    XLA:CPU's can differ from an accelerator's many times over.

    The budget is ``max_device_bytes``, else the topology's device memory.
    A step the compiler refuses for memory is an answer, not an error: the
    report has ``out_of_memory=True``, ``fits()`` False and the compiler's own
    words and figures.

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
            ``"v5p-8"`` or ``"v4-16"``, or NVIDIA GPUs such as ``"h100-8"``
            (one host) or ``"h100-256"`` (32 hosts of 8) (see
            :func:`parse_topology`): compile with XLA:TPU or XLA:GPU for it;
            the mesh must have one device per chip or GPU.
        max_device_bytes: The memory budget of one device, a byte count or a
            size such as ``"80GiB"``; default: the memory the run will have:
            on a GPU target the share JAX's allocator takes of the device
            (``XLA_CLIENT_MEM_FRACTION`` or ``XLA_PYTHON_CLIENT_MEM_FRACTION``
            as this process's environment sets it, else 0.75), on a TPU
            target the HBM XLA:TPU lets a program use (15.75 GiB of a v5e
            chip's 16); none on XLA:CPU. A string needs its unit.
        trace_as_target: For a named ``topology`` compiled in a child
            process, trace the model with JAX's device lookups
            (``jax.devices()``, ``jax.default_backend()``...) answering with
            the target's devices, so a model that shards its activations only
            off the CPU (as tunix does) compiles as on the real machine. The
            report's ``traced_platform`` says what the model saw.
        debug: Keep what the compiler and the child process wrote to stderr
            on the report (``compiler_log``); it never reaches this process's
            stderr.
        breakdown: Also break the peak down (``report.breakdown``): XLA
            dumps the compiled step into a temporary directory (removed
            before this returns) and every buffer live at its peak is read
            with its kind, its state path or source line. A breakdown that
            cannot be made (a step the compiler refused for memory, a dump
            format this jaxlib's reader does not know) leaves
            ``report.breakdown`` ``None`` and says why in ``warnings``.
        network_bytes_per_second: For a GPU ``topology`` of several hosts:
            the network bandwidth per GPU between hosts the report's
            :attr:`~StepMemoryReport.roofline` uses, bytes per second or a
            size such as ``"50GB"`` (per second); default: the family's
            reference system's (400 Gb/s, 50 GB/s, per H100), as
            :func:`~nnx_introspect._accelerators.hardware.hardware_for` documents.

    Returns:
        A frozen :class:`StepMemoryReport`.

    Raises:
        TypeError: If an argument has the wrong type (``target`` an
            ``nnx.State``, a batch leaf without shape and dtype...).
        ValueError: If the plan has problems (every one is listed; nothing is
            compiled), the batch does not divide over the mesh, the model cannot
            take the batch, the loss fails, ``topology`` is unknown or does not
            match the mesh, or a child compile cannot rebuild a target by name.
        ImportError: If ``topology`` names a TPU and ``libtpu`` is not
            installed, or a GPU and the ``gpu`` extra is not.
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
    model = as_model(target)
    abstract_mesh = as_abstract_mesh(mesh)
    mesh_axes = tuple(
        (str(a), int(s))
        for a, s in zip(abstract_mesh.axis_names, abstract_mesh.axis_sizes, strict=True)
    )
    leaves = as_batch(batch)
    specs, spec_name = as_batch_specs(batch_spec, leaves, mesh_axes[0][0])
    loss = as_loss(loss, leaves)
    tx, optimizer_name = as_optimizer(optimizer)
    check_optimizer_has_a_loss(optimizer, tx, loss)
    given = None if max_device_bytes is None else parse_bytes(max_device_bytes)
    if topology is not None:  # a bad name, size or missing compiler: before work
        check_compiler(topology, mesh_axes)
    budget = step_budget(given, topology)
    network = _network(network_bytes_per_second, topology)
    plan = mesh_config_report(
        model, mesh, rules=rules, logical_rules=logical_rules, optimizer=tx
    )
    check_shardable(plan, spec_name, leaves, specs, mesh_axes)
    request = _Request(
        model=model,
        target_name=importable_name(target)
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
        trace_as_target=trace_as_target,
        breakdown=breakdown,
    )
    numbers, compiled_in = _compile_where_the_devices_are(
        request, mesh, abstract_mesh.axis_names, plan, topology
    )
    return assemble_report(
        request, plan, numbers, topology, compiled_in, budget, debug, network
    )


def _network(value: IntLike | str | None, topology: str | None) -> int | None:
    """``network_bytes_per_second`` as bytes per second; only for a GPU target."""
    if value is None:
        return None
    from nnx_introspect._accelerators.topology import resolve_topology

    if topology is None or resolve_topology(topology).platform != "cuda":
        raise ValueError(
            f"`network_bytes_per_second` {value!r} is the network between GPU hosts, "
            f"but `topology` is {topology!r}. Pass a GPU topology such as "
            "'h100-256', or leave it out."
        )
    rate = parse_bytes(value)
    if rate <= 0:
        raise ValueError(
            f"`network_bytes_per_second` must be positive, got {value!r}. Pass the "
            "bandwidth per GPU, such as '50GB' (400 Gb/s)."
        )
    return rate


def check_optimizer_has_a_loss(optimizer: Any, tx: Any, loss: Any) -> None:
    if tx is not None and loss is None:
        raise ValueError(
            f"`optimizer` {optimizer!r} needs a loss to differentiate, but "
            "`loss=None` compiles the forward pass only. Pass `loss='mean'`, "
            "'lm' or a callable."
        )


def check_shardable(
    plan: MeshConfigReport,
    spec_name: str,
    leaves: tuple[jax.ShapeDtypeStruct, ...],
    specs: tuple[PartitionSpec, ...],
    mesh_axes: tuple[tuple[str, int], ...],
) -> None:
    """Raise a summary of every problem of the plan and the batch's split, or none.

    Hundreds of leaves can share one cause (a mesh whose axis names the model
    does not use): the message counts each kind, shows one example of it and
    its fix, and points to the full list, in a few hundred characters.
    """
    batch = spec_problems(spec_name, leaves, specs, dict(mesh_axes))
    errors = plan.errors
    if not errors and not batch:
        return
    total = len(errors) + len(batch)
    by_kind: dict[str, list[Any]] = {}
    for problem in errors:
        by_kind.setdefault(problem.kind, []).append(problem)
    clauses = [_kind_clause(kind, found) for kind, found in by_kind.items()]
    if batch:
        more = f" (and {len(batch) - 1} more)" if len(batch) > 1 else ""
        clauses.append(f"{batch[0]}{more}")
    full = " All: `nnx-introspect mesh`." if len(errors) > len(by_kind) else ""
    raise ValueError(
        f"`mesh` {dict(mesh_axes)} cannot shard the step ({total} problem"
        f"{'s' if total > 1 else ''}, nothing compiled): "
        + "; ".join(clauses)
        + "."
        + full
    )


def _kind_clause(kind: str, problems: list[Any]) -> str:
    """One kind of plan problem: how many, one example, the fix."""
    first, n = problems[0], len(problems)
    if kind == "unknown-axis":
        missing = sorted({a for p in problems for a in p.axes})
        paths = len({p.path for p in problems})
        leaves = f"{paths} lea{'ves name' if paths > 1 else 'f names'}"
        return (
            f"{leaves} axes the mesh lacks ({', '.join(map(repr, missing))}; "
            f"e.g. `{first.path}`): name them in `mesh` (--mesh), map them with "
            "`logical_rules` or override with `rules`"
        )
    if kind == "indivisible":
        return (
            f"{n} dimension{'s do' if n > 1 else ' does'} not divide over "
            f"{'their' if n > 1 else 'its'} axes "
            f"(e.g. `{first.path}` dimension {first.dimension}, size {first.size}, "
            f"over {'x'.join(first.axes)} = {first.product}): pick sizes in "
            "`mesh` (--mesh) that divide them or override with `rules`"
        )
    more = f" (and {n - 1} more like it)" if n > 1 else ""
    return f"{first.message.rstrip('.')}{more}"


def _compile_where_the_devices_are(
    request: _Request,
    mesh: MeshLike,
    axis_names: tuple[Any, ...],
    plan: MeshConfigReport,
    topology: str | None,
) -> tuple[dict[str, Any], str]:
    """XLA's numbers and where they were compiled.

    A named topology compiles in a child process (its compiler started in a
    controlled environment, its memory not this process's), or here when the
    target cannot be named; otherwise on a concrete ``mesh``'s own devices, on
    this process's first devices, or in a child process with enough virtual
    CPU devices.
    """
    n = request.num_devices
    if topology is not None:
        try:
            payload = _child_request(request, n, plan, topology)
        except ValueError:
            # Unnamed: compile here (XLA:GPU only where JAX started with
            # JAX_PLATFORMS=cpu; topology_mesh says so otherwise).
            target_mesh_, order = topology_mesh(topology, request.mesh_axes)
            numbers = _compile(request, target_mesh_, plan) | {"device_order": order}
            return numbers, "this process"
        return _run_child(payload, n), f"a child process ({topology})"
    if isinstance(mesh, Mesh):
        return _compile(request, mesh, plan) | {"device_order": "the mesh's"}, (
            "this process"
        )
    if n <= jax.device_count():
        sizes = [s for _, s in request.mesh_axes]
        devices = np.array(jax.devices()[:n]).reshape(sizes)
        numbers = _compile(request, Mesh(devices, axis_names), plan)
        return numbers | {"device_order": "plain"}, "this process"
    numbers = _run_child(_child_request(request, n, plan), n)
    return numbers, f"a child process with {n} virtual CPU devices"

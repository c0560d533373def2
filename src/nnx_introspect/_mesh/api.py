"""``mesh_config_report``: parse the arguments, plan model, optimizer, warnings."""

from typing import Any

import optax
from flax import nnx

from nnx_introspect._experts import (
    ExpertGroup,
    expert_groups,
    planned_expert_groups,
)
from nnx_introspect._inventory import inventory
from nnx_introspect._mesh.optimizer import (
    optimizer_records,
    plan_gradients,
    plan_optimizer_leaves,
)
from nnx_introspect._mesh.parse import (
    LogicalRulesLike,
    MeshLike,
    RulesLike,
    as_abstract_mesh,
    as_logical_rules,
    compile_rules,
    optimizer_from_name,
)
from nnx_introspect._mesh.plan import Planner, find_unmatched_rules, plan_model_leaves
from nnx_introspect._mesh.records import MeshProblem
from nnx_introspect._mesh.report import MeshConfigReport, budget_bytes
from nnx_introspect._mesh.specs import entry_axes
from nnx_introspect._nnx import devices_present
from nnx_introspect._typing import ArgumentError, IntLike, Target, typechecked


@typechecked
def mesh_config_report(
    target: Target,
    mesh: MeshLike,
    /,
    *,
    rules: RulesLike | None = None,
    logical_rules: LogicalRulesLike | None = None,
    optimizer: optax.GradientTransformation | str | None = None,
    max_device_bytes: IntLike | str | None = None,
) -> MeshConfigReport:
    """Plan how every state leaf of ``target`` splits over ``mesh``.

    Each leaf's partition spec comes from, in order: the first of ``rules`` whose
    regular expression is found (``re.search``) in the leaf's path written as
    its keys joined by ``/`` (``layers/0/attn/q/kernel``); the variable's NNX
    sharding metadata (``nnx.with_partitioning`` / ``out_sharding``), whose
    logical names are translated by ``logical_rules`` (or the active
    ``nnx.logical_axis_rules`` context) exactly as flax translates them: an
    entry that is a logical name becomes its rule's mesh axes, a tuple entry
    is kept as written; otherwise the leaf is replicated. A dimension of
    experts annotated ``"expert"`` (stacked expert weights, as the examples'
    mixture of experts holds them) splits over the mesh's ``expert`` or ``ep``
    axis, else over ``fsdp`` (which then leaves the rest of that spec), unless
    ``logical_rules`` map ``"expert"``; a dimension of experts (so annotated,
    or found under a router, :func:`~nnx_introspect.count_active_params`) that
    does not divide over its axes is an ``"experts"`` problem naming the
    sizes that do. Shard shapes come
    from ``NamedSharding(abstract_mesh, spec).shard_shape``. Every problem
    (each indivisible dimension, unknown or repeated axes, rank mismatches,
    anything else JAX refuses) is collected in ``problems``; warnings (a mesh
    larger than the devices present, rules that gave no leaf its spec) too. No
    device is needed, nothing is allocated, and the model is not mutated.

    With ``optimizer``, the state ``nnx.Optimizer(model, optimizer,
    wrt=nnx.Param)`` would hold is planned too, derived with
    ``jax.eval_shape(optimizer.init, params)`` (no optimizer is built) under the
    optimizer's own paths (``optimizer/opt_state/...``, ``optimizer/step``):
    each leaf sharded like the parameter it mirrors (same path suffix and
    shape), others replicated; and one gradient per parameter (same sharding
    and dtype).

    Args:
        target: An ``nnx.Module``, graph node or ``nnx.State``, concrete or
            abstract.
        mesh: A mapping axis name -> size (``{"data": 2, "model": 4}``), a
            string ``"data=2,model=4"``, a ``jax.sharding.Mesh`` or an
            ``AbstractMesh``.
        rules: Ordered ``(regular expression, PartitionSpec)`` pairs; the first
            match wins over metadata. A spec may be a tuple of entries.
        logical_rules: ``(logical name, mesh axis)`` pairs translating logical
            names in sharding metadata; default: the active
            ``nnx.logical_axis_rules``.
        optimizer: An optax transformation (or a name such as ``"adamw"``) whose
            state and gradients to plan.
        max_device_bytes: A per-device budget, in bytes or as a size such as
            ``"16GiB"`` (:func:`parse_bytes`), kept on the report: ``ok`` is
            then ``False`` when the plan exceeds it, and every rendering states
            the budget with the verdict. ``None`` (default): no budget.

    Returns:
        A frozen :class:`MeshConfigReport`.

    Raises:
        TypeError: If ``mesh``, ``rules`` or ``logical_rules`` (or any item of
            them) have the wrong type.
        ValueError: If a mesh size is not a positive integer, a mesh string is
            malformed, the mesh has more than :data:`MAX_MESH_DEVICES` devices,
            a rule's regular expression is invalid, an optimizer name is
            unknown, the optimizer's ``init`` fails on the parameters (its
            exception is the ``__cause__``) or ``max_device_bytes`` is not a
            nonnegative size.

    Example:
        >>> from flax import nnx
        >>> from jax.sharding import PartitionSpec as P
        >>> model = nnx.Linear(4, 6, rngs=nnx.Rngs(0))
        >>> rules = [("kernel", P("model"))]
        >>> report = mesh_config_report(model, "model=4", rules=rules)
        >>> report.num_devices, report.n_state_leaves, report.n_params
        (4, 2, 30)
        >>> report.leaves[1].path, report.leaves[1].shard_shape, report.leaves[1].source
        ('kernel', (1, 6), "rule 0 'kernel'")
        >>> report.leaves[0].shard_shape, report.leaves[0].replicated_over  # bias
        ((6,), ('model',))
        >>> report.bytes_per_device, report.ideal_bytes_per_device
        (48, 30.0)
        >>> mesh_config_report(model, "model=4", max_device_bytes=40).ok  # 48 > 40
        False
    """
    abstract = as_abstract_mesh(mesh)
    budget = None if max_device_bytes is None else budget_bytes(max_device_bytes)
    compiled_rules = compile_rules(rules)
    logical = as_logical_rules(logical_rules)
    tx = optimizer_from_name(optimizer) if isinstance(optimizer, str) else optimizer
    planner = Planner(abstract)
    records = inventory(target)
    opt_records = optimizer_records(records, tx) if tx is not None else ()
    experts, router_problems = _read_experts(target)
    model = plan_model_leaves(
        planner, records, compiled_rules, logical, _expert_dims(experts)
    )
    optimizer_leaves, optimizer_warnings = plan_optimizer_leaves(
        planner, records, opt_records, model.param_plans
    )
    gradient_leaves = (
        plan_gradients(planner, records, model.param_plans) if tx is not None else ()
    )
    unmatched, rule_warnings = find_unmatched_rules(compiled_rules, model)
    present = devices_present()
    params = [r for r in records if r.is_param]
    return MeshConfigReport(
        axis_names=tuple(planner.sizes),
        axis_sizes=tuple(planner.sizes.values()),
        num_devices=planner.num_devices,
        n_state_leaves=len(records),
        n_params=sum(r.size for r in params),
        param_bytes=sum(r.nbytes for r in params),
        leaves=model.leaves,
        problems=(
            model.problems
            + optimizer_warnings
            + rule_warnings
            + _mesh_too_large(planner.num_devices, present)
            + router_problems
        ),
        optimizer_leaves=optimizer_leaves,
        gradient_leaves=gradient_leaves,
        rules=tuple(p for p, _, _ in compiled_rules),
        unmatched_rules=unmatched,
        devices_present=present,
        max_device_bytes=budget,
        experts=experts,
    )


def _read_experts(
    target: Target,
) -> tuple[tuple[ExpertGroup, ...], tuple[MeshProblem, ...]]:
    """The model's routed experts, read once for the plan, and any router's error.

    A router that sends each token to more experts than it has is the model's
    error, reported as a problem (the plan then splits no experts); a state
    holds no router and plans with none.
    """
    if isinstance(target, nnx.State):
        return planned_expert_groups(target), ()
    try:
        return expert_groups(target), ()
    except ArgumentError as error:
        return (), (MeshProblem("", "router", str(error)),)


def _expert_dims(
    groups: tuple[ExpertGroup, ...],
) -> dict[tuple[Any, ...], tuple[int, int]]:
    """``path -> (dimension, experts)`` of the routed experts' stacked parameters.

    Read from the model's routers (:func:`~nnx_introspect._experts.
    planned_expert_groups`); none where they cannot be read (a state, a router
    the count refuses): the plan then knows only dimensions annotated
    ``"expert"``.
    """
    return {
        leaf.path: (leaf.dim, group.experts)
        for group in groups
        for leaf in group.leaves
        if leaf.dim is not None
    }


PROBE_AXIS = "__nnx_introspect_probe__"
"""The one axis of the mesh :func:`planned_axes` plans on: named by nothing."""


def planned_axes(
    target: Target, *, rules: Any = None, logical_rules: Any = None
) -> tuple[str, ...]:
    """The mesh axes the plan of ``target`` names, in the order they first appear.

    The specs of every leaf (``rules``, the model's sharding metadata through
    ``logical_rules``) on a one-axis probe mesh: nothing is compiled or
    allocated. Empty when nothing names an axis.

    Example:
        >>> from nnx_introspect import abstract_model
        >>> from nnx_introspect.examples import llama_tiny_sharded, two_layer
        >>> planned_axes(abstract_model(llama_tiny_sharded))
        ('tp', 'fsdp')
        >>> planned_axes(abstract_model(two_layer))
        ()
    """
    plan = mesh_config_report(
        target, {PROBE_AXIS: 1}, rules=rules, logical_rules=logical_rules
    )
    seen: dict[str, None] = {}
    for leaf in plan.leaves:
        for entry in leaf.spec:
            for axis in entry_axes(entry):
                seen.setdefault(axis, None)
    seen.pop(PROBE_AXIS, None)
    return tuple(seen)


def _mesh_too_large(num_devices: int, present: int | None) -> tuple[MeshProblem, ...]:
    """A warning when the mesh has more devices than this process sees.

    None when no JAX backend is started: the plan does not start one to ask.
    """
    if present is None or num_devices <= present:
        return ()
    return (
        MeshProblem(
            "",
            "mesh-too-large",
            f"The mesh has {num_devices} devices but only {present} "
            f"{'is' if present == 1 else 'are'} present: fine for a proposal, "
            "but it cannot run here.",
            severity="warning",
        ),
    )

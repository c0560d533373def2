"""The optimizer mirror: ``tx.init``'s state as records, each matched to its param."""

import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import PartitionSpec

from nnx_introspect._inventory import VarRecord, dtype_nbytes
from nnx_introspect._mesh.plan import Planner
from nnx_introspect._mesh.records import LeafShard, MeshProblem
from nnx_introspect._nnx import FrozenParam, keypath_keys
from nnx_introspect._typing import ArgumentError


def optimizer_records(
    records: Sequence[VarRecord], tx: optax.GradientTransformation
) -> tuple[VarRecord, ...]:
    """The records of ``nnx.Optimizer(model, tx, wrt=nnx.Param)``'s state.

    Derived without building an optimizer: ``jax.eval_shape(tx.init, params)``
    on an ``nnx.State`` of the parameters' ``ShapeDtypeStruct``s (what
    ``nnx.Optimizer`` passes to ``tx.init``, minus the ``Variable`` wrappers),
    then ``step``. Paths and kinds are the optimizer's own: ``opt_state/...``
    (``OptVariable`` where the leaf belongs to a parameter, ``OptArray``
    otherwise) and ``step`` (``OptState``, ``uint32``). No variable is created,
    so no sharding metadata (``eager_sharding``) or mesh is involved.
    """
    tree: dict[Any, Any] = {}
    param_paths = set()
    for record in records:
        if not is_trained(record):
            continue
        node = tree
        for key in record.path[:-1]:
            node = node.setdefault(key, {})
        node[record.path[-1]] = jax.ShapeDtypeStruct(record.shape, record.dtype)
        param_paths.add(record.path)
    try:
        state = jax.eval_shape(tx.init, nnx.State(tree))
        flat, _ = jax.tree_util.tree_flatten_with_path(state)
    except Exception as err:
        raise ArgumentError(
            "optimizer",
            f"`optimizer`'s init failed on the model's parameters: "
            f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''} "
            "Pass an optax transformation whose init takes the parameter tree.",
        ) from err
    out: list[VarRecord] = []
    nbytes: dict[tuple[Any, tuple[int, ...]], int] = {}
    for keypath, leaf in flat:
        keys = keypath_keys(keypath)
        owned = any(keys[i:] in param_paths for i in range(1, len(keys)))
        kind = nnx.OptVariable if owned else nnx.OptArray
        out.append(_record(("opt_state", *keys), kind, leaf, nbytes))
    step = jax.ShapeDtypeStruct((), np.dtype("uint32"))
    out.append(_record(("step",), nnx.OptState, step, nbytes))
    # The order of ``nnx.to_flat_state(nnx.state(optimizer))``: sorted paths.
    try:
        out.sort(key=lambda r: r.path)
    except TypeError:  # int and str keys at one level: flax could not sort either
        out.sort(key=lambda r: tuple(_sort_key(k) for k in r.path))
    return tuple(out)


def is_trained(record: VarRecord) -> bool:
    """Whether a training step differentiates and updates ``record``.

    Floating (and complex) ``nnx.Param`` s only: integer parameters (quantized
    weights) have no gradient and are carried unchanged, as a quantized trainer
    and :func:`~nnx_introspect.step_memory_report` do; so are a LoRA step's
    frozen parameters.
    """
    if not record.is_param or issubclass(record.kind, FrozenParam):
        return False
    return bool(jnp.issubdtype(record.dtype, jnp.inexact))


def _sort_key(key: Any) -> tuple[int, Any]:
    return (0, key) if isinstance(key, int) else (1, str(key))


def _record(
    path: tuple[Any, ...],
    kind: type,
    leaf: Any,
    nbytes: dict[tuple[Any, tuple[int, ...]], int],
) -> VarRecord:
    shape = tuple(int(d) for d in getattr(leaf, "shape", ()))
    dtype = getattr(leaf, "dtype", None)
    if dtype is None:  # pragma: no cover - eval_shape gives ShapeDtypeStructs
        dtype = jax.dtypes.canonicalize_dtype(np.asarray(leaf).dtype)
    key = (dtype, shape)
    if key not in nbytes:
        nbytes[key] = dtype_nbytes(dtype, math.prod(shape))
    return VarRecord(
        path=path,
        kind=kind,
        shape=shape,
        dtype=dtype,
        size=math.prod(shape),
        nbytes=nbytes[key],
        sharding=None,
        array=None,
    )


def _owner(
    path: tuple[Any, ...], params: Mapping[tuple[Any, ...], VarRecord]
) -> VarRecord | None:
    """The parameter whose path is the longest suffix of ``path``, any shape."""
    for start in range(1, len(path)):
        found = params.get(path[start:])
        if found is not None:
            return found
    return None


def _mirrored_param(
    record: VarRecord, params: Mapping[tuple[Any, ...], LeafShard]
) -> LeafShard | None:
    """The parameter whose path is the longest suffix of ``record.path``, same shape."""
    path = record.path
    for start in range(1, len(path)):
        plan = params.get(path[start:])
        if plan is not None and plan.shape == record.shape:
            return plan
    return None


def plan_optimizer_leaves(
    planner: Planner,
    records: Sequence[VarRecord],
    opt_records: Sequence[VarRecord],
    param_plans: Mapping[tuple[Any, ...], LeafShard],
) -> tuple[tuple[LeafShard, ...], tuple[MeshProblem, ...]]:
    """Optimizer-state leaves, each sharded like the parameter it mirrors.

    A leaf that mirrors no parameter (same path suffix and shape) is replicated;
    if any of those belongs to an annotated parameter of another shape, a
    warning says flax's ``nnx.Optimizer`` would fail to shard it.
    """
    optimizer_leaves: list[LeafShard] = []
    annotated = {r.path: r for r in records if r.is_param and r.sharding is not None}
    reshaped: list[tuple[str, tuple[int, ...], str]] = []
    shard: tuple[int, ...] | None
    for record in opt_records:
        mirrored = _mirrored_param(record, param_plans)
        if mirrored is None:
            spec, source, shard = PartitionSpec(), "default", record.shape
            owner = _owner(record.path, annotated)
            if record.kind is nnx.OptVariable and owner is not None:
                reshaped.append((record.path_str, record.shape, owner.path_str))
        else:
            spec, source = mirrored.spec, f"mirrors {mirrored.path}"
            shard = mirrored.shard_shape
        optimizer_leaves.append(
            planner.leaf(
                record,
                spec,
                category="optimizer state",
                source=source,
                shard_shape=shard,
                path="optimizer/" + record.path_str,
            )
        )
    if not reshaped:
        return tuple(optimizer_leaves), ()
    path, shape, owner_path = reshaped[0]
    warning = MeshProblem(
        "",
        "optimizer-metadata",
        f"{len(reshaped)} optimizer-state leaf/leaves differ in shape from "
        f"the annotated parameter they belong to (first: "
        f"`optimizer/{path}`, shape {shape}, of `{owner_path}`); the plan "
        "replicates them. Flax's nnx.Optimizer copies the parameter's "
        "`out_sharding` onto them, so if the parameters were created with "
        "eager sharding (flax's default under a mesh) it fails to build; "
        "create that state another way (e.g. "
        "`jax.jit(tx.init, out_shardings=...)`).",
        severity="warning",
    )
    return tuple(optimizer_leaves), (warning,)


def plan_gradients(
    planner: Planner,
    records: Sequence[VarRecord],
    param_plans: Mapping[tuple[Any, ...], LeafShard],
) -> tuple[LeafShard, ...]:
    """One gradient per parameter, with the parameter's sharding and dtype."""
    gradient_leaves: list[LeafShard] = []
    for record in records:
        plan = param_plans.get(record.path)
        if plan is None or not is_trained(record):
            continue
        gradient_leaves.append(
            planner.leaf(
                record,
                plan.spec,
                category="gradients",
                source=f"gradient of {plan.path}",
                shard_shape=plan.shard_shape,
                kind="Gradient",
                path="grads/" + plan.path,
            )
        )
    return tuple(gradient_leaves)

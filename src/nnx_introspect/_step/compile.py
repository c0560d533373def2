"""The jitted step, lowered and compiled on a mesh; XLA's memory and cost analyses."""

import contextlib
import time
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from nnx_introspect._inventory import inventory, path_str
from nnx_introspect._mesh import MeshConfigReport
from nnx_introspect._nnx import keypath_keys
from nnx_introspect._step.formats import _batch_str
from nnx_introspect._step.inputs import _Request
from nnx_introspect._step.loss import _call_model, _LossError, _ModelError, _objective
from nnx_introspect._step.xla import compile_lowered


def _shard_state(
    state: Any, specs: Mapping[str, PartitionSpec], prefix: str, mesh: Mesh
) -> Any:
    """``state`` with each leaf a sharded ``ShapeDtypeStruct`` (specs by path)."""
    leaves, treedef = jax.tree.flatten(state)
    records = inventory(state)
    if len(records) != len(leaves):  # pragma: no cover - inventory's contract
        raise AssertionError("inventory and tree leaves disagree")
    out = []
    for leaf, record in zip(leaves, records, strict=True):
        path = prefix + record.path_str
        if path not in specs:  # pragma: no cover - the plan covers every leaf
            raise AssertionError(f"the plan has no leaf {path!r}")
        out.append(
            jax.ShapeDtypeStruct(
                leaf.shape, leaf.dtype, sharding=NamedSharding(mesh, specs[path])
            )
        )
    return jax.tree.unflatten(treedef, out)


def _optimizer_state(
    tx: optax.GradientTransformation,
    params: Any,
    specs: Mapping[str, PartitionSpec],
    mesh: Mesh,
) -> tuple[Any, jax.ShapeDtypeStruct]:
    """``tx.init(params)`` and the step counter, as sharded ``ShapeDtypeStruct``s.

    The same derivation as the plan's optimizer leaves (``opt_state/...`` and
    ``step`` of ``nnx.Optimizer``), whose specs they take by path.
    """
    abstract = jax.eval_shape(tx.init, nnx.as_pure(params))

    def place(keypath: Any, leaf: Any) -> jax.ShapeDtypeStruct:
        path = "optimizer/" + path_str(("opt_state", *keypath_keys(keypath)))
        if path not in specs:  # pragma: no cover - the plan derives the same tree
            raise AssertionError(f"the plan has no optimizer leaf {path!r}")
        return jax.ShapeDtypeStruct(
            leaf.shape, leaf.dtype, sharding=NamedSharding(mesh, specs[path])
        )

    state = jax.tree_util.tree_map_with_path(place, abstract)
    step_spec = specs.get("optimizer/step", PartitionSpec())
    step = jax.ShapeDtypeStruct((), jnp.uint32, sharding=NamedSharding(mesh, step_spec))
    return state, step


def _split_state(model: Any) -> tuple[Any, Any]:
    """``(params, other state)`` of ``model``, as ``nnx.split`` orders them."""
    _, *states = nnx.split(model, nnx.Param, ...)
    return states[0], states[1]


def _shardings(tree: Any) -> Any:
    return jax.tree.map(lambda s: s.sharding, tree)


def _compile(request: _Request, mesh: Mesh, plan: MeshConfigReport) -> dict[str, Any]:
    """Lower and compile the step on ``mesh``; XLA's numbers as plain values."""
    model, tx, loss = request.model, request.tx, request.loss
    specs = {leaf.path: leaf.spec for leaf in plan.leaves + plan.optimizer_leaves}
    graphdef, *states = nnx.split(model, nnx.Param, ...)
    params = _shard_state(states[0], specs, "", mesh)
    rest = _shard_state(states[1], specs, "", mesh)
    batch = tuple(
        jax.ShapeDtypeStruct(b.shape, b.dtype, sharding=NamedSharding(mesh, s))
        for b, s in zip(request.batch, request.batch_specs, strict=True)
    )
    replicated = NamedSharding(mesh, PartitionSpec())
    args: tuple[Any, ...]
    if loss is None:

        def forward(params: Any, rest: Any, batch: tuple[Any, ...]) -> Any:
            return _call_model(nnx.merge(graphdef, params, rest), batch)

        jitted = jax.jit(forward, keep_unused=True)
        args = (params, rest, batch)
    else:
        objective = _objective(loss)

        def grad_step(params: Any, rest: Any, batch: tuple[Any, ...]) -> Any:
            """The loss and gradients, as an NNX training loop writes them.

            ``nnx.value_and_grad`` differentiates the ``nnx.Param`` state and
            carries the other state's updates (batch statistics, RNG counts)
            back into ``model``.
            """
            model = nnx.merge(graphdef, params, rest)
            value, grads = nnx.value_and_grad(lambda m: objective(m, batch))(model)
            return value, grads, model

        if tx is None:

            def backward(params: Any, rest: Any, batch: tuple[Any, ...]) -> Any:
                value, grads, model = grad_step(params, rest, batch)
                return value, grads, _split_state(model)[1]

            out: tuple[Any, ...] = (replicated, _shardings(params), _shardings(rest))
            jitted = jax.jit(backward, out_shardings=out, keep_unused=True)
            args = (params, rest, batch)
        else:
            # What ``nnx.Optimizer(model, tx, wrt=nnx.Param).update`` does, on
            # pure arrays: no optimizer object (and so no sharding metadata or
            # mesh needed to build one), the plan's optimizer leaves exactly.
            opt_state, step = _optimizer_state(tx, params, specs, mesh)

            def train(
                params: Any,
                rest: Any,
                opt_state: Any,
                step: jax.Array,
                batch: tuple[Any, ...],
            ) -> Any:
                value, grads, model = grad_step(params, rest, batch)
                param_arrays = nnx.as_pure(nnx.state(model, nnx.Param))
                grad_arrays = nnx.as_pure(nnx.state(grads, nnx.Param))
                updates, new_opt_state = tx.update(grad_arrays, opt_state, param_arrays)
                nnx.update(model, optax.apply_updates(param_arrays, updates))
                new_params, new_rest = _split_state(model)
                return value, new_params, new_rest, new_opt_state, step + 1

            out = (
                replicated,
                _shardings(params),
                _shardings(rest),
                _shardings(opt_state),
                step.sharding,
            )
            jitted = jax.jit(
                train,
                out_shardings=out,
                donate_argnums=(0, 1, 2, 3),
                keep_unused=True,
            )
            args = (params, rest, opt_state, step, batch)
    start = time.perf_counter()
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(jax.set_mesh(mesh))
            stack.enter_context(nnx.use_eager_sharding(False))
            if request.logical_rules is not None:
                stack.enter_context(nnx.logical_axis_rules(request.logical_rules))
            lowered = jitted.lower(*args)
    except _ModelError as error:
        raise ValueError(
            f"`batch` ({', '.join(_batch_str(b) for b in request.batch)}) cannot "
            f"be passed to the model: {error}"
        ) from None
    except _LossError as error:
        raise ValueError(f"`loss` {request.loss_name!r} failed: {error}") from None
    return compile_lowered(lowered, mesh, start)

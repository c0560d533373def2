"""The training step as a program: what is lowered, apart from how it compiles.

:func:`build` builds the jitted step of a request (the forward pass; with
a loss, the backward; with an optimizer, the update) as a
:class:`~nnx_introspect._step.program.Program`: its abstract, sharded
arguments grouped by role and the names of its outputs. It is the program
kind :data:`TRAIN` (``"train"``) of :mod:`~nnx_introspect._step.registry`;
:mod:`~nnx_introspect._step.compile` lowers and compiles whatever it returns.
"""

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from nnx_introspect._inventory import path_str
from nnx_introspect._nnx import FrozenParam, keypath_keys
from nnx_introspect._step.inputs import Request
from nnx_introspect._step.loss import (
    _call_model,
    _LossError,
    _ModelError,
    _objective,
    _OptimizerError,
)
from nnx_introspect._step.options import rematerialised
from nnx_introspect._step.program import (
    ArgumentGroup,
    Program,
    ProgramKind,
    batch_group,
    sharded_batch,
    sharded_model_state,
    state_group,
)
from nnx_introspect._text import error_line
from nnx_introspect._typing import ArgumentError

__all__ = ["TRAIN", "TRAIN_OPTIMIZER_DONATED", "build", "differentiable"]


def _optimizer_state(
    tx: optax.GradientTransformation,
    params: Any,
    specs: Mapping[str, PartitionSpec],
    mesh: Mesh,
) -> tuple[Any, jax.ShapeDtypeStruct]:
    """``tx.init(params)`` and the step counter, as sharded ``ShapeDtypeStruct``s.

    The same derivation as the plan's optimizer leaves (``opt_state/...`` and
    ``step`` of ``nnx.Optimizer``), whose specs they take by path, over the
    parameters the step differentiates (integer ones have no optimizer state).
    """
    try:
        abstract = jax.eval_shape(
            tx.init, nnx.as_pure(nnx.filter_state(params, differentiable))
        )
    except Exception as err:
        raise ValueError(
            f"`optimizer`'s init failed on the model's parameters: {error_line(err)}. "
            "Pass an optax transformation whose init takes the parameter tree."
        ) from err

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


def differentiable(path: Any, variable: Any) -> bool:
    """Whether ``variable`` is a floating (or complex) ``nnx.Param``.

    What a step differentiates: integer parameters (int8 weights of a quantized
    model) are carried unchanged, as a quantized trainer's ``wrt`` filter does,
    and so are a LoRA step's frozen ones (:class:`FrozenParam`).
    """
    if not isinstance(variable, nnx.Param) or isinstance(variable, FrozenParam):
        return False
    value = variable.get_value()
    dtype = getattr(value, "dtype", None)
    return jnp.issubdtype(dtype if dtype is not None else type(value), jnp.inexact)


def _shardings(tree: Any) -> Any:
    return jax.tree.map(lambda s: s.sharding, tree)


def _forward(graphdef: Any) -> Any:
    """The jitted forward pass ``model(*batch)`` (or the KV-cache convention)."""

    def forward(params: Any, rest: Any, batch: tuple[Any, ...]) -> Any:
        return _call_model(nnx.merge(graphdef, params, rest), batch, None)

    return jax.jit(forward, keep_unused=True)


def _grad_step(graphdef: Any, objective: Callable[..., Any]) -> Callable[..., Any]:
    """The loss, its aux and the gradients, as an NNX training loop does.

    ``nnx.value_and_grad`` differentiates the floating ``nnx.Param`` state
    (integer parameters are carried, not differentiated) and carries the other
    state's updates (batch statistics, RNG counts) back into ``model``.
    """

    def grad_step(params: Any, rest: Any, batch: tuple[Any, ...]) -> Any:
        model = nnx.merge(graphdef, params, rest)
        (value, aux), grads = nnx.value_and_grad(
            lambda m: objective(m, batch),
            argnums=nnx.DiffState(0, differentiable),
            has_aux=True,
        )(model)
        return value, aux, grads, model

    return grad_step


def _accumulated(
    graphdef: Any, objective: Callable[..., Any], request: Request, mesh: Mesh
) -> Callable[..., Any]:
    """:func:`_grad_step` over ``request.microbatches`` microbatches, accumulated.

    Microbatch ``j`` holds rows ``j, j + k, ...`` of every batch leaf: the
    leaf is reshaped to ``(B / k, k, ...)`` and its first two axes swapped, the
    rows keeping the leaf's own spec, so each device's microbatch is a slice of
    its own rows and nothing moves between devices. A ``jax.lax.scan`` sums
    the losses and gradients (the other state, such as batch statistics,
    carried from one microbatch to the next); both are divided by ``k``: the
    mean over the global batch, as the one-shot step's. ``aux`` is stacked.
    """
    grad_step = _grad_step(graphdef, objective)
    k = request.microbatches
    if k == 1:
        return grad_step

    def split(leaf: Any, spec: PartitionSpec) -> Any:
        rows = jnp.swapaxes(leaf.reshape(leaf.shape[0] // k, k, *leaf.shape[1:]), 0, 1)
        where = NamedSharding(mesh, PartitionSpec(None, *spec))
        return jax.lax.with_sharding_constraint(rows, where)

    def accumulated(params: Any, rest: Any, batch: tuple[Any, ...]) -> Any:
        micro = tuple(map(split, batch, request.batch_specs))
        zeros = jax.tree.map(jnp.zeros_like, nnx.filter_state(params, differentiable))

        def body(carry: Any, one: tuple[Any, ...]) -> Any:
            # the parameters ride in the carry, unchanged: nnx's transforms
            # refuse state closed over from an outer trace
            fixed, other, grad_sum, loss_sum = carry
            value, aux, grads, model = grad_step(fixed, other, one)
            grad_sum = jax.tree.map(jnp.add, grad_sum, grads)
            loss_sum = loss_sum + jnp.asarray(value, jnp.float32)
            return (fixed, _split_state(model)[1], grad_sum, loss_sum), aux

        start = (params, rest, zeros, jnp.zeros((), jnp.float32))
        (_, other, grad_sum, loss_sum), aux = jax.lax.scan(body, start, micro)
        grads = jax.tree.map(lambda g: g / k, grad_sum)
        return loss_sum / k, aux, grads, nnx.merge(graphdef, params, other)

    return accumulated


def _backward(
    graphdef: Any,
    objective: Callable[..., Any],
    params: Any,
    rest: Any,
    request: Request,
    mesh: Mesh,
) -> Any:
    """The jitted forward and backward: loss, aux, gradients, new other state."""
    grad_step = _accumulated(graphdef, objective, request, mesh)

    def backward(params: Any, rest: Any, batch: tuple[Any, ...]) -> Any:
        value, aux, grads, model = grad_step(params, rest, batch)
        return value, aux, grads, _split_state(model)[1]

    replicated = NamedSharding(mesh, PartitionSpec())
    grad_shardings = _shardings(nnx.filter_state(params, differentiable))
    out = (replicated, None, grad_shardings, _shardings(rest))
    return jax.jit(backward, out_shardings=out, keep_unused=True)


def _train(
    graphdef: Any,
    objective: Callable[..., Any],
    tx: optax.GradientTransformation,
    state: tuple[Any, Any, Any, jax.ShapeDtypeStruct],
    request: Request,
    donated: tuple[int, ...] = (0, 1, 2, 3),
) -> Any:
    """The jitted full step: gradients, the optimizer's update, the new state.

    What ``nnx.Optimizer(model, tx, wrt=<floating params>).update`` does, on
    pure arrays: no optimizer object (and so no sharding metadata or mesh
    needed to build one), the plan's optimizer leaves; the old state donated
    (``donated``: the positions of the parameters, the other state, the
    optimizer's state and its step).
    """
    params, rest, opt_state, step = state
    grad_step = _accumulated(graphdef, objective, request, step.sharding.mesh)

    def train(
        params: Any,
        rest: Any,
        opt_state: Any,
        step: jax.Array,
        batch: tuple[Any, ...],
    ) -> Any:
        value, aux, grads, model = grad_step(params, rest, batch)
        param_arrays = nnx.as_pure(nnx.state(model, differentiable))
        grad_arrays = nnx.as_pure(nnx.state(grads, nnx.Param))

        def value_fn(new_params: Any) -> Any:
            trial = nnx.merge(graphdef, params, rest, copy=True)
            nnx.update(trial, new_params)
            return objective(trial, batch)[0]

        updates, new_opt_state = _update(
            tx, grad_arrays, opt_state, param_arrays, value, value_fn
        )
        nnx.update(model, optax.apply_updates(param_arrays, updates))
        new_params, new_rest = _split_state(model)
        return value, aux, new_params, new_rest, new_opt_state, step + 1

    replicated = NamedSharding(step.sharding.mesh, PartitionSpec())
    out = (
        replicated,
        None,
        _shardings(params),
        _shardings(rest),
        _shardings(opt_state),
        step.sharding,
    )
    return jax.jit(train, out_shardings=out, donate_argnums=donated, keep_unused=True)


def _update(
    tx: optax.GradientTransformation,
    grads: Any,
    opt_state: Any,
    params: Any,
    value: Any,
    value_fn: Callable[[Any], Any],
) -> Any:
    """``tx.update``, as optax's own examples call it.

    Plain transformations take ``(grads, state, params)``; those whose update
    needs the objective (``optax.lbfgs``' line search,
    ``optax.contrib.reduce_on_plateau``) also take ``value``, ``grad`` and
    ``value_fn``, passed when the plain call asks for them.
    """
    try:
        return tx.update(grads, opt_state, params)
    except TypeError as error:
        if not isinstance(tx, optax.GradientTransformationExtraArgs):
            raise _OptimizerError(error_line(error)) from error
        first = error
    except Exception as error:
        raise _OptimizerError(error_line(error)) from error
    try:
        return tx.update(
            grads, opt_state, params, value=value, grad=grads, value_fn=value_fn
        )
    except (_ModelError, _LossError, ArgumentError):
        raise
    except Exception as error:
        raise _OptimizerError(
            f"{error_line(first)}; with value, grad and value_fn passed too (as "
            f"optax's L-BFGS needs) it raised {error_line(error)}. Pass an optax "
            "transformation whose update takes (grads, state, params) and at "
            "most those extra arguments"
        ) from error


def _optimizer_group(opt_state: Any) -> ArgumentGroup:
    """The optimizer's arguments: its state's leaves by plan path, then the step."""
    paths = [
        "optimizer/" + path_str(("opt_state", *keypath_keys(keypath)))
        for keypath, _ in jax.tree_util.tree_flatten_with_path(opt_state)[0]
    ]
    return ArgumentGroup("optimizer state", (*paths, "optimizer/step"))


def build(
    request: Request,
    mesh: Mesh,
    specs: Mapping[str, PartitionSpec],
    *,
    donate_model: bool = True,
) -> Program:
    """The program a step of ``request`` is: forward, with backward, with update.

    ``specs`` is the plan's spec of every leaf by path (the optimizer's state
    takes its own); the model is rematerialised as ``request.remat`` says.
    A full step donates the model's state and the optimizer's, or with
    ``donate_model=False`` the optimizer's alone.
    """
    model = rematerialised(request.model, request.remat)
    graphdef, params, rest = sharded_model_state(model, specs, mesh)
    batch = sharded_batch(request.batch, request.batch_specs, mesh)
    tx, loss = request.tx, request.loss
    model_groups = (state_group("parameter", params), state_group(_OTHER, rest))
    differentiated = nnx.filter_state(params, differentiable)
    if loss is None:
        jitted = _forward(graphdef)
        groups: tuple[ArgumentGroup, ...] = (*model_groups, batch_group(batch))
        args: tuple[Any, ...] = (params, rest, batch)
        return Program(jitted, args, groups, ("output",), differentiated)
    if tx is None:
        jitted = _backward(graphdef, _objective(loss), params, rest, request, mesh)
        outputs: tuple[str, ...] = ("loss", "aux", "gradients", "new other state")
        groups = (*model_groups, batch_group(batch))
        return Program(jitted, (params, rest, batch), groups, outputs, differentiated)
    opt_state, step = _optimizer_state(tx, params, specs, mesh)
    jitted = _train(
        graphdef,
        _objective(loss),
        tx,
        (params, rest, opt_state, step),
        request,
        (0, 1, 2, 3) if donate_model else (2, 3),
    )
    outputs = (
        "loss",
        "aux",
        "new parameters",
        "new other state",
        "new optimizer state",
        "new optimizer step",
    )
    groups = (*model_groups, _optimizer_group(opt_state), batch_group(batch))
    args = (params, rest, opt_state, step, batch)
    return Program(jitted, args, groups, outputs, differentiated)


_OTHER = "other model state"

TRAIN = ProgramKind(
    "train",
    build,
    "the training step: the forward pass; with a loss, the backward; with an "
    "optimizer, the update",
)
"""The training step, as ``"train"`` names it in a child's request."""


def _build_optimizer_donated(
    request: Request, mesh: Mesh, specs: Mapping[str, PartitionSpec]
) -> Program:
    return build(request, mesh, specs, donate_model=False)


TRAIN_OPTIMIZER_DONATED = ProgramKind(
    "train-optimizer-donated",
    _build_optimizer_donated,
    "the training step with only the optimizer's state donated, the model's "
    "kept (google-tunix's trainer: nnx.jit(train_step, "
    'donate_argnames=("optimizer",)))',
)
"""The training step donating only the optimizer's state, as tunix's trainer does."""

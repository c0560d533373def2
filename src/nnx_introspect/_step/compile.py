"""The jitted step, lowered and compiled on a mesh; XLA's memory and cost analyses."""

import contextlib
import dataclasses
import re
import shutil
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NoReturn

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from nnx_introspect._accelerators.topology import resolve_topology
from nnx_introspect._breakdown.report import ArgumentLeaf, argument_leaves, classify
from nnx_introspect._inventory import inventory, path_str
from nnx_introspect._mesh import MeshConfigReport
from nnx_introspect._nnx import keypath_keys
from nnx_introspect._render.formats import batch_str, error_line
from nnx_introspect._step.inputs import _Request
from nnx_introspect._step.loss import (
    _call_model,
    _LossError,
    _ModelError,
    _objective,
    _OptimizerError,
)
from nnx_introspect._step.options import rematerialised
from nnx_introspect._step.platform import devices_seen_as
from nnx_introspect._typing import ArgumentError
from nnx_introspect._xla.analysis import compile_lowered
from nnx_introspect._xla.cache import (
    cache_enabled,
    compile_key,
    load_result,
    store_result,
    without_callers,
)
from nnx_introspect._xla.dump import DumpFormatError, read_peak
from nnx_introspect._xla.readings import XlaReadings


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
    ``step`` of ``nnx.Optimizer``), whose specs they take by path, over the
    parameters the step differentiates (integer ones have no optimizer state).
    """
    try:
        abstract = jax.eval_shape(
            tx.init, nnx.as_pure(nnx.filter_state(params, _differentiable))
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


def _differentiable(path: Any, variable: Any) -> bool:
    """Whether ``variable`` is a floating (or complex) ``nnx.Param``.

    What a step differentiates: integer parameters (int8 weights of a quantized
    model) are carried unchanged, as a quantized trainer's ``wrt`` filter does.
    """
    if not isinstance(variable, nnx.Param):
        return False
    value = variable.get_value()
    dtype = getattr(value, "dtype", None)
    return jnp.issubdtype(dtype if dtype is not None else type(value), jnp.inexact)


def _shardings(tree: Any) -> Any:
    return jax.tree.map(lambda s: s.sharding, tree)


_CONSTRAINT = re.compile(r"\bsdy\.sharding_constraint\b|\bcustom_call @Sharding\(")
"""A sharding constraint in lowered StableHLO: Shardy's op, or GSPMD's custom call
when Shardy is switched off (``jax_use_shardy_partitioner=False``)."""


def count_sharding_constraints(lowered: Any) -> int:
    """How many sharding constraints the lowered step holds.

    Forward and backward: the transpose of ``with_sharding_constraint`` is one too.
    """
    return len(_CONSTRAINT.findall(lowered.as_text()))


def _auto_mesh(mesh: Mesh) -> Mesh | None:
    """``mesh``'s devices and names with Auto axes; None without Explicit axes."""
    types = tuple(getattr(mesh, "axis_types", ()) or ())
    if not any(t == AxisType.Explicit for t in types):
        return None
    return Mesh(mesh.devices, mesh.axis_names, axis_types=(AxisType.Auto,) * len(types))


@contextlib.contextmanager
def _mesh_contexts(mesh: Mesh, logical_rules: Any) -> Iterator[None]:
    """The contexts a trainer compiles under.

    ``jax.set_mesh(mesh)`` and the legacy ``with mesh:`` (model zoos such as
    tunix apply their activation constraints only when the legacy physical mesh
    is set), no eager sharding, and the logical rules.
    """
    with contextlib.ExitStack() as stack:
        with warnings.catch_warnings():
            # `with mesh:` is deprecated in favour of `jax.set_mesh`, but models
            # still read the mesh it sets (`thread_resources.env.physical_mesh`).
            warnings.simplefilter("ignore", DeprecationWarning)
            stack.enter_context(mesh)
        stack.enter_context(jax.set_mesh(mesh))
        stack.enter_context(nnx.use_eager_sharding(False))
        if logical_rules is not None:
            stack.enter_context(nnx.logical_axis_rules(logical_rules))
        yield


def _compile(
    request: _Request,
    mesh: Mesh,
    plan: MeshConfigReport,
    trace_devices: Sequence[Any] | None = None,
    *,
    topology: str | None = None,
    cache: bool = False,
) -> XlaReadings:
    """Lower and compile the step on ``mesh``; XLA's readings of it.

    With ``trace_devices`` (a named target's compile-only devices, in its
    child process), the model is traced with JAX's device lookups answering
    with them (:func:`~nnx_introspect._step.platform.devices_seen_as`), so
    code that asks for its platform sees the target's;
    ``traced_platform`` says which platform the model saw.

    A ``mesh`` with Explicit axes (``jax.make_mesh``'s default) is used as is
    when the step traces under it, as the user's own ``jax.jit`` would; when the
    model does not (it was written for Auto axes, as most NNX models are), the
    step is compiled on the same devices with Auto axes, and
    ``explicit_axes_fallback`` says why.

    With ``request.breakdown``, XLA dumps the compiled step into a temporary directory
    (removed before this returns) and ``breakdown`` is the
    :class:`~nnx_introspect._breakdown.report.Breakdown` of its peak as JSON
    data, or ``breakdown_error`` says why there is none.

    With ``cache`` (and ``NNX_INTROSPECT_CACHE`` not ``off``), a program
    compiled before for the same ``topology``, devices, flags, versions and
    options is not compiled again: its readings come from
    :mod:`~nnx_introspect._xla.cache`, ``cached`` the date of
    that compile and ``compile_seconds`` the time spent now.
    """
    start = time.perf_counter()
    fallback: str | None = None
    try:
        lowered, seen, names = _lower(request, mesh, plan, trace_devices)
    except (_ModelError, _LossError, _OptimizerError) as error:
        auto = _auto_mesh(mesh)
        if auto is None:
            _raise_as_argument_error(request, error)
        try:
            lowered, seen, names = _lower(request, auto, plan, trace_devices)
        except (_ModelError, _LossError, _OptimizerError) as auto_error:
            _raise_as_argument_error(request, auto_error)
        fallback = (
            f"the step does not trace under the mesh's Explicit axes ({error}); "
            "compiled on the same devices with Auto axes, as the mesh's "
            "`.abstract_mesh` would be"
        )
        mesh = auto
    readings = _compile_or_recall(request, lowered, mesh, start, names, topology, cache)
    warnings = readings.warnings
    if fallback is not None:
        warnings = (*warnings, f"`mesh`: {fallback}.")
    return dataclasses.replace(
        readings,
        sharding_constraints=count_sharding_constraints(lowered),
        traced_platform=seen,
        explicit_axes_fallback=fallback,
        warnings=warnings,
    )


def _compile_or_recall(
    request: _Request,
    lowered: Any,
    mesh: Mesh,
    start: float,
    names: "_Names",
    topology: str | None,
    cache: bool,
) -> XlaReadings:
    """The compile's readings: from the cache when it holds them, else compiled."""
    key = None
    if cache_enabled(cache):
        described = None
        if topology is not None:
            described = [topology, repr(resolve_topology(topology))]
        extra: dict[str, Any] = {"breakdown": request.breakdown}
        if request.breakdown:  # the breakdown names the arguments by path
            extra |= {
                "arguments": [repr(a) for a in names.arguments],
                "outputs": list(names.outputs),
                "gradient_types": sorted(repr(t) for t in names.gradient_types),
            }
        text = without_callers(lowered.as_text(debug_info=True), _callers())
        key = compile_key(text, mesh, topology=described, extra=extra)
        hit = load_result(key)
        if hit is not None:
            seconds = time.perf_counter() - start
            return dataclasses.replace(
                hit.readings, compile_seconds=seconds, cached=hit.compiled_on
            )
    if request.breakdown:
        readings = _compile_with_breakdown(lowered, mesh, start, names)
    else:
        readings = compile_lowered(lowered, mesh, start)
    if key is not None:
        store_result(key, readings)
    return readings


def _callers() -> set[tuple[str, int]]:
    """``(file, line)`` of every frame of this call's stack: the lowering's callers.

    The program's source locations name them (and the lines they stand on
    differ from one script to the next), so they stay out of the cache key.
    """
    return {(frame.filename, frame.lineno or 0) for frame in traceback.extract_stack()}


def _compile_with_breakdown(
    lowered: Any, mesh: Mesh, start: float, names: "_Names"
) -> XlaReadings:
    """:func:`compile_lowered` with XLA's dumps read into a breakdown of the peak.

    A breakdown that cannot be made (a compile refused for memory writes no
    buffer assignment; a dump in a format this jaxlib's reader does not know)
    is ``breakdown_error``, never an exception.
    """
    directory = tempfile.mkdtemp(prefix="nnx-introspect-dump-")
    try:
        readings = compile_lowered(lowered, mesh, start, dump_to=directory)
        if readings.out_of_memory:
            return dataclasses.replace(
                readings,
                breakdown_error="the compiler refused the step for memory, so it "
                "assigned no buffers to break down",
            )
        try:
            peak = read_peak(directory, backend=readings.backend)
            held = (
                (readings.argument_bytes or 0)
                + (readings.output_bytes or 0)
                + (readings.temp_bytes or 0)
                - (readings.alias_bytes or 0)
            )
            found = classify(
                peak,
                names.arguments,
                held_bytes=held,
                outputs=names.outputs,
                gradient_types=names.gradient_types,
            )
        except (DumpFormatError, ValueError) as error:
            return dataclasses.replace(readings, breakdown_error=error_line(error))
        return dataclasses.replace(readings, breakdown=found.json_data())
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _raise_as_argument_error(request: _Request, error: Exception) -> NoReturn:
    """Raise the ArgumentError naming the argument to blame.

    It is chained to the user's own exception, so its traceback is kept.
    """
    cause = error.__cause__ or error
    batch = ", ".join(batch_str(b) for b in request.batch)
    if isinstance(error, _OptimizerError):
        raise ArgumentError(
            "optimizer", f"`optimizer`'s update failed in the step: {error}"
        ) from cause
    if isinstance(error, _ModelError) and callable(request.loss):
        raise ArgumentError(
            "loss",
            f"`loss` {request.loss_name!r} called the model, whose forward on "
            f"`batch` ({batch}) raised {error}",
        ) from cause
    if isinstance(error, _ModelError):
        raise ArgumentError(
            "batch",
            f"`batch` ({batch}) cannot be passed to the model: its forward raised "
            f"{error}",
        ) from cause
    raise ArgumentError(
        "loss", f"`loss` {request.loss_name!r} failed: {error}"
    ) from cause


@dataclasses.dataclass(frozen=True)
class _Names:
    """What the step's flattened arguments and outputs are, for a breakdown."""

    arguments: tuple[ArgumentLeaf, ...]
    outputs: tuple[str, ...]
    gradient_types: frozenset[tuple[str, tuple[int, ...]]]


_XLA_TYPES = {
    "float32": "f32",
    "bfloat16": "bf16",
    "float16": "f16",
    "float64": "f64",
    "complex64": "c64",
    "complex128": "c128",
}


def _state_paths(state: Any, prefix: str = "") -> list[str]:
    return [prefix + record.path_str for record in inventory(state)]


def _names(
    params: Any,
    rest: Any,
    opt_state: Any,
    n_batch: int,
    outputs: Sequence[str],
    lowered: Any,
) -> _Names:
    """Each entry parameter's path and kind, each output leaf's name."""
    optimizer: list[str] = []
    if opt_state is not None:
        optimizer = [
            "optimizer/" + path_str(("opt_state", *keypath_keys(keypath)))
            for keypath, _ in jax.tree_util.tree_flatten_with_path(opt_state)[0]
        ] + ["optimizer/step"]
    arguments = argument_leaves(
        _state_paths(params), _state_paths(rest), optimizer, n_batch
    )
    out_names = []
    for keypath, _ in jax.tree_util.tree_flatten_with_path(lowered.out_info)[0]:
        keys = keypath_keys(keypath)
        if len(keys) > 1 and keys[-1] == "value":  # an nnx.Variable's array
            keys = keys[:-1]
        group = outputs[int(keys[0])] if keys and str(keys[0]).isdigit() else "output"
        rest_path = path_str(keys[1:]) if len(keys) > 1 else ""
        out_names.append(f"{group} {rest_path}".strip())
    gradient_types = frozenset(
        (
            _XLA_TYPES.get(jnp.dtype(leaf.dtype).name, jnp.dtype(leaf.dtype).name),
            tuple(leaf.sharding.shard_shape(leaf.shape)),
        )
        for leaf in jax.tree.leaves(nnx.filter_state(params, _differentiable))
    )
    return _Names(arguments, tuple(out_names), gradient_types)


def _lower(
    request: _Request,
    mesh: Mesh,
    plan: MeshConfigReport,
    trace_devices: Sequence[Any] | None = None,
) -> tuple[Any, str, _Names]:
    """The step lowered on ``mesh``, the platform the model saw, and its names.

    Raises the private errors of a failed trace.
    """
    model = rematerialised(request.model, request.remat)
    tx, loss = request.tx, request.loss
    specs = {leaf.path: leaf.spec for leaf in plan.leaves + plan.optimizer_leaves}
    graphdef, *states = nnx.split(model, nnx.Param, ...)
    params = _shard_state(states[0], specs, "", mesh)
    rest = _shard_state(states[1], specs, "", mesh)
    batch = tuple(
        jax.ShapeDtypeStruct(b.shape, b.dtype, sharding=NamedSharding(mesh, s))
        for b, s in zip(request.batch, request.batch_specs, strict=True)
    )
    opt_state: Any = None
    args: tuple[Any, ...] = (params, rest, batch)
    if loss is None:
        jitted = _forward(graphdef)
        groups: tuple[str, ...] = ("output",)
    elif tx is None:
        jitted = _backward(graphdef, _objective(loss), params, rest, request, mesh)
        groups = ("loss", "aux", "gradients", "new other state")
    else:
        opt_state, step = _optimizer_state(tx, params, specs, mesh)
        jitted = _train(
            graphdef, _objective(loss), tx, (params, rest, opt_state, step), request
        )
        args = (params, rest, opt_state, step, batch)
        groups = (
            "loss",
            "aux",
            "new parameters",
            "new other state",
            "new optimizer state",
            "new optimizer step",
        )
    with (
        _mesh_contexts(mesh, request.logical_rules),
        devices_seen_as(trace_devices) as seen,
    ):
        lowered = jitted.lower(*args)
    names = _names(params, rest, opt_state, len(batch), groups, lowered)
    return lowered, seen, names


def _forward(graphdef: Any) -> Any:
    """The jitted forward pass ``model(*batch)``."""

    def forward(params: Any, rest: Any, batch: tuple[Any, ...]) -> Any:
        return _call_model(nnx.merge(graphdef, params, rest), batch)

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
            argnums=nnx.DiffState(0, _differentiable),
            has_aux=True,
        )(model)
        return value, aux, grads, model

    return grad_step


def _accumulated(
    graphdef: Any, objective: Callable[..., Any], request: _Request, mesh: Mesh
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
        zeros = jax.tree.map(jnp.zeros_like, nnx.filter_state(params, _differentiable))

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
    request: _Request,
    mesh: Mesh,
) -> Any:
    """The jitted forward and backward: loss, aux, gradients, new other state."""
    grad_step = _accumulated(graphdef, objective, request, mesh)

    def backward(params: Any, rest: Any, batch: tuple[Any, ...]) -> Any:
        value, aux, grads, model = grad_step(params, rest, batch)
        return value, aux, grads, _split_state(model)[1]

    replicated = NamedSharding(mesh, PartitionSpec())
    grad_shardings = _shardings(nnx.filter_state(params, _differentiable))
    out = (replicated, None, grad_shardings, _shardings(rest))
    return jax.jit(backward, out_shardings=out, keep_unused=True)


def _train(
    graphdef: Any,
    objective: Callable[..., Any],
    tx: optax.GradientTransformation,
    state: tuple[Any, Any, Any, jax.ShapeDtypeStruct],
    request: _Request,
) -> Any:
    """The jitted full step: gradients, the optimizer's update, the new state.

    What ``nnx.Optimizer(model, tx, wrt=<floating params>).update`` does, on
    pure arrays: no optimizer object (and so no sharding metadata or mesh
    needed to build one), the plan's optimizer leaves; the old state donated.
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
        param_arrays = nnx.as_pure(nnx.state(model, _differentiable))
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
    return jax.jit(
        train, out_shardings=out, donate_argnums=(0, 1, 2, 3), keep_unused=True
    )


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
    except (_ModelError, _LossError):
        raise
    except Exception as error:
        raise _OptimizerError(
            f"{error_line(first)}; with value, grad and value_fn passed too (as "
            f"optax's L-BFGS needs) it raised {error_line(error)}. Pass an optax "
            "transformation whose update takes (grads, state, params) and at "
            "most those extra arguments"
        ) from error

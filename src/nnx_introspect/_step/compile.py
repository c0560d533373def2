"""The jitted step, lowered and compiled on a mesh; XLA's memory and cost analyses.

The target's devices, as the model sees them while its step is traced. Model
code asks JAX where it runs: tunix, for one, applies its activation
sharding constraints only when ``jax.devices()[0].platform != "cpu"``. A step
compiled for a named GPU or TPU target is traced in a child process whose JAX
runs on the CPU, so without help such a model would be traced as CPU code and
compiled without the constraints it has on the real machine.
:func:`devices_seen_as` makes JAX's public device lookups (``jax.devices``,
``jax.local_devices``, ``jax.device_count``, ``jax.local_device_count`` and
``jax.default_backend``) answer with the target's compile-only devices for the
duration of the trace. It is used only inside the child process of a named
topology, only while tracing, and ``step_memory_report(...,
trace_as_target=False)`` turns it off.

It replaces the functions on the ``jax`` module, so code that looks them up
there at call time (``jax.devices()``) sees the target; code that bound them at
import time (``from jax import devices``) does not, and a lookup for an
explicit backend (``jax.devices("cpu")``) still gets that backend.

Traced as on its target, a model may reach a kernel the target cannot run (a
TPU Pallas kernel on a GPU target): :func:`devices_seen_as` turns JAX's
lowering error into one line that names the kernel and the way to the model's
path without it (:func:`~nnx_introspect._step.kernels.kernel_refusal`), for
every program lowered in it: the training step's, serving's and RL's.
"""

import contextlib
import dataclasses
import re
import shutil
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import AxisType, Mesh

from nnx_introspect._accelerators import resolve_topology
from nnx_introspect._breakdown import ArgumentLeaf, classify
from nnx_introspect._inventory import path_str
from nnx_introspect._mesh import MeshConfigReport
from nnx_introspect._nnx import keypath_keys
from nnx_introspect._render import batch_str
from nnx_introspect._step.expert_roles import ExpertRoles, ExpertTrace, expert_notes
from nnx_introspect._step.inputs import Request
from nnx_introspect._step.kernels import kernel_refusal
from nnx_introspect._step.loss import _LossError, _ModelError, _OptimizerError
from nnx_introspect._step.program import Program, ProgramKind
from nnx_introspect._step.step_records import collectives_from_json
from nnx_introspect._step.train import TRAIN
from nnx_introspect._text import error_line
from nnx_introspect._typing import ArgumentError
from nnx_introspect._xla import (
    DumpFormatError,
    XlaReadings,
    cache_enabled,
    compile_key,
    compile_lowered,
    compile_options,
    load_result,
    read_peak,
    store_result,
    without_callers,
)

__all__ = [
    "ProgramNames",
    "compile_or_recall",
    "compile_request",
    "count_sharding_constraints",
    "devices_seen_as",
]

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


def compile_request(
    request: Request,
    mesh: Mesh,
    plan: MeshConfigReport,
    trace_devices: Sequence[Any] | None = None,
    *,
    topology: str | None = None,
    cache: bool = False,
    program: ProgramKind = TRAIN,
    runs: int | None = None,
) -> XlaReadings:
    """Lower and compile ``request``'s ``program`` on ``mesh``; XLA's readings.

    The program is the training step unless ``program`` is another kind (see
    :mod:`~nnx_introspect._step.program`).

    With ``trace_devices`` (a named target's compile-only devices, in its
    child process), the model is traced with JAX's device lookups answering
    with them (:func:`devices_seen_as`), so
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
    that compile and ``compile_seconds`` the time spent now. With ``runs``,
    the compiled program is run on ``mesh``'s devices too (the readings'
    ``measured``).
    """
    start = time.perf_counter()
    fallback: str | None = None
    try:
        lowered, seen, names = _lower(
            request, mesh, plan, (trace_devices, topology), program
        )
    except (_ModelError, _LossError, _OptimizerError) as error:
        auto = _auto_mesh(mesh)
        if auto is None:
            _raise_as_argument_error(request, error)
        try:
            lowered, seen, names = _lower(
                request, auto, plan, (trace_devices, topology), program
            )
        except (_ModelError, _LossError, _OptimizerError) as auto_error:
            _raise_as_argument_error(request, auto_error)
        fallback = (
            f"the step does not trace under the mesh's Explicit axes ({error}); "
            "compiled on the same devices with Auto axes, as the mesh's "
            "`.abstract_mesh` would be"
        )
        mesh = auto
    readings = compile_or_recall(
        lowered,
        mesh,
        start,
        names,
        topology,
        cache,
        breakdown=request.breakdown,
        runs=runs,
        flags=request.compiler_flags,
    )
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


def compile_or_recall(
    lowered: Any,
    mesh: Mesh,
    start: float,
    names: "ProgramNames",
    topology: str | None,
    cache: bool,
    *,
    breakdown: bool,
    runs: int | None = None,
    flags: tuple[tuple[str, str], ...] = (),
) -> XlaReadings:
    """The compile's readings: from the cache when it holds them, else compiled.

    ``lowered`` is any program's (the training step's, a serving program's):
    the cache key is its text without its callers' lines, the mesh, the
    ``topology`` and, with ``breakdown``, the ``names`` the breakdown gives its
    buffers. With ``breakdown``, XLA's dumps are read into a breakdown of the
    peak (the readings' ``breakdown``, as JSON data). With ``runs``, the
    program is compiled (a program to run is never recalled) and run on the
    mesh's devices (the readings' ``measured``); the cache keeps its readings
    without the measurement. ``flags`` are the user's compiler flags
    (``compiler_flags``), given to the compile as its options and part of
    the cache key: a program compiled with other flags is never recalled.
    """
    key = None
    if cache_enabled(cache):
        described = None
        if topology is not None:
            described = [topology, repr(resolve_topology(topology))]
        extra: dict[str, Any] = {"breakdown": breakdown}
        if breakdown:  # the breakdown names the arguments by path
            extra |= {
                "arguments": [repr(a) for a in names.arguments],
                "outputs": list(names.outputs),
                "gradient_types": sorted(repr(t) for t in names.gradient_types),
            }
            if names.experts is not None:  # and a mixture of experts' by its routers
                extra["experts"] = [repr(group) for group in names.experts.groups]
        text = without_callers(lowered.as_text(debug_info=True), _callers())
        key = compile_key(
            text,
            mesh,
            topology=described,
            compiler_options=compile_options(flags),
            extra=extra,
        )
        hit = None if runs is not None else load_result(key)
        if hit is not None:
            seconds = time.perf_counter() - start
            return dataclasses.replace(
                hit.readings, compile_seconds=seconds, cached=hit.compiled_on
            )
    if breakdown:
        readings = _compile_with_breakdown(lowered, mesh, start, names, runs, flags)
    else:
        readings = compile_lowered(lowered, mesh, start, runs=runs, flags=flags)
    if key is not None:
        store_result(key, dataclasses.replace(readings, measured=None))
    return readings


def _callers() -> set[tuple[str, int]]:
    """``(file, line)`` of every frame of this call's stack: the lowering's callers.

    The program's source locations name them (and the lines they stand on
    differ from one script to the next), so they stay out of the cache key.
    """
    return {(frame.filename, frame.lineno or 0) for frame in traceback.extract_stack()}


def _compile_with_breakdown(
    lowered: Any,
    mesh: Mesh,
    start: float,
    names: "ProgramNames",
    runs: int | None = None,
    flags: tuple[tuple[str, str], ...] = (),
) -> XlaReadings:
    """:func:`compile_lowered` with XLA's dumps read into a breakdown of the peak.

    A breakdown that cannot be made (a compile refused for memory writes no
    buffer assignment; a dump in a format this jaxlib's reader does not know)
    is ``breakdown_error``, never an exception.
    """
    directory = tempfile.mkdtemp(prefix="nnx-introspect-dump-")
    try:
        readings = compile_lowered(
            lowered, mesh, start, dump_to=directory, runs=runs, flags=flags
        )
        if readings.out_of_memory:
            return dataclasses.replace(
                readings,
                breakdown_error="the compiler refused the program for memory, so it "
                "assigned no buffers to break down",
            )
        collectives = None
        roles = ExpertRoles()
        if names.experts is not None:  # a mixture of experts' steps by their roles
            collectives = collectives_from_json(readings.collectives)
            roles = names.experts.roles()
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
                experts=dict(roles.steps),
            )
        except (DumpFormatError, ValueError) as error:
            return dataclasses.replace(readings, breakdown_error=error_line(error))
        if roles.steps:
            notes = expert_notes(found.rows, roles.inputs, collectives)
            found = dataclasses.replace(found, expert_notes=notes)
        return dataclasses.replace(readings, breakdown=found.json_data())
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _raise_as_argument_error(request: Request, error: Exception) -> NoReturn:
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
class ProgramNames:
    """What a program's flattened arguments and outputs are, for a breakdown.

    ``arguments`` name and classify each entry parameter, ``outputs`` name
    each flattened output, ``gradient_types`` are the ``(XLA type, shard
    shape)`` pairs that mark a backward value as a gradient (empty for a
    program without one). For a mixture of experts, ``experts`` is its traced
    program with the plan's routers, whose forward steps' roles (``"expert
    dispatch"``, ``"expert combine"``) the breakdown finds once it is made
    (:meth:`~nnx_introspect._step.expert_roles.ExpertTrace.roles`).
    """

    arguments: tuple[ArgumentLeaf, ...]
    outputs: tuple[str, ...]
    gradient_types: frozenset[tuple[str, tuple[int, ...]]]
    experts: ExpertTrace | None = None


_XLA_TYPES = {
    "float32": "f32",
    "bfloat16": "bf16",
    "float16": "f16",
    "float64": "f64",
    "complex64": "c64",
    "complex128": "c128",
}


def _output_names(outputs: Sequence[str], lowered: Any) -> tuple[str, ...]:
    """Each output leaf's name: its top-level output's, then its path."""
    names = []
    for keypath, _ in jax.tree_util.tree_flatten_with_path(lowered.out_info)[0]:
        keys = keypath_keys(keypath)
        if len(keys) > 1 and keys[-1] == "value":  # an nnx.Variable's array
            keys = keys[:-1]
        group = outputs[int(keys[0])] if keys and str(keys[0]).isdigit() else "output"
        rest_path = path_str(keys[1:]) if len(keys) > 1 else ""
        names.append(f"{group} {rest_path}".strip())
    return tuple(names)


def _names(
    program: Program, lowered: Any, jaxpr: Any = None, groups: Any = ()
) -> ProgramNames:
    """Each entry parameter's path and kind (its group's role), each output's name.

    With a mixture of experts' ``groups``, the traced program's ``jaxpr`` too,
    whose steps' roles a breakdown reads.
    """
    arguments = program.argument_leaves()
    experts = None
    if jaxpr is not None and groups:
        experts = ExpertTrace(jaxpr, tuple(a.path for a in arguments), tuple(groups))
    gradient_types = frozenset(
        (
            _XLA_TYPES.get(jnp.dtype(leaf.dtype).name, jnp.dtype(leaf.dtype).name),
            tuple(leaf.sharding.shard_shape(leaf.shape)),
        )
        for leaf in jax.tree.leaves(program.differentiated)
    )
    return ProgramNames(
        arguments,
        _output_names(program.outputs, lowered),
        gradient_types,
        experts,
    )


def _lower(
    request: Request,
    mesh: Mesh,
    plan: MeshConfigReport,
    target: tuple[Sequence[Any] | None, str | None] = (None, None),
    program: ProgramKind = TRAIN,
) -> tuple[Any, str, ProgramNames]:
    """``request``'s ``program`` lowered on ``mesh``, the platform seen, names.

    ``target`` is ``(the devices the model is traced as seeing, the
    topology's name)``. Raises the private errors of a failed trace.
    """
    trace_devices, topology = target
    specs = {leaf.path: leaf.spec for leaf in plan.leaves + plan.optimizer_leaves}
    built = program.build(request, mesh, specs)
    groups = plan.experts if request.breakdown else ()
    with (
        _mesh_contexts(mesh, request.logical_rules),
        devices_seen_as(trace_devices, topology=topology) as seen,
    ):
        traced = built.jitted.trace(*built.args)
        lowered = traced.lower()
    return lowered, seen, _names(built, lowered, traced.jaxpr, groups)


_NAMES = (
    "devices",
    "local_devices",
    "device_count",
    "local_device_count",
    "default_backend",
)


def _answers(devices: Sequence[Any]) -> dict[str, Callable[..., Any]]:
    """Replacements for the lookups in :data:`_NAMES`, over ``devices``."""
    platform = str(devices[0].platform)
    real = {name: getattr(jax, name) for name in _NAMES}

    def asks_another(backend: Any) -> bool:
        return backend is not None and str(backend) != platform

    def devices_(backend: Any = None) -> list[Any]:
        return real["devices"](backend) if asks_another(backend) else list(devices)

    def local_devices(
        process_index: Any = None, backend: Any = None, host_id: Any = None
    ) -> list[Any]:
        if asks_another(backend):
            return list(real["local_devices"](process_index, backend, host_id))
        return list(devices)

    def device_count(backend: Any = None) -> int:
        return (
            int(real["device_count"](backend))
            if asks_another(backend)
            else len(devices)
        )

    def local_device_count(backend: Any = None) -> int:
        if asks_another(backend):
            return int(real["local_device_count"](backend))
        return len(devices)

    def default_backend() -> str:
        return platform

    return {
        "devices": devices_,
        "local_devices": local_devices,
        "device_count": device_count,
        "local_device_count": local_device_count,
        "default_backend": default_backend,
    }


@contextlib.contextmanager
def devices_seen_as(
    devices: Sequence[Any] | None, *, topology: str | None = None
) -> Iterator[str]:
    """JAX's device lookups answer with ``devices`` in the block.

    Yields the platform the traced code sees (``"gpu"``, ``"tpu"``, or the
    process's own with ``devices=None``, when nothing is replaced). The
    original functions are put back when the block ends, also on an error.
    A Pallas kernel the block's lowering refuses (JAX's "Cannot lower
    pallas_call on platform") is raised as the one line of
    :func:`~nnx_introspect._step.kernels.kernel_refusal`, naming
    ``topology`` (the target's name; default: its devices' kind).

    Example:
        >>> import jax
        >>> class FakeDevice:
        ...     platform = "gpu"
        >>> with devices_seen_as([FakeDevice()] * 8) as seen:
        ...     seen, jax.devices()[0].platform, jax.device_count()
        ('gpu', 'gpu', 8)
        >>> jax.devices()[0].platform, jax.default_backend()
        ('cpu', 'cpu')
    """
    if devices is not None and not devices:
        raise ValueError("`devices` must hold at least one device.")
    if topology is None and devices:
        topology = f"({getattr(devices[0], 'device_kind', devices[0].platform)})"
    seen = jax.default_backend() if devices is None else str(devices[0].platform)
    with _kernels_said(topology, seen):
        if devices is None:
            yield jax.default_backend()
            return
        saved = {name: getattr(jax, name) for name in _NAMES}
        try:
            for name, function in _answers(devices).items():
                setattr(jax, name, function)
            yield str(devices[0].platform)
        finally:
            for name, function in saved.items():
                setattr(jax, name, function)


@contextlib.contextmanager
def _kernels_said(topology: str | None, seen: str) -> Iterator[None]:
    """A Pallas kernel's refusal raised in the block, said as one line."""
    try:
        yield
    except Exception as error:
        refusal = kernel_refusal(error, topology, seen)
        if refusal is None:
            raise
        raise refusal from error

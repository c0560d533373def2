"""The child-process compile: its JSON request and answer, starting and serving it.

The child runs as ``python -m nnx_introspect._step`` (``_step/__main__.py`` calls
:func:`main`) with ``--xla_force_host_platform_device_count=N`` in ``XLA_FLAGS``:
it reads one JSON request on stdin (the kind of program, ``"program":
"train"``, whose builder it looks up in :mod:`~nnx_introspect._step.registry`;
a :class:`StepSpec`'s JSON: the target and loss by ``"package.module:name"``,
the mesh, batch shapes, specs, optimizer name; and every leaf's planned spec,
never rules), builds and compiles the program (on virtual CPU devices, or
on a named TPU or GPU topology's compile-only devices) and writes one JSON
line on stdout:
``{"result": {...}}`` (the :class:`~nnx_introspect._xla.readings.XlaReadings`'
JSON data) or, for bad input,
``{"error": "ValueError", "message": "..."}`` (with ``"argument"`` for an
:class:`~nnx_introspect._typing.ArgumentError`, raised as one in the parent).
Anything else is a crash: a traceback on stderr and exit code 1.
"""

import dataclasses
import functools
import json
import math
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from nnx_introspect._accelerators import resolve_topology
from nnx_introspect._experts import planned_expert_groups
from nnx_introspect._inventory import inventory
from nnx_introspect._mesh import LeafShard, MeshConfigReport
from nnx_introspect._render import spec_from_json, spec_json
from nnx_introspect._step.compile import compile_request
from nnx_introspect._step.inputs import Request
from nnx_introspect._step.lora import as_lora, with_lora
from nnx_introspect._step.program import ProgramKind
from nnx_introspect._step.registry import program_kind
from nnx_introspect._step.spec import StepSpec, step_json
from nnx_introspect._targets import TargetError, build_target
from nnx_introspect._text import plural
from nnx_introspect._typing import ArgumentError
from nnx_introspect._xla import (
    XlaReadings,
    answer_key,
    cache_enabled,
    load_answer,
    native_stderr_captured,
    python_log_dropped,
    store_answer,
    topology_mesh,
)

__all__ = [
    "MAX_CHILD_DEVICES",
    "Place",
    "answer",
    "child_request",
    "child_timeout",
    "child_why",
    "compiled_where",
    "place_for",
    "present_mesh",
    "run_child",
    "run_child_json",
    "topology_mesh_here",
]

MAX_CHILD_DEVICES = 2048
"""The most virtual CPU devices a child compile may use (see the benchmarks)."""

CHILD_TIMEOUT_SECONDS = 900.0
"""How long a child compile may take before it is stopped, unless the
environment's ``NNX_INTROSPECT_CHILD_TIMEOUT`` gives another number of seconds
(:func:`child_timeout`): a 30B mixture of experts' XLA:TPU compile on a busy
2-core machine takes longer."""

_SAID = (
    re.compile(r"^[\w.]*(Error|Exception): "),
    re.compile(r"Check failed|RET_CHECK|^[FE]\d{4} "),
)
"""Lines of a crashed child's stderr that say what went wrong, the best kind
first: the exception Python raised (``jax.errors.JaxRuntimeError: INTERNAL:
RET_CHECK failure ... Ragged all-to-all is currently not supported in limited
ICI routing settings``), XLA's fatal check (``F1206 ... Check failed: ...``)."""

_NOISE = re.compile(
    r"^[IW]\d{4} \d\d:\d\d:[\d.]+ |^WARNING: All log messages before "
    r"absl::InitializeLog\(\)|^WARNING: Logging before InitGoogle\(\)"
)
"""Log lines a child writes as it starts (absl's and glog's information and
warnings: ``I0000 ... cudart_stub.cc:31] Could not find cuda drivers``), never
the cause of its failure."""


def child_request(
    spec: StepSpec, plan: MeshConfigReport, program: str = "train"
) -> dict[str, Any]:
    """The JSON a child needs: the program's kind, the spec's, the plan's specs.

    ``program`` names the kind of program the child compiles (see
    :mod:`~nnx_introspect._step.registry`): the training step by default.

    The child compiles exactly ``plan``'s specs: every leaf's path, shape,
    dtype and resolved spec travels, never the rules that gave them (a
    compiled regular expression's flags, a rules file, metadata read under
    other versions would all be resolved again, perhaps differently).

    Raises:
        ArgumentError: For what cannot be named, a mesh too large, or an
            unknown ``program``.
    """
    program_kind(program)  # a name the child knows
    why = child_why(spec.num_devices, spec.topology)
    planned = {
        "program": program,
        "leaves": [_leaf_json(leaf) for leaf in plan.leaves],
        "optimizer_leaves": [_leaf_json(leaf) for leaf in plan.optimizer_leaves],
    }
    return step_json(spec, why) | planned


@dataclasses.dataclass(frozen=True)
class Place:
    """Where a program compiles: a mesh of this process's devices, or a child.

    ``where`` is the report's words for it; ``mesh`` (here) the mesh to
    compile on and ``order`` the device order it gives the readings, when
    its own is not the compile's; ``payload`` (a child) the child's JSON
    request and ``devices`` its device count.
    """

    where: str
    mesh: Mesh | None = None
    order: str | None = None
    payload: dict[str, Any] | None = None
    devices: int = 0


def compiled_where(
    spec: StepSpec,
    request: Request,
    plan: MeshConfigReport,
    cache: bool,
    runs: int | None,
    program: ProgramKind,
) -> tuple[XlaReadings, str]:
    """XLA's readings of ``spec``'s ``program``, and where it was compiled.

    The place is found first (:func:`place_for`), then the program compiles
    there once: in a child process, or here by
    :func:`~nnx_introspect._step.compile.compile_request`.
    """
    payload = functools.partial(_child_payload, spec, plan, program.name, cache)
    place = place_for(
        spec.num_devices, spec.topology, spec.mesh, spec.mesh_axes, runs, payload
    )
    if place.payload is not None:
        return run_child(place.payload, place.devices), place.where
    assert place.mesh is not None  # a place here has its mesh
    readings = compile_request(
        request,
        place.mesh,
        plan,
        topology=spec.topology,
        cache=cache,
        runs=runs,
        program=program,
    )
    if place.order is not None:
        readings = dataclasses.replace(readings, device_order=place.order)
    return readings, place.where


def _child_payload(
    spec: StepSpec, plan: MeshConfigReport, program: str, cache: bool
) -> dict[str, Any]:
    return child_request(spec, plan, program) | {"cache": cache_enabled(cache)}


def place_for(
    n: int,
    topology: str | None,
    mesh: Any,
    mesh_axes: tuple[tuple[str, int], ...],
    runs: int | None,
    payload: Callable[[], dict[str, Any]],
) -> Place:
    """Where a request's programs compile: any program's (a step's, serving's).

    ``n`` devices laid out as ``mesh_axes`` (``mesh`` the request's own, a
    concrete ``Mesh`` or not) for ``topology``; ``payload()`` is the child's
    request, raising an :class:`~nnx_introspect._typing.ArgumentError` when
    the request cannot be named for a child.

    With ``runs``, on this process's devices (a concrete ``mesh``'s, or its
    first ones), where the programs then run. A named topology compiles in a
    child process (its compiler started in a controlled environment, its
    memory not this process's), or here when the request cannot be named;
    otherwise on a concrete ``mesh``'s own devices, on this process's first
    devices, or in a child process with enough virtual CPU devices.
    """
    if runs is not None:
        here = mesh if isinstance(mesh, Mesh) else present_mesh(mesh_axes)
        return Place("this process", here, "the present devices'")
    if topology is not None:
        try:
            request = payload()
        except ArgumentError as unnamed:
            # Unnamed: compile here (XLA:GPU only where JAX started with
            # JAX_PLATFORMS=cpu), or say which argument kept it from the child.
            target_mesh, order = topology_mesh_here(topology, mesh_axes, unnamed)
            return Place("this process", target_mesh, order)
        return Place(f"a child process ({topology})", payload=request, devices=n)
    if isinstance(mesh, Mesh):
        return Place("this process", mesh, "the mesh's")
    if n <= jax.device_count():
        return Place("this process", present_mesh(mesh_axes))
    where = f"a child process with {n} virtual CPU devices"
    return Place(where, payload=payload(), devices=n)


def present_mesh(mesh_axes: tuple[tuple[str, int], ...]) -> Mesh:
    """A mesh of this process's first devices, laid out as ``mesh_axes``."""
    sizes = [s for _, s in mesh_axes]
    devices = np.array(jax.devices()[: math.prod(sizes)]).reshape(sizes)
    return Mesh(devices, tuple(a for a, _ in mesh_axes))


def topology_mesh_here(
    topology: str,
    mesh_axes: tuple[tuple[str, int], ...],
    unnamed: ArgumentError,
) -> tuple[Mesh, str]:
    """The topology's mesh here, for a program (a step, serving) no child can rebuild.

    The compiler's own log (a CUDA plugin that finds no driver logs a
    traceback) is kept off stderr; when the devices cannot be made here, the
    error names the argument that kept the step from the child process
    (``unnamed``'s), with both reasons, and what to pass instead.
    """
    failed: ArgumentError | None = None
    with native_stderr_captured(), python_log_dropped("jax._src.xla_bridge"):
        try:
            return topology_mesh(topology, mesh_axes)
        except ArgumentError as error:
            failed = error
    raise ArgumentError(
        unnamed.argument,
        f"{str(unnamed).rstrip('.')}. It cannot compile in this process either: "
        f"{failed}",
    ) from None


def child_why(n: int, topology: str | None, what: str = "step") -> str:
    """Why a compile of ``n`` devices (or for ``topology``) runs in a child.

    Raises:
        ArgumentError: If the mesh needs more virtual CPU devices than a child
            may use (``argument`` ``"mesh"``).
    """
    if topology is None:
        present = jax.device_count()
        why = (
            f"the mesh needs {n} devices and this process has {present}, so the "
            f"{what} compiles in a child process with virtual CPU devices, which "
            "rebuilds everything from names"
        )
    else:
        why = (
            f"`topology` {topology!r} compiles in a child process (its compiler "
            "needs a controlled environment and its memory stays out of this "
            "process), which rebuilds everything from names"
        )
    if topology is None and n > MAX_CHILD_DEVICES:
        raise ArgumentError(
            "mesh",
            f"`mesh` has {n} devices: more than the {MAX_CHILD_DEVICES} virtual CPU "
            f"devices a child compile may use ({why}). Use a smaller mesh, or a "
            "TPU or GPU `topology` (XLA:TPU and XLA:GPU compile for any size here).",
        )
    return why


def _leaf_json(leaf: LeafShard) -> list[Any]:
    return [leaf.path, leaf.kind, list(leaf.shape), leaf.dtype, spec_json(leaf.spec)]


def _planned(data: Mapping[str, Any], key: str, n: int) -> tuple[LeafShard, ...]:
    return tuple(
        LeafShard(
            path=str(path),
            kind=str(kind),
            shape=tuple(int(d) for d in shape),
            dtype=str(dtype),
            spec=spec_from_json(spec),
            shard_shape=None,
            global_bytes=0,
            bytes_per_device=0,
            source="the parent's plan",
            num_devices=n,
        )
        for path, kind, shape, dtype, spec in data[key]
    )


def _check_same_model(model: Any, leaves: tuple[LeafShard, ...], target: str) -> None:
    """The rebuilt model has the planned leaves exactly; ValueError otherwise."""
    built = {r.path_str: (tuple(r.shape), str(r.dtype)) for r in inventory(model)}
    planned = {leaf.path: (leaf.shape, leaf.dtype) for leaf in leaves}
    if built != planned:
        differ = sorted(set(built.items()) ^ set(planned.items()))[:3]
        raise ArgumentError(
            "target",
            f"`target` {target!r} rebuilt in the child process differs from the "
            f"model that was planned (first differences: {differ}); the child "
            "compiles only the plan the report shows. Make the factory "
            "deterministic.",
        )


def run_child_request(data: Mapping[str, Any]) -> XlaReadings:
    """Compile from a child request (see :func:`child_request`); XLA's readings.

    The request's ``"program"`` names the kind compiled (a request without one,
    from an older parent, is the training step's).
    """
    program = program_kind(str(data.get("program", "train")))
    model = build_target(data["target"])
    mesh_axes = tuple((str(a), int(s)) for a, s in data["mesh"])
    n = math.prod(s for _, s in mesh_axes)
    leaves = _planned(data, "leaves", n)
    lora = data.get("lora")  # the plan is of the model with its adapters
    adapted = model if lora is None else with_lora(model, as_lora(lora, model))
    _check_same_model(adapted, leaves, data["target"])
    spec = StepSpec.from_json(data, model=model)
    # the loss by the name the parent sent; rules never travel (resolved specs do)
    request = dataclasses.replace(spec.request(), loss_name=data["loss"], rules=None)
    # Only the specs are read by the compile: the plan the parent resolved.
    plan = MeshConfigReport(
        axis_names=tuple(a for a, _ in mesh_axes),
        axis_sizes=tuple(s for _, s in mesh_axes),
        num_devices=n,
        n_state_leaves=len(leaves),
        n_params=0,
        param_bytes=0,
        leaves=leaves,
        optimizer_leaves=_planned(data, "optimizer_leaves", n),
        experts=planned_expert_groups(spec.model) if request.breakdown else (),
    )
    topology = spec.topology
    trace_devices = None
    if topology is not None:
        mesh, order = topology_mesh(topology, mesh_axes)
        if request.trace_as_target:
            trace_devices = list(mesh.devices.flat)
    else:
        devices = np.array(jax.devices()[:n]).reshape([s for _, s in mesh_axes])
        mesh, order = Mesh(devices, tuple(a for a, _ in mesh_axes)), "plain"
    cache = bool(data.get("cache", False))
    readings = compile_request(
        request,
        mesh,
        plan,
        trace_devices,
        topology=topology,
        cache=cache,
        program=program,
    )
    return dataclasses.replace(readings, device_order=order)


def _child_env(n: int, topology: str | None) -> dict[str, str]:
    """The child's environment: the CPU platform only, and its device count.

    ``JAX_PLATFORMS=cpu`` keeps the CUDA plugin from looking for a GPU (it then
    makes compile-only devices for a named GPU target); a topology child needs
    one CPU device, a CPU child ``n`` virtual ones.
    """
    env = dict(os.environ)
    flags = [
        f
        for f in env.get("XLA_FLAGS", "").split()
        if not f.startswith("--xla_force_host_platform_device_count")
    ]
    count = n if topology is None else 1
    flags.append(f"--xla_force_host_platform_device_count={count}")
    env["XLA_FLAGS"] = " ".join(flags)
    env["JAX_PLATFORMS"] = "cpu"
    env["TF_CPP_MIN_LOG_LEVEL"] = env.get("TF_CPP_MIN_LOG_LEVEL", "1")
    if topology is not None and resolve_topology(topology).platform == "tpu":
        env.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
        env.setdefault(
            "TPU_ACCELERATOR_TYPE", resolve_topology(topology).accelerator_type
        )
        env.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
    paths = [p for p in sys.path if p]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


_ERRORS: dict[str, type[Exception]] = {  # an ArgumentError also sends "argument"
    "TypeError": TypeError,
    "ValueError": ValueError,
    "ImportError": ImportError,
}


def run_child_json(
    payload: dict[str, Any], n: int, module: str = "nnx_introspect._step"
) -> tuple[dict[str, Any], str]:
    """Run ``python -m module`` on ``payload``; its result's JSON and its stderr.

    The child's environment is :func:`_child_env`'s; its one JSON line is
    :func:`answer`'s. A bad-input answer is raised here as the error the child
    raised (an :class:`~nnx_introspect._typing.ArgumentError` names its
    argument); a crash or a timeout is a ``RuntimeError`` with the child's
    last stderr line.
    """
    key = None
    if cache_enabled(bool(payload.get("cache"))):
        key = answer_key(module, payload, n)
        found = load_answer(key)
        if found is not None:  # the same request answered before: no child
            return found, ""
    topology = payload.get("topology")
    where = f"topology {topology!r}"
    if topology is None:
        where = plural(n, "virtual CPU device")
    try:
        done = subprocess.run(
            [sys.executable, "-m", module],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            env=_child_env(n, topology),
            timeout=child_timeout(),
            check=False,
        )
    except subprocess.TimeoutExpired:
        fix = (
            "Try a smaller mesh or a TPU or GPU `topology`."
            if topology is None
            else "Set NNX_INTROSPECT_CHILD_TIMEOUT=SECONDS to wait longer (a large "
            "model's compile on a busy machine can take that long), or compile "
            "fewer layers."
        )
        raise RuntimeError(
            f"The child compile on {where} took more than {child_timeout():.0f} s "
            f"and was stopped. {fix}"
        ) from None
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        raise RuntimeError(_ended(where, done.returncode, done.stderr)) from None
    if "error" in answer:
        if "argument" in answer:  # a bad argument found in the child
            raise ArgumentError(answer["argument"], answer["message"])
        raise _ERRORS.get(answer["error"], RuntimeError)(answer["message"])
    if key is not None:
        store_answer(key, answer["result"])
    return answer["result"], done.stderr


def _ended(where: str, code: int, stderr: str) -> str:
    """How a child that gave no answer ended, and what its stderr says went wrong.

    A child stopped by a signal (a negative ``code``) names the signal and
    quotes only an error line (``_SAID``'s kinds): whatever else it wrote
    last is not why it was stopped.

    Example:
        >>> _ended("topology 'h100-8'", -15, "I0000 ... Could not find cuda drivers")
        "The child compile on topology 'h100-8' was stopped by signal SIGTERM (15)"
        >>> _ended("2 virtual CPU devices", 1, "ValueError: bad")[-37:]
        'failed (exit code 1): ValueError: bad'
    """
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "a signal"
        said = f"The child compile on {where} was stopped by signal {name} ({-code})"
        if name == "SIGKILL":
            said += " (as the system's out-of-memory killer stops a process)"
        cause = _said(stderr, errors_only=True)
        return f"{said}: {cause[0][:500]}" if cause else said
    cause = _said(stderr) or ["no output"]
    return f"The child compile on {where} failed (exit code {code}): {cause[0][:500]}"


def _said(stderr: str, errors_only: bool = False) -> list[str]:
    """What a crashed child's stderr says went wrong: one line (see ``_SAID``).

    Its last line when no line is an error's (``errors_only``: none), never
    a log line of the libraries' start-up (``_NOISE``).

    Example:
        >>> _said(chr(10).join(["Traceback...", "ValueError: bad", "  <frozen>"]))
        ['ValueError: bad']
        >>> _said("I0000 00:00:17.1 5075 cudart_stub.cc:31] Could not find cuda")
        []
    """
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    lines = [line for line in lines if not _NOISE.search(line)]
    for kind in _SAID:
        found = [line for line in lines if kind.search(line)]
        if found:
            return found[-1:]
    return [] if errors_only else lines[-1:]


def child_timeout() -> float:
    """Seconds a child compile may take: ``NNX_INTROSPECT_CHILD_TIMEOUT`` or 900.

    Raises:
        ValueError: If the variable is set to something other than a positive
            number of seconds.

    Example:
        >>> import os
        >>> os.environ["NNX_INTROSPECT_CHILD_TIMEOUT"] = "3600"
        >>> child_timeout()
        3600.0
        >>> del os.environ["NNX_INTROSPECT_CHILD_TIMEOUT"]
    """
    text = os.environ.get("NNX_INTROSPECT_CHILD_TIMEOUT", "").strip()
    if not text:
        return CHILD_TIMEOUT_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(
            f"NNX_INTROSPECT_CHILD_TIMEOUT must be a positive number of seconds "
            f"(how long a child compile may take), got {text!r}. Unset it for "
            f"the default, {CHILD_TIMEOUT_SECONDS:.0f} s."
        )
    return seconds


def run_child(payload: dict[str, Any], n: int) -> XlaReadings:
    """A training-step child compile (:func:`child_request`'s); XLA's readings."""
    data, stderr = run_child_json(payload, n)
    result = XlaReadings.from_json_data(data)
    # The child's own native lines (plugin messages on import) and the
    # compiler's log: kept for `debug=True`, never written to this stderr.
    log = "".join(part for part in (stderr, result.compiler_log) if part)
    return dataclasses.replace(result, compiler_log=log)


def answer(handle: Callable[[Mapping[str, Any]], dict[str, Any]]) -> int:
    """Serve one request from stdin with ``handle``; the exit code.

    One JSON line on stdout: ``{"result": handle(request)}``, or the bad
    input's error (its class's name, the message and, for an
    :class:`~nnx_introspect._typing.ArgumentError`, the argument), which
    :func:`run_child_json` raises again in the parent. Anything else is a
    crash: a traceback on stderr and exit code 1.
    """
    request = json.loads(sys.stdin.read())
    reply: dict[str, Any]
    try:
        reply = {"result": handle(request)}
    except TargetError as error:
        message = f"`target`: {error}"
        reply = {"error": "ValueError", "argument": "target", "message": message}
    except ArgumentError as error:  # a ValueError that names its argument
        reply = {
            "error": "ValueError",
            "argument": error.argument,
            "message": str(error),
        }
    except (TypeError, ValueError, ImportError) as error:
        # By the base class the parent re-raises: JAX's TypeError subclasses
        # (TracerArrayConversionError...) stay TypeErrors, never RuntimeErrors.
        kind = next(k for k in _ERRORS if isinstance(error, _ERRORS[k]))
        reply = {"error": kind, "message": str(error)}
    sys.stdout.write(json.dumps(reply) + "\n")
    return 0


def main() -> int:
    """Serve one training-step request from stdin; the exit code."""
    return answer(lambda request: run_child_request(request).json_data())

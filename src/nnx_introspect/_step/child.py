"""The child-process compile: its JSON request and answer, starting and serving it.

The child runs as ``python -m nnx_introspect._step`` (``_step/__main__.py`` calls
:func:`main`) with ``--xla_force_host_platform_device_count=N`` in ``XLA_FLAGS``:
it reads one JSON request on stdin (the target and loss by
``"package.module:name"``, the mesh, batch shapes, specs, optimizer name and
every leaf's planned spec, never rules), compiles the step (on virtual CPU
devices, or on a named TPU or GPU topology's compile-only devices) and writes
one JSON line on stdout:
``{"result": {...numbers...}}`` or, for bad input,
``{"error": "ValueError", "message": "..."}``. Anything else is a crash: a
traceback on stderr and exit code 1.
"""

import json
import math
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from nnx_introspect._accelerators.topology import resolve_topology
from nnx_introspect._inventory import inventory
from nnx_introspect._mesh import (
    OPTIMIZER_NAMES,
    LeafShard,
    MeshConfigReport,
    optimizer_from_name,
)
from nnx_introspect._render.formats import spec_from_json, spec_json
from nnx_introspect._step.compile import _compile
from nnx_introspect._step.inputs import LOSSES, _Request, importable_name
from nnx_introspect._targets import TargetError, build_target, resolve_factory
from nnx_introspect._xla.toolchain import topology_mesh

__all__ = [
    "MAX_CHILD_DEVICES",
]

MAX_CHILD_DEVICES = 2048
"""The most virtual CPU devices a child compile may use (see the benchmarks)."""

CHILD_TIMEOUT_SECONDS = 900.0
"""How long a child compile may take before it is stopped."""


def _child_request(
    request: _Request, n: int, plan: MeshConfigReport, topology: str | None = None
) -> dict[str, Any]:
    """The JSON a child needs; ValueError for what cannot be named.

    The child compiles exactly ``plan``'s specs: every leaf's path, shape,
    dtype and resolved spec travels, never the rules that gave them (a
    compiled regular expression's flags, a rules file, metadata read under
    other versions would all be resolved again, perhaps differently).
    """
    if topology is None:
        present = jax.device_count()
        why = (
            f"the mesh needs {n} devices and this process has {present}, so the "
            "step compiles in a child process with virtual CPU devices, which "
            "rebuilds everything from names"
        )
    else:
        why = (
            f"`topology` {topology!r} compiles in a child process (its compiler "
            "needs a controlled environment and its memory stays out of this "
            "process), which rebuilds everything from names"
        )
    if topology is None and n > MAX_CHILD_DEVICES:
        raise ValueError(
            f"`mesh` has {n} devices: more than the {MAX_CHILD_DEVICES} virtual CPU "
            f"devices a child compile may use ({why}). Use a smaller mesh, or a "
            "TPU or GPU `topology` (XLA:TPU and XLA:GPU compile for any size here)."
        )
    if request.target_name is None:
        raise ValueError(
            f"`target` must be passed as 'package.module:factory' (or a factory "
            f"importable by that name), not a module object or a lambda: {why}."
        )
    loss: Any = request.loss
    if callable(loss):
        loss = importable_name(loss)
        if loss is None:
            raise ValueError(
                "`loss` must be 'mean', 'lm', None or a function importable as "
                f"'package.module:function' (not a lambda or closure): {why}."
            )
    if request.tx is not None and request.optimizer_name is None:
        raise ValueError(
            f"`optimizer` must be a name, one of {list(OPTIMIZER_NAMES)}, not an "
            f"optax object: {why}."
        )
    return {
        "target": request.target_name,
        "topology": topology,
        "mesh": [list(axis) for axis in request.mesh_axes],
        "leaves": [_leaf_json(leaf) for leaf in plan.leaves],
        "optimizer_leaves": [_leaf_json(leaf) for leaf in plan.optimizer_leaves],
        "batch": [[list(b.shape), jnp.dtype(b.dtype).name] for b in request.batch],
        "batch_specs": [spec_json(s) for s in request.batch_specs],
        "loss": loss,
        "optimizer": request.optimizer_name,
        "logical_rules": _json_logical_rules(request.logical_rules),
        "trace_as_target": request.trace_as_target,
        "breakdown": request.breakdown,
    }


def _leaf_json(leaf: LeafShard) -> list[Any]:
    return [leaf.path, leaf.kind, list(leaf.shape), leaf.dtype, spec_json(leaf.spec)]


def _json_logical_rules(rules: Any) -> Any:
    """Logical rules (name to mesh axes) for the model's own activation constraints."""
    if rules is None:
        return None
    pairs = list(rules.items()) if isinstance(rules, Mapping) else list(rules)
    out = [
        [key, list(value) if isinstance(value, tuple | list) else value]
        for key, value in pairs
    ]
    try:
        json.dumps(out)
    except TypeError:
        raise ValueError(
            "`logical_rules` must hold only strings, None and tuples of strings "
            "for a child compile."
        ) from None
    return out


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
        raise ValueError(
            f"`target` {target!r} rebuilt in the child process differs from the "
            f"model that was planned (first differences: {differ}); the child "
            "compiles only the plan the report shows. Make the factory "
            "deterministic."
        )


def run_child_request(data: Mapping[str, Any]) -> dict[str, Any]:
    """Compile from a child request (see :func:`_child_request`); plain numbers."""
    model = build_target(data["target"])
    mesh_axes = tuple((str(a), int(s)) for a, s in data["mesh"])
    n = math.prod(s for _, s in mesh_axes)
    leaves = _planned(data, "leaves", n)
    _check_same_model(model, leaves, data["target"])
    logical = data["logical_rules"]
    if logical is not None:
        logical = [(k, tuple(v) if isinstance(v, list) else v) for k, v in logical]
    loss: Any = data["loss"]
    if loss is not None and loss not in LOSSES:
        loss = resolve_factory(loss)
    tx = optimizer_from_name(data["optimizer"]) if data["optimizer"] else None
    request = _Request(
        model=model,
        target_name=data["target"],
        mesh_axes=mesh_axes,
        batch=tuple(
            jax.ShapeDtypeStruct(tuple(shape), jnp.dtype(dtype))
            for shape, dtype in data["batch"]
        ),
        batch_specs=tuple(spec_from_json(s) for s in data["batch_specs"]),
        loss=loss,
        loss_name=data["loss"],
        tx=tx,
        optimizer_name=data["optimizer"],
        rules=None,
        logical_rules=logical,
        trace_as_target=bool(data.get("trace_as_target", True)),
        breakdown=bool(data.get("breakdown", False)),
    )
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
    )
    topology = data.get("topology")
    trace_devices = None
    if topology is not None:
        mesh, order = topology_mesh(topology, mesh_axes)
        if request.trace_as_target:
            trace_devices = list(mesh.devices.flat)
    else:
        devices = np.array(jax.devices()[:n]).reshape([s for _, s in mesh_axes])
        mesh, order = Mesh(devices, tuple(a for a, _ in mesh_axes)), "plain"
    return _compile(request, mesh, plan, trace_devices) | {"device_order": order}


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


_ERRORS: dict[str, type[Exception]] = {
    "TypeError": TypeError,
    "ValueError": ValueError,
    "ImportError": ImportError,
}


def _run_child(payload: dict[str, Any], n: int) -> dict[str, Any]:
    topology = payload.get("topology")
    where = f"{n} virtual CPU devices" if topology is None else f"topology {topology!r}"
    try:
        done = subprocess.run(
            [sys.executable, "-m", "nnx_introspect._step"],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            env=_child_env(n, topology),
            timeout=CHILD_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(
            f"The child compile on {where} took more than "
            f"{CHILD_TIMEOUT_SECONDS:.0f} s and was stopped. Try a smaller mesh or "
            "a TPU or GPU `topology`."
        ) from None
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(
            f"The child compile on {where} failed (exit code "
            f"{done.returncode}): {tail[0][:500]}"
        ) from None
    if "error" in answer:
        raise _ERRORS.get(answer["error"], RuntimeError)(answer["message"])
    result: dict[str, Any] = answer["result"]
    # The child's own native lines (plugin messages on import) and the
    # compiler's log: kept for `debug=True`, never written to this stderr.
    log = "".join(part for part in (done.stderr, result.get("compiler_log")) if part)
    result["compiler_log"] = log
    return result


def main() -> int:
    """Serve one request from stdin; the exit code."""
    request = json.loads(sys.stdin.read())
    answer: dict[str, Any]
    try:
        answer = {"result": run_child_request(request)}
    except TargetError as error:
        answer = {"error": "ValueError", "message": f"`target`: {error}"}
    except (TypeError, ValueError, ImportError) as error:
        # By the base class the parent re-raises: JAX's TypeError subclasses
        # (TracerArrayConversionError...) stay TypeErrors, never RuntimeErrors.
        kind = next(k for k in _ERRORS if isinstance(error, _ERRORS[k]))
        answer = {"error": kind, "message": str(error)}
    sys.stdout.write(json.dumps(answer) + "\n")
    return 0

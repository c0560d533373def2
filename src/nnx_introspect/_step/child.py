"""The child-process compile: its JSON request and answer, starting and serving it.

The child runs as ``python -m nnx_introspect._step`` (``_step/__main__.py`` calls
:func:`main`) with ``--xla_force_host_platform_device_count=N`` in ``XLA_FLAGS``:
it reads one JSON request on stdin (the target and loss by
``"package.module:name"``, the mesh, batch shapes, specs, optimizer name and
rules), compiles the step and writes one JSON line on stdout:
``{"result": {...numbers...}}`` or, for bad input,
``{"error": "ValueError", "message": "..."}``. Anything else is a crash: a
traceback on stderr and exit code 1.
"""

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from nnx_introspect._mesh import (
    OPTIMIZER_NAMES,
    mesh_config_report,
    optimizer_from_name,
)
from nnx_introspect._step.compile import _compile
from nnx_introspect._step.formats import _spec_from_json, _spec_json
from nnx_introspect._step.inputs import LOSSES, _importable_name, _Request
from nnx_introspect._targets import TargetError, build_target, resolve_factory

MAX_CHILD_DEVICES = 2048
"""The most virtual CPU devices a child compile may use (see the benchmarks)."""

CHILD_TIMEOUT_SECONDS = 900.0
"""How long a child compile may take before it is stopped."""


def _child_request(request: _Request, n: int) -> dict[str, Any]:
    """The JSON a child needs; ValueError for what cannot be named."""
    present = jax.device_count()
    why = (
        f"the mesh needs {n} devices and this process has {present}, so the "
        "step compiles in a child process with virtual CPU devices, which "
        "rebuilds everything from names"
    )
    if n > MAX_CHILD_DEVICES:
        raise ValueError(
            f"`mesh` has {n} devices: more than the {MAX_CHILD_DEVICES} virtual CPU "
            f"devices a child compile may use ({why}). Use a smaller mesh, or a "
            "TPU `topology` (XLA:TPU compiles for any slice size here)."
        )
    if request.target_name is None:
        raise ValueError(
            f"`target` must be passed as 'package.module:factory' (or a factory "
            f"importable by that name), not a module object or a lambda: {why}."
        )
    loss: Any = request.loss
    if callable(loss):
        loss = _importable_name(loss)
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
    rules = _json_rules(request.rules, "rules")
    return {
        "target": request.target_name,
        "mesh": [list(axis) for axis in request.mesh_axes],
        "batch": [[list(b.shape), jnp.dtype(b.dtype).name] for b in request.batch],
        "batch_specs": [_spec_json(s) for s in request.batch_specs],
        "loss": loss,
        "optimizer": request.optimizer_name,
        "rules": rules,
        "logical_rules": _json_rules(request.logical_rules, "logical_rules"),
    }


def _json_rules(rules: Any, name: str) -> Any:
    if rules is None:
        return None
    pairs = list(rules.items()) if isinstance(rules, Mapping) else list(rules)
    out = []
    for key, value in pairs:
        if isinstance(key, re.Pattern):
            key = key.pattern
        if isinstance(value, PartitionSpec):
            value = _spec_json(value)
        elif isinstance(value, tuple | list):
            value = [list(e) if isinstance(e, tuple | list) else e for e in value]
        out.append([key, value])
    try:
        json.dumps(out)
    except TypeError:
        raise ValueError(
            f"`{name}` must hold only strings, None and PartitionSpecs for a child "
            "compile."
        ) from None
    return out


def run_child_request(data: Mapping[str, Any]) -> dict[str, Any]:
    """Compile from a child request (see :func:`_child_request`); plain numbers."""
    model = build_target(data["target"])
    mesh_axes = tuple((str(a), int(s)) for a, s in data["mesh"])
    rules = data["rules"]
    if rules is not None:
        rules = [
            (p, _spec_from_json(s) if isinstance(s, list) else s) for p, s in rules
        ]
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
        batch_specs=tuple(_spec_from_json(s) for s in data["batch_specs"]),
        loss=loss,
        loss_name=data["loss"],
        tx=tx,
        optimizer_name=data["optimizer"],
        rules=rules,
        logical_rules=logical,
    )
    plan = mesh_config_report(
        model, dict(mesh_axes), rules=rules, logical_rules=logical, optimizer=tx
    )
    n = request.num_devices
    devices = np.array(jax.devices()[:n]).reshape([s for _, s in mesh_axes])
    mesh = Mesh(devices, tuple(a for a, _ in mesh_axes))
    return _compile(request, mesh, plan)


def _child_env(n: int) -> dict[str, str]:
    env = dict(os.environ)
    flags = [
        f
        for f in env.get("XLA_FLAGS", "").split()
        if not f.startswith("--xla_force_host_platform_device_count")
    ]
    flags.append(f"--xla_force_host_platform_device_count={n}")
    env["XLA_FLAGS"] = " ".join(flags)
    env["JAX_PLATFORMS"] = "cpu"
    paths = [p for p in sys.path if p]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def _run_child(payload: dict[str, Any], n: int) -> dict[str, Any]:
    try:
        done = subprocess.run(
            [sys.executable, "-m", "nnx_introspect._step"],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            env=_child_env(n),
            timeout=CHILD_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(
            f"The child compile on {n} virtual CPU devices took more than "
            f"{CHILD_TIMEOUT_SECONDS:.0f} s and was stopped. Try a smaller mesh or "
            "a TPU `topology`."
        ) from None
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(
            f"The child compile on {n} virtual CPU devices failed (exit code "
            f"{done.returncode}): {tail[0][:500]}"
        ) from None
    if "error" in answer:
        kind = {"TypeError": TypeError, "ValueError": ValueError}.get(
            answer["error"], RuntimeError
        )
        raise kind(answer["message"])
    result: dict[str, Any] = answer["result"]
    return result


def main() -> int:
    """Serve one request from stdin; the exit code."""
    request = json.loads(sys.stdin.read())
    answer: dict[str, Any]
    try:
        answer = {"result": run_child_request(request)}
    except TargetError as error:
        answer = {"error": "ValueError", "message": f"`target`: {error}"}
    except (TypeError, ValueError) as error:
        answer = {"error": type(error).__name__, "message": str(error)}
    sys.stdout.write(json.dumps(answer) + "\n")
    return 0

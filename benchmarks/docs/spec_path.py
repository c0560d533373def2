"""Follow a step's request from ``measure_step`` and count files re-entered.

Issue 29's measure: "following the spec from ``measure_step`` through the calls
that pass it on: files re-entered after being left". This script runs one
``measure_step`` with a profile hook and records, in call order, the source
file of every call inside ``nnx_introspect`` that receives the request as an
argument other than ``self``: the :class:`StepSpec`, the compile's
``Request`` (or a copy of it), or the child process's JSON request (a dict with
``"leaves"``). Attribute reads on the spec (``spec.num_devices``) are not calls
that pass it on and are not counted.

The child process's side is traced too: the step's mesh needs more devices
than this process says it has (``jax.device_count`` answers 1 during the run),
so ``measure_step`` writes the child's JSON request, and ``run_child`` is
replaced by the child's own ``run_child_request`` on that JSON, run here.

The sequence, with consecutive calls in one file merged, is printed; a
*re-entry* is a file met again after the path went on to another one.

Run::

    XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu \\
        PYTHONPATH=src python benchmarks/docs/spec_path.py
"""

import contextlib
import json
import os
import sys
from collections import Counter
from types import FrameType
from typing import Any
from unittest import mock

import jax
import jax.numpy as jnp
import optax  # noqa: F401 - imported before the trace starts

import nnx_introspect
from nnx_introspect._step import child, measure
from nnx_introspect._step.inputs import Request
from nnx_introspect._step.spec import StepSpec

TARGET = "nnx_introspect.examples:llama_tiny"
ROOT = os.path.dirname(nnx_introspect.__file__)


def _carries(value: Any) -> bool:
    if isinstance(value, StepSpec | Request):
        return True
    return isinstance(value, dict) and "leaves" in value and "target" in value


def trace(in_child: bool) -> list[str]:
    """The files of the calls that receive the request, in call order.

    ``in_child``: the compile goes the child process's way (traced here).
    """
    files: list[str] = []

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        if not code.co_filename.startswith(ROOT):
            return
        count = code.co_argcount + code.co_kwonlyargcount
        names = code.co_varnames[:count]
        if names and names[0] in ("self", "cls"):
            names = names[1:]
        if any(_carries(frame.f_locals.get(name)) for name in names):
            files.append(os.path.relpath(code.co_filename, ROOT))

    def child_here(payload: dict[str, Any], n: int) -> Any:
        return child.run_child_request(json.loads(json.dumps(payload)))

    spec = StepSpec(
        TARGET,
        {"data": 2, "model": 2},
        jax.ShapeDtypeStruct((4, 16), jnp.int32),
        loss="lm",
        optimizer="adamw",
        breakdown=True,
    )
    with contextlib.ExitStack() as stack:
        if in_child:  # the step "needs" a child process, run here
            stack.enter_context(mock.patch.object(jax, "device_count", lambda: 1))
            stack.enter_context(mock.patch.object(measure, "run_child", child_here))
        sys.setprofile(hook)
        try:
            measure.measure_step(spec, cache=False)
        finally:
            sys.setprofile(None)
    return files


def main() -> None:
    for in_child, where in ((False, "this process"), (True, "a child process")):
        files = trace(in_child)
        path = [f for i, f in enumerate(files) if i == 0 or files[i - 1] != f]
        again = Counter(path) - Counter(set(path))
        print(f"compiled in {where}:")
        print("  " + " -> ".join(path))
        print(f"  files entered: {len(set(path))}")
        print(f"  re-entries: {sum(again.values())} {dict(again.most_common())}")


if __name__ == "__main__":
    main()

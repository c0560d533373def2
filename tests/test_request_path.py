"""The request's path through the library has a ceiling, like the files' sizes.

Each program is one pipeline (docs/explanation.md, "Programs, not a step"):
spec -> plan -> compile-or-recall -> read -> assemble. This test follows the
request from each public entry point (:func:`measure_step`,
:func:`measure_serve`, :func:`measure_rl`) with a profile hook and records, in
call order, the source file of every call inside ``nnx_introspect`` that
receives the request as an argument (other than ``self``): the spec, the
step's compile ``Request``, or the child process's JSON request. Attribute
reads (``spec.num_devices``) are not calls that pass it on.

With consecutive calls in one file merged, the path's *stops* are its entries
and its *returns* the entries of a file the path had already left. A path
that goes back and forth between files is a request whose stages are not
where the explanation says they are: the ceiling (12 stops, 4 returns, issue
53) keeps it so. The mixture-of-experts models are followed too: their
expert groups are read once, where the plan is made, and travel in the
request.
"""

import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import jax
import jax.numpy as jnp
import pytest

import nnx_introspect
from nnx_introspect._serve.api import measure_serve
from nnx_introspect._serve.spec import ServeSpec
from nnx_introspect._step.inputs import Request
from nnx_introspect._step.measure import measure_step
from nnx_introspect._step.spec import StepSpec

ROOT = os.path.dirname(nnx_introspect.__file__)
MAX_STOPS = 12
MAX_RETURNS = 4
CARRIERS: tuple[type, ...] = (StepSpec, Request, ServeSpec)


def _carries(value: Any, carriers: tuple[type, ...] = CARRIERS) -> bool:
    if isinstance(value, carriers):
        return True
    return isinstance(value, dict) and "target" in value and "leaves" in value


@contextmanager
def _followed(
    files: list[str], carriers: tuple[type, ...] = CARRIERS
) -> Iterator[None]:
    """Record the file of each call handed the request (one of ``carriers``)."""

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        if not code.co_filename.startswith(ROOT):
            return
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        if names and names[0] in ("self", "cls"):
            names = names[1:]
        if any(_carries(frame.f_locals.get(name), carriers) for name in names):
            files.append(os.path.relpath(code.co_filename, ROOT))

    previous = sys.getprofile()
    sys.setprofile(hook)
    try:
        yield
    finally:
        sys.setprofile(previous)


def path_of(run: Callable[[], Any]) -> tuple[list[str], int]:
    """The merged path of files ``run`` passes the request through, and its returns."""
    files: list[str] = []
    with _followed(files):
        run()
    path = [f for i, f in enumerate(files) if i == 0 or files[i - 1] != f]
    again = Counter(path) - Counter(set(path))
    return path, sum(again.values())


def test_the_path_counts_a_return_as_a_file_met_again() -> None:
    # the counting itself, on a known sequence
    files = ["a.py", "a.py", "b.py", "a.py", "c.py", "b.py"]
    path = [f for i, f in enumerate(files) if i == 0 or files[i - 1] != f]
    again = Counter(path) - Counter(set(path))
    assert path == ["a.py", "b.py", "a.py", "c.py", "b.py"]
    assert sum(again.values()) == 2


def _within_ceiling(path: list[str], returns: int) -> None:
    shown = " -> ".join(path)
    assert path, "the hook saw no call: the request types changed name"
    assert len(path) <= MAX_STOPS, f"{len(path)} stops: {shown}"
    assert returns <= MAX_RETURNS, f"{returns} returns: {shown}"


BATCH = jax.ShapeDtypeStruct((8, 16), jnp.int32)


@pytest.mark.parametrize(
    ("target", "mesh"),
    [
        ("nnx_introspect.examples:llama_tiny", {"data": 2, "model": 2}),
        ("nnx_introspect.examples:moe_tiny_sharded", "fsdp=2,ep=4,tp=1"),
    ],
)
def test_a_step_request_passes_each_stage_once(target: str, mesh: Any) -> None:
    spec = StepSpec(target, mesh, BATCH, loss="lm", optimizer="adamw", breakdown=True)
    path, returns = path_of(lambda: measure_step(spec, cache=False))
    _within_ceiling(path, returns)
    assert path[0].endswith("measure.py")


def test_a_step_request_sent_to_a_child_passes_each_stage_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The child's side, run here: the JSON request it reads is followed too."""
    from nnx_introspect._step import child

    def here(payload: dict[str, Any], n: int) -> Any:
        return child.run_child_request(json.loads(json.dumps(payload)))

    monkeypatch.setattr(child, "run_child", here)
    monkeypatch.setattr(jax, "device_count", lambda *a: 1)
    spec = StepSpec(
        "nnx_introspect.examples:moe_tiny_sharded",
        "fsdp=2,ep=4,tp=1",
        BATCH,
        loss="lm",
        optimizer="adamw",
    )
    path, returns = path_of(lambda: measure_step(spec, cache=False))
    _within_ceiling(path, returns)


@pytest.mark.parametrize(
    "target",
    ["nnx_introspect.examples:llama_tiny", "nnx_introspect.examples:moe_tiny_sharded"],
)
def test_a_serving_request_passes_each_stage_once(target: str) -> None:
    spec = ServeSpec(target, "tp=2", sequences=2, context=32, prompt=16)
    path, returns = path_of(lambda: measure_serve(spec, cache=False))
    _within_ceiling(path, returns)


def test_an_rl_request_passes_each_stage_once() -> None:
    """``measure_rl``: the RLSpec, and the step and serving requests it makes."""
    from nnx_introspect import RLSpec, measure_rl

    spec = RLSpec(
        "nnx_introspect.examples:llama_tiny",
        "data=2",
        batch=2,
        generations=2,
        prompt=8,
        completion=8,
    )
    rl_only = (RLSpec,)
    files: list[str] = []
    with _followed(files, rl_only):
        measure_rl(spec)
    path = [f for i, f in enumerate(files) if i == 0 or files[i - 1] != f]
    returns = sum((Counter(path) - Counter(set(path))).values())
    _within_ceiling(path, returns)
    assert path[0].endswith("_rl/api.py")

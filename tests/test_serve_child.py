"""Serving programs compiled where their devices are: a topology's in a child.

The child's readings are held against the same programs compiled in this
process (this process runs with ``JAX_PLATFORMS=cpu``, so XLA:GPU can make
its compile-only devices here too); a plain user process (no
``JAX_PLATFORMS``) compiles a GPU target through the child with nothing on
stderr.
"""

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from nnx_introspect import ArgumentError, serve_memory_report
from nnx_introspect._serve.child import serve_readings, serve_request
from nnx_introspect._serve.compile import compile_serving
from nnx_introspect._serve.spec import ServeOptions, ServeSpec
from nnx_introspect.examples import LlamaConfig, llama

# a small Llama (2 layers of width 32, 4 heads): what is held is where a program
# compiles and that both places agree, not the model's size
TINY = "tests.llama_tiny_layers:llama_small"
KW: dict[str, Any] = {"sequences": 4, "context": 32, "prompt": 8}
TIMES = {"compile_seconds", "compiled_in", "cached", "cached_compile_seconds"}


def _figures(data: dict[str, Any]) -> dict[str, Any]:
    """A program's JSON without the timings and the place it was compiled."""
    return {k: v for k, v in data.items() if k not in TIMES}


def _in_child_and_here(spec: ServeSpec) -> tuple[Any, Any]:
    served = serve_readings(spec)
    assert served.where == f"a child process ({spec.topology})"
    assert served.spec == spec  # no axis added
    return served.readings, compile_serving(spec)


@pytest.mark.parametrize("topology", ["h100-2", "v5e-4"])
def test_child_readings_equal_this_process(topology: str) -> None:
    mesh = {"tp": 2} if topology == "h100-2" else {"data": 2, "tp": 2}
    spec = ServeSpec(TINY, mesh, topology=topology, **KW)
    child, here = _in_child_and_here(spec)
    assert child.weights_bytes == here.weights_bytes > 0
    assert child.kv_cache_bytes == here.kv_cache_bytes > 0
    assert child.kv_bytes_per_token == here.kv_bytes_per_token
    for name in ("prefill", "decode"):
        a, b = child.program(name), here.program(name)
        assert a.backend == b.backend == {"h100-2": "gpu", "v5e-4": "tpu"}[topology]
        for field in ("argument_bytes", "output_bytes", "temp_bytes", "alias_bytes"):
            assert getattr(a, field) == getattr(b, field), (name, field)
        assert a.flops == b.flops


def test_unnamed_target_compiles_here_under_cpu_platform() -> None:
    """A model object cannot travel; with JAX_PLATFORMS=cpu it compiles here."""
    model = llama(LlamaConfig(vocab=64, d_model=32, n_layers=1, n_heads=4, d_ff=48))
    report = serve_memory_report(model, "tp=2", topology="h100-2", **KW)
    assert report.decode.compiled_in == "this process"
    assert report.backend == "gpu"


def test_request_names_the_functions_or_says_why() -> None:
    spec = ServeSpec(TINY, "tp=2", topology="h100-2", **KW)
    data = serve_request(spec, ("decode",))
    assert data["target"] == TINY and data["programs"] == ["decode"]
    json.dumps(data)  # all of it travels as JSON
    unnamed = ServeSpec(
        TINY,
        "tp=2",
        topology="h100-2",
        options=ServeOptions(decode=lambda m, t, p, c: m(t, p, c, None)),
        **KW,
    )
    with pytest.raises(ArgumentError, match="`decode` must be passed as") as caught:
        serve_request(unnamed)
    assert caught.value.argument == "decode"


def test_mesh_larger_than_this_process_compiles_in_a_child() -> None:
    spec = ServeSpec(TINY, {"data": 16}, sequences=16, context=16, prompt=4)
    served = serve_readings(spec, ("decode",))
    readings = served.readings
    assert served.where == "a child process with 16 virtual CPU devices"
    # 16 sequences over 16 devices: one sequence's cache a device
    # and the cache's int32 write index
    assert readings.kv_cache_bytes == 16 * readings.kv_bytes_per_token + 4


def test_bad_cache_split_is_raised_before_any_child(monkeypatch: Any) -> None:
    def no_child(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a child was started")

    monkeypatch.setattr("nnx_introspect._serve.compile.run_child_json", no_child)
    spec = ServeSpec(
        TINY, {"data": 2, "tp": 4}, sequences=3, context=16, topology="h100-8"
    )
    with pytest.raises(ArgumentError) as caught:
        serve_readings(spec)
    assert caught.value.argument in {"sequences", "mesh"}


def test_cache_hit_equals_the_first_report(tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("NNX_INTROSPECT_CACHE", "on")
    monkeypatch.setenv("NNX_INTROSPECT_CACHE_DIR", str(tmp_path))
    report = serve_memory_report(TINY, "tp=2", topology="h100-2", **KW)
    assert report.decode.compiled_in == "a child process (h100-2)"
    assert (
        "Compiled in a child process (h100-2) by XLA:GPU (jaxlib "
        in report.to_markdown()
    )
    first = report.json_data()
    assert first["prefill"]["compiled_in"] == "a child process (h100-2)"
    again = serve_memory_report(TINY, "tp=2", topology="h100-2", **KW)
    assert again.decode.cached is not None and again.prefill.cached is not None
    assert "from the cache (compiled on " in again.to_markdown()
    second = again.json_data()
    for name in ("prefill", "decode"):
        assert "cached" not in first[name] and "cached" in second[name]
        assert _figures(first[name]) == _figures(second[name])
    rest = {k: v for k, v in first.items() if k not in {"prefill", "decode"}}
    assert rest == {k: v for k, v in second.items() if k not in {"prefill", "decode"}}
    # another context is another program: a miss (its decode alone, in a child)
    longer = ServeSpec(TINY, "tp=2", topology="h100-2", sequences=4, context=64)
    readings = serve_readings(longer, ("decode",), cache=True).readings
    assert readings.program("decode").cached is None


def test_gpu_target_from_a_plain_process_is_quiet() -> None:
    """No JAX_PLATFORMS: XLA:GPU's devices are made in the child, nothing on stderr;
    what cannot travel to the child is named."""
    env = {
        k: v for k, v in os.environ.items() if k not in {"JAX_PLATFORMS", "XLA_FLAGS"}
    }
    code = (
        "import nnx_introspect as ni\n"
        f"r = ni.serve_memory_report({TINY!r}, 'tp=2', topology='h100-2', "
        "sequences=4, context=32, prompt=8)\n"
        "print(r.backend, r.decode.compiled_in, r.fits())\n"
        "try:\n"
        f"    ni.serve_memory_report({TINY!r}, 'tp=2', topology='h100-2', "
        "sequences=4, context=32, prompt=8, decode=lambda m, t, p, c: m(t, p, c))\n"
        "except ni.ArgumentError as error:\n"
        "    print(error.argument, '|', error)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report, unnamed = done.stdout.strip().splitlines()
    assert report == "gpu a child process (h100-2) True"
    assert done.stderr == ""
    # a lambda cannot travel to the child, and XLA:GPU's devices cannot be made
    # here without JAX_PLATFORMS=cpu: the argument is named, with both reasons
    argument, message = unnamed.split(" | ", 1)
    assert argument == "decode"
    assert message.startswith("`decode` must be passed as 'package.module:name'")
    assert "It cannot compile in this process either" in message
    assert "JAX_PLATFORMS=cpu" in message


class _StoppedError(Exception):
    """Raised by the spy below in place of a child's answer."""


def test_a_model_from_the_side_by_side_size_compiles_each_program_apart(
    monkeypatch: Any,
) -> None:
    started: list[tuple[str, ...]] = []

    def spy(payload: dict[str, Any], n: int, module: str) -> Any:
        started.append(tuple(payload["programs"]))
        raise _StoppedError

    monkeypatch.setattr("nnx_introspect._serve.compile.run_child_json", spy)
    spec = ServeSpec(TINY, "tp=2", topology="h100-2", **KW)
    with pytest.raises(_StoppedError):
        serve_readings(spec)
    assert started == [("prefill", "decode")]  # a small model: one child
    started.clear()
    monkeypatch.setattr(
        "nnx_introspect._serve.child.SIDE_BY_SIDE_PARAMS", spec.parameters
    )
    with pytest.raises(_StoppedError):
        serve_readings(spec)
    assert sorted(started) == [("decode",), ("prefill",)]

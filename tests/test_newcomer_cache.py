"""Issue 44's newcomer's list, item 2: a cached run says this run's time, not the first.

A report read back from the cache of compile results said "from the cache (...
31.3 s to trace and look up)" on a 4.3 s run: a child's whole answer kept its
first compile's seconds. Now ``compile_seconds`` is always this run's (the
look-up), and the first compile's time is given apart, labelled:
``compiled on <date> in 31.3 s; found in 0.0 s this run``; in JSON,
``"cached_compile_seconds"`` beside ``"compile_seconds"``.
"""

import pathlib
import subprocess
import time
from typing import Any

import jax
import jax.numpy as jnp
import pytest

from nnx_introspect import serve_memory_report, step_memory_report
from nnx_introspect._serve.report import ServeProgram
from nnx_introspect._step import StepMemory
from nnx_introspect._step.report_render import cached_date, cached_json, split_cached
from nnx_introspect._xla.cache import cached_interval

X16 = jax.ShapeDtypeStruct((16, 3), jnp.float32)
TWO_LAYER = "nnx_introspect.examples:two_layer"


@pytest.fixture
def cache_dir(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    monkeypatch.setenv("NNX_INTROSPECT_CACHE", "on")
    monkeypatch.setenv("NNX_INTROSPECT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _no_child(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a child process was started for a cached answer")


def test_a_cached_answer_gives_this_runs_time_and_the_first_apart(
    cache_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = step_memory_report(TWO_LAYER, "data=16", X16, optimizer="adamw")
    took = first.compilation.seconds  # the child's lowering and compile
    monkeypatch.setattr(subprocess, "run", _no_child)
    began = time.perf_counter()
    again = step_memory_report(TWO_LAYER, "data=16", X16, optimizer="adamw")
    spent = time.perf_counter() - began
    cached = again.compilation.cached
    assert cached is not None
    # this run's seconds: at most what the whole call took, not the first compile's
    assert 0 <= again.compilation.seconds <= spent
    assert again.compilation.seconds != took
    # the first compile's seconds, kept apart
    when, seconds = split_cached(cached)
    assert seconds == pytest.approx(took, abs=1e-3) and when[:4].isdigit()
    text = again.to_markdown()
    assert f"compiled on {cached_date(cached)}; found in " in text
    assert f" in {took:.1f} s; found in {again.compilation.seconds:.1f} s this run" in (
        text
    )
    data = again.json_data()
    assert data["compile_seconds"] == again.compilation.seconds
    assert data["cached_compile_seconds"] == pytest.approx(took, abs=1e-3)
    assert data["cached"] == when


def test_a_cached_compile_in_this_process_too(cache_dir: pathlib.Path) -> None:
    x = jax.ShapeDtypeStruct((8, 3), jnp.float32)
    first = step_memory_report(TWO_LAYER, "data=8", x)
    again = step_memory_report(TWO_LAYER, "data=8", x)
    assert again.compilation.cached is not None
    _, seconds = split_cached(again.compilation.cached)
    assert seconds == pytest.approx(first.compilation.seconds, abs=1e-3)
    assert "this run)" in str(again) and "to trace and look up" not in str(again)


def test_a_cached_serving_answer_says_both(
    cache_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    options: dict[str, Any] = {"sequences": 16, "context": 32, "prompt": 16}
    target = "tests.llama_tiny_layers:llama_small"  # 2 layers of width 32
    first = serve_memory_report(target, "data=16", **options)
    monkeypatch.setattr(subprocess, "run", _no_child)
    again = serve_memory_report(target, "data=16", **options)
    for old, new in ((first.prefill, again.prefill), (first.decode, again.decode)):
        assert new.cached is not None
        assert split_cached(new.cached)[1] == pytest.approx(
            old.compile_seconds, abs=1e-3
        )
        assert new.compile_seconds != old.compile_seconds
        assert new.compiled_text().endswith(
            f" in {old.compile_seconds:.1f} s; found in {new.compile_seconds:.1f} s "
            "this run)"
        )
        assert new.json_data()["cached_compile_seconds"] == pytest.approx(
            old.compile_seconds, abs=1e-3
        )


def test_the_interval_is_written_and_read_as_one() -> None:
    end = "2026-12-05T07:30:12+00:00"
    for seconds in (31.25, 0.0, 1234.5678):
        cached = cached_interval(end, seconds)
        assert split_cached(cached) == (end, round(seconds, 3))
        assert cached_json(cached) == {
            "cached": end,
            "cached_compile_seconds": round(seconds, 3),
        }
        program = ServeProgram("decode", 1, 1, 0, 0, StepMemory(1, 0, 0, 0), None,
                               cached=cached)  # fmt: skip
        data = program.json_data()
        assert (data["cached"], data["cached_compile_seconds"]) == (
            end,
            round(seconds, 3),
        )
    # an entry written before the interval: the date alone
    assert split_cached(end) == (end, None)
    assert cached_date(end) == "2026-12-05 07:30 UTC"
    assert cached_date(cached_interval(end, 31.25)) == "2026-12-05 07:30 UTC in 31.2 s"

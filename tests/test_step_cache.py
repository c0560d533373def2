"""The cache of compile results: a re-run reads what the first compile said.

The test run keeps the cache off (the root ``conftest.py``); these tests turn
it on, each in its own directory.
"""

import concurrent.futures
import json
import os
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from nnx_introspect import compare_meshes, max_batch, step_memory_report
from nnx_introspect._xla import cache as cache_module
from nnx_introspect._xla.cache import load_result, store_result
from nnx_introspect._xla.readings import XlaReadings
from nnx_introspect.cli.parser import build_parser as build_parser

X = jax.ShapeDtypeStruct((8, 4), jnp.float32)


def linear(rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(4, 6, rngs=rngs)


def wider(rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(4, 8, rngs=rngs)


@pytest.fixture
def cache_dir(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """The cache turned on, in a directory of this test's own."""
    monkeypatch.setenv("NNX_INTROSPECT_CACHE", "on")
    monkeypatch.setenv("NNX_INTROSPECT_CACHE_DIR", str(tmp_path))
    return tmp_path


def entries(directory: pathlib.Path) -> list[pathlib.Path]:
    return sorted((directory / "results").glob("*.json"))


def without_time(data: dict[str, Any]) -> dict[str, Any]:
    timing = ("compile_seconds", "cached", "cached_compile_seconds")
    return {k: v for k, v in data.items() if k not in timing}


def test_a_hit_is_the_first_report_but_its_time(cache_dir: pathlib.Path) -> None:
    first = step_memory_report(linear, "data=8", X, optimizer="adamw")
    assert first.compilation.cached is None
    assert len(entries(cache_dir)) == 1
    again = step_memory_report(linear, "data=8", X, optimizer="adamw")
    assert len(entries(cache_dir)) == 1  # read, not written again
    assert again.compilation.cached is not None
    stored = json.loads(entries(cache_dir)[0].read_text())
    # when the first compile ended and how long it took: an ISO 8601 interval
    took = stored["readings"]["compile_seconds"]
    assert took == first.compilation.seconds
    assert again.compilation.cached == f"PT{round(took, 3)}S/{stored['compiled_on']}"
    a, b = first.json_data(), again.json_data()
    assert "cached" not in a and b["cached"] == stored["compiled_on"]
    assert b["cached_compile_seconds"] == round(took, 3)
    at = list(a).index("compile_seconds") + 1
    assert list(b) == [*list(a)[:at], "cached", "cached_compile_seconds", *list(a)[at:]]
    assert without_time(a) == without_time(b)
    for text in (str(again), again.to_markdown(), again.to_html()):
        assert "from the cache (compiled on " in text
    for text in (str(first), first.to_markdown(), first.to_html()):
        assert "from the cache" not in text
    # the figures are XLA's, not re-derived: 4x6 kernel + 6 bias, adamw's two
    # moments of each, the step counters, one of 8 rows of x
    params = (4 * 6 + 6) * 4
    assert again.argument_bytes == 3 * params + 4 + 4 + 1 * 4 * 4


@pytest.mark.parametrize(
    ("change", "kwargs"),
    [
        ("model", {"target": wider}),
        ("batch", {"batch": jax.ShapeDtypeStruct((16, 4), jnp.float32)}),
        ("batch dtype", {"batch": jax.ShapeDtypeStruct((8, 4), jnp.bfloat16)}),
        ("mesh", {"mesh": "data=4"}),
        ("optimizer", {"optimizer": "sgd"}),
        ("loss", {"loss": None, "optimizer": None}),
        ("remat", {"remat": {"Linear": "nothing_saveable"}}),
        ("breakdown", {"breakdown": True}),
    ],
)
def test_a_changed_step_is_a_miss(
    cache_dir: pathlib.Path, change: str, kwargs: dict[str, Any]
) -> None:
    base: dict[str, Any] = {
        "target": linear, "mesh": "data=8", "batch": X, "optimizer": "adamw"
    }  # fmt: skip
    first = step_memory_report(
        base["target"], base["mesh"], base["batch"], optimizer="adamw"
    )
    assert first.compilation.cached is None
    args = base | kwargs
    changed = step_memory_report(
        args.pop("target"), args.pop("mesh"), args.pop("batch"), **args
    )
    assert changed.compilation.cached is None, change
    assert len(entries(cache_dir)) == 2, change


def test_the_budget_is_not_in_the_key(cache_dir: pathlib.Path) -> None:
    first = step_memory_report(linear, "data=8", X, max_device_bytes=100)
    again = step_memory_report(linear, "data=8", X, max_device_bytes="1MiB")
    assert again.compilation.cached is not None
    assert (first.fits(), again.fits()) == (False, True)  # judged anew
    assert first.peak_bytes == again.peak_bytes


def test_a_damaged_entry_is_a_miss(cache_dir: pathlib.Path) -> None:
    first = step_memory_report(linear, "data=8", X)
    (entry,) = entries(cache_dir)
    wrong_readings = {
        "format": 1, "key": entry.stem, "compiled_on": "2026-12-05T07:00:00+00:00",
        "readings": {"backend": "cpu", "not a field": 1},
    }  # fmt: skip
    damages = ("{not json", json.dumps({"format": 1, "key": "other"}), "",
               json.dumps(wrong_readings), "\xff\xfe")  # fmt: skip
    for damage in damages:
        entry.write_text(damage)
        again = step_memory_report(linear, "data=8", X)
        assert again.compilation.cached is None, damage
        assert without_time(again.json_data()) == without_time(first.json_data())
    assert step_memory_report(linear, "data=8", X).compilation.cached is not None


def test_off_by_the_environment_or_the_argument(
    cache_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    step_memory_report(linear, "data=8", X, cache=False)
    assert entries(cache_dir) == []
    monkeypatch.setenv("NNX_INTROSPECT_CACHE", "off")
    step_memory_report(linear, "data=8", X)
    assert entries(cache_dir) == []
    monkeypatch.setenv("NNX_INTROSPECT_CACHE", "on")
    step_memory_report(linear, "data=8", X)
    assert len(entries(cache_dir)) == 1
    report = step_memory_report(linear, "data=8", X, cache=False)
    assert report.compilation.cached is None  # not read either


def test_the_default_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NNX_INTROSPECT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", "/some/where")
    assert cache_module.cache_directory() == pathlib.Path("/some/where/nnx-introspect")
    monkeypatch.delenv("XDG_CACHE_HOME")
    expected = pathlib.Path("~/.cache/nnx-introspect").expanduser()
    assert cache_module.cache_directory() == expected


def test_least_recently_used_entries_go_first(cache_dir: pathlib.Path) -> None:
    readings = XlaReadings("cpu", "cpu", 1.0, compiler_log="x" * 1000)
    store_result("k" * 64, readings)
    (probe,) = entries(cache_dir)
    size = probe.stat().st_size  # one entry's bytes, all alike
    probe.unlink()
    for n, key in enumerate(("a" * 64, "b" * 64, "c" * 64)):
        store_result(key, readings, limit=10 * size)
        os.utime(cache_dir / "results" / f"{key}.json", (1000 + n, 1000 + n))
    hit = load_result("a" * 64)  # used now: the newest
    assert hit is not None and hit.readings == readings
    store_result("d" * 64, readings, limit=3 * size)  # room for three
    kept = {p.stem[0] for p in entries(cache_dir)}
    assert kept == {"a", "c", "d"}  # b: the least recently used
    store_result("e" * 64, readings, limit=10 * size)
    assert len(entries(cache_dir)) == 4  # under the limit nothing goes


def test_an_unwritable_cache_is_skipped(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    monkeypatch.setenv("NNX_INTROSPECT_CACHE", "on")
    monkeypatch.setenv("NNX_INTROSPECT_CACHE_DIR", str(blocked))
    report = step_memory_report(linear, "data=8", X)
    assert report.compilation.cached is None


def test_searches_read_each_compile(cache_dir: pathlib.Path) -> None:
    first = max_batch(linear, "data=8", X, max_device_bytes="2KiB", hi=64)
    assert first.compiles >= 2 and first.report is not None
    assert first.report.compilation.cached is None
    again = max_batch(linear, "data=8", X, max_device_bytes="2KiB", hi=64)
    assert (again.best, again.points) == (first.best, first.points)
    assert again.report is not None and again.report.compilation.cached is not None
    assert len(entries(cache_dir)) == first.compiles
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        meshes = compare_meshes(linear, ["data=8", "data=4,model=2"], X, executor=pool)
        rerun = compare_meshes(linear, ["data=8", "data=4,model=2"], X, executor=pool)
    assert all(r.report is not None for r in rerun.candidates)
    assert all(r.report.compilation.cached is not None for r in rerun.candidates)  # type: ignore[union-attr]
    assert [r.peak_bytes for r in meshes.candidates] == [
        r.peak_bytes for r in rerun.candidates
    ]


def test_no_cache_flag() -> None:
    from nnx_introspect.cli.options import option_kwargs

    parser = build_parser()
    args = parser.parse_args(
        ["step", "--mesh", "data=8", "--batch", "float32[8,4]", "--no-cache"]
    )
    assert option_kwargs(args)["cache"] is False
    args = parser.parse_args(["step", "--mesh", "data=8", "--batch", "float32[8,4]"])
    assert option_kwargs(args)["cache"] is True


def test_a_child_compile_reads_the_cache_too(cache_dir: pathlib.Path) -> None:
    """16 virtual CPU devices: the child process keys, stores and reads."""
    x = jax.ShapeDtypeStruct((16, 3), jnp.float32)
    target = "nnx_introspect.examples:two_layer"
    first = step_memory_report(target, "data=16", x, optimizer="adamw")
    assert first.compiled_in == "a child process with 16 virtual CPU devices"
    assert first.compilation.cached is None and len(entries(cache_dir)) == 1
    again = step_memory_report(target, "data=16", x, optimizer="adamw")
    assert again.compilation.cached is not None
    assert without_time(again.json_data()) == without_time(first.json_data())
    off = step_memory_report(target, "data=16", x, optimizer="adamw", cache=False)
    assert off.compilation.cached is None  # the child was told


def _report_from_depth(depth: int) -> Any:
    """The same report asked for ``depth`` frames further down the stack."""
    if depth:
        return _report_from_depth(depth - 1)
    return step_memory_report(linear, "data=8", X, optimizer="adamw")


def test_a_deeper_caller_reads_the_same_compile(cache_dir: pathlib.Path) -> None:
    # a command line and a script ask for a step from stacks of other depths;
    # the frames above the step are not the program's, so not the key's
    first = _report_from_depth(0)
    assert first.compilation.cached is None
    again = _report_from_depth(3)
    assert again.compilation.cached is not None
    assert len(entries(cache_dir)) == 1
    assert again.peak_bytes == first.peak_bytes
    # the program's own lines are still the key's: another model is a miss
    other = step_memory_report(wider, "data=8", X, optimizer="adamw")
    assert other.compilation.cached is None
    assert len(entries(cache_dir)) == 2


def test_the_key_text_names_no_caller_frames() -> None:
    from nnx_introspect._xla.cache import without_callers

    def f(x: jax.Array) -> jax.Array:
        return jnp.sin(x) * 2

    def lower(depth: int) -> tuple[str, set[tuple[str, int]]]:
        if depth:
            return lower(depth - 1)
        jax.clear_caches()  # a fresh trace, with this stack's locations
        text = jax.jit(f).lower(jnp.ones(3)).as_text(debug_info=True)
        import traceback

        stack = {(s.filename, s.lineno or 0) for s in traceback.extract_stack()}
        return text, stack

    shallow, deep = lower(0), lower(4)
    assert shallow[0] != deep[0]  # the raw text names the deeper stack
    assert without_callers(*shallow) == without_callers(*deep)
    # f's own lines stay: a changed program is another text
    assert f"{__file__}" in without_callers(*shallow)

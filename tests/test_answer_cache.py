"""A child's whole answer from the cache: no child started, nothing traced.

The cache keys a child's answer by its request and by the source of the
packages its names import from: an edit to the model's module is a miss.
"""

import importlib
import pathlib
import subprocess
import sys
import textwrap
from typing import Any

import jax
import jax.numpy as jnp
import pytest

from nnx_introspect import serve_memory_report, step_memory_report
from nnx_introspect._xla.cache import answer_key

X = jax.ShapeDtypeStruct((16, 3), jnp.float32)
MODEL = textwrap.dedent(
    """
    from flax import nnx

    def make(rngs):
        return nnx.Linear(3, {width}, rngs=rngs)
    """
)


@pytest.fixture
def cache_dir(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """The cache on, in a directory of this test's own."""
    monkeypatch.setenv("NNX_INTROSPECT_CACHE", "on")
    monkeypatch.setenv("NNX_INTROSPECT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _no_child(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a child process was started for a cached answer")


def test_a_cached_step_starts_no_child(
    cache_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = "nnx_introspect.examples:two_layer"
    first = step_memory_report(target, "data=16", X, optimizer="adamw")
    assert first.compilation.cached is None
    assert len(list((cache_dir / "answers").glob("*.json"))) == 1
    monkeypatch.setattr(subprocess, "run", _no_child)
    again = step_memory_report(target, "data=16", X, optimizer="adamw")
    assert again.compilation.cached is not None
    assert again.peak_bytes == first.peak_bytes
    assert again.argument_bytes == first.argument_bytes


def test_a_cached_serving_request_starts_no_child(
    cache_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = "tests.llama_tiny_layers:llama_small"  # 2 layers of width 32
    options: dict[str, Any] = {"sequences": 16, "context": 32, "prompt": 16}
    first = serve_memory_report(target, "data=16", **options)
    monkeypatch.setattr(subprocess, "run", _no_child)
    again = serve_memory_report(target, "data=16", **options)
    assert again.decode.cached is not None and again.prefill.cached is not None
    assert again.decode.peak_bytes == first.decode.peak_bytes


def test_an_edit_to_the_models_module_is_a_miss(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "edited_model_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text(MODEL.format(width=4))
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("edited_model_pkg.model")
    payload = {"target": "edited_model_pkg.model:make", "mesh": [["data", 16]]}
    before = answer_key("nnx_introspect._step", payload, 16)
    assert before == answer_key("nnx_introspect._step", payload, 16)
    (package / "model.py").write_text(MODEL.format(width=5))
    after = answer_key("nnx_introspect._step", payload, 16)
    assert after != before
    del sys.modules["edited_model_pkg.model"], sys.modules["edited_model_pkg"]


def test_the_cache_off_asks_the_child(
    cache_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = "nnx_introspect.examples:two_layer"
    step_memory_report(target, "data=16", X, optimizer="adamw")
    monkeypatch.setattr(subprocess, "run", _no_child)
    with pytest.raises(AssertionError, match="a child process was started"):
        step_memory_report(target, "data=16", X, optimizer="adamw", cache=False)

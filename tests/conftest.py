"""Shared fixtures: the model zoo every test module draws from.

Devices are configured in the repository's root ``conftest.py``, before JAX starts.
"""

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _pytest.doctest import DoctestItem
from flax import nnx

SLOW_DOCTESTS = frozenset(
    {
        "nnx_introspect._serve.size_search.max_context",
        "nnx_introspect._serve.size_search.max_sequences",
        "nnx_introspect._rl.size_search.rl_max_batch",
        "nnx_introspect._rl.layouts.compare_rl_layouts",
    }
)
"""Docstring examples marked ``slow``: each runs a whole search or comparison
(a tenth of the test run's compile time between them), and each function is
held by tests of its own in every run: ``tests/test_serve_search.py``,
``test_serve_frontier.py``, ``test_rl_search.py``, ``test_rl_layouts.py``.
(``_serve/mesh_comparison.py``'s examples compare a one-layer Llama's meshes: about ten
seconds between them, so they run every time.)"""


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects by the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark :data:`SLOW_DOCTESTS` ``slow`` (a docstring cannot carry a mark)."""
    for item in items:
        if isinstance(item, DoctestItem) and item.name in SLOW_DOCTESTS:
            item.add_marker(pytest.mark.slow)


# google-tunix (an optional test dependency) sets flax's global
# `flax_always_shard_variable` to False when its models are imported
# (tunix/utils/env_utils.py): every later test in that worker would build
# annotated variables unsharded. Each test starts from flax's own setting.
_FLAX_SHARD_VARIABLE = flax.config.flax_always_shard_variable


@pytest.fixture(autouse=True)
def _flax_config_as_flax_sets_it() -> None:
    flax.config.update("flax_always_shard_variable", _FLAX_SHARD_VARIABLE)


class BNDropoutMLP(nnx.Module):
    """Linear -> BatchNorm -> Dropout -> Linear: Param, BatchStat and RNG state."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(3, 5, rngs=rngs)
        self.bn = nnx.BatchNorm(5, rngs=rngs)
        self.drop = nnx.Dropout(0.5, rngs=rngs)
        self.l2 = nnx.Linear(5, 2, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        y: jax.Array = self.l2(self.drop(self.bn(self.l1(x))))
        return y


class Tied(nnx.Module):
    """The same Linear reachable under two attribute names."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.enc = nnx.Linear(4, 4, rngs=rngs)
        self.dec = self.enc

    def __call__(self, x: jax.Array) -> jax.Array:
        y: jax.Array = self.dec(self.enc(x))
        return y


@pytest.fixture
def linear() -> nnx.Linear:
    return nnx.Linear(4, 3, rngs=nnx.Rngs(0))


@pytest.fixture
def bn_dropout() -> BNDropoutMLP:
    return BNDropoutMLP(nnx.Rngs(0, dropout=1))


@pytest.fixture
def tied() -> Tied:
    return Tied(nnx.Rngs(0))


@pytest.fixture
def abstract_bn_dropout() -> BNDropoutMLP:
    model: BNDropoutMLP = nnx.eval_shape(lambda: BNDropoutMLP(nnx.Rngs(0, dropout=1)))
    return model


def snapshot(target: Any) -> list[tuple[Any, np.ndarray]]:
    """Every state leaf as (path, host copy), RNG keys as their key data."""
    out = []
    for path, leaf in jax.tree_util.tree_leaves_with_path(nnx.state(target)):
        if jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        out.append((path, np.asarray(leaf).copy()))
    return out


def assert_unchanged(before: list[tuple[Any, np.ndarray]], target: Any) -> None:
    after = snapshot(target)
    assert [p for p, _ in before] == [p for p, _ in after]
    for (path, a), (_, b) in zip(before, after, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape, path
        assert a.tobytes() == b.tobytes(), f"{path} changed"


@pytest.fixture
def assert_readonly() -> Any:
    """``assert_readonly(target, fn)``: call ``fn()``, then check ``target`` is bitwise unchanged."""

    def check(target: Any, fn: Any) -> Any:
        before = snapshot(target)
        result = fn()
        assert_unchanged(before, target)
        return result

    return check


@pytest.fixture
def targets_dir(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """The working directory, holding the test module's ``TARGET_MODULES``.

    ``TARGET_MODULES`` maps a module name to its source; each is written as
    ``<name>.py`` and forgotten by ``sys.modules``, so a target spec such as
    ``"<name>:factory"`` imports this test's copy.
    """
    modules: dict[str, str] = request.module.TARGET_MODULES
    for name, source in modules.items():
        (tmp_path / f"{name}.py").write_text(source)
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A compile-cache directory of the test module's own (empty at its start).

    For ``tests.shared_compiles.cache_in``: a command-line test reads back the
    programs an API test of its module compiled into it.
    """
    return tmp_path_factory.mktemp("compile-cache")


@pytest.fixture(scope="module")
def one_compile_per_program(module_cache: Path) -> Iterator[None]:
    """The compile cache on, in the module's own directory, for all its tests.

    For a module whose tests ask again for programs its other tests (or a
    search's fixture) compiled: a search's answer and the report a user asks
    for at that size are one program, compiled once. A hit is the same key:
    the same program text (callers' frames aside), devices and options, so the
    readings held against each other are still the compiler's for that text.
    A module takes it with
    ``pytestmark = pytest.mark.usefixtures("one_compile_per_program")``.
    """
    from tests.shared_compiles import cache_in

    with cache_in(module_cache):
        yield

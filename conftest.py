"""Root pytest configuration: 8 virtual CPU devices, set before JAX starts.

It lives at the repository root so that the doctests of ``src`` see the same
devices as ``tests/``.
"""

import atexit
import gc
import os
import shutil
import tempfile

import pytest
from _pytest.doctest import DoctestItem

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()

# The cache of compile results (``nnx_introspect._xla.cache``) is off for the
# test run and points at a temporary directory of this run, never at the
# user's own (~/.cache/nnx-introspect): a test sees the compile it asks for,
# and the tests that turn the cache on (tests/test_step_cache.py) give it
# their own directory. Set here, before any child process or worker starts,
# so that they inherit it.
os.environ["NNX_INTROSPECT_CACHE"] = "off"
os.environ["NNX_INTROSPECT_CACHE_DIR"] = tempfile.mkdtemp(
    prefix="nnx-introspect-test-cache-"
)

# The CUDA plugin (the gpu extra) writes "Could not find cuda drivers" lines
# from C++ to file descriptor 2 when JAX is first imported on a machine without
# a GPU; the library keeps them off its users' stderr, and the test run keeps
# them out of its log the same way (real errors still reach stderr).
from nnx_introspect._xla.native_log import native_stderr_filtered

with native_stderr_filtered():
    import jax  # noqa: F401

# the compile cache's directory above, removed when this process ends (each
# xdist worker makes and removes its own)
atexit.register(
    shutil.rmtree, os.environ["NNX_INTROSPECT_CACHE_DIR"], ignore_errors=True
)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Keep the collector off what import and collection made (JAX, flax, the tests).

    ``gc.freeze()`` moves every object alive now to a generation the collector
    never scans: they live as long as the process does, and each full
    collection after (the checkpoint tests' guard runs one per test) scans only
    what the tests made since, every test's garbage still included. About half
    of the collector's time in a worker.
    """
    gc.freeze()


_DOCTEST_CACHES: dict[str, str] = {}


@pytest.fixture(autouse=True)
def _a_modules_doctests_share_its_compiles(
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A docstring's example reads the compiles of its module's earlier examples.

    The examples show the API, not the compile (the cache's own tests turn it
    on in their own directories): the same request asked twice in one module
    (``_serve/mesh_comparison.py`` compares ``tp=4`` twice) compiles once. One cache
    directory per module, so a module's examples, run in order in one worker,
    hit the same entries on every run.
    """
    if not isinstance(request.node, DoctestItem):
        return
    module = str(request.node.path)
    if module not in _DOCTEST_CACHES:
        _DOCTEST_CACHES[module] = str(tmp_path_factory.mktemp("doctest-cache"))
    monkeypatch.setenv("NNX_INTROSPECT_CACHE", "on")
    monkeypatch.setenv("NNX_INTROSPECT_CACHE_DIR", _DOCTEST_CACHES[module])

"""The Python API writes nothing to stderr, with both compilers' plugins installed.

The GPU how-to's snippet runs in a fresh interpreter with no ``JAX_PLATFORMS``
(as a user's plain ``python`` would), for a GPU and a TPU target. With the
CUDA plugin installed on a machine without a GPU, importing JAX writes
``Could not find cuda drivers`` lines; with libtpu, starting JAX's backends
writes libtpu's probe errors. A named target needs neither in the caller (the
compile runs in a child process whose log is kept off the caller's stderr), so
the snippet's stderr must be empty.
"""

import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from nnx_introspect._xla import toolchain

ROOT = Path(__file__).resolve().parent.parent
HOWTO = ROOT / "docs" / "howto" / "step-gpu.md"


def _snippet() -> str:
    """The how-to's first Python block, as the page shows it."""
    match = re.search(r"```python\n(.*?)```", HOWTO.read_text(), re.S)
    assert match is not None, f"{HOWTO} has no python block"
    return match.group(1)


TARGET = "nnx_introspect.examples:llama_tiny_sharded"
SMALL = "tests.llama_tiny_layers:llama_small_sharded"

_CACHE = tempfile.mkdtemp(prefix="nnx-introspect-quiet-cache-")
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
"""One cache of compile results for this module's snippets: the snippet's
second run (JAX imported first) reads the first's compile when this worker ran
it, and compiles otherwise; what these tests hold is stderr, not the compile."""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("JAX_PLATFORMS", "XLA_FLAGS", "TF_CPP_MIN_LOG_LEVEL")
    } | {"NNX_INTROSPECT_CACHE": "on", "NNX_INTROSPECT_CACHE_DIR": _CACHE}
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )


@pytest.mark.skipif(
    toolchain.cuda_plugin_version() is None or toolchain.libtpu_version() is None,
    reason="needs both the gpu and the tpu extras",
)
@pytest.mark.parametrize("topology", ["h100-8", "v5e-8"])
def test_the_documented_snippet_writes_nothing_to_stderr(topology: str) -> None:
    code = _snippet()
    assert 'topology="h100-8"' in code and f'"{TARGET}"' in code
    if topology != "h100-8":  # the snippet as the page shows it is the h100-8 case
        # XLA:TPU's compile grows with the layers and the widths: 2 layers of
        # width 32 with the same annotations; what is held is stderr, the
        # same for any model
        code = code.replace(f'"{TARGET}"', f'"{SMALL}"')
    done = _run(code.replace('topology="h100-8"', f"topology={topology!r}"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Fits in "), done.stdout
    assert done.stderr == ""


@pytest.mark.skipif(
    toolchain.cuda_plugin_version() is None,
    reason="needs the gpu extra",
)
def test_jax_imported_first_writes_only_the_plugins_import_lines() -> None:
    """What ``import jax`` itself writes is the plugin's, not ours: imported
    first, the report adds not one line to it."""
    baseline = _run("import jax").stderr
    code = "import jax\n" + _snippet()
    done = _run(code)
    assert done.returncode == 0, done.stderr
    assert len(done.stderr.splitlines()) == len(baseline.splitlines())


_CPU_CALLS = {
    "step_memory_report": "f(name, 'data=8', x)",
    "compare_meshes": "f(name, ['data=8', 'data=4,model=2'], x, max_workers=1)",
    "fit_step": "f(name, 'data=8', x, max_device_bytes='1MiB', max_workers=1)",
}


@pytest.mark.skipif(
    toolchain.cuda_plugin_version() is None or toolchain.libtpu_version() is None,
    reason="needs both the gpu and the tpu extras",
)
@pytest.mark.parametrize("function", sorted(_CPU_CALLS))
def test_a_step_compiled_on_this_processs_cpu_writes_nothing(function: str) -> None:
    """No topology: the library starts JAX's backends itself (to count this
    process's devices), so the plugins' noise at that start is its to drop."""
    code = (
        "import nnx_introspect as ni\n"
        f"f = ni.{function}\n"
        "import jax, jax.numpy as jnp\n"
        "x = jax.ShapeDtypeStruct((8, 3), jnp.float32)\n"
        "name = 'nnx_introspect.examples:two_layer'\n"
        f"print({_CPU_CALLS[function]}.verdict)\n"
    )
    done = _run(code)
    assert done.returncode == 0, done.stderr
    assert "632 B per device" in done.stdout, done.stdout
    assert done.stderr == ""


def test_libtpus_probe_lines_are_noise_and_nothing_else_is() -> None:
    from nnx_introspect._xla.native_log import drop_noise

    probe = (
        "Failed to find host bounds for accelerator type: WARNING: could not "
        "determine TPU accelerator type, please set env var "
        "`TPU_ACCELERATOR_TYPE` manually, otherwise libtpu.so may not properly "
        "initialize.\n"
        "WARNING: Logging before InitGoogle() is written to STDERR\n"
        "=== Source Location Trace: ===\n"
        "learning/45eac/tfrc/runtime/libtpu_init_utils.cc:370\n"
    )
    real = "RuntimeError: Unable to initialize backend 'cpu'\n"
    assert drop_noise(probe + real) == real

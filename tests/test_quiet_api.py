"""The Python API writes nothing to stderr, with both compilers' plugins installed.

The GPU how-to's snippet runs in a fresh interpreter with no ``JAX_PLATFORMS``
(as a user's plain ``python`` would), for a GPU and a TPU target. With the
CUDA plugin installed on a machine without a GPU, importing JAX writes
``Could not find cuda drivers`` lines; with libtpu, starting JAX's backends
writes libtpu's probe errors. A named target needs neither in the caller (the
compile runs in a child process whose log is kept off the caller's stderr), so
the snippet's stderr must be empty.
"""

import os
import re
import subprocess
import sys
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


def _run(code: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("JAX_PLATFORMS", "XLA_FLAGS", "TF_CPP_MIN_LOG_LEVEL")
    }
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
    assert 'topology="h100-8"' in code
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

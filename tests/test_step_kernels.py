"""Issue 55, item 4: a TPU kernel's refusal on a GPU target names the model's line.

Megablox's ``gmm`` (``jax.experimental.pallas.ops.tpu.megablox``) is a
``custom_vjp`` whose ``pallas_call`` is traced in JAX's own files: the model's
line that called it (here, :class:`_GmmExperts`'s ``__call__``) is what
docs/howto/moe.md promises ("at qwen3/model.py:913"), found in this file's text.
"""

import os
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from nnx_introspect import step_memory_report
from nnx_introspect._typing import ArgumentError
from nnx_introspect._xla.toolchain import cuda_plugin_version

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _child_imports_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child process rebuilds this module's model by name."""
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))


class _GmmExperts(nnx.Module):
    """Two experts of 128 x 128, run by Megablox's grouped matmul."""

    def __init__(self, *, rngs: nnx.Rngs) -> None:
        self.w = nnx.Param(jnp.zeros((2, 128, 128), jnp.float32))

    def __call__(self, x: jax.Array) -> jax.Array:
        from jax.experimental.pallas.ops.tpu.megablox import ops

        sizes = jnp.array([x.shape[0] // 2, x.shape[0] // 2], jnp.int32)
        out: jax.Array = ops.gmm(x, self.w[...], sizes)  # the model's line
        return out


def gmm_experts(rngs: nnx.Rngs) -> Any:
    return _GmmExperts(rngs=rngs)


@pytest.mark.skipif(cuda_plugin_version() is None, reason="no CUDA PJRT plugin")
def test_the_refusal_names_the_models_line_under_a_custom_vjp() -> None:
    with pytest.raises(ArgumentError) as raised:
        step_memory_report(
            "tests.test_step_kernels:gmm_experts",
            {"data": 8},
            jax.ShapeDtypeStruct((128, 128), jnp.float32),
            loss=None,
            topology="h100-8",
        )
    text = str(raised.value)
    assert text.startswith("`topology` 'h100-8': the model calls the Pallas kernel ")
    assert "jax.experimental.pallas.ops.tpu.megablox.gmm" in text
    line = next(
        i + 1
        for i, s in enumerate(Path(__file__).read_text().splitlines())
        if "# the model's line" in s
    )
    assert f"(at tests/test_step_kernels.py:{line})" in text
    assert "a TPU (Mosaic) kernel JAX cannot lower for GPU" in text

"""Issue 24, item 6: a step a child cannot rebuild, on a topology this process
cannot make, names the argument to change and writes nothing to stderr.

``optimizer=optax.adamw(1e-3)`` (an object) cannot travel to the child process a
named topology compiles in; without ``JAX_PLATFORMS=cpu`` the CUDA plugin cannot
make compile-only devices here either. The error must name ``optimizer`` (not
``topology``, and not tell the user to pass the target by name, which they did),
say both reasons, and no plugin traceback may reach stderr. Run in a fresh
interpreter with no ``JAX_PLATFORMS``, as a user's plain ``python`` would.
"""

import json
import os
import subprocess
import sys

import pytest

from nnx_introspect._xla import toolchain

CODE = """
import json, sys
from nnx_introspect import ArgumentError, step_memory_report
import jax, jax.numpy as jnp, optax
try:
    step_memory_report(
        "nnx_introspect.examples:llama_tiny_sharded", "fsdp=2,tp=4",
        jax.ShapeDtypeStruct((8, 64), jnp.int32), loss="lm",
        optimizer=optax.adamw(1e-3), topology="h100-8",
    )
except ArgumentError as error:
    print(json.dumps({"argument": error.argument, "message": str(error)}))
"""


@pytest.mark.skipif(
    toolchain.cuda_plugin_version() is None, reason="needs the gpu extra"
)
def test_an_optimizer_object_on_h100_names_the_optimizer_quietly() -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("JAX_PLATFORMS", "XLA_FLAGS", "TF_CPP_MIN_LOG_LEVEL")
    }
    baseline = subprocess.run(
        [sys.executable, "-c", "from nnx_introspect import ArgumentError\nimport jax"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    done = subprocess.run(
        [sys.executable, "-c", CODE],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    error = json.loads(done.stdout)
    assert error["argument"] == "optimizer"
    message = error["message"]
    assert message.startswith("`optimizer` must be a name"), message
    assert "cannot compile in this process either" in message
    assert "JAX_PLATFORMS=cpu" in message
    assert "pass `target` by name" not in message
    # nothing beyond what importing JAX itself writes (the plugin's stub lines)
    assert done.stderr == baseline.stderr, done.stderr

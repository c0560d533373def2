"""Tensor parallelism's collectives against the per-layer formula, on every backend.

A Megatron-style MLP block (the first kernel split by columns over ``tp``, the
second by rows, the batch replicated over ``tp``) needs exactly one collective
per step, derived by hand: the forward pass's partial outputs ``x @ W1[:, s] @
W2[s, :]`` are summed over ``tp``, one all-reduce of the block's output
(``BATCH x D`` float32). The backward pass needs none: the output's gradient is
replicated, and each device's kernel gradients use only its own columns and
rows (the input needs no gradient). Wire bytes: the ring all-reduce's
``2 (n - 1) / n`` of it.
"""

from fractions import Fraction
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from nnx_introspect._xla.collectives import compiled_hlo_text, read_collectives
from nnx_introspect._xla.toolchain import (
    cuda_plugin_version,
    libtpu_version,
    topology_mesh,
)

BATCH, D, H = 64, 128, 512
OUTPUT_BYTES = BATCH * D * 4
"""The block's float32 output: 32,768 bytes."""


def tp_step(mesh: Mesh) -> Any:
    """Lowered SGD step of one Megatron MLP block on ``mesh`` (axis ``tp``)."""
    w1 = jax.ShapeDtypeStruct(
        (D, H), jnp.float32, sharding=NamedSharding(mesh, P(None, "tp"))
    )
    w2 = jax.ShapeDtypeStruct(
        (H, D), jnp.float32, sharding=NamedSharding(mesh, P("tp", None))
    )
    x = jax.ShapeDtypeStruct((BATCH, D), jnp.float32, sharding=NamedSharding(mesh, P()))
    highest = jax.lax.Precision.HIGHEST  # no bfloat16 conversion on XLA:TPU

    def loss(ws: Any, x: jax.Array) -> jax.Array:
        w1, w2 = ws
        h = jax.nn.relu(jnp.dot(x, w1, precision=highest))
        return jnp.sum(jnp.dot(h, w2, precision=highest) ** 2)

    def step(ws: Any, x: jax.Array) -> Any:
        grads = jax.grad(loss)(ws, x)
        return jax.tree.map(lambda w, g: w - 0.1 * g, ws, grads)

    shardings = (w1.sharding, w2.sharding)
    return jax.jit(step, out_shardings=shardings).lower((w1, w2), x)


def check(mesh: Mesh, n: int) -> None:
    axes = (("tp", n),)
    found = read_collectives(compiled_hlo_text(tp_step(mesh).compile()), axes)
    kinds = found.by_kind()
    assert set(kinds) == {"all-reduce"}, [(r.kind, r.shapes) for r in found.rows]
    assert kinds["all-reduce"].nbytes == OUTPUT_BYTES == 32_768
    assert kinds["all-reduce"].wire_bytes == 2 * Fraction(n - 1, n) * OUTPUT_BYTES
    assert all(row.axes == ("tp",) and row.group_size == n for row in found.rows)


def test_xla_cpu() -> None:
    check(Mesh(np.array(jax.devices()[:8]), ("tp",)), 8)


@pytest.mark.skipif(
    cuda_plugin_version() is None, reason="the CUDA PJRT plugin is absent"
)
def test_deviceless_xla_gpu_h100_8() -> None:
    mesh, _ = topology_mesh("h100-8", (("tp", 8),))
    check(mesh, 8)


@pytest.mark.skipif(libtpu_version() is None, reason="libtpu is not installed")
def test_deviceless_xla_tpu_v5e_4() -> None:
    mesh, _ = topology_mesh("v5e-4", (("tp", 4),))
    check(mesh, 4)

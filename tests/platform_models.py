"""Models that constrain activations only off the CPU, as tunix does.

tunix (google-tunix) shards its activations with a helper that returns the
array unchanged when ``jax.devices()[0].platform == "cpu"`` or no physical
mesh is set (``with mesh:``); on a GPU or TPU it applies
``jax.lax.with_sharding_constraint``. The model here reproduces that idiom, so
the tests can check that a step compiled for a named GPU or TPU target is
traced as on that target. Importable by name for the step's child process:
``"tests.platform_models:cpu_shy_mlp"``.
"""

import warnings
from typing import Any

import jax
from flax import nnx
from jax.interpreters import pxla
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

WIDTH, HIDDEN = 256, 2048


def shard_off_cpu(x: jax.Array, spec: P) -> jax.Array:
    """``x`` constrained to ``spec`` on an accelerator under ``with mesh:``."""
    with warnings.catch_warnings():  # deprecated since JAX 0.8.2; tunix reads it
        warnings.simplefilter("ignore", DeprecationWarning)
        mesh: Any = pxla.thread_resources.env.physical_mesh
    if jax.devices()[0].platform == "cpu" or mesh.empty:
        return x
    constrained: jax.Array = jax.lax.with_sharding_constraint(
        x, NamedSharding(mesh, spec)
    )
    return constrained


class CpuShyMLP(nnx.Module):
    """Two sharded linears whose hidden activation is constrained off-CPU."""

    def __init__(self, *, rngs: nnx.Rngs) -> None:
        init = nnx.initializers.lecun_normal()
        self.up = nnx.Linear(
            WIDTH,
            HIDDEN,
            use_bias=False,
            kernel_init=nnx.with_partitioning(init, ("fsdp", "tp")),
            rngs=rngs,
        )
        self.down = nnx.Linear(
            HIDDEN,
            WIDTH,
            use_bias=False,
            kernel_init=nnx.with_partitioning(init, ("tp", "fsdp")),
            rngs=rngs,
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        h = shard_off_cpu(self.up(x), P("fsdp", "tp"))
        return shard_off_cpu(self.down(jax.nn.relu(h)), P("fsdp", None))


def cpu_shy_mlp(rngs: nnx.Rngs) -> CpuShyMLP:
    """The factory the step's child process builds by name."""
    return CpuShyMLP(rngs=rngs)


class TwoLayerMLP(nnx.Module):
    """f32 ``512 -> 4096 -> 512`` with biases: the MLP of the peak tests."""

    def __init__(self, *, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(512, 4096, rngs=rngs)
        self.l2 = nnx.Linear(4096, 512, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.l2(jax.nn.relu(self.l1(x)))


def two_layer_mlp(rngs: nnx.Rngs) -> TwoLayerMLP:
    """The factory the step's child process builds by name."""
    return TwoLayerMLP(rngs=rngs)

"""tunix's Llama-3.2-1B served on 8 deviceless H100s: ours against a hand compile.

Needs ``pip install google-tunix==0.1.7`` (not a dependency of the project).
For tunix's own model (``tunix.models.llama3.model.Llama3``, ``ModelConfig.
llama3p2_1b()``) and its sampler's KV cache (``tunix.generate.sampler.
_init_cache``: ``k``/``v`` of ``[sequences, context, 8, 64]`` and an
``end_index`` per layer), this script

1. runs :func:`nnx_introspect.serve_memory_report` (``fsdp=1,tp=8`` on ``h100-8``,
   bf16 weights and cache, 64 sequences x 8,192 positions, a 2,048-token
   prompt), and
2. writes the same two programs out by hand: the served weights as
   ``ShapeDtypeStruct`` in bf16, sharded as tunix's annotations say on
   ``fsdp=1,tp=8`` (tunix's activation constraints name both axes); the
   cache ``P(None, None, "tp", None)``; ``jax.jit(..., donate_argnums=1)``; traced
   with ``jax.devices()`` answering the H100s (tunix shards its activations
   only off the CPU); lowered and compiled with JAX's own calls, and prints
   XLA's ``memory_analysis()`` of each next to the report's figures.

Only the compile's devices come from the library (``topology_mesh``: JAX's
``get_topology_desc`` with the H100's target description): everything about
the programs is written here. Run:
``JAX_PLATFORMS=cpu python benchmarks/outside/serve_tunix.py`` (the factory lives in
this script, so the report compiles in this process, which needs the CPU
platform to make XLA:GPU's compile-only devices).
"""

import math
import time
import unittest.mock
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from nnx_introspect import serve_memory_report
from nnx_introspect._xla.toolchain import topology_mesh

S, T, PROMPT, TOPOLOGY = 64, 8192, 2048, "h100-8"
MESH = (("fsdp", 1), ("tp", 8))  # tunix names both axes in its activations


def llama3p2_1b(rngs: nnx.Rngs) -> Any:
    """tunix's Llama-3.2-1B (16 layers, 8 KV heads of 64, vocabulary 128,256)."""
    from tunix.models.llama3.model import Llama3, ModelConfig

    return Llama3(ModelConfig.llama3p2_1b(), rngs=rngs)


def tunix_cache(model: Any, sequences: int, context: int, dtype: Any) -> Any:
    """tunix's sampler's cache maker, called as the library's ``init_cache``."""
    from tunix.generate.sampler import _init_cache

    config = model.config
    return _init_cache(
        config.num_layers,
        context,
        sequences,
        config.num_kv_heads,
        config.head_dim,
        dtype,
    )


def _spec(variable: Any) -> PartitionSpec:
    """tunix's annotation, as it is (the mesh has its ``fsdp`` and ``tp``)."""
    meta = variable.get_metadata()
    names = meta.get("out_sharding") or meta.get("sharding_names") or ()
    return PartitionSpec(*names)


def by_hand(name: str) -> Any:
    """XLA's memory analysis of the program written out by hand."""
    mesh, _ = topology_mesh(TOPOLOGY, MESH)
    devices = list(mesh.devices.flat)
    model = nnx.eval_shape(lambda: llama3p2_1b(nnx.Rngs(0)))
    graphdef, state = nnx.split(model)
    specs = jax.tree.map(_spec, state, is_leaf=lambda x: isinstance(x, nnx.Variable))

    def weight(leaf: Any, spec: PartitionSpec) -> Any:
        dtype = jnp.bfloat16 if jnp.issubdtype(leaf.dtype, jnp.floating) else leaf.dtype
        return jax.ShapeDtypeStruct(
            leaf.shape, dtype, sharding=NamedSharding(mesh, spec)
        )

    weights = jax.tree.map(weight, nnx.to_pure_dict(state), nnx.to_pure_dict(specs))
    weights = nnx.State(weights) if not isinstance(weights, nnx.State) else weights
    kv = NamedSharding(mesh, PartitionSpec(None, None, "tp", None))
    rep = NamedSharding(mesh, PartitionSpec())
    cache = {
        f"layer_{i}": {
            "k": jax.ShapeDtypeStruct((S, T, 8, 64), jnp.bfloat16, sharding=kv),
            "v": jax.ShapeDtypeStruct((S, T, 8, 64), jnp.bfloat16, sharding=kv),
            "end_index": jax.ShapeDtypeStruct((S,), jnp.int32, sharding=rep),
        }
        for i in range(16)
    }
    shardings = jax.tree.map(lambda x: x.sharding, cache)
    length = 1 if name == "decode" else PROMPT
    tokens = jax.ShapeDtypeStruct(
        (S, length), jnp.int32, sharding=NamedSharding(mesh, PartitionSpec(None, None))
    )

    def program(w: Any, c: Any, tok: Any, pos: Any, *slot: Any) -> Any:
        mask = jnp.arange(T)[None, None, :] <= pos[:, :, None]
        logits, c = nnx.merge(graphdef, w)(tok, pos, c, mask)
        return logits[:, -1], jax.lax.with_sharding_constraint(c, shardings)

    args = [weights, cache, tokens, tokens]
    if name == "prefill":
        args.append(jax.ShapeDtypeStruct((), jnp.int32, sharding=rep))
    with (
        mesh,
        jax.set_mesh(mesh),
        nnx.use_eager_sharding(False),
        unittest.mock.patch.object(jax, "devices", lambda *a: devices),
    ):
        lowered = jax.jit(program, donate_argnums=(1,)).lower(*args)
    return lowered.compile().memory_analysis()


def main() -> None:
    """Both sides, their figures and their times."""
    start = time.perf_counter()
    report = serve_memory_report(
        llama3p2_1b,
        "fsdp=1,tp=8",
        sequences=S,
        context=T,
        prompt=PROMPT,
        topology=TOPOLOGY,
        init_cache=tunix_cache,
    )
    ours = time.perf_counter() - start
    print(report.to_markdown())
    print(f"serve_memory_report: {ours:.1f} s")
    per_position = 2 * 16 * (8 // 8) * 64 * 2  # k,v x layers x heads/tp x dim x B
    print(
        f"KV bytes per position per device: {report.kv_bytes_per_token} "
        f"(by arithmetic {per_position})"
    )
    fields = ("argument", "output", "temp", "alias")
    for name in ("prefill", "decode"):
        start = time.perf_counter()
        hand = by_hand(name)
        took = time.perf_counter() - start
        program = getattr(report, name)
        for field in fields:
            mine = getattr(program, f"{field}_bytes")
            theirs = getattr(hand, f"{field}_size_in_bytes")
            mark = "==" if mine == theirs else "!="
            print(f"{name} {field}: report {mine:,} {mark} hand {theirs:,}")
        print(f"{name} by hand: {took:.1f} s")
    assert math.isfinite(ours)


if __name__ == "__main__":
    main()

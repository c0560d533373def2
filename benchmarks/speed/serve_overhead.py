"""The serving report's time against the two bare compiles it stands on.

For the 7B example served on ``fsdp=1,tp=8`` of ``h100-8`` (64 sequences x
8,192 positions, a 2,048-token prompt prefilled 8 sequences at a time, bf16
weights and cache), this script times, side by side in one run and in
alternating order:

- **bare**: the two programs written out by hand (the served weights as
  bf16 ``ShapeDtypeStruct`` sharded as the model's annotations say, the cache
  ``P(None, None, "tp", None)``, ``jax.jit(..., donate_argnums=1)``, traced
  with ``jax.devices()`` answering the H100s), built, lowered and compiled
  with JAX's own calls in this process: what a user's own script would take;
- **report**: :func:`nnx_introspect.serve_memory_report` with
  ``cache=False`` (a child process is started, the model rebuilt there, both
  programs compiled and read).

It prints each run's wall time, the medians, their ratio and whether the
two sides' memory figures agree. Run it with ``JAX_PLATFORMS=cpu`` (the
bare side makes XLA:GPU's compile-only devices in this process)::

    JAX_PLATFORMS=cpu python benchmarks/speed/serve_overhead.py [--repeats 2]
"""

import argparse
import statistics
import time
import unittest.mock
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from nnx_introspect import serve_memory_report
from nnx_introspect._xla.toolchain import topology_mesh
from nnx_introspect.examples import llama_7b_sharded

S, T, PROMPT, ADMITTED, TOPOLOGY = 64, 8192, 2048, 8, "h100-8"
MESH = (("fsdp", 1), ("tp", 8))


def _spec(variable: Any) -> PartitionSpec:
    meta = variable.get_metadata()
    names = meta.get("out_sharding") or meta.get("sharding_names") or ()
    return PartitionSpec(*names)


def bare() -> dict[str, Any]:
    """Both programs by hand: XLA's memory analysis of each."""
    mesh, _ = topology_mesh(TOPOLOGY, MESH)
    devices = list(mesh.devices.flat)
    with nnx.use_eager_sharding(False):  # abstract: no mesh needed to build
        model = nnx.eval_shape(lambda: llama_7b_sharded(nnx.Rngs(0)))
    graphdef, state = nnx.split(model)
    specs = jax.tree.map(_spec, state, is_leaf=lambda x: isinstance(x, nnx.Variable))

    def weight(leaf: Any, spec: PartitionSpec) -> Any:
        dtype = jnp.bfloat16 if jnp.issubdtype(leaf.dtype, jnp.floating) else leaf.dtype
        return jax.ShapeDtypeStruct(
            leaf.shape, dtype, sharding=NamedSharding(mesh, spec)
        )

    weights = nnx.State(
        jax.tree.map(weight, nnx.to_pure_dict(state), nnx.to_pure_dict(specs))
    )
    kv = NamedSharding(mesh, PartitionSpec(None, None, "tp", None))
    rep = NamedSharding(mesh, PartitionSpec())
    cache = jax.tree.map(
        lambda c: jax.ShapeDtypeStruct(
            c.shape, c.dtype, sharding=kv if c.ndim == 4 else rep
        ),
        jax.eval_shape(lambda: model.init_cache(S, T, jnp.bfloat16)),
    )
    shardings = jax.tree.map(lambda x: x.sharding, cache)

    def decode(w: Any, c: Any, tok: Any, pos: Any) -> Any:
        mask = jnp.arange(T)[None, None, :] <= pos[:, :, None]
        logits, c = nnx.merge(graphdef, w)(tok, pos, c, mask)
        return logits[:, -1], jax.lax.with_sharding_constraint(c, shardings)

    def prefill(w: Any, c: Any, tok: Any, pos: Any, slot: Any) -> Any:
        rows = jax.tree.map(
            lambda x: jax.lax.dynamic_slice_in_dim(x, slot, ADMITTED, 0), c
        )
        mask = jnp.arange(T)[None, None, :] <= pos[:, :, None]
        logits, part = nnx.merge(graphdef, w)(tok, pos, rows, mask)
        c = jax.tree.map(
            lambda x, p: jax.lax.dynamic_update_slice_in_dim(
                x, p.astype(x.dtype), slot, 0
            ),
            c,
            part,
        )
        return logits[:, -1], jax.lax.with_sharding_constraint(c, shardings)

    replicated_rows = NamedSharding(mesh, PartitionSpec(None, None))
    found = {}
    for name, fn, rows, length in (
        ("prefill", prefill, ADMITTED, PROMPT),
        ("decode", decode, S, 1),
    ):
        tokens = jax.ShapeDtypeStruct(
            (rows, length), jnp.int32, sharding=replicated_rows
        )
        args: list[Any] = [weights, cache, tokens, tokens]
        if name == "prefill":
            args.append(jax.ShapeDtypeStruct((), jnp.int32, sharding=rep))
        with (
            mesh,
            jax.set_mesh(mesh),
            nnx.use_eager_sharding(False),
            unittest.mock.patch.object(jax, "devices", lambda *a: devices),
        ):
            lowered = jax.jit(fn, donate_argnums=(1,)).lower(*args)
        found[name] = lowered.compile().memory_analysis()
    return found


def report() -> Any:
    """The library's report, compiled afresh."""
    return serve_memory_report(
        "nnx_introspect.examples:llama_7b_sharded",
        "fsdp=1,tp=8",
        sequences=S,
        context=T,
        prompt=PROMPT,
        prefill_sequences=ADMITTED,
        topology=TOPOLOGY,
        cache=False,
    )


def main() -> None:
    """Alternate the two sides; print the times, the ratio, the agreement."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=2)
    repeats = parser.parse_args().repeats
    times: dict[str, list[float]] = {"bare": [], "report": []}
    hand: dict[str, Any] = {}
    ours: Any = None
    for i in range(repeats):
        order = ("bare", "report") if i % 2 == 0 else ("report", "bare")
        for side in order:
            start = time.perf_counter()
            if side == "bare":
                hand = bare()
            else:
                ours = report()
            times[side].append(time.perf_counter() - start)
            print(f"run {i + 1} {side}: {times[side][-1]:.1f} s", flush=True)
    for name in ("prefill", "decode"):
        program = getattr(ours, name)
        for field in ("argument", "output", "temp", "alias"):
            mine = getattr(program, f"{field}_bytes")
            theirs = getattr(hand[name], f"{field}_size_in_bytes")
            print(
                f"{name} {field}: report {mine:,} {'==' if mine == theirs else '!='} "
                f"bare {theirs:,}"
            )
    b, r = statistics.median(times["bare"]), statistics.median(times["report"])
    print(f"median bare {b:.1f} s, report {r:.1f} s: ratio {r / b:.2f}")


if __name__ == "__main__":
    main()

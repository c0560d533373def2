"""tunix's Qwen3-30B-A3B, deviceless: a training step and serving (issue 43).

google-tunix 0.1.7's own model and config (``tunix.models.qwen3.model.Qwen3``,
``ModelConfig.qwen3_30b_a3b()``: 48 layers, 128 experts of width 768, 8 per
token, float32), through :func:`nnx_introspect.step_memory_report` (AdamW,
next-token loss) and :func:`nnx_introspect.serve_memory_report`, on TPU
targets, where its ``MoELayer`` takes its Megablox path (``megablox.gmm``
inside a ``shard_map``, ragged all-to-alls over ``fsdp``), and on an H100
target, where that kernel cannot lower (one line naming it) and where its
dense loop over the experts is what ``trace_as_target=False`` compiles.

Each run prints its wall time and the report's figures as one JSON line, and
the report as text. Needs ``pip install --no-deps google-tunix==0.1.7`` (its
heavy imports can be stubbed: only ``tunix.models.qwen3`` is used) and the
``tpu`` and ``gpu`` extras::

    JAX_PLATFORMS=cpu PYTHONPATH=src:. python benchmarks/outside/moe_tunix.py \\
        train v5p-64 fsdp=32,tp=1 32x2048 [--remat DecoderLayer] [--trace-as-cpu]
    JAX_PLATFORMS=cpu PYTHONPATH=src:. python benchmarks/outside/moe_tunix.py \\
        serve v5p-64 fsdp=8,tp=4 64x4096 --prompt 1024 --kv-cache float32

``MOE_TUNIX_LAYERS=N`` in the environment builds N of the 48 layers (a smaller
compile; the child process, which rebuilds the factory by name, reads it too).
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse
import dataclasses
import json
import time
from typing import Any

import jax
import jax.numpy as jnp
from benchmarks.calibration import timecal
from flax import nnx

LAYERS = int(os.environ.get("MOE_TUNIX_LAYERS", "48"))
"""How many of Qwen3-30B-A3B's 48 layers the factory builds (the child reads it)."""


def qwen3_30b_a3b(rngs: nnx.Rngs) -> Any:
    """tunix's ``Qwen3`` at ``ModelConfig.qwen3_30b_a3b()`` (``LAYERS`` layers)."""
    import flax
    from tunix.models.qwen3 import model as qwen3

    config = qwen3.ModelConfig.qwen3_30b_a3b()
    if config.num_layers != LAYERS:
        config = dataclasses.replace(config, num_layers=LAYERS)
    before = flax.config.flax_always_shard_variable
    flax.config.update("flax_always_shard_variable", False)
    try:
        return qwen3.Qwen3(config, rngs=rngs)
    finally:
        flax.config.update("flax_always_shard_variable", before)


lm_loss = timecal.tunix_lm_loss
"""Next-token cross-entropy in tunix's calling convention (timecal's one copy)."""


def tunix_cache(model: Any, sequences: int, context: int, dtype: Any) -> Any:
    """tunix's sampler's cache (``tunix.generate.sampler._init_cache``'s layout).

    Each layer's ``k`` and ``v`` of ``[sequences, context, kv heads, head_dim]``
    and its ``end_index``; written out as tunix's sampler writes it where the
    sampler does not import (a trimmed copy of tunix holding its models only).
    """
    config = model.config
    try:
        from tunix.generate.sampler import _init_cache
    except ImportError:
        shape = (sequences, context, config.num_kv_heads, config.head_dim)
        return {
            f"layer_{i}": {
                "k": jnp.zeros(shape, dtype=dtype),
                "v": jnp.zeros(shape, dtype=dtype),
                "end_index": jnp.zeros((sequences,), dtype=jnp.int32),
            }
            for i in range(config.num_layers)
        }
    return _init_cache(
        config.num_layers,
        context,
        sequences,
        config.num_kv_heads,
        config.head_dim,
        dtype,
    )


def _train(args: argparse.Namespace) -> dict[str, Any]:
    from nnx_introspect import step_memory_report

    b, t = (int(n) for n in args.shape.split("x"))
    report = step_memory_report(
        "benchmarks.outside.moe_tunix:qwen3_30b_a3b",
        args.mesh,
        jax.ShapeDtypeStruct((b, t), jnp.int32),
        loss="benchmarks.outside.moe_tunix:lm_loss",
        optimizer="adamw",
        topology=args.topology,
        trace_as_target=not args.trace_as_cpu,
        remat=args.remat,
        breakdown=args.breakdown,
        cache=not args.no_cache,
    )
    print(report.to_markdown())
    roof = report.roofline
    found = report.program.collectives
    return {
        "peak_bytes": report.peak_bytes,
        "fits": report.fits(),
        "argument_bytes": report.argument_bytes,
        "output_bytes": report.output_bytes,
        "temp_bytes": report.temp_bytes,
        "alias_bytes": report.alias_bytes,
        "traced_platform": report.compilation.traced_platform,
        "compile_seconds": report.compilation.seconds,
        "collectives": None
        if found is None
        else {
            kind: [total.count, total.nbytes] for kind, total in found.by_kind().items()
        },
        "ragged": None if found is None else found.ragged_note(),
        "seconds": None if roof is None else roof.seconds,
        "bounds": None if roof is None else [roof.low_seconds, roof.high_seconds],
        "mfu": None if roof is None else roof.mfu,
        "mfu_basis": None if roof is None else roof.mfu_basis,
        "model_flops": None if roof is None else roof.model_flops,
    }


def _serve(args: argparse.Namespace) -> dict[str, Any]:
    from nnx_introspect import serve_memory_report

    s, c = (int(n) for n in args.shape.split("x"))
    report = serve_memory_report(
        "benchmarks.outside.moe_tunix:qwen3_30b_a3b",
        args.mesh,
        sequences=s,
        context=c,
        prompt=args.prompt,
        topology=args.topology,
        init_cache="benchmarks.outside.moe_tunix:tunix_cache",
        kv_cache=args.kv_cache,
        cache=not args.no_cache,
    )
    print(report.to_markdown())
    out: dict[str, Any] = {"fits": report.fits()}
    for name in ("prefill", "decode"):
        program = getattr(report, name)
        out[name] = {
            "peak_bytes": program.peak_bytes,
            "compile_seconds": program.compile_seconds,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("train", "serve"))
    parser.add_argument("topology")
    parser.add_argument("mesh")
    parser.add_argument("shape", help="BxT (train) or SEQUENCESxCONTEXT (serve)")
    parser.add_argument("--prompt", type=int, default=None)
    parser.add_argument("--kv-cache", default="bfloat16")
    parser.add_argument("--trace-as-cpu", action="store_true")
    parser.add_argument(
        "--remat", default=None, help="a module class, e.g. DecoderLayer"
    )
    parser.add_argument("--breakdown", action="store_true")
    parser.add_argument("--no-cache", action="store_true")
    args = parser.parse_args()
    start = time.perf_counter()
    try:
        found = _train(args) if args.what == "train" else _serve(args)
    except (ValueError, TypeError) as error:
        found = {"error": f"{type(error).__name__}: {error}"}
    found |= {
        "what": args.what,
        "topology": args.topology,
        "mesh": args.mesh,
        "shape": args.shape,
        "layers": LAYERS,
        "trace_as_cpu": args.trace_as_cpu,
        "remat": getattr(args, "remat", None),
        "wall_seconds": round(time.perf_counter() - start, 1),
    }
    print(json.dumps(found))


if __name__ == "__main__":
    main()

"""One GRPO step of tunix's Llama-3.2-1B on ``v5e-8`` and ``h100-8`` (issue 36).

The issue's shape: batch 8 x 4 generations, prompt 256, completion 768, AdamW,
every role on one mesh (``fsdp=1,tp=8``: tunix names both axes), with the
report's defaults, which are tunix 0.1.7's (issue 44): colocated, the rollout
is the actor itself (no copy), decoding on the model's own parameters into a
KV cache of the model's dtype (a Llama3 built without a dtype: float32), and
the training step donates only its optimizer's state (the old parameters live
beside the new). For each target this script

1. runs :func:`nnx_introspect.rl_memory_report` with a fresh cache directory
   (every program compiled) and times it, against the sum of its programs' own
   compile times (XLA's, as each program's report records them);
2. runs it again from the cache and times that;
3. adds the peak up by hand from the per-program reports: each phase's program
   peak plus the roles resident beside it, the largest phase's; and checks the
   report's;
4. with ``--lora``: the same step with qwix's LoRA (rank 16 on the attention
   and MLP projections, as tunix's GRPO demo applies it) trained alone
   (``lora="model"``), and checks LoRA's resident bytes against the full
   fine-tuning's less the frozen backbone's optimizer state.

Needs ``pip install google-tunix==0.1.7 qwix`` and the ``tpu`` and ``gpu``
extras (deviceless XLA:TPU and XLA:GPU)::

    PYTHONPATH=src:. python benchmarks/outside/rl_tunix.py [--topology v5e-8] [--lora]
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse
import json
import tempfile
import time
from typing import Any

from flax import nnx

from nnx_introspect import rl_memory_report

TARGET = "benchmarks.outside.serve_tunix:llama3p2_1b"
LORA_TARGET = "benchmarks.outside.rl_tunix:llama3p2_1b_lora16"
INIT_CACHE = "benchmarks.outside.serve_tunix:tunix_cache"
SHAPE = {"batch": 8, "generations": 4, "prompt": 256, "completion": 768}
MESH = "fsdp=1,tp=8"


def llama3p2_1b_lora16(rngs: nnx.Rngs) -> Any:
    """tunix's Llama-3.2-1B with qwix's LoRA, rank 16, as tunix's GRPO demo has it."""
    import jax.numpy as jnp
    import qwix
    from benchmarks.outside.serve_tunix import llama3p2_1b

    model = llama3p2_1b(rngs)
    provider = qwix.LoraProvider(
        module_path=".*q_proj|.*k_proj|.*v_proj|.*o_proj|.*gate_proj|.*down_proj|.*up_proj",
        rank=16,
        alpha=2.0,
    )
    tokens = jnp.zeros((1, 8), jnp.int32)
    positions = jnp.arange(8)[None]
    mask = jnp.ones((1, 8, 8), jnp.bool_)
    return qwix.apply_lora_to_model(
        model, provider, tokens, positions, None, mask, rngs=nnx.Rngs(1)
    )


def _compile_seconds(report: Any) -> float:
    """The programs' own compile times, as their reports record them."""
    rollout, ref, train = (
        report.programs[k] for k in ("rollout", "reference", "train")
    )
    seconds = [rollout.prefill.compile_seconds, rollout.decode.compile_seconds]
    seconds += [r.compilation.seconds for r in (ref, train) if r is not None]
    return float(sum(seconds))


def _by_hand(report: Any) -> int:
    """The step's peak added up from the per-program reports, by hand."""
    programs = report.programs
    roles = dict(report.roles)
    peaks = {
        "prefill": programs["rollout"].prefill.peak_bytes,
        "decode": programs["rollout"].decode.peak_bytes,
        "train": programs["train"].peak_bytes,
    }
    if programs["reference"] is not None:
        peaks["reference"] = programs["reference"].peak_bytes
    beside = {p.name: sum(roles[r] for r, _ in p.resident) for p in report.phases}
    return max(peaks[name] + beside[name] for name in peaks)


def run(topology: str, target: str, lora: Any) -> dict[str, Any]:
    """One report cold and cached, timed, and its peak held to the hand sum."""
    with tempfile.TemporaryDirectory() as cache:
        os.environ["NNX_INTROSPECT_CACHE_DIR"] = cache
        start = time.perf_counter()
        report = rl_memory_report(
            target, MESH, topology=topology, init_cache=INIT_CACHE, lora=lora, **SHAPE
        )
        cold = time.perf_counter() - start
        start = time.perf_counter()
        again = rl_memory_report(
            target, MESH, topology=topology, init_cache=INIT_CACHE, lora=lora, **SHAPE
        )
        cached = time.perf_counter() - start
    assert again.peak_bytes == report.peak_bytes
    hand = _by_hand(report)
    assert hand == report.peak_bytes, (hand, report.peak_bytes)
    compiles = _compile_seconds(report)
    print(report.to_markdown())
    return {
        "topology": topology,
        "lora": lora,
        "verdict": report.verdict,
        "peak_bytes": report.peak_bytes,
        "peak_by_hand": hand,
        "roles": dict(report.roles),
        "phases": {
            p.name: (p.program_peak_bytes, p.resident_bytes) for p in report.phases
        },
        "seconds_cold": round(cold, 1),
        "seconds_compiles": round(compiles, 1),
        "cold_over_compiles": round(cold / compiles, 2),
        "seconds_cached": round(cached, 1),
        "cached_over_cold": round(cached / cold, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", action="append", default=None)
    parser.add_argument("--lora", action="store_true")
    args = parser.parse_args()
    results = []
    for topology in args.topology or ["v5e-8", "h100-8"]:
        full = run(topology, TARGET, None)
        results.append(full)
        if args.lora:
            lora = run(topology, LORA_TARGET, "model")
            results.append(lora)
            kept = ("rollout weights", "KV cache (during the rollout)")
            frozen_state = full["roles"]["actor optimizer state"]  # of every weight
            resident = {
                name: sum(n for r, n in x["roles"].items() if r not in kept)
                for name, x in (("full", full), ("lora", lora))
            }
            print(
                "LoRA resident",
                resident["lora"],
                "<= full resident - the backbone's optimizer state",
                resident["full"] - frozen_state,
                resident["lora"] <= resident["full"] - frozen_state,
            )
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

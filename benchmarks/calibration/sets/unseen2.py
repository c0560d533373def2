"""A second set of programs the time model's fit never saw (round 2).

``PYTHONPATH=src:. python benchmarks/calibration/timecal.py chip OUT.jsonl HLO_DIR
--set unseen2``
runs these cases through ``timecal.py``'s machinery (``measure=`` on the
present chip, each program's HLO captured). They were chosen after the
constants ``tpu-v5e/2`` were fitted (its cycles cap was found by looking at
the table's worst prefills, the held-out ones among them), so they are the
check that was never looked at: widths 384, 1152 and 1024 with one KV head,
depths 6 to 12, a microbatched step, remat, serving at new cache sizes and
prompt splits, a qwix int8 model of another width, an RL step, and
google-tunix's Llama-3.2-1B and Qwen3-0.6B at shapes the table does not have.
"""

from typing import Any

import jax.numpy as jnp
from benchmarks.calibration import timecal
from flax import nnx

from nnx_introspect.examples import LlamaConfig

U = "benchmarks.calibration.sets.unseen2:"
M = timecal.M

CONFIGS: dict[str, LlamaConfig] = {
    # width 384, 12 layers, MHA 6/6 (head 64)
    "llama_d384_l12": timecal._llama(384, 12, 6, 6, 1024),
    # width 1152, 6 layers, GQA 9/3 (3:1, head 128)
    "llama_d1152_l6": timecal._llama(1152, 6, 9, 3, 3072),
    # width 1024, 8 layers, one KV head (MQA 8:1)
    "llama_d1024_l8_mqa": timecal._llama(1024, 8, 8, 1, 2816),
}


llama_d384_l12 = timecal.llama_factory(CONFIGS, "llama_d384_l12")
llama_d1152_l6 = timecal.llama_factory(CONFIGS, "llama_d1152_l6")
llama_d1024_l8_mqa = timecal.llama_factory(CONFIGS, "llama_d1024_l8_mqa")


def llama_d1152_l6_int8(rngs: nnx.Rngs) -> Any:
    """``llama_d1152_l6`` quantized by qwix: int8 weights, as timecal's int8."""
    import qwix

    rules = [qwix.QuantizationRule(module_path=".*", weight_qtype=jnp.int8)]
    return qwix.quantize_model(
        llama_d1152_l6(rngs), qwix.PtqProvider(rules), jnp.zeros((2, 8), jnp.int32)
    )


UNSEEN2: dict[str, tuple[str, dict[str, Any]]] = {
    "unseen2 step d384 L12 MHA 32x512": timecal.step(U + "llama_d384_l12", (32, 512)),
    "unseen2 step d1152 L6 GQA3 8x1024": timecal.step(U + "llama_d1152_l6", (8, 1024)),
    "unseen2 step d1024 L8 MQA 4x2048 remat nothing_saveable": timecal.step(
        U + "llama_d1024_l8_mqa", (4, 2048), remat="nothing_saveable"
    ),
    "unseen2 step d384 L12 MHA 64x512 4 microbatches": timecal.step(
        U + "llama_d384_l12", (64, 512), microbatches=4
    ),
    "unseen2 serve d1152 L6 GQA3 48x2048 prompt 256 by 8": timecal.serve(
        U + "llama_d1152_l6",
        sequences=48,
        context=2048,
        prompt=256,
        prefill_sequences=8,
    ),
    "unseen2 serve d384 L12 MHA 128x1024 prompt 64 by 32": timecal.serve(
        U + "llama_d384_l12",
        sequences=128,
        context=1024,
        prompt=64,
        prefill_sequences=32,
    ),
    "unseen2 serve d1024 L8 MQA 16x4096 prompt 1024 by 2": timecal.serve(
        U + "llama_d1024_l8_mqa",
        sequences=16,
        context=4096,
        prompt=1024,
        prefill_sequences=2,
    ),
    "unseen2 serve d1152 L6 int8 (qwix) 32x1024 prompt 256 by 8": timecal.serve(
        U + "llama_d1152_l6_int8",
        sequences=32,
        context=1024,
        prompt=256,
        prefill_sequences=8,
        weights=None,
    ),
    "unseen2 rl d384 L12 GRPO 4x2 128+64": (
        "rl",
        {
            "target": U + "llama_d384_l12",
            "batch": 4,
            "generations": 2,
            "prompt": 128,
            "completion": 64,
        },
    ),
    "unseen2 serve tunix Llama-3.2-1B 8x4096 prompt 512 by 2": timecal.serve(
        M + "tunix_llama3_1b",
        mesh=timecal.TUNIX_MESH,
        init_cache=M + "tunix_cache",
        sequences=8,
        context=4096,
        prompt=512,
        prefill_sequences=2,
    ),
    "unseen2 serve tunix Qwen3-0.6B bf16 32x1024 prompt 256 by 8": timecal.serve(
        M + "tunix_qwen3_0p6b_bf16",
        mesh=timecal.TUNIX_MESH,
        init_cache=M + "tunix_cache",
        sequences=32,
        context=1024,
        prompt=256,
        prefill_sequences=8,
    ),
}


E = "nnx_introspect.examples:"


MOE: dict[str, tuple[str, dict[str, Any]]] = {
    # the examples' ~400M mixture of experts (16 experts of 1,024, top-2, a
    # shared expert, 6 layers): issue 43's chip rows, never in any fit
    "moe step 400m dropless 8x1024": timecal.step(E + "moe_400m", (8, 1024)),
    "moe step 400m capacity 8x1024": timecal.step(M + "moe_400m_capacity", (8, 1024)),
    "moe serve 400m dropless 16x2048 prompt 256 by 4": timecal.serve(
        E + "moe_400m", sequences=16, context=2048, prompt=256, prefill_sequences=4
    ),
}

CASES: dict[str, tuple[str, dict[str, Any]]] = {**UNSEEN2, **MOE}
"""The set: the second unseen programs, then the mixture of experts' rows."""

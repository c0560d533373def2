"""A third set of programs the time model never saw (round 3): the blind check.

``PYTHONPATH=src:. python benchmarks/calibration/timecal.py chip OUT.jsonl HLO_DIR
--set unseen3``
runs these cases through ``timecal.py``'s machinery (``measure=`` on the
present chip, each program's HLO captured). They were written down, and the
constants ``tpu-v5e/3`` fixed, before any of them ran: widths 512, 896 and
1,280, head ratios 8/8, 14/2 and 10/2, a 64-wide head (its cache laid out
with the sequence minor-most), serving at cache sizes and prompt splits no
other set has, an RL step, google-tunix's Llama-3.2-1B and Qwen3-0.6B at new
shapes, and the example mixture of experts served by capacity.
"""

from typing import Any

from benchmarks.calibration import timecal

from nnx_introspect.examples import LlamaConfig

U = "benchmarks.calibration.sets.unseen3:"
M = timecal.M
E = "nnx_introspect.examples:"

CONFIGS: dict[str, LlamaConfig] = {
    # width 512, 8 layers, MHA 8/8 (head 64)
    "llama_d512_l8": timecal._llama(512, 8, 8, 8, 1536),
    # width 896, 8 layers, GQA 14/2 (7:1, head 64)
    "llama_d896_l8": timecal._llama(896, 8, 14, 2, 2432),
    # width 1280, 4 layers, GQA 10/2 (5:1, head 128)
    "llama_d1280_l4": timecal._llama(1280, 4, 10, 2, 3456),
}


llama_d512_l8 = timecal.llama_factory(CONFIGS, "llama_d512_l8")
llama_d896_l8 = timecal.llama_factory(CONFIGS, "llama_d896_l8")
llama_d1280_l4 = timecal.llama_factory(CONFIGS, "llama_d1280_l4")


CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "unseen3 step d512 L8 MHA 16x1024": timecal.step(U + "llama_d512_l8", (16, 1024)),
    "unseen3 step d1280 L4 GQA5 4x2048": timecal.step(U + "llama_d1280_l4", (4, 2048)),
    "unseen3 step d896 L8 GQA7 16x512 2 microbatches": timecal.step(
        U + "llama_d896_l8", (16, 512), microbatches=2
    ),
    "unseen3 serve d512 L8 MHA 64x2048 prompt 128 by 16": timecal.serve(
        U + "llama_d512_l8",
        sequences=64,
        context=2048,
        prompt=128,
        prefill_sequences=16,
    ),
    "unseen3 serve d1280 L4 GQA5 24x4096 prompt 512 by 4": timecal.serve(
        U + "llama_d1280_l4",
        sequences=24,
        context=4096,
        prompt=512,
        prefill_sequences=4,
    ),
    "unseen3 serve d896 L8 GQA7 96x1024 prompt 64 by 24": timecal.serve(
        U + "llama_d896_l8", sequences=96, context=1024, prompt=64, prefill_sequences=24
    ),
    "unseen3 rl d512 L8 GRPO 2x4 128+128": (
        "rl",
        {
            "target": U + "llama_d512_l8",
            "batch": 2,
            "generations": 4,
            "prompt": 128,
            "completion": 128,
        },
    ),
    "unseen3 serve tunix Llama-3.2-1B 16x1024 prompt 256 by 4": timecal.serve(
        M + "tunix_llama3_1b",
        mesh=timecal.TUNIX_MESH,
        init_cache=M + "tunix_cache",
        sequences=16,
        context=1024,
        prompt=256,
        prefill_sequences=4,
    ),
    "unseen3 serve tunix Qwen3-0.6B bf16 8x2048 prompt 1024 by 2": timecal.serve(
        M + "tunix_qwen3_0p6b_bf16",
        mesh=timecal.TUNIX_MESH,
        init_cache=M + "tunix_cache",
        sequences=8,
        context=2048,
        prompt=1024,
        prefill_sequences=2,
    ),
    "unseen3 serve moe 400m capacity 8x4096 prompt 512 by 2": timecal.serve(
        M + "moe_400m_capacity",
        sequences=8,
        context=4096,
        prompt=512,
        prefill_sequences=2,
    ),
}

"""A fifth set of programs the time model never saw (round 5): the blind check.

``PYTHONPATH=src:. python benchmarks/calibration/timecal.py chip OUT.jsonl HLO_DIR
--set unseen5``
runs these cases through ``timecal.py``'s machinery (``measure=`` on the
present chip, each program's HLO captured). They were written down before
the constants ``tpu-v5e/5`` were fitted and run on the chip after: widths
512, 768 and 1,152, head ratios 8/8, 12/4 and 9/9, a GRPO step of 8
generations, a PPO step with its critic, an RL step with LoRA, serving at
cache sizes and prompt splits no other set has, the example mixture of
experts served dropless at a new shape, and google-tunix's Llama-3.2-1B and
Qwen3-0.6B at new shapes.
"""

from typing import Any

from benchmarks.calibration import timecal

from nnx_introspect.examples import LlamaConfig

U = "benchmarks.calibration.sets.unseen5:"
M = timecal.M
E = "nnx_introspect.examples:"

CONFIGS: dict[str, LlamaConfig] = {
    # width 512, 12 layers, MHA 8/8 (head 64)
    "llama_d512_l12": timecal._llama(512, 12, 8, 8, 1408),
    # width 768, 6 layers, GQA 12/4 (3:1, head 64)
    "llama_d768_l6": timecal._llama(768, 6, 12, 4, 2048),
    # width 1152, 4 layers, MHA 9/9 (head 128)
    "llama_d1152_l4": timecal._llama(1152, 4, 9, 9, 3072),
}


llama_d512_l12 = timecal.llama_factory(CONFIGS, "llama_d512_l12")
llama_d768_l6 = timecal.llama_factory(CONFIGS, "llama_d768_l6")
llama_d1152_l4 = timecal.llama_factory(CONFIGS, "llama_d1152_l4")
llama_d512_l12_critic = timecal.llama_factory(
    CONFIGS, "llama_d512_l12", value_head=True
)


CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "unseen5 step d768 L6 GQA3 12x1024": timecal.step(U + "llama_d768_l6", (12, 1024)),
    "unseen5 step d1152 L4 MHA 8x2048 2 microbatches": timecal.step(
        U + "llama_d1152_l4", (8, 2048), microbatches=2
    ),
    "unseen5 step d512 L12 MHA 24x512": timecal.step(U + "llama_d512_l12", (24, 512)),
    "unseen5 serve d768 L6 GQA3 32x4096 prompt 512 by 4": timecal.serve(
        U + "llama_d768_l6",
        sequences=32,
        context=4096,
        prompt=512,
        prefill_sequences=4,
    ),
    "unseen5 serve d1152 L4 MHA 8x2048 prompt 1024 by 2": timecal.serve(
        U + "llama_d1152_l4",
        sequences=8,
        context=2048,
        prompt=1024,
        prefill_sequences=2,
    ),
    "unseen5 serve moe 400m dropless 8x4096 prompt 1024 by 2": timecal.serve(
        E + "moe_400m",
        sequences=8,
        context=4096,
        prompt=1024,
        prefill_sequences=2,
    ),
    "unseen5 rl d768 L6 GRPO 2x8 96+160": (
        "rl",
        {
            "target": U + "llama_d768_l6",
            "batch": 2,
            "generations": 8,
            "prompt": 96,
            "completion": 160,
        },
    ),
    "unseen5 rl d512 L12 PPO 4x1 128+128 critic d512": (
        "rl",
        {
            "target": U + "llama_d512_l12",
            "batch": 4,
            "generations": 1,
            "prompt": 128,
            "completion": 128,
            "critic": U + "llama_d512_l12_critic",
        },
    ),
    "unseen5 rl d1152 L4 GRPO 8x1 256+64 LoRA 4": (
        "rl",
        {
            "target": U + "llama_d1152_l4",
            "batch": 8,
            "generations": 1,
            "prompt": 256,
            "completion": 64,
            "lora": 4,
        },
    ),
    "unseen5 serve tunix Llama-3.2-1B 24x2048 prompt 256 by 6": timecal.serve(
        M + "tunix_llama3_1b",
        mesh=timecal.TUNIX_MESH,
        init_cache=M + "tunix_cache",
        sequences=24,
        context=2048,
        prompt=256,
        prefill_sequences=6,
    ),
    "unseen5 serve tunix Qwen3-0.6B bf16 24x2048 prompt 256 by 6": timecal.serve(
        M + "tunix_qwen3_0p6b_bf16",
        mesh=timecal.TUNIX_MESH,
        init_cache=M + "tunix_cache",
        sequences=24,
        context=2048,
        prompt=256,
        prefill_sequences=6,
    ),
}

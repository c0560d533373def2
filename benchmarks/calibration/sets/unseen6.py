"""A sixth set of programs the time model never saw (round 6): the blind check.

``PYTHONPATH=src:. python benchmarks/calibration/timecal.py chip OUT.jsonl HLO_DIR
--set unseen6``
runs these cases through ``timecal.py``'s machinery (``measure=`` on the
present chip, each program's HLO captured). They were written down before
the constants ``tpu-v5e/6`` were fitted and run on the chip after: widths
640, 896 and 1,280, head ratios 10/2, 7/7 and 10/5, a GRPO step of 4
generations, a PPO step with its critic, an RL step with LoRA, serving at
cache sizes and prompt splits no other set has, the example mixture of
experts trained and served dropless at new shapes, and google-tunix's
Llama-3.2-1B and Qwen3-0.6B at new shapes.
"""

from typing import Any

from benchmarks.calibration import timecal

from nnx_introspect.examples import LlamaConfig

U = "benchmarks.calibration.sets.unseen6:"
M = timecal.M
E = "nnx_introspect.examples:"

CONFIGS: dict[str, LlamaConfig] = {
    # width 640, 8 layers, GQA 10/2 (5:1, head 64)
    "llama_d640_l8": timecal._llama(640, 8, 10, 2, 1792),
    # width 896, 6 layers, MHA 7/7 (head 128)
    "llama_d896_l6": timecal._llama(896, 6, 7, 7, 2432),
    # width 1280, 3 layers, GQA 10/5 (2:1, head 128)
    "llama_d1280_l3": timecal._llama(1280, 3, 10, 5, 3456),
}


llama_d640_l8 = timecal.llama_factory(CONFIGS, "llama_d640_l8")
llama_d896_l6 = timecal.llama_factory(CONFIGS, "llama_d896_l6")
llama_d1280_l3 = timecal.llama_factory(CONFIGS, "llama_d1280_l3")
llama_d640_l8_critic = timecal.llama_factory(CONFIGS, "llama_d640_l8", value_head=True)


CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "unseen6 step d640 L8 GQA5 20x1024": timecal.step(U + "llama_d640_l8", (20, 1024)),
    "unseen6 step d896 L6 MHA 6x4096 2 microbatches": timecal.step(
        U + "llama_d896_l6", (6, 4096), microbatches=2
    ),
    "unseen6 step d1280 L3 GQA2 16x768": timecal.step(U + "llama_d1280_l3", (16, 768)),
    "unseen6 step moe 400m dropless 6x1024": timecal.step(E + "moe_400m", (6, 1024)),
    "unseen6 serve d640 L8 GQA5 48x2048 prompt 384 by 6": timecal.serve(
        U + "llama_d640_l8",
        sequences=48,
        context=2048,
        prompt=384,
        prefill_sequences=6,
    ),
    "unseen6 serve d1280 L3 GQA2 6x6144 prompt 1536 by 3": timecal.serve(
        U + "llama_d1280_l3",
        sequences=6,
        context=6144,
        prompt=1536,
        prefill_sequences=3,
    ),
    "unseen6 serve moe 400m dropless 12x2048 prompt 512 by 3": timecal.serve(
        E + "moe_400m",
        sequences=12,
        context=2048,
        prompt=512,
        prefill_sequences=3,
    ),
    "unseen6 rl d896 L6 GRPO 3x4 80+112": (
        "rl",
        {
            "target": U + "llama_d896_l6",
            "batch": 3,
            "generations": 4,
            "prompt": 80,
            "completion": 112,
        },
    ),
    "unseen6 rl d640 L8 PPO 6x1 160+96 critic d640": (
        "rl",
        {
            "target": U + "llama_d640_l8",
            "batch": 6,
            "generations": 1,
            "prompt": 160,
            "completion": 96,
            "critic": U + "llama_d640_l8_critic",
        },
    ),
    "unseen6 rl d1280 L3 GRPO 4x2 192+64 LoRA 16": (
        "rl",
        {
            "target": U + "llama_d1280_l3",
            "batch": 4,
            "generations": 2,
            "prompt": 192,
            "completion": 64,
            "lora": 16,
        },
    ),
    "unseen6 serve tunix Llama-3.2-1B 12x3072 prompt 768 by 3": timecal.serve(
        M + "tunix_llama3_1b",
        mesh=timecal.TUNIX_MESH,
        init_cache=M + "tunix_cache",
        sequences=12,
        context=3072,
        prompt=768,
        prefill_sequences=3,
    ),
    "unseen6 serve tunix Qwen3-0.6B bf16 40x1024 prompt 128 by 10": timecal.serve(
        M + "tunix_qwen3_0p6b_bf16",
        mesh=timecal.TUNIX_MESH,
        init_cache=M + "tunix_cache",
        sequences=40,
        context=1024,
        prompt=128,
        prefill_sequences=10,
    ),
}

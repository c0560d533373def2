"""A fourth set of programs the time model never saw (round 4): the blind check.

``PYTHONPATH=src:. python benchmarks/calibration/timecal.py chip OUT.jsonl HLO_DIR
--set unseen4``
runs these cases through ``timecal.py``'s machinery (``measure=`` on the
present chip, each program's HLO captured). They were written down before
the constants ``tpu-v5e/4`` were fitted and run on the chip after: widths 640,
1,024 and 1,408, head ratios 10/2, 8/2 and 11/1, a PPO step with its critic,
an RL step with LoRA, serving at cache sizes and prompt splits no other set
has, the example mixture of experts trained dropless at a new shape, and
google-tunix's Llama-3.2-1B and Qwen3-0.6B at new shapes.
"""

from typing import Any

from benchmarks.calibration import timecal

from nnx_introspect.examples import LlamaConfig

U = "benchmarks.calibration.sets.unseen4:"
M = timecal.M
E = "nnx_introspect.examples:"

CONFIGS: dict[str, LlamaConfig] = {
    # width 640, 10 layers, GQA 10/2 (5:1, head 64)
    "llama_d640_l10": timecal._llama(640, 10, 10, 2, 1792),
    # width 1024, 6 layers, GQA 8/2 (4:1, head 128)
    "llama_d1024_l6": timecal._llama(1024, 6, 8, 2, 2816),
    # width 1408, 3 layers, MQA 11/1 (head 128), a 48k vocabulary
    "llama_d1408_l3": timecal._llama(1408, 3, 11, 1, 3840, vocab=48000),
}


llama_d640_l10 = timecal.llama_factory(CONFIGS, "llama_d640_l10")
llama_d1024_l6 = timecal.llama_factory(CONFIGS, "llama_d1024_l6")
llama_d1408_l3 = timecal.llama_factory(CONFIGS, "llama_d1408_l3")
llama_d640_l10_critic = timecal.llama_factory(
    CONFIGS, "llama_d640_l10", value_head=True
)


CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "unseen4 step d640 L10 GQA5 16x1024": timecal.step(
        U + "llama_d640_l10", (16, 1024)
    ),
    "unseen4 step d1024 L6 GQA4 8x2048 remat dots_saveable": timecal.step(
        U + "llama_d1024_l6", (8, 2048), remat={"LlamaLayer": "dots_saveable"}
    ),
    "unseen4 step d1408 L3 MQA v48k 32x512 4 microbatches": timecal.step(
        U + "llama_d1408_l3", (32, 512), microbatches=4
    ),
    "unseen4 step moe 400m dropless 4x2048": timecal.step(E + "moe_400m", (4, 2048)),
    "unseen4 serve d640 L10 GQA5 48x2048 prompt 256 by 8": timecal.serve(
        U + "llama_d640_l10",
        sequences=48,
        context=2048,
        prompt=256,
        prefill_sequences=8,
    ),
    "unseen4 serve d1024 L6 GQA4 12x8192 prompt 2048 by 2": timecal.serve(
        U + "llama_d1024_l6",
        sequences=12,
        context=8192,
        prompt=2048,
        prefill_sequences=2,
    ),
    "unseen4 rl d640 L10 PPO 8x1 192+64 critic d640": (
        "rl",
        {
            "target": U + "llama_d640_l10",
            "batch": 8,
            "generations": 1,
            "prompt": 192,
            "completion": 64,
            "critic": U + "llama_d640_l10_critic",
        },
    ),
    "unseen4 rl d1024 L6 GRPO 4x2 64+192 LoRA 8": (
        "rl",
        {
            "target": U + "llama_d1024_l6",
            "batch": 4,
            "generations": 2,
            "prompt": 64,
            "completion": 192,
            "lora": 8,
        },
    ),
    "unseen4 serve tunix Llama-3.2-1B 32x1024 prompt 128 by 8": timecal.serve(
        M + "tunix_llama3_1b",
        mesh=timecal.TUNIX_MESH,
        init_cache=M + "tunix_cache",
        sequences=32,
        context=1024,
        prompt=128,
        prefill_sequences=8,
    ),
    "unseen4 serve tunix Qwen3-0.6B bf16 16x1024 prompt 512 by 4": timecal.serve(
        M + "tunix_qwen3_0p6b_bf16",
        mesh=timecal.TUNIX_MESH,
        init_cache=M + "tunix_cache",
        sequences=16,
        context=1024,
        prompt=512,
        prefill_sequences=4,
    ),
}

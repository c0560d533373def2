"""A seventh set of programs the time model never saw (round 7): the blind check.

``PYTHONPATH=src:. python benchmarks/calibration/timecal.py chip OUT.jsonl HLO_DIR
--set unseen7``
runs these cases through ``timecal.py``'s machinery (``measure=`` on the
present chip, each program's HLO captured). They were written down before
the constants ``tpu-v5e/7`` were fitted and run on the chip after: the
example mixture of experts trained dropless and by capacity, and served
both ways, at shapes no other set has (issue 43's check), beside widths
768 and 1,536, head ratios 12/4 and 12/12, a GRPO step of 8 generations
and serving at a cache size and prompt split no other set has.
"""

from typing import Any

from benchmarks.calibration import timecal

from nnx_introspect.examples import LlamaConfig

U = "benchmarks.calibration.sets.unseen7:"
E = "nnx_introspect.examples:"

CONFIGS: dict[str, LlamaConfig] = {
    # width 768, 10 layers, GQA 12/4 (3:1, head 64)
    "llama_d768_l10": timecal._llama(768, 10, 12, 4, 2048),
    # width 1536, 4 layers, MHA 12/12 (head 128)
    "llama_d1536_l4": timecal._llama(1536, 4, 12, 12, 4096),
}


llama_d768_l10 = timecal.llama_factory(CONFIGS, "llama_d768_l10")
llama_d1536_l4 = timecal.llama_factory(CONFIGS, "llama_d1536_l4")

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "unseen7 step moe 400m dropless 2x2048": timecal.step(E + "moe_400m", (2, 2048)),
    "unseen7 step moe 400m dropless 10x768": timecal.step(E + "moe_400m", (10, 768)),
    "unseen7 step moe 400m capacity 6x1024": timecal.step(
        timecal.M + "moe_400m_capacity", (6, 1024)
    ),
    "unseen7 serve moe 400m dropless 10x3072 prompt 768 by 2": timecal.serve(
        E + "moe_400m",
        sequences=10,
        context=3072,
        prompt=768,
        prefill_sequences=2,
    ),
    "unseen7 serve moe 400m capacity 24x1024 prompt 192 by 6": timecal.serve(
        timecal.M + "moe_400m_capacity",
        sequences=24,
        context=1024,
        prompt=192,
        prefill_sequences=6,
    ),
    "unseen7 step d768 L10 GQA3 12x1024": timecal.step(
        U + "llama_d768_l10", (12, 1024)
    ),
    "unseen7 step d1536 L4 MHA 4x2048": timecal.step(U + "llama_d1536_l4", (4, 2048)),
    "unseen7 serve d768 L10 GQA3 40x1536 prompt 320 by 5": timecal.serve(
        U + "llama_d768_l10",
        sequences=40,
        context=1536,
        prompt=320,
        prefill_sequences=5,
    ),
    "unseen7 rl d768 L10 GRPO 2x8 96+96": (
        "rl",
        {
            "target": U + "llama_d768_l10",
            "batch": 2,
            "generations": 8,
            "prompt": 96,
            "completion": 96,
        },
    ),
}

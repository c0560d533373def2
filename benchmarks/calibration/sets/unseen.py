"""Programs the time model's fit never saw: other shapes, tried as a user would.

``PYTHONPATH=src:. python benchmarks/calibration/timecal.py chip OUT.jsonl HLO_DIR
--set unseen``
runs these cases through ``timecal.py``'s machinery (``measure=`` on the
present chip, each program's HLO captured): models of widths, depths, head
ratios, vocabularies and sequence lengths none of the calibration table's
programs has, and the example's serving engine prefill (``prefill=True``,
after its fix) at the shape whose old prefill ran 1.59 s. ``timefit.py``
holds the shipped constants' estimates against them.
"""

from typing import Any

from benchmarks.calibration import timecal

from nnx_introspect.examples import LlamaConfig

U = "benchmarks.calibration.sets.unseen:"

UNSEEN_CONFIGS: dict[str, LlamaConfig] = {
    # width 640, 6 layers, GQA 10/5 (2:1), a 50,304-token vocabulary
    "llama_d640_l6": timecal._llama(640, 6, 10, 5, 1792, vocab=50304),
    # width 896, 10 layers, GQA 14/2 (7:1)
    "llama_d896_l10": timecal._llama(896, 10, 14, 2, 2432),
    # width 1280, 3 layers, MHA 10/10 (head 128)
    "llama_d1280_l3": timecal._llama(1280, 3, 10, 10, 3456),
}


llama_d640_l6 = timecal.llama_factory(UNSEEN_CONFIGS, "llama_d640_l6")
llama_d896_l10 = timecal.llama_factory(UNSEEN_CONFIGS, "llama_d896_l10")
llama_d1280_l3 = timecal.llama_factory(UNSEEN_CONFIGS, "llama_d1280_l3")


CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "unseen step d640 L6 GQA2 v50k 16x512": timecal.step(
        U + "llama_d640_l6", (16, 512)
    ),
    "unseen step d896 L10 GQA7 4x2048": timecal.step(U + "llama_d896_l10", (4, 2048)),
    "unseen step d1280 L3 MHA 2x4096": timecal.step(U + "llama_d1280_l3", (2, 4096)),
    "unseen step d896 L10 GQA7 8x1024 2 microbatches": timecal.step(
        U + "llama_d896_l10", (8, 1024), microbatches=2
    ),
    "unseen serve d896 L10 GQA7 64x1024 prompt 128 by 16": timecal.serve(
        U + "llama_d896_l10",
        sequences=64,
        context=1024,
        prompt=128,
        prefill_sequences=16,
    ),
    "unseen serve d640 L6 GQA2 8x4096 one prompt of 2048": timecal.serve(
        U + "llama_d640_l6",
        sequences=8,
        context=4096,
        prompt=2048,
        prefill_sequences=1,
    ),
    "unseen serve d1024 L16 32x8192 prompt 256 by 8 (engine prefill)": timecal.serve(
        timecal.M + "llama_d1024_l16",
        sequences=32,
        context=8192,
        prompt=256,
        prefill_sequences=8,
    ),
    "unseen rl d640 L6 GRPO 2x4 128+128": (
        "rl",
        {
            "target": U + "llama_d640_l6",
            "batch": 2,
            "generations": 4,
            "prompt": 128,
            "completion": 128,
        },
    ),
}

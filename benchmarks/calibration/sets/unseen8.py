"""An eighth set: the RL rollout's decode step at few sequences (issue 55, item 7).

``PYTHONPATH=src:. python benchmarks/calibration/timecal.py chip OUT.jsonl HLO_DIR
--set unseen8``
runs these cases through ``timecal.py``'s machinery (``measure=`` on the
present chip, each program's HLO captured). Written down after the
constants ``tpu-v5e/7`` were fitted, to find why a GRPO rollout's decode
step at 2 prompts x 4 generations is over-estimated in deep, narrow models:
GRPO at 8 sequences over depths 6 to 32 and widths 384 to 1,024 (none of
them a shape another set has, nor the two the issue quotes), each program
profiled on the chip (``TIMECAL_PROFILE=1``: the device's own time per
program beside the host's wall time per step).
"""

from typing import Any

from benchmarks.calibration import timecal

from nnx_introspect.examples import LlamaConfig

U = "benchmarks.calibration.sets.unseen8:"

CONFIGS: dict[str, LlamaConfig] = {
    # width 384, 32 layers, MHA 6/6 (head 64)
    "llama_d384_l32": timecal._llama(384, 32, 6, 6, 1024),
    # width 448, 20 layers, MHA 7/7 (head 64)
    "llama_d448_l20": timecal._llama(448, 20, 7, 7, 1216),
    # width 576, 16 layers, GQA 9/3 (head 64)
    "llama_d576_l16": timecal._llama(576, 16, 9, 3, 1536),
    # width 640, 28 layers, GQA 10/2 (head 64)
    "llama_d640_l28": timecal._llama(640, 28, 10, 2, 1728),
    # width 1024, 6 layers, GQA 8/2 (head 128)
    "llama_d1024_l6": timecal._llama(1024, 6, 8, 2, 2816),
}

llama_d384_l32 = timecal.llama_factory(CONFIGS, "llama_d384_l32")
llama_d448_l20 = timecal.llama_factory(CONFIGS, "llama_d448_l20")
llama_d576_l16 = timecal.llama_factory(CONFIGS, "llama_d576_l16")
llama_d640_l28 = timecal.llama_factory(CONFIGS, "llama_d640_l28")
llama_d1024_l6 = timecal.llama_factory(CONFIGS, "llama_d1024_l6")


def _grpo(name: str, batch: int, generations: int, prompt: int, completion: int) -> Any:
    return (
        "rl",
        {
            "target": U + name,
            "batch": batch,
            "generations": generations,
            "prompt": prompt,
            "completion": completion,
        },
    )


CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "unseen8 rl d384 L32 GRPO 2x4 64+96": _grpo("llama_d384_l32", 2, 4, 64, 96),
    "unseen8 rl d448 L20 GRPO 2x4 96+64": _grpo("llama_d448_l20", 2, 4, 96, 64),
    "unseen8 rl d576 L16 GRPO 1x8 64+80": _grpo("llama_d576_l16", 1, 8, 64, 80),
    "unseen8 rl d640 L28 GRPO 2x4 80+64": _grpo("llama_d640_l28", 2, 4, 80, 64),
    "unseen8 rl d1024 L6 GRPO 2x4 64+96": _grpo("llama_d1024_l6", 2, 4, 64, 96),
    # not run yet (the session's chip time ran out): 16 sequences beside 8
    "unseen8 rl d576 L16 GRPO 4x4 64+80": _grpo("llama_d576_l16", 4, 4, 64, 80),
}

# the kind the issue quotes (24 layers at width 512, 12 at width 768, 2 x 4),
# at prompt and completion lengths of this set's own: a check, never fitted
llama_d512_l24 = timecal.llama_factory(
    {"llama_d512_l24": timecal._llama(512, 24, 8, 8, 1408)}, "llama_d512_l24"
)
llama_d768_l12 = timecal.llama_factory(
    {"llama_d768_l12": timecal._llama(768, 12, 12, 4, 2048)}, "llama_d768_l12"
)
CASES["unseen8 rl d512 L24 GRPO 2x4 64+64"] = _grpo("llama_d512_l24", 2, 4, 64, 64)
CASES["unseen8 rl d768 L12 GRPO 2x4 64+64"] = _grpo("llama_d768_l12", 2, 4, 64, 64)

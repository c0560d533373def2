"""Programs for the time model: each one's optimized HLO, estimate and chip time.

The time model reads per-instruction FLOPs and bytes from each compiled
program's optimized HLO text and is calibrated on a real TPU v5e chip. This
script runs cases (calibrate.py's 13 with ``--old``, :data:`CASES`, this
file's own, or with ``--set NAME`` a blind set of ``sets/NAME.py``) through
the library's reports, as ``benchmarks/calibration/calibrate.py`` does, and
for every program row ("step", "prefill", "decode", the RL phases) keeps

* the program's optimized HLO text, gzip-compressed, in
  ``HLO_DIR/<case-slug>__<index>__<module>.hlo.gz`` (``timecal_hook.py``,
  named as the library's program-text hook, ``NNX_INTROSPECT_PROGRAM_TEXT_HOOK``,
  in this process's environment, which the child processes a deviceless
  compile runs in inherit); the row's ``hlo`` names its file,
  matched by the HLO module's name (``jit_train``, ``jit_prefill``,
  ``jit_decode``, ``jit_program`` for a forward) and the compile's memory
  analysis, in the order of compilation;
* XLA's memory analysis, flops and bytes accessed, the report's estimate
  ``[low, high]``, the measured median/min/max seconds (chip mode) and the
  row's tokens; an RL decode row is one token's step (``per_token_seconds``,
  ``estimate_per_token``) with the completion's length and total beside it.

Modes (from the repository root)::

    PYTHONPATH=src:.:.chipdeps python benchmarks/calibration/timecal.py chip \
        OUT.jsonl HLO_DIR [--old | --set NAME] [--group N | --cases SUBSTRING]
    PYTHONPATH=src:.:.chipdeps python benchmarks/calibration/timecal.py predict \
        OUT.jsonl HLO_DIR [--old | --set NAME] [--group N | --cases SUBSTRING]
    python benchmarks/calibration/timecal.py list [--old | --set NAME]

``chip``: every program compiled on the present device (``topology=None``)
and run through ``measure=5`` (one warm-up, 5 timed runs), ``cache=False``.
``predict``: compiled deviceless for ``topology="v5e-1"`` (no run). Each case
is appended to OUT as one JSON line when it is done, so a killed run keeps
what it finished; ``--skip-done`` leaves out the cases OUT already holds.
With ``--old``, ``CAL_EDGES='[6, 161]'`` adds calibrate.py's search edges.
``TIMECAL_CASES`` (a substring) and ``TIMECAL_GROUP`` do what the flags do.
``--set unseen3`` runs the third blind set (``sets/unseen3.py``: its cases
and the model factories they name); a set's cases have no group.

``python benchmarks/calibration/timecal.py compare A.jsonl B.jsonl``: per program of the
cases both files hold (a calibrate.py or a timecal.py file), whether XLA's
memory analysis (arguments, outputs, temporaries, aliased bytes) is equal.

The tunix cases need google-tunix 0.1.7's model files, which the chip machine
does not have (no network, no tunix): ``.chipdeps/`` at the repository root
(not committed: ``.git/info/exclude``) holds, unchanged from the wheel
(``pip download --no-deps google-tunix==0.1.7``), ``tunix/models/llama3/
model.py``, ``tunix/models/qwen3/model.py``, ``tunix/generate/mappings.py``,
``tunix/utils/compat.py`` and ``tunix/utils/env_utils.py`` with empty
package ``__init__.py`` files, and qwix 0.1.8 (pure Python; needs absl-py and
opt_einsum) for the quantized case. The model factories here import only
those; tunix's sampler's cache maker is written out (:func:`tunix_cache`).
"""

import argparse
import dataclasses
import json
import os
import re
import sys
import time
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(_HERE))
if _ROOT not in sys.path:  # run as a script: `benchmarks` importable
    sys.path.insert(0, _ROOT)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from benchmarks.calibration import calibrate, timecal_hook  # noqa: E402
from flax import nnx  # noqa: E402

from nnx_introspect.examples import Llama, LlamaConfig  # noqa: E402

# --------------------------------------------------------------------------
# models: the example Llama at several widths, depths and GQA ratios


def _llama(
    d: int, layers: int, heads: int, kv: int, ff: int, vocab: int = 32000
) -> LlamaConfig:
    return LlamaConfig(
        vocab=vocab,
        d_model=d,
        n_layers=layers,
        n_heads=heads,
        d_ff=ff,
        n_kv_heads=kv,
        dtype=jnp.bfloat16,
    )


CONFIGS: dict[str, LlamaConfig] = {
    # width 512, 4 layers, MHA 8/8: 45.6M parameters
    "llama_d512_l4": _llama(512, 4, 8, 8, 1408),
    # width 768, 8 layers, GQA 12/2 (6:1): 98.3M (the RL cases' model)
    "llama_d768_l8": _llama(768, 8, 12, 2, 2048),
    # width 768, 16 layers, GQA 12/2: the depth sweep's third point
    "llama_d768_l16": _llama(768, 16, 12, 2, 2048),
    # width 1024, 16 layers, GQA 16/4 (4:1): 246M (the serving sweep's model)
    "llama_d1024_l16": _llama(1024, 16, 16, 4, 2816),
    # width 1536, 4 layers, MHA 12/12 (head 128): 211M
    "llama_d1536_l4": _llama(1536, 4, 12, 12, 4096),
    # the 128k vocabulary (Llama 3's 128,256) at width 1024, 4 layers, GQA 4:1
    "llama_v128k_d1024_l4": _llama(1024, 4, 16, 4, 2816, vocab=128256),
}


def _factory(name: str) -> Any:
    config = CONFIGS[name]

    def build(rngs: nnx.Rngs) -> Llama:
        return Llama(config, rngs=rngs)

    build.__name__ = build.__qualname__ = name
    build.__doc__ = f"The example Llama: {config}."
    return build


llama_d512_l4 = _factory("llama_d512_l4")
llama_d768_l8 = _factory("llama_d768_l8")
llama_d768_l16 = _factory("llama_d768_l16")
llama_d1024_l16 = _factory("llama_d1024_l16")
llama_d1536_l4 = _factory("llama_d1536_l4")
llama_v128k_d1024_l4 = _factory("llama_v128k_d1024_l4")


def llama_d768_l8_critic(rngs: nnx.Rngs) -> Llama:
    """``llama_d768_l8`` with a value head: the PPO case's critic."""
    config = dataclasses.replace(CONFIGS["llama_d768_l8"], value_head=True)
    return Llama(config, rngs=rngs)


def llama_tiny_critic(rngs: nnx.Rngs) -> Llama:
    """The examples' ``llama_tiny`` with a value head (the smoke PPO's critic)."""
    from nnx_introspect.examples import LLAMA_TINY

    return Llama(dataclasses.replace(LLAMA_TINY, value_head=True), rngs=rngs)


def llama_d1024_l16_int8(rngs: nnx.Rngs) -> Any:
    """``llama_d1024_l16`` quantized by qwix: int8 weights (post-training).

    As ``tests/test_serve_qwix.py`` builds it: ``qwix.quantize_model`` with a
    ``PtqProvider`` whose one rule gives every module int8 weights.
    """
    import qwix

    model = llama_d1024_l16(rngs)
    rules = [qwix.QuantizationRule(module_path=".*", weight_qtype=jnp.int8)]
    return qwix.quantize_model(
        model, qwix.PtqProvider(rules), jnp.zeros((2, 8), jnp.int32)
    )


# --------------------------------------------------------------------------
# models this project did not write: google-tunix 0.1.7's (from .chipdeps/)


def _tunix_llama3(layers: int | None = None) -> Any:
    from tunix.models.llama3.model import ModelConfig  # type: ignore

    config = ModelConfig.llama3p2_1b()
    if layers is not None:
        config = dataclasses.replace(config, num_layers=layers)
    return config


def tunix_llama3_1b(rngs: nnx.Rngs) -> Any:
    """tunix's Llama-3.2-1B as tunix configures it (16 layers, vocab 128,256)."""
    from tunix.models.llama3.model import Llama3  # type: ignore

    return Llama3(_tunix_llama3(), rngs=rngs)


def tunix_llama3_1b_l4(rngs: nnx.Rngs) -> Any:
    """tunix's Llama-3.2-1B with 4 of its 16 layers (a step that fits a v5e)."""
    from tunix.models.llama3.model import Llama3  # type: ignore

    return Llama3(_tunix_llama3(4), rngs=rngs)


def tunix_qwen3_0p6b(rngs: nnx.Rngs) -> Any:
    """tunix's Qwen3-0.6B as tunix configures it (28 layers, vocab 151,936)."""
    from tunix.models.qwen3.model import ModelConfig, Qwen3  # type: ignore

    return Qwen3(ModelConfig.qwen3_0p6b(), rngs=rngs)


def tunix_qwen3_0p6b_l8_bf16(rngs: nnx.Rngs) -> Any:
    """tunix's Qwen3-0.6B with 8 of its 28 layers, bfloat16 compute (``dtype``)."""
    from tunix.models.qwen3.model import ModelConfig, Qwen3  # type: ignore

    config = dataclasses.replace(
        ModelConfig.qwen3_0p6b(), num_layers=8, dtype=jnp.bfloat16
    )
    return Qwen3(config, rngs=rngs)


def tunix_qwen3_0p6b_bf16(rngs: nnx.Rngs) -> Any:
    """tunix's Qwen3-0.6B computing in bfloat16 (its ``dtype``; float32 parameters).

    tunix's default computes in float32, so its keys and values are float32
    and a bfloat16 KV cache does not take them.
    """
    from tunix.models.qwen3.model import ModelConfig, Qwen3  # type: ignore

    config = dataclasses.replace(ModelConfig.qwen3_0p6b(), dtype=jnp.bfloat16)
    return Qwen3(config, rngs=rngs)


def tunix_llama3_tiny(rngs: nnx.Rngs) -> Any:
    """tunix's Llama 3 at a tiny size (the smoke cases')."""
    from tunix.models.llama3.model import Llama3  # type: ignore

    config = dataclasses.replace(
        _tunix_llama3(2), vocab_size=1024, embed_dim=128, hidden_dim=256
    )
    config = dataclasses.replace(config, num_heads=4, head_dim=32, num_kv_heads=2)
    return Llama3(config, rngs=rngs)


def tunix_qwen3_tiny(rngs: nnx.Rngs) -> Any:
    """tunix's Qwen3 at a tiny size, bfloat16 compute (the smoke cases')."""
    from tunix.models.qwen3.model import ModelConfig, Qwen3  # type: ignore

    config = dataclasses.replace(
        ModelConfig.qwen3_0p6b(),
        num_layers=2,
        vocab_size=1024,
        embed_dim=128,
        hidden_dim=256,
        num_heads=4,
        head_dim=32,
        num_kv_heads=2,
        dtype=jnp.bfloat16,
    )
    return Qwen3(config, rngs=rngs)


def moe_400m_capacity(rngs: nnx.Rngs) -> Any:
    """``moe_400m`` dispatching by a capacity factor (one-hot einsums)."""
    from nnx_introspect.examples import MOE_400M, MoeLlama

    return MoeLlama(dataclasses.replace(MOE_400M, dispatch="capacity"), rngs=rngs)


def llama_tiny_int8(rngs: nnx.Rngs) -> Any:
    """The examples' ``llama_tiny`` quantized by qwix (the smoke cases')."""
    import qwix

    from nnx_introspect.examples import llama_tiny

    rules = [qwix.QuantizationRule(module_path=".*", weight_qtype=jnp.int8)]
    return qwix.quantize_model(
        llama_tiny(rngs), qwix.PtqProvider(rules), jnp.zeros((2, 8), jnp.int32)
    )


def tunix_cache(model: Any, sequences: int, context: int, dtype: Any) -> Any:
    """tunix's sampler's KV cache (``tunix.generate.sampler._init_cache``), as it is.

    Written out here (the sampler imports most of tunix): per layer ``k`` and
    ``v`` ``[sequences, context, kv heads, head_dim]`` and an ``end_index``.
    """
    config = model.config
    shape = (sequences, context, config.num_kv_heads, config.head_dim)
    return {
        f"layer_{i}": {
            "k": jnp.zeros(shape, dtype=dtype),
            "v": jnp.zeros(shape, dtype=dtype),
            "end_index": jnp.zeros((sequences,), dtype=jnp.int32),
        }
        for i in range(config.num_layers)
    }


def tunix_lm_loss(model: Any, batch: tuple[Any, ...]) -> Any:
    """Next-token cross-entropy, tunix's calling convention (fit_tunix.py's loss)."""
    import optax

    tokens = batch[0]
    b, t = tokens.shape
    positions = jnp.broadcast_to(jnp.arange(t), (b, t))
    mask = jnp.broadcast_to(jnp.tril(jnp.ones((t, t), dtype=bool)), (b, t, t))
    logits, _ = model(tokens, positions, None, mask)
    return optax.softmax_cross_entropy_with_integer_labels(
        logits[:, :-1].astype(jnp.float32), tokens[:, 1:]
    ).mean()


# --------------------------------------------------------------------------
# the cases

M = "benchmarks.calibration.timecal:"
TUNIX_MESH = "fsdp=1,tp=1"  # tunix's annotations name both axes

# name -> (kind, arguments): "step" {target, batch, [mesh, loss, remat,
# microbatches, lora]}; "serve" {target, [mesh, init_cache, weights],
# serve_memory_report's sizes}; "rl" {target, rl_memory_report's sizes, [critic]}


def step(target: str, batch: tuple[int, int], **options: Any) -> Any:
    """A ``"step"`` case of any target (the unseen sets' cases)."""
    return ("step", {"target": target, "batch": batch, **options})


def serve(target: str, **sizes: Any) -> Any:
    """A ``"serve"`` case of any target (the unseen sets' cases)."""
    return ("serve", {"target": target, **sizes})


def llama_factory(configs: dict[str, LlamaConfig], name: str, **changes: Any) -> Any:
    """A model factory named ``name``: the example Llama of ``configs[name]``."""

    def build(rngs: nnx.Rngs) -> Llama:
        return Llama(dataclasses.replace(configs[name], **changes), rngs=rngs)

    build.__name__ = build.__qualname__ = name
    return build


def _serve_case(target: str, **sizes: Any) -> tuple[str, dict[str, Any]]:
    return ("serve", {"target": M + target, **sizes})


def _step_case(target: str, batch: tuple[int, int], **options: Any) -> Any:
    return ("step", {"target": M + target, "batch": batch, **options})


_GROUP_1: dict[str, tuple[str, dict[str, Any]]] = {
    # training steps of the example Llama (AdamW, lm loss, bf16 compute):
    # widths 512/768/1536/1024, depths 4/8/16, MHA and GQA 6:1 and 4:1,
    # sequences 256 to 8,192, the 128k vocabulary
    "step d512 L4 MHA 64x256": _step_case("llama_d512_l4", (64, 256)),
    "step d512 L4 MHA 1x8192": _step_case("llama_d512_l4", (1, 8192)),
    "step d768 L8 GQA6 8x1024": _step_case("llama_d768_l8", (8, 1024)),
    "step d768 L16 GQA6 8x1024": _step_case("llama_d768_l16", (8, 1024)),
    "step d1536 L4 MHA 8x1024": _step_case("llama_d1536_l4", (8, 1024)),
    "step v128k d1024 L4 GQA4 4x1024": _step_case("llama_v128k_d1024_l4", (4, 1024)),
}

_GROUP_2: dict[str, tuple[str, dict[str, Any]]] = {
    # remat policies, microbatches, LoRA
    "step d768 L16 16x1024 remat nothing_saveable": _step_case(
        "llama_d768_l16", (16, 1024), remat={"LlamaLayer": "nothing_saveable"}
    ),
    "step d1536 L4 MHA 16x1024 remat dots_with_no_batch_dims_saveable": _step_case(
        "llama_d1536_l4",
        (16, 1024),
        remat={"LlamaLayer": "dots_with_no_batch_dims_saveable"},
    ),
    "step d768 L8 32x1024 4 microbatches": _step_case(
        "llama_d768_l8", (32, 1024), microbatches=4
    ),
    "step d1024 L16 8x1024 LoRA 16": _step_case("llama_d1024_l16", (8, 1024), lora=16),
    # every RL phase: a PPO step (prefill, decode, reference, values, train,
    # critic train) of the 98M model with a critic of its size
    "rl d768 L8 PPO 16x1 256+128 critic d768": (
        "rl",
        {
            "target": M + "llama_d768_l8",
            "batch": 16,
            "generations": 1,
            "prompt": 256,
            "completion": 128,
            "critic": M + "llama_d768_l8_critic",
        },
    ),
}

REFUSED: dict[str, tuple[str, dict[str, Any]]] = {
    # refused by XLA:TPU at compile (20.56 and 26.81 GB predicted): run on the
    # chip once (no time, a memory edge); not in a group
    "step d1024 L16 GQA4 4x2048": _step_case("llama_d1024_l16", (4, 2048)),
    "step d1024 L16 16x1024 remat dots_saveable": _step_case(
        "llama_d1024_l16", (16, 1024), remat={"LlamaLayer": "dots_saveable"}
    ),
}
"""Cases the chip refused at compile (``--refused`` runs them)."""

_GROUP_3: dict[str, tuple[str, dict[str, Any]]] = {
    # one model served at five cache sizes (32 sequences, 256-token prompts by 8)
    **{
        f"serve d1024 L16 32x{context} prompt 256 by 8": _serve_case(
            "llama_d1024_l16",
            sequences=32,
            context=context,
            prompt=256,
            prefill_sequences=8,
        )
        for context in (512, 1024, 2048, 4096, 8192)
    },
    # the 128k vocabulary: one prompt of 1,024 / 2,048 / 4,096 tokens into an
    # 8,192-position cache (the 10x-slower prefill)
    **{
        f"serve v128k d1024 L4 {sequences}x8192 one prompt of {prompt}": _serve_case(
            "llama_v128k_d1024_l4",
            sequences=sequences,
            context=8192,
            prompt=prompt,
            prefill_sequences=1,
        )
        for sequences, prompt in ((2, 1024), (4, 2048), (8, 4096))
    },
    # a qwix-quantized model (int8 weights, the model's own leaves) served
    "serve d1024 L16 int8 (qwix) 32x2048 prompt 512 by 8": _serve_case(
        "llama_d1024_l16_int8",
        sequences=32,
        context=2048,
        prompt=512,
        prefill_sequences=8,
        weights=None,
    ),
}

_TUNIX: dict[str, tuple[str, dict[str, Any]]] = {
    # google-tunix 0.1.7's own models, from .chipdeps/ (each group's last
    # cases: importing tunix's model sets flax's `flax_always_shard_variable`
    # off for the rest of the process)
    "serve tunix Llama-3.2-1B 16x2048 prompt 1024 by 4": _serve_case(
        "tunix_llama3_1b",
        mesh=TUNIX_MESH,
        init_cache=M + "tunix_cache",
        sequences=16,
        context=2048,
        prompt=1024,
        prefill_sequences=4,
    ),
    "step tunix Llama-3.2-1B 4 layers f32 4x1024": _step_case(
        "tunix_llama3_1b_l4",
        (4, 1024),
        mesh={"fsdp": 1, "tp": 1},
        loss=M + "tunix_lm_loss",
    ),
    "step tunix Qwen3-0.6B 8 layers bf16 4x1024": _step_case(
        "tunix_qwen3_0p6b_l8_bf16",
        (4, 1024),
        mesh={"fsdp": 1, "tp": 1},
        loss=M + "tunix_lm_loss",
    ),
    "serve tunix Qwen3-0.6B bf16 16x2048 prompt 1024 by 4": _serve_case(
        "tunix_qwen3_0p6b_bf16",
        mesh=TUNIX_MESH,
        init_cache=M + "tunix_cache",
        sequences=16,
        context=2048,
        prompt=1024,
        prefill_sequences=4,
    ),
}

_TUNIX_GROUP = {
    "serve tunix Llama-3.2-1B 16x2048 prompt 1024 by 4": 3,
    "step tunix Llama-3.2-1B 4 layers f32 4x1024": 1,
    "step tunix Qwen3-0.6B 8 layers bf16 4x1024": 1,
    "serve tunix Qwen3-0.6B bf16 16x2048 prompt 1024 by 4": 3,
}

CASES: dict[str, tuple[str, dict[str, Any]]] = {}
GROUP_OF: dict[str, int] = {}
"""The chip group of each new case: calls of under 9 minutes each."""
for _group, _cases in ((1, _GROUP_1), (2, _GROUP_2), (3, _GROUP_3)):
    for _name, _case in _cases.items():
        CASES[_name], GROUP_OF[_name] = _case, _group
    for _name, _case in _TUNIX.items():  # last in their group
        if _TUNIX_GROUP[_name] == _group:
            CASES[_name], GROUP_OF[_name] = _case, _group
"""This file's cases (calibrate.py's are ``--old``), by group."""

SMOKE: dict[str, tuple[str, dict[str, Any]]] = {
    "smoke step tiny 8x128 LoRA 4": (
        "step",
        {"target": calibrate.TINY, "batch": (8, 128), "lora": 4},
    ),
    "smoke serve tiny 4x256 prompt 64 by 2": (
        "serve",
        {
            "target": calibrate.TINY,
            "sequences": 4,
            "context": 256,
            "prompt": 64,
            "prefill_sequences": 2,
        },
    ),
    "smoke rl tiny PPO 4x1 16+16": (
        "rl",
        {
            "target": calibrate.TINY,
            "batch": 4,
            "generations": 1,
            "prompt": 16,
            "completion": 16,
            "critic": M + "llama_tiny_critic",
        },
    ),
    "smoke serve tiny int8 (qwix) 4x256 prompt 64 by 2": (
        "serve",
        {
            "target": M + "llama_tiny_int8",
            "sequences": 4,
            "context": 256,
            "prompt": 64,
            "prefill_sequences": 2,
            "weights": None,
        },
    ),
    "smoke serve tunix Llama3 tiny 4x256 prompt 64 by 2": (
        "serve",
        {
            "target": M + "tunix_llama3_tiny",
            "mesh": TUNIX_MESH,
            "init_cache": M + "tunix_cache",
            "sequences": 4,
            "context": 256,
            "prompt": 64,
            "prefill_sequences": 2,
        },
    ),
    "smoke step tunix Llama3 tiny 4x128": (
        "step",
        {
            "target": M + "tunix_llama3_tiny",
            "mesh": {"fsdp": 1, "tp": 1},
            "loss": M + "tunix_lm_loss",
            "batch": (4, 128),
        },
    ),
    "smoke serve tunix Qwen3 tiny 4x256 prompt 64 by 2": (
        "serve",
        {
            "target": M + "tunix_qwen3_tiny",
            "mesh": TUNIX_MESH,
            "init_cache": M + "tunix_cache",
            "sequences": 4,
            "context": 256,
            "prompt": 64,
            "prefill_sequences": 2,
        },
    ),
}
"""Tiny cases to try the script on (``--smoke``; the CPU measures them too)."""

GROUPS: dict[int, tuple[str, ...]] = {}
"""Each chip group's cases, in their order."""

FAMILY = {
    "step": "train",
    "prefill": "prefill",
    "decode": "decode",
    "reference": "reference",
    "values": "values",
    "train": "rl-train",
    "critic train": "rl-train",
}

MODULE = {
    "step": "jit_train",
    "prefill": "jit_prefill",
    "decode": "jit_decode",
    "reference": "jit_program",
    "values": "jit_program",
    "train": "jit_train",
    "critic train": "jit_train",
}
"""The HLO module each row's program is compiled as."""


# --------------------------------------------------------------------------
# running a case


def _step(args: dict[str, Any], topology: str | None, measure: int | None) -> Any:
    from nnx_introspect import step_memory_report

    b, t = args["batch"]
    options = {k: args[k] for k in ("microbatches", "remat", "lora") if args.get(k)}
    return step_memory_report(
        args["target"],
        args.get("mesh", {"fsdp": 1}),
        jax.ShapeDtypeStruct((b, t), jnp.int32),
        loss=args.get("loss", "lm"),
        optimizer="adamw",
        topology=topology,
        measure=measure,
        cache=False,
        **options,
    )


_SERVE = ("sequences", "context", "prompt", "prefill_sequences", "init_cache")


def _serve(args: dict[str, Any], topology: str | None, measure: int | None) -> Any:
    from nnx_introspect import serve_memory_report

    kwargs = {k: args[k] for k in _SERVE if k in args}
    if "weights" in args:
        kwargs["weights"] = args["weights"]
    return serve_memory_report(
        args["target"],
        args.get("mesh", "tp=1"),
        topology=topology,
        measure=measure,
        cache=False,
        **kwargs,
    )


_RL = ("batch", "generations", "prompt", "completion", "critic", "lora")


def _rl(args: dict[str, Any], topology: str | None, measure: int | None) -> Any:
    from nnx_introspect import rl_memory_report

    kwargs = {k: args[k] for k in _RL if k in args}
    return rl_memory_report(
        args["target"],
        "fsdp=1",
        topology=topology,
        measure=measure,
        cache=False,
        **kwargs,
    )


def old_cases() -> dict[str, tuple[str, dict[str, Any]]]:
    """calibrate.py's cases (and its search edges when ``CAL_EDGES`` is set)."""
    edges = os.environ.get("CAL_EDGES")
    out = dict(calibrate.CASES)
    if edges is not None:
        out |= calibrate.edge_cases(*json.loads(edges))
    return out


def slug(name: str) -> str:
    """A case's name as a file name: ``step-d512-l4-mha-64x256``."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _tokens(kind: str, args: dict[str, Any], row: str) -> int | None:
    """The tokens one run of the row's program processes."""
    if kind == "step":
        b, t = args["batch"]
        return b * t
    if kind == "serve":
        if row == "prefill":
            return args.get("prefill_sequences", args["sequences"]) * args["prompt"]
        return args["sequences"]
    sequences = args["batch"] * args["generations"]
    if row == "prefill":
        return sequences * args["prompt"]
    if row == "decode":
        return sequences
    return sequences * (args["prompt"] + args["completion"])


def _match(rows: dict[str, Any], entries: list[dict[str, Any]]) -> list[str]:
    """Give each row its HLO file: module name and memory analysis, then order.

    A row takes the first capture not yet taken whose module is the row's and
    whose memory analysis (arguments, outputs, temporaries, aliased) is the
    row's; failing that, the first capture not yet taken of its module. A
    program compiled twice (the same module and figures) gives two equal
    captures, either of which is the row's program. Returns the files no row
    took (a program compiled twice, a search's tries).
    """
    taken: set[int] = set()
    for name, row in rows.items():
        module = MODULE.get(name)
        row["module"] = module
        row["hlo"] = None
        row["hlo_match"] = None
        if row.get("out_of_memory"):
            continue  # refused at compile: no program, no text
        same = [e for e in entries if e["index"] not in taken and e["module"] == module]
        figures = [
            e for e in same if all(e[k] == row.get(k) for k in timecal_hook.MEMORY)
        ]
        pick, how = (figures[0], "module+memory") if figures else (None, None)
        if pick is None and same:
            pick, how = same[0], "module+order"
        if pick is None:
            continue
        taken.add(pick["index"])
        row["hlo"] = pick["file"]
        row["hlo_match"] = how
        row["hlo_sha256"] = pick["sha256"]
        row["hlo_chars"] = pick["chars"]
    return [e["file"] for e in entries if e["index"] not in taken]


def _compile_seconds(report: Any) -> dict[str, float | None]:
    """Each row's program's compile time, as its report records it."""
    if hasattr(report, "phases"):  # an RL step: each phase from its program
        out = {}
        for phase in report.phases:
            if phase.name in ("prefill", "decode"):
                data = report.programs["rollout"].json_data()[phase.name]
            else:
                data = report.programs[phase.name].json_data()
            out[phase.name] = data.get("compile_seconds")
        return out
    data = report.json_data()
    if "prefill" not in data:
        return {"step": data.get("compile_seconds")}
    return {k: data[k].get("compile_seconds") for k in ("prefill", "decode")}


def _enrich(found: dict[str, Any], kind: str, args: dict[str, Any]) -> None:
    """The time model's fields on each row: family, tokens, measured, per token."""
    for name, row in found["programs"].items():
        row["family"] = FAMILY.get(name, name)
        row["tokens"] = _tokens(kind, args, name)
        measured = row.get("measured") or {}
        for key in ("median_seconds", "min_seconds", "max_seconds"):
            row[key] = measured.get(key)
        est = row.get("estimate")
        if name == "decode":
            # one token's step: a serving decode's estimate is per token; an
            # RL decode's phase estimate is the completion's (`steps` steps)
            steps = row.get("steps", 1) if kind == "rl" else 1
            row["per_token_seconds"] = row["median_seconds"]
            row["estimate_per_token"] = (
                None if not est or est[0] is None else [est[0] / steps, est[1] / steps]
            )
            if kind == "rl":
                row["completion"] = steps
                row["completion_seconds"] = (
                    None
                    if row["median_seconds"] is None
                    else row["median_seconds"] * steps
                )


def run_case(
    name: str,
    cases: dict[str, tuple[str, dict[str, Any]]],
    topology: str | None,
    measure: int | None,
    hlo_dir: str,
    old: bool,
) -> dict[str, Any]:
    """One case, in this process: the report's figures, each row's HLO file."""
    kind, args = cases[name]
    case_slug = slug(name)
    timecal_hook.start_case(hlo_dir, case_slug)
    began = time.perf_counter()
    try:
        if old:
            run = {
                "step": calibrate._step,
                "serve": calibrate._serve,
                "rl": calibrate._rl,
            }[kind]
        else:
            run = {"step": _step, "serve": _serve, "rl": _rl}[kind]
        if os.environ.get("TIMECAL_PROFILE") and topology is None:
            import tempfile

            from benchmarks.calibration import timecal_profile

            trace_dir = tempfile.mkdtemp(prefix="timecal-trace-")
            with jax.profiler.trace(trace_dir):
                report = run(args, topology, measure)
            profile: dict[str, Any] | None = timecal_profile.summarize(trace_dir)
        else:
            report, profile = run(args, topology, measure), None
        out = calibrate._figures(report)
        if profile is not None:
            out["profile"] = profile
        try:
            for row, seconds in _compile_seconds(report).items():
                out["programs"][row]["compile_seconds"] = seconds
        except Exception as error:  # a figure for the grouping only
            print(f"compile seconds not read: {error!r}", file=sys.stderr)
    except Exception as error:  # a refusal or a failure: the answer itself
        out = {
            "programs": {},
            "error": f"{type(error).__name__}: {' '.join(str(error).split())[:600]}",
        }
    seconds = time.perf_counter() - began
    entries = timecal_hook.captured(hlo_dir, case_slug)
    leftover = _match(out["programs"], entries)
    _enrich(out, kind, args)
    from nnx_introspect._xla.toolchain import libtpu_version

    out |= {
        "case": name,
        "slug": case_slug,
        "kind": kind,
        "families": {k: v["family"] for k, v in out["programs"].items()},
        "args": _jsonable(args),
        "model": _model_of(args, kind),
        "old": old,
        "group": None if old else GROUP_OF.get(name),
        "mode": "predict" if topology is not None else "chip",
        "topology": topology,
        "seconds": seconds,
        "hlo_dir": os.path.abspath(hlo_dir),
        "hlo_captured": [
            {k: e[k] for k in ("index", "file", "module", "pid")} for e in entries
        ],
        "hlo_unmatched": leftover,
        "libtpu": libtpu_version(),
        "jax": jax.__version__,
        # the present device's kind (chip mode; deviceless: the topology's)
        "device_kind": None if topology else str(jax.devices()[0].device_kind),
    }
    return out


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _model_of(args: dict[str, Any], kind: str) -> dict[str, Any]:
    """The target's name and, for the example Llama, its sizes."""
    target = args.get("target", calibrate.TARGET)
    name = target.rsplit(":", 1)[-1]
    config = CONFIGS.get(name.removesuffix("_int8").removesuffix("_critic"))
    if name == "llama_336m":
        config = calibrate.LLAMA_336M
    out: dict[str, Any] = {"target": target}
    if config is not None:
        out["config"] = {
            f.name: str(getattr(config, f.name))
            if f.name in ("dtype", "param_dtype")
            else getattr(config, f.name)
            for f in dataclasses.fields(config)
        }
    if kind == "rl" and args.get("critic"):
        out["critic"] = args["critic"]
    return out


def selected(
    old: bool,
    cases_filter: str | None,
    group: int | None,
    smoke: bool = False,
    refused: bool = False,
    case_set: str | None = None,
) -> dict[str, tuple[str, dict[str, Any]]]:
    """The cases to run, in their order."""
    cases = old_cases() if old else dict(SMOKE if smoke else CASES)
    if refused:
        cases = dict(REFUSED)
    if case_set is not None:
        cases = set_cases(case_set)
    groups = {} if case_set is not None else GROUP_OF  # a set's cases have none
    out = {}
    for name, case in cases.items():
        if cases_filter and cases_filter not in name:
            continue
        if group is not None and not old and groups.get(name) != group:
            continue
        if old and "(max_" in name and os.environ.get("CAL_EDGES") is None:
            continue
        out[name] = case
    return out


SETS = tuple(
    sorted(
        name.removesuffix(".py")
        for name in os.listdir(os.path.join(_HERE, "sets"))
        if name.endswith(".py") and not name.startswith("_")
    )
)
"""The blind sets ``--set`` names: ``sets/unseen.py`` ... ``sets/unseen7.py``."""


def set_cases(name: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """The cases of the blind set ``sets/<name>.py``, in their order."""
    import importlib

    if name not in SETS:
        raise SystemExit(f"no case set {name!r}: one of {', '.join(SETS)}")
    module = importlib.import_module(f"benchmarks.calibration.sets.{name}")
    return dict(module.CASES)


def _done(path: str) -> set[str]:
    if not os.path.exists(path):
        return set()
    with open(path) as f:
        return {json.loads(line)["case"] for line in f if line.strip()}


def _child_path() -> None:
    """Put the repository root on the children's path (they import the hook)."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if _ROOT not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([_ROOT, *paths])


def run_all(
    mode: str,
    out: str,
    hlo_dir: str,
    cases: dict[str, tuple[str, dict[str, Any]]],
    old: bool,
    skip_done: bool,
) -> None:
    """Each case in turn (one process: the chip opened once), a line each."""
    timecal_hook.install()
    _child_path()
    topology = "v5e-1" if mode == "predict" else None
    measure = calibrate.RUNS if mode == "chip" else None
    done = _done(out) if skip_done else set()
    began = time.perf_counter()
    for name in cases:
        if name in done:
            print(f"[skip] {name}: in {out}", flush=True)
            continue
        found = run_case(name, cases, topology, measure, hlo_dir, old)
        with open(out, "a") as f:
            f.write(json.dumps(found) + "\n")
        rows = ", ".join(
            f"{k}: {'-' if v.get('hlo') is None else v['hlo_match']}"
            + (
                ""
                if v.get("median_seconds") is None
                else f" {v['median_seconds'] * 1e3:.3g} ms"
            )
            for k, v in found["programs"].items()
        )
        print(
            f"[{time.perf_counter() - began:7.1f} s] {name}: "
            f"{found['seconds']:.1f} s; {rows}"
            + (f"; ERROR {found['error']}" if "error" in found else ""),
            flush=True,
        )


for _name, _group in GROUP_OF.items():
    GROUPS[_group] = (*GROUPS.get(_group, ()), _name)


def compare(first: str, second: str) -> int:
    """Print each shared program's memory analysis: equal or not; the count unequal."""
    mine, theirs = calibrate._load(first), calibrate._load(second)
    unequal = 0
    for name, found in mine.items():
        other = theirs.get(name)
        if other is None:
            print(f"{name}: only in {first}")
            continue
        for program, row in found.get("programs", {}).items():
            them = other.get("programs", {}).get(program)
            if them is None:
                print(f"{name} / {program}: only in {first}")
                continue
            keys = (*timecal_hook.MEMORY, "out_of_memory")
            diff = {
                k: (row.get(k), them.get(k)) for k in keys if row.get(k) != them.get(k)
            }
            unequal += bool(diff)
            print(f"{name} / {program}: {diff or 'equal'}")
    return unequal


def main() -> None:
    if sys.argv[1:2] == ["compare"]:
        raise SystemExit(1 if compare(sys.argv[2], sys.argv[3]) else 0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("chip", "predict", "list"))
    parser.add_argument("out", nargs="?")
    parser.add_argument("hlo_dir", nargs="?")
    parser.add_argument("--old", action="store_true", help="calibrate.py's cases")
    parser.add_argument("--cases", default=os.environ.get("TIMECAL_CASES"))
    group = os.environ.get("TIMECAL_GROUP")
    parser.add_argument("--group", type=int, default=int(group) if group else None)
    parser.add_argument("--skip-done", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="the tiny cases")
    parser.add_argument("--refused", action="store_true", help="REFUSED's cases")
    parser.add_argument(
        "--set", dest="case_set", choices=SETS, help="a blind set: sets/NAME.py's cases"
    )
    args = parser.parse_args()
    cases = selected(
        args.old, args.cases, args.group, args.smoke, args.refused, args.case_set
    )
    if args.mode == "list":
        for name, (kind, _) in cases.items():
            rows = {
                "step": ["step"],
                "serve": ["prefill", "decode"],
                "rl": ["prefill", "decode", "reference", "train"],
            }[kind]
            if kind == "rl" and cases[name][1].get("critic"):
                rows += ["values", "critic train"]
            families = ", ".join(f"{r} ({FAMILY[r]})" for r in rows)
            print(f"group {GROUP_OF.get(name, '-')}: {name} [{kind}]: {families}")
        return
    if not args.out or not args.hlo_dir:
        raise SystemExit(__doc__)
    run_all(args.mode, args.out, args.hlo_dir, cases, args.old, args.skip_done)


if __name__ == "__main__":
    main()

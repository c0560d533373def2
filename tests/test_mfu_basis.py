"""The MFU's basis: 6·N·tokens wherever the tokens are known, whatever the loss.

llama_tiny_sharded's shape (one decoder layer, rematerialised) compiles for
``h100-8`` twice: with the built-in ``"lm"`` loss and with the same loss
written as a user writes it (imported by name in the child process). Both
MFUs count ``6 N`` FLOPs per token of the batch's ``[B, T]`` token ids, so
they agree; the program's FLOPs (recompute included) would not (the ``"lm"``
compile is marked slow: without it, the custom loss's compile). The float32
step on an H100 runs its matmuls at the TF32 peak, which the text and the
JSON name, with the MFU at the bf16 dense peak beside it. A batch without
token ids gets a hardware FLOPs utilisation, labelled so.

Every expected figure is computed here: ``N`` from :func:`count_params`, the
tokens from the batch's shape, and the peaks from NVIDIA's H100 SXM data
sheet (BF16 Tensor Core 1,979 TFLOPS and TF32 Tensor Core 989 TFLOPS, both
printed with 2:4 sparsity: dense is half).
"""

import json
import os
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import optax
import pytest
from flax import nnx

from nnx_introspect import (
    abstract_model,
    count_params,
    mesh_config_report,
    step_memory_report,
)
from nnx_introspect._step.step_estimate import step_roofline
from nnx_introspect._step.step_records import StepMemory, StepProgram
from nnx_introspect._xla.collectives import Collectives
from nnx_introspect._xla.toolchain import cuda_plugin_version
from nnx_introspect.examples import Llama, LlamaConfig, llama

ROOT = Path(__file__).resolve().parent.parent
HERE = "tests.test_mfu_basis"
MESH = "fsdp=2,tp=4"
B, T = 8, 64
TOKENS = jax.ShapeDtypeStruct((B, T), jnp.int32)
TF32_PEAK = 989e12 / 2  # H100 SXM data sheet: TF32 Tensor Core, sparse / 2
BF16_PEAK = 1979e12 / 2  # H100 SXM data sheet: BF16 Tensor Core, sparse / 2
DEVICES = 8

needs_plugin = pytest.mark.skipif(
    cuda_plugin_version() is None, reason="the CUDA PJRT plugin is not installed"
)

TINY_REMAT = LlamaConfig(
    vocab=8000,
    d_model=256,
    # the basis counts per token: one layer holds it (rematerialised: the
    # program's FLOPs are not the basis), at less of XLA:GPU's compile than two
    n_layers=1,
    n_heads=4,
    d_ff=688,
    partitioned=True,
    shard_activations=True,
    remat=True,
)


def llama_tiny_remat(rngs: nnx.Rngs) -> Llama:
    """llama_tiny_sharded's shape, 1 layer, each decoder layer rematerialised."""
    return llama(TINY_REMAT)(rngs)


def next_token_loss(model: Any, batch: tuple[Any, ...]) -> Any:
    """The built-in ``"lm"`` loss, written as a user writes it."""
    tokens = batch[0]
    logits = jnp.asarray(model(*batch)[:, :-1], jnp.float32)
    return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()


def _report(loss: str) -> Any:
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    return step_memory_report(
        f"{HERE}:llama_tiny_remat",
        MESH,
        TOKENS,
        loss=loss,
        optimizer="adamw",
        topology="h100-8",
    )


@pytest.fixture(scope="module")
def custom() -> Any:
    """The step with the loss written as a user writes it (by name, in the child)."""
    return _report(f"{HERE}:next_token_loss")


@pytest.fixture(scope="module")
def by_loss(custom: Any) -> dict[str, Any]:
    return {"lm": _report("lm"), "custom": custom}


def _six_n_tokens() -> float:
    return 6.0 * count_params(abstract_model(llama_tiny_remat)) * B * T


# slow: a second XLA:GPU compile; the basis is the same whatever the loss
# without a compile (test_token_ids_give_six_n_tokens_whatever_the_loss), a
# loss by name compiles in a child in every run (the TF32 test below;
# tests/test_step.py's sixteen devices)
@pytest.mark.slow
@needs_plugin
def test_a_custom_loss_gives_the_lm_loss_mfu(by_loss: dict[str, Any]) -> None:
    lm, custom = by_loss["lm"].roofline, by_loss["custom"].roofline
    assert lm is not None and custom is not None
    assert by_loss["custom"].loss == "next_token_loss"
    for estimate in (lm, custom):
        assert estimate.model_flops == _six_n_tokens()
        assert estimate.tokens == B * T
        assert estimate.utilisation == "MFU"
        assert estimate.mfu_basis == "6·N·tokens, attention not counted"
        capacity = estimate.low_seconds * TF32_PEAK * DEVICES
        assert estimate.mfu_ceiling == pytest.approx(_six_n_tokens() / capacity)
    # the same program, whichever way the loss is spelled
    assert custom.flops == pytest.approx(lm.flops, rel=1e-3)
    assert custom.mfu_ceiling == pytest.approx(lm.mfu_ceiling, rel=1e-3)
    assert custom.mfu_bf16_ceiling == pytest.approx(lm.mfu_bf16_ceiling, rel=1e-3)
    # under remat the program's FLOPs (recompute included) are not the basis
    assert lm.flops * DEVICES != pytest.approx(lm.model_flops, rel=1e-2)


@needs_plugin
def test_text_and_json_name_tf32_and_the_bf16_mfu(custom: Any) -> None:
    report = custom
    assert report.loss == "next_token_loss"
    estimate = report.roofline
    assert report.matmul_dtype in (None, "f32")
    assert estimate.dtype == "f32" and estimate.peak_name == "TF32"
    assert estimate.peak_flops_per_second == TF32_PEAK
    assert estimate.bf16_peak_flops_per_second == BF16_PEAK
    bf16 = _six_n_tokens() / (estimate.low_seconds * BF16_PEAK * DEVICES)
    assert estimate.mfu_bf16_ceiling == pytest.approx(bf16)
    ratio = TF32_PEAK / BF16_PEAK  # 989 / 1979: about half
    assert estimate.mfu_bf16_ceiling == pytest.approx(estimate.mfu_ceiling * ratio)
    text = " ".join(str(report).split())  # the words, at any terminal width
    assert "Roofline range at TF32" in text
    assert "dense f32" not in text and "at f32" not in text
    # the utilisation shown is the point estimate's, by hand from its seconds
    assert estimate.seconds is not None
    point = _six_n_tokens() / (estimate.seconds * TF32_PEAK * DEVICES)
    point_bf16 = _six_n_tokens() / (estimate.seconds * BF16_PEAK * DEVICES)
    assert estimate.mfu == pytest.approx(point)
    tf32 = f"{point * 100:.3g}%"
    at_bf16 = f"{point_bf16 * 100:.3g}%"
    assert (
        f"MFU {tf32} at the TF32 peak, {at_bf16} at the bf16 peak "
        "(6·N·tokens, attention not counted)"
    ) in text
    data = json.loads(report.to_json())["roofline"]
    assert data["dtype"] == "f32" and data["peak_name"] == "TF32"
    assert data["peak_flops_per_second"] == TF32_PEAK
    assert data["bf16_peak_flops_per_second"] == BF16_PEAK
    assert data["utilisation"] == "MFU"
    assert data["mfu_basis"] == "6·N·tokens, attention not counted"
    assert data["mfu_bf16_ceiling"] == pytest.approx(bf16)
    assert any("dense TF32 peak" in a for a in data["assumptions"])


@needs_plugin
def test_a_float_batch_is_hardware_flops_utilisation() -> None:
    x = jax.ShapeDtypeStruct((64, 256), jnp.float32)
    report = step_memory_report(
        lambda rngs: nnx.Linear(256, 512, rngs=rngs),
        {"data": DEVICES},
        x,
        loss="mean",
        optimizer="adamw",
        topology="h100-8",
    )
    estimate = report.roofline
    assert estimate is not None and estimate.tokens is None
    assert estimate.utilisation == "hardware FLOPs utilisation"
    assert estimate.model_flops == report.flops * DEVICES
    assert "recompute included" in estimate.mfu_basis
    text = " ".join(str(report).split())
    assert estimate.seconds is not None
    utilisation = report.flops * DEVICES / (estimate.seconds * TF32_PEAK * DEVICES)
    assert f"hardware FLOPs utilisation {utilisation * 100:.3g}%" in text
    assert "MFU" not in text
    data = json.loads(report.to_json())["roofline"]
    assert data["utilisation"] == "hardware FLOPs utilisation"


# --- the basis without a compile ------------------------------------------------


def _linear() -> nnx.Linear:
    return nnx.Linear(4, 6, rngs=nnx.Rngs(0))


def _estimate(batch: tuple[str, ...], **kwargs: Any) -> Any:
    plan = mesh_config_report(_linear(), "data=8")
    program = StepProgram(
        1e12, bytes_accessed=1e9, collectives=Collectives("jit_f", (), ())
    )
    step = kwargs.pop("step", "forward + backward + optimizer update")
    return step_roofline(
        "h100-8",
        plan,
        StepMemory(1, 0, 0, 0),
        program,
        step=step,
        loss=kwargs.pop("loss", "mean"),
        batch=batch,
        **kwargs,
    )


@pytest.mark.parametrize("loss", ["lm", "mean", "my_loss"])
def test_token_ids_give_six_n_tokens_whatever_the_loss(loss: str) -> None:
    estimate = _estimate(("float32[8,16]", "int32[8,128]"), loss=loss)
    assert estimate.model_flops == 6 * count_params(_linear()) * 8 * 128
    assert estimate.tokens == 8 * 128
    assert estimate.utilisation == "MFU"
    assert estimate.mfu_basis == "6·N·tokens, attention not counted"


def test_forward_counts_two_n_tokens() -> None:
    estimate = _estimate(("int32[4,32]",), step="forward", loss=None)
    assert estimate.model_flops == 2 * count_params(_linear()) * 4 * 32
    assert estimate.mfu_basis == "2·N·tokens, attention not counted"


@pytest.mark.parametrize(
    "batch", [("float32[8,16]",), ("int32[8]",), ("int32[8,16,3]",), ()]
)
def test_no_token_ids_is_hardware_flops_utilisation(batch: tuple[str, ...]) -> None:
    estimate = _estimate(batch)
    assert estimate.utilisation == "hardware FLOPs utilisation"
    assert estimate.model_flops == 1e12 * DEVICES
    assert estimate.mfu_ceiling == pytest.approx(
        1e12 * DEVICES / (estimate.low_seconds * BF16_PEAK * DEVICES)
    )


def test_tokens_per_step_wins_over_the_batch() -> None:
    estimate = _estimate(("float32[8,16]",), tokens_per_step=1000)
    assert estimate.model_flops == 6 * count_params(_linear()) * 1000
    assert estimate.utilisation == "MFU" and estimate.tokens == 1000

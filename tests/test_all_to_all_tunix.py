"""tunix's Qwen3 MoE on ``v5p-16``: its ragged all-to-alls, bytes by hand.

Issue 43's case (tunix optional, and libtpu): google-tunix 0.1.7's Qwen3 with
8 experts of ``d_ff`` 128, top-2, d_model 256, f32, 2 layers, trained with
AdamW on int32[8, 128] tokens over ``fsdp=8``. Traced as on its TPU target, its
``MoELayer`` takes the Megablox path: a ``shard_map`` that dispatches each
token's two rows with ``jax.lax.ragged_all_to_all`` to the device of its
expert and combines them back the same way. Each device holds 128 tokens, so
each ragged all-to-all's payload is ``128 x 2 x 256 x 4`` = 262,144 B, and
tunix sizes the dispatch's receive buffer at ``min(top_k, local experts) x
tokens x devices`` = 1,024 rows, 1,048,576 B. Forward and backward, 2 layers:
8 ragged all-to-alls, with the 8 small all-to-alls JAX's transpose of them
uses for the sizes and the 2 the embedding's gather makes.
"""

import os
from pathlib import Path
from typing import Any

import flax
import jax
import jax.numpy as jnp
import optax
import pytest
from flax import nnx

from nnx_introspect import step_memory_report
from nnx_introspect._xla.toolchain import libtpu_version

pytest.importorskip("tunix")
if libtpu_version() is None:
    pytest.skip("libtpu is not installed (the tpu extra)", allow_module_level=True)

from tunix.models.qwen3 import model as qwen3

ROOT = Path(__file__).resolve().parent.parent
TOKENS, TOP_K, D_MODEL, DEVICES = 128, 2, 256, 8
PAYLOAD = TOKENS * TOP_K * D_MODEL * 4
WORST = min(TOP_K, 8 // DEVICES) * TOKENS * DEVICES * D_MODEL * 4

TINY = qwen3.ModelConfig(
    num_layers=2,
    vocab_size=512,
    embed_dim=D_MODEL,
    hidden_dim=128,
    num_heads=4,
    head_dim=64,
    num_kv_heads=2,
    rope_theta=1_000_000,
    norm_eps=1e-6,
    num_experts=8,
    num_experts_per_tok=TOP_K,
)


def tiny_qwen3_moe(rngs: nnx.Rngs) -> Any:
    """tunix's ``Qwen3`` at :data:`TINY`, built with tunix's flax setting."""
    before = flax.config.flax_always_shard_variable
    flax.config.update("flax_always_shard_variable", False)
    try:
        return qwen3.Qwen3(TINY, rngs=rngs)
    finally:
        flax.config.update("flax_always_shard_variable", before)


def lm_loss(model: Any, batch: tuple[Any, ...]) -> Any:
    """Next-token cross-entropy in tunix's calling convention."""
    tokens = batch[0]
    b, t = tokens.shape
    positions = jnp.broadcast_to(jnp.arange(t), (b, t))
    mask = jnp.broadcast_to(jnp.tril(jnp.ones((t, t), dtype=bool)), (b, t, t))
    logits, _ = model(tokens, positions, None, mask)
    return optax.softmax_cross_entropy_with_integer_labels(
        logits[:, :-1].astype(jnp.float32), tokens[:, 1:]
    ).mean()


@pytest.fixture(autouse=True)
def _child_imports_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child process rebuilds this module's model by name."""
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))


def test_tunix_qwen3_moe_step_lists_its_ragged_all_to_alls_by_hand() -> None:
    # breakdown: the compile's dump, since jaxlib 0.10.2 cannot print this
    # program (v5p's SparseCore scatter offload writes an async-update of
    # four operands its reader refuses)
    report = step_memory_report(
        "tests.test_all_to_all_tunix:tiny_qwen3_moe",
        {"fsdp": DEVICES, "tp": 1},
        jax.ShapeDtypeStruct((8, TOKENS), jnp.int32),
        loss="tests.test_all_to_all_tunix:lm_loss",
        optimizer="adamw",
        topology="v5p-16",
        breakdown=True,
    )
    assert report.traced_platform == "tpu"
    found = report.program.collectives
    assert found is not None
    ragged = [row for row in found.rows if row.kind == "ragged-all-to-all"]
    plain = [row for row in found.rows if row.kind == "all-to-all"]
    assert (len(ragged), len(plain)) == (8, 10)
    # tokens x top_k x d_model x 4 bytes, each way, forward and backward
    assert all(row.nbytes == PAYLOAD == 262_144 for row in ragged)
    assert all(row.axes == ("fsdp",) and row.count == 1 for row in ragged)
    buffers = sorted(row.worst_case_receive_bytes or 0 for row in ragged)
    assert buffers == [PAYLOAD] * 4 + [WORST] * 4 and WORST == 1_048_576
    # each at the line of tunix's model.py that calls it
    model_py = Path(qwen3.__file__).read_text().splitlines()
    for row in ragged:
        assert row.source is not None and row.source.file == qwen3.__file__
        assert "jax.lax.ragged_all_to_all(" in model_py[row.source.line - 1]
    assert all(row.source is not None for row in plain)
    assert "statically for the worst case" in found.to_markdown()
    # so the step has a time and an MFU
    assert report.roofline is not None and report.roofline.comm
    assert report.roofline.mfu_ceiling > 0

"""The remat candidates on tunix's Llama 3 (4 layers of width 64; tunix optional).

tunix wraps each layer's ``__call__`` in ``jax.named_scope`` (its source file is
JAX's) and ``DecoderLayer.__call__`` delegates to ``DecoderLayer.block``; the
outermost repeated block, ``DecoderLayer``, must come first with the kept bytes
of every row made under its ``block``.
"""

import inspect
from typing import Any

import jax
import jax.numpy as jnp
import pytest

from nnx_introspect import abstract_model, step_memory_report
from nnx_introspect._breakdown.report import Breakdown
from nnx_introspect._sweep.fit.layers import KEPT, remat_candidates

pytest.importorskip("tunix")

from tests.tunix_lm import TINY, lm_loss, tiny_llama3


@pytest.fixture(scope="module")
def compiled() -> tuple[Any, Breakdown]:
    model = abstract_model(tiny_llama3)
    report = step_memory_report(
        model,
        "fsdp=4,tp=2",
        jax.ShapeDtypeStruct((8, 64), jnp.int32),
        loss=lm_loss,
        optimizer="adamw",
        breakdown=True,
    )
    assert report.breakdown is not None
    return model, report.breakdown


def test_decoder_layer_first_by_its_subtree(compiled: tuple[Any, Breakdown]) -> None:
    from tunix.models.llama3 import model as llama3

    model, breakdown = compiled
    file = inspect.getsourcefile(llama3.Attention.__call__)
    assert file is not None and file.endswith("source_info_util.py")
    found = remat_candidates(breakdown, model)
    assert found[0].name == "DecoderLayer"
    assert found[0].instances == TINY.num_layers
    under_block = sum(
        row.nbytes
        for row in breakdown.rows
        if row.kind == KEPT
        and any(f.function == "DecoderLayer.block" for f in row.stack)
    )
    assert found[0].kept_bytes == under_block > 0
    names = [c.name for c in found]
    kept = {c.name: c.kept_bytes for c in found}
    # the layer's children (inside no other candidate but the layer), heaviest
    # first, then Einsum (inside Attention and MLP)
    children = [n for n in names if n in ("Attention", "MLP", "RMSNorm")]
    assert names[1:4] == children == sorted(children, key=lambda n: -kept[n])
    assert names[4:] == ["Einsum"]
    assert all(0 < kept[n] < kept["DecoderLayer"] for n in children)

"""Every step report names its loss; loss names are case-exact (issue 28, item 9)."""

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from nnx_introspect import step_memory_report

X = jax.ShapeDtypeStruct((8, 4), jnp.float32)


def linear(rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(4, 6, rngs=rngs)


def test_every_report_names_its_loss() -> None:
    tokens = jax.ShapeDtypeStruct((8, 16), jnp.int32)
    # a 2-layer Llama of width 32 (tests/llama_tiny_layers.py): what is held is
    # the notes, the same for any model taking token ids
    target = "tests.llama_tiny_layers:llama_small"
    mean = step_memory_report(target, "data=8", tokens)
    (line,) = [n for n in mean.table().notes if n.startswith("Loss:")]
    assert "not a training loss" in line and 'loss="lm" (--loss lm)' in line
    lm = step_memory_report(target, "data=8", tokens, loss="lm")
    (line,) = [n for n in lm.table().notes if n.startswith("Loss:")]
    assert line.startswith("Loss: lm") and "--loss lm" not in line
    floats = step_memory_report(linear, "data=8", X)  # no token ids: no advice
    (line,) = [n for n in floats.table().notes if n.startswith("Loss: mean")]
    assert "--loss lm" not in line
    forward = step_memory_report(linear, "data=8", X, loss=None)
    assert "Loss: none — the forward pass only." in forward.table().notes


@pytest.mark.parametrize(("given", "meant"), [("LM", "lm"), ("Mean", "mean")])
def test_loss_names_are_case_exact(given: str, meant: str) -> None:
    tokens = jax.ShapeDtypeStruct((8, 16), jnp.int32)
    with pytest.raises(
        ValueError, match=rf"got '{given}'\. Loss names are lower case: '{meant}'\."
    ) as caught:
        step_memory_report(
            "nnx_introspect.examples:llama_tiny_sharded", "data=8", tokens, loss=given
        )
    assert getattr(caught.value, "argument", None) == "loss"

"""``tokens_per_step=``: the MFU's tokens where the batch does not tell (issue 24)."""

import json
from typing import Any

import jax
import jax.numpy as jnp

import nnx_introspect as ni

TWO_LAYER = "nnx_introspect.examples:two_layer"


def test_float_inputs_get_an_mfu_from_the_tokens_given() -> None:
    x = jax.ShapeDtypeStruct((64, 3), jnp.float32)  # no token ids to count
    common: dict[str, Any] = {"optimizer": "adamw", "topology": "h100-8"}
    plain = ni.step_memory_report(TWO_LAYER, "data=8", x, **common)
    given = ni.step_memory_report(
        TWO_LAYER, "data=8", x, tokens_per_step=4096, **common
    )
    assert plain.roofline is not None and given.roofline is not None
    assert plain.roofline.utilisation == "hardware FLOPs utilisation"
    assert given.roofline.utilisation == "MFU"
    # 6 x parameters x tokens, by hand: two_layer has 36 parameters
    assert given.roofline.model_flops == 6 * 36 * 4096
    assert given.tokens_per_step == 4096
    data = json.loads(given.to_json())
    assert data["tokens_per_step"] == 4096
    assert json.loads(plain.to_json())["tokens_per_step"] is None
    # the same compile: only the estimate's basis moved
    assert given.flops == plain.flops and given.peak_bytes == plain.peak_bytes


def test_the_spec_carries_it_to_a_child() -> None:
    x = jax.ShapeDtypeStruct((64, 3), jnp.float32)
    spec = ni.StepSpec(TWO_LAYER, "data=8", x, tokens_per_step=128.0)
    assert spec.tokens_per_step == 128
    assert ni.StepSpec.from_json(spec.to_json()).tokens_per_step == 128

"""A LoRA step compiled in a child process is the step compiled in this one.

A named topology compiles a target given by name in a child process, which
rebuilds the model from its name and must add the same adapters before it
checks the model against the parent's plan; a target given as an object
compiles in this process. The same LoRA step both ways: XLA's bytes equal.
"""

from typing import Any

import jax
import jax.numpy as jnp

from nnx_introspect import step_memory_report
from nnx_introspect.examples import LlamaConfig, llama

SMALL = llama(LlamaConfig(vocab=64, d_model=32, n_layers=2, n_heads=2, d_ff=64))
TOKENS = jax.ShapeDtypeStruct((2, 16), jnp.int32)


def small(rngs: Any) -> Any:
    """The small Llama by name, for the child process."""
    return SMALL(rngs)


def test_a_rank_compiled_in_a_child_equals_the_same_step_here() -> None:
    common: dict[str, Any] = {
        "loss": "lm",
        "optimizer": "adamw",
        "lora": 4,
        "topology": "v5e-1",
        "cache": False,
    }
    child = step_memory_report(
        "tests.test_lora_child:small", "fsdp=1", TOKENS, **common
    )
    here = step_memory_report(SMALL, "fsdp=1", TOKENS, **common)
    assert child.compiled_in.startswith("a child process")
    assert here.compiled_in == "this process"
    for field in ("argument_bytes", "output_bytes", "temp_bytes", "alias_bytes"):
        assert getattr(child, field) == getattr(here, field), field
    adapters = [leaf for leaf in child.plan.leaves if leaf.kind == "LoRAParam"]
    # a (in, 4) and a (4, out) pair on each of the 2 layers' 7 Linears, and the head
    assert len(adapters) == 2 * (2 * 7 + 1)
    assert child.lora == 4

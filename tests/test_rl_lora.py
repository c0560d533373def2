"""rl_memory_report(lora=): the adapters trained, the backbone shared and frozen."""

import json
from typing import Any

import jax
import jax.numpy as jnp
import pytest

from nnx_introspect import ArgumentError, RLMemoryReport, rl_memory_report
from nnx_introspect.examples import LlamaConfig, llama
from tests.cli_helpers import run

CFG = LlamaConfig(vocab=64, d_model=32, n_layers=2, n_heads=2, d_ff=64)
SMALL = llama(CFG)
RANK = 4
KW: dict[str, Any] = {
    "batch": 2,
    "generations": 2,
    "prompt": 8,
    "completion": 8,
    "max_device_bytes": "64MiB",
}


def small(rngs: Any) -> Any:
    """The small Llama by name, for the command line."""
    return SMALL(rngs)


def _adapters_per_device(data: int) -> int:
    """The adapters by hand: every Linear's (in x r + r x out) float32 numbers.

    Per layer: q, k, v, o (32 x 32 with 2 heads of 16), gate and up (32 x 64),
    down (64 x 32); the head (32 x 64). The adapters carry their kernel's
    annotations; the small Llama has none, so each device holds all of them.
    """
    del data
    d, f, v = CFG.d_model, CFG.d_ff, CFG.vocab
    layer = (
        4 * (d * RANK + RANK * d) + 2 * (d * RANK + RANK * f) + (f * RANK + RANK * d)
    )
    return 4 * (CFG.n_layers * layer + d * RANK + RANK * v)


@pytest.fixture(scope="module")
def both() -> tuple[RLMemoryReport, RLMemoryReport]:
    full = rl_memory_report(SMALL, "data=2", **KW)
    lora = rl_memory_report(SMALL, "data=2", lora=RANK, **KW)
    return full, lora


def test_the_adapters_are_the_only_trained_leaves(
    both: tuple[RLMemoryReport, RLMemoryReport],
) -> None:
    full, lora = both
    roles = dict(lora.roles)
    adapters = _adapters_per_device(2)
    assert roles["actor LoRA adapters"] == adapters
    assert roles["actor backbone (frozen)"] == dict(full.roles)["actor parameters"]
    # adamw: mu and nu of each adapter, its count; and the optimizer's step
    assert roles["actor optimizer state"] == 2 * adapters + 4 + 4
    train = lora.programs["train"].plan.bytes_by_category
    assert train["gradients"] == adapters


def test_lora_resident_is_at_most_full_minus_the_backbones_optimizer_state(
    both: tuple[RLMemoryReport, RLMemoryReport],
) -> None:
    full, lora = both
    full_roles, lora_roles = dict(full.roles), dict(lora.roles)
    kept = ("rollout weights", "KV cache (during the rollout)")

    def resident(roles: dict[str, int]) -> int:
        return sum(n for role, n in roles.items() if role not in kept)

    backbone_state = full_roles["actor optimizer state"] - 8  # less count and step
    assert resident(lora_roles) <= resident(full_roles) - backbone_state
    # the reference shares the backbone: no second copy
    assert "reference parameters" not in lora_roles
    assert "reference parameters" in full_roles
    assert lora.peak_bytes < full.peak_bytes
    assert any("LoRA" in note for note in lora.notes)
    assert "LoRA rank 4" in lora.to_markdown()


def test_each_phases_resident_roles(
    both: tuple[RLMemoryReport, RLMemoryReport],
) -> None:
    _, lora = both
    roles = dict(lora.roles)
    phases = {p.name: dict(p.resident) for p in lora.phases}
    # colocated in the model's dtypes: the rollout decodes on the backbone itself
    assert "rollout weights" not in roles
    assert set(phases["decode"]) == {"actor LoRA adapters", "actor optimizer state"}
    # the reference program is the backbone: the adapters stay resident beside it
    assert set(phases["reference"]) == {
        "actor LoRA adapters",
        "actor optimizer state",
    }
    assert set(phases["train"]) == set()
    reference = lora.programs["reference"].plan.bytes_by_category["params"]
    assert reference == roles["actor backbone (frozen)"]
    # the example's Embed is a table, no projection: no note of modules left out
    assert not any("get none" in note for note in lora.notes)


@pytest.mark.parametrize("lora", [0, 10**6, "full"])
def test_bad_lora_is_refused_before_any_compile(lora: Any) -> None:
    with pytest.raises(ArgumentError) as caught:
        rl_memory_report(SMALL, "data=2", lora=lora, **KW)
    assert caught.value.argument == "lora"


def test_cli_lora(capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "rl",
        "tests.test_rl_lora:small",
        "--mesh",
        "data=2",
        "--batch",
        "2",
        "--generations",
        "2",
        "--prompt",
        "8",
        "--completion",
        "8",
        "--format",
        "json",
    ]
    code, out, _ = run([*args, "--lora", "4"], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["lora"] == 4
    assert "actor LoRA adapters" in [r["role"] for r in data["roles"]]
    code, _, err = run([*args, "--lora", "none"], capsys)
    assert code == 2 and "argument --lora:" in err
    code, _, err = run([*args, "--lora", "1000"], capsys)
    assert code == 2 and "--lora" in err and "1000" in err


def test_the_adapters_shapes_are_the_hand_counts() -> None:
    """The hand count above, held against the model's own Linear shapes."""
    from flax import nnx

    from nnx_introspect._step.lora import lora_bytes, with_lora

    model = nnx.eval_shape(lambda: SMALL(nnx.Rngs(0)))
    assert lora_bytes(with_lora(model, RANK)) == _adapters_per_device(1)
    assert jax.tree.leaves(nnx.state(model, nnx.LoRAParam)) == []
    assert jnp.dtype(model.lm_head.kernel.dtype) == jnp.float32

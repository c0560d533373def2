"""``lora=``: a LoRA step held against flax's own LoRA trained as flax trains it.

The independent side is written with flax alone: ``nnx.LoRALinear`` layers
(adapters as ``nnx.LoRAParam``), ``nnx.Optimizer(model, adamw, wrt=nnx.LoRAParam)``
and a jitted update on the split state, compiled by XLA; and the adapters'
bytes by hand from the layers' shapes.
"""

import json
from typing import Any

import jax
import jax.numpy as jnp
import optax
import pytest
from flax import nnx

import nnx_introspect as ni
from nnx_introspect._step.lora import with_lora
from nnx_introspect._step.spec import StepSpec

X = jax.ShapeDtypeStruct((8, 16), jnp.float32)
RANK = 4


class Mlp(nnx.Module):
    """Two ``nnx.Linear`` layers (16 -> 32 -> 8)."""

    def __init__(self, *, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(16, 32, rngs=rngs)
        self.l2 = nnx.Linear(32, 8, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.l2(jax.nn.relu(self.l1(x)))


class FlaxLoraMlp(nnx.Module):
    """The same model written with flax's own ``nnx.LoRALinear``."""

    def __init__(self, *, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.LoRALinear(16, 32, lora_rank=RANK, rngs=rngs)
        self.l2 = nnx.LoRALinear(32, 8, lora_rank=RANK, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        out: jax.Array = self.l2(jax.nn.relu(self.l1(x)))
        return out


def mlp(rngs: nnx.Rngs) -> Mlp:
    return Mlp(rngs=rngs)


def flax_lora_mlp(rngs: nnx.Rngs) -> FlaxLoraMlp:
    return FlaxLoraMlp(rngs=rngs)


def _hand_compiled() -> Any:
    """flax's LoRA step: only the ``nnx.LoRAParam`` leaves trained, by flax."""
    model = FlaxLoraMlp(rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.LoRAParam)
    graphdef, state = nnx.split((model, optimizer))

    def step(state: Any, x: jax.Array) -> Any:
        model, optimizer = nnx.merge(graphdef, state)
        loss, grads = nnx.value_and_grad(
            lambda m: jnp.mean(m(x)), argnums=nnx.DiffState(0, nnx.LoRAParam)
        )(model)
        optimizer.update(model, grads)
        return loss, nnx.state((model, optimizer))

    x = jnp.zeros(X.shape, X.dtype)
    return jax.jit(step, donate_argnums=0).lower(state, x).compile()


def _adapter_bytes() -> int:
    """The adapters by hand: (in x r + r x out) float32 numbers per layer."""
    return 4 * sum(n_in * RANK + RANK * n_out for n_in, n_out in ((16, 32), (32, 8)))


def _report(target: Any, lora: Any) -> ni.StepMemoryReport:
    return ni.step_memory_report(
        target, "data=1", X, loss="mean", optimizer="adamw", lora=lora, cache=False
    )


def test_a_lora_step_equals_flaxs_own_lora_step() -> None:
    ours = _report("tests.test_step_lora:mlp", RANK)
    memory = _hand_compiled().memory_analysis()
    # the same arguments to the byte: the frozen backbone, the adapters, adamw's
    # state of the adapters only (count, mu, nu), the step counter, the batch
    assert ours.argument_bytes == memory.argument_size_in_bytes
    assert ours.plan.bytes_by_category["gradients"] == _adapter_bytes()
    assert (
        ours.plan.bytes_by_category["optimizer state"] == 2 * _adapter_bytes() + 4 + 4
    )
    # outputs: the loss and the new state
    assert ours.output_bytes == memory.output_size_in_bytes
    assert ours.peak_bytes == pytest.approx(
        memory.argument_size_in_bytes
        + memory.output_size_in_bytes
        + memory.temp_size_in_bytes
        - memory.alias_size_in_bytes,
        rel=0.05,
    )


def test_the_models_own_adapters_train_as_a_rank_does() -> None:
    by_rank = _report("tests.test_step_lora:mlp", RANK)
    own = _report("tests.test_step_lora:flax_lora_mlp", "model")
    assert own.argument_bytes == by_rank.argument_bytes
    assert own.plan.bytes_by_category == by_rank.plan.bytes_by_category


def test_the_frozen_backbone_has_no_optimizer_state_and_no_gradient() -> None:
    full = _report("tests.test_step_lora:mlp", None)
    lora = _report("tests.test_step_lora:mlp", RANK)
    backbone = full.plan.bytes_by_category["params"]
    assert lora.plan.bytes_by_category["params"] == backbone + _adapter_bytes()
    assert full.plan.bytes_by_category["optimizer state"] == 2 * backbone + 8
    assert lora.argument_bytes < full.argument_bytes
    assert lora.lora == RANK and full.lora is None
    assert "LoRA rank 4 on every nnx.Linear" in lora.to_markdown()
    assert json.loads(lora.to_json())["lora"] == RANK


def test_the_adapters_compute_what_nnx_lora_computes() -> None:
    model = Mlp(rngs=nnx.Rngs(0))
    adapted = with_lora(model, RANK)
    assert type(model.l1.kernel) is nnx.Param  # the user's model is untouched
    graphdef, state = nnx.split(adapted)
    a = jnp.arange(16 * RANK, dtype=jnp.float32).reshape(16, RANK) / 100
    b = jnp.ones((RANK, 32), jnp.float32) / 10
    x = jnp.linspace(-1, 1, 8 * 16).reshape(8, 16)
    with_values = jax.tree.map(lambda leaf: jnp.zeros(leaf.shape, leaf.dtype), state)
    merged = nnx.merge(graphdef, with_values)
    nnx.update(
        merged,
        nnx.state(model, nnx.Param),  # the backbone's real values
    )
    merged.l1.lora_a.set_value(a)
    merged.l1.lora_b.set_value(b)
    lora = nnx.LoRA(16, RANK, 32, base_module=model.l1, rngs=nnx.Rngs(1))
    lora.lora_a.set_value(a)
    lora.lora_b.set_value(b)
    assert jnp.allclose(merged.l1(x), lora(x), rtol=1e-6, atol=1e-6)


def test_lora_travels_in_the_specs_json() -> None:
    spec = StepSpec("tests.test_step_lora:mlp", "data=1", X, lora=RANK)
    again = StepSpec.from_json(spec.to_json())
    assert again.lora == RANK
    assert nnx.state(again.model, nnx.LoRAParam) == nnx.state(spec.model, nnx.LoRAParam)


@pytest.mark.parametrize(
    ("lora", "words"),
    [
        (0, "`lora`"),
        (33, "Pass `lora=8` or less"),  # l2 is 32 x 8
        ("model", "has none"),
        ("all", "'model' or None"),
    ],
)
def test_bad_lora_names_the_argument_and_the_fix(lora: Any, words: str) -> None:
    with pytest.raises(ValueError, match="lora") as caught:
        StepSpec("tests.test_step_lora:mlp", "data=1", X, lora=lora)
    assert words in str(caught.value)
    assert caught.value.argument == "lora"  # type: ignore[attr-defined]


def test_the_llamas_adapters_are_sharded_as_their_kernels() -> None:
    spec = StepSpec(
        "nnx_introspect.examples:llama_tiny_sharded",
        "fsdp=2,tp=4",
        jax.ShapeDtypeStruct((8, 16), jnp.int32),
        loss="lm",
        lora=8,
    )
    layer = spec.model.layers[0]
    for name in ("q", "down"):
        linear = getattr(layer, name)
        names = linear.kernel.get_metadata()["out_sharding"]
        assert linear.lora_a.get_metadata()["out_sharding"] == (names[0], None)
        assert linear.lora_b.get_metadata()["out_sharding"] == (None, names[1])

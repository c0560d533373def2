"""rl_memory_report's defaults are google-tunix 0.1.7's, held against hand compiles.

Issue 44, section 1. What tunix does (its lines cited in
``nnx_introspect._rl.choices``):

- colocated, the rollout *is* the training actor (``rl/rl_cluster.py``,
  ``RLCluster.__init__``): no copy of the weights, the rollout's programs in
  the model's own dtypes (float32 weights; the sampler's KV cache in the
  model's dtype, ``generate/sampler.py``);
- the trainer jits its step as ``nnx.jit(train_step,
  donate_argnames=("optimizer",))`` (``sft/peft_trainer.py``): only the
  optimizer's state is donated;
- ``offload_to_cpu`` moves ``nnx.variables(model)`` and never the
  optimizer's state.

Each default is held against a program written by hand the way tunix writes
it (flax's ``nnx.Optimizer`` under ``nnx.jit``, XLA's ``memory_analysis()``)
or against hand arithmetic of the model's parameters; the other choice is one
argument away, and the report says it is not tunix's.
"""

import json
from typing import Any

import jax
import jax.numpy as jnp
import optax
import pytest
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from nnx_introspect import ArgumentError, RLMemoryReport, rl_memory_report
from nnx_introspect._rl.loss import grpo_loss
from nnx_introspect.examples import LlamaConfig, llama
from tests import tunix_shaped

CFG = LlamaConfig(vocab=64, d_model=32, n_layers=2, n_heads=2, d_ff=64)
SMALL = llama(CFG)
B, G, P, C = 2, 2, 8, 8
S = B * G
KW: dict[str, Any] = {
    "batch": B,
    "generations": G,
    "prompt": P,
    "completion": C,
    "max_device_bytes": "64MiB",
}


def _params() -> int:
    """The small Llama's parameters, by hand: embed, 2 layers, norm, head."""
    d, f, v = CFG.d_model, CFG.d_ff, CFG.vocab
    layer = 2 * d + 4 * d * d + 3 * d * f  # 2 norms; q, k, v, o; gate, up, down
    return v * d + CFG.n_layers * layer + d + d * v


N = _params()
F32 = 4 * N  # float32 parameters, replicated over data=2 (no annotations)
ADAMW = 2 * F32 + 4 + 4  # mu and nu; AdamW's count and the optimizer's step


def _cache_bytes(itemsize: int) -> int:
    """k and v of 2 layers: 2 of 4 sequences a device, 16 positions, 2 heads of 16."""
    per_device = S // 2
    return 2 * CFG.n_layers * per_device * (P + C) * 2 * 16 * itemsize + 4


@pytest.fixture(scope="module")
def report() -> RLMemoryReport:
    return rl_memory_report(SMALL, "data=2", **KW)


def test_the_hand_counts_are_the_models() -> None:
    from nnx_introspect import count_params

    assert count_params(SMALL(nnx.Rngs(0))) == N


def test_colocated_the_rollout_is_the_actor_in_its_own_dtypes(
    report: RLMemoryReport,
) -> None:
    roles = dict(report.roles)
    assert "rollout weights" not in roles  # no copy: the rollout is the actor
    assert roles["actor parameters"] == F32
    rollout = report.programs["rollout"]
    assert rollout.weights is None and rollout.kv_cache == "float32"
    assert rollout.decode.weights_bytes == F32  # the actor's float32 weights
    assert rollout.decode.kv_cache_bytes == _cache_bytes(4)  # a float32 cache
    assert roles["KV cache (during the rollout)"] == _cache_bytes(4)
    phases = {p.name: p for p in report.phases}
    for name in ("prefill", "decode"):  # its program holds the actor's weights
        assert phases[name].peak_bytes == phases[name].program_peak_bytes + (
            ADAMW + F32  # the optimizer's state and the reference's parameters
        )
    # the train phase: the step beside the reference's parameters alone
    assert phases["train"].peak_bytes == phases["train"].program_peak_bytes + F32
    assert any("the rollout shares the actor's model" in n for n in report.notes)
    assert not any("not tunix's default" in n for n in report.notes)


def _placed(tree: Any, spec: PartitionSpec) -> Any:
    where = NamedSharding(Mesh(jax.devices()[:2], ("data",)), spec)
    return jax.tree.map(lambda x: jax.device_put(x, where), tree)


def _batch() -> tuple[Any, ...]:
    f32 = jnp.float32
    batch = (
        jnp.zeros((S, P), jnp.int32),
        jnp.zeros((S, C), jnp.int32),
        jnp.ones((S, C), f32),
        jnp.zeros((S,), f32),
        jnp.zeros((S, C), f32),
        jnp.zeros((S, C), f32),
    )
    return _placed(batch, PartitionSpec("data"))  # type: ignore[no-any-return]


def _held(memory: Any) -> int:
    return int(
        memory.argument_size_in_bytes
        + memory.output_size_in_bytes
        + memory.temp_size_in_bytes
        - memory.alias_size_in_bytes
    )


def test_the_train_step_donates_the_optimizer_alone_as_tunix_jits_it(
    report: RLMemoryReport,
) -> None:
    """tunix's trainer step, by hand: nnx.jit donating the optimizer only."""
    model = SMALL(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
    nnx.update(model, _placed(nnx.state(model), PartitionSpec()))
    nnx.update(optimizer, _placed(nnx.state(optimizer), PartitionSpec()))

    def train_step(model: Any, optimizer: Any, batch: tuple[Any, ...]) -> Any:
        loss, grads = nnx.value_and_grad(lambda m: grpo_loss(m, batch))(model)
        optimizer.update(model, grads)
        return loss

    jitted = nnx.jit(train_step, donate_argnames=("optimizer",))
    memory = jitted.lower(model, optimizer, _batch()).compile().memory_analysis()
    assert memory is not None
    phase = {p.name: p for p in report.phases}["train"]
    assert phase.program_peak_bytes == _held(memory)
    assert memory.alias_size_in_bytes == ADAMW  # the optimizer's state, reused
    assert report.programs["train"].alias_bytes == ADAMW
    assert any('donate_argnames=("optimizer",)' in n for n in report.notes)


def test_a_bfloat16_copy_and_the_whole_state_donated_are_one_argument_away() -> None:
    """The other choices, each said not to be tunix's; the step as flax jits it."""
    other = rl_memory_report(
        SMALL,
        "data=2",
        reference=False,
        rollout_weights="bfloat16",
        kv_cache="bfloat16",
        donate="all",
        **KW,
    )
    roles = dict(other.roles)
    assert roles["rollout weights"] == 2 * N  # a bfloat16 copy, resident
    assert roles["KV cache (during the rollout)"] == _cache_bytes(2)
    train = {p.name: p for p in other.phases}["train"]
    assert dict(train.resident) == {"rollout weights": 2 * N}
    not_tunix = [n for n in other.notes if "not tunix's default" in n]
    assert len(not_tunix) == 3  # the copy, the cache, the donation
    assert any("RolloutConfig.data_type" in n for n in not_tunix)

    # the whole state donated, by hand: jax.jit of the merged model and optimizer
    model = SMALL(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
    graphdef, state = nnx.split((model, optimizer))

    def step(state: Any, batch: tuple[Any, ...]) -> Any:
        model, optimizer = nnx.merge(graphdef, state)
        loss, grads = nnx.value_and_grad(lambda m: grpo_loss(m, batch))(model)
        optimizer.update(model, grads)
        return loss, nnx.state((model, optimizer))

    state = _placed(state, PartitionSpec())
    jitted = jax.jit(step, donate_argnums=0)
    memory = jitted.lower(state, _batch()).compile().memory_analysis()
    assert memory is not None
    assert train.program_peak_bytes == _held(memory)
    assert memory.alias_size_in_bytes == F32 + ADAMW


def test_offload_keeps_the_optimizer_state_on_the_device() -> None:
    """Each model's variables on the host while idle; the optimizer stays."""
    off = rl_memory_report(SMALL, "data=2", offload=True, **KW)
    phases = {p.name: p for p in off.phases}
    for name in ("prefill", "decode", "reference"):
        assert phases[name].resident == (("actor optimizer state", ADAMW),)
        assert phases[name].peak_bytes == phases[name].program_peak_bytes + ADAMW
    assert phases["train"].peak_bytes == phases["train"].program_peak_bytes
    assert dict(phases["reference"].host) == {"actor parameters": F32}
    assert dict(phases["train"].host) == {"reference parameters": F32}
    # the actor out and back in around the reference's phase, the reference
    # around train and the rollout: each model's float32 parameters, twice
    assert off.offload_bytes == 2 * (F32 + F32)
    assert json.loads(off.to_json())["offload_bytes"] == 4 * F32
    assert any("optimizer state stays on the device" in n for n in off.notes)


class _WithMLP(tunix_shaped.Model):
    """tunix's attention (weights on the module, einsums), an nnx.Linear MLP."""

    def __init__(self, cfg: tunix_shaped.Config, *, rngs: nnx.Rngs) -> None:
        super().__init__(cfg, rngs=rngs)
        self.mlp = nnx.Linear(cfg.embed_dim, cfg.embed_dim, rngs=rngs)

    def __call__(
        self, tokens: jax.Array, positions: jax.Array, cache: Any, attention_mask: Any
    ) -> Any:
        logits, new = super().__call__(tokens, positions, cache, attention_mask)
        x = jnp.einsum("BTV,VD->BTD", logits, self.embed[...])
        return logits + jnp.einsum("BTD,VD->BTV", self.mlp(x), self.embed[...]), new


def with_mlp(rngs: nnx.Rngs) -> _WithMLP:
    """The tunix-shaped model with an nnx.Linear, so a LoRA rank has one."""
    return _WithMLP(tunix_shaped.LLAMA_LIKE, rngs=rngs)


def test_lora_names_the_modules_a_rank_leaves_without_adapters() -> None:
    found = rl_memory_report(
        with_mlp,
        "data=2",
        lora=2,
        reference=False,
        init_cache=tunix_shaped.init_cache,
        **KW,
    )
    note = next(n for n in found.notes if "get none" in n)
    # 2 attention blocks and the model's own embedding: weights, no adapter
    assert "3 other modules" in note and "2 Attention" in note
    assert "1 _WithMLP" in note and "lora='model'" in note
    assert "Einsum" in note


def test_an_unknown_topology_is_refused_before_the_model_is_built() -> None:
    built: list[int] = []

    def factory(rngs: nnx.Rngs) -> Any:
        built.append(1)
        return SMALL(rngs)

    with pytest.raises(ArgumentError) as caught:
        rl_memory_report(factory, "data=2", topology="bogus-8", **KW)
    assert caught.value.argument == "topology" and built == []


@pytest.mark.parametrize(
    ("argument", "value"),
    [("donate", "params"), ("offload", "yes"), ("optimizer", 3), ("topology", 8)],
)
def test_bad_choices_are_one_line_naming_the_argument(
    argument: str, value: Any
) -> None:
    with pytest.raises(ArgumentError) as caught:
        rl_memory_report(SMALL, "data=2", **(KW | {argument: value}))
    assert caught.value.argument == argument
    assert "\n" not in str(caught.value) and repr(value) in str(caught.value)


def test_sequences_that_do_not_split_name_batch_and_generations() -> None:
    with pytest.raises(ArgumentError) as caught:
        rl_memory_report(SMALL, "data=4", **(KW | {"generations": 3}))
    assert caught.value.argument == "batch"
    words = str(caught.value)
    assert "`batch` 2 x `generations` 3 = 6 sequences" in words
    assert "multiple of 4" in words and "prefill" not in words

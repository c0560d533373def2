"""A PPO step: the critic's two programs beside the actor's, and tunix's PPO losses.

The losses against hand arithmetic and, with tunix installed
(``pytest.importorskip``), against ``ppo_policy_loss_fn`` and
``ppo_value_loss_fn`` themselves. The report: the critic's values and its
training step are two more phases, its parameters and optimizer state
resident on the actor's devices (their bytes from ``count_params``), the
values program a hand-written ``jax.jit`` of the critic's forward and the
critic's step flax's own ``nnx.Optimizer`` on the value loss, byte for byte.
"""

import functools
import json
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from nnx_introspect import ArgumentError, RLMemoryReport, count_params, rl_memory_report
from nnx_introspect._rl.loss import per_token_logps
from nnx_introspect._rl.ppo import CLIP_RANGE_VALUE, PPO_EPSILON, ppo_loss, value_loss
from nnx_introspect._step.values import token_values
from nnx_introspect.examples import LlamaConfig, llama, llama_critic
from tests.cli_helpers import run

CFG = LlamaConfig(vocab=64, d_model=32, n_layers=2, n_heads=2, d_ff=64)
ACTOR = llama(CFG)
CRITIC = llama_critic(CFG)
B, P, C = 4, 8, 8

# the command line asks for the report's programs again, and the critic on
# devices of its own for the actor's: the module's cache compiles each once
pytestmark = pytest.mark.usefixtures("one_compile_per_program")


def actor(rngs: Any) -> Any:
    """The actor by name, for the command line."""
    return ACTOR(rngs)


def critic(rngs: Any) -> Any:
    """The critic by name, for the command line."""
    return CRITIC(rngs)


@pytest.fixture(scope="module")
def report() -> RLMemoryReport:
    return rl_memory_report(
        ACTOR,
        "data=2",
        batch=B,
        generations=1,
        prompt=P,
        completion=C,
        critic=CRITIC,
        max_device_bytes="64MiB",
    )


# --- the losses ----------------------------------------------------------------


def _batch(rng: np.random.Generator) -> tuple[jax.Array, ...]:
    prompt = jnp.asarray(rng.integers(2, CFG.vocab, (B, P)), jnp.int32)
    completion = jnp.asarray(rng.integers(2, CFG.vocab, (B, C)), jnp.int32)
    mask = (rng.random((B, C)) < 0.6).astype(np.int32)
    mask[:, 0] = 1
    return prompt, completion, jnp.asarray(mask)


def test_the_policy_loss_by_hand() -> None:
    model = ACTOR(nnx.Rngs(0))
    rng = np.random.default_rng(0)
    prompt, completion, mask = _batch(rng)
    logps = np.asarray(per_token_logps(model, prompt, completion, temperature=1))
    old = logps + 0.3 * rng.normal(size=(B, C))
    adv = rng.normal(size=(B, C))
    ratio = np.exp(logps - old)
    clipped = np.clip(ratio, 1 - PPO_EPSILON, 1 + PPO_EPSILON)
    assert ((ratio < 1 - PPO_EPSILON) | (ratio > 1 + PPO_EPSILON)).any()
    per_token = np.maximum(-ratio * adv, -clipped * adv)
    m = np.asarray(mask, np.float64)
    expected = (per_token * m).sum() / (m.sum() + 1e-8)
    batch = (prompt, completion, mask, jnp.asarray(adv, jnp.float32))
    got = ppo_loss(model, (*batch, jnp.asarray(old, jnp.float32)))
    assert got.dtype == jnp.float32
    assert float(got) == pytest.approx(expected, abs=1e-5)


def test_the_value_loss_by_hand() -> None:
    model = CRITIC(nnx.Rngs(0))
    rng = np.random.default_rng(1)
    prompt, completion, mask = _batch(rng)
    tokens = jnp.concatenate([prompt, completion], axis=1)
    v = np.asarray(token_values(model, tokens))[:, P - 1 : P + C - 1]
    old = v + 0.4 * rng.normal(size=(B, C))
    returns = rng.normal(size=(B, C))
    vclip = np.clip(v, old - CLIP_RANGE_VALUE, old + CLIP_RANGE_VALUE)
    assert (vclip != v).any()  # the clip is exercised
    losses = np.maximum((v - returns) ** 2, (vclip - returns) ** 2)
    m = np.asarray(mask, np.float64)
    expected = 0.5 * (losses * m).sum() / (m.sum() + 1e-8)
    f32 = functools.partial(jnp.asarray, dtype=jnp.float32)
    got = value_loss(model, (prompt, completion, mask, f32(returns), f32(old)))
    assert float(got) == pytest.approx(expected, abs=1e-5)


def test_a_critic_without_a_value_head_is_refused_naming_it() -> None:
    lm = ACTOR(nnx.Rngs(0))
    with pytest.raises(ArgumentError, match=r"\[batch, sequence, 1\]") as e:
        token_values(lm, jnp.zeros((2, 5), jnp.int32))
    assert e.value.argument == "critic"


def test_the_defaults_are_tunixs() -> None:
    pytest.importorskip("tunix")
    from tunix.rl.ppo.ppo_learner import PPOConfig

    config = PPOConfig()
    assert config.epsilon_low == config.epsilon_high == PPO_EPSILON
    assert config.clip_range_value == CLIP_RANGE_VALUE
    assert config.epsilon_c is None and config.entropy_coef is None
    assert getattr(config, "kl_coef", 0.0) == 0.0  # no KL term in the loss


class _SegmentedCritic(nnx.Module):
    """The example critic taking the ``segment_ids`` tunix's ``compute_score``
    passes (all one segment here: no effect on the values)."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.inner = CRITIC(rngs)

    def __call__(
        self,
        tokens: jax.Array,
        positions: Any = None,
        cache: Any = None,
        attention_mask: Any = None,
        segment_ids: Any = None,
    ) -> Any:
        return self.inner(tokens, positions, cache, attention_mask)


def test_equal_tunixs_ppo_losses() -> None:
    pytest.importorskip("tunix")
    from tunix.rl import algo_core, common
    from tunix.rl.ppo.ppo_learner import PPOConfig, TrainExample

    from tests.tunix_lm import TINY, tiny_llama3

    policy = tiny_llama3(nnx.Rngs(0))
    valuer = _SegmentedCritic(nnx.Rngs(1))
    b, p, c, pad_id, eos_id = 4, 5, 6, 0, 1
    rng = np.random.default_rng(2)
    prompt = jnp.asarray(rng.integers(2, CFG.vocab, (b, p)), jnp.int32)
    completion = jnp.asarray(rng.integers(2, CFG.vocab, (b, c)), jnp.int32)
    mask_np = (rng.random((b, c)) < 0.5).astype(np.int32)
    mask_np[:, 0] = 1
    mask = jnp.asarray(mask_np)
    assert CFG.vocab <= TINY.vocab_size  # the same tokens for both models
    graphdef, state = nnx.split(policy)
    logps = common.compute_per_token_logps(
        graphdef, state, prompt, completion, pad_id, eos_id
    )
    tokens = jnp.concatenate([prompt, completion], axis=1)
    values = np.asarray(token_values(valuer, tokens))[:, p - 1 : p + c - 1]

    def noisy(x: Any, scale: float) -> jax.Array:
        return jnp.asarray(np.asarray(x) + scale * rng.normal(size=(b, c)), jnp.float32)

    old, advantages = noisy(logps, 0.3), noisy(np.zeros((b, c)), 1.0)
    returns, old_values = noisy(np.zeros((b, c)), 1.0), noisy(values, 0.4)
    example = TrainExample(
        prompt_ids=prompt,
        prompt_mask=jnp.ones_like(prompt),
        completion_ids=completion,
        completion_mask=mask,
        advantages=advantages,
        ref_per_token_logps=None,
        old_per_token_logps=old,
        returns=returns,
        old_values=old_values,
    )
    config = PPOConfig()
    theirs, aux = nnx.jit(
        lambda m: algo_core.ppo_policy_loss_fn(m, example, config, pad_id, eos_id)
    )(policy)
    assert 0 < float(aux["pg_clipfrac"]) < 1  # the clip is exercised
    batch = (prompt, completion, mask, advantages, old)
    assert float(nnx.jit(ppo_loss)(policy, batch)) == pytest.approx(
        float(theirs), abs=1e-5
    )
    theirs_v, aux_v = nnx.jit(
        lambda m: algo_core.ppo_value_loss_fn(
            m, example, config.clip_range_value, pad_id, eos_id
        )
    )(valuer)
    assert 0 < float(aux_v["vf_clipfrac"]) < 1
    batch_v = (prompt, completion, mask, returns, old_values)
    assert float(nnx.jit(value_loss)(valuer, batch_v)) == pytest.approx(
        float(theirs_v), abs=1e-5
    )


# --- the report ----------------------------------------------------------------


def test_the_critic_adds_two_phases_and_two_residents(report: RLMemoryReport) -> None:
    assert [p.name for p in report.phases] == [
        "prefill",
        "decode",
        "reference",
        "values",
        "train",
        "critic train",
    ]
    assert report.algorithm == "PPO" and report.critic == "Llama"
    roles = dict(report.roles)
    n = count_params(CRITIC(nnx.Rngs(0)))
    assert roles["critic parameters"] == 4 * n  # float32, replicated over data
    # AdamW: two float32 moments a parameter, and its step count
    assert 8 * n <= roles["critic optimizer state"] <= 8 * n + 64
    phases = {p.name: p for p in report.phases}
    for name, p in phases.items():
        resident = dict(p.resident)
        if name in ("values", "critic train"):
            assert "critic parameters" not in resident  # its own program's
        else:
            assert resident["critic parameters"] == roles["critic parameters"]
        assert ("critic optimizer state" in resident) == (name != "critic train")
    assert report.peak_bytes == max(p.peak_bytes for p in report.phases)
    data = report.json_data()
    assert (data["algorithm"], data["critic"]) == ("PPO", "Llama")
    json.dumps(data)
    assert report.to_markdown().startswith("**One PPO step of Llama with the critic")


def _mesh() -> Mesh:
    return Mesh(jax.devices()[:2], ("data",))


def _placed(tree: Any, spec: PartitionSpec) -> Any:
    where = NamedSharding(_mesh(), spec)
    return jax.tree.map(lambda x: jax.device_put(x, where), tree)


def test_the_values_are_a_hand_written_forward(report: RLMemoryReport) -> None:
    graphdef, state = nnx.split(CRITIC(nnx.Rngs(0)))

    def values(state: Any, tokens: jax.Array) -> jax.Array:
        out: jax.Array = nnx.merge(graphdef, state)(tokens)[..., 0]
        return out

    tokens = _placed(jnp.zeros((B, P + C), jnp.int32), PartitionSpec("data"))
    state = _placed(state, PartitionSpec())
    memory = jax.jit(values).lower(state, tokens).compile().memory_analysis()
    assert memory is not None
    mine = report.programs["values"]
    assert mine.argument_bytes == memory.argument_size_in_bytes
    assert mine.output_bytes == memory.output_size_in_bytes


def test_the_critic_step_is_tunixs_trainer_step(report: RLMemoryReport) -> None:
    """flax's optimizer on the value loss, jitted as tunix's trainer jits it.

    google-tunix 0.1.7's critic trainer is a ``PeftTrainer``: ``nnx.jit(
    train_step, donate_argnames=("optimizer",))``, the model not donated.
    """
    model = CRITIC(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
    nnx.update(model, _placed(nnx.state(model), PartitionSpec()))
    nnx.update(optimizer, _placed(nnx.state(optimizer), PartitionSpec()))

    def train_step(model: Any, optimizer: Any, batch: tuple[Any, ...]) -> Any:
        loss, grads = nnx.value_and_grad(lambda m: value_loss(m, batch))(model)
        optimizer.update(model, grads)
        return loss

    f32 = jnp.float32
    batch = (
        jnp.zeros((B, P), jnp.int32),
        jnp.zeros((B, C), jnp.int32),
        *(jnp.zeros((B, C), f32) for _ in range(3)),
    )
    batch = _placed(batch, PartitionSpec("data"))
    jitted = nnx.jit(train_step, donate_argnames=("optimizer",))
    memory = jitted.lower(model, optimizer, batch).compile().memory_analysis()
    assert memory is not None
    mine = report.programs["critic train"]
    assert mine.argument_bytes == memory.argument_size_in_bytes
    assert mine.output_bytes == memory.output_size_in_bytes
    assert mine.alias_bytes == memory.alias_size_in_bytes
    # only the optimizer's state is reused: its bytes, the parameters' not
    state = dict(report.roles)["critic optimizer state"]
    assert mine.alias_bytes == state


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"generations": 2, "critic": CRITIC}, "generations"),
        ({"generations": 1, "critic": "no_such_module:critic"}, "critic"),
        ({"generations": 1, "critic": 3}, "critic"),
    ],
)
def test_bad_critic_input_is_refused_before_any_compile(
    kwargs: dict[str, Any], argument: str
) -> None:
    with pytest.raises(ArgumentError) as e:
        rl_memory_report(ACTOR, "data=2", batch=B, prompt=P, completion=C, **kwargs)
    assert e.value.argument == argument
    assert f"`{argument}`" in str(e.value)


def test_cli_critic(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "rl",
        "tests.test_rl_ppo:actor",
        "--critic",
        "tests.test_rl_ppo:critic",
        "--mesh",
        "data=2",
        "--batch",
        str(B),
        "--generations",
        "1",
        "--prompt",
        str(P),
        "--completion",
        str(C),
        "--max-device-bytes",
        "64MiB",
        "--format",
        "json",
    ]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["algorithm"] == "PPO"
    assert [p["name"] for p in data["phases"]][-3:] == [
        "values",
        "train",
        "critic train",
    ]
    bad = [a if a != "1" else "4" for a in argv]  # four generations a prompt
    code, out, err = run(bad, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "--generations" in err


def test_the_critic_on_devices_of_its_own() -> None:
    found = rl_memory_report(
        ACTOR,
        "data=2",
        role_meshes={"critic": "data=2"},
        batch=B,
        generations=1,
        prompt=P,
        completion=C,
        critic=CRITIC,
        max_device_bytes="64MiB",
    )
    assert found.layout == (
        "disaggregated: actor, rollout and reference on data=2 (2 devices); "
        "critic on data=2 (2 devices)"
    )
    phases = {p.name: p for p in found.phases}
    for name in ("values", "critic train"):
        assert phases[name].mesh == "data=2 (critic)"
    # the critic's slice holds the critic alone; the others never see it
    assert dict(phases["values"].resident) == {
        "critic optimizer state": dict(found.roles)["critic optimizer state"]
    }
    assert phases["critic train"].resident == ()
    for name in ("prefill", "decode", "reference", "train"):
        assert not any(r.startswith("critic") for r, _ in phases[name].resident)

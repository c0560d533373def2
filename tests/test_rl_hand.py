"""The RL phases against programs written by hand with JAX and flax alone.

The reference's program: ``jax.jit`` of the model's logits turned into each
next token's log-probability (``jax.nn.log_softmax``, ``take_along_axis``),
the tokens split over ``data``. The train phase: flax's own
``nnx.Optimizer(model, optax.adamw(...), wrt=nnx.Param)`` updated on the
GRPO loss, jitted as tunix's trainer jits it (google-tunix 0.1.7,
``sft/peft_trainer.py``: ``nnx.jit(train_step, donate_argnames=("optimizer",))``,
the optimizer alone donated) on the same mesh. Each is compiled by XLA here;
its ``memory_analysis()`` is held against the phase's program, argument for
argument and output for output.
"""

from typing import Any

import jax
import jax.numpy as jnp
import optax
import pytest
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from nnx_introspect import RLMemoryReport, rl_memory_report
from nnx_introspect._rl.loss import grpo_loss
from nnx_introspect.examples import LlamaConfig, llama

SMALL = llama(LlamaConfig(vocab=64, d_model=32, n_layers=2, n_heads=2, d_ff=64))
B, G, P, C = 2, 2, 8, 8
S = B * G


@pytest.fixture(scope="module")
def report() -> RLMemoryReport:
    return rl_memory_report(
        SMALL, "data=2", batch=B, generations=G, prompt=P, completion=C, cache=False
    )


def _mesh() -> Mesh:
    return Mesh(jax.devices()[:2], ("data",))


def _placed(tree: Any, spec: PartitionSpec) -> Any:
    where = NamedSharding(_mesh(), spec)
    return jax.tree.map(lambda x: jax.device_put(x, where), tree)


def test_the_reference_is_a_hand_written_forward(report: RLMemoryReport) -> None:
    model = SMALL(nnx.Rngs(0))
    graphdef, state = nnx.split(model)

    def logprobs(state: Any, tokens: jax.Array) -> jax.Array:
        logits = nnx.merge(graphdef, state)(tokens)
        scores = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), axis=-1)
        return jnp.take_along_axis(scores, tokens[:, 1:, None], axis=-1)[..., 0]

    tokens = _placed(jnp.zeros((S, P + C), jnp.int32), PartitionSpec("data"))
    state = _placed(state, PartitionSpec())
    memory = jax.jit(logprobs).lower(state, tokens).compile().memory_analysis()
    assert memory is not None
    ref = report.programs["reference"]
    assert ref.argument_bytes == memory.argument_size_in_bytes
    assert ref.output_bytes == memory.output_size_in_bytes


def test_the_train_phase_is_tunixs_train_step_on_the_grpo_loss(
    report: RLMemoryReport,
) -> None:
    model = SMALL(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
    nnx.update(model, _placed(nnx.state(model), PartitionSpec()))
    nnx.update(optimizer, _placed(nnx.state(optimizer), PartitionSpec()))

    def train_step(model: Any, optimizer: Any, batch: tuple[Any, ...]) -> Any:
        loss, grads = nnx.value_and_grad(lambda m: grpo_loss(m, batch))(model)
        optimizer.update(model, grads)
        return loss

    f32 = jnp.float32
    batch = (
        jnp.zeros((S, P), jnp.int32),
        jnp.zeros((S, C), jnp.int32),
        jnp.ones((S, C), f32),
        jnp.zeros((S,), f32),
        jnp.zeros((S, C), f32),
        jnp.zeros((S, C), f32),
    )
    batch = _placed(batch, PartitionSpec("data"))
    jitted = nnx.jit(train_step, donate_argnames=("optimizer",))
    memory = jitted.lower(model, optimizer, batch).compile().memory_analysis()
    assert memory is not None
    train = report.programs["train"]
    assert train.argument_bytes == memory.argument_size_in_bytes
    assert train.output_bytes == memory.output_size_in_bytes
    assert train.alias_bytes == memory.alias_size_in_bytes
    assert train.temp_bytes == memory.temp_size_in_bytes
    held = (
        memory.argument_size_in_bytes
        + memory.output_size_in_bytes
        + memory.temp_size_in_bytes
        - memory.alias_size_in_bytes
    )
    phase = {p.name: p for p in report.phases}["train"]
    assert phase.program_peak_bytes == held

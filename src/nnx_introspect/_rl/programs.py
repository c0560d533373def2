"""Each phase's program of an RL step, compiled through the library's pipelines.

The rollout through the serving report, the actor's and the critic's steps
through the step report, the reference's log-probabilities and the critic's
values as forward program kinds of the step's pipeline (``LOGPROBS``,
``VALUES``). :func:`~nnx_introspect.rl_memory_report` adds them up
(:mod:`~nnx_introspect._rl.assemble`).
"""

import contextlib
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec

from nnx_introspect._mesh import as_abstract_mesh
from nnx_introspect._rl.layout import Layout
from nnx_introspect._rl.loss import grpo_loss
from nnx_introspect._rl.ppo import ppo_loss, value_loss
from nnx_introspect._search import named_axes
from nnx_introspect._serve import TENSOR_PARALLEL_AXES, serve_memory_report
from nnx_introspect._step import (
    LOGPROBS,
    VALUES,
    StepSpec,
    devices_measured,
    measure_step,
    step_memory_report,
)
from nnx_introspect._typing import ArgumentError

__all__ = [
    "batch_spec",
    "completed",
    "critic_reports",
    "reference_report",
    "role_options",
    "rollout_report",
    "train_report",
]


def role_options(
    found: tuple[Layout, Any, list[str]],
    role: str,
    models: tuple[Any, Any],
    shared: dict[str, Any],
) -> tuple[dict[str, int], dict[str, Any]]:
    """A role's mesh axes and its programs' options, on its slice.

    ``found`` is the layout, the rollout's report and the notes;
    ``models`` the actor and the role's model (the critic's, or the actor).
    The axes are the rollout's where the role shares its devices (as the
    rollout compiled them), else the slice's mesh completed with the axes the
    actor's and the model's shardings name.
    """
    layout, rollout, notes = found
    actor, model = models
    if layout.shared(role, "rollout"):
        axes = dict(rollout.mesh_axes)
    else:
        axes = completed(actor, layout.slice(role).mesh, notes)
    if model is not actor:  # and each axis the critic's sharding names
        axes = completed(model, axes, notes)
    return axes, shared | {
        "topology": layout.slice(role).topology,
        "batch_spec": batch_spec(tuple(dict(axes).items())),
    }


def batch_spec(mesh_axes: tuple[tuple[str, int], ...]) -> PartitionSpec:
    """The sequences over the data-parallel axes (every axis but ``tp``'s)."""
    dp = tuple(a for a, _ in mesh_axes if a not in TENSOR_PARALLEL_AXES)
    if not dp:
        return PartitionSpec()
    return PartitionSpec(dp if len(dp) > 1 else dp[0])


_RENAMED = {
    "weights": "rollout_weights",
    "sequences": "batch",
    "context": "completion",
}
"""The rollout's arguments as :func:`rl_memory_report` names them."""


@contextlib.contextmanager
def _renamed(sequences: int, length: int) -> Iterator[None]:
    """The rollout's argument errors re-raised naming this function's argument."""
    try:
        yield
    except ArgumentError as error:
        name = _RENAMED.get(error.argument)
        if name is None:
            raise
        text = str(error).replace(f"`{error.argument}`", f"`{name}`")
        text = text.replace(f"{error.argument}=", f"{name}=")
        where = {
            "batch": f" (the rollout's {sequences} sequences are batch x generations)",
            "completion": f" (the rollout context of {length} is prompt + completion)",
        }.get(name, "")
        raise ArgumentError(name, text + where) from None


def critic_reports(
    critic: Any,
    mesh_axes: dict[str, int],
    sizes: tuple[int, int, int],
    optimizer: Any,
    common: dict[str, Any],
) -> tuple[Any, Any]:
    """The critic's two programs: its values of the tokens, its training step.

    The values as :data:`~nnx_introspect._step.VALUES` computes them (forward
    only), the step on tunix's PPO value loss: prompt and completion ids,
    the completion mask, the returns and the old values.
    """
    sequences, p, c = sizes
    values = _forward(critic, mesh_axes, common, (sequences, p + c), VALUES)
    batch = (
        jax.ShapeDtypeStruct((sequences, p), jnp.int32),
        jax.ShapeDtypeStruct((sequences, c), jnp.int32),
        *(jax.ShapeDtypeStruct((sequences, c), jnp.float32) for _ in range(3)),
    )
    options = {k: v for k, v in common.items() if k != "lora"}
    step = step_memory_report(
        critic,
        mesh_axes,
        batch,
        loss=value_loss,
        optimizer=optimizer,
        tokens_per_step=sequences * (p + c),
        **options,
    )
    return values, step


def rollout_report(
    actor: Any,
    layout: Layout,
    sizes: tuple[int, int, int],
    serving: dict[str, Any],
    notes: list[str],
) -> Any:
    """The rollout's prefill and decode on its slice (the serving report)."""
    sequences, p, c = sizes
    mesh = completed(actor, layout.slice("rollout").mesh, notes)
    with _renamed(sequences, p + c):
        rollout = serve_memory_report(
            actor,
            mesh,
            sequences=sequences,
            context=p + c,
            prompt=p,
            topology=layout.slice("rollout").topology,
            **serving,
        )
    notes += rollout.notes
    return rollout


def completed(actor: Any, mesh: Any, notes: list[str]) -> Any:
    """``mesh`` with each axis the actor's sharding names added at size 1.

    A note says what was added (once); a concrete ``Mesh`` is the user's, as
    it is (its devices cannot grow an axis).
    """
    if isinstance(mesh, Mesh):
        return mesh
    abstract = as_abstract_mesh(mesh)
    axes = dict(zip(abstract.axis_names, map(int, abstract.axis_sizes), strict=True))
    missing = [a for a in named_axes(actor) if a not in axes]
    if missing:
        given = ",".join(f"{a}={n}" for a, n in axes.items())
        axes |= {axis: 1 for axis in missing}
        whole = ",".join(f"{a}={n}" for a, n in axes.items())
        note = (
            f"The mesh {given} leaves out {', '.join(missing)}, which the actor's "
            f"sharding names: compiled on {whole} (an axis of size 1 shards "
            "nothing)."
        )
        if note not in notes:
            notes.append(note)
    return axes


def train_report(
    actor: Any,
    mesh_axes: dict[str, int],
    sizes: tuple[int, int, int],
    optimizer: Any,
    common: dict[str, Any],
    *,
    ppo: bool = False,
) -> Any:
    """The actor's step on the GRPO loss, or with a critic PPO's policy loss.

    Its batch as :func:`grpo_loss` takes it: prompt ids, completion ids, mask,
    advantages, reference and old log-probabilities; as :func:`ppo_loss` does:
    prompt ids, completion ids, mask, per-token advantages, old
    log-probabilities.
    """
    sequences, p, c = sizes

    def ids(n: int) -> Any:
        return jax.ShapeDtypeStruct((sequences, n), jnp.int32)

    def floats(*shape: int) -> Any:
        return jax.ShapeDtypeStruct(shape, jnp.float32)

    tokens = floats(sequences, c)
    batch: tuple[Any, ...] = (
        (ids(p), ids(c), tokens, tokens, tokens)
        if ppo
        else (ids(p), ids(c), tokens, floats(sequences), tokens, tokens)
    )
    return step_memory_report(
        actor,
        mesh_axes,
        batch,
        loss=ppo_loss if ppo else grpo_loss,
        optimizer=optimizer,
        tokens_per_step=sequences * (p + c),
        **common,
    )


def reference_report(
    actor: Any,
    mesh_axes: dict[str, int],
    common: dict[str, Any],
    sizes: tuple[int, int],
) -> Any:
    """The reference's per-token log-probabilities (the step pipeline's LOGPROBS)."""
    return _forward(actor, mesh_axes, common, sizes, LOGPROBS)


def _forward(
    model: Any,
    mesh_axes: dict[str, int],
    common: dict[str, Any],
    sizes: tuple[int, int],
    program: Any,
) -> Any:
    """A forward program of the step pipeline (``LOGPROBS``, ``VALUES``)."""
    sequences, length = sizes
    skip = ("cache", "lora", "measure")
    options = {k: v for k, v in common.items() if k not in skip}
    tokens = jax.ShapeDtypeStruct((sequences, length), jnp.int32)
    spec = StepSpec(model, mesh_axes, tokens, loss=None, **options)
    runs = common["measure"]
    if runs is not None:  # on this process's devices, their target named
        spec = devices_measured(spec, runs)
    return measure_step(spec, cache=common["cache"], program=program, runs=runs)

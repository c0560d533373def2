"""Each phase's program of an RL step: planned from the request, then compiled.

The plan (:func:`plan_rl`) is what the request alone decides: the rollout's
serving request (a :class:`~nnx_introspect._serve.ServeSpec` on the rollout's
slice, checked) and each learner program's batch, loss and kind. The compile
(:func:`compile_programs`) runs them in the order a step does: the rollout
through the serving pipeline (:func:`~nnx_introspect._serve.measure_serve`),
then the actor's step, the reference's log-probabilities and the critic's
values and step through the step pipeline
(:func:`~nnx_introspect._step.measure_step`, program kinds ``LOGPROBS`` and
``VALUES`` for the forward ones), each on its role's slice: the rollout's mesh
as compiled where the role shares its devices.
:func:`~nnx_introspect.measure_rl` adds them up
(:mod:`~nnx_introspect._rl.assemble`).
"""

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec

from nnx_introspect._mesh import as_abstract_mesh
from nnx_introspect._rl.choices import DONATIONS
from nnx_introspect._rl.loss import grpo_loss
from nnx_introspect._rl.ppo import ppo_loss, value_loss
from nnx_introspect._rl.spec import RLSpec
from nnx_introspect._serve import (
    TENSOR_PARALLEL_AXES,
    ServeMemoryReport,
    ServeOptions,
    ServeSpec,
    measure_serve,
)
from nnx_introspect._step import (
    LOGPROBS,
    VALUES,
    ProgramKind,
    StepMemoryReport,
    StepSpec,
    devices_measured,
    measure_step,
)
from nnx_introspect._sweep import named_axes
from nnx_introspect._typing import ArgumentError

__all__ = [
    "Learner",
    "RLPlan",
    "RLPrograms",
    "batch_spec",
    "compile_programs",
    "completed",
    "plan_rl",
]


@dataclasses.dataclass(frozen=True)
class Learner:
    """One program the step pipeline compiles after the rollout.

    Attributes:
        name: The phase: ``"train"``, ``"reference"``, ``"values"`` or
            ``"critic train"``.
        role: The role whose slice it runs on.
        critic: Whether it is the critic's model (else the actor's).
        batch: Its batch, as its loss takes it.
        options: Its :class:`~nnx_introspect.StepSpec` options beside those
            of its slice (the loss, the optimizer, LoRA, the tokens a step
            trains on).
        kind: The program kind compiled
            (:mod:`~nnx_introspect._step.registry`).

    Example:
        >>> Learner("reference", "reference", False, (), {"loss": None}, LOGPROBS)
        ... # doctest: +ELLIPSIS
        Learner(name='reference', role='reference', critic=False, ...)
    """

    name: str
    role: str
    critic: bool
    batch: tuple[Any, ...]
    options: dict[str, Any]
    kind: ProgramKind


@dataclasses.dataclass(frozen=True)
class RLPlan:
    """What the request decides before any compile.

    Attributes:
        rollout: The rollout's serving request, on its slice's mesh (completed
            with the axes the actor's sharding names).
        learners: The programs compiled after it, in the order they run.
        notes: The plan's notes so far (an axis the rollout's mesh gained).
    """

    rollout: ServeSpec
    learners: tuple[Learner, ...]
    notes: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class RLPrograms:
    """Each program of the step, compiled (or read from the cache) and read.

    Attributes:
        rollout: The serving report of the rollout's prefill and decode.
        train: The actor's training step.
        reference: The reference's log-probabilities (``None``: no reference).
        values: The critic's values (``None``: GRPO, no critic).
        critic_train: The critic's training step (``None``: no critic).
        notes: The notes of the plan, the rollout's and the roles' meshes, in
            the order the programs were compiled.
    """

    rollout: ServeMemoryReport
    train: StepMemoryReport
    reference: StepMemoryReport | None
    values: StepMemoryReport | None
    critic_train: StepMemoryReport | None
    notes: tuple[str, ...]


def batch_spec(mesh_axes: tuple[tuple[str, int], ...]) -> PartitionSpec:
    """The sequences over the data-parallel axes (every axis but ``tp``'s).

    Example:
        >>> batch_spec((("fsdp", 4), ("tp", 2))), batch_spec((("tp", 8),))
        (P('fsdp',), P())
    """
    dp = tuple(a for a, _ in mesh_axes if a not in TENSOR_PARALLEL_AXES)
    if not dp:
        return PartitionSpec()
    return PartitionSpec(dp if len(dp) > 1 else dp[0])


_RENAMED = {
    "weights": "rollout_weights",
    "sequences": "batch",
    "context": "completion",
}
"""The rollout's arguments as :func:`~nnx_introspect.rl_memory_report` names them."""


@contextlib.contextmanager
def _renamed(sequences: int, length: int) -> Iterator[None]:
    """The rollout's argument errors re-raised naming the RL step's argument."""
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


def completed(actor: Any, mesh: Any, notes: list[str]) -> Any:
    """``mesh`` with each axis the actor's sharding names added at size 1.

    ``actor`` as :func:`~nnx_introspect._sweep.named_axes` takes it: the
    spec's abstract model (built once) or the target.

    A note says what was added (once); a concrete ``Mesh`` is the user's, as
    it is (its devices cannot grow an axis).

    Example:
        >>> from nnx_introspect.examples import llama_tiny_sharded
        >>> notes = []
        >>> completed(llama_tiny_sharded, "tp=2", notes)
        {'tp': 2, 'fsdp': 1}
        >>> notes[0].startswith("The mesh tp=2 leaves out fsdp")
        True
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


def plan_rl(spec: RLSpec) -> RLPlan:
    """The rollout's serving request and the learner programs, checked.

    The rollout's arguments are checked here as the serving report checks
    them (its errors name the RL step's arguments: ``rollout_weights``,
    ``batch``, ``completion``); each learner program's options are checked
    where it is compiled, after the rollout, as before.
    """
    notes: list[str] = []
    where = spec.layout.slice("rollout")
    mesh = completed(spec.model, where.mesh, notes)
    p, c = spec.prompt, spec.completion
    kv = spec.own_kv_cache if spec.kv_cache is None else spec.kv_cache
    with _renamed(spec.sequences, p + c):
        options = ServeOptions(spec.rollout_weights, kv, spec.init_cache, spec.decode)
        rollout = ServeSpec(
            spec.actor,
            mesh,
            spec.sequences,
            p + c,
            p,
            None,
            where.topology,
            spec.max_device_bytes,
            options,
            spec.compiler_flags,
        )
    return RLPlan(rollout, _learners(spec), tuple(notes))


def _learners(spec: RLSpec) -> tuple[Learner, ...]:
    """The programs after the rollout, in the order they compile.

    The actor's step on the GRPO loss (with a critic, PPO's policy loss), the
    reference's log-probabilities, the critic's values and its step on
    tunix's PPO value loss; each step donating what ``donate`` says
    (:data:`~nnx_introspect._rl.choices.DONATIONS`: tunix's critic trainer
    is a ``PeftTrainer`` too).
    """
    s, p, c = spec.sequences, spec.prompt, spec.completion

    def ids(n: int) -> Any:
        return jax.ShapeDtypeStruct((s, n), jnp.int32)

    floats = jax.ShapeDtypeStruct((s, c), jnp.float32)
    ppo = spec.critic is not None
    # GRPO: prompt and completion ids, mask, advantages, reference and old
    # log-probabilities; PPO: per-token advantages and the old ones
    rows = jax.ShapeDtypeStruct((s,), jnp.float32)
    batch = (
        (ids(p), ids(c), floats, floats, floats)
        if ppo
        else (ids(p), ids(c), floats, rows, floats, floats)
    )
    step = {"optimizer": spec.optimizer, "tokens_per_step": s * (p + c)}
    kind = DONATIONS[spec.donate]
    train = {"loss": ppo_loss if ppo else grpo_loss, "lora": spec.lora} | step
    out = [Learner("train", "actor", False, batch, train, kind)]
    forward = (ids(p + c),)
    if spec.reference:
        out.append(Learner("reference", "reference", False, forward, {}, LOGPROBS))
    if ppo:  # the critic's: ids, the completion mask, the returns, the old values
        values = (ids(p), ids(c), floats, floats, floats)
        out.append(Learner("values", "critic", True, forward, {}, VALUES))
        critic = {"loss": value_loss} | step
        out.append(Learner("critic train", "critic", True, values, critic, kind))
    return tuple(out)


def compile_programs(spec: RLSpec, plan: RLPlan) -> RLPrograms:
    """Every program of ``plan`` compiled (or read from the cache), in order.

    The rollout first; each learner then on its role's slice: the rollout's
    mesh as compiled where the role shares its devices, else the slice's
    mesh completed with the axes the actor's (and the critic's) sharding
    names.
    """
    notes = list(plan.notes)
    p, c = spec.prompt, spec.completion
    with _renamed(spec.sequences, p + c):
        rollout = measure_serve(
            plan.rollout, breakdown=spec.breakdown, cache=spec.cache, runs=spec.measure
        )
    notes += rollout.notes
    roles: dict[str, tuple[Any, dict[str, Any]]] = {}
    found: dict[str, StepMemoryReport] = {}
    for learner in plan.learners:
        if learner.role not in roles:
            roles[learner.role] = _role(spec, learner, rollout, notes)
        axes, options = roles[learner.role]
        target = spec.critic if learner.critic else spec.actor
        built = (target, spec.critic_model if learner.critic else spec.model)
        given = options | {"loss": None} | learner.options  # forward: no loss
        given["compiler_flags"] = spec.compiler_flags
        step = StepSpec(target, axes, learner.batch, **given, _built=built)
        if spec.measure is not None:  # on this process's devices, their target named
            step = devices_measured(step, spec.measure)
        found[learner.name] = measure_step(
            step, cache=spec.cache, runs=spec.measure, program=learner.kind
        )
    return RLPrograms(
        rollout,
        found["train"],
        found.get("reference"),
        found.get("values"),
        found.get("critic train"),
        tuple(notes),
    )


def _role(
    spec: RLSpec, learner: Learner, rollout: ServeMemoryReport, notes: list[str]
) -> tuple[Any, dict[str, Any]]:
    """A role's mesh axes and its programs' options, on its slice."""
    layout, role = spec.layout, learner.role
    if layout.shared(role, "rollout"):
        axes: Any = dict(rollout.mesh_axes)
    else:
        axes = completed(spec.model, layout.slice(role).mesh, notes)
    if learner.critic and spec.critic is not spec.actor:  # and the critic's axes
        axes = completed(spec.critic_model, axes, notes)
    return axes, {
        "max_device_bytes": spec.max_device_bytes,
        "breakdown": spec.breakdown,
        "topology": layout.slice(role).topology,
        "batch_spec": batch_spec(tuple(dict(axes).items())),
    }

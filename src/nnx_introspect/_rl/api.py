"""The public :func:`rl_memory_report`: one GRPO step's programs, compiled, added up."""

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec

from nnx_introspect._accelerators.hardware import hardware_for, host_link
from nnx_introspect._mesh import as_abstract_mesh
from nnx_introspect._rl.layout import Layout, as_layout
from nnx_introspect._rl.loss import grpo_loss
from nnx_introspect._rl.ppo import ppo_loss, value_loss
from nnx_introspect._rl.report import RLMemoryReport, RLPhase
from nnx_introspect._search.meshes.candidates import named_axes
from nnx_introspect._serve import serve_memory_report
from nnx_introspect._serve.spec import TENSOR_PARALLEL_AXES
from nnx_introspect._step import (
    LOGPROBS,
    VALUES,
    StepSpec,
    as_lora,
    as_measure,
    as_model,
    built_once,
    devices_measured,
    duration,
    importable_name,
    measure_step,
    step_memory_report,
)
from nnx_introspect._typing import ArgumentError, as_int, typechecked

__all__ = ["rl_memory_report"]


def _count(value: Any, name: str) -> int:
    try:
        return as_int(value, name, minimum=1)
    except TypeError as error:
        raise ArgumentError(name, str(error)) from None


def _batch_spec(mesh_axes: tuple[tuple[str, int], ...]) -> PartitionSpec:
    """The sequences over the data-parallel axes (every axis but ``tp``'s)."""
    dp = tuple(a for a, _ in mesh_axes if a not in TENSOR_PARALLEL_AXES)
    if not dp:
        return PartitionSpec()
    return PartitionSpec(dp if len(dp) > 1 else dp[0])


def _range(estimate: Any, times: int = 1) -> tuple[float, float] | None:
    if estimate is None:
        return None
    return estimate.low_seconds * times, estimate.high_seconds * times


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


@typechecked
def rl_memory_report(
    actor: Any,
    mesh: Any,
    /,
    *,
    batch: Any,
    generations: Any,
    prompt: Any,
    completion: Any,
    reference: bool = True,
    lora: Any = None,
    critic: Any = None,
    optimizer: Any = "adamw",
    rollout_weights: Any = "bfloat16",
    kv_cache: Any = "bfloat16",
    role_meshes: Any = None,
    offload: bool = False,
    breakdown: bool = False,
    topology: str | None = None,
    max_device_bytes: Any = None,
    init_cache: Any = None,
    decode: Any = None,
    cache: bool = True,
    measure: Any = None,
) -> RLMemoryReport:
    """Whether one GRPO step fits: its four programs compiled for the target.

    The programs of one step, each compiled through the library's own
    pipelines (no device needed for a named ``topology``), on one mesh every
    role shares (colocated, as tunix's ``RLCluster`` runs them on one mesh):

    * **rollout**: the prefill of ``batch x generations`` prompts of
      ``prompt`` tokens into a KV cache of ``prompt + completion`` positions,
      and a decode step (:func:`~nnx_introspect.serve_memory_report`, the
      weights in ``rollout_weights``);
    * **reference**: the per-token log-probabilities of the ``prompt +
      completion`` tokens under the reference model (forward only; left out
      with ``reference=False``);
    * **train**: the actor's step on the GRPO loss
      (:func:`~nnx_introspect._rl.loss.grpo_loss`, tunix's own) with
      ``optimizer``.

    Each phase's peak is its program's own plus what the other roles keep
    resident while it runs (the actor's parameters and optimizer state, the
    reference's parameters, the rollout's copy of the weights when their
    dtype differs from the actor's); the step's peak is the largest, against
    the budget a step gets. The sequences split over the mesh's
    data-parallel axes (every axis but ``tp``), the weights as their
    annotations say.

    Args:
        actor: The policy model: an ``nnx.Module``, a factory or
            ``"package.module:factory"`` (a named topology compiles in child
            processes, which need the name).
        mesh: The mesh every role runs on: ``"fsdp=4,tp=2"``, a dict.
        batch: Prompts per step.
        generations: Completions per prompt (GRPO's group size).
        prompt: Tokens of each prompt.
        completion: Tokens of each completion.
        reference: Compute the reference model's log-probabilities (a KL
            term): its parameters are then resident throughout, unless
            ``lora`` makes it share the actor's frozen backbone.
        lora: Train LoRA adapters instead of every parameter (the step's
            ``lora``: a rank for adapters on every ``nnx.Linear``, or
            ``"model"`` for the model's own ``nnx.LoRAParam`` leaves). The
            backbone is frozen: no gradient, no optimizer state; the reference
            is that backbone (no second copy: tunix's LoRA reference), and
            the rollout decodes on it (the adapters' bytes stay resident).
        critic: A PPO step's critic instead of GRPO's groups (tunix's
            ``PPOLearner``): a model with a value head (``[B, T, 1]`` a call,
            :func:`~nnx_introspect.examples.llama_critic`), as ``actor`` is
            given. Two more programs: its values of the step's tokens
            (forward only) and its training step on tunix's PPO value loss
            (:func:`~nnx_introspect._rl.ppo.value_loss`, with ``optimizer``);
            the actor trains on tunix's PPO policy loss
            (:func:`~nnx_introspect._rl.ppo.ppo_loss`, per-token advantages).
            Its parameters and optimizer state are resident on its devices:
            the actor's, unless ``role_meshes`` places ``"critic"``. PPO
            samples one completion a prompt: ``generations`` must be 1.
            ``lora`` is the actor's alone.
        optimizer: The actor's optimizer (and the critic's): a name
            (``"adamw"``) or an optax transformation.
        rollout_weights: The rollout's weights dtype (``"bfloat16"``,
            ``"float32"``, ``None``: the model's own).
        kv_cache: The rollout's KV cache dtype.
        role_meshes: Roles on devices of their own (tunix's disaggregated
            ``role_to_mesh``): ``{"rollout": "tp=4"}`` runs the rollout on a
            slice of 4 devices and the other roles on ``mesh``'s (roles
            ``actor``, ``rollout``, ``reference``, and ``critic`` with one).
            Each mesh named is a slice of its own; together they must fit
            the topology (or this process's devices); each role's programs
            compile for its slice
            (``v5e-4`` of a ``v5e-8``). Each slice's peak is its own phases'
            and residents'; the actor's weights are sent to the rollout's
            slice every step (``reshard_bytes``).
        offload: Hold the roles a phase does not run on in host memory
            meanwhile (tunix's ``offload_to_cpu``): each phase's peak is its
            program's alone, and the bytes moved to and from the host per step
            are reported (``offload_bytes``), with their time over the host
            link where the target's data sheet states it (A100, H100, H200).
        breakdown: Also classify every buffer live at each phase's peak
            (:attr:`RLMemoryReport.breakdowns`): by kind (the reference's
            parameters as ``reference``, the rollout's weights as ``rollout
            weights``) and by the source line that made it.
        topology: A target such as ``"v5e-8"`` or ``"h100-8"``.
        max_device_bytes: A budget per device (``"16GiB"`` or bytes).
        init_cache: As for :func:`~nnx_introspect.serve_memory_report`.
        decode: As for :func:`~nnx_introspect.serve_memory_report`.
        cache: Read programs compiled before from the cache of compile results.
        measure: Run each phase's program on this process's devices, one
            warm-up and ``measure`` timed runs (``True``: 5), as
            :func:`~nnx_introspect.step_memory_report`'s ``measure`` does:
            each phase's ``measured`` beside its estimate, and the step's
            measured time (:attr:`RLMemoryReport.measured_step_seconds`: the
            phases run one after another; the decode's runs are one step,
            times ``completion``). Colocated only (no ``role_meshes``); the
            devices must be this process's.

    Returns:
        The :class:`~nnx_introspect._rl.report.RLMemoryReport`.

    Raises:
        ArgumentError: A size not a positive integer (naming it), or any
            argument its program's own report refuses, before that program
            compiles.

    Example:
        >>> from nnx_introspect import rl_memory_report
        >>> from nnx_introspect.examples import LlamaConfig, llama
        >>> small = llama(LlamaConfig(vocab=64, d_model=32, n_layers=2,
        ...                           n_heads=2, d_ff=64))
        >>> report = rl_memory_report(small, "data=2", batch=2, generations=2,
        ...                           prompt=8, completion=8,
        ...                           max_device_bytes="64MiB")
        >>> [p.name for p in report.phases], report.fits()
        (['prefill', 'decode', 'reference', 'train'], True)
        >>> report.peak_bytes == max(p.peak_bytes for p in report.phases)
        True
    """
    with built_once():  # the actor is built once for every program
        b, g = _count(batch, "batch"), _count(generations, "generations")
        p, c = _count(prompt, "prompt"), _count(completion, "completion")
        flags = {"reference": reference, "cache": cache, "offload": offload}
        _check_flags(flags | {"breakdown": breakdown})
        runs = as_measure(measure)
        if lora is not None:  # checked on the model before any compile
            lora = as_lora(lora, as_model(actor))
        if critic is not None:
            _check_critic(critic, g)
        layout = as_layout(mesh, role_meshes, topology, reference, critic is not None)
        if runs is not None and not layout.colocated:
            raise ArgumentError(
                "measure",
                "`measure` runs a colocated step (every role on this process's "
                f"devices), got role_meshes={role_meshes!r}: measure without "
                "role_meshes, or each slice's programs on devices of its own.",
            )
        sequences, length = b * g, p + c
        notes: list[str] = []
        serving = {
            "max_device_bytes": max_device_bytes,
            "weights": rollout_weights,
            "kv_cache": kv_cache,
            "init_cache": init_cache,
            "decode": decode,
            "cache": cache,
            "breakdown": breakdown,
            "measure": runs,
        }
        rollout = _rollout(actor, layout, (sequences, p, c), serving, notes)

        def common(role: str, model: Any = actor) -> tuple[Any, dict[str, Any]]:
            if layout.shared(role, "rollout"):  # as the rollout compiled it
                axes = dict(rollout.mesh_axes)
            else:
                axes = _completed(actor, layout.slice(role).mesh, notes)
            if model is not actor:  # and each axis the critic's sharding names
                axes = _completed(model, axes, notes)
            return axes, {
                "topology": layout.slice(role).topology,
                "max_device_bytes": max_device_bytes,
                "batch_spec": _batch_spec(tuple(dict(axes).items())),
                "cache": cache,
                "breakdown": breakdown,
                "measure": runs,
            }

        axes, options = common("actor")
        train = _train(
            actor,
            axes,
            (sequences, p, c),
            optimizer,
            options | {"lora": lora},
            ppo=critic is not None,
        )
        ref = None
        if reference:
            ref = _reference(actor, *common("reference"), (sequences, length))
        parts = (rollout, train, ref)
        valued = None
        if critic is not None:  # on its slice (the actor's, unless placed)
            axes, options = common("critic", critic)
            valued = (
                *_critic(critic, axes, (sequences, p, c), optimizer, options),
                critic,
            )
        return _assemble(
            parts, layout, (b, g, p, c), tuple(notes), lora, offload, valued
        )


def _name(model: Any) -> str:
    """A model's name as the reports give it: its import name, or its class's."""
    return importable_name(model) or type(as_model(model)).__name__


def _check_critic(critic: Any, generations: int) -> None:
    """A critic is a model, and PPO's step one completion a prompt."""
    try:
        as_model(critic)
    except (ArgumentError, TypeError) as error:
        text = str(error).replace("`target`", "`critic`")
        raise ArgumentError("critic", text) from None
    if generations != 1:
        raise ArgumentError(
            "generations",
            f"`generations` must be 1 with a `critic`, got {generations}: a PPO "
            "step samples one completion a prompt (tunix's PPOLearner); its "
            "advantages come from the critic's values, not a group's rewards. "
            "Pass generations=1, or no critic for GRPO.",
        )


def _critic(
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


def _check_flags(flags: dict[str, Any]) -> None:
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise ArgumentError(name, f"`{name}` must be True or False, got {value!r}.")


def _rollout(
    actor: Any,
    layout: Layout,
    sizes: tuple[int, int, int],
    serving: dict[str, Any],
    notes: list[str],
) -> Any:
    """The rollout's prefill and decode on its slice (the serving report)."""
    sequences, p, c = sizes
    mesh = _completed(actor, layout.slice("rollout").mesh, notes)
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


def _completed(actor: Any, mesh: Any, notes: list[str]) -> Any:
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


def _train(
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


def _reference(
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


def _lora_note(copy: bool, reference: bool) -> str:
    """What LoRA changes in the roles, as the report says it."""
    rollout = (
        "the rollout decodes on its own copy of the backbone in rollout_weights"
        if copy
        else "the rollout decodes on the backbone"
    )
    shared = "; the reference is that backbone (no second copy)" if reference else ""
    return (
        "LoRA: the actor trains its adapters only (no gradient or optimizer "
        f"state for the frozen backbone){shared}; {rollout}, the adapters "
        "resident beside it."
    )


def _lora_bytes(train: Any) -> int:
    """Bytes per device of the actor's ``nnx.LoRAParam`` leaves (the adapters)."""
    return sum(
        leaf.bytes_per_device for leaf in train.plan.leaves if leaf.kind == "LoRAParam"
    )


_ACTOR = "actor parameters"
_BACKBONE = "actor backbone (frozen)"
_ADAPTERS = "actor LoRA adapters"
_OPTIMIZER = "actor optimizer state"
_REFERENCE = "reference parameters"
_COPY = "rollout weights"
_CACHE = "KV cache (during the rollout)"
_CRITIC = "critic parameters"
_CRITIC_STATE = "critic optimizer state"


_Role = tuple[str, int, str]
"""``(role, bytes per device, the role whose slice holds it)``."""


def _roles(
    parts: tuple[Any, Any, Any], layout: Layout, lora: Any, valued: Any = None
) -> tuple[list[_Role], dict[str, set[str]]]:
    """Each role's resident bytes and slice, and each phase's program arguments.

    A phase's own program holds the roles it runs on (its arguments); the
    other roles on its slice stay resident beside it. A critic (``valued``:
    its values and its step) lives on its own role's slice.
    """
    rollout, train, ref = parts
    plan = train.plan.bytes_by_category
    actor = plan.get("params", 0)
    adapters = _lora_bytes(train) if lora is not None else 0
    weights = rollout.decode.weights_bytes
    # the rollout's own weights: another dtype, or devices of its own
    copy = weights != actor - adapters or not layout.shared("actor", "rollout")
    roles: list[_Role] = (
        [(_BACKBONE, actor - adapters, "actor"), (_ADAPTERS, adapters, "actor")]
        if lora is not None
        else [(_ACTOR, actor, "actor")]
    )
    roles.append((_OPTIMIZER, plan.get("optimizer state", 0), "actor"))
    # a LoRA reference is the actor's frozen backbone where they share devices
    shared = lora is not None and layout.shared("actor", "reference")
    if ref is not None and not shared:
        params = ref.plan.bytes_by_category.get("params", 0)
        roles.append((_REFERENCE, params, "reference"))
    roles.append((_COPY, weights if copy else 0, "rollout"))
    roles.append((_CACHE, rollout.decode.kv_cache_bytes, "rollout"))
    if valued is not None:
        critic = valued[1].plan.bytes_by_category
        roles.append((_CRITIC, critic.get("params", 0), "critic"))
        roles.append((_CRITIC_STATE, critic.get("optimizer state", 0), "critic"))
    backbone = {_BACKBONE, _ADAPTERS} if lora == "model" else {_BACKBONE}
    args = {
        "rollout": {_COPY} if copy else {_ACTOR, _BACKBONE},
        "reference": backbone if shared else {_REFERENCE},
        "train": {_ACTOR, _BACKBONE, _ADAPTERS, _OPTIMIZER},
        "values": {_CRITIC},
        "critic train": {_CRITIC, _CRITIC_STATE},
    }
    return roles, args


_PHASE_ROLE = {
    "prefill": "rollout",
    "decode": "rollout",
    "train": "actor",
    "values": "critic",
    "critic train": "critic",
}
"""The role whose slice a phase runs on (the reference: its own)."""


def _phase_role(phase: str) -> str:
    return _PHASE_ROLE.get(phase, phase)


def _assemble(
    parts: tuple[Any, Any, Any],
    layout: Layout,
    sizes: tuple[int, int, int, int],
    notes: tuple[str, ...],
    lora: Any = None,
    offload: bool = False,
    valued: Any = None,
) -> RLMemoryReport:
    """The report: the roles resident, each phase's peak, from the programs."""
    rollout, train, ref = parts
    b, g, p, c = sizes
    roles, args = _roles(parts, layout, lora, valued)
    if lora is not None:
        copy = dict((r, n) for r, n, _ in roles)[_COPY] > 0
        notes = (*notes, _lora_note(copy, ref is not None))

    def phase(
        name: str, program: Any, oom: bool, seconds: Any, measured: Any = None
    ) -> RLPhase:
        role = _phase_role(name)
        own = args[name] if name in args else args[role]
        resident = tuple(
            (r, n)
            for r, n, home in roles
            if n and r != _CACHE and r not in own and layout.shared(home, role)
        )
        mesh = "" if layout.colocated else layout.named(role)
        runs = 1 if name != "decode" else c  # a decode run is one of c steps
        if offload:  # the idle roles wait in host memory
            resident, host = (), resident
        else:
            host = ()
        return RLPhase(
            name, program, resident, oom, seconds, mesh, host, measured, runs
        )

    time = rollout.time
    decode_time = None
    if time is not None:
        decode_time = (time.seconds_per_token[0] * c, time.seconds_per_token[1] * c)
    ttft = None if time is None else time.time_to_first_token
    phases = [
        phase(
            "prefill",
            rollout.prefill.peak_bytes,
            rollout.prefill.memory.out_of_memory,
            ttft,
            rollout.prefill.measured,
        ),
        phase(
            "decode",
            rollout.decode.peak_bytes,
            rollout.decode.memory.out_of_memory,
            decode_time,
            rollout.decode.measured,
        ),
    ]
    if ref is not None:
        measured = ref.measured
        if measured is not None:  # the step pipeline's run of a forward pass
            measured = dataclasses.replace(measured, unit="forward (log-probabilities)")
        phases.append(
            phase(
                "reference",
                ref.peak_bytes,
                ref.out_of_memory,
                _range(ref.roofline),
                measured,
            )
        )
    if valued is not None:
        values = valued[0]
        measured = values.measured
        if measured is not None:  # the step pipeline's run of a forward pass
            measured = dataclasses.replace(measured, unit="forward (values)")
        phases.append(
            phase(
                "values",
                values.peak_bytes,
                values.out_of_memory,
                _range(values.roofline),
                measured,
            )
        )
    steps = [("train", train)]
    if valued is not None:
        steps.append(("critic train", valued[1]))
    for name, step in steps:
        phases.append(
            phase(
                name,
                step.peak_bytes,
                step.out_of_memory,
                _range(step.roofline),
                step.measured,
            )
        )
    transfers, more = _transfers(rollout, phases, roles, layout, offload)
    return RLMemoryReport(
        target=rollout.target,
        mesh_axes=tuple(zip(train.plan.axis_names, train.plan.axis_sizes, strict=True)),
        topology=rollout.topology if layout.colocated else layout.topology,
        batch=b,
        generations=g,
        prompt=p,
        completion=c,
        reference=ref is not None,
        roles=tuple((r, n) for r, n, _ in roles),
        phases=tuple(phases),
        budget=rollout.budget,
        notes=(*notes, *more),
        programs={
            "rollout": rollout,
            "reference": ref,
            "train": train,
            **(
                {}
                if valued is None
                else {"values": valued[0], "critic train": valued[1]}
            ),
        },
        lora=lora,
        critic=None if valued is None else _name(valued[2]),
        layout=layout.words(),
        **transfers,
    )


def _transfers(
    rollout: Any,
    phases: list[RLPhase],
    roles: list[_Role],
    layout: Layout,
    offload: bool,
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The bytes a step moves between slices and to the host, timed, and the notes."""
    out: dict[str, Any] = {}
    notes: list[str] = []
    if not layout.shared("actor", "rollout"):
        where = layout.slice("rollout")
        reshard = rollout.decode.weights_bytes * where.devices
        seconds, how = _reshard_time(layout.topology, rollout.decode.weights_bytes)
        out |= {"reshard_bytes": reshard, "reshard_seconds": seconds}
        notes.append(
            f"Every step the actor's new weights reach the rollout's {where.devices} "
            f"devices ({where.label}): {reshard:,} bytes on the wire, the rollout's "
            f"weights on each of its devices{how}."
        )
    if offload:
        moved = _moved(phases, roles, layout)
        seconds, how = _host_time(layout.topology, moved)
        out |= {"offload_bytes": moved, "offload_seconds": seconds}
        notes.append(
            f"Offloaded: the roles idle in a phase wait in host memory (tunix's "
            f"offload_to_cpu), each moved out and back in around its idle phases: "
            f"{moved:,} bytes per device per step over the host link{how}."
        )
    return out, tuple(notes)


def _moved(phases: list[RLPhase], roles: list[_Role], layout: Layout) -> int:
    """Bytes per device moved to and from the host per step, offloaded.

    Each role leaves its devices at the start of each run of phases it is idle
    in (on its own slice, in the step's order, wrapping to the next step) and
    comes back at its end: twice its bytes per idle run.
    """
    total = 0
    for name, n, home in roles:
        mine = [p for p in phases if layout.shared(home, _phase_role(p.name))]
        idle = [name in dict(p.host) for p in mine]
        if not n or not mine or all(idle):
            continue
        runs = sum(1 for i, x in enumerate(idle) if x and not idle[i - 1])
        total += 2 * n * runs
    return total


def _host_time(
    topology: str | None, moved: int
) -> tuple[tuple[float, float] | None, str]:
    """The offload's time over one device's host link, with the words."""
    link = None if topology is None else host_link(topology)
    if topology is None:
        return None, " (not timed: no topology)"
    if link is None:
        return None, (
            f" (not timed: {topology}'s host link is not in the data sheets this "
            "library holds)"
        )
    rate, source = link
    seconds = moved / rate
    return (seconds, seconds), f", estimated {duration(seconds)} ({source})"


def _reshard_time(
    topology: str | None, per_device: int
) -> tuple[tuple[float, float] | None, str]:
    """The reshard's time, ``(low, high)``: each device receiving its weights.

    On a TPU slice over one to all of a chip's ICI links (two per torus
    dimension longer than 1); on GPUs over one GPU's NVLink (one host) or its
    network share (several). With the words saying so.
    """
    if topology is None:
        return None, " (no topology: no time estimated)"
    hw = hardware_for(topology)
    if hw.ici_bytes_per_second_per_link:
        link = hw.ici_bytes_per_second_per_link
        links = 2 * sum(1 for d in hw.torus_dims if d > 1) or 1
        span = (per_device / (links * link), per_device / link)
        gbs = link / 1e9
        return span, (
            f", estimated {duration(span[0])}-{duration(span[1])} over 1 to {links} "
            f"ICI links of {gbs:g} GB/s (the data sheet's, one direction)"
        )
    one_host = (hw.hosts or 1) == 1
    rate = hw.nvlink_bytes_per_second if one_host else hw.network_bytes_per_second
    if not rate:  # pragma: no cover - every GPU family has both figures
        return None, ""
    seconds = per_device / rate
    via = "NVLink" if one_host else "network share"
    return (seconds, seconds), (
        f", estimated {duration(seconds)} over one GPU's {via} of "
        f"{rate / 1e9:g} GB/s (the data sheet's, one direction)"
    )

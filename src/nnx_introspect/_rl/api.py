"""The public :func:`rl_memory_report`: one GRPO step's programs, compiled, added up."""

import math
from dataclasses import replace
from typing import Any

import optax

from nnx_introspect._accelerators import resolve_topology
from nnx_introspect._rl.assemble import assemble
from nnx_introspect._rl.choices import Chosen, unadapted_modules
from nnx_introspect._rl.layout import Layout, as_layout, data_parallel
from nnx_introspect._rl.programs import (
    DONATIONS,
    critic_reports,
    reference_report,
    role_options,
    rollout_cache_dtype,
    rollout_report,
    train_report,
)
from nnx_introspect._rl.report import RLMemoryReport
from nnx_introspect._step import (
    as_lora,
    as_measure,
    as_model,
    built_once,
)
from nnx_introspect._typing import ArgumentError, as_count, typechecked

__all__ = ["check_split", "rl_memory_report"]


def _count(value: Any, name: str) -> int:
    """A positive count of ``name`` (prompts, tokens): an integer, never a float.

    ``batch=2.0`` is refused (:func:`~nnx_introspect._typing.as_count`); so is
    a string, both as one line naming the argument (an ``ArgumentError``).
    """
    try:
        return as_count(value, name, minimum=1)
    except TypeError as error:
        raise ArgumentError(name, str(error)) from None


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
    reference: Any = True,
    lora: Any = None,
    critic: Any = None,
    optimizer: Any = "adamw",
    rollout_weights: Any = None,
    kv_cache: Any = None,
    donate: Any = "optimizer",
    role_meshes: Any = None,
    offload: Any = False,
    breakdown: Any = False,
    topology: Any = None,
    max_device_bytes: Any = None,
    init_cache: Any = None,
    decode: Any = None,
    cache: Any = True,
    measure: Any = None,
) -> RLMemoryReport:
    """Whether one GRPO step fits: its four programs compiled for the target.

    The programs of one step, each compiled through the library's own
    pipelines (no device needed for a named ``topology``), on one mesh every
    role shares (colocated, as tunix's ``RLCluster`` runs them on one mesh)
    unless ``role_meshes`` gives a role devices of its own:

    * **rollout**: the prefill of ``batch x generations`` prompts of
      ``prompt`` tokens into a KV cache of ``prompt + completion`` positions,
      and a decode step (:func:`~nnx_introspect.serve_memory_report`), on the
      actor's own parameters in their dtypes by default;
    * **reference**: the per-token log-probabilities of the ``prompt +
      completion`` tokens under the reference model (forward only; left out
      with ``reference=False``);
    * **train**: the actor's step on the GRPO loss
      (:func:`~nnx_introspect._rl.loss.grpo_loss`, tunix's own) with
      ``optimizer``, donating only the optimizer's state.

    Each phase's peak is its program's own plus what the other roles keep
    resident while it runs (the actor's parameters and optimizer state, the
    reference's parameters, a rollout copy of the weights when
    ``rollout_weights`` asks for one); the step's peak is the largest, against
    the budget a step gets. The sequences split over the mesh's
    data-parallel axes (every axis but ``tp``), the weights as their
    annotations say.

    The defaults are what google-tunix 0.1.7 does (see
    :mod:`~nnx_introspect._rl.choices`, which cites its lines): colocated,
    the rollout *is* the training actor (no copy), its KV cache in the
    model's dtype; each trainer donates only its optimizer; offloading moves
    each model's variables and never an optimizer's state. The report's
    notes say each choice, and which are not tunix's.

    Args:
        actor: The policy model: an ``nnx.Module``, a factory or
            ``"package.module:factory"`` (a named topology compiles in child
            processes, which need the name).
        mesh: The mesh every role runs on, but those ``role_meshes`` places:
            ``"fsdp=4,tp=2"``, a dict.
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
            A rank adapts ``nnx.Linear`` modules only: the report's notes
            name the modules holding weights that get none (tunix's
            ``Einsum`` attention projections), for which ``"model"`` with
            the model's own adapters is the way.
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
        rollout_weights: The rollout's weights dtype: ``None`` (the default)
            serves the actor's own parameters (colocated: no copy, as tunix's
            rollout is the actor; on devices of its own: the model's dtypes,
            as tunix's ``RolloutConfig.data_type=None`` loads them);
            ``"bfloat16"`` or ``"float32"`` a copy cast to that dtype, resident
            beside the actor's parameters when colocated (not tunix's
            default, and the report says so).
        kv_cache: The rollout's KV cache dtype: ``None`` (the default) is the
            model's own, as tunix's sampler makes it (the model config's
            ``dtype``, else its first state leaf's); or ``"bfloat16"``,
            ``"float32"``, ``"float8_e4m3fn"``, ``"int8"``.
        donate: What each training step donates (its buffers reused for the
            new state): ``"optimizer"`` (the default) its optimizer's state
            alone, as tunix's trainer jits it
            (``nnx.jit(train_step, donate_argnames=("optimizer",))``), the old
            parameters live beside the new; ``"all"`` the parameters too.
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
        offload: Hold the models a phase does not run on in host memory
            meanwhile (tunix's ``offload_to_cpu``, which moves each model's
            variables): each phase's peak is its program's plus the
            optimizer states, which stay on the device; the bytes moved to
            and from the host per step are reported (``offload_bytes``), with
            their time over the host link where the target's data sheet
            states it (A100, H100, H200).
        breakdown: Also classify every buffer live at each phase's peak
            (:attr:`RLMemoryReport.breakdowns`): by kind (the reference's
            parameters as ``reference``, a rollout copy of the weights as
            ``rollout weights``) and by the source line that made it.
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
        ArgumentError: A size not a positive integer (naming it), a
            ``topology`` or mesh that is not one, ``batch x generations``
            sequences that do not split over a mesh's data-parallel axes,
            or any argument its program's own report refuses, before that
            program compiles.

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
        >>> "rollout weights" in dict(report.roles)  # the rollout is the actor
        False
    """
    with built_once():  # the actor is built once for every program
        b, g = _count(batch, "batch"), _count(generations, "generations")
        p, c = _count(prompt, "prompt"), _count(completion, "completion")
        flags = {"reference": reference, "cache": cache, "offload": offload}
        _check_flags(flags | {"breakdown": breakdown})
        _check_choices(donate, optimizer, topology)
        runs = as_measure(measure)
        # the target and the meshes before any model is built
        layout = _layout(mesh, role_meshes, topology, reference, critic, runs)
        check_split(layout, b, g)
        if critic is not None:
            _check_critic(critic, g)
        lora, chosen = _lora_choice(actor, lora, Chosen(donate=donate))
        own = rollout_cache_dtype(actor)
        kv = own if kv_cache is None else kv_cache
        sequences = b * g
        notes: list[str] = []
        serving = {
            "max_device_bytes": max_device_bytes,
            "weights": rollout_weights,
            "kv_cache": kv,
            "init_cache": init_cache,
            "decode": decode,
            "cache": cache,
            "breakdown": breakdown,
            "measure": runs,
        }
        rollout = rollout_report(actor, layout, (sequences, p, c), serving, notes)
        chosen = replace(
            chosen,
            rollout_weights=rollout.weights,
            kv_cache=rollout.kv_cache,
            own_kv_cache=own,
        )

        shared = {k: serving[k] for k in ("max_device_bytes", "cache", "breakdown")}
        shared |= {"measure": runs, "donate": donate}
        train, ref, valued = _learner_reports(
            (actor, critic),
            (layout, rollout, notes),
            (sequences, p, c),
            optimizer,
            shared,
            lora=lora,
            reference=reference,
        )
        return assemble(
            (rollout, train, ref),
            layout,
            (b, g, p, c),
            tuple(notes),
            (lora, offload, chosen),
            valued,
        )


def _lora_choice(actor: Any, lora: Any, chosen: Chosen) -> tuple[Any, Chosen]:
    """``lora`` checked on the model before any compile, and the choices it adds.

    A rank adapts ``nnx.Linear`` modules only: the modules holding weights
    that get none are noted (:func:`~nnx_introspect._rl.choices.unadapted_modules`).
    """
    if lora is None:
        return None, chosen
    lora = as_lora(lora, as_model(actor))
    if isinstance(lora, int):
        chosen = replace(chosen, unadapted=unadapted_modules(as_model(actor)))
    return lora, chosen


def _learner_reports(
    models: tuple[Any, Any],
    found: tuple[Layout, Any, list[str]],
    sizes: tuple[int, int, int],
    optimizer: Any,
    shared: dict[str, Any],
    *,
    lora: Any,
    reference: bool,
) -> tuple[Any, Any, Any]:
    """The programs that learn from the rollout, after it: train, reference, critic.

    ``models`` are the actor and the critic (or ``None``), ``found`` the
    layout, the rollout's report and the notes so far, ``sizes`` the
    sequences, prompt and completion. Each compiles on its role's slice
    (:func:`~nnx_introspect._rl.programs.role_options`). Returns the actor's
    training report, the reference's (``None`` without one) and the critic's
    ``(values, train, critic)`` (``None`` for GRPO).
    """
    actor, critic = models
    sequences, p, c = sizes

    def common(role: str, model: Any = actor) -> tuple[Any, dict[str, Any]]:
        return role_options(found, role, (actor, model), shared)

    axes, options = common("actor")
    train = train_report(
        actor,
        axes,
        sizes,
        optimizer,
        options | {"lora": lora},
        ppo=critic is not None,
    )
    ref = None
    if reference:
        ref = reference_report(actor, *common("reference"), (sequences, p + c))
    valued = None
    if critic is not None:  # on its slice (the actor's, unless placed)
        axes, options = common("critic", critic)
        valued = (*critic_reports(critic, axes, sizes, optimizer, options), critic)
    return train, ref, valued


def _layout(
    mesh: Any,
    role_meshes: Any,
    topology: str | None,
    reference: bool,
    critic: Any,
    runs: int | None,
) -> Layout:
    """Each role's slice, checked; ``measure`` only on a colocated step."""
    layout = as_layout(mesh, role_meshes, topology, reference, critic is not None)
    if runs is not None and not layout.colocated:
        raise ArgumentError(
            "measure",
            "`measure` runs a colocated step (every role on this process's "
            f"devices), got role_meshes={role_meshes!r}: measure without "
            "role_meshes, or each slice's programs on devices of its own.",
        )
    return layout


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


def _check_flags(flags: dict[str, Any]) -> None:
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise ArgumentError(name, f"`{name}` must be True or False, got {value!r}.")


def _check_choices(donate: Any, optimizer: Any, topology: Any) -> None:
    """``donate``, the optimizer's kind and the topology, before any model."""
    if donate not in DONATIONS:
        raise ArgumentError(
            "donate",
            f"`donate` must be one of {', '.join(map(repr, DONATIONS))}, got "
            f"{donate!r}: 'optimizer' donates the optimizer's state alone (tunix's "
            "trainer), 'all' the parameters too.",
        )
    named = isinstance(optimizer, str)
    if not named and not isinstance(optimizer, optax.GradientTransformation):
        raise ArgumentError(
            "optimizer",
            f"`optimizer` must be a name such as 'adamw' or an optax "
            f"transformation, got {optimizer!r}.",
        )
    if topology is not None:
        if not isinstance(topology, str):
            raise ArgumentError(
                "topology",
                f"`topology` must be a name such as 'v5e-8' or 'h100-8', or None, "
                f"got {topology!r}.",
            )
        resolve_topology(topology)  # an unknown one is refused here


def check_split(layout: Layout, batch: int, generations: int) -> None:
    """``batch x generations`` sequences split over every slice's data axes.

    Each phase runs on all the step's sequences, split over its slice's
    data-parallel axes (every axis but ``tp``'s).

    Raises:
        ArgumentError: Naming ``batch``, with the smallest batch that splits.
    """
    sequences = batch * generations
    for _, where in layout.slices:
        data = data_parallel(where.mesh)
        if sequences % data:
            unit = data // math.gcd(data, generations)
            raise ArgumentError(
                "batch",
                f"`batch` {batch} x `generations` {generations} = {sequences} "
                f"sequences do not split over the {data} data-parallel devices "
                f"of the mesh {where.label} (every axis but tp's splits the "
                f"sequences). Pass a `batch` that is a multiple of {unit}.",
            )

"""An RL step's request, checked once: :class:`RLSpec`.

Every argument of :func:`~nnx_introspect.rl_memory_report` in one frozen
value, checked where it is built, in the function's order and with its
messages (each bad value an :class:`~nnx_introspect.ArgumentError` naming the
argument); what the checks find (the roles' slices, the abstract actor, the
KV cache dtype tunix's sampler would take) is kept on it for the plan.
"""

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import optax

from nnx_introspect._accelerators import resolve_topology
from nnx_introspect._rl.choices import (
    DONATIONS,
    Chosen,
    rollout_cache_dtype,
    unadapted_modules,
)
from nnx_introspect._rl.layout import Layout, as_layout, data_parallel
from nnx_introspect._step import as_lora, as_measure, as_model
from nnx_introspect._typing import ArgumentError, as_count, typechecked
from nnx_introspect._xla import as_compiler_flags

__all__ = ["RLSpec", "check_split"]


@typechecked
@dataclasses.dataclass(frozen=True)
class RLSpec:
    """One RL step (GRPO's, or PPO's with a ``critic``): the request, checked.

    The one value :func:`~nnx_introspect.rl_memory_report` builds from its
    arguments and :func:`~nnx_introspect.measure_rl` measures;
    :func:`~nnx_introspect.rl_max_batch` varies its ``batch`` with
    ``dataclasses.replace`` (which checks the new one). Every check runs
    where it is built, in the function's order, with its messages: a bad
    value raises an :class:`~nnx_introspect.ArgumentError` naming its
    argument. The programs' own checks (the rollout's dtypes and calling
    convention, each step's options) run where each is planned, before it
    compiles.

    Attributes:
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
        compiler_flags: XLA or libtpu flags every program of the step is
            compiled with, as :class:`~nnx_introspect.StepSpec`'s
            ``compiler_flags`` (the rollout's prefill and decode, the
            learners' programs); kept as ``(name, value)`` text pairs.
        model: The abstract actor, built once (never the caller's object).
        critic_model: The abstract critic (``None`` without one).
        layout: Each role's slice (:class:`~nnx_introspect._rl.layout.Layout`).
        chosen: The request's choices where tunix has its own (``donate``,
            the modules a LoRA rank leaves unadapted).
        own_kv_cache: The KV cache dtype tunix's sampler gives the rollout.

    Example:
        >>> import dataclasses
        >>> from nnx_introspect import RLSpec
        >>> from nnx_introspect.examples import LlamaConfig, llama
        >>> small = llama(LlamaConfig(vocab=64, d_model=32, n_layers=2,
        ...                           n_heads=2, d_ff=64))
        >>> spec = RLSpec(small, "data=2", batch=2, generations=2, prompt=8,
        ...               completion=8, max_device_bytes="64MiB")
        >>> spec.sequences, spec.layout.colocated, spec.own_kv_cache
        (4, True, 'float32')
        >>> dataclasses.replace(spec, batch=4).sequences
        8
        >>> try:
        ...     dataclasses.replace(spec, batch=3, generations=1)
        ... except ValueError as error:
        ...     print(error.argument, "|", error)
        batch | `batch` 3 x `generations` 1 = 3 sequences do not split over \
the 2 data-parallel devices of the mesh data=2 (every axis but tp's splits \
the sequences). Pass a `batch` that is a multiple of 2.
    """

    actor: Any
    mesh: Any
    _: dataclasses.KW_ONLY
    batch: Any
    generations: Any
    prompt: Any
    completion: Any
    reference: Any = True
    lora: Any = None
    critic: Any = None
    optimizer: Any = "adamw"
    rollout_weights: Any = None
    kv_cache: Any = None
    donate: Any = "optimizer"
    role_meshes: Any = None
    offload: Any = False
    breakdown: Any = False
    topology: Any = None
    max_device_bytes: Any = None
    init_cache: Any = None
    decode: Any = None
    cache: Any = True
    measure: Any = None
    compiler_flags: Any = None
    _built: Any = dataclasses.field(default=None, repr=False, compare=False)
    """``((actor, model), (critic, model))``: what a spec of the same models built."""

    model: Any = dataclasses.field(init=False, repr=False, compare=False)
    critic_model: Any = dataclasses.field(init=False, repr=False, compare=False)
    layout: Layout = dataclasses.field(init=False, repr=False, compare=False)
    chosen: Chosen = dataclasses.field(init=False, repr=False, compare=False)
    own_kv_cache: str = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Every check of the request, in order, before any model is compiled."""
        b, g = _count(self.batch, "batch"), _count(self.generations, "generations")
        p, c = _count(self.prompt, "prompt"), _count(self.completion, "completion")
        flags = {"reference": self.reference, "cache": self.cache}
        _check_flags(flags | {"offload": self.offload, "breakdown": self.breakdown})
        _check_choices(self.donate, self.optimizer, self.topology)
        runs = as_measure(self.measure)
        compiler_flags = as_compiler_flags(self.compiler_flags)
        # the target and the meshes before any model is built
        layout = _layout(self, runs)
        check_split(layout, b, g)
        critic = None
        if self.critic is not None:
            critic = _checked_critic(lambda: self._model(self.critic), g)
        model = self._model(self.actor)
        lora, chosen = _lora_choice(model, self.lora, Chosen(donate=self.donate))
        own = rollout_cache_dtype(model)
        for name, value in (
            ("batch", b),
            ("generations", g),
            ("prompt", p),
            ("completion", c),
            ("measure", runs),
            ("compiler_flags", compiler_flags),
            ("lora", lora),
            ("_built", ((self.actor, model), (self.critic, critic))),
            ("model", model),
            ("critic_model", critic),
            ("layout", layout),
            ("chosen", chosen),
            ("own_kv_cache", own),
        ):
            object.__setattr__(self, name, value)

    def _model(self, target: Any) -> Any:
        """``target``'s abstract model: the one a spec built before, or built."""
        for given, model in self._built or ():
            if given is target and model is not None:
                return model
        return as_model(target)

    @property
    def sequences(self) -> int:
        """The step's sequences: ``batch x generations``."""
        return int(self.batch) * int(self.generations)

    def built(self) -> dict[str, Any]:
        """The models built for the checks, by ``"package.module:factory"`` name.

        What the programs' specs would build again: ``built_once`` is given
        them (a factory or a module is built again as before).
        """
        found = {}
        for target, model in self._built or ():
            if isinstance(target, str) and model is not None:
                found[target] = model
        return found


def _count(value: Any, name: str) -> int:
    """A positive count of ``name`` (prompts, tokens): an integer, never a float.

    ``batch=2.0`` is refused (:func:`~nnx_introspect._typing.as_count`); so is
    a string, both as one line naming the argument (an ``ArgumentError``).
    """
    try:
        return as_count(value, name, minimum=1)
    except TypeError as error:
        raise ArgumentError(name, str(error)) from None


def _lora_choice(model: Any, lora: Any, chosen: Chosen) -> tuple[Any, Chosen]:
    """``lora`` checked on the model before any compile, and the choices it adds.

    A rank adapts ``nnx.Linear`` modules only: the modules holding weights
    that get none are noted (:func:`~nnx_introspect._rl.choices.unadapted_modules`).
    """
    if lora is None:
        return None, chosen
    lora = as_lora(lora, model)
    if isinstance(lora, int):
        chosen = dataclasses.replace(chosen, unadapted=unadapted_modules(model))
    return lora, chosen


def _layout(spec: RLSpec, runs: int | None) -> Layout:
    """Each role's slice, checked; ``measure`` only on a colocated step."""
    layout = as_layout(
        spec.mesh,
        spec.role_meshes,
        spec.topology,
        spec.reference,
        spec.critic is not None,
    )
    if runs is not None and not layout.colocated:
        raise ArgumentError(
            "measure",
            "`measure` runs a colocated step (every role on this process's "
            f"devices), got role_meshes={spec.role_meshes!r}: measure without "
            "role_meshes, or each slice's programs on devices of its own.",
        )
    return layout


def _checked_critic(build: Callable[[], Any], generations: int) -> Any:
    """The critic's model (a model, or refused naming ``critic``), one completion."""
    try:
        model = build()
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
    return model


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

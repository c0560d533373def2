""":class:`StepSpec`: one training step, checked once where it is built."""

import contextlib
import dataclasses
import json
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypedDict

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from nnx_introspect._accelerators import Budget, step_budget
from nnx_introspect._mesh import (
    OPTIMIZER_NAMES,
    LogicalRulesLike,
    MeshConfigReport,
    MeshLike,
    RulesLike,
    as_abstract_mesh,
    mesh_config_report,
    parse_bytes,
)
from nnx_introspect._render import spec_from_json, spec_json
from nnx_introspect._step.inputs import (
    BatchLike,
    LossLike,
    Request,
    SpecsLike,
    as_batch,
    as_batch_specs,
    as_loss,
    as_model,
    as_network,
    as_optimizer,
    check_optimizer_has_a_loss,
    check_shardable,
    spec_problems,
)
from nnx_introspect._step.lora import LoraLike, as_lora, with_lora
from nnx_introspect._step.options import RematLike, as_microbatches, as_remat
from nnx_introspect._targets import TargetError, resolve_factory
from nnx_introspect._typing import ArgumentError, IntLike, as_int, typechecked
from nnx_introspect._xla import CompilerFlagsLike, as_compiler_flags, check_compiler

__all__ = [
    "StepOptions",
    "StepSpec",
    "as_step_spec",
    "blame",
    "importable_name",
    "name_of_loss",
    "plan_problems",
    "plan_step",
    "step_json",
    "step_names",
]

_BY_JSON = "a StepSpec's JSON names them, and whoever reads it rebuilds them"


@contextlib.contextmanager
def blame(argument: str) -> Iterator[None]:
    """A plain ``ValueError`` raised inside becomes an ``ArgumentError``.

    For the checks of other packages (the mesh, a size, a topology): the
    message is kept word for word; ``argument`` is the one it was given as.
    """
    try:
        yield
    except ArgumentError:
        raise
    except ValueError as error:
        raise ArgumentError(argument, str(error)) from error


@typechecked
@dataclasses.dataclass(frozen=True)
class StepSpec:
    """One training step: the model, its mesh, its batch and how it is compiled.

    The one value :func:`~nnx_introspect.step_memory_report`,
    :func:`~nnx_introspect.max_batch` and :func:`~nnx_introspect.compare_meshes`
    build from their arguments. It is checked once, where it is built (every
    check of those functions, in their order, with their messages), and it is
    frozen: a search varies it with ``dataclasses.replace``, which checks the
    new one. A bad value raises an :class:`~nnx_introspect._typing.ArgumentError`
    naming its argument; a wrong type a ``TypeError``.

    Its JSON (:meth:`to_json`) is what a child process compiling the step
    receives: the model, loss and optimizer by name, the mesh's axes, the
    batch's shapes and every batch leaf's resolved spec.

    Attributes:
        target: An ``nnx.Module`` (concrete or abstract; it is not touched), a
            factory taking ``rngs`` or a ``"package.module:factory"`` string.
            A child compile needs the string, or a factory importable by name.
        mesh: As in :func:`~nnx_introspect.mesh_config_report`: a mapping,
            ``"data=2,model=4"``, a ``Mesh`` (whose devices are used) or an
            ``AbstractMesh``.
        batch: The model's positional arguments: a tuple of
            ``jax.ShapeDtypeStruct`` or arrays (one may be passed bare); kept
            as a tuple of unsharded ``jax.ShapeDtypeStruct``.
        loss: ``None`` (forward only), ``"mean"`` (the float32 mean of the
            output), ``"lm"`` (next-token cross-entropy of ``(B, T, V)`` logits
            against the ``(B, T)`` integer tokens of ``batch[0]``), a callable
            ``loss(model, batch) -> scalar`` (``batch`` is the tuple) or its
            ``"package.module:function"`` name (kept as the function). The
            built-in losses call ``model(*batch)``, or, when the model cannot
            take the batch alone and follows the tunix / flax-gemma
            convention ``model(tokens, positions, cache, attention_mask) ->
            (logits, cache)``, ``model(tokens, positions, None, mask)`` with
            positions ``0 .. T-1`` and a causal ``[B, T, T]`` mask, taking the
            logits from the pair; any other model needs a loss callable.
        optimizer: An optax transformation or a name (``"adamw"``, ...); needs
            a loss.
        rules: ``(regular expression, PartitionSpec)`` pairs, as in
            :func:`~nnx_introspect.mesh_config_report`.
        logical_rules: ``(logical name, mesh axis)`` pairs, as there.
        batch_spec: A ``PartitionSpec`` for every batch leaf or one per leaf;
            default: each leaf's leading dimension split over the mesh's first
            axis (scalars replicated).
        topology: A Cloud TPU slice such as ``"v5e-4"``, ``"v6e-256"``,
            ``"v5p-8"`` or ``"v4-16"``, or NVIDIA GPUs such as ``"h100-8"``
            (one host) or ``"h100-256"`` (32 hosts of 8) (see
            :func:`~nnx_introspect.parse_topology`): compile with XLA:TPU or
            XLA:GPU for it; the mesh must have one device per chip or GPU.
        max_device_bytes: The memory budget of one device, a byte count or a
            size such as ``"80GiB"`` (kept in bytes); default: the memory the
            run will have: on a GPU target the share JAX's allocator takes of
            the device (``XLA_CLIENT_MEM_FRACTION`` or
            ``XLA_PYTHON_CLIENT_MEM_FRACTION`` as this process's environment
            sets it, else 0.75), on a TPU target the HBM XLA:TPU lets a
            program use (15.75 GiB of a v5e chip's 16); none on XLA:CPU. A
            string needs its unit.
        trace_as_target: For a named ``topology`` compiled in a child
            process, trace the model with JAX's device lookups
            (``jax.devices()``, ``jax.default_backend()``...) answering with
            the target's devices, so a model that shards its activations only
            off the CPU (as tunix does) compiles as on the real machine. The
            report's ``traced_platform`` says what the model saw.
        breakdown: Also break the peak down (``report.breakdown``): XLA
            dumps the compiled step into a temporary directory (removed
            afterwards) and every buffer live at its peak is read with its
            kind, its state path or source line. A breakdown that cannot be
            made (a step the compiler refused for memory, a dump format this
            jaxlib's reader does not know) leaves ``report.breakdown``
            ``None`` and says why in ``warnings``.
        network_bytes_per_second: For a GPU ``topology`` of several hosts:
            the network bandwidth per GPU between hosts the report's
            :attr:`~nnx_introspect.StepMemoryReport.roofline` uses, bytes per
            second or a size such as ``"50GB"`` (per second; kept in bytes);
            default: the family's reference system's (400 Gb/s, 50 GB/s, per
            H100).
        remat: Rematerialise layers while the step is traced: a module class
            name (``"LlamaLayer"``: every module of that class runs its
            ``__call__`` under ``nnx.remat`` with the ``nothing_saveable``
            policy) or a mapping of class names to policy names
            (``{"LlamaLayer": "dots_with_no_batch_dims_saveable"}``; also
            ``dots_saveable``, ``everything_saveable`` and
            ``offload_dot_with_no_batch_dims``, which keeps those dots in host
            memory). Applied to the step's own
            copy of the model: the class is never patched. Kept as sorted
            ``(class, policy)`` pairs.
        microbatches: Accumulate the gradients over ``k`` microbatches in a
            ``jax.lax.scan`` and apply the optimizer once; the loss and the
            gradients are the mean over the global batch, as in one step.
            Microbatch ``j`` holds rows ``j, j + k, ...``: on each device a
            slice of its own rows. ``k`` must divide every batch leaf's rows,
            and the ``B / k`` rows of a microbatch must divide over the mesh
            axes the rows are split on.
        tokens_per_step: The tokens one step trains on, for the MFU's
            ``6·N·tokens`` where the batch does not tell (packed sequences,
            float inputs); default: ``B·T`` of the batch's first ``[B, T]``
            integer leaf, else no MFU (a hardware FLOPs utilisation).
        lora: Fine-tune with LoRA: a rank ``r`` (adapters ``(in, r)`` and
            ``(r, out)`` on every ``nnx.Linear`` of the step's copy of the
            model, in the kernel's dtype and sharding, the only parameters
            trained), ``"model"`` (the model's own ``nnx.LoRAParam`` leaves
            are the only ones trained) or ``None`` (every floating parameter
            trained). The frozen parameters have no gradient and no optimizer
            state. The rank must be at most every adapted layer's smaller width.
        compiler_flags: XLA or libtpu flags the compile is given, as a
            training run sets them: a mapping
            (``{"xla_tpu_enable_async_collective_fusion": False}``), a
            sequence of ``"--name=value"`` or one string of them as
            ``LIBTPU_INIT_ARGS`` spells them; kept as ``(name, value)`` text
            pairs, names without their dashes. They reach the compile as its
            options, beside the flags of ``XLA_FLAGS`` and (for a TPU target)
            ``LIBTPU_INIT_ARGS`` in the environment, which it honours too;
            the report lists them all (``compilation.compiler_flags``). A flag
            the compiler does not know is an error naming ``compiler_flags``.
        model: The abstract module built from ``target`` (never the caller's
            own object), with its LoRA adapters when ``lora`` adds them.
        mesh_axes: The mesh's ``(axis, size)`` pairs, in order.
        batch_specs: Every batch leaf's ``PartitionSpec``, ``batch_spec``
            resolved.
        tx: The optax transformation (``None`` without an optimizer).
        budget: The budget of one device, and how it was found.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> x = jax.ShapeDtypeStruct((8, 3), jnp.float32)
        >>> spec = StepSpec(
        ...     "nnx_introspect.examples:two_layer", "data=4", x,
        ...     optimizer="adamw", max_device_bytes="1MiB",
        ... )
        >>> spec.mesh_axes, spec.batch_specs, spec.max_device_bytes
        ((('data', 4),), (P('data',),), 1048576)
        >>> import dataclasses
        >>> bigger = dataclasses.replace(spec, batch=(jnp.zeros((16, 3)),))
        >>> bigger.batch
        (ShapeDtypeStruct(shape=(16, 3), dtype=float32),)
        >>> StepSpec.from_json(spec.to_json()).batch == spec.batch
        True
        >>> try:
        ...     dataclasses.replace(spec, loss=None)
        ... except ValueError as error:
        ...     print(error.argument, "|", error)
        optimizer | `optimizer` 'adamw' needs a loss to differentiate, but \
`loss=None` compiles the forward pass only. Pass `loss='mean'`, 'lm' or a callable.
    """

    target: nnx.Module | nnx.State[Any, Any] | Callable[..., Any] | str
    mesh: MeshLike
    batch: BatchLike
    _: dataclasses.KW_ONLY
    loss: LossLike = "mean"
    optimizer: optax.GradientTransformation | str | None = None
    rules: RulesLike | None = None
    logical_rules: LogicalRulesLike | None = None
    batch_spec: SpecsLike = None
    topology: str | None = None
    max_device_bytes: IntLike | str | None = None
    trace_as_target: bool = True
    breakdown: bool = False
    network_bytes_per_second: IntLike | str | None = None
    remat: RematLike = None
    microbatches: IntLike = 1
    tokens_per_step: IntLike | None = None
    lora: LoraLike = None
    compiler_flags: CompilerFlagsLike = None
    _built: Any = dataclasses.field(default=None, repr=False, compare=False)
    """``(target, model)``: the model a spec of the same target already built."""

    model: Any = dataclasses.field(init=False, repr=False, compare=False)
    mesh_axes: tuple[tuple[str, int], ...] = dataclasses.field(
        init=False, repr=False, compare=False
    )
    batch_specs: Any = dataclasses.field(init=False, repr=False, compare=False)
    spec_name: str = dataclasses.field(init=False, repr=False, compare=False)
    tx: Any = dataclasses.field(init=False, repr=False, compare=False)
    optimizer_name: str | None = dataclasses.field(
        init=False, repr=False, compare=False
    )
    budget: Budget = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Every check of a step, in order; the values kept normalised."""
        built = self._built
        if built is not None and built[0] is self.target:
            model = built[1]
        else:
            model = as_model(self.target)
        with blame("mesh"):
            abstract = as_abstract_mesh(self.mesh)
        mesh_axes = tuple(
            (str(a), int(s))
            for a, s in zip(abstract.axis_names, abstract.axis_sizes, strict=True)
        )
        leaves = as_batch(self.batch)
        specs, spec_name = as_batch_specs(self.batch_spec, leaves, mesh_axes[0][0])
        loss = as_loss(self.loss, leaves)
        tx, optimizer_name = as_optimizer(self.optimizer)
        check_optimizer_has_a_loss(self.optimizer, tx, loss)
        given = self.max_device_bytes
        if given is not None:
            with blame("max_device_bytes"):
                given = parse_bytes(given)
        if self.topology is not None:  # a bad name, size or missing compiler
            with blame("topology"):
                check_compiler(self.topology, mesh_axes)
        with blame("topology"):
            budget = step_budget(given, self.topology)
        network = as_network(self.network_bytes_per_second, self.topology)
        remat = as_remat(self.remat, model)
        microbatches = as_microbatches(
            self.microbatches, leaves, specs, mesh_axes, loss
        )
        tokens = self.tokens_per_step
        if tokens is not None:
            tokens = as_int(tokens, "tokens_per_step", minimum=1)
        lora = as_lora(self.lora, model)
        flags = as_compiler_flags(self.compiler_flags)
        for name, value in (
            ("_built", (self.target, model)),
            ("model", with_lora(model, lora)),
            ("lora", lora),
            ("mesh_axes", mesh_axes),
            ("batch", leaves),
            ("batch_specs", specs),
            ("spec_name", spec_name),
            ("loss", loss),
            ("tx", tx),
            ("optimizer_name", optimizer_name),
            ("max_device_bytes", given),
            ("budget", budget),
            ("network_bytes_per_second", network),
            ("remat", remat),
            ("microbatches", microbatches),
            ("tokens_per_step", tokens),
            ("compiler_flags", flags),
        ):
            object.__setattr__(self, name, value)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its arguments: the other side checks and builds it again."""
        given = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.init and f.name != "_built"
        }
        return (_rebuilt, (given,))

    @property
    def target_name(self) -> str | None:
        """``target``'s ``"package.module:factory"``, when it imports back."""
        if isinstance(self.target, nnx.Module):
            return None
        return importable_name(self.target)

    @property
    def num_devices(self) -> int:
        """Devices in the mesh."""
        return math.prod(s for _, s in self.mesh_axes)

    def request(self) -> Request:
        """What a compile reads, as :mod:`~nnx_introspect._step.compile` takes it."""
        return Request(
            model=self.model,
            target_name=self.target_name,
            mesh_axes=self.mesh_axes,
            batch=self.batch,
            batch_specs=self.batch_specs,
            loss=self.loss,
            loss_name=name_of_loss(self.loss),
            tx=self.tx,
            optimizer_name=self.optimizer_name,
            rules=self.rules,
            logical_rules=self.logical_rules,
            trace_as_target=self.trace_as_target,
            breakdown=self.breakdown,
            remat=self.remat,  # type: ignore[arg-type]  # normalised pairs
            microbatches=int(self.microbatches),
            tokens_per_step=None
            if self.tokens_per_step is None
            else int(self.tokens_per_step),
            lora=self.lora,
            compiler_flags=self.compiler_flags,  # type: ignore[arg-type]  # pairs
        )

    def json_data(self) -> dict[str, Any]:
        """The spec as JSON data: everything by name, ``rules`` left out.

        ``rules`` (regular expressions, perhaps compiled with flags) are not
        sent: ``batch_spec`` is every leaf's resolved spec, and a child
        process receives every state leaf's resolved spec beside it.

        Raises:
            ArgumentError: If the target, the loss or the optimizer has no
                name, or ``logical_rules`` hold more than strings.
        """
        return step_json(self, _BY_JSON)

    def to_json(self) -> str:
        """:meth:`json_data` as a JSON string; :meth:`from_json` reads it back."""
        return json.dumps(self.json_data())

    @classmethod
    def from_json(
        cls, data: str | Mapping[str, Any], *, model: Any = None
    ) -> "StepSpec":
        """The spec of :meth:`to_json`'s text or :meth:`json_data`'s data, checked.

        Args:
            data: The JSON text, or its data.
            model: The module already built from ``data["target"]``, if any.
        """
        fields: Mapping[str, Any] = json.loads(data) if isinstance(data, str) else data
        logical = fields.get("logical_rules")
        if logical is not None:
            logical = [(k, tuple(v) if isinstance(v, list) else v) for k, v in logical]
        target = fields["target"]
        return cls(
            target,
            {str(a): int(s) for a, s in fields["mesh"]},
            tuple(
                jax.ShapeDtypeStruct(tuple(shape), jnp.dtype(dtype))
                for shape, dtype in fields["batch"]
            ),
            loss=fields.get("loss"),
            optimizer=fields.get("optimizer"),
            logical_rules=logical,
            batch_spec=tuple(spec_from_json(s) for s in fields["batch_spec"]),
            topology=fields.get("topology"),
            max_device_bytes=fields.get("max_device_bytes"),
            trace_as_target=bool(fields.get("trace_as_target", True)),
            breakdown=bool(fields.get("breakdown", False)),
            network_bytes_per_second=fields.get("network_bytes_per_second"),
            remat=tuple((str(c), str(p)) for c, p in fields.get("remat", ())),
            microbatches=int(fields.get("microbatches", 1)),
            tokens_per_step=fields.get("tokens_per_step"),
            lora=fields.get("lora"),
            compiler_flags=fields.get("compiler_flags"),
            _built=None if model is None else (target, model),
        )


def importable_name(obj: Any) -> str | None:
    """``"module:qualname"`` if that name imports back to ``obj`` itself."""
    if isinstance(obj, str):
        return obj
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not module or not qualname or "<" in qualname or module == "__main__":
        return None
    name = f"{module}:{qualname}"
    try:
        found = resolve_factory(name)
    except TargetError:
        return None
    return name if found is obj else None


def name_of_loss(loss: Any) -> str | None:
    """``loss`` by name: its own, a function's ``__name__`` or its type's."""
    if loss is None or isinstance(loss, str):
        return loss
    return str(getattr(loss, "__name__", type(loss).__name__))


def plan_step(spec: StepSpec) -> MeshConfigReport:
    """``spec``'s plan; every problem of it and of the batch's split raised.

    Raises:
        ArgumentError: If the plan has problems or the batch does not split
            over the mesh (``argument`` names what to change: ``"batch"`` or
            ``"batch_spec"``, ``"rules"`` or ``"logical_rules"`` for axes the
            mesh lacks, else ``"mesh"``), or ``"target"`` when a router of
            the model sends each token to more experts than it has; nothing
            is compiled.
    """
    plan = mesh_config_report(
        spec.model,
        spec.mesh,
        rules=spec.rules,
        logical_rules=spec.logical_rules,
        optimizer=spec.tx,
    )
    for problem in plan.problems:  # the plan's one read of the routers
        if problem.kind == "router":  # before JAX's own top_k error
            raise ArgumentError("target", problem.message)
    given = (
        "rules"
        if spec.rules is not None
        else ("logical_rules" if spec.logical_rules is not None else None)
    )
    check_shardable(
        plan,
        spec.spec_name,
        spec.batch,
        spec.batch_specs,
        spec.mesh_axes,
        rules_given=given,
    )
    return plan


def plan_problems(spec: StepSpec) -> tuple[MeshConfigReport, list[str]]:
    """``spec``'s plan and every problem of it and of the batch's split, unraised."""
    plan = mesh_config_report(
        spec.model,
        dict(spec.mesh_axes),
        rules=spec.rules,
        logical_rules=spec.logical_rules,
        optimizer=spec.tx,
    )
    problems = [p.message for p in plan.errors]
    problems += spec_problems(
        spec.spec_name, spec.batch, spec.batch_specs, dict(spec.mesh_axes)
    )
    return plan, problems


def step_names(spec: StepSpec, why: str) -> tuple[str, str | None, str | None]:
    """``spec``'s ``(target, loss, optimizer)`` by name, for a process rebuilding them.

    Raises:
        ArgumentError: If one of them has no name to import it by; the
            message ends with ``why`` they need one.
    """
    target = spec.target_name
    if target is None:
        raise ArgumentError(
            "target",
            "`target` must be passed as 'package.module:factory' (or a "
            "factory importable by that name), not a module object or a "
            f"lambda: {why}.",
        )
    loss: Any = spec.loss
    if callable(loss):
        loss = importable_name(loss)
        if loss is None:
            raise ArgumentError(
                "loss",
                "`loss` must be 'mean', 'lm', None or a function importable "
                f"as 'package.module:function' (not a lambda or closure): {why}.",
            )
    if spec.tx is not None and spec.optimizer_name is None:
        raise ArgumentError(
            "optimizer",
            f"`optimizer` must be a name, one of {list(OPTIMIZER_NAMES)}, not "
            f"an optax object: {why}.",
        )
    return target, loss, spec.optimizer_name


def step_json(spec: StepSpec, why: str) -> dict[str, Any]:
    """``spec`` as JSON data (:meth:`StepSpec.json_data`), ``why`` names are needed.

    ``rules`` (regular expressions, perhaps compiled with flags) are not
    sent: ``batch_spec`` is every leaf's resolved spec, and a child
    process receives every state leaf's resolved spec beside it.

    Raises:
        ArgumentError: If the target, the loss or the optimizer has no
            name, or ``logical_rules`` hold more than strings.
    """
    target, loss, optimizer = step_names(spec, why)
    return {
        "target": target,
        "mesh": [list(axis) for axis in spec.mesh_axes],
        "batch": [[list(b.shape), jnp.dtype(b.dtype).name] for b in spec.batch],
        "batch_spec": [spec_json(s) for s in spec.batch_specs],
        "loss": loss,
        "optimizer": optimizer,
        "logical_rules": _json_logical_rules(spec.logical_rules),
        "topology": spec.topology,
        "max_device_bytes": spec.max_device_bytes,
        "trace_as_target": spec.trace_as_target,
        "breakdown": spec.breakdown,
        "network_bytes_per_second": spec.network_bytes_per_second,
        "remat": [list(pair) for pair in spec.remat],  # type: ignore[union-attr]
        "microbatches": spec.microbatches,
        "tokens_per_step": spec.tokens_per_step,
        "lora": spec.lora,
        "compiler_flags": [list(pair) for pair in spec.compiler_flags or ()],
    }


def _rebuilt(given: dict[str, Any]) -> StepSpec:
    """The spec of these arguments (unpickling)."""
    return StepSpec(**given)


def _json_logical_rules(rules: Any) -> Any:
    """Logical rules (name to mesh axes) for the model's own activation constraints."""
    if rules is None:
        return None
    pairs = list(rules.items()) if isinstance(rules, Mapping) else list(rules)
    out = [
        [key, list(value) if isinstance(value, tuple | list) else value]
        for key, value in pairs
    ]
    try:
        json.dumps(out)
    except TypeError:
        raise ArgumentError(
            "logical_rules",
            "`logical_rules` must hold only strings, None and tuples of strings "
            "for a child compile.",
        ) from None
    return out


class StepOptions(TypedDict, total=False):
    """How one step is compiled: the keyword arguments every entry point takes.

    Written once, here: :func:`~nnx_introspect.step_memory_report`,
    :func:`~nnx_introspect.max_batch`, :func:`~nnx_introspect.compare_meshes`
    and :func:`~nnx_introspect.fit_step` take them as ``**options``, and
    each is the :class:`StepSpec` field of its name (documented there).

    Example:
        >>> options: StepOptions = {"loss": "lm", "optimizer": "adamw"}
        >>> sorted(options)
        ['loss', 'optimizer']
        >>> "microbatches" in StepOptions.__optional_keys__
        True
    """

    loss: LossLike
    optimizer: optax.GradientTransformation | str | None
    rules: RulesLike | None
    logical_rules: LogicalRulesLike | None
    batch_spec: SpecsLike
    topology: str | None
    max_device_bytes: IntLike | str | None
    trace_as_target: bool
    breakdown: bool
    network_bytes_per_second: IntLike | str | None
    remat: RematLike
    microbatches: IntLike
    tokens_per_step: IntLike | None
    lora: LoraLike
    compiler_flags: CompilerFlagsLike


def as_step_spec(
    target: "StepSpec | nnx.Module | nnx.State[Any, Any] | Callable[..., Any] | str",
    mesh: MeshLike | None,
    batch: BatchLike | None,
    options: Mapping[str, Any],
    *,
    caller: str = "step_memory_report",
) -> StepSpec:
    """The :class:`StepSpec` an entry point was given, or built from its arguments.

    ``target`` may be a spec (then ``mesh`` and ``batch`` are ``None``, and
    ``options``, if any, replace its fields: ``dataclasses.replace``, checked
    anew), or a target with its ``mesh``, ``batch`` and options.

    Raises:
        TypeError: For an option that is not a field of :class:`StepSpec`, or
            a spec given with ``mesh`` or ``batch`` beside it, or a target
            without them.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from flax import nnx
        >>> x = jax.ShapeDtypeStruct((8, 4), jnp.float32)
        >>> linear = lambda rngs: nnx.Linear(4, 6, rngs=rngs)
        >>> spec = as_step_spec(linear, "data=8", x, {"loss": None})
        >>> as_step_spec(spec, None, None, {}) is spec
        True
        >>> as_step_spec(spec, None, None, {"microbatches": 1}).loss is None
        True
    """
    unknown = sorted(set(options) - StepOptions.__optional_keys__)
    if unknown:
        known = ", ".join(sorted(StepOptions.__optional_keys__))
        raise TypeError(
            f"{caller}() got an unexpected keyword argument {unknown[0]!r}; the "
            f"step's options are: {known}."
        )
    if isinstance(target, StepSpec):
        if mesh is not None or batch is not None:
            raise TypeError(
                f"{caller}() was given a StepSpec and a `mesh` or `batch` beside "
                "it: the spec holds both. Pass the spec alone, or "
                "`dataclasses.replace(spec, mesh=..., batch=...)`."
            )
        return dataclasses.replace(target, **options) if options else target
    if mesh is None or batch is None:
        raise TypeError(
            f"{caller}() needs `target`, `mesh` and `batch` (or a StepSpec alone), "
            f"got no `{'mesh' if mesh is None else 'batch'}`."
        )
    return StepSpec(target, mesh, batch, **options)

"""Step memory: what XLA's own compile says one step needs on each device.

:func:`step_memory_report` compiles the real step (forward, backward, optimizer
update) with ``jax.jit(...).lower(...).compile()`` on a mesh, with every input a
``jax.ShapeDtypeStruct`` carrying its ``NamedSharding``: nothing is allocated.
Each leaf's partition spec comes from :func:`~nnx_introspect.mesh_config_report`
(one resolution of rules, metadata and logical rules), and the report reads
``memory_analysis()`` and ``cost_analysis()`` of the compiled executable.

Where the compile runs:

* in this process, when it has enough devices (the first ``prod(mesh)`` of
  ``jax.devices()``, or the devices of a concrete ``Mesh``);
* in a child Python process with enough virtual CPU devices
  (``--xla_force_host_platform_device_count``) otherwise; the child rebuilds
  the model from a ``"package.module:factory"`` name and returns plain numbers;
* with XLA:TPU for a named TPU topology (``topology="v5e-4"``), in this process,
  via ``jax.experimental.topologies.get_topology_desc`` and the ``libtpu``
  package: compile-only TPU devices, no TPU needed.
"""

import contextlib
import dataclasses
import importlib.metadata
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeAlias

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from nnx_introspect._abstract import abstract_model
from nnx_introspect._inventory import inventory, path_str
from nnx_introspect._mesh import (
    OPTIMIZER_NAMES,
    LogicalRulesLike,
    MeshConfigReport,
    MeshLike,
    RulesLike,
    as_abstract_mesh,
    mesh_config_report,
    optimizer_from_name,
    parse_bytes,
)
from nnx_introspect._nnx import keypath_keys
from nnx_introspect._render import Report, Table, format_bytes
from nnx_introspect._targets import TargetError, build_target, resolve_factory
from nnx_introspect._typing import IntLike, check_finite, typechecked

__all__ = [
    "LOSSES",
    "MAX_CHILD_DEVICES",
    "TPU_FAMILIES",
    "StepMemoryReport",
    "parse_batch",
    "parse_topology",
    "step_memory_report",
]

LOSSES = ("mean", "lm")
"""The loss names :func:`step_memory_report` knows (``None`` = forward only)."""

MAX_CHILD_DEVICES = 2048
"""The most virtual CPU devices a child compile may use (see the benchmarks)."""

CHILD_TIMEOUT_SECONDS = 900.0
"""How long a child compile may take before it is stopped."""

TPU_FAMILIES = ("v4", "v5e", "v5p", "v6e")
"""The TPU families ``topology`` names: ``v5e-4``, ``v5p-8``, ``v6e-256``..."""

# LLVM's optimisation of the generated machine code dominates large XLA:CPU
# compiles (a 2,048-device Llama step spends minutes in LLVM loop analysis) and
# changes nothing the report reads: buffer assignment (memory_analysis) and
# cost_analysis are computed on the optimised HLO, before LLVM runs.
_CPU_COMPILER_OPTIONS: dict[str, Any] = {
    "xla_backend_optimization_level": 0,
    "xla_llvm_disable_expensive_passes": True,
}

_INSTALL_TPU = 'pip install "nnx-introspect[tpu]"'

_CPU_CAVEAT = (
    "XLA:CPU produced these numbers: its temporaries (buffer assignment, fusion, "
    "layouts) can differ from an accelerator's many times over; argument, output "
    "and alias bytes are exact on any backend. For TPU numbers pass a TPU "
    "`topology` (XLA:TPU compiles here without a TPU)."
)


def parse_batch(dtype: str, shape: Sequence[int], /) -> jax.ShapeDtypeStruct:
    """The batch leaf the CLI's ``--batch "int32[8,2048]"`` names.

    Raises:
        ValueError: If ``dtype`` is not a dtype JAX knows.

    Example:
        >>> parse_batch("bfloat16", (2, 3))
        ShapeDtypeStruct(shape=(2, 3), dtype=bfloat16)
    """
    try:
        dt = jnp.dtype(dtype)
    except TypeError:
        raise ValueError(
            f"{dtype!r} is not a dtype; use int32, float32, bfloat16, ..."
        ) from None
    return jax.ShapeDtypeStruct(tuple(int(d) for d in shape), dt)


BatchLike: TypeAlias = Any
"""The model's positional arguments: a tuple of ``jax.ShapeDtypeStruct`` or
arrays, or one bare leaf."""

SpecsLike: TypeAlias = PartitionSpec | Sequence[Any] | None
"""One ``PartitionSpec`` for every batch leaf, or one per leaf."""

LossLike: TypeAlias = str | Callable[..., Any] | None
"""``None``, ``"mean"``, ``"lm"``, a callable ``loss(model, batch) -> scalar`` or
its ``"package.module:function"`` name."""


# ----------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class StepMemoryReport(Report):
    """What XLA's compile of one step says each device needs, beside the plan.

    Per-device figures are XLA's own accounting of the compiled SPMD program
    (``compiled.memory_analysis()``): the arguments each device holds (its
    shards of the parameters, optimizer state and batch), the outputs, the
    temporaries of the step (activations kept for the backward pass, gradients,
    the logits' softmax...), and the bytes of outputs that reuse a donated
    argument's buffer (``alias_bytes``). ``peak_bytes`` is
    ``argument + output + temp - alias``.

    Attributes:
        num_devices: Devices in the mesh.
        argument_bytes: Bytes of the step's arguments on one device.
        output_bytes: Bytes of the step's outputs on one device.
        temp_bytes: Bytes of temporaries on one device.
        alias_bytes: Output bytes that reuse donated argument buffers.
        flops: Floating-point operations of one device's program
            (``cost_analysis()["flops"]``; ``nan`` when XLA gives none).
        plan: The :class:`MeshConfigReport` of the same model, mesh and rules
            (with the optimizer's state and the gradients when ``optimizer``
            is given).
        backend: The platform that compiled (``"cpu"``, ``"tpu"``...).
        compiler: The compiler and its version, e.g. ``"XLA:CPU (jaxlib
            0.10.2)"`` or ``"XLA:TPU (libtpu 0.0.52, TPU v5 lite)"``.
        device_kind: The devices' kind (``"cpu"``, ``"TPU v5 lite"``).
        compile_seconds: Wall time of lowering and compiling (in the child
            process when there was one).
        step: What was compiled: ``"forward"``, ``"forward + backward"`` or
            ``"forward + backward + optimizer update"``.
        loss: The loss's name (``"mean"``, ``"lm"``, a callable's name) or
            ``None`` for forward only.
        optimizer: The optimizer's name, or ``None``.
        batch: Each batch leaf as ``"int32[8,128]"``.
        batch_specs: Each batch leaf's partition spec.
        topology: The TPU topology name, or ``None``.
        compiled_in: ``"this process"`` or ``"a child process with N virtual
            CPU devices"``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from flax import nnx
        >>> batch = jax.ShapeDtypeStruct((8, 4), jnp.float32)
        >>> report = step_memory_report(
        ...     lambda rngs: nnx.Linear(4, 6, rngs=rngs), "data=8", batch
        ... )
        >>> report.argument_bytes  # kernel + bias replicated, 1 of 8 rows of x
        136
        >>> report.peak_bytes == (
        ...     report.argument_bytes + report.output_bytes + report.temp_bytes
        ...     - report.alias_bytes
        ... )
        True
        >>> report.fits(1024**2), report.backend
        (True, 'cpu')
    """

    SCHEMA = "nnx-introspect/step-memory"
    SCHEMA_VERSION = 1

    num_devices: int
    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    alias_bytes: int
    flops: float
    plan: MeshConfigReport
    backend: str
    compiler: str
    device_kind: str
    compile_seconds: float
    step: str
    loss: str | None
    optimizer: str | None
    batch: tuple[str, ...]
    batch_specs: tuple[PartitionSpec, ...]
    topology: str | None = None
    compiled_in: str = "this process"

    @property
    def peak_bytes(self) -> int:
        """``argument + output + temp - alias`` bytes on one device."""
        return (
            self.argument_bytes + self.output_bytes + self.temp_bytes - self.alias_bytes
        )

    @property
    def total_flops(self) -> float:
        """``flops * num_devices``: the whole step's floating-point operations."""
        return self.flops * self.num_devices

    @typechecked
    def fits(self, max_device_bytes: IntLike | str) -> bool:
        """Whether ``peak_bytes`` is at most ``max_device_bytes`` per device.

        Args:
            max_device_bytes: A byte count (``>= 0``) or a size such as
                ``"16GiB"``.

        Raises:
            ValueError: If ``max_device_bytes`` is negative or not a size.
        """
        return self.peak_bytes <= _budget(max_device_bytes)

    def table(self) -> Table:
        """The report as a :class:`~nnx_introspect.Table`, the verdict first."""
        cats = self.plan.bytes_by_category
        rows: list[tuple[str, str, str]] = [
            ("arguments", format_bytes(self.argument_bytes), _n(self.argument_bytes)),
            ("outputs", format_bytes(self.output_bytes), _n(self.output_bytes)),
            ("temporaries", format_bytes(self.temp_bytes), _n(self.temp_bytes)),
            (
                "aliased (donated)",
                "-" + format_bytes(self.alias_bytes),
                _n(-self.alias_bytes),
            ),
        ]
        totals = (
            ("peak per device", format_bytes(self.peak_bytes), _n(self.peak_bytes)),
        )
        plan_rows = tuple(
            (f"plan: {cat}", format_bytes(cats[cat]), _n(cats[cat]))
            for cat in cats
            if cats[cat]
        )
        notes = [
            f"Compiled in {self.compiled_in}, "
            f"{self.compile_seconds:.1f} s; step: {self.step}; batch: "
            f"{', '.join(self.batch)} split as "
            f"{', '.join(_spec_str(s) for s in self.batch_specs)}."
        ]
        if self.backend == "cpu":
            notes.append(_CPU_CAVEAT)
        if math.isfinite(self.flops):
            notes.append(
                f"{self.flops:.4g} FLOPs per device, {self.total_flops:.4g} in all."
            )
        notes.append(
            "Plan rows: the exact bytes per device of parameters, other state, "
            "optimizer state and gradients under the same mesh and rules; XLA's "
            "arguments hold the parameters, state and batch shards."
        )
        return Table(
            title=self.verdict,
            columns=("", "per device", "bytes"),
            rows=tuple(rows),
            totals=totals + plan_rows,
            notes=tuple(notes),
        )

    @property
    def verdict(self) -> str:
        """One line: the peak per device, the mesh and the compiler."""
        return (
            f"Peak {format_bytes(self.peak_bytes)} per device for one step on "
            f"{self.num_devices} devices ({_mesh_str(self.plan)}; "
            f"{self.device_kind}), by {self.compiler}"
        )

    def json_data(self) -> dict[str, Any]:
        """Exact figures for JSON output."""
        return {
            "num_devices": self.num_devices,
            "mesh": dict(zip(self.plan.axis_names, self.plan.axis_sizes, strict=True)),
            "peak_bytes": self.peak_bytes,
            "argument_bytes": self.argument_bytes,
            "output_bytes": self.output_bytes,
            "temp_bytes": self.temp_bytes,
            "alias_bytes": self.alias_bytes,
            "flops": self.flops if math.isfinite(self.flops) else None,
            "backend": self.backend,
            "compiler": self.compiler,
            "device_kind": self.device_kind,
            "topology": self.topology,
            "compiled_in": self.compiled_in,
            "compile_seconds": self.compile_seconds,
            "step": self.step,
            "loss": self.loss,
            "optimizer": self.optimizer,
            "batch": list(self.batch),
            "batch_specs": [_spec_json(s) for s in self.batch_specs],
            "temporaries_caveat": _CPU_CAVEAT if self.backend == "cpu" else None,
            "plan": {
                "bytes_per_device": self.plan.bytes_per_device,
                "bytes_per_device_by_category": self.plan.bytes_by_category,
                "n_params": self.plan.n_params,
                "ok": self.plan.ok,
            },
        }


def _n(value: int) -> str:
    return f"{value:,}"


def _spec_str(spec: PartitionSpec) -> str:
    return "P(" + ", ".join(repr(a) for a in spec) + ")"


def _spec_json(spec: PartitionSpec) -> list[Any]:
    return [list(a) if isinstance(a, tuple) else a for a in spec]


def _mesh_str(plan: MeshConfigReport) -> str:
    return ", ".join(
        f"{n}={s}" for n, s in zip(plan.axis_names, plan.axis_sizes, strict=True)
    )


def _budget(value: Any) -> int:
    return parse_bytes(value)


# ----------------------------------------------------------------------------
# Arguments
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Request:
    """Everything a compile needs, normalised (and JSON-able for a child)."""

    model: Any
    target_name: str | None
    mesh_axes: tuple[tuple[str, int], ...]
    batch: tuple[jax.ShapeDtypeStruct, ...]
    batch_specs: tuple[PartitionSpec, ...]
    loss: LossLike
    loss_name: str | None
    tx: optax.GradientTransformation | None
    optimizer_name: str | None
    rules: Any
    logical_rules: Any

    @property
    def num_devices(self) -> int:
        return math.prod(s for _, s in self.mesh_axes)


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    if len(text) > 300:
        text = text[:297] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _as_model(target: Any) -> Any:
    """An abstract module for ``target`` (never the caller's own object)."""
    if isinstance(target, str):
        try:
            return build_target(target)
        except TargetError as error:
            raise ValueError(f"`target` {target!r} cannot be built: {error}") from None
    if isinstance(target, nnx.State):
        raise TypeError(
            "`target` must be an nnx.Module, a factory taking `rngs` or a "
            "'package.module:factory' string, got an nnx.State: a step needs the "
            "module to call. Pass the model."
        )
    if isinstance(target, nnx.Module):
        graphdef, state = nnx.split(target)
        abstract = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)), state
        )
        return nnx.merge(graphdef, abstract)
    if callable(target):
        try:
            model = abstract_model(target)
        except Exception as error:
            raise ValueError(
                f"`target` factory {getattr(target, '__name__', target)!r} raised "
                f"{_one_line(error)}"
            ) from None
        if not isinstance(model, nnx.Module):
            raise TypeError(
                f"`target` factory returned a {type(model).__name__}, not an "
                "nnx.Module."
            )
        return model
    raise TypeError(  # pragma: no cover - beartype rejects these first
        f"`target` must be an nnx.Module, a factory or a string, got {target!r}."
    )


def _importable_name(obj: Any) -> str | None:
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


def _as_batch(batch: Any) -> tuple[jax.ShapeDtypeStruct, ...]:
    leaves = tuple(batch) if isinstance(batch, tuple | list) else (batch,)
    if not leaves:
        raise ValueError(
            "`batch` must hold the model's positional arguments, got an empty "
            "tuple. Pass e.g. (jax.ShapeDtypeStruct((8, 128), jnp.int32),)."
        )
    out: list[jax.ShapeDtypeStruct] = []
    for i, leaf in enumerate(leaves):
        shape = getattr(leaf, "shape", None)
        dtype = getattr(leaf, "dtype", None)
        if shape is None or dtype is None or isinstance(leaf, type):
            raise TypeError(
                f"`batch[{i}]` must be a jax.ShapeDtypeStruct or an array, got "
                f"{leaf!r} of type {type(leaf).__name__}. Write e.g. "
                "jax.ShapeDtypeStruct((8, 128), jnp.int32)."
            )
        # Only shapes and dtypes are read, but NaN or inf in a concrete batch is a
        # bug upstream worth reporting before anything is compiled.
        check_finite(leaf, f"batch[{i}]")
        out.append(jax.ShapeDtypeStruct(tuple(int(d) for d in shape), dtype))
    return tuple(out)


def _batch_str(leaf: jax.ShapeDtypeStruct) -> str:
    return f"{jnp.dtype(leaf.dtype).name}[{','.join(str(d) for d in leaf.shape)}]"


def _as_batch_specs(
    batch_spec: Any, batch: tuple[jax.ShapeDtypeStruct, ...], first_axis: str
) -> tuple[tuple[PartitionSpec, ...], str]:
    """Per-leaf specs and the argument name to blame for their problems."""
    if batch_spec is None:
        specs = tuple(
            PartitionSpec(first_axis) if leaf.shape else PartitionSpec()
            for leaf in batch
        )
        return specs, "batch"
    if isinstance(batch_spec, PartitionSpec):
        return (batch_spec,) * len(batch), "batch_spec"
    items = list(batch_spec)
    if len(items) != len(batch):
        raise ValueError(
            f"`batch_spec` must be one PartitionSpec or one per batch leaf "
            f"({len(batch)}), got {len(items)}: {batch_spec!r}."
        )
    specs_list: list[PartitionSpec] = []
    for i, item in enumerate(items):
        if item is None:
            specs_list.append(PartitionSpec())
        elif isinstance(item, PartitionSpec):
            specs_list.append(item)
        else:
            raise TypeError(
                f"`batch_spec[{i}]` must be a PartitionSpec or None, got {item!r}."
            )
    return tuple(specs_list), "batch_spec"


def _spec_problems(
    name: str,
    batch: tuple[jax.ShapeDtypeStruct, ...],
    specs: tuple[PartitionSpec, ...],
    sizes: Mapping[str, int],
) -> list[str]:
    problems: list[str] = []
    for i, (leaf, spec) in enumerate(zip(batch, specs, strict=True)):
        where = f"`{name}` leaf {i} ({_batch_str(leaf)}) with spec {_spec_str(spec)}"
        if len(spec) > len(leaf.shape):
            problems.append(
                f"{where}: the spec has {len(spec)} entries for rank {len(leaf.shape)}."
            )
            continue
        for dim, entry in enumerate(spec):
            axes = (
                ()
                if entry is None
                else ((entry,) if isinstance(entry, str) else tuple(entry))
            )
            unknown = [a for a in axes if a not in sizes]
            if unknown:
                problems.append(
                    f"{where}: axis {unknown[0]!r} is not in the mesh {tuple(sizes)}."
                )
                continue
            product = math.prod(sizes[a] for a in axes)
            if leaf.shape[dim] % product:
                problems.append(
                    f"{where}: dimension {dim} (size {leaf.shape[dim]}) does not "
                    f"divide over {'x'.join(axes)} (product {product}). Use a "
                    f"multiple of {product} or pass `batch_spec`."
                )
    return problems


def _as_loss(loss: Any, batch: tuple[jax.ShapeDtypeStruct, ...]) -> Any:
    """Validate ``loss``: ``None``, a name in :data:`LOSSES` or a callable."""
    if loss is None:
        return None
    if isinstance(loss, str) and ":" in loss:
        try:
            return resolve_factory(loss)
        except TargetError as error:
            raise ValueError(f"`loss` {loss!r} cannot be imported: {error}") from None
    if isinstance(loss, str):
        if loss not in LOSSES:
            raise ValueError(
                f"`loss` must be None, one of {list(LOSSES)} or a callable "
                f"`loss(model, batch) -> scalar`, got {loss!r}."
            )
        if loss == "lm":
            tokens = batch[0]
            if len(tokens.shape) != 2 or not jnp.issubdtype(tokens.dtype, jnp.integer):
                raise ValueError(
                    "`loss='lm'` needs `batch[0]` to be (batch, sequence) integer "
                    f"tokens, got {_batch_str(tokens)}. Pass int32 tokens first, "
                    "or a callable `loss`."
                )
            if tokens.shape[1] < 2:
                raise ValueError(
                    "`loss='lm'` predicts each next token, so `batch[0]` needs a "
                    f"sequence of at least 2 tokens, got {_batch_str(tokens)}."
                )
        return loss
    return loss


def _loss_name(loss: Any) -> str | None:
    if loss is None or isinstance(loss, str):
        return loss
    return str(getattr(loss, "__name__", type(loss).__name__))


def _as_optimizer(
    optimizer: Any,
) -> tuple[optax.GradientTransformation | None, str | None]:
    if optimizer is None:
        return None, None
    if isinstance(optimizer, str):
        return optimizer_from_name(optimizer), optimizer.lower()
    return optimizer, None


# ----------------------------------------------------------------------------
# TPU topologies
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Topology:
    name: str
    libtpu_name: str
    chips: int
    kwargs: tuple[tuple[str, Any], ...]
    accelerator_type: str


_TOPOLOGY_RE = re.compile(r"(v4|v5e|v5litepod|v5p|v6e)-([0-9]+)")

_2D = {1: (1, 1), 4: (2, 2), 8: (2, 4), 16: (4, 4), 32: (4, 8), 64: (8, 8)}
_2D |= {128: (8, 16), 256: (16, 16)}


def _3d_shape(chips: int) -> tuple[int, int, int] | None:
    """Cloud TPU's cube shapes: 2x2x1, 2x2x2, 2x2x4, 2x4x4, 4x4x4, 4x4x8..."""
    shape = [2, 2, 1]
    order = (2, 1, 0)
    step = 0
    while math.prod(shape) < chips:
        if shape[2] == 1:
            shape[2] = 2
        else:
            shape[order[step % 3]] *= 2
            step += 1
    if math.prod(shape) != chips:
        return None
    return (shape[0], shape[1], shape[2])


@typechecked
def parse_topology(topology: str, /) -> tuple[str, int]:
    """The libtpu topology of a Cloud TPU name, and its number of chips.

    ``v5e-N`` and ``v6e-N`` count chips (``v5e-4`` is a 2x2 slice of 4 chips);
    ``v4-N`` and ``v5p-N`` count TensorCores, two per chip (``v5p-8`` is a
    2x2x1 slice of 4 chips, one JAX device per chip), as Cloud TPU, MaxText
    and axlearn name them. ``v5litepod-N`` is accepted for ``v5e-N``.

    Args:
        topology: The name, such as ``"v5e-256"``.

    Returns:
        ``(libtpu topology name, chips)``, e.g. ``("v5e:2x2", 4)``.

    Raises:
        ValueError: If the name is not a supported TPU slice.

    Example:
        >>> parse_topology("v5e-4"), parse_topology("v5p-8"), parse_topology("v4-16")
        (('v5e:2x2', 4), ('v5:2x2x1', 4), ('v4:2x2x2', 8))
    """
    topo = _topology(topology)
    return topo.libtpu_name, topo.chips


def _topology(topology: str) -> _Topology:
    match = _TOPOLOGY_RE.fullmatch(topology.strip().lower())
    examples = "'v5e-4', 'v5e-256', 'v6e-8', 'v5p-8' (4 chips) or 'v4-16' (8 chips)"
    if match is None:
        raise ValueError(
            f"`topology` must name a Cloud TPU slice of the families "
            f"{list(TPU_FAMILIES)} such as {examples}, got {topology!r}."
        )
    family, count = match.group(1), int(match.group(2))
    family = "v5e" if family == "v5litepod" else family
    if family in ("v5e", "v6e"):
        dims2 = _2D.get(count)
        if dims2 is None:
            raise ValueError(
                f"`topology` {topology!r}: a {family} slice has one of "
                f"{sorted(_2D)} chips, got {count}."
            )
        wrap = {128: (False, True, False), 256: (True, True, False)}.get(count)
        kwargs: dict[str, Any] = {}
        if wrap is not None:
            kwargs = {"chips_per_host_bounds": (2, 2, 1), "num_slices": 1}
            kwargs["wrap"] = wrap
        accel = "v5litepod" if family == "v5e" else family
        return _Topology(
            topology,
            f"{family}:{dims2[0]}x{dims2[1]}",
            count,
            tuple(kwargs.items()),
            f"{accel}-{count}",
        )
    dims3 = _3d_shape(count // 2) if count % 2 == 0 and count >= 8 else None
    if dims3 is None or count > 8192:
        raise ValueError(
            f"`topology` {topology!r}: {family}-N counts TensorCores (2 per chip); "
            f"N must be 8, 16, 32, ... (a power of two up to 8192), got {count}."
        )
    chips = count // 2
    kwargs = {"chip_config_name": "megacore"}
    if chips >= 64:
        kwargs |= {
            "chips_per_host_bounds": (2, 2, 1),
            "num_slices": 1,
            "wrap": (True, True, True),
        }
    libtpu_family = "v5" if family == "v5p" else family
    return _Topology(
        topology,
        f"{libtpu_family}:{'x'.join(str(d) for d in dims3)}",
        chips,
        tuple(kwargs.items()),
        f"{family}-{count}",
    )


def _libtpu_version() -> str | None:
    """The installed libtpu's version, or ``None`` when it is not importable."""
    if importlib.util.find_spec("libtpu") is None:
        return None
    try:
        return importlib.metadata.version("libtpu")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover
        return "unknown version"


@contextlib.contextmanager
def _libtpu_environment(accelerator_type: str) -> Iterator[None]:
    """Let libtpu start quietly on a machine without TPUs; restore the env after.

    ``ALLOW_MULTIPLE_LIBTPU_LOAD`` keeps libtpu from taking its process-wide
    lockfile (so other processes may load it too); the accelerator type and
    worker hostname stop it probing for a TPU VM's metadata and printing
    warnings. Only variables that are unset are set.
    """
    wanted = {
        "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
        "TPU_ACCELERATOR_TYPE": accelerator_type,
        "TPU_WORKER_HOSTNAMES": "localhost",
    }
    added = [k for k in wanted if k not in os.environ]
    for key in added:
        os.environ[key] = wanted[key]
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def _tpu_mesh(topology: str, mesh_axes: tuple[tuple[str, int], ...]) -> Mesh:
    topo = _topology(topology)
    n = math.prod(s for _, s in mesh_axes)
    if n != topo.chips:
        raise ValueError(
            f"`topology` {topology!r} has {topo.chips} chip(s) (one JAX device "
            f"each) but `mesh` {dict(mesh_axes)} has {n} devices. Make the mesh's "
            "axis sizes multiply to the chip count, or pick another topology."
        )
    version = _libtpu_version()
    if version is None:
        raise ImportError(
            f"`topology={topology!r}` compiles with XLA:TPU, which needs the "
            f"`libtpu` package (not installed). Install it with: {_INSTALL_TPU}"
        )
    from jax.experimental import topologies

    try:
        with _libtpu_environment(topo.accelerator_type):
            desc = topologies.get_topology_desc(
                topo.libtpu_name, "tpu", **dict(topo.kwargs)
            )
    except Exception as error:  # libtpu's JaxRuntimeError and friends
        raise ValueError(
            f"`topology` {topology!r} (libtpu topology {topo.libtpu_name!r}) could "
            f"not be created by libtpu {version}: {_one_line(error)}"
        ) from None
    names = tuple(a for a, _ in mesh_axes)
    sizes = tuple(s for _, s in mesh_axes)
    try:
        return topologies.make_mesh(desc, sizes, names)
    except Exception:  # shapes the physical layout cannot follow: plain order
        return Mesh(np.array(desc.devices).reshape(sizes), names)


# ----------------------------------------------------------------------------
# The step
# ----------------------------------------------------------------------------


class _ModelError(Exception):
    """The model raised while called on the batch (inside the trace)."""


class _LossError(Exception):
    """The loss raised or returned something other than a scalar."""


def _call_model(model: Any, batch: tuple[Any, ...]) -> Any:
    try:
        return model(*batch)
    except Exception as error:
        raise _ModelError(_one_line(error)) from error


def _objective(loss: LossLike) -> Callable[[Any, tuple[Any, ...]], Any]:
    if loss == "mean":

        def mean(model: Any, batch: tuple[Any, ...]) -> Any:
            leaves = jax.tree.leaves(_call_model(model, batch))
            if not leaves:
                raise _LossError("the model returned no array to average")
            total = sum(jnp.sum(jnp.asarray(x, jnp.float32)) for x in leaves)
            return total / sum(math.prod(jnp.shape(x)) for x in leaves)

        return mean
    if loss == "lm":

        def lm(model: Any, batch: tuple[Any, ...]) -> Any:
            logits = _call_model(model, batch)
            tokens = batch[0]
            shape = tuple(getattr(logits, "shape", ()))
            if len(shape) != 3 or shape[:2] != tuple(tokens.shape):
                raise _LossError(
                    "`loss='lm'` needs (batch, sequence, vocab) logits for "
                    f"(batch, sequence) tokens {tuple(tokens.shape)}, but the "
                    f"model returned shape {shape}"
                )
            logits = jnp.asarray(logits[:, :-1], jnp.float32)
            return optax.softmax_cross_entropy_with_integer_labels(
                logits, tokens[:, 1:]
            ).mean()

        return lm
    assert callable(loss)
    user: Callable[..., Any] = loss

    def custom(model: Any, batch: tuple[Any, ...]) -> Any:
        try:
            value = user(model, batch)
        except _ModelError:
            raise
        except Exception as error:
            raise _LossError(_one_line(error)) from error
        if jnp.shape(value) != () or not jnp.issubdtype(
            jnp.result_type(value), jnp.floating
        ):
            raise _LossError(
                f"it must return a float scalar, got shape {jnp.shape(value)} "
                f"dtype {jnp.result_type(value)}"
            )
        return value

    return custom


def _shard_state(
    state: Any, specs: Mapping[str, PartitionSpec], prefix: str, mesh: Mesh
) -> Any:
    """``state`` with each leaf a sharded ``ShapeDtypeStruct`` (specs by path)."""
    leaves, treedef = jax.tree.flatten(state)
    records = inventory(state)
    if len(records) != len(leaves):  # pragma: no cover - inventory's contract
        raise AssertionError("inventory and tree leaves disagree")
    out = []
    for leaf, record in zip(leaves, records, strict=True):
        path = prefix + record.path_str
        if path not in specs:  # pragma: no cover - the plan covers every leaf
            raise AssertionError(f"the plan has no leaf {path!r}")
        out.append(
            jax.ShapeDtypeStruct(
                leaf.shape, leaf.dtype, sharding=NamedSharding(mesh, specs[path])
            )
        )
    return jax.tree.unflatten(treedef, out)


def _optimizer_state(
    tx: optax.GradientTransformation,
    params: Any,
    specs: Mapping[str, PartitionSpec],
    mesh: Mesh,
) -> tuple[Any, jax.ShapeDtypeStruct]:
    """``tx.init(params)`` and the step counter, as sharded ``ShapeDtypeStruct``s.

    The same derivation as the plan's optimizer leaves (``opt_state/...`` and
    ``step`` of ``nnx.Optimizer``), whose specs they take by path.
    """
    abstract = jax.eval_shape(tx.init, nnx.as_pure(params))

    def place(keypath: Any, leaf: Any) -> jax.ShapeDtypeStruct:
        path = "optimizer/" + path_str(("opt_state", *keypath_keys(keypath)))
        if path not in specs:  # pragma: no cover - the plan derives the same tree
            raise AssertionError(f"the plan has no optimizer leaf {path!r}")
        return jax.ShapeDtypeStruct(
            leaf.shape, leaf.dtype, sharding=NamedSharding(mesh, specs[path])
        )

    state = jax.tree_util.tree_map_with_path(place, abstract)
    step_spec = specs.get("optimizer/step", PartitionSpec())
    step = jax.ShapeDtypeStruct((), jnp.uint32, sharding=NamedSharding(mesh, step_spec))
    return state, step


def _split_state(model: Any) -> tuple[Any, Any]:
    """``(params, other state)`` of ``model``, as ``nnx.split`` orders them."""
    _, *states = nnx.split(model, nnx.Param, ...)
    return states[0], states[1]


def _shardings(tree: Any) -> Any:
    return jax.tree.map(lambda s: s.sharding, tree)


def _compile(request: _Request, mesh: Mesh, plan: MeshConfigReport) -> dict[str, Any]:
    """Lower and compile the step on ``mesh``; XLA's numbers as plain values."""
    model, tx, loss = request.model, request.tx, request.loss
    specs = {leaf.path: leaf.spec for leaf in plan.leaves + plan.optimizer_leaves}
    graphdef, *states = nnx.split(model, nnx.Param, ...)
    params = _shard_state(states[0], specs, "", mesh)
    rest = _shard_state(states[1], specs, "", mesh)
    batch = tuple(
        jax.ShapeDtypeStruct(b.shape, b.dtype, sharding=NamedSharding(mesh, s))
        for b, s in zip(request.batch, request.batch_specs, strict=True)
    )
    replicated = NamedSharding(mesh, PartitionSpec())
    args: tuple[Any, ...]
    if loss is None:

        def forward(params: Any, rest: Any, batch: tuple[Any, ...]) -> Any:
            return _call_model(nnx.merge(graphdef, params, rest), batch)

        jitted = jax.jit(forward, keep_unused=True)
        args = (params, rest, batch)
    else:
        objective = _objective(loss)

        def grad_step(params: Any, rest: Any, batch: tuple[Any, ...]) -> Any:
            """The loss and gradients, as an NNX training loop writes them.

            ``nnx.value_and_grad`` differentiates the ``nnx.Param`` state and
            carries the other state's updates (batch statistics, RNG counts)
            back into ``model``.
            """
            model = nnx.merge(graphdef, params, rest)
            value, grads = nnx.value_and_grad(lambda m: objective(m, batch))(model)
            return value, grads, model

        if tx is None:

            def backward(params: Any, rest: Any, batch: tuple[Any, ...]) -> Any:
                value, grads, model = grad_step(params, rest, batch)
                return value, grads, _split_state(model)[1]

            out: tuple[Any, ...] = (replicated, _shardings(params), _shardings(rest))
            jitted = jax.jit(backward, out_shardings=out, keep_unused=True)
            args = (params, rest, batch)
        else:
            # What ``nnx.Optimizer(model, tx, wrt=nnx.Param).update`` does, on
            # pure arrays: no optimizer object (and so no sharding metadata or
            # mesh needed to build one), the plan's optimizer leaves exactly.
            opt_state, step = _optimizer_state(tx, params, specs, mesh)

            def train(
                params: Any,
                rest: Any,
                opt_state: Any,
                step: jax.Array,
                batch: tuple[Any, ...],
            ) -> Any:
                value, grads, model = grad_step(params, rest, batch)
                param_arrays = nnx.as_pure(nnx.state(model, nnx.Param))
                grad_arrays = nnx.as_pure(nnx.state(grads, nnx.Param))
                updates, new_opt_state = tx.update(grad_arrays, opt_state, param_arrays)
                nnx.update(model, optax.apply_updates(param_arrays, updates))
                new_params, new_rest = _split_state(model)
                return value, new_params, new_rest, new_opt_state, step + 1

            out = (
                replicated,
                _shardings(params),
                _shardings(rest),
                _shardings(opt_state),
                step.sharding,
            )
            jitted = jax.jit(
                train,
                out_shardings=out,
                donate_argnums=(0, 1, 2, 3),
                keep_unused=True,
            )
            args = (params, rest, opt_state, step, batch)
    start = time.perf_counter()
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(jax.set_mesh(mesh))
            stack.enter_context(nnx.use_eager_sharding(False))
            if request.logical_rules is not None:
                stack.enter_context(nnx.logical_axis_rules(request.logical_rules))
            lowered = jitted.lower(*args)
    except _ModelError as error:
        raise ValueError(
            f"`batch` ({', '.join(_batch_str(b) for b in request.batch)}) cannot "
            f"be passed to the model: {error}"
        ) from None
    except _LossError as error:
        raise ValueError(f"`loss` {request.loss_name!r} failed: {error}") from None
    device = mesh.devices.flat[0]
    options = _CPU_COMPILER_OPTIONS if device.platform == "cpu" else None
    compiled = lowered.compile(compiler_options=options)
    seconds = time.perf_counter() - start
    memory = compiled.memory_analysis()
    if memory is None:  # pragma: no cover - every XLA backend we know gives one
        raise RuntimeError("XLA gave no memory analysis for the compiled step.")
    cost = compiled.cost_analysis()
    if isinstance(cost, list | tuple):  # pragma: no cover - older jax
        cost = cost[0] if cost else None
    flops = float(cost.get("flops", math.nan)) if isinstance(cost, dict) else math.nan
    return {
        "argument_bytes": int(memory.argument_size_in_bytes),
        "output_bytes": int(memory.output_size_in_bytes),
        "temp_bytes": int(memory.temp_size_in_bytes),
        "alias_bytes": int(memory.alias_size_in_bytes),
        "flops": flops if math.isfinite(flops) else None,
        "backend": str(device.platform),
        "device_kind": str(device.device_kind),
        "compile_seconds": seconds,
    }


def _compiler(backend: str, device_kind: str) -> str:
    if backend == "tpu":
        return f"XLA:TPU (libtpu {_libtpu_version()}, {device_kind})"
    return f"XLA:{backend.upper()} (jaxlib {importlib.metadata.version('jaxlib')})"


# ----------------------------------------------------------------------------
# Child processes
# ----------------------------------------------------------------------------


def _child_request(request: _Request, n: int) -> dict[str, Any]:
    """The JSON a child needs; ValueError for what cannot be named."""
    present = jax.device_count()
    why = (
        f"the mesh needs {n} devices and this process has {present}, so the "
        "step compiles in a child process with virtual CPU devices, which "
        "rebuilds everything from names"
    )
    if n > MAX_CHILD_DEVICES:
        raise ValueError(
            f"`mesh` has {n} devices: more than the {MAX_CHILD_DEVICES} virtual CPU "
            f"devices a child compile may use ({why}). Use a smaller mesh, or a "
            "TPU `topology` (XLA:TPU compiles for any slice size here)."
        )
    if request.target_name is None:
        raise ValueError(
            f"`target` must be passed as 'package.module:factory' (or a factory "
            f"importable by that name), not a module object or a lambda: {why}."
        )
    loss: Any = request.loss
    if callable(loss):
        loss = _importable_name(loss)
        if loss is None:
            raise ValueError(
                "`loss` must be 'mean', 'lm', None or a function importable as "
                f"'package.module:function' (not a lambda or closure): {why}."
            )
    if request.tx is not None and request.optimizer_name is None:
        raise ValueError(
            f"`optimizer` must be a name, one of {list(OPTIMIZER_NAMES)}, not an "
            f"optax object: {why}."
        )
    rules = _json_rules(request.rules, "rules")
    return {
        "target": request.target_name,
        "mesh": [list(axis) for axis in request.mesh_axes],
        "batch": [[list(b.shape), jnp.dtype(b.dtype).name] for b in request.batch],
        "batch_specs": [_spec_json(s) for s in request.batch_specs],
        "loss": loss,
        "optimizer": request.optimizer_name,
        "rules": rules,
        "logical_rules": _json_rules(request.logical_rules, "logical_rules"),
    }


def _json_rules(rules: Any, name: str) -> Any:
    if rules is None:
        return None
    pairs = list(rules.items()) if isinstance(rules, Mapping) else list(rules)
    out = []
    for key, value in pairs:
        if isinstance(key, re.Pattern):
            key = key.pattern
        if isinstance(value, PartitionSpec):
            value = _spec_json(value)
        elif isinstance(value, tuple | list):
            value = [list(e) if isinstance(e, tuple | list) else e for e in value]
        out.append([key, value])
    try:
        json.dumps(out)
    except TypeError:
        raise ValueError(
            f"`{name}` must hold only strings, None and PartitionSpecs for a child "
            "compile."
        ) from None
    return out


def _spec_from_json(entries: Any) -> PartitionSpec:
    return PartitionSpec(*(tuple(e) if isinstance(e, list) else e for e in entries))


def run_child_request(data: Mapping[str, Any]) -> dict[str, Any]:
    """Compile from a child request (see :func:`_child_request`); plain numbers."""
    model = build_target(data["target"])
    mesh_axes = tuple((str(a), int(s)) for a, s in data["mesh"])
    rules = data["rules"]
    if rules is not None:
        rules = [
            (p, _spec_from_json(s) if isinstance(s, list) else s) for p, s in rules
        ]
    logical = data["logical_rules"]
    if logical is not None:
        logical = [(k, tuple(v) if isinstance(v, list) else v) for k, v in logical]
    loss: Any = data["loss"]
    if loss is not None and loss not in LOSSES:
        loss = resolve_factory(loss)
    tx = optimizer_from_name(data["optimizer"]) if data["optimizer"] else None
    request = _Request(
        model=model,
        target_name=data["target"],
        mesh_axes=mesh_axes,
        batch=tuple(
            jax.ShapeDtypeStruct(tuple(shape), jnp.dtype(dtype))
            for shape, dtype in data["batch"]
        ),
        batch_specs=tuple(_spec_from_json(s) for s in data["batch_specs"]),
        loss=loss,
        loss_name=data["loss"],
        tx=tx,
        optimizer_name=data["optimizer"],
        rules=rules,
        logical_rules=logical,
    )
    plan = mesh_config_report(
        model, dict(mesh_axes), rules=rules, logical_rules=logical, optimizer=tx
    )
    n = request.num_devices
    devices = np.array(jax.devices()[:n]).reshape([s for _, s in mesh_axes])
    mesh = Mesh(devices, tuple(a for a, _ in mesh_axes))
    return _compile(request, mesh, plan)


def _child_env(n: int) -> dict[str, str]:
    env = dict(os.environ)
    flags = [
        f
        for f in env.get("XLA_FLAGS", "").split()
        if not f.startswith("--xla_force_host_platform_device_count")
    ]
    flags.append(f"--xla_force_host_platform_device_count={n}")
    env["XLA_FLAGS"] = " ".join(flags)
    env["JAX_PLATFORMS"] = "cpu"
    paths = [p for p in sys.path if p]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def _run_child(payload: dict[str, Any], n: int) -> dict[str, Any]:
    try:
        done = subprocess.run(
            [sys.executable, "-m", "nnx_introspect._step_child"],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            env=_child_env(n),
            timeout=CHILD_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(
            f"The child compile on {n} virtual CPU devices took more than "
            f"{CHILD_TIMEOUT_SECONDS:.0f} s and was stopped. Try a smaller mesh or "
            "a TPU `topology`."
        ) from None
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(
            f"The child compile on {n} virtual CPU devices failed (exit code "
            f"{done.returncode}): {tail[0][:500]}"
        ) from None
    if "error" in answer:
        kind = {"TypeError": TypeError, "ValueError": ValueError}.get(
            answer["error"], RuntimeError
        )
        raise kind(answer["message"])
    result: dict[str, Any] = answer["result"]
    return result


# ----------------------------------------------------------------------------
# The public function
# ----------------------------------------------------------------------------


@typechecked
def step_memory_report(
    target: nnx.Module | nnx.State[Any, Any] | Callable[..., Any] | str,
    mesh: MeshLike,
    batch: BatchLike,
    /,
    *,
    loss: LossLike = "mean",
    optimizer: optax.GradientTransformation | str | None = None,
    rules: RulesLike | None = None,
    logical_rules: LogicalRulesLike | None = None,
    batch_spec: SpecsLike = None,
    topology: str | None = None,
) -> StepMemoryReport:
    """Compile one step of ``target`` on ``mesh`` and report XLA's bytes per device.

    The step is compiled, never run: parameters, state, optimizer state and the
    batch are ``jax.ShapeDtypeStruct`` s with ``NamedSharding`` s whose specs
    come from :func:`~nnx_introspect.mesh_config_report` (same ``rules``,
    ``logical_rules`` and metadata, so the two never disagree). The model runs
    inside the step as ``nnx.merge(graphdef, params, other_state)``. What is
    compiled:

    * ``loss=None``: the forward pass ``model(*batch)``;
    * a loss and ``optimizer=None``: forward and backward, returning the loss,
      the gradients (sharded like the parameters) and the updated other state;
    * a loss and an ``optimizer``: the full step: gradients, the
      ``nnx.Optimizer`` update, new parameters, other state and optimizer
      state, with the old ones donated as a training loop does.

    Every argument counts, used or not (``keep_unused=True``): a batch leaf the
    step ignores still sits on the device.

    The numbers come from the compiler: XLA:CPU on this process's devices, or
    in a child process with ``prod(mesh)`` virtual CPU devices (at most
    :data:`MAX_CHILD_DEVICES`) when this process has fewer; XLA:TPU when a
    ``topology`` is named (needs ``pip install "nnx-introspect[tpu]"``, no TPU).
    Argument bytes are exact anywhere; temporaries depend on the compiler, and
    XLA:CPU's can differ from an accelerator's many times over.

    Args:
        target: An ``nnx.Module`` (concrete or abstract; it is not touched), a
            factory taking ``rngs`` or a ``"package.module:factory"`` string.
            A child compile needs the string, or a factory importable by name.
        mesh: As in :func:`~nnx_introspect.mesh_config_report`: a mapping,
            ``"data=2,model=4"``, a ``Mesh`` (whose devices are used) or an
            ``AbstractMesh``.
        batch: The model's positional arguments: a tuple of
            ``jax.ShapeDtypeStruct`` or arrays (one may be passed bare).
        loss: ``None`` (forward only), ``"mean"`` (the float32 mean of the
            output), ``"lm"`` (next-token cross-entropy of ``(B, T, V)`` logits
            against the ``(B, T)`` integer tokens of ``batch[0]``) or a callable
            ``loss(model, batch) -> scalar`` (``batch`` is the tuple).
        optimizer: An optax transformation or a name (``"adamw"``, ...); needs
            a loss.
        rules: ``(regular expression, PartitionSpec)`` pairs, as in
            :func:`~nnx_introspect.mesh_config_report`.
        logical_rules: ``(logical name, mesh axis)`` pairs, as there.
        batch_spec: A ``PartitionSpec`` for every batch leaf or one per leaf;
            default: each leaf's leading dimension split over the mesh's first
            axis (scalars replicated).
        topology: A Cloud TPU slice such as ``"v5e-4"``, ``"v6e-256"``,
            ``"v5p-8"`` or ``"v4-16"`` (see :func:`parse_topology`): compile
            with XLA:TPU for it; the mesh must have one device per chip.

    Returns:
        A frozen :class:`StepMemoryReport`.

    Raises:
        TypeError: If an argument has the wrong type (``target`` an
            ``nnx.State``, a batch leaf without shape and dtype...).
        ValueError: If the plan has problems (every one is listed; nothing is
            compiled), the batch does not divide over the mesh, the model cannot
            take the batch, the loss fails, ``topology`` is unknown or does not
            match the mesh, or a child compile cannot rebuild a target by name.
        ImportError: If ``topology`` is given and ``libtpu`` is not installed.
        RuntimeError: If a child compile crashes or times out.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from flax import nnx
        >>> def mlp(rngs):
        ...     return nnx.Sequential(
        ...         nnx.Linear(16, 64, rngs=rngs), nnx.relu,
        ...         nnx.Linear(64, 16, rngs=rngs),
        ...     )
        >>> x = jax.ShapeDtypeStruct((32, 16), jnp.float32)
        >>> report = step_memory_report(mlp, {"data": 4}, x, optimizer="adamw")
        >>> report.num_devices, report.step
        (4, 'forward + backward + optimizer update')
        >>> params = (16 * 64 + 64 + 64 * 16 + 16) * 4  # replicated float32
        >>> report.argument_bytes == 3 * params + 8 * 16 * 4 + 8  # + 2 counters
        True
        >>> report.plan.bytes_by_category["optimizer state"] == 2 * params + 8
        True
    """
    model = _as_model(target)
    abstract_mesh = as_abstract_mesh(mesh)
    mesh_axes = tuple(
        (str(a), int(s))
        for a, s in zip(abstract_mesh.axis_names, abstract_mesh.axis_sizes, strict=True)
    )
    leaves = _as_batch(batch)
    specs, spec_name = _as_batch_specs(batch_spec, leaves, mesh_axes[0][0])
    loss = _as_loss(loss, leaves)
    loss_name = _loss_name(loss)
    tx, optimizer_name = _as_optimizer(optimizer)
    if tx is not None and loss is None:
        raise ValueError(
            f"`optimizer` {optimizer!r} needs a loss to differentiate, but "
            "`loss=None` compiles the forward pass only. Pass `loss='mean'`, "
            "'lm' or a callable."
        )
    if topology is not None:
        _topology(topology)  # a bad name is reported before any work
    plan = mesh_config_report(
        model, mesh, rules=rules, logical_rules=logical_rules, optimizer=tx
    )
    problems = [p.message for p in plan.errors]
    problems += _spec_problems(spec_name, leaves, specs, dict(mesh_axes))
    if problems:
        raise ValueError(
            f"The step cannot be sharded as planned ({len(problems)} problem(s); "
            "nothing was compiled):\n- " + "\n- ".join(problems)
        )
    request = _Request(
        model=model,
        target_name=_importable_name(target)
        if not isinstance(target, nnx.Module)
        else None,
        mesh_axes=mesh_axes,
        batch=leaves,
        batch_specs=specs,
        loss=loss,
        loss_name=loss_name,
        tx=tx,
        optimizer_name=optimizer_name,
        rules=rules,
        logical_rules=logical_rules,
    )
    n = request.num_devices
    compiled_in = "this process"
    if topology is not None:
        numbers = _compile(request, _tpu_mesh(topology, mesh_axes), plan)
    elif isinstance(mesh, Mesh):
        numbers = _compile(request, mesh, plan)
    elif n <= jax.device_count():
        devices = np.array(jax.devices()[:n]).reshape([s for _, s in mesh_axes])
        numbers = _compile(request, Mesh(devices, abstract_mesh.axis_names), plan)
    else:
        numbers = _run_child(_child_request(request, n), n)
        compiled_in = f"a child process with {n} virtual CPU devices"
    step = (
        "forward"
        if loss is None
        else (
            "forward + backward"
            if tx is None
            else "forward + backward + optimizer update"
        )
    )
    flops = numbers["flops"]
    return StepMemoryReport(
        num_devices=n,
        argument_bytes=numbers["argument_bytes"],
        output_bytes=numbers["output_bytes"],
        temp_bytes=numbers["temp_bytes"],
        alias_bytes=numbers["alias_bytes"],
        flops=math.nan if flops is None else float(flops),
        plan=plan,
        backend=numbers["backend"],
        compiler=_compiler(numbers["backend"], numbers["device_kind"]),
        device_kind=numbers["device_kind"],
        compile_seconds=float(numbers["compile_seconds"]),
        step=step,
        loss=loss_name,
        optimizer=optimizer_name if tx is None or optimizer_name else "optax object",
        batch=tuple(_batch_str(b) for b in leaves),
        batch_specs=specs,
        topology=topology,
        compiled_in=compiled_in,
    )

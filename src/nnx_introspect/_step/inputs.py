"""The step's arguments checked and normalised: target, batch, specs, loss...

Every check of :class:`~nnx_introspect.StepSpec` lives here, each raising the
:class:`~nnx_introspect._typing.ArgumentError` that names its argument; the
spec runs them in order where it is built.
"""

import contextlib
import contextvars
import dataclasses
import difflib
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeAlias

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import PartitionSpec

from nnx_introspect._abstract import abstract_model
from nnx_introspect._mesh import MeshConfigReport, optimizer_from_name, parse_bytes
from nnx_introspect._render import batch_str, spec_str
from nnx_introspect._targets import TargetError, build_target, resolve_factory
from nnx_introspect._text import error_line
from nnx_introspect._typing import (
    ArgumentError,
    IntLike,
    as_int,
    check_finite,
    short_repr,
)

__all__ = [
    "BatchLike",
    "LossLike",
    "Request",
    "SpecsLike",
    "as_batch",
    "as_batch_specs",
    "as_loss",
    "as_model",
    "as_network",
    "as_optimizer",
    "built_once",
    "check_optimizer_has_a_loss",
    "check_shardable",
    "spec_problems",
]

LOSSES = ("mean", "lm")
"""The loss names :func:`step_memory_report` knows (``None`` = forward only)."""


def parse_batch(dtype: str, shape: Sequence[int], /) -> jax.ShapeDtypeStruct:
    """The batch leaf the CLI's ``--batch "int32[8,2048]"`` names.

    Raises:
        ArgumentError: If ``dtype`` is not a dtype JAX knows (``argument`` is
            ``"batch"``).

    Example:
        >>> parse_batch("bfloat16", (2, 3))
        ShapeDtypeStruct(shape=(2, 3), dtype=bfloat16)
    """
    try:
        dt = jnp.dtype(dtype)
    except TypeError:
        raise ArgumentError(
            "batch", f"{dtype!r} is not a dtype; use int32, float32, bfloat16, ..."
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


@dataclasses.dataclass(frozen=True)
class Request:
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
    trace_as_target: bool = True
    """Trace a named target's step with JAX's device lookups answering with
    the target's devices (see :func:`nnx_introspect._step.compile.devices_seen_as`)."""
    breakdown: bool = False
    """Read XLA's dumps of the compile into a breakdown of the peak."""
    remat: tuple[tuple[str, str], ...] = ()
    """``(module class name, policy name)`` pairs rematerialised while traced."""
    microbatches: int = 1
    """How many microbatches one step accumulates gradients over."""
    lora: int | str | None = None
    """The LoRA rank, ``"model"`` or ``None`` (see ``StepSpec.lora``)."""
    tokens_per_step: int | None = None
    """The tokens one step trains on, where the batch does not tell."""
    compiler_flags: tuple[tuple[str, str], ...] = ()
    """``(name, value)`` of the compiler flags the compile is given."""

    @property
    def num_devices(self) -> int:
        return math.prod(s for _, s in self.mesh_axes)


_BUILT: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "nnx_introspect_built", default=None
)
"""Inside :func:`built_once`: the abstract models built so far, by target name."""


@contextlib.contextmanager
def built_once(known: Mapping[str, Any] | None = None) -> Iterator[None]:
    """Within the block, each ``"package.module:factory"`` is built once.

    For a report made of several programs of one target (an RL step's four):
    every spec of the block shares the one abstract model (specs never change
    it: options that do, such as LoRA, change a copy). ``known``: models
    already built, by name (a request's, built for its checks). Nothing
    outlives the block.
    """
    built = _BUILT.get()
    built = {} if built is None else built
    built.update(known or {})
    token = _BUILT.set(built)
    try:
        yield
    finally:
        _BUILT.reset(token)


def as_model(target: Any) -> Any:
    """An abstract module for ``target`` (never the caller's own object)."""
    if isinstance(target, str):
        built = _BUILT.get()
        if built is not None and target in built:
            return built[target]
        try:
            model = build_target(target)
            if built is not None:
                built[target] = model
            return model
        except TargetError as error:
            raise ArgumentError(
                "target", f"`target` {target!r} cannot be built: {error}"
            ) from None
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
            raise ArgumentError(
                "target",
                f"`target` factory {getattr(target, '__name__', target)!r} raised "
                f"{error_line(error)}",
            ) from None
        if not isinstance(model, nnx.Module):
            raise TypeError(
                f"`target` factory returned a {type(model).__name__}, not an "
                "nnx.Module."
            )
        return model
    raise TypeError(  # an array, a number: what no annotation refused first
        f"`target` must be an nnx.Module, a factory or a string, got "
        f"{short_repr(target)}."
    )


MAX_BATCH_BYTES = 2**62
"""The most bytes a batch may hold: XLA counts bytes in signed 64 bits, and a
shape past that aborts the process instead of raising."""


def as_batch(batch: Any) -> tuple[jax.ShapeDtypeStruct, ...]:
    leaves = tuple(batch) if isinstance(batch, tuple | list) else (batch,)
    if not leaves:
        raise ArgumentError(
            "batch",
            "`batch` must hold the model's positional arguments, got an empty "
            "tuple. Pass e.g. (jax.ShapeDtypeStruct((8, 128), jnp.int32),).",
        )
    out = tuple(_as_leaf(leaf, f"batch[{i}]") for i, leaf in enumerate(leaves))
    total = sum(math.prod(b.shape) * _itemsize(b.dtype) for b in out)
    if total > MAX_BATCH_BYTES:
        raise ArgumentError(
            "batch",
            f"`batch` ({', '.join(batch_str(b) for b in out)}) holds {total:,} "
            f"bytes, more than the {MAX_BATCH_BYTES:,} (2**62) any device or XLA "
            "can address. Check the shapes.",
        )
    return out


def _as_leaf(leaf: Any, name: str) -> jax.ShapeDtypeStruct:
    """One batch leaf as an unsharded ``ShapeDtypeStruct``, every field checked."""
    shape = getattr(leaf, "shape", None)
    dtype = getattr(leaf, "dtype", None)
    if shape is None or dtype is None or isinstance(leaf, type):
        raise TypeError(
            f"`{name}` must be a jax.ShapeDtypeStruct or an array, got "
            f"{short_repr(leaf)} of type {type(leaf).__name__}. Write e.g. "
            "jax.ShapeDtypeStruct((8, 128), jnp.int32)."
        )
    if isinstance(leaf, jax.Array) and leaf.is_deleted():
        raise ArgumentError(
            name,
            f"`{name}` is a deleted jax.Array (donated or `.delete()`d): its shape "
            f"{tuple(leaf.shape)} is known but the array is gone. Pass "
            "jax.ShapeDtypeStruct(x.shape, x.dtype) or a live array.",
        )
    dt = _leaf_dtype(dtype, name)
    dims = _leaf_shape(shape, name)
    if 0 in dims:
        raise ArgumentError(
            name,
            f"`{name}` has shape {dims}: a batch with no elements gives a step on "
            "no data, which measures nothing. Give every dimension a size >= 1.",
        )
    if math.prod(dims) * _itemsize(dt) > MAX_BATCH_BYTES:
        raise ArgumentError(
            name,
            f"`{name}` has shape {dims} of {dt.name}: "
            f"{math.prod(dims) * _itemsize(dt):,} bytes, more than the "
            f"{MAX_BATCH_BYTES:,} (2**62) any device or XLA can address. Check "
            "the shape.",
        )
    # Only shapes and dtypes are read, but NaN or inf in a concrete batch is a
    # bug upstream worth reporting before anything is compiled.
    check_finite(leaf, name)
    return jax.ShapeDtypeStruct(dims, dt)


def _leaf_dtype(dtype: Any, name: str) -> np.dtype[Any]:
    try:
        is_key = bool(jnp.issubdtype(dtype, jax.dtypes.prng_key))
    except TypeError:
        is_key = False
    if is_key:
        raise TypeError(
            f"`{name}` is an array of PRNG keys ({dtype}): a step's inputs are "
            "numbers. Pass the key data (jax.random.key_data(keys)) or a uint32 "
            "jax.ShapeDtypeStruct of its shape, or let the model hold its RNG "
            "state (nnx.Rngs)."
        )
    try:
        dt: np.dtype[Any] | None = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or not (
        jnp.issubdtype(dt, jnp.number) or jnp.issubdtype(dt, jnp.bool_)
    ):
        raise TypeError(
            f"`{name}` has dtype {dtype!r}, not a numeric dtype JAX can compile. "
            "Use int32, float32, bfloat16, bool, ..."
        )
    return dt


def _leaf_shape(shape: Any, name: str) -> tuple[int, ...]:
    try:
        dims = tuple(shape)
    except TypeError:
        raise TypeError(
            f"`{name}` has shape {shape!r}, not a tuple of integers."
        ) from None
    out = []
    for axis, dim in enumerate(dims):
        if isinstance(dim, bool | np.bool_) or not isinstance(dim, int | np.integer):
            raise TypeError(
                f"`{name}` dimension {axis} must be an integer, got {dim!r} of type "
                f"{type(dim).__name__} in shape {dims!r}. Write e.g. (8, 128)."
            )
        if dim < 0:
            raise ArgumentError(
                name,
                f"`{name}` dimension {axis} must be a nonnegative integer, got "
                f"{int(dim)} in shape {dims!r}.",
            )
        out.append(int(dim))
    return tuple(out)


def _itemsize(dtype: Any) -> int:
    """Bytes per element, at least 1 (int4 and friends are padded to a byte)."""
    return max(1, int(np.dtype(dtype).itemsize))


def as_batch_specs(
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
        _check_spec_entries(batch_spec, "batch_spec")
        return (batch_spec,) * len(batch), "batch_spec"
    items = list(batch_spec)
    if len(items) != len(batch):
        raise ArgumentError(
            "batch_spec",
            f"`batch_spec` must be one PartitionSpec or one per batch leaf "
            f"({len(batch)}), got {len(items)}: {batch_spec!r}.",
        )
    specs_list: list[PartitionSpec] = []
    for i, item in enumerate(items):
        if item is None:
            specs_list.append(PartitionSpec())
        elif isinstance(item, PartitionSpec):
            _check_spec_entries(item, f"batch_spec[{i}]")
            specs_list.append(item)
        else:
            raise TypeError(
                f"`batch_spec[{i}]` must be a PartitionSpec or None, got {item!r}."
            )
    return tuple(specs_list), "batch_spec"


def _check_spec_entries(spec: PartitionSpec, name: str) -> None:
    """Each entry of ``spec`` is None, an axis name or a tuple of axis names."""
    for dim, entry in enumerate(spec):
        if entry is PartitionSpec.UNCONSTRAINED:
            raise TypeError(
                f"`{name}` entry {dim} is P.UNCONSTRAINED, which only a sharding "
                "constraint inside a step may use: an input's layout must be "
                "given. Name a mesh axis, or None to replicate that dimension."
            )
        axes = entry if isinstance(entry, tuple | list) else (entry,)
        if entry is not None and not all(isinstance(a, str) for a in axes):
            raise TypeError(
                f"`{name}` entry {dim} must be None, a mesh axis name or a tuple "
                f"of them, got {entry!r} in {spec_str(spec)}. Write e.g. "
                "P('data') or P(('data', 'fsdp'), None)."
            )


def spec_problems(
    name: str,
    batch: tuple[jax.ShapeDtypeStruct, ...],
    specs: tuple[PartitionSpec, ...],
    sizes: Mapping[str, int],
) -> list[str]:
    problems: list[str] = []
    for i, (leaf, spec) in enumerate(zip(batch, specs, strict=True)):
        where = f"`{name}` leaf {i} ({batch_str(leaf)}) with spec {spec_str(spec)}"
        if len(spec) > len(leaf.shape):
            problems.append(
                f"{where}: the spec has {len(spec)} entries for rank {len(leaf.shape)}."
            )
            continue
        seen: set[str] = set()
        for dim, entry in enumerate(spec):
            axes = (
                ()
                if entry is None
                else ((entry,) if isinstance(entry, str) else tuple(entry))
            )
            repeated = [a for k, a in enumerate(axes) if a in seen or a in axes[:k]]
            seen.update(axes)
            if repeated:
                problems.append(
                    f"{where}: axis {repeated[0]!r} is used twice; a mesh axis "
                    "can split at most one dimension (and once)."
                )
                continue
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


def as_loss(loss: Any, batch: tuple[jax.ShapeDtypeStruct, ...]) -> Any:
    """Validate ``loss``: ``None``, a name in :data:`LOSSES` or a callable."""
    if loss is None:
        return None
    if isinstance(loss, str) and ":" in loss:
        try:
            return resolve_factory(loss)
        except TargetError as error:
            raise ArgumentError(
                "loss", f"`loss` {loss!r} cannot be imported: {error}"
            ) from None
    if isinstance(loss, str):
        if loss not in LOSSES:
            meant = next((name for name in LOSSES if name == loss.lower()), None)
            hint = "" if meant is None else f" Loss names are lower case: {meant!r}."
            raise ArgumentError(
                "loss",
                f"`loss` must be None, one of {list(LOSSES)} or a callable "
                f"`loss(model, batch) -> scalar`, got {loss!r}.{hint}",
            )
        if loss == "lm":
            tokens = batch[0]
            if len(tokens.shape) != 2 or not jnp.issubdtype(tokens.dtype, jnp.integer):
                raise ArgumentError(
                    "loss",
                    "`loss='lm'` needs `batch[0]` to be (batch, sequence) integer "
                    f"tokens, got {batch_str(tokens)}. Pass int32 tokens first, "
                    "or a callable `loss`.",
                )
            if tokens.shape[1] < 2:
                raise ArgumentError(
                    "loss",
                    "`loss='lm'` predicts each next token, so `batch[0]` needs a "
                    f"sequence of at least 2 tokens, got {batch_str(tokens)}.",
                )
        return loss
    return loss


def as_optimizer(
    optimizer: Any,
) -> tuple[optax.GradientTransformation | None, str | None]:
    if optimizer is None:
        return None, None
    if isinstance(optimizer, str):
        return optimizer_from_name(optimizer), optimizer.lower()
    return optimizer, None


def as_network(value: IntLike | str | None, topology: str | None) -> int | None:
    """``network_bytes_per_second`` as bytes per second; only for a GPU target.

    A number is bytes per second; a string a rate in bytes (``"50GB"``,
    ``"50GB/s"``, ``"50GBps"``, ``"46.5GiB"``) or in bits per second, as NICs
    are sold (``"400Gb/s"``, ``"400Gbps"``, ``"400Gbit/s"`` = 50 GB/s): a
    lowercase ``b`` is bits, an uppercase ``B`` bytes, and ``"400Gb"`` (no
    ``/s``) is refused as either. The command line's ``--network-bandwidth``
    reads the same strings the same way.
    """
    if value is None:
        return None
    from nnx_introspect._accelerators import resolve_topology

    if topology is None or resolve_topology(topology).platform != "cuda":
        raise ArgumentError(
            "network_bytes_per_second",
            f"`network_bytes_per_second` {value!r} is the network between GPU hosts, "
            f"but `topology` is {topology!r}. Pass a GPU topology such as "
            "'h100-256', or leave it out.",
        )
    rate = _rate_bytes(value)
    if rate <= 0:
        raise ArgumentError(
            "network_bytes_per_second",
            f"`network_bytes_per_second` must be positive, got {value!r}. Pass the "
            "bandwidth per GPU, such as '50GB' (400 Gb/s).",
        )
    return rate


_RATE = re.compile(
    r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([A-Za-z]*?)(/s|ps)?\s*", re.ASCII
)
_BITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def _rate_bytes(value: IntLike | str) -> int:
    """A rate in bytes per second: bits (``Gb/s``, ``Gbps``, ``Gbit``) divided by 8."""
    if not isinstance(value, str):
        return as_int(value, "network_bytes_per_second", minimum=0)
    match = _RATE.fullmatch(value)
    number, unit, per_second = match.groups() if match else ("", "", None)
    lower = unit.lower()
    spelt = next((w for w in ("bits", "bit") if lower.endswith(w)), None)
    bits = lower[: -len(spelt)] if spelt else None
    if bits is None and per_second is not None and unit.endswith("b"):
        bits = lower[:-1]
    if bits in _BITS:
        return as_int(
            float(number) * _BITS[bits] / 8, "network_bytes_per_second", minimum=0
        )
    if match is None or (unit.endswith("b") and lower[:-1] in _BITS) or not unit:
        raise ArgumentError(
            "network_bytes_per_second",
            f"`network_bytes_per_second` must be bytes per second ('50GB', "
            f"'50GB/s', '50GBps') or bits per second ('400Gb/s', '400Gbps'), got "
            f"{value!r}: a lowercase b is bits, an uppercase B bytes, and a rate "
            "in bits ends in /s or ps.",
        )
    try:
        return parse_bytes(f"{number}{unit}")
    except ArgumentError as error:
        raise ArgumentError(
            "network_bytes_per_second",
            str(error).replace("`max_device_bytes`", "`network_bytes_per_second`"),
        ) from None


def check_optimizer_has_a_loss(optimizer: Any, tx: Any, loss: Any) -> None:
    if tx is not None and loss is None:
        raise ArgumentError(
            "optimizer",
            f"`optimizer` {optimizer!r} needs a loss to differentiate, but "
            "`loss=None` compiles the forward pass only. Pass `loss='mean'`, "
            "'lm' or a callable.",
        )


def check_shardable(
    plan: MeshConfigReport,
    spec_name: str,
    leaves: tuple[jax.ShapeDtypeStruct, ...],
    specs: tuple[PartitionSpec, ...],
    mesh_axes: tuple[tuple[str, int], ...],
    *,
    rules_given: str | None = None,
) -> None:
    """Raise a summary of every problem of the plan and the batch's split, or none.

    Hundreds of leaves can share one cause (a mesh whose axis names the model
    does not use): the message counts each kind, shows one example of it and
    its fix, and points to the full list, in a few hundred characters.

    The error's ``argument`` is the one to change: ``spec_name`` (``"batch"``
    or ``"batch_spec"``) when only the batch's split fails; ``rules_given``
    (``"rules"`` or ``"logical_rules"``, when the caller passed them) when
    the plan names axes the mesh lacks; else ``"mesh"``.
    """
    batch = spec_problems(spec_name, leaves, specs, dict(mesh_axes))
    errors = plan.errors
    if not errors and not batch:
        return
    total = len(errors) + len(batch)
    by_kind: dict[str, list[Any]] = {}
    for problem in errors:
        by_kind.setdefault(problem.kind, []).append(problem)
    clauses = [_kind_clause(kind, found, mesh_axes) for kind, found in by_kind.items()]
    if batch:
        more = f" (and {len(batch) - 1} more)" if len(batch) > 1 else ""
        clauses.append(f"{batch[0].rstrip('.')}{more}")
    full = " All: `nnx-introspect mesh`." if len(errors) > len(by_kind) else ""
    blamed = spec_name if not errors else "mesh"
    if rules_given is not None and "unknown-axis" in by_kind:
        blamed = rules_given
    raise ArgumentError(
        blamed,
        f"`mesh` {dict(mesh_axes)} cannot shard the step ({total} problem"
        f"{'s' if total > 1 else ''}, nothing compiled): "
        + "; ".join(clauses)
        + "."
        + full,
    )


def _kind_clause(
    kind: str, problems: list[Any], mesh_axes: tuple[tuple[str, int], ...] = ()
) -> str:
    """One kind of plan problem: how many, one example, the fix."""
    first, n = problems[0], len(problems)
    if kind == "unknown-axis":
        missing = sorted({a for p in problems for a in p.axes})
        paths = len({p.path for p in problems})
        leaves = f"{paths} lea{'ves name' if paths > 1 else 'f names'}"
        return (
            f"{leaves} axes the mesh lacks ({', '.join(map(repr, missing))}; "
            f"e.g. `{first.path}`): name them in `mesh` (--mesh)"
            f"{_mesh_fix(missing, mesh_axes)}, map them with "
            "`logical_rules` or override with `rules`"
        )
    if kind == "indivisible":
        return (
            f"{n} dimension{'s do' if n > 1 else ' does'} not divide over "
            f"{'their' if n > 1 else 'its'} axes "
            f"(e.g. `{first.path}` dimension {first.dimension}, size {first.size}, "
            f"over {'x'.join(first.axes)} = {first.product}): pick sizes in "
            "`mesh` (--mesh) that divide them or override with `rules`"
        )
    more = f" (and {n - 1} more like it)" if n > 1 else ""
    return f"{first.message.rstrip('.')}{more}"


def _mesh_fix(missing: list[str], mesh_axes: tuple[tuple[str, int], ...]) -> str:
    """``, e.g. `mesh "fsdp=8,tp=1"` ...``: the mesh with the missing axes named.

    A mesh axis close to a missing one (``tpp`` for ``tp``) is read as a
    misspelling and renamed; every other
    missing axis is added at size 1, which shards nothing along it. No fix
    when more than one axis would be added: the mesh then likely follows
    another naming (``data=2,model=4``), which ``logical_rules`` maps.
    """
    if not mesh_axes:
        return ""
    renamed: dict[str, str] = {}
    for axis in missing:
        spare = [a for a, _ in mesh_axes if a not in missing and a not in renamed]
        close = difflib.get_close_matches(axis, spare, n=1, cutoff=0.6)
        if close:
            renamed[close[0]] = axis
    added = [f"{a}=1" for a in missing if a not in renamed.values()]
    if len(added) > 1:
        return ""
    fixed = [f"{renamed.get(a, a)}={size}" for a, size in mesh_axes] + added
    notes = [
        f"{a!r} renamed {b!r}, the axis the model names" for a, b in renamed.items()
    ]
    if added:
        notes.append("an axis of size 1 shards nothing")
    return f', e.g. `mesh "{",".join(fixed)}"` ({"; ".join(notes)})'

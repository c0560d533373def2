"""The serving programs: prefill and decode, built and lowered on a mesh.

Both take the served weights and the KV cache (donated: its buffers are the
output cache's) and are compiled as a server's ``jax.jit`` would compile them;
the prefill passes ``prefill=True`` to a model whose ``__call__`` takes it
(the examples' ``Llama``: the prompt's tokens score only each other and the
head runs on the last token, as a serving engine's prefill does);
XLA's memory and cost analyses are read as for a training step
(:mod:`~nnx_introspect._serve.compile` compiles what this module lowers).
The names a breakdown of a program's peak gives its arguments and outputs
are given here too (:func:`serve_leaves`, :func:`serve_outputs`), as a step's
builder gives them.
"""

import contextlib
import dataclasses
import inspect
import math
import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from nnx_introspect._breakdown import ArgumentLeaf
from nnx_introspect._conventions import call_parameters, follows_kv_cache_convention
from nnx_introspect._inventory import inventory
from nnx_introspect._mesh import mesh_config_report
from nnx_introspect._render import error_line
from nnx_introspect._serve.spec import (
    KV_CACHE_DTYPES,
    TENSOR_PARALLEL_AXES,
    WEIGHT_DTYPES,
    ServeSpec,
)
from nnx_introspect._step import devices_seen_as, present_mesh
from nnx_introspect._typing import ArgumentError
from nnx_introspect._xla import (
    native_stderr_captured,
    python_log_dropped,
    topology_mesh,
)

__all__ = [
    "Inputs",
    "MissingMeshAxesError",
    "check_cache_path",
    "lower_program",
    "program_args",
    "programs",
    "serve_inputs",
    "serve_leaves",
    "serve_mesh",
    "serve_outputs",
    "trace_error",
]

_CONVENTIONS = (
    "the model's own `init_cache(sequences, context, dtype)` with "
    "`model(tokens, positions, cache, attention_mask) -> (logits, cache)` (the "
    "tunix and flax-gemma convention), `init_cache='pkg.mod:fn'` called as "
    "`fn(model, sequences, context, dtype)`, and `decode='pkg.mod:fn'` called as "
    "`fn(model, tokens, positions, cache) -> (logits, cache)`"
)


@dataclasses.dataclass(frozen=True)
class Inputs:
    """The abstract, sharded arguments of both programs and how to call the model.

    Attributes:
        graphdef: The model's graph definition.
        weights: The served weights: ``ShapeDtypeStruct`` leaves, sharded.
        cache: The KV cache of ``sequences`` rows, sharded.
        weights_bytes: Bytes of one device's share of the weights.
        kv_cache_bytes: Bytes of one device's share of the cache.
        kv_bytes_per_token: Bytes of one position of one sequence on a device.
        call: ``call(model, tokens, positions, cache) -> (logits, cache)``.
        prefill: The prefill's call, the same convention
            (:func:`_prefill_caller`), or ``None`` for ``call``.
    """

    graphdef: Any
    weights: Any
    cache: Any
    weights_bytes: int
    kv_cache_bytes: int
    kv_bytes_per_token: int
    call: Callable[..., Any]
    prefill: Callable[..., Any] | None = None


def serve_mesh(spec: ServeSpec) -> tuple[Mesh, list[Any] | None]:
    """The mesh to compile on and the devices the model is traced as seeing."""
    n, mesh = spec.num_devices, spec.mesh
    if spec.topology is not None:
        with native_stderr_captured(), python_log_dropped("jax._src.xla_bridge"):
            built, _ = topology_mesh(spec.topology, spec.mesh_axes)
        return built, list(built.devices.flat)
    if isinstance(mesh, Mesh):
        return mesh, None
    if n > jax.device_count():
        raise ArgumentError(
            "mesh",
            f"`mesh` {dict(spec.mesh_axes)} needs {n} devices; this process has "
            f"{jax.device_count()}. Pass a `topology` (e.g. 'h100-{n}') to "
            "compile for a target without its devices.",
        )
    return present_mesh(spec.mesh_axes), None


def _caller(spec: ServeSpec, model: Any) -> Callable[..., Any]:
    decode: Callable[..., Any] | None = spec.options.decode
    if decode is not None:
        return decode
    if not follows_kv_cache_convention(model):
        params = tuple(p.name for p in call_parameters(model) or ())
        raise ArgumentError(
            "decode",
            f"`{type(model).__name__}.__call__` takes {params}, not the "
            f"KV-cache convention. Pass `decode` (--decode); accepted: "
            f"{_CONVENTIONS}.",
        )

    def call(model: Any, tokens: Any, positions: Any, cache: Any) -> Any:
        context = _context_of(cache, tokens.shape[0])
        mask = jnp.arange(context)[None, None, :] <= positions[:, :, None]
        return model(tokens, positions, cache, mask)

    return call


def _prefill_caller(spec: ServeSpec, model: Any) -> Callable[..., Any] | None:
    """The prefill's call: ``model(..., prefill=True)`` if ``__call__`` takes it.

    A model whose ``__call__`` takes a ``prefill`` keyword (the examples'
    ``Llama``) is told the call is a prefill of prompts into an empty cache
    (its tokens may read only each other); called with the mask
    :func:`_caller`'s call builds. ``None`` (the prefill calls the model as
    decode does) when a ``decode`` is given or the model takes no such
    keyword. ``__call__`` is read through its wrappers (qwix's), which pass
    the keyword on.

    Example:
        >>> from nnx_introspect.examples import llama_tiny
        >>> from nnx_introspect._serve.spec import ServeSpec
        >>> spec = ServeSpec(llama_tiny, "tp=1", sequences=2, context=16)
        >>> _prefill_caller(spec, spec.model) is not None
        True
    """
    params = call_parameters(model) or ()
    takes = any(
        p.name == "prefill" and p.kind in _KEYWORD and p.default is not p.empty
        for p in params
    )
    if spec.options.decode is not None or not takes:
        return None

    def prefill(model: Any, tokens: Any, positions: Any, cache: Any) -> Any:
        context = _context_of(cache, tokens.shape[0])
        mask = jnp.arange(context)[None, None, :] <= positions[:, :, None]
        return model(tokens, positions, cache, mask, prefill=True)

    return prefill


_KEYWORD = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _context_of(cache: Any, rows: int) -> int:
    return max(
        (leaf.shape[1] for leaf in jax.tree.leaves(cache) if leaf.ndim >= 2),
        default=1,
    )


def _abstract_cache(spec: ServeSpec, model: Any) -> Any:
    dtype = KV_CACHE_DTYPES[spec.options.kv_cache]
    maker = spec.options.init_cache
    if maker is None and not callable(getattr(model, "init_cache", None)):
        raise ArgumentError(
            "init_cache",
            f"`{type(model).__name__}` has no KV cache path: no `init_cache` "
            f"method and no `init_cache` or `decode` given (--init-cache, "
            f"--decode). Accepted: {_CONVENTIONS}.",
        )
    args = (spec.sequences, spec.context, dtype)
    try:
        if maker is None:
            cache = jax.eval_shape(lambda: model.init_cache(*args))
        else:
            cache = jax.eval_shape(lambda: maker(model, *args))
    except Exception as error:
        raise ArgumentError(
            "init_cache",
            f"`init_cache`: making the KV cache raised {error_line(error)}",
        ) from None
    leaves = jax.tree.leaves(cache)
    rows = (spec.sequences, spec.context)
    if not any(getattr(leaf, "shape", ())[:2] == rows for leaf in leaves):
        shapes = [tuple(getattr(leaf, "shape", ())) for leaf in leaves][:4]
        raise ArgumentError(
            "init_cache",
            f"`init_cache` made a KV cache with no array of shape "
            f"(sequences, context, ...) = "
            f"{rows}: its leaves' shapes are {shapes}. The cache maker must "
            f"return arrays laid out [sequences, context, kv_heads, head_dim].",
        )
    return cache


def _cache_spec(leaf: Any, spec: ServeSpec) -> PartitionSpec:
    """Sequences over the data-parallel axes, KV heads over the tensor-parallel."""
    dp = tuple(a for a, s in spec.mesh_axes if a not in TENSOR_PARALLEL_AXES)
    tp = tuple(a for a, s in spec.mesh_axes if a in TENSOR_PARALLEL_AXES)
    entries: list[Any] = [None] * leaf.ndim
    if leaf.ndim and leaf.shape[0] == spec.sequences and dp:
        entries[0] = dp if len(dp) > 1 else dp[0]
    if leaf.ndim == 4 and leaf.shape[:2] == (spec.sequences, spec.context) and tp:
        entries[2] = tp if len(tp) > 1 else tp[0]
    return PartitionSpec(*entries)


def cache_problems(cache: Any, spec: ServeSpec) -> list[ArgumentError]:
    """Every way the cache does not split over the mesh, before any compile."""
    problems = []
    dp, tp = spec.data_parallel, spec.tensor_parallel
    if spec.sequences % dp or spec.prefill_sequences % dp:
        problems.append(
            ArgumentError(
                "sequences",
                f"`sequences` {spec.sequences} (prefilled {spec.prefill_sequences} "
                f"at a time) does not split over the {dp} data-parallel devices "
                f"of the mesh. Pass a multiple of {dp}.",
            )
        )
    heads = {
        leaf.shape[2]
        for leaf in jax.tree.leaves(cache)
        if leaf.ndim == 4 and leaf.shape[:2] == (spec.sequences, spec.context)
    }
    for kv in sorted(heads):
        if kv % tp:
            fits = [d for d in range(1, kv + 1) if kv % d == 0]
            problems.append(
                ArgumentError(
                    "mesh",
                    f"`mesh` tp={tp} does not divide the {kv} KV heads of the "
                    f"cache. Use a tensor-parallel size of {fits}, with the rest "
                    "of the devices as data-parallel replicas.",
                )
            )
    return problems


_TRAINING_AXES = ("fsdp", "data", "dp", "batch", "sp", "stage", "pipeline")
"""Annotation names a serving mesh may lack: weights split over them in training
are replicated over the serving mesh (a server keeps no optimizer shards)."""


def _shard_bytes(leaf: Any, sharding: NamedSharding, dtype: Any) -> int:
    shard: tuple[int, ...] = sharding.shard_shape(leaf.shape)
    return math.prod(shard) * int(np.dtype(dtype).itemsize)


def _weights(spec: ServeSpec, model: Any, mesh: Mesh) -> tuple[Any, Any, int]:
    plan = mesh_config_report(model, dict(spec.mesh_axes))
    if plan.errors:  # training axes a serving mesh lacks (fsdp): replicated
        names = [a for a, _ in spec.mesh_axes]
        rules: list[tuple[str, str | None]] = [(a, a) for a in names]
        rules += [(a, None) for a in _TRAINING_AXES if a not in names]
        retried = mesh_config_report(model, dict(spec.mesh_axes), logical_rules=rules)
        plan = plan if retried.errors else retried
    if plan.errors:
        raise ArgumentError(
            "mesh",
            f"`mesh` does not split the weights ({len(plan.errors)} problems): "
            f"{plan.errors[0].message}",
        )
    specs = {leaf.path: leaf.spec for leaf in plan.leaves}
    graphdef, state = nnx.split(model)
    leaves, treedef = jax.tree.flatten(state)
    cast = WEIGHT_DTYPES.get(spec.options.weights or "")
    out, total = [], 0
    for leaf, record in zip(leaves, inventory(state), strict=True):
        sharding = NamedSharding(mesh, specs[record.path_str])
        dtype = leaf.dtype
        if cast is not None and jnp.issubdtype(dtype, jnp.floating):
            dtype = cast
        out.append(jax.ShapeDtypeStruct(leaf.shape, dtype, sharding=sharding))
        total += _shard_bytes(leaf, sharding, dtype)
    return graphdef, jax.tree.unflatten(treedef, out), total


def check_cache_path(spec: ServeSpec) -> tuple[Any, Callable[..., Any]]:
    """The abstract cache and the model's call; the first cache problem raised.

    A model with no cache path, a cache of the wrong layout, sequences or KV
    heads that do not split over the mesh: each an
    :class:`~nnx_introspect._typing.ArgumentError`, before any mesh is made.
    """
    cache = _abstract_cache(spec, spec.model)
    problems = cache_problems(cache, spec)
    if problems:
        raise problems[0]
    return cache, _caller(spec, spec.model)


def serve_inputs(spec: ServeSpec, mesh: Mesh) -> Inputs:
    """The programs' abstract arguments; every cache problem raised first."""
    model = spec.model
    cache, call = check_cache_path(spec)
    graphdef, weights, weights_bytes = _weights(spec, model, mesh)
    sharded, kv_bytes, per_token = [], 0, 0
    leaves, treedef = jax.tree.flatten(cache)
    for leaf in leaves:
        sharding = NamedSharding(mesh, _cache_spec(leaf, spec))
        sharded.append(jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding))
        kv_bytes += _shard_bytes(leaf, sharding, leaf.dtype)
        if leaf.ndim >= 2 and leaf.shape[:2] == (spec.sequences, spec.context):
            shard = sharding.shard_shape(leaf.shape)
            per_token += math.prod(shard[2:]) * np.dtype(leaf.dtype).itemsize
    return Inputs(
        graphdef,
        weights,
        jax.tree.unflatten(treedef, sharded),
        weights_bytes,
        kv_bytes,
        per_token,
        call,
        _prefill_caller(spec, model),
    )


def _rows(cache: Any, rows: int, admitted: int, slot: Any) -> Any:
    return jax.tree.map(
        lambda c: (
            jax.lax.dynamic_slice_in_dim(c, slot, admitted, 0)
            if c.ndim and c.shape[0] == rows
            else c
        ),
        cache,
    )


def programs(inputs: Inputs, spec: ServeSpec) -> dict[str, Callable[..., Any]]:
    """The jitted ``prefill`` and ``decode``, each donating the cache."""
    graphdef, call, rows = inputs.graphdef, inputs.call, spec.sequences
    first = inputs.prefill or call  # the prefill's call
    shardings = jax.tree.map(lambda leaf: leaf.sharding, inputs.cache)

    def decode(weights: Any, cache: Any, tokens: Any, positions: Any) -> Any:
        logits, cache = call(nnx.merge(graphdef, weights), tokens, positions, cache)
        return logits[:, -1], jax.lax.with_sharding_constraint(cache, shardings)

    def prefill(
        weights: Any, cache: Any, tokens: Any, positions: Any, slot: Any
    ) -> Any:
        admitted = tokens.shape[0]
        model = nnx.merge(graphdef, weights)
        if admitted == rows:
            logits, cache = first(model, tokens, positions, cache)
        else:  # the admitted rows, written back in place
            logits, part = first(
                model, tokens, positions, _rows(cache, rows, admitted, slot)
            )
            cache = jax.tree.map(
                lambda c, p: (
                    jax.lax.dynamic_update_slice_in_dim(c, p.astype(c.dtype), slot, 0)
                    if c.ndim and c.shape[0] == rows
                    else p
                ),
                cache,
                part,
            )
        return logits[:, -1], jax.lax.with_sharding_constraint(cache, shardings)

    return {
        "prefill": jax.jit(prefill, donate_argnums=(1,)),
        "decode": jax.jit(decode, donate_argnums=(1,)),
    }


def program_args(
    inputs: Inputs, spec: ServeSpec, mesh: Mesh, name: str
) -> tuple[Any, ...]:
    """The abstract arguments of program ``name``: tokens and positions sharded."""
    dp = tuple(a for a, _ in spec.mesh_axes if a not in TENSOR_PARALLEL_AXES)
    rows = spec.sequences if name == "decode" else spec.prefill_sequences
    length = 1 if name == "decode" else spec.prompt
    batch = NamedSharding(mesh, PartitionSpec(dp or None, None))
    tokens = jax.ShapeDtypeStruct((rows, length), jnp.int32, sharding=batch)
    args: tuple[Any, ...] = (inputs.weights, inputs.cache, tokens, tokens)
    if name == "prefill":
        slot = jax.ShapeDtypeStruct(
            (), jnp.int32, sharding=NamedSharding(mesh, PartitionSpec())
        )
        args = (*args, slot)
    return args


@contextlib.contextmanager
def _mesh_contexts(mesh: Mesh) -> Iterator[None]:
    """``jax.set_mesh`` and the legacy ``with mesh:``, as a server compiles."""
    with contextlib.ExitStack() as stack:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            stack.enter_context(mesh)
        stack.enter_context(jax.set_mesh(mesh))
        stack.enter_context(nnx.use_eager_sharding(False))
        yield


class MissingMeshAxesError(ArgumentError):
    """The model's code names mesh axes the serving mesh lacks (``axes``)."""

    def __init__(self, axes: tuple[str, ...], message: str) -> None:
        super().__init__("mesh", message)
        self.axes = axes


_MISSING_AXIS = re.compile(r"Resource axis: (\w+) of .* is not found in mesh")
_DTYPES = re.compile(r"requires arguments to have the same dtypes, got (\w+), (\w+)")


def trace_error(error: Exception, spec: ServeSpec) -> ArgumentError:
    """The failed trace of a serving program as one error naming the argument.

    A sharding constraint over an axis the mesh lacks is
    :class:`MissingMeshAxesError` (``mesh``); keys and values of another dtype
    than the cache's names ``kv_cache`` and the model's dtype; anything else
    names ``decode``, the calling convention.
    """
    said = error_line(error).rstrip(".")
    missing = _MISSING_AXIS.search(str(error))
    if missing is not None:
        axis = missing[1]
        mesh = ",".join(f"{a}={s}" for a, s in spec.mesh_axes)
        return MissingMeshAxesError(
            (axis,),
            f"`mesh` {mesh} has no {axis!r} axis, which the model's own "
            f"activation constraints name ({said}). Add it: {mesh},{axis}=1 "
            "(an axis of size 1 shards nothing).",
        )
    dtypes = _DTYPES.search(str(error))
    cache = spec.options.kv_cache
    if dtypes is not None and cache in dtypes.groups():
        model = next(d for d in dtypes.groups() if d != cache)
        return ArgumentError(
            "kv_cache",
            f"`kv_cache` {cache!r}: the model writes its keys and values in "
            f"{model} ({said}). Pass kv_cache={model!r} (--kv-cache {model}), or "
            f"make the model compute its keys and values in {cache}.",
        )
    return ArgumentError(
        "decode",
        f"`decode`: the model's KV-cache call failed to trace: {said}. "
        f"Accepted: {_CONVENTIONS}.",
    )


def lower_program(
    jitted: Any,
    args: tuple[Any, ...],
    mesh: Mesh,
    trace_devices: list[Any] | None,
    spec: ServeSpec,
) -> Any:
    """``jitted`` lowered with ``args`` under the mesh, traced as on the target.

    Raises:
        ArgumentError: :func:`trace_error`'s, when the model fails to trace.
    """
    with _mesh_contexts(mesh), devices_seen_as(trace_devices):
        try:
            return jitted.lower(*args)
        except ArgumentError:
            raise
        except Exception as error:
            raise trace_error(error, spec) from None


# The names of a program's arguments and outputs, for the breakdown of its peak:
# A serving program compiled with XLA's dump is read as a training step's is,
# by the same code (the step's compile_or_recall),
# with the names this module gives its arguments and outputs: its
# entry parameters are the served ``weights``, the ``KV cache`` (donated) and
# the tokens and positions (``batch``); its outputs the ``logits`` and the new
# ``KV cache`` leaves; what the forward pass makes is a ``temporary`` (activations:
# there is no backward pass to keep them for) or a collective's buffer.


def _key(entry: Any) -> str:
    for name in ("key", "name", "idx"):
        if hasattr(entry, name):
            return str(getattr(entry, name))
    return str(entry)


def _paths(tree: Any) -> list[str]:
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return ["/".join(_key(k) for k in path if _key(k) != "value") for path, _ in flat]


def serve_leaves(inputs: Inputs, name: str) -> tuple[ArgumentLeaf, ...]:
    """The program's flattened arguments as XLA numbers its entry parameters.

    ``(weights, cache, tokens, positions[, slot])``, as ``jax.jit`` flattens
    them.

    Example:
        >>> from nnx_introspect._serve.programs import Inputs
        >>> inputs = Inputs(None, {"w": 1}, {"layer_0": {"k": 2, "v": 3}},
        ...                 0, 0, 0, print)
        >>> [(a.parameter, a.path, a.kind) for a in serve_leaves(inputs, "decode")]
        [(0, 'w', 'weights'), (1, 'layer_0/k', 'KV cache'), \
(2, 'layer_0/v', 'KV cache'), (3, 'tokens', 'batch'), (4, 'positions', 'batch')]
    """
    kinds = [(path, "weights") for path in _paths(inputs.weights)]
    kinds += [(path, "KV cache") for path in _paths(inputs.cache)]
    kinds += [("tokens", "batch"), ("positions", "batch")]
    if name == "prefill":
        kinds.append(("slot", "batch"))
    return tuple(ArgumentLeaf(i, path, kind) for i, (path, kind) in enumerate(kinds))


def serve_outputs(inputs: Inputs) -> tuple[str, ...]:
    """A name per flattened output: the logits, then the new cache's leaves.

    Example:
        >>> from nnx_introspect._serve.programs import Inputs
        >>> inputs = Inputs(None, {}, {"layer_0": {"k": 2, "v": 3}}, 0, 0, 0, print)
        >>> serve_outputs(inputs)
        ('logits', 'KV cache layer_0/k', 'KV cache layer_0/v')
    """
    return ("logits", *(f"KV cache {path}" for path in _paths(inputs.cache)))

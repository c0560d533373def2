"""A serving request, checked: :class:`ServeOptions` and :class:`ServeSpec`.

Every value a serving report reads is checked here, before anything is traced,
and each bad one raises an :class:`~nnx_introspect.ArgumentError` naming the
argument, the value and the fix.
"""

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import Any

import jax.numpy as jnp
import numpy as np

from nnx_introspect._accelerators import Budget, step_budget
from nnx_introspect._counting import count_params
from nnx_introspect._mesh import as_abstract_mesh, parse_bytes
from nnx_introspect._step import as_model
from nnx_introspect._targets import TargetError, resolve_factory
from nnx_introspect._typing import ArgumentError, as_count
from nnx_introspect._xla import as_compiler_flags, check_compiler

__all__ = [
    "KV_CACHE_DTYPES",
    "TENSOR_PARALLEL_AXES",
    "WEIGHT_DTYPES",
    "ServeOptions",
    "ServeSpec",
]

KV_CACHE_DTYPES: dict[str, Any] = {
    "bfloat16": jnp.bfloat16,
    "float8_e4m3fn": jnp.float8_e4m3fn,
    "int8": jnp.int8,
    "float32": jnp.float32,
}
"""The KV cache dtypes a serving report takes, by name."""

WEIGHT_DTYPES: dict[str, Any] = {"bfloat16": jnp.bfloat16, "float32": jnp.float32}
"""The dtypes the served copy of the weights may be cast to (``None``: keep)."""

_ALIASES = {"bf16": "bfloat16", "fp8": "float8_e4m3fn", "f32": "float32"}

TENSOR_PARALLEL_AXES = ("tp", "tensor", "model")
"""Mesh axis names that split the KV heads; every other axis splits sequences."""


@contextlib.contextmanager
def blame(argument: str) -> Iterator[None]:
    """Any ``TypeError``/``ValueError`` in the block re-raised naming ``argument``."""
    try:
        yield
    except ArgumentError:
        raise
    except (TypeError, ValueError) as error:
        raise ArgumentError(argument, str(error)) from None


def _dtype_name(value: Any, name: str, table: dict[str, Any]) -> str:
    text = value if isinstance(value, str) else getattr(value, "__name__", None)
    if text is None:
        with contextlib.suppress(TypeError):
            text = np.dtype(value).name
    text = _ALIASES.get(str(text), text)
    if text not in table:
        raise ArgumentError(
            name,
            f"`{name}` must be one of {', '.join(table)}, got {value!r}. "
            f"Pass e.g. {name}={next(iter(table))!r}.",
        )
    return str(text)


def _function(value: Any, name: str) -> Callable[..., Any] | None:
    if value is None or (callable(value) and not isinstance(value, str)):
        return value
    if not isinstance(value, str):
        raise ArgumentError(
            name, f"`{name}` must be 'package.module:function', got {value!r}."
        )
    try:
        return resolve_factory(value)
    except TargetError as error:
        raise ArgumentError(
            name, f"`{name}` {value!r} cannot be imported: {error}"
        ) from None


@dataclasses.dataclass(frozen=True)
class ServeOptions:
    """How the served model is stored and called.

    Args:
        weights: The dtype of the served copy of the floating-point weights
            (``"bfloat16"``, the default, or ``"float32"``), or ``None`` to
            keep the model's own (a quantized model is its own factory).
        kv_cache: The KV cache's dtype: ``"bfloat16"``, ``"float8_e4m3fn"``,
            ``"int8"`` or ``"float32"``.
        init_cache: ``"package.module:function"`` (or the function) making the
            cache as ``fn(model, sequences, context, dtype)``; by default the
            model's own ``init_cache(sequences, context, dtype)``.
        decode: ``"package.module:function"`` (or the function) called as
            ``fn(model, tokens, positions, cache) -> (logits, cache)``; by
            default ``model(tokens, positions, cache, attention_mask)``.

    Example:
        >>> ServeOptions(kv_cache="int8").kv_cache
        'int8'
    """

    weights: Any = "bfloat16"
    kv_cache: Any = "bfloat16"
    init_cache: Any = None
    decode: Any = None

    def __post_init__(self) -> None:
        """Normalise the dtype names and import the functions named."""
        weights = None
        if self.weights is not None:
            weights = _dtype_name(self.weights, "weights", WEIGHT_DTYPES)
        object.__setattr__(self, "weights", weights)
        kv = _dtype_name(self.kv_cache, "kv_cache", KV_CACHE_DTYPES)
        object.__setattr__(self, "kv_cache", kv)
        for name in ("init_cache", "decode"):
            object.__setattr__(self, name, _function(getattr(self, name), name))


def _count(value: Any, name: str, minimum: int = 1) -> int:
    """A count of ``name`` (sequences, positions): an integer, never a float.

    ``sequences=2.0`` is refused (:func:`~nnx_introspect._typing.as_count`),
    as one line naming the argument.
    """
    with blame(name):
        return as_count(value, name, minimum=minimum)


@dataclasses.dataclass(frozen=True)
class ServeSpec:
    """A serving request, checked and normalised.

    Args:
        target: The model: an ``nnx.Module``, a factory ``(rngs) -> Module`` or
            ``"package.module:factory"``; built abstractly.
        mesh: The serving mesh (``"tp=8"``, a dict, a ``Mesh``).
        sequences: Sequences decoded at once (the cache's rows).
        context: Positions of the cache (prompt and generated tokens).
        prompt: Tokens prefilled per sequence; ``context`` by default.
        prefill_sequences: Sequences prefilled at once; ``sequences`` by default.
        topology: The target (``"h100-8"``), or ``None`` for this process's
            devices.
        max_device_bytes: A budget per device, overriding the target's.
        options: The :class:`ServeOptions`.
        compiler_flags: XLA or libtpu flags both programs are compiled with,
            as :class:`~nnx_introspect.StepSpec`'s ``compiler_flags``; kept as
            ``(name, value)`` text pairs.

    Attributes:
        model: The abstract module.
        mesh_axes: The mesh's ``(axis, size)`` pairs.
        given_prompt: ``prompt`` as given (``None``: the default, the
            context); a search keeps it as it varies the context.
        given_prefill_sequences: ``prefill_sequences`` as given (``None``:
            every sequence).
        budget: The budget of one device, as a training step's.
        parameters: The model's parameter count (``count_params``), counted
            once here.

    Example:
        >>> from nnx_introspect.examples import llama_tiny
        >>> spec = ServeSpec(llama_tiny, "tp=2", sequences=4, context=64)
        >>> spec.prompt, spec.prefill_sequences, spec.mesh_axes
        (64, 4, (('tp', 2),))
    """

    target: Any
    mesh: Any
    sequences: Any
    context: Any
    prompt: Any = None
    prefill_sequences: Any = None
    topology: str | None = None
    max_device_bytes: Any = None
    options: ServeOptions = dataclasses.field(default_factory=ServeOptions)
    compiler_flags: Any = None
    model: Any = dataclasses.field(init=False, repr=False, compare=False)
    mesh_axes: tuple[tuple[str, int], ...] = dataclasses.field(init=False)
    budget: Budget = dataclasses.field(init=False, compare=False)
    given_prompt: int | None = dataclasses.field(init=False, compare=False)
    given_prefill_sequences: int | None = dataclasses.field(init=False, compare=False)
    parameters: int = dataclasses.field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        """Every check of a serving request, in order."""
        sequences = _count(self.sequences, "sequences")
        context = _count(self.context, "context")
        prompt = context if self.prompt is None else _count(self.prompt, "prompt")
        if prompt > context:
            raise ArgumentError(
                "prompt",
                f"`prompt` {prompt} is longer than `context` {context}: the cache "
                "holds the prompt. Pass a `context` of at least the prompt's "
                "length, or a shorter `prompt`.",
            )
        admitted = self.prefill_sequences
        admitted = (
            sequences if admitted is None else _count(admitted, "prefill_sequences")
        )
        if admitted > sequences:
            raise ArgumentError(
                "prefill_sequences",
                f"`prefill_sequences` {admitted} is more than `sequences` "
                f"{sequences}. Pass at most {sequences}.",
            )
        with blame("mesh"):
            abstract = as_abstract_mesh(self.mesh)
        mesh_axes = tuple(
            (str(a), int(s))
            for a, s in zip(abstract.axis_names, abstract.axis_sizes, strict=True)
        )

        given = self.max_device_bytes
        if given is not None:
            with blame("max_device_bytes"):
                given = parse_bytes(given)
        if self.topology is not None:
            with blame("topology"):
                check_compiler(self.topology, mesh_axes)
        with blame("topology"):
            budget = step_budget(given, self.topology)
        options = self.options
        if not isinstance(options, ServeOptions):
            raise ArgumentError(
                "options", f"`options` must be a ServeOptions, got {options!r}."
            )
        model = as_model(self.target)
        flags = as_compiler_flags(self.compiler_flags)
        for name, value in (
            ("sequences", sequences),
            ("context", context),
            ("prompt", prompt),
            ("prefill_sequences", admitted),
            ("max_device_bytes", given),
            ("model", model),
            ("given_prompt", None if self.prompt is None else prompt),
            (
                "given_prefill_sequences",
                None if self.prefill_sequences is None else admitted,
            ),
            ("mesh_axes", mesh_axes),
            ("budget", budget),
            ("parameters", count_params(model)),
            ("compiler_flags", flags),
        ):
            object.__setattr__(self, name, value)

    @property
    def num_devices(self) -> int:
        """Devices in the mesh."""
        return math.prod(s for _, s in self.mesh_axes)

    @property
    def data_parallel(self) -> int:
        """The product of the mesh axes that split sequences."""
        return math.prod(s for a, s in self.mesh_axes if a not in TENSOR_PARALLEL_AXES)

    @property
    def tensor_parallel(self) -> int:
        """The product of the mesh axes that split KV heads."""
        return math.prod(s for a, s in self.mesh_axes if a in TENSOR_PARALLEL_AXES)

    def replace(self, **changes: Any) -> "ServeSpec":
        """This request with ``changes`` (``sequences=``, ``context=``...)."""
        given = {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init
        }
        return ServeSpec(**(given | changes))

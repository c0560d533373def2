"""The step options a user can change without touching the model's maths.

``remat`` (which layers are rematerialised, with which
``jax.checkpoint_policies`` policy) and ``microbatches`` (how many microbatches
one step accumulates gradients over): checked against the model and the batch
before any compile, and applied while the step is traced, on the step's own
copy of the model: the user's classes are never patched.
"""

import functools
import math
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any, TypeAlias, cast

import jax
from flax import nnx
from jax.sharding import PartitionSpec

from nnx_introspect._typing import ArgumentError, IntLike, as_int

__all__ = [
    "REMAT_POLICIES",
    "RematLike",
    "as_microbatches",
    "as_remat",
    "module_classes",
    "rematerialised",
]

RematLike: TypeAlias = str | Mapping[str, str] | tuple[tuple[str, str], ...] | None
"""A module class name, or a mapping of class names to policy names (or its
``(class name, policy name)`` pairs)."""


def _offload_dots() -> Any:
    return jax.checkpoint_policies.offload_dot_with_no_batch_dims(
        "device", "pinned_host"
    )


REMAT_POLICIES: dict[str, Callable[[], Any]] = {
    "nothing_saveable": lambda: jax.checkpoint_policies.nothing_saveable,
    "dots_with_no_batch_dims_saveable": (
        lambda: jax.checkpoint_policies.dots_with_no_batch_dims_saveable
    ),
    "dots_saveable": lambda: jax.checkpoint_policies.dots_saveable,
    "everything_saveable": lambda: jax.checkpoint_policies.everything_saveable,
    "offload_dot_with_no_batch_dims": _offload_dots,
}
"""Policy names ``remat`` takes, each a ``jax.checkpoint_policies`` policy.

``offload_dot_with_no_batch_dims`` keeps the dots with no batch dimension in
host memory (``"device"`` to ``"pinned_host"``) instead of recomputing them.
"""

_DEFAULT_POLICY = "nothing_saveable"


def module_classes(model: Any) -> tuple[str, ...]:
    """The class names of ``model``'s modules (itself included), sorted."""
    return tuple(sorted({type(m).__name__ for _, m in nnx.iter_modules(model)}))


def as_remat(remat: RematLike, model: Any) -> tuple[tuple[str, str], ...]:
    """``remat`` as sorted ``(class name, policy name)`` pairs, checked.

    Example:
        >>> from flax import nnx
        >>> from nnx_introspect.examples import two_layer
        >>> model = nnx.eval_shape(lambda: two_layer(nnx.Rngs(0)))
        >>> as_remat("Linear", model)
        (('Linear', 'nothing_saveable'),)
        >>> try:
        ...     as_remat({"Block": "dots_saveable"}, model)
        ... except ValueError as error:
        ...     print(error)  # doctest: +ELLIPSIS
        `remat` names 'Block', which is not the class of any module of the \
model; its module classes are ['Linear', 'TwoLayer']...
    """
    if remat is None or remat == ():  # () is the normalised "none"
        return ()
    if isinstance(remat, str):
        pairs = [(remat, _DEFAULT_POLICY)]
    else:
        pairs = list(remat.items()) if isinstance(remat, Mapping) else list(remat)
        if not pairs:
            raise ArgumentError(
                "remat",
                "`remat` is an empty mapping; pass a class name such as "
                "'LlamaLayer', a mapping of class names to policy names, or None.",
            )
    known = module_classes(model)
    out = {}
    for name, policy in pairs:
        if not isinstance(name, str) or not isinstance(policy, str):
            raise TypeError(
                "`remat` must map class names (str) to policy names (str), got "
                f"{name!r}: {policy!r}."
            )
        if name not in known:
            raise ArgumentError(
                "remat",
                f"`remat` names {name!r}, which is not the class of any module of "
                f"the model; its module classes are {list(known)}. Pass one of "
                "those (the layer whose activations the backward pass keeps).",
            )
        if policy not in REMAT_POLICIES:
            raise ArgumentError(
                "remat",
                f"`remat` gives {name!r} the policy {policy!r}, which is not one "
                f"of {list(REMAT_POLICIES)} (names in jax.checkpoint_policies).",
            )
        out[name] = policy
    return tuple(sorted(out.items()))


@functools.cache
def _remat_class(cls: Any, policy: str) -> type:
    """A subclass of ``cls`` whose ``__call__`` runs under ``nnx.remat``.

    Only the step's own copy of a model is given this class; ``cls`` itself is
    never changed. Positional arguments that hold no array (a flag, ``None``)
    and every keyword argument are closed over, not traced.
    """
    original = cls.__call__

    def remat_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        traced = [i for i, a in enumerate(args) if _holds_arrays(a)]

        def call(module: Any, *values: Any) -> Any:
            full = list(args)
            for i, value in zip(traced, values, strict=True):
                full[i] = value
            return original(module, *full, **kwargs)

        checkpointed = nnx.remat(call, policy=REMAT_POLICIES[policy]())
        return checkpointed(self, *(args[i] for i in traced))

    namespace = {
        "__call__": remat_call,
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
    }
    return type(cls.__name__, (cls,), namespace)


def _holds_arrays(value: Any) -> bool:
    leaves = jax.tree.leaves(value)
    return bool(leaves) and all(
        isinstance(leaf, jax.Array | jax.ShapeDtypeStruct) or hasattr(leaf, "shape")
        for leaf in leaves
    )


def _modules(model: Any) -> Iterator[Any]:
    for _, module in nnx.iter_modules(model):
        yield module


def rematerialised(model: Any, remat: tuple[tuple[str, str], ...]) -> Any:
    """A copy of ``model`` whose modules of the named classes are rematerialised.

    ``model`` itself is untouched: the copy's modules of a named class get a
    subclass (same name) whose ``__call__`` runs under ``nnx.remat`` with the
    named policy. ``model`` is returned as it is when ``remat`` is empty.
    """
    if not remat:
        return model
    policies = dict(remat)
    copy = nnx.merge(*nnx.split(model))
    for module in _modules(copy):
        cls = type(module)
        policy = policies.get(cls.__name__)
        if policy is not None:
            module.__class__ = _remat_class(cast(Hashable, cls), policy)
    return copy


def as_microbatches(
    microbatches: IntLike,
    batch: tuple[jax.ShapeDtypeStruct, ...],
    batch_specs: tuple[PartitionSpec, ...],
    mesh_axes: tuple[tuple[str, int], ...],
    loss: Any,
) -> int:
    """``microbatches`` as an int that splits every batch leaf's rows evenly.

    Microbatch ``j`` holds rows ``j, j + k, j + 2k, ...`` of the global batch:
    on every device, a slice of its own rows. So each leaf needs a leading
    dimension divisible by ``k``, and the ``B / k`` rows of a microbatch must
    still divide evenly over the mesh axes the leaf's rows are split on.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from jax.sharding import PartitionSpec as P
        >>> x = jax.ShapeDtypeStruct((32, 8), jnp.float32)
        >>> as_microbatches(4, (x,), (P("data"),), (("data", 8),), "mean")
        4
        >>> try:
        ...     as_microbatches(8, (x,), (P("data"),), (("data", 8),), "mean")
        ... except ValueError as error:
        ...     print(error)  # doctest: +ELLIPSIS
        `microbatches` 8 leaves microbatches of 4 rows of batch[0] (32 rows), \
which do not divide over its 8 devices of ('data',)...
    """
    k = as_int(microbatches, "microbatches", minimum=1)
    if k == 1:
        return k
    if loss is None:
        raise ArgumentError(
            "microbatches",
            f"`microbatches` {k} accumulates gradients, but `loss=None` compiles "
            "the forward pass only. Pass a loss, or `microbatches=1`.",
        )
    sizes = dict(mesh_axes)
    for i, (leaf, spec) in enumerate(zip(batch, batch_specs, strict=True)):
        if not leaf.shape:
            raise ArgumentError(
                "microbatches",
                f"`microbatches` {k} splits every batch leaf's leading dimension, "
                f"but batch[{i}] is a scalar. Pass `microbatches=1`.",
            )
        rows = leaf.shape[0]
        if rows % k:
            raise ArgumentError(
                "microbatches",
                f"`microbatches` {k} does not divide batch[{i}]'s {rows} rows. "
                f"Pass a divisor of {rows}.",
            )
        entry = spec[0] if len(spec) else None
        axes = (entry,) if isinstance(entry, str) else tuple(entry or ())
        split = math.prod(sizes.get(a, 1) for a in axes)  # other axes: the plan's
        if (rows // k) % split:
            raise ArgumentError(
                "microbatches",
                f"`microbatches` {k} leaves microbatches of {rows // k} rows of "
                f"batch[{i}] ({rows} rows), which do not divide over its {split} "
                f"devices of {axes}. Pass a k that leaves a multiple of {split} "
                "rows, or a larger batch.",
            )
    return k

"""LoRA fine-tuning as a step option: ``lora=``, on the step's own model copy.

A LoRA step trains low-rank adapters and leaves the backbone frozen: the
frozen weights have no gradient and no optimizer state, so a LoRA step's
memory is the backbone once, plus the adapters with their gradients and
optimizer state. ``lora`` is

* ``None``: every floating ``nnx.Param`` is trained (full fine-tuning);
* a rank ``r``: each ``nnx.Linear`` of the step's copy of the model gets
  adapters ``lora_a`` ``(in, r)`` and ``lora_b`` ``(r, out)`` (as
  ``nnx.LoRAParam``, in the kernel's dtype, sharded as the kernel's input and
  output dimensions), its output ``x @ kernel + x @ lora_a @ lora_b`` (the
  sum ``nnx.LoRA`` computes), and only those adapters are trained;
* ``"model"``: the model brings its own ``nnx.LoRAParam`` leaves (``nnx.LoRA``
  modules, qwix's ``apply_lora_to_model``); only those are trained.

Either way, every other ``nnx.Param`` of the copy becomes a
:class:`FrozenParam`: still a parameter (counted as one), not differentiated.
The user's model and classes are never touched.
"""

import functools
from collections.abc import Hashable, Iterator
from typing import Any, TypeAlias, cast

import jax
import jax.numpy as jnp
from flax import nnx

from nnx_introspect._nnx import FrozenParam, annotated_variable, variable_sharding
from nnx_introspect._typing import ArgumentError, as_int

__all__ = ["FrozenParam", "LoraLike", "as_lora", "lora_text", "with_lora"]

LoraLike: TypeAlias = int | str | None
"""A LoRA rank, ``"model"`` (the model's own ``nnx.LoRAParam`` leaves) or ``None``."""


def _linears(model: Any) -> Iterator[tuple[str, nnx.Linear]]:
    for path, module in nnx.iter_modules(model):
        if isinstance(module, nnx.Linear):
            yield "/".join(map(str, path)), module


def _has_lora_leaves(model: Any) -> bool:
    return any(isinstance(node, nnx.LoRAParam) for _, node in nnx.iter_graph(model))


def as_lora(lora: Any, model: Any) -> LoraLike:
    """``lora`` checked against ``model``: a rank, ``"model"`` or ``None``.

    Example:
        >>> from flax import nnx
        >>> from nnx_introspect.examples import two_layer
        >>> model = nnx.eval_shape(lambda: two_layer(nnx.Rngs(0)))
        >>> as_lora(2, model)
        2
        >>> try:
        ...     as_lora(16, model)
        ... except ValueError as error:
        ...     print(error)  # doctest: +ELLIPSIS
        `lora` rank 16 is wider than the nnx.Linear at 'l1' (3 x 4): a rank \
must be at most the smaller of a layer's widths. Pass `lora=3` or less.
    """
    if lora is None:
        return None
    if isinstance(lora, str):
        if lora != "model":
            raise ArgumentError(
                "lora",
                f"`lora` must be a rank (a positive integer), 'model' or None, "
                f"got {lora!r}.",
            )
        if not _has_lora_leaves(model):
            raise ArgumentError(
                "lora",
                "`lora` 'model' trains the model's own nnx.LoRAParam leaves, but "
                "the model has none. Pass a rank (`lora=16`: adapters on every "
                "nnx.Linear) or wrap its layers in nnx.LoRA first.",
            )
        return lora
    try:
        rank = as_int(lora, "lora", minimum=1)
    except TypeError as error:
        raise ArgumentError("lora", str(error)) from None
    linears = list(_linears(model))
    if not linears:
        raise ArgumentError(
            "lora",
            f"`lora` rank {rank} adapts every nnx.Linear, but the model has none. "
            "Pass `lora='model'` for a model with its own nnx.LoRAParam leaves, "
            "or `lora=None`.",
        )
    for name, linear in linears:
        n_in, n_out = linear.in_features, linear.out_features
        if rank > min(n_in, n_out):
            widest = min(min(a.in_features, a.out_features) for _, a in linears)
            raise ArgumentError(
                "lora",
                f"`lora` rank {rank} is wider than the nnx.Linear at {name!r} "
                f"({n_in} x {n_out}): a rank must be at most the smaller of a "
                f"layer's widths. Pass `lora={widest}` or less.",
            )
    return rank


def lora_text(lora: LoraLike) -> str:
    """How the options line says ``lora``.

    Example:
        >>> lora_text(16), lora_text("model"), lora_text(None)
        ('LoRA rank 16 on every nnx.Linear, the rest frozen', \
"LoRA: the model's own nnx.LoRAParam leaves trained, the rest frozen", \
'every parameter trained')
    """
    if lora is None:
        return "every parameter trained"
    if lora == "model":
        return "LoRA: the model's own nnx.LoRAParam leaves trained, the rest frozen"
    return f"LoRA rank {lora} on every nnx.Linear, the rest frozen"


@functools.cache
def _lora_class(cls: Hashable) -> type:
    """``cls`` (an ``nnx.Linear`` subclass) with the adapters' term added."""
    base = cast(type, cls)

    def call(self: Any, x: Any, *args: Any, **kwargs: Any) -> Any:
        y = base.__call__(self, x, *args, **kwargs)
        a = self.lora_a.get_value().astype(y.dtype)
        b = self.lora_b.get_value().astype(y.dtype)
        return y + (x.astype(y.dtype) @ a) @ b

    return type(base.__name__, (base,), {"__call__": call})


def _adapter(shape: tuple[int, int], dtype: Any, names: Any) -> Any:
    return annotated_variable(nnx.LoRAParam, jax.ShapeDtypeStruct(shape, dtype), names)


def _add_adapters(linear: nnx.Linear, rank: int) -> None:
    kernel = linear.kernel
    dtype = kernel.get_value().dtype
    names = variable_sharding(kernel)
    a_names = None if names is None else (names[0], None)
    b_names = None if names is None else (None, names[1])
    setattr(linear, "lora_a", _adapter((linear.in_features, rank), dtype, a_names))  # noqa: B010
    setattr(linear, "lora_b", _adapter((rank, linear.out_features), dtype, b_names))  # noqa: B010
    linear.__class__ = _lora_class(cast(Hashable, type(linear)))


def with_lora(model: Any, lora: LoraLike) -> Any:
    """A copy of abstract ``model`` set up for a LoRA step; ``model`` if ``None``.

    Example:
        >>> from flax import nnx
        >>> from nnx_introspect.examples import two_layer
        >>> model = nnx.eval_shape(lambda: two_layer(nnx.Rngs(0)))
        >>> adapted = with_lora(model, 2)
        >>> sorted(type(v).__name__ for v in jax.tree.leaves(
        ...     nnx.state(adapted.l1), is_leaf=lambda x: isinstance(x, nnx.Variable)))
        ['FrozenParam', 'FrozenParam', 'LoRAParam', 'LoRAParam']
        >>> adapted.l1.lora_a.shape, type(model.l1.kernel).__name__
        ((3, 2), 'Param')
    """
    if lora is None:
        return model
    graphdef, state = nnx.split(model)
    # new Variable objects (a merge of the split state would share them)
    copy = nnx.merge(graphdef, jax.tree.map(lambda leaf: leaf, state))
    if isinstance(lora, int):
        for _, linear in list(_linears(copy)):
            _add_adapters(linear, lora)
    frozen = [
        node
        for _, node in nnx.iter_graph(copy)
        if isinstance(node, nnx.Param)
        and not isinstance(node, nnx.LoRAParam | FrozenParam)
    ]
    for variable in frozen:
        variable.__class__ = FrozenParam
    return copy


def lora_bytes(state: Any) -> int:
    """Bytes of the ``nnx.LoRAParam`` leaves of ``state`` (a model or its state)."""
    leaves = jax.tree.leaves(nnx.state(state, nnx.LoRAParam))
    return sum(int(jnp.dtype(x.dtype).itemsize) * int(x.size) for x in leaves)

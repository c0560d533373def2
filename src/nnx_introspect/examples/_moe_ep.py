"""Expert parallelism for the examples' mixture of experts: an all-to-all dispatch.

:func:`expert_parallel` is :class:`~nnx_introspect.examples.MoeBlock`'s
``"expert_parallel"`` dispatch, as production MoE trainers shard their experts
(MaxText's ``sparse_matmul`` path, tunix's Qwen3 ``MoELayer``): inside a
``jax.shard_map`` over the mesh, each device routes its own tokens (the batch
splits over the data axes and the expert axis alike), sends each token copy to
the device that holds its expert with one ``jax.lax.all_to_all`` over the
expert axis, multiplies the copies it receives by its own experts' weights
(``jax.lax.ragged_dot`` over the copies sorted by local expert), sends the
results back with a second all-to-all and weighs them into each token.

Each device sends every device of the expert axis a buffer of a fixed number of
rows, its *capacity* (``ceil(copies / ep x capacity_factor)``, at most the
device's copies; GShard's ``all_to_all`` dispatch, MaxText's
``capacity_factor``), first choices first: a copy past it is dropped (its
token gets nothing from that expert). XLA:CPU does not compile
``jax.lax.ragged_all_to_all`` (MaxText's dropless transport), so the example
keeps a transport every backend compiles; with ``capacity_factor >= ep`` no
copy is ever dropped.
"""

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec
from jaxtyping import Array

from nnx_introspect import expert_mesh_axis

__all__ = ["ep_capacity", "expert_parallel"]


def ep_capacity(copies: int, ep: int, factor: float) -> int:
    """Rows a device sends each of the ``ep`` devices: ``ceil(copies / ep x factor)``.

    Between 1 and ``copies`` (a device never sends more copies than it has).

    Example:
        >>> ep_capacity(16384, 8, 1.25)  # 2,048 tokens x top-8 over ep=8
        2560
        >>> ep_capacity(16, 4, 8.0)  # never more than the device's copies
        16
    """
    return max(1, min(copies, math.ceil(copies / ep * factor)))


def _split(size: int, names: Sequence[str], sizes: dict[str, int]) -> tuple[str, ...]:
    """Of ``names`` in the mesh, those whose sizes' product divides ``size``."""
    used: list[str] = []
    for name in names:
        if (
            name in sizes
            and size % (math.prod(sizes[u] for u in used) * sizes[name]) == 0
        ):
            used.append(name)
    return tuple(used)


def _spec(*dims: tuple[str, ...]) -> PartitionSpec:
    return PartitionSpec(*(None if not d else d[0] if len(d) == 1 else d for d in dims))


def expert_parallel(
    x: Array,
    weights: Array,
    experts: Array,
    kernels: tuple[Array, Array, Array],
    *,
    batch_axes: Sequence[str],
    model_axes: Sequence[str],
    capacity_factor: float,
) -> Array | None:
    """The routed experts' output for ``x``, by all-to-alls over the expert axis.

    Args:
        x: The tokens, ``[b, s, d]``.
        weights: Each token's ``top_k`` experts' weights, ``[b, s, k]``.
        experts: Each token's ``top_k`` experts, ``[b, s, k]``.
        kernels: The stacked ``(gate, up, down)``: ``[E, d, f]``, ``[E, d, f]``,
            ``[E, f, d]``, in ``x``'s dtype.
        batch_axes: The mesh axes the tokens' batch may split over.
        model_axes: The mesh axes the experts' hidden units may split over.
        capacity_factor: The capacity's slack over an even split.

    Returns:
        ``[b, s, d]``, or ``None`` when the current mesh has no expert axis
        (:func:`~nnx_introspect.expert_mesh_axis`) of more than one device
        or it does not divide the experts: the caller dispatches locally.

    Example:
        >>> x = jnp.ones((2, 3, 4))
        >>> w, e = jnp.ones((2, 3, 1)), jnp.zeros((2, 3, 1), jnp.int32)
        >>> kernels = (jnp.ones((2, 4, 5)), jnp.ones((2, 4, 5)), jnp.ones((2, 5, 4)))
        >>> expert_parallel(x, w, e, kernels, batch_axes=("fsdp",),
        ...                 model_axes=("tp",), capacity_factor=1.0) is None  # no mesh
        True
    """
    mesh = jax.sharding.get_abstract_mesh()
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes, strict=True))
    axis = expert_mesh_axis(tuple(sizes))
    n_experts, _, d_ff = kernels[0].shape
    if axis is None or sizes[axis] == 1 or n_experts % sizes[axis]:
        return None
    batch = _split(x.shape[0], list(dict.fromkeys([*batch_axes, axis])), sizes)
    tp = tuple(a for a in _split(d_ff, model_axes, sizes) if a != axis)
    tokens = _spec(batch, (), ())
    column, row = _spec((axis,), (), tp), _spec((axis,), tp, ())
    ep = sizes[axis]
    copies = (
        math.prod(x.shape[:2]) // math.prod(sizes[a] for a in batch) * experts.shape[-1]
    )
    capacity = ep_capacity(copies, ep, capacity_factor)

    def body(
        x: Array, w: Array, e: Array, gate: Array, up: Array, down: Array
    ) -> Array:
        return _local(
            x, w, e, (gate, up, down), axis=axis, ep=ep, tp=tp, capacity=capacity
        )

    routed: Any = jax.shard_map(
        body,
        mesh=mesh,
        in_specs=(tokens, tokens, tokens, column, column, row),
        out_specs=tokens,
        check_vma=False,
    )
    y: Array = routed(x, weights.astype(x.dtype), experts, *kernels)
    return y


def _local(
    x: Array,
    w: Array,
    e: Array,
    kernels: tuple[Array, Array, Array],
    *,
    axis: str,
    ep: int,
    tp: tuple[str, ...],
    capacity: int,
) -> Array:
    """One device's tokens through their experts, wherever those are."""
    b, s, d = x.shape
    t, k = b * s, e.shape[-1]
    gate, up, down = kernels
    local = gate.shape[0]  # the experts this device holds
    # token copies, first choices first: copy q is token q % t's choice q // t
    chosen = e.reshape(t, k).T.reshape(-1)
    to = jax.nn.one_hot(chosen // local, ep, dtype=jnp.int32)  # [t k, ep]
    slot = ((jnp.cumsum(to, axis=0) - 1) * to).sum(-1)
    dest = jnp.where(slot < capacity, chosen // local * capacity + slot, ep * capacity)
    source = (
        jnp.full((ep * capacity,), t, jnp.int32)
        .at[dest]
        .set(jnp.arange(t * k, dtype=jnp.int32) % t, mode="drop")
    )
    ids = jnp.full((ep * capacity,), -1, jnp.int32).at[dest].set(chosen, mode="drop")
    send = jnp.take(x.reshape(t, d), source, axis=0, mode="fill", fill_value=0)
    # dispatch: each device's rows for device j reach device j
    rows = jax.lax.all_to_all(send.reshape(ep, capacity, d), axis, 0, 0)
    held = jax.lax.all_to_all(ids.reshape(ep, capacity), axis, 0, 0).reshape(-1)
    mine = held - jax.lax.axis_index(axis) * local
    key = jnp.where(held >= 0, mine, local)  # empty slots sort last
    order = jnp.argsort(key, stable=True)
    group = jnp.bincount(key, length=local + 1)[:local].astype(jnp.int32)
    sorted_rows = rows.reshape(ep * capacity, d)[order]
    hidden = jax.nn.silu(jax.lax.ragged_dot(sorted_rows, gate, group))
    hidden = hidden * jax.lax.ragged_dot(sorted_rows, up, group)
    out = jax.lax.ragged_dot(hidden, down, group)
    if tp:
        out = jax.lax.psum(out, tp)
    out = jnp.where((key[order] < local)[:, None], out, 0)[jnp.argsort(order)]
    # combine: the results go back to the devices that sent the copies
    back = jax.lax.all_to_all(out.reshape(ep, capacity, d), axis, 0, 0)
    got = jnp.take(
        back.reshape(ep * capacity, d), dest, axis=0, mode="fill", fill_value=0
    )
    y = jnp.einsum("ktd,tk->td", got.reshape(k, t, d), w.reshape(t, k))
    return y.reshape(b, s, d)

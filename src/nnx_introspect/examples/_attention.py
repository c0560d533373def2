"""The examples' causal self-attention: rotary angles, grouped-query heads, a KV cache.

:class:`SelfAttention` is the attention half of both example decoder layers,
the dense :class:`~nnx_introspect.examples.LlamaLayer` and the mixture of
experts' :class:`~nnx_introspect.examples.MoeLayer` (``_llama.py``,
``_moe.py``), which derive from it: its ``attn_norm``, ``q``, ``k``, ``v`` and
``o`` are attributes of the layer itself. Here too are the pieces it is made
of (rotary angles, KV-cache writes, the decode step's einsums) and the
activation constraints the layers share.
"""

import math
from typing import Any, ClassVar, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import AxisType, PartitionSpec
from jaxtyping import Array, Float, Int

from nnx_introspect import ArgumentError

__all__ = [
    "BATCH_AXES",
    "MODEL_AXES",
    "Dims",
    "SelfAttention",
    "constrain",
    "decode_attention",
    "rope",
    "write_kv",
]

Dims = tuple[tuple[str, ...], ...]
"""One tuple of mesh axis names per dimension of an activation, as
:func:`constrain` takes them."""

BATCH_AXES = ("data", "fsdp")
"""The mesh axes an activation's batch dimension is split over, outermost first
(MaxText's ``activation_batch`` order); an axis the mesh lacks is left out."""

MODEL_AXES = ("tp",)
"""The mesh axes the heads, the MLP's hidden units and the vocabulary are split over
(the ``"tp"`` of the kernels' annotations)."""

_RESIDUAL = (BATCH_AXES, MODEL_AXES, ())
"""``(batch, seq, d_model)``: the batch split, and the sequence over ``tp``.

Megatron's sequence parallelism (Korthikanti et al. 2022): between the blocks
the ``tp`` devices hold a slice of the tokens each instead of a copy of all of
them, for the same traffic (the row-parallel output's all-reduce becomes a
reduce-scatter, the next block's input an all-gather). Trainers split the
residual over ``tp`` too (tunix's ``act_btd`` splits its width, MaxText's
``activation_embed``) rather than replicate it. Of the three, the sequence split
needs the fewest temporaries in XLA:GPU's compile of the 7B's training step
(``benchmarks/speed/bench_activations.py``)."""

_HEADS = (BATCH_AXES, (), MODEL_AXES, ())
"""``(batch, seq, heads, head_dim)``: column-parallel q, k, v and attention's output."""


def constrain(x: Array, *dims: tuple[str, ...]) -> Array:
    """``x`` with dimension ``i`` split over the mesh axes named in ``dims[i]``.

    A ``jax.lax.with_sharding_constraint`` on the current mesh (the one
    ``jax.set_mesh`` sets, read with ``jax.sharding.get_abstract_mesh()``, also
    inside ``jax.jit``), as trainers constrain activations. Of each dimension's
    names, only those of the mesh's Auto axes are used, outermost first, while
    their sizes' product divides the dimension; a dimension with none is
    replicated. With no such axis at all (no mesh, only Explicit or Manual axes,
    or other names) ``x`` is returned as is, so a model runs unsharded eagerly.
    The legacy ``with mesh:`` alone sets no abstract mesh and so constrains
    nothing.

    Args:
        x: The activation.
        *dims: One tuple of mesh axis names per dimension of ``x``, ``()`` to
            replicate that dimension.

    Returns:
        ``x``, constrained when the mesh has any of the named axes.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> x = jnp.ones((8, 4))
        >>> constrain(x, ("data", "fsdp"), ()) is x  # no mesh: unchanged
        True
        >>> mesh = jax.make_mesh((2, 4), ("fsdp", "tp"),
        ...                      axis_types=(jax.sharding.AxisType.Auto,) * 2)
        >>> with jax.set_mesh(mesh):
        ...     y = jax.jit(lambda x: constrain(x, ("data", "fsdp"), ("tp",)))(x)
        >>> tuple(y.sharding.spec)
        ('fsdp', 'tp')
    """
    if len(dims) != x.ndim:
        raise ArgumentError(
            "dims",
            f"`dims` must name the axes of each of the {x.ndim} dimensions of `x` "
            f"{tuple(x.shape)}, got {len(dims)}: {dims!r}.",
        )
    mesh = jax.sharding.get_abstract_mesh()
    auto = {
        name: size
        for name, size, kind in zip(
            mesh.axis_names, mesh.axis_sizes, mesh.axis_types, strict=True
        )
        if kind == AxisType.Auto
    }
    if not any(name in auto for names in dims for name in names):
        return x
    entries: list[str | tuple[str, ...] | None] = []
    for size, names in zip(x.shape, dims, strict=True):
        used: list[str] = []
        for name in names:
            if (
                name in auto
                and size % (math.prod(auto[u] for u in used) * auto[name]) == 0
            ):
                used.append(name)
        entries.append(None if not used else used[0] if len(used) == 1 else tuple(used))
    y: Array = jax.lax.with_sharding_constraint(x, PartitionSpec(*entries))
    return y


def rope(
    x: Float[Array, "b s h d"], positions: Int[Array, "b s"] | None = None
) -> Float[Array, "b s h d"]:
    """``x`` (``[b, s, heads, head_dim]``) turned by its rotary angles (Su et al. 2021).

    Each position's angle is the token's index in the sequence, or its entry of
    ``positions`` (each sequence's own, as decoding with a KV cache passes
    them); the halves of ``head_dim`` are the pairs turned, float32 angles.

    Example:
        >>> import jax.numpy as jnp
        >>> x = jnp.ones((1, 3, 2, 4))
        >>> bool(jnp.allclose(rope(x)[:, 0], x[:, 0]))  # position 0: no turn
        True
        >>> bool(jnp.allclose(rope(x, jnp.array([[5, 6, 7]])), rope(x)))
        False
    """
    half = x.shape[-1] // 2
    freq = 10000.0 ** (-jnp.arange(half, dtype=jnp.float32) / half)
    if positions is None:
        pos = jnp.arange(x.shape[1], dtype=jnp.float32)[:, None]
        angle = (pos * freq)[None, :, None, :]
    else:  # each sequence's own positions (decoding with a KV cache)
        angle = (positions.astype(jnp.float32)[..., None] * freq)[:, :, None, :]
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    x1, x2 = x[..., :half], x[..., half:]
    y = jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
    # float32 angles promote a bfloat16 input: back to the compute dtype
    return y if y.dtype == x.dtype else y.astype(x.dtype)


def write_kv(cache: Array, new: Array, index: Array) -> Array:
    """``cache`` with ``new`` (``[b, s, ...]``) at the slots ``index .. index+s-1``.

    One ``dynamic_update_slice`` for every sequence at once: XLA updates the
    donated cache in place, in the layout it chose for it. (A write at each
    sequence's own position is a scatter, for which XLA:TPU copies the whole
    cache into a row-major layout and back, per layer, or, vmapped, a loop
    over the sequences: 3.5x and 4.5x slower per decoded token on a v5e
    chip, ``benchmarks/README.md``.)
    """
    zero = jnp.zeros((), jnp.int32)
    start = (zero, jnp.asarray(index, jnp.int32), *([zero] * (cache.ndim - 2)))
    out: Array = jax.lax.dynamic_update_slice(cache, new.astype(cache.dtype), start)
    return out


_LOWEST = float(np.finfo(np.float32).min)
"""A masked score: float32's lowest, as ``dot_product_attention`` masks."""


def decode_attention(q: Array, k: Array, v: Array, mask: Array) -> Array:
    """A decode step's attention over the cache's keys and values under ``mask``.

    Grouped-query attention written as two einsums over the cache's own layout
    (``[b, context, kv_heads, head_dim]``), the output's small transpose last:
    ``jax.nn.dot_product_attention`` on a cache of one KV head per device made
    XLA:GPU copy the whole cache into another layout per layer (Llama-3-8B's
    decode on 8 H100s, ``tp=8``: 5.3x the bytes of its weights and cache;
    these einsums: 1.3x). Scores and softmax in float32, as
    ``dot_product_attention`` computes them. A prompt's attention stays
    ``dot_product_attention``: for 8 prompts of 512 tokens into a 4,096-slot
    cache these einsums took 213 ms on a v5e chip, it 95 ms.
    """
    b, s, heads, hd = q.shape
    kv = k.shape[2]
    q5 = q.reshape(b, s, kv, heads // kv, hd)
    f32 = jnp.float32
    scores = jnp.einsum(
        "bskgd,bckd->bkgsc", q5, k, preferred_element_type=f32
    ) / math.sqrt(hd)
    scores = jnp.where(mask[:, None, None], scores, _LOWEST)
    probs = jax.nn.softmax(scores, axis=-1).astype(q.dtype)
    out = jnp.einsum("bkgsc,bckd->bkgsd", probs, v, preferred_element_type=f32)
    return out.transpose(0, 3, 1, 2, 4).reshape(b, s, heads, hd).astype(q.dtype)


class _Sizes(Protocol):
    """The fields of a model config :class:`SelfAttention` reads."""

    @property
    def d_model(self) -> int: ...
    @property
    def n_heads(self) -> int: ...
    @property
    def kv_heads(self) -> int: ...
    @property
    def dtype(self) -> Any: ...
    @property
    def param_dtype(self) -> Any: ...
    @property
    def partitioned(self) -> bool: ...
    @property
    def shard_activations(self) -> bool: ...


class SelfAttention(nnx.Module):
    """Pre-norm causal self-attention: the first half of an example decoder layer.

    Holds ``attn_norm`` (an RMSNorm), the bias-free ``q`` (``d_model x n_heads
    * head_dim``), ``k`` and ``v`` (``d_model x kv_heads * head_dim``) and ``o``
    (``q``'s transpose), made in that order; with ``partitioned`` their
    kernels are annotated ``("fsdp", "tp")`` (``o``: ``("tp", "fsdp")``). A
    decoder layer derives from it and builds its MLP after calling this
    ``__init__``, so these are the layer's own attributes (its state paths
    ``attn_norm``, ``q``, ...). :attr:`heads_dims` and :attr:`residual_dims`
    say how its activations are constrained; a layer whose batch splits over
    more axes overrides them.

    Args:
        cfg: The sizes: a :class:`~nnx_introspect.examples.LlamaConfig` or
            :class:`~nnx_introspect.examples.MoeConfig`.
        head_dim: The width of a head.
        rngs: The RNG streams.

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from nnx_introspect.examples import LlamaConfig
        >>> cfg = LlamaConfig(vocab=11, d_model=8, n_layers=1, n_heads=2, d_ff=12,
        ...                   n_kv_heads=1)
        >>> attention = SelfAttention(cfg, 4, rngs=nnx.Rngs(0))
        >>> attention.k.kernel.shape
        (8, 4)
        >>> x, cache = attention.attend(jnp.ones((2, 5, 8)))
        >>> x.shape, cache
        ((2, 5, 8), None)
    """

    heads_dims: ClassVar[Dims] = _HEADS
    """How ``(batch, seq, heads, head_dim)`` (q, k, v, the output) are split."""

    residual_dims: ClassVar[Dims] = _RESIDUAL
    """How the residual stream ``(batch, seq, d_model)`` is split."""

    def __init__(self, cfg: _Sizes, head_dim: int, *, rngs: nnx.Rngs) -> None:
        d, heads, kv = cfg.d_model, cfg.n_heads, cfg.kv_heads
        dt = {"dtype": cfg.dtype, "param_dtype": cfg.param_dtype}

        def linear(i: int, o: int, names: tuple[str, str]) -> nnx.Linear:
            meta = {"out_sharding": names} if cfg.partitioned else {}
            return nnx.Linear(
                i, o, use_bias=False, rngs=rngs, kernel_metadata=meta, **dt
            )

        self.n_heads = heads
        self.n_kv_heads = kv
        self.head_dim = head_dim
        self.shard_activations = cfg.shard_activations
        self.attn_norm = nnx.RMSNorm(d, rngs=rngs, **dt)
        self.q = linear(d, heads * head_dim, ("fsdp", "tp"))
        self.k = linear(d, kv * head_dim, ("fsdp", "tp"))
        self.v = linear(d, kv * head_dim, ("fsdp", "tp"))
        self.o = linear(heads * head_dim, d, ("tp", "fsdp"))

    def attend(
        self,
        x: Float[Array, "b s d"],
        positions: Int[Array, "b s"] | None = None,
        cache: dict[str, Array] | None = None,
        mask: Any = None,
        index: Any = None,
        own: bool = False,
    ) -> tuple[Array, dict[str, Array] | None]:
        """``x`` plus causal self-attention's output, rotary positions; and the cache.

        With ``shard_activations``: q, k, v and attention's output split by
        head over ``tp`` (:attr:`heads_dims`), as the column-parallel kernels
        produce them, and the residual stream after the block by batch and,
        over ``tp``, by sequence (:attr:`residual_dims`).

        With a ``cache`` (``{"k", "v"}``, ``[b, context, n_kv_heads,
        head_dim]``), this call's keys and values are written into it at the
        slots ``index .. index + s - 1`` of every sequence (one
        ``dynamic_update_slice``, in place), attention reads the whole cache
        under ``mask`` (``[b, s, context]``), and the cache written is
        returned (``None`` without one). With ``own``, attention reads only
        this call's keys and values, as the cache holds them, under
        ``mask``'s columns ``index .. index + s - 1``: the same result
        whenever ``mask`` reads no other slot (a prompt prefilled into an
        empty cache), for ``s x s`` scores instead of ``s x context``.
        """
        b, s, _ = x.shape
        hd, heads = self.head_dim, self.heads_dims
        h = self.attn_norm(x)
        q = self._shard(self.q(h).reshape(b, s, self.n_heads, hd), heads)
        k = self._shard(self.k(h).reshape(b, s, self.n_kv_heads, hd), heads)
        v = self._shard(self.v(h).reshape(b, s, self.n_kv_heads, hd), heads)
        q, k = rope(q, positions), rope(k, positions)
        if cache is None:
            causal = jnp.tril(jnp.ones((s, s), dtype=bool))[None, None]
            att = jax.nn.dot_product_attention(q, k, v, mask=causal)
        else:
            cache = {
                name: self._shard(write_kv(cache[name], new, index), heads)
                for name, new in (("k", k), ("v", v))
            }
            if own:  # this call's keys and values only, as the cache holds them
                k, v = (
                    new.astype(cache[name].dtype).astype(q.dtype)
                    for name, new in (("k", k), ("v", v))
                )
                mine = jax.lax.dynamic_slice_in_dim(mask, index, s, axis=2)
                att = jax.nn.dot_product_attention(q, k, v, mask=mine[:, None])
            else:
                k, v = cache["k"].astype(q.dtype), cache["v"].astype(q.dtype)
                if s == 1:  # a decode step
                    att = decode_attention(q, k, v, mask)
                else:  # a prompt: measured faster on a v5e chip (213 ms vs 95 ms)
                    att = jax.nn.dot_product_attention(q, k, v, mask=mask[:, None])
        att = self._shard(att, heads)
        flat = att.reshape(b, s, self.n_heads * hd)
        return self._shard(x + self.o(flat), self.residual_dims), cache

    def _shard(self, x: Array, dims: Dims) -> Array:
        return constrain(x, *dims) if self.shard_activations else x

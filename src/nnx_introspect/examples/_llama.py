"""The Llama-style decoder of the examples: config, layers, KV-cache decoding.

:mod:`nnx_introspect.examples` re-exports every public name here and holds the
factories (``llama_tiny``, ``llama_7b``, ...).
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, Float, Int

from nnx_introspect import ArgumentError
from nnx_introspect.examples._attention import (
    _RESIDUAL,
    BATCH_AXES,
    MODEL_AXES,
    SelfAttention,
    constrain,
)

__all__ = [
    "LLAMA3_8B",
    "LLAMA_7B",
    "LLAMA_7B_F32",
    "LLAMA_TINY",
    "KVCache",
    "Llama",
    "LlamaConfig",
    "LlamaLayer",
    "llama",
    "llama_critic",
]

KVCache = dict[str, Any]
"""A :class:`Llama`'s KV cache: ``{"index": ..., "layer_<i>": {"k": ..., "v": ...}}``:
each ``k`` and ``v`` ``[sequences, context, n_kv_heads, head_dim]``, and
``index`` (``int32[]``) the next slot a call writes, shared by the sequences
(as tunix's ``end_index`` and MaxText's autoregressive index are)."""


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """The sizes of a :class:`Llama` decoder.

    Args:
        vocab: Vocabulary size.
        d_model: Residual width.
        n_layers: Number of decoder layers.
        n_heads: Attention heads (``d_model`` must be divisible by it).
        d_ff: Hidden width of the gated MLP.
        param_dtype: Parameter dtype.
        partitioned: Annotate kernels with sharding names (``"fsdp"``, ``"tp"``),
            as model zoos do, so mesh planning has specs to work with.
        shard_activations: Constrain the activations as production trainers
            do: the batch over ``data`` and ``fsdp``; the heads, the MLP's
            hidden units and the vocabulary over ``tp``; the residual stream's
            sequence over ``tp`` (sequence parallelism). Only under a mesh with
            those axes; with no mesh the forward is the unconstrained one.
        remat: Rematerialise each decoder layer for the backward pass
            (``nnx.remat``): the backward keeps only each layer's input and
            recomputes the rest, trading FLOPs for memory. The forward's
            values are the same.
        dtype: The computation dtype, as mixed-precision trainers use it:
            every ``Linear``, ``Embed`` and ``RMSNorm`` casts its parameters
            to it and computes in it (their ``dtype=``), so the activations,
            the residual stream and the returned logits are in it, while the
            parameters, their gradients and the optimizer state stay in
            ``param_dtype``. As trainers do, the RMSNorm statistics (flax
            computes them in at least float32), the attention softmax
            (``jax.nn.dot_product_attention`` computes it in float32) and the
            rotary angles are float32. ``None`` (the default) computes in the
            parameters' dtype, as the model did before it had this field. The
            ``lm`` loss casts the logits to float32 before the cross-entropy.
        n_kv_heads: Key and value heads (grouped-query attention, Ainslie et
            al. 2023): each serves ``n_heads // n_kv_heads`` query heads, and
            the k and v kernels are ``d_model x n_kv_heads * head_dim``.
            ``None`` (the default) is ``n_heads``: multi-head attention, the
            parameters of a model built before this field existed.
        value_head: A critic's head: one output a token (``[b, s, 1]``: a
            value, as PPO's critic gives), not ``vocab`` logits; its kernel
            ``d_model x 1`` is sharded over ``fsdp`` only.

    Example:
        >>> from nnx_introspect import abstract_model, count_params
        >>> cfg = LlamaConfig(vocab=100, d_model=8, n_layers=2, n_heads=2, d_ff=16)
        >>> # embed + lm_head + 2 layers x (2 norms + q,k,v,o + gate,up,down) + norm
        >>> count_params(abstract_model(llama(cfg)))
        2920

        bfloat16 compute, float32 storage:

        >>> import dataclasses, jax.numpy as jnp
        >>> from flax import nnx
        >>> mixed = dataclasses.replace(cfg, dtype=jnp.bfloat16)
        >>> model = Llama(mixed, rngs=nnx.Rngs(0))
        >>> model(jnp.zeros((1, 5), jnp.int32)).dtype
        dtype(bfloat16)
        >>> {leaf.dtype for leaf in jax.tree.leaves(nnx.state(model, nnx.Param))}
        {dtype('float32')}
    """

    vocab: int
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int
    param_dtype: Any = jnp.float32
    partitioned: bool = False
    shard_activations: bool = False
    remat: bool = False
    dtype: Any = None
    n_kv_heads: int | None = None
    value_head: bool = False

    def __post_init__(self) -> None:
        kv = self.kv_heads
        if kv < 1 or self.n_heads % kv or self.d_model % self.n_heads:
            raise ArgumentError(
                "n_kv_heads",
                f"`n_kv_heads` {self.n_kv_heads!r} must divide `n_heads` "
                f"{self.n_heads}, which must divide `d_model` {self.d_model}. "
                "Pass a divisor of `n_heads` (or None for `n_heads`).",
            )

    @property
    def kv_heads(self) -> int:
        """The key and value heads: ``n_kv_heads``, or ``n_heads`` if ``None``."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads


LLAMA_TINY = LlamaConfig(vocab=8000, d_model=256, n_layers=8, n_heads=4, d_ff=688)
"""About 10.4M parameters: small enough to build concretely in a test."""

LLAMA_7B = LlamaConfig(
    vocab=32000,
    d_model=4096,
    n_layers=32,
    n_heads=32,
    d_ff=11008,
    dtype=jnp.bfloat16,
)
"""The Llama-2-7B shapes: 6,738,415,616 float32 parameters in 291 leaves,
computing in bfloat16 as 7B models are trained."""

LLAMA_7B_F32 = dataclasses.replace(LLAMA_7B, dtype=None)
""":data:`LLAMA_7B` computing in float32: the same parameters."""

LLAMA3_8B = LlamaConfig(
    vocab=128256,
    d_model=4096,
    n_layers=32,
    n_heads=32,
    d_ff=14336,
    dtype=jnp.bfloat16,
    n_kv_heads=8,
)
"""The Llama-3-8B shapes: 8,030,261,248 float32 parameters, 8 KV heads
(grouped-query attention), a 128,256-token vocabulary; bfloat16 compute."""


def _meta(cfg: LlamaConfig, names: tuple[str | None, ...]) -> dict[str, Any]:
    return {"out_sharding": names} if cfg.partitioned else {}


_HIDDEN = (BATCH_AXES, (), MODEL_AXES)
"""``(batch, seq, d_ff or vocab)``: the MLP's hidden units and the logits."""


class LlamaLayer(SelfAttention):
    """One pre-norm decoder layer: RMSNorm, attention, RMSNorm, gated MLP.

    The attention is the ``SelfAttention`` it derives from (``_attention.py``,
    shared with :class:`~nnx_introspect.examples.MoeLayer`): its
    ``attn_norm``, ``q``, ``k``, ``v`` and ``o``, heads ``d_model // n_heads``
    wide. The MLP is ``mlp_norm``, ``gate``, ``up`` and ``down``.
    """

    def __init__(self, cfg: LlamaConfig, *, rngs: nnx.Rngs) -> None:
        super().__init__(cfg, cfg.d_model // cfg.n_heads, rngs=rngs)
        d, f = cfg.d_model, cfg.d_ff
        dt = {"dtype": cfg.dtype, "param_dtype": cfg.param_dtype}
        col, row = _meta(cfg, ("fsdp", "tp")), _meta(cfg, ("tp", "fsdp"))

        def linear(i: int, o: int, meta: dict[str, Any]) -> nnx.Linear:
            return nnx.Linear(
                i, o, use_bias=False, rngs=rngs, kernel_metadata=meta, **dt
            )

        self.mlp_norm = nnx.RMSNorm(d, rngs=rngs, **dt)
        self.gate = linear(d, f, col)
        self.up = linear(d, f, col)
        self.down = linear(f, d, row)

    def __call__(
        self,
        x: Float[Array, "b s d"],
        positions: Int[Array, "b s"] | None = None,
        cache: dict[str, Array] | None = None,
        mask: Any = None,
        index: Any = None,
        own: bool = False,
    ) -> Any:
        """Causal self-attention with rotary positions, then the SiLU-gated MLP.

        The attention, its sharding and its KV cache (``cache``, ``mask``,
        ``index``, ``own``) are ``SelfAttention.attend``'s; with a
        ``cache``, ``(x, cache)`` is returned. With ``shard_activations``, the
        MLP's gate, up and their product are split by hidden unit over ``tp``
        (as the column-parallel kernels produce them), the residual stream
        after the MLP as after attention.
        """
        x, cache = self.attend(x, positions, cache, mask, index, own)
        h = self.mlp_norm(x)
        gate = self._shard(self.gate(h), _HIDDEN)
        up = self._shard(self.up(h), _HIDDEN)
        hidden = self._shard(jax.nn.silu(gate) * up, _HIDDEN)
        out = self._shard(x + self.down(hidden), _RESIDUAL)
        return out if cache is None else (out, cache)


class Llama(nnx.Module):
    """A Llama-style decoder: embedding, ``n_layers`` x :class:`LlamaLayer`, norm, head.

    Every linear layer is bias-free and every RMSNorm holds only a scale, so the
    state has ``1 + 9 * n_layers + 2`` leaves and
    ``2 * vocab * d + n_layers * (2 d^2 + 2 d k + 3 d f + 2 d) + d`` parameters,
    ``k = n_kv_heads * d / n_heads`` (``d`` without grouped-query attention).

    Args:
        cfg: The sizes.
        rngs: The RNG streams.

    Example:
        >>> from flax import nnx
        >>> cfg = LlamaConfig(vocab=11, d_model=8, n_layers=2, n_heads=2, d_ff=12)
        >>> model = Llama(cfg, rngs=nnx.Rngs(0))
        >>> model(jnp.zeros((1, 5), jnp.int32)).shape
        (1, 5, 11)
    """

    def __init__(self, cfg: LlamaConfig, *, rngs: nnx.Rngs) -> None:
        self.embed = nnx.Embed(
            cfg.vocab,
            cfg.d_model,
            dtype=cfg.dtype,
            param_dtype=cfg.param_dtype,
            rngs=rngs,
            embedding_metadata=_meta(cfg, ("tp", "fsdp")),
        )
        self.layers = nnx.List(
            [LlamaLayer(cfg, rngs=rngs) for _ in range(cfg.n_layers)]
        )
        self.norm = nnx.RMSNorm(
            cfg.d_model, dtype=cfg.dtype, param_dtype=cfg.param_dtype, rngs=rngs
        )
        self.lm_head = nnx.Linear(
            cfg.d_model,
            1 if cfg.value_head else cfg.vocab,
            use_bias=False,
            dtype=cfg.dtype,
            param_dtype=cfg.param_dtype,
            rngs=rngs,
            kernel_metadata=_meta(cfg, ("fsdp", None if cfg.value_head else "tp")),
        )
        self.shard_activations = cfg.shard_activations
        self.value_head = cfg.value_head
        self.remat = cfg.remat
        self.n_kv_heads = cfg.kv_heads
        self.head_dim = cfg.d_model // cfg.n_heads

    def __call__(
        self,
        tokens: Int[Array, "b s"],
        positions: Int[Array, "b s"] | None = None,
        cache: KVCache | None = None,
        attention_mask: Any = None,
        *,
        prefill: bool = False,
    ) -> Any:
        """Next-token logits for ``tokens``; with a ``cache``, ``(logits, cache)``.

        With ``shard_activations``, the embedded tokens are constrained like
        the residual stream and the logits by batch and vocabulary.

        The KV-cache path follows the tunix and flax-gemma convention
        ``model(tokens, positions, cache, attention_mask) -> (logits, cache)``:
        the ``s`` tokens' keys and values are written at the cache's slots
        ``cache["index"] .. cache["index"] + s - 1`` of every sequence (made
        by :meth:`init_cache`; the returned cache's index is ``s`` further),
        as tunix's sampler writes at its shared ``end_index``: one in-place
        ``dynamic_update_slice`` a layer, where a write at each sequence's own
        position would be a scatter (on XLA:TPU a copy of the whole cache into
        another layout and back, per layer) or a loop over the sequences.
        ``positions`` (``[b, s]``, default the slots) are each token's rotary
        angle, so left-padded sequences keep their own; ``attention_mask``
        (``[b, s, context]``, booleans) says which slots each token reads, by
        default those at or before its own slot.

        ``prefill=True`` (with a cache) is a serving engine's prefill: the
        same cache is returned (each layer's keys and values written by one
        ``dynamic_update_slice``, the index ``s`` further), and the same
        logits for the last token (``[b, 1, vocab]``, the ones a server
        samples from), whenever ``attention_mask`` lets the ``s`` tokens read
        no slot but the ``s`` they write, as when prompts are prefilled into
        an empty cache (``cache["index"]`` 0, under the default mask or the
        serving programs' mask of positions ``0 .. s - 1``); but attention
        scores each token against the ``s`` new keys only (``s x s``, not
        ``s x context``), and the head runs on the last token alone. The
        serving programs prefill so (``serve_memory_report``'s ``prefill``).
        On a v5e chip one 1,024-token prompt into an 8,192-slot cache took
        201 ms without it (16 layers of 32 heads, a 128,256-word vocabulary),
        about 195 us a prompt token: the whole cache scored in float32.

        Example:
            >>> from flax import nnx
            >>> cfg = LlamaConfig(vocab=11, d_model=8, n_layers=2, n_heads=2, d_ff=12)
            >>> model = Llama(cfg, rngs=nnx.Rngs(0))
            >>> tokens = jnp.arange(10).reshape(2, 5)
            >>> empty = model.init_cache(2, 16, jnp.float32)
            >>> last, cache = model(tokens, None, empty, prefill=True)
            >>> full, _ = model(tokens, None, empty)
            >>> last.shape, int(cache["index"])
            ((2, 1, 11), 5)
            >>> bool(jnp.allclose(last, full[:, -1:], atol=1e-5))
            True
        """
        if prefill and cache is None:
            raise ArgumentError(
                "prefill",
                "`prefill=True` prefills a KV cache: pass `cache` "
                "(`model.init_cache(sequences, context, dtype)`).",
            )
        x = self.embed(tokens)
        if self.shard_activations:
            x = constrain(x, self.activation_batch_axes(), *_RESIDUAL[1:])
        if cache is not None:
            x, cache = self._decode(
                x, tokens, positions, cache, attention_mask, own=prefill
            )
            x = x[:, -1:] if prefill else x
        else:
            for layer in self.layers:
                if self.remat:
                    x = nnx.remat(_call_layer)(layer, x)
                else:
                    x = layer(x) if positions is None else layer(x, positions)
        y: jax.Array = self.lm_head(self.norm(x))
        if self.shard_activations:  # one value a token is not split over tp
            y = constrain(y, *self._head_dims())
        return y if cache is None else (y, cache)

    def _head_dims(self) -> tuple[tuple[str, ...], ...]:
        """The logits' ``(batch, seq, vocab)`` axes; a critic's value is whole."""
        vocab = () if self.value_head else MODEL_AXES
        return (self.activation_batch_axes(), (), vocab)

    def activation_batch_axes(self) -> tuple[str, ...]:
        """The mesh axes the embedded tokens' and the logits' batch split over.

        :data:`BATCH_AXES` (``data``, ``fsdp``); a model whose batch splits
        over more axes (an expert axis) overrides it.

        Example:
            >>> from flax import nnx
            >>> cfg = LlamaConfig(vocab=11, d_model=8, n_layers=1, n_heads=2, d_ff=12)
            >>> Llama(cfg, rngs=nnx.Rngs(0)).activation_batch_axes()
            ('data', 'fsdp')
        """
        return BATCH_AXES

    def _decode(
        self,
        x: Array,
        tokens: Array,
        positions: Any,
        cache: KVCache,
        mask: Any,
        own: bool = False,
    ) -> tuple[Array, KVCache]:
        b, s = tokens.shape
        index = cache["index"]
        slots = index + jnp.arange(s, dtype=jnp.int32)
        if positions is None:
            positions = jnp.broadcast_to(slots, (b, s))
        if mask is None:
            context = cache["layer_0"]["k"].shape[1]
            mask = jnp.arange(context)[None, None, :] <= slots[None, :, None]
            mask = jnp.broadcast_to(mask, (b, s, context))
        out: KVCache = {"index": index + s}
        for i, layer in enumerate(self.layers):
            x, out[f"layer_{i}"] = layer(
                x, positions, cache[f"layer_{i}"], mask, index, own
            )
        return x, out

    def init_cache(self, sequences: int, context: int, dtype: Any) -> KVCache:
        """An empty KV cache (zeros) for ``sequences`` of ``context`` positions.

        Each layer's ``k`` and ``v`` are ``[sequences, context, n_kv_heads,
        head_dim]`` in ``dtype``: ``2 * n_layers * n_kv_heads * head_dim``
        values per position of each sequence; ``index`` (``int32``, 0) is the
        next slot written.

        Example:
            >>> from flax import nnx
            >>> cfg = LlamaConfig(vocab=11, d_model=8, n_layers=2, n_heads=2,
            ...                   d_ff=12, n_kv_heads=1)
            >>> cache = Llama(cfg, rngs=nnx.Rngs(0)).init_cache(3, 16, jnp.int8)
            >>> sorted(cache), cache["layer_1"]["v"].shape, int(cache["index"])
            (['index', 'layer_0', 'layer_1'], (3, 16, 1, 4), 0)
        """
        shape = (sequences, context, self.n_kv_heads, self.head_dim)
        cache: KVCache = {"index": jnp.zeros((), jnp.int32)}
        for i in range(len(self.layers)):
            cache[f"layer_{i}"] = {
                "k": jnp.zeros(shape, dtype),
                "v": jnp.zeros(shape, dtype),
            }
        return cache


def _call_layer(layer: "LlamaLayer", x: Array) -> Array:
    out: Array = layer(x)
    return out


def llama(cfg: LlamaConfig) -> Callable[[nnx.Rngs], Llama]:
    """A factory ``(rngs) -> Llama`` for ``cfg``.

    Usable as a CLI target or with :func:`~nnx_introspect.abstract_model`.

    Example:
        >>> from nnx_introspect import abstract_model, count_params
        >>> cfg = LlamaConfig(vocab=11, d_model=8, n_layers=2, n_heads=2, d_ff=12)
        >>> count_params(abstract_model(llama(cfg)))  # 176 + 2 * (256 + 288 + 16) + 8
        1304
    """

    def factory(rngs: nnx.Rngs) -> Llama:
        return Llama(cfg, rngs=rngs)

    factory.__name__ = factory.__qualname__ = "llama"
    return factory


def llama_critic(cfg: LlamaConfig) -> Callable[[nnx.Rngs], Llama]:
    """A factory ``(rngs) -> Llama`` for ``cfg`` with a value head: a PPO critic.

    The same decoder as :func:`llama`'s, its head one output a token
    (``LlamaConfig.value_head``): ``[b, s, 1]`` values, as tunix's critics
    give them. The ``critic`` of :func:`~nnx_introspect.rl_memory_report`.

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> cfg = LlamaConfig(vocab=11, d_model=8, n_layers=2, n_heads=2, d_ff=12)
        >>> critic = llama_critic(cfg)(nnx.Rngs(0))
        >>> critic(jnp.zeros((3, 5), jnp.int32)).shape
        (3, 5, 1)
    """
    valued = dataclasses.replace(cfg, value_head=True)

    def factory(rngs: nnx.Rngs) -> Llama:
        return Llama(valued, rngs=rngs)

    factory.__name__ = factory.__qualname__ = "llama_critic"
    return factory


def _whole(value: Any, name: str, *, minimum: int) -> int:
    """A config's count ``value``, a whole number of at least ``minimum``, as an int.

    :class:`~nnx_introspect.examples.MoeConfig` checks its sizes with it, as
    the library checks its own arguments (an example imports no internals).

    Raises:
        TypeError: If ``value`` is a bool or not a number (a string, ``None``).
        ArgumentError: Naming ``name``, if it is not whole or is below ``minimum``.

    Example:
        >>> _whole(4.0, "n_experts", minimum=1)
        4
        >>> _whole(0, "n_experts", minimum=1)
        Traceback (most recent call last):
        ...
        nnx_introspect._typing.ArgumentError: `n_experts` must be a positive \
integer, got 0.
    """
    need = (
        "a positive integer"
        if minimum == 1
        else ("a nonnegative integer" if minimum == 0 else f"an integer >= {minimum}")
    )
    if isinstance(value, bool) or not isinstance(value, int | float | np.number):
        raise TypeError(f"`{name}` must be {need}, got {value!r}.")
    if not float(value).is_integer():
        raise ArgumentError(name, f"`{name}` must be {need}, got {value!r}.")
    if int(value) < minimum:
        raise ArgumentError(name, f"`{name}` must be {need}, got {int(value)}.")
    return int(value)

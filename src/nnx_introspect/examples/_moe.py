"""The examples' mixture of experts: a Llama whose MLPs are routed experts.

Each decoder layer is pre-norm attention (the example :class:`~nnx_introspect.
examples.Llama`'s rotary, grouped-query attention and KV cache, with a head
width of its own) followed by an :class:`MoeBlock`: a router picks ``top_k`` of
``n_experts`` gated MLPs for each token, whose weights are stacked ``(experts,
d_model, d_ff)`` and annotated ``"expert"`` on their first dimension, and an
optional shared expert that every token uses. Three dispatch styles, by
:attr:`MoeConfig.dispatch`:

- ``"dropless"``: the token copies sorted by expert, each expert's rows
  multiplied by its weights with ``jax.lax.ragged_dot`` (a grouped matmul, as
  Megablox's ``gmm``); no token is dropped. The sort is global, over the
  whole batch: a dense dispatch, which under a mesh XLA's sharding
  propagation computes by moving the whole batch's rows (no all-to-all).
- ``"capacity"``: one-hot einsum dispatch and combine (GShard, Switch): each
  expert takes at most :meth:`MoeConfig.capacity` tokens of a sequence, first
  choices first; a token past it gets nothing from that expert.
- ``"expert_parallel"``: expert parallelism as MaxText and tunix shard their
  experts: in a ``jax.shard_map``, each device routes its own tokens and an
  all-to-all over the expert axis sends each copy to the device holding its
  expert, at most :func:`~nnx_introspect.examples.ep_capacity` rows to
  each device; a local grouped matmul, and a second all-to-all back
  (``examples/_moe_ep.py``). Without an expert axis of more
  than one device, ``"dropless"``.

The model reuses :class:`~nnx_introspect.examples.Llama`'s embedding, head,
KV-cache decoding, prefill, remat and config checks, and the attention both
decoder layers derive from (``examples/_attention.py``: rotary angles, cached
attention, activation constraints); :mod:`nnx_introspect.examples` holds
the factories (``moe_tiny``, ``qwen3_30b_a3b``...). Like a user's model, it
imports only :mod:`nnx_introspect`'s public names.
"""

import dataclasses
import math
from collections.abc import Callable
from typing import Any, Literal, get_args

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float, Int

from nnx_introspect import ArgumentError, expert_mesh_axis
from nnx_introspect.examples._attention import (
    BATCH_AXES,
    MODEL_AXES,
    SelfAttention,
    constrain,
)
from nnx_introspect.examples._llama import Llama, _whole
from nnx_introspect.examples._moe_ep import expert_parallel

__all__ = [
    "MOE_400M",
    "MOE_TINY",
    "QWEN3_30B_A3B",
    "Dispatch",
    "MoeBlock",
    "MoeConfig",
    "MoeLayer",
    "MoeLlama",
    "expert_capacity",
    "moe",
]

Dispatch = Literal["dropless", "capacity", "expert_parallel"]
"""How tokens reach their experts: a grouped matmul over the whole batch's
sorted copies, one-hot capacity dispatch, or all-to-alls over the expert axis."""


@dataclasses.dataclass(frozen=True)
class MoeConfig:
    """The sizes of a :class:`MoeLlama`: a Llama whose MLPs are routed experts.

    Args:
        vocab: Vocabulary size.
        d_model: Residual width.
        n_layers: Number of decoder layers.
        n_heads: Query heads.
        n_experts: Routed experts in each layer.
        top_k: Experts each token is routed to (``1 .. n_experts``).
        moe_d_ff: Hidden width of each routed expert's gated MLP.
        shared_d_ff: Hidden width of the shared expert, a gated MLP every
            token uses besides its routed ones; ``0`` (default): none.
        dispatch: ``"dropless"`` (``jax.lax.ragged_dot`` over the whole
            batch's token copies sorted by expert: the global, dense
            dispatch), ``"capacity"`` (one-hot einsum dispatch, at most
            :meth:`capacity` tokens per expert and sequence) or
            ``"expert_parallel"`` (each device's copies sent to their
            experts' devices by an all-to-all over the expert axis, at most
            ``ceil(copies / ep x capacity_factor)`` to each device, first
            choices first; ``"dropless"`` where the mesh has no expert axis
            of more than one device).
        capacity_factor: The capacity's slack over an even split (``> 0``);
            read by ``"capacity"`` and ``"expert_parallel"`` dispatch.
        n_kv_heads: Key and value heads (grouped-query attention); ``None``:
            ``n_heads``.
        head_dim: Width of a head; ``None``: ``d_model // n_heads``. Qwen3's
            heads are wider than that (``32 x 128`` over a width of 2048).
        param_dtype: Parameter dtype.
        dtype: Computation dtype (``None``: the parameters'), as
            :class:`~nnx_introspect.examples.LlamaConfig`'s; the router's
            scores and softmax are float32 whatever it is.
        partitioned: Annotate kernels with sharding names: attention and the
            shared expert as the example Llama's (``"fsdp"``, ``"tp"``), the
            router ``("fsdp", None)``, the routed experts ``("expert",
            "fsdp", "tp")`` (gate, up) and ``("expert", "tp", "fsdp")``
            (down). The mesh plan splits ``"expert"`` over a mesh axis
            ``expert`` or ``ep``, else over ``fsdp``.
        shard_activations: Constrain the activations as the example Llama
            does, the batch also over an expert axis (``ep`` or ``expert``)
            when the mesh has one, and, under ``"capacity"`` dispatch, each
            expert's tokens ``[batch, experts, capacity, d_model]`` by expert
            over the experts' mesh axis: moving the tokens there is expert
            parallelism's all-to-all. The dropless path's sorted rows are
            left to XLA's sharding propagation. Under ``"expert_parallel"``,
            the embedded tokens and the logits split over the expert axis
            too (:meth:`MoeLlama.activation_batch_axes`).
        remat: Rematerialise each decoder layer for the backward pass.

    Raises:
        ArgumentError: Naming the field, when ``top_k`` is not in ``1 ..
            n_experts``, ``capacity_factor`` is not a positive finite number,
            ``dispatch`` is not a :data:`Dispatch`, a size is not a positive
            integer (``shared_d_ff`` may be 0), or the heads do not divide.

    Example:
        >>> cfg = MoeConfig(vocab=64, d_model=16, n_layers=1, n_heads=2,
        ...                 n_experts=4, top_k=2, moe_d_ff=8, dispatch="capacity")
        >>> cfg.capacity(10)  # ceil(10 tokens x 2 / 4 experts x 1.25)
        7
        >>> MoeConfig(vocab=64, d_model=16, n_layers=1, n_heads=2,
        ...           n_experts=4, top_k=5, moe_d_ff=8)
        Traceback (most recent call last):
        ...
        nnx_introspect._typing.ArgumentError: `top_k` must be at most `n_experts` \
(4), got 5: a token is routed to top_k distinct experts.
    """

    vocab: int
    d_model: int
    n_layers: int
    n_heads: int
    n_experts: int
    top_k: int
    moe_d_ff: int
    shared_d_ff: int = 0
    dispatch: Dispatch = "dropless"
    capacity_factor: float = 1.25
    n_kv_heads: int | None = None
    head_dim: int | None = None
    param_dtype: Any = jnp.float32
    dtype: Any = None
    partitioned: bool = False
    shard_activations: bool = False
    remat: bool = False

    def __post_init__(self) -> None:
        for name in ("vocab", "d_model", "n_layers", "n_heads", "n_experts"):
            _whole(getattr(self, name), name, minimum=1)
        _whole(self.moe_d_ff, "moe_d_ff", minimum=1)
        _whole(self.shared_d_ff, "shared_d_ff", minimum=0)
        top_k = _whole(self.top_k, "top_k", minimum=1)
        if top_k > self.n_experts:
            raise ArgumentError(
                "top_k",
                f"`top_k` must be at most `n_experts` ({self.n_experts}), got "
                f"{top_k}: a token is routed to top_k distinct experts.",
            )
        if self.dispatch not in get_args(Dispatch):
            raise ArgumentError(
                "dispatch",
                f"`dispatch` must be one of {get_args(Dispatch)}, got "
                f"{self.dispatch!r}.",
            )
        factor = self.capacity_factor
        if (
            isinstance(factor, bool)
            or not isinstance(factor, int | float)
            or not math.isfinite(factor)
            or factor <= 0
        ):
            raise ArgumentError(
                "capacity_factor",
                "`capacity_factor` must be a positive finite number (1.0: each "
                f"expert takes an even share of the tokens), got {factor!r}.",
            )
        kv = self.kv_heads
        if kv < 1 or self.n_heads % kv:
            raise ArgumentError(
                "n_kv_heads",
                f"`n_kv_heads` {self.n_kv_heads!r} must divide `n_heads` "
                f"{self.n_heads}. Pass a divisor of `n_heads` (or None).",
            )
        if self.head_dim is None and self.d_model % self.n_heads:
            raise ArgumentError(
                "head_dim",
                f"`n_heads` {self.n_heads} does not divide `d_model` "
                f"{self.d_model}: pass `head_dim`.",
            )
        if _whole(self.head_size, "head_dim", minimum=2) % 2:
            raise ArgumentError(
                "head_dim",
                f"`head_dim` must be even (rotary angles pair its halves), got "
                f"{self.head_size}.",
            )

    @property
    def kv_heads(self) -> int:
        """The key and value heads: ``n_kv_heads``, or ``n_heads`` if ``None``."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def head_size(self) -> int:
        """The width of a head: ``head_dim``, or ``d_model // n_heads`` if ``None``."""
        return self.d_model // self.n_heads if self.head_dim is None else self.head_dim

    def capacity(self, tokens: int) -> int:
        """How many of a sequence's ``tokens`` each expert takes under ``"capacity"``.

        ``ceil(tokens * top_k / n_experts * capacity_factor)``, at most
        ``tokens`` (an expert receives each token at most once). The dispatch
        and combine tensors are ``[batch, tokens, n_experts, capacity]``, each
        expert's input ``[batch, n_experts, capacity, d_model]``.
        """
        return expert_capacity(tokens, self.top_k, self.n_experts, self.capacity_factor)


def expert_capacity(tokens: int, top_k: int, experts: int, factor: float) -> int:
    """``ceil(tokens * top_k / experts * factor)``, between 1 and ``tokens``."""
    return max(1, min(tokens, math.ceil(tokens * top_k / experts * factor)))


MOE_TINY = MoeConfig(
    vocab=512,
    d_model=64,
    n_layers=2,
    n_heads=4,
    n_kv_heads=2,
    n_experts=8,
    top_k=2,
    moe_d_ff=32,
    shared_d_ff=64,
)
"""214,336 parameters (140,608 a token uses): 2 layers of 8 experts, top-2, and
a shared expert; small enough to build concretely in a test."""

MOE_400M = MoeConfig(
    vocab=32000,
    d_model=1024,
    n_layers=6,
    n_heads=8,
    n_kv_heads=4,
    n_experts=16,
    top_k=2,
    moe_d_ff=1024,
    shared_d_ff=1024,
    dtype=jnp.bfloat16,
)
"""405,386,240 float32 parameters (141,145,088 a token uses), bfloat16 compute:
6 layers of 16 experts, top-2, and a shared expert; one v5e chip trains it with
AdamW on int32[8,1024] (XLA:TPU's peak 9.96 GiB)."""

QWEN3_30B_A3B = MoeConfig(
    vocab=151936,
    d_model=2048,
    n_layers=48,
    n_heads=32,
    n_kv_heads=4,
    head_dim=128,
    n_experts=128,
    top_k=8,
    moe_d_ff=768,
    dtype=jnp.bfloat16,
)
"""Qwen3-30B-A3B's shapes: 30,532,110,336 float32 parameters, 3,353,020,416 of
them a token uses (8 of 128 experts, no shared expert); bfloat16 compute.
Qwen3's own count is 12,288 more: its per-head q and k norms, which this
Llama-style attention lacks."""


_MOE_BATCH = (*BATCH_AXES, "expert", "ep")
"""The mesh axes an activation's batch splits over: the Llama's, then an expert
axis, whose devices take rows of their own outside the experts (MaxText's
``activation_batch`` holds its ``expert`` axis too); dispatch moves the rows to
their experts over it (an all-to-all)."""

_RESIDUAL = (_MOE_BATCH, MODEL_AXES, ())
"""``(batch, seq, d_model)``, as the Llama's residual stream: sequence over ``tp``."""

_HEADS = (_MOE_BATCH, (), MODEL_AXES, ())
"""``(batch, seq, heads, head_dim)``, as the Llama's attention."""


def _names(cfg: MoeConfig, names: tuple[str | None, ...]) -> dict[str, Any]:
    return {"out_sharding": names} if cfg.partitioned else {}


def _linear(
    cfg: MoeConfig, i: int, o: int, names: tuple[str | None, ...], rngs: nnx.Rngs
) -> nnx.Linear:
    return nnx.Linear(
        i,
        o,
        use_bias=False,
        dtype=cfg.dtype,
        param_dtype=cfg.param_dtype,
        kernel_metadata=_names(cfg, names),
        rngs=rngs,
    )


_EXPERT_INIT = nnx.initializers.lecun_normal(in_axis=-2, out_axis=-1, batch_axis=(0,))
"""Each expert's matrix drawn as a ``nnx.Linear`` kernel of its shape would be."""


class MoeBlock(nnx.Module):
    """Routed experts (and a shared one): the MLP of a :class:`MoeLayer`.

    Holds ``router`` (``d_model x n_experts``), the routed experts' stacked
    ``w_gate``, ``w_up`` (``n_experts x d_model x moe_d_ff``) and ``w_down``
    (``n_experts x moe_d_ff x d_model``) and, with ``shared_d_ff``, a
    ``shared`` gated MLP. The router's softmax over the experts (float32)
    picks each token's ``top_k``; their probabilities, renormalised to sum to
    1 (as Qwen3 and Mixtral weigh them), weigh the experts' outputs. The
    attributes ``num_experts`` and ``top_k`` are what
    :func:`~nnx_introspect.count_active_params` reads.

    Example:
        >>> from flax import nnx
        >>> cfg = MoeConfig(vocab=8, d_model=8, n_layers=1, n_heads=2,
        ...                 n_experts=4, top_k=2, moe_d_ff=6)
        >>> block = MoeBlock(cfg, rngs=nnx.Rngs(0))
        >>> block.w_gate.shape, block.num_experts, block.top_k
        ((4, 8, 6), 4, 2)
        >>> block(jnp.ones((2, 3, 8))).shape
        (2, 3, 8)
    """

    def __init__(self, cfg: MoeConfig, *, rngs: nnx.Rngs) -> None:
        e, d, f = cfg.n_experts, cfg.d_model, cfg.moe_d_ff
        self.num_experts = e
        self.top_k = cfg.top_k
        self.dispatch: Dispatch = cfg.dispatch
        self.capacity_factor = cfg.capacity_factor
        self.shard_activations = cfg.shard_activations
        self.router = nnx.Linear(
            d,
            e,
            use_bias=False,
            dtype=jnp.float32,
            param_dtype=cfg.param_dtype,
            kernel_metadata=_names(cfg, ("fsdp", None)),
            rngs=rngs,
        )

        def stacked(shape: tuple[int, int, int], names: tuple[str, ...]) -> Any:
            value = _EXPERT_INIT(rngs.params(), shape, cfg.param_dtype)
            return nnx.Param(value, **_names(cfg, names))

        self.w_gate = stacked((e, d, f), ("expert", "fsdp", "tp"))
        self.w_up = stacked((e, d, f), ("expert", "fsdp", "tp"))
        self.w_down = stacked((e, f, d), ("expert", "tp", "fsdp"))
        self.shared: _GatedMlp | None = (
            _GatedMlp(cfg, cfg.shared_d_ff, rngs=rngs) if cfg.shared_d_ff else None
        )

    def route(
        self, x: Float[Array, "b s d"]
    ) -> tuple[Float[Array, "b s k"], Int[Array, "b s k"]]:
        """Each token's ``top_k`` experts and their weights (float32, summing to 1)."""
        probs = jax.nn.softmax(self.router(x).astype(jnp.float32), axis=-1)
        weights, experts = jax.lax.top_k(probs, self.top_k)
        return weights / weights.sum(-1, keepdims=True), experts

    def __call__(self, x: Float[Array, "b s d"]) -> Float[Array, "b s d"]:
        """Each token's experts' outputs, weighted and summed, plus the shared one's."""
        weights, experts = self.route(x)
        y = None
        if self.dispatch == "expert_parallel":
            y = expert_parallel(
                x,
                weights,
                experts,
                self._weights(x),
                batch_axes=_MOE_BATCH,
                model_axes=MODEL_AXES,
                capacity_factor=self.capacity_factor,
            )
        if y is None and self.dispatch == "capacity":
            y = self._capacity(x, weights, experts)
        elif y is None:
            y = self._dropless(x, weights, experts)
        if self.shared is not None:
            y = y + self.shared(x)
        return y

    def _weights(self, x: Array) -> tuple[Array, Array, Array]:
        dt = x.dtype
        return (
            self.w_gate[...].astype(dt),
            self.w_up[...].astype(dt),
            self.w_down[...].astype(dt),
        )

    def _dropless(self, x: Array, weights: Array, experts: Array) -> Array:
        """Every token copy through its expert: a grouped matmul over sorted rows."""
        b, s, d = x.shape
        k = self.top_k
        flat = experts.reshape(-1)  # [b*s*k]: token n's copies at n*k .. n*k+k-1
        order = jnp.argsort(flat, stable=True)
        rows = x.reshape(b * s, d)[order // k]  # the copies, sorted by expert
        sizes = jnp.bincount(flat, length=self.num_experts).astype(jnp.int32)
        gate, up, down = self._weights(x)
        hidden = jax.nn.silu(jax.lax.ragged_dot(rows, gate, sizes))
        hidden = hidden * jax.lax.ragged_dot(rows, up, sizes)
        out = jax.lax.ragged_dot(hidden, down, sizes)
        unsorted = out[jnp.argsort(order)].reshape(b, s, k, d)
        return jnp.einsum("bskd,bsk->bsd", unsorted, weights.astype(x.dtype))

    def _capacity(self, x: Array, weights: Array, experts: Array) -> Array:
        """One-hot dispatch into ``[b, experts, capacity, d]``, experts, combine."""
        b, s, _ = x.shape
        k, e = self.top_k, self.num_experts
        c = expert_capacity(s, k, e, self.capacity_factor)
        chosen = jax.nn.one_hot(experts, e, dtype=jnp.int32)  # [b, s, k, e]
        # each copy's slot in its expert: first choices of every token first
        by_choice = chosen.transpose(0, 2, 1, 3).reshape(b, k * s, e)
        slot = (jnp.cumsum(by_choice, axis=1) - 1).reshape(b, k, s, e)
        slot = (slot.transpose(0, 2, 1, 3) * chosen).sum(-1)  # [b, s, k]
        kept = (chosen * (slot < c)[..., None]).astype(x.dtype)
        place = jax.nn.one_hot(slot, c, dtype=x.dtype)  # [b, s, k, c]
        dispatch = jnp.einsum("bske,bskc->bsec", kept, place)
        combine = jnp.einsum(
            "bske,bskc,bsk->bsec", kept, place, weights.astype(x.dtype)
        )
        gate, up, down = self._weights(x)
        inputs = self._shard(jnp.einsum("bsec,bsd->becd", dispatch, x), ())
        hidden = jax.nn.silu(jnp.einsum("becd,edf->becf", inputs, gate))
        hidden = hidden * jnp.einsum("becd,edf->becf", inputs, up)
        hidden = self._shard(hidden, MODEL_AXES)
        out = self._shard(jnp.einsum("becf,efd->becd", hidden, down), ())
        y: Array = jnp.einsum("bsec,becd->bsd", combine, out)
        return y

    def _shard(self, x: Array, last: tuple[str, ...]) -> Array:
        """``[b, experts, capacity, ·]`` split by expert over the expert mesh axis.

        The batch keeps the batch axes the expert axis is not, so moving a
        batch-split array here is an all-to-all over the expert axis.
        """
        if not self.shard_activations:
            return x
        mesh = jax.sharding.get_abstract_mesh()
        axis = expert_mesh_axis(tuple(mesh.axis_names))
        if axis is None:
            return x
        batch = tuple(a for a in _MOE_BATCH if a != axis)
        return constrain(x, batch, (axis,), (), last)


class _GatedMlp(nnx.Module):
    """The shared expert: ``down(silu(gate(x)) * up(x))``, bias-free."""

    def __init__(self, cfg: MoeConfig, width: int, *, rngs: nnx.Rngs) -> None:
        d = cfg.d_model
        self.gate = _linear(cfg, d, width, ("fsdp", "tp"), rngs)
        self.up = _linear(cfg, d, width, ("fsdp", "tp"), rngs)
        self.down = _linear(cfg, width, d, ("tp", "fsdp"), rngs)

    def __call__(self, x: Array) -> Array:
        y: Array = self.down(jax.nn.silu(self.gate(x)) * self.up(x))
        return y


class MoeLayer(SelfAttention):
    """One pre-norm decoder layer: RMSNorm, attention, RMSNorm, :class:`MoeBlock`.

    The attention is the example :class:`~nnx_introspect.examples.LlamaLayer`'s
    (the ``SelfAttention`` both derive from, ``_attention.py``: rotary angles,
    grouped-query heads, the same KV-cache writes and decode einsums, the same
    activation constraints, the batch also over an expert axis), with
    ``head_dim``-wide heads: q is ``d_model x n_heads * head_dim``, o its
    transpose. Called as a ``LlamaLayer`` is, so :class:`MoeLlama` decodes,
    prefills and rematerialises exactly as the Llama does.
    """

    heads_dims = _HEADS
    residual_dims = _RESIDUAL

    def __init__(self, cfg: MoeConfig, *, rngs: nnx.Rngs) -> None:
        super().__init__(cfg, cfg.head_size, rngs=rngs)
        dt = {"dtype": cfg.dtype, "param_dtype": cfg.param_dtype}
        self.mlp_norm = nnx.RMSNorm(cfg.d_model, rngs=rngs, **dt)
        self.moe = MoeBlock(cfg, rngs=rngs)

    def __call__(
        self,
        x: Float[Array, "b s d"],
        positions: Int[Array, "b s"] | None = None,
        cache: dict[str, Array] | None = None,
        mask: Any = None,
        index: Any = None,
        own: bool = False,
    ) -> Any:
        """Attention then the experts; with a ``cache``, ``(x, cache)``.

        The arguments are :meth:`LlamaLayer.__call__
        <nnx_introspect.examples.LlamaLayer.__call__>`'s.
        """
        x, cache = self.attend(x, positions, cache, mask, index, own)
        out = self._shard(x + self.moe(self.mlp_norm(x)), _RESIDUAL)
        return out if cache is None else (out, cache)


class MoeLlama(Llama):
    """A Llama decoder whose layers are :class:`MoeLayer`: routed experts.

    Embedding, ``n_layers`` x :class:`MoeLayer`, norm and head, called, decoded
    and prefilled as :class:`~nnx_introspect.examples.Llama` (whose methods it
    inherits). With ``a = d (n_heads + n_kv_heads) 2 h`` the attention
    kernels (``h = head_dim``), its parameters are ``2 V d + d + L (a + 2 d +
    d E + 3 E d f + 3 d f_s)``, of which a token uses all but the routed
    experts it is not sent to: ``L 3 d f (E - k)`` fewer
    (:func:`~nnx_introspect.count_active_params`).

    Args:
        cfg: The sizes.
        rngs: The RNG streams.

    Example:
        >>> from flax import nnx
        >>> from nnx_introspect import count_active_params, count_params
        >>> cfg = MoeConfig(vocab=11, d_model=8, n_layers=2, n_heads=2,
        ...                 n_experts=4, top_k=1, moe_d_ff=6)
        >>> model = MoeLlama(cfg, rngs=nnx.Rngs(0))
        >>> model(jnp.zeros((1, 5), jnp.int32)).shape
        (1, 5, 11)
        >>> # 176 + 8 + 2 x (256 + 16 + 32 + 576), of which 2 x 3 x 144 unused
        >>> count_params(model), count_active_params(model)
        (1944, 1080)
    """

    def __init__(self, cfg: MoeConfig, *, rngs: nnx.Rngs) -> None:
        dt = {"dtype": cfg.dtype, "param_dtype": cfg.param_dtype}
        self.embed = nnx.Embed(
            cfg.vocab,
            cfg.d_model,
            rngs=rngs,
            embedding_metadata=_names(cfg, ("tp", "fsdp")),
            **dt,
        )
        layers: list[Any] = [MoeLayer(cfg, rngs=rngs) for _ in range(cfg.n_layers)]
        self.layers = nnx.List(layers)
        self.norm = nnx.RMSNorm(cfg.d_model, rngs=rngs, **dt)
        self.lm_head = _linear(cfg, cfg.d_model, cfg.vocab, ("fsdp", "tp"), rngs)
        self.shard_activations = cfg.shard_activations
        self.value_head = False
        self.remat = cfg.remat
        self.n_kv_heads = cfg.kv_heads
        self.head_dim = cfg.head_size
        self.dispatch: Dispatch = cfg.dispatch

    def activation_batch_axes(self) -> tuple[str, ...]:
        """The mesh axes the embedded tokens' and the logits' batch split over.

        Under ``"expert_parallel"`` dispatch, the Llama's and an expert axis
        (``expert``, ``ep``), as the experts' tokens: the logits and the loss
        are each device's share of the batch. Otherwise the Llama's
        (``data``, ``fsdp``).

        Example:
            >>> from flax import nnx
            >>> cfg = MoeConfig(vocab=11, d_model=8, n_layers=1, n_heads=2,
            ...                 n_experts=4, top_k=1, moe_d_ff=6,
            ...                 dispatch="expert_parallel")
            >>> MoeLlama(cfg, rngs=nnx.Rngs(0)).activation_batch_axes()
            ('data', 'fsdp', 'expert', 'ep')
        """
        if self.dispatch == "expert_parallel":
            return _MOE_BATCH
        return super().activation_batch_axes()


def moe(cfg: MoeConfig) -> Callable[[nnx.Rngs], MoeLlama]:
    """A factory ``(rngs) -> MoeLlama`` for ``cfg``.

    Usable as a CLI target or with :func:`~nnx_introspect.abstract_model`.

    Example:
        >>> from nnx_introspect import abstract_model, count_params
        >>> cfg = MoeConfig(vocab=11, d_model=8, n_layers=1, n_heads=2,
        ...                 n_experts=4, top_k=2, moe_d_ff=6, shared_d_ff=4)
        >>> count_params(abstract_model(moe(cfg)))  # 176 + 8 + 880 + 96
        1160
    """

    def factory(rngs: nnx.Rngs) -> MoeLlama:
        return MoeLlama(cfg, rngs=rngs)

    factory.__name__ = factory.__qualname__ = "moe"
    return factory

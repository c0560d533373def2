"""Example models: factories ``(rngs) -> nnx.Module`` for docs, tests and the CLI.

Every factory takes an ``nnx.Rngs`` and returns a module, so each one works with
:func:`~nnx_introspect.fresh_init_forward`, abstract builds and the CLI's
``package.module:callable`` targets.
"""

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import AxisType, PartitionSpec
from jaxtyping import Array, Float, Int

from nnx_introspect._typing import ArgumentError

__all__ = [
    "BNDropoutMLP",
    "Llama",
    "LlamaConfig",
    "TiedEmbedding",
    "TwoLayer",
    "bn_dropout_mlp",
    "llama",
    "llama_7b",
    "llama_7b_sharded",
    "llama_7b_sharded_f32",
    "llama_7b_sharded_remat",
    "llama_7b_sharded_remat_f32",
    "llama_tiny",
    "llama_tiny_sharded",
    "tied_embedding",
    "two_layer",
]


class TwoLayer(nnx.Module):
    """Two ``nnx.Linear`` layers with no activation: the model of the specs.

    Args:
        in_features: Input width.
        hidden: Width of both layers' outputs.
        rngs: The RNG streams; ``l1`` is built before ``l2`` from the same ones.

    Example:
        >>> from flax import nnx
        >>> model = TwoLayer(3, 4, rngs=nnx.Rngs(0))
        >>> model.l1.kernel.shape, model.l2.kernel.shape
        ((3, 4), (4, 4))
    """

    def __init__(self, in_features: int, hidden: int, *, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(in_features, hidden, rngs=rngs)
        self.l2 = nnx.Linear(hidden, hidden, rngs=rngs)

    def __call__(self, x: Float[Array, "*batch d"]) -> Float[Array, "*batch h"]:
        """``l2(l1(x))``."""
        y: jax.Array = self.l2(self.l1(x))
        return y


def two_layer(rngs: nnx.Rngs) -> TwoLayer:
    """The spec's two-layer model with 3 inputs and 4 hidden units (36 parameters).

    Example:
        >>> from flax import nnx
        >>> from nnx_introspect import count_params
        >>> count_params(two_layer(nnx.Rngs(0)))
        36
    """
    return TwoLayer(3, 4, rngs=rngs)


class BNDropoutMLP(nnx.Module):
    """``Linear -> BatchNorm -> relu -> Dropout -> Linear``: every common variable kind.

    Holds ``Param`` (kernels, biases, BatchNorm scale and bias), ``BatchStat``
    (BatchNorm's running mean and variance) and, because the ``Dropout`` keeps
    its own stream, ``RngKey`` and ``RngCount`` state.

    Args:
        in_features: Input width.
        hidden: Hidden width.
        out_features: Output width.
        rngs: The RNG streams (``params``; ``dropout`` if given, else the default).

    Example:
        >>> from flax import nnx
        >>> model = BNDropoutMLP(3, 5, 2, rngs=nnx.Rngs(0))
        >>> model.bn.mean.shape
        (5,)
    """

    def __init__(
        self, in_features: int, hidden: int, out_features: int, *, rngs: nnx.Rngs
    ) -> None:
        self.l1 = nnx.Linear(in_features, hidden, rngs=rngs)
        self.bn = nnx.BatchNorm(hidden, rngs=rngs)
        self.drop = nnx.Dropout(0.5, rngs=rngs)
        self.l2 = nnx.Linear(hidden, out_features, rngs=rngs)

    def __call__(self, x: Float[Array, "batch d"]) -> Float[Array, "batch o"]:
        """``l2(drop(relu(bn(l1(x)))))``."""
        y: jax.Array = self.l2(self.drop(jax.nn.relu(self.bn(self.l1(x)))))
        return y


def bn_dropout_mlp(rngs: nnx.Rngs) -> BNDropoutMLP:
    """A :class:`BNDropoutMLP` with 3 inputs, 5 hidden units and 2 outputs.

    Parameters: ``3*5 + 5`` (l1) ``+ 5 + 5`` (BatchNorm scale, bias)
    ``+ 5*2 + 2`` (l2) ``= 42``; batch statistics: ``5 + 5 = 10``.

    Example:
        >>> from flax import nnx
        >>> from nnx_introspect import count_params
        >>> model = bn_dropout_mlp(nnx.Rngs(0))
        >>> count_params(model), count_params(model, nnx.BatchStat)
        (42, 10)
    """
    return BNDropoutMLP(3, 5, 2, rngs=rngs)


class TiedEmbedding(nnx.Module):
    """A token embedding whose table is also the output projection (weight tying).

    The ``nnx.Embed`` is reachable as ``embed`` and ``head``; the state holds its
    table once, so the parameter count is ``vocab * d_model``.

    Args:
        vocab: Vocabulary size.
        d_model: Embedding width.
        rngs: The RNG streams.

    Example:
        >>> from flax import nnx
        >>> model = TiedEmbedding(10, 4, rngs=nnx.Rngs(0))
        >>> model.head is model.embed
        True
    """

    def __init__(self, vocab: int, d_model: int, *, rngs: nnx.Rngs) -> None:
        self.embed = nnx.Embed(vocab, d_model, rngs=rngs)
        self.head = self.embed

    def __call__(
        self, tokens: Int[Array, "*batch seq"]
    ) -> Float[Array, "*batch seq v"]:
        """Embed ``tokens`` and score them against the same table."""
        y: jax.Array = self.head.attend(self.embed(tokens))
        return y


def tied_embedding(rngs: nnx.Rngs) -> TiedEmbedding:
    """A :class:`TiedEmbedding` with a 10-token vocabulary and width 4 (40 params).

    Example:
        >>> from flax import nnx
        >>> from nnx_introspect import count_params, count_state_leaves
        >>> model = tied_embedding(nnx.Rngs(0))
        >>> count_params(model), count_state_leaves(model)
        (40, 1)
    """
    return TiedEmbedding(10, 4, rngs=rngs)


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


def _meta(cfg: LlamaConfig, names: tuple[str | None, ...]) -> dict[str, Any]:
    return {"out_sharding": names} if cfg.partitioned else {}


_BATCH_AXES = ("data", "fsdp")
"""The mesh axes an activation's batch dimension is split over, outermost first
(MaxText's ``activation_batch`` order); an axis the mesh lacks is left out."""

_MODEL_AXES = ("tp",)
"""The mesh axes the heads, the MLP's hidden units and the vocabulary are split over
(the ``"tp"`` of the kernels' annotations)."""

_RESIDUAL = (_BATCH_AXES, _MODEL_AXES, ())
"""``(batch, seq, d_model)``: the batch split, and the sequence over ``tp``.

Megatron's sequence parallelism (Korthikanti et al. 2022): between the blocks
the ``tp`` devices hold a slice of the tokens each instead of a copy of all of
them, for the same traffic (the row-parallel output's all-reduce becomes a
reduce-scatter, the next block's input an all-gather). Trainers split the
residual over ``tp`` too (tunix's ``act_btd`` splits its width, MaxText's
``activation_embed``) rather than replicate it. Of the three, the sequence split
needs the fewest temporaries in XLA:GPU's compile of the 7B's training step
(``benchmarks/bench_activations.py``)."""

_HEADS = (_BATCH_AXES, (), _MODEL_AXES, ())
"""``(batch, seq, heads, head_dim)``: column-parallel q, k, v and attention's output."""

_HIDDEN = (_BATCH_AXES, (), _MODEL_AXES)
"""``(batch, seq, d_ff or vocab)``: the MLP's hidden units and the logits."""


def _constrain(x: Array, *dims: tuple[str, ...]) -> Array:
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
        >>> _constrain(x, ("data", "fsdp"), ()) is x  # no mesh: unchanged
        True
        >>> mesh = jax.make_mesh((2, 4), ("fsdp", "tp"),
        ...                      axis_types=(jax.sharding.AxisType.Auto,) * 2)
        >>> with jax.set_mesh(mesh):
        ...     y = jax.jit(lambda x: _constrain(x, ("data", "fsdp"), ("tp",)))(x)
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


def _rope(x: Float[Array, "b s h d"]) -> Float[Array, "b s h d"]:
    half = x.shape[-1] // 2
    pos = jnp.arange(x.shape[1], dtype=jnp.float32)[:, None]
    freq = 10000.0 ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angle = (pos * freq)[None, :, None, :]
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    x1, x2 = x[..., :half], x[..., half:]
    y = jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
    # float32 angles promote a bfloat16 input: back to the compute dtype
    return y if y.dtype == x.dtype else y.astype(x.dtype)


class LlamaLayer(nnx.Module):
    """One pre-norm decoder layer: RMSNorm, attention, RMSNorm, gated MLP."""

    def __init__(self, cfg: LlamaConfig, *, rngs: nnx.Rngs) -> None:
        d, f = cfg.d_model, cfg.d_ff
        dt = {"dtype": cfg.dtype, "param_dtype": cfg.param_dtype}
        col, row = _meta(cfg, ("fsdp", "tp")), _meta(cfg, ("tp", "fsdp"))

        def linear(i: int, o: int, meta: dict[str, Any]) -> nnx.Linear:
            return nnx.Linear(
                i, o, use_bias=False, rngs=rngs, kernel_metadata=meta, **dt
            )

        self.n_heads = cfg.n_heads
        self.shard_activations = cfg.shard_activations
        self.attn_norm = nnx.RMSNorm(d, rngs=rngs, **dt)
        self.q = linear(d, d, col)
        self.k = linear(d, d, col)
        self.v = linear(d, d, col)
        self.o = linear(d, d, row)
        self.mlp_norm = nnx.RMSNorm(d, rngs=rngs, **dt)
        self.gate = linear(d, f, col)
        self.up = linear(d, f, col)
        self.down = linear(f, d, row)

    def __call__(self, x: Float[Array, "b s d"]) -> Float[Array, "b s d"]:
        """Causal self-attention with rotary positions, then the SiLU-gated MLP.

        With ``shard_activations``: q, k, v and attention's output split by
        head, the MLP's gate, up and their product by hidden unit (both over
        ``tp``, as the column-parallel kernels produce them), the residual
        stream after each block by batch and, over ``tp``, by sequence.
        """
        b, s, d = x.shape
        h = self.attn_norm(x)
        shape = (b, s, self.n_heads, d // self.n_heads)
        q = _rope(self._shard(self.q(h).reshape(shape), _HEADS))
        k = _rope(self._shard(self.k(h).reshape(shape), _HEADS))
        v = self._shard(self.v(h).reshape(shape), _HEADS)
        mask = jnp.tril(jnp.ones((s, s), dtype=bool))
        att = jax.nn.dot_product_attention(q, k, v, mask=mask[None, None])
        att = self._shard(att, _HEADS)
        x = self._shard(x + self.o(att.reshape(b, s, d)), _RESIDUAL)
        h = self.mlp_norm(x)
        gate = self._shard(self.gate(h), _HIDDEN)
        up = self._shard(self.up(h), _HIDDEN)
        hidden = self._shard(jax.nn.silu(gate) * up, _HIDDEN)
        return self._shard(x + self.down(hidden), _RESIDUAL)

    def _shard(self, x: Array, dims: tuple[tuple[str, ...], ...]) -> Array:
        return _constrain(x, *dims) if self.shard_activations else x


class Llama(nnx.Module):
    """A Llama-style decoder: embedding, ``n_layers`` x :class:`LlamaLayer`, norm, head.

    Every linear layer is bias-free and every RMSNorm holds only a scale, so the
    state has ``1 + 9 * n_layers + 2`` leaves and
    ``2 * vocab * d + n_layers * (4 d^2 + 3 d f + 2 d) + d`` parameters.

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
            cfg.vocab,
            use_bias=False,
            dtype=cfg.dtype,
            param_dtype=cfg.param_dtype,
            rngs=rngs,
            kernel_metadata=_meta(cfg, ("fsdp", "tp")),
        )
        self.shard_activations = cfg.shard_activations
        self.remat = cfg.remat

    def __call__(self, tokens: Int[Array, "b s"]) -> Float[Array, "b s v"]:
        """Next-token logits for ``tokens``.

        With ``shard_activations``, the embedded tokens are constrained like
        the residual stream and the logits by batch and vocabulary.
        """
        x = self.embed(tokens)
        if self.shard_activations:
            x = _constrain(x, *_RESIDUAL)
        for layer in self.layers:
            x = nnx.remat(_call_layer)(layer, x) if self.remat else layer(x)
        y: jax.Array = self.lm_head(self.norm(x))
        return _constrain(y, *_HIDDEN) if self.shard_activations else y


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


def llama_tiny(rngs: nnx.Rngs) -> Llama:
    """A small Llama: 10,424,576 parameters in 75 leaves.

    Vocabulary 8000, width 256, 8 layers, 4 heads, MLP width 688.

    Example:
        >>> from nnx_introspect import abstract_model, count_params
        >>> count_params(abstract_model(llama_tiny))
        10424576
    """
    return Llama(LLAMA_TINY, rngs=rngs)


def llama_7b(rngs: nnx.Rngs) -> Llama:
    """Llama-2-7B shapes: 6,738,415,616 float32 parameters (25.1 GiB) in 291 leaves.

    Vocabulary 32000, width 4096, 32 layers, 32 heads, MLP width 11008. It
    computes in bfloat16 with float32 parameters (``LlamaConfig.dtype``), as
    7B models are trained: bfloat16 activations and matmuls, float32
    parameters, gradients and optimizer state.

    Build it abstractly (:func:`~nnx_introspect.abstract_model`): concretely it
    needs 25 GiB.

    Example:
        >>> from nnx_introspect import abstract_model, count_params
        >>> from nnx_introspect import count_state_leaves
        >>> model = abstract_model(llama_7b)
        >>> count_params(model), count_state_leaves(model)
        (6738415616, 291)
    """
    return Llama(LLAMA_7B, rngs=rngs)


def _sharded(cfg: LlamaConfig) -> LlamaConfig:
    return dataclasses.replace(cfg, partitioned=True, shard_activations=True)


def llama_tiny_sharded(rngs: nnx.Rngs) -> Llama:
    """:func:`llama_tiny` with sharding annotations on every kernel and the embedding.

    Column-parallel kernels (q, k, v, gate, up, lm_head) carry
    ``("fsdp", "tp")``, row-parallel ones (o, down) and the embedding
    ``("tp", "fsdp")``, as model zoos annotate them (tunix names its mesh axes
    the same way); the RMSNorm scales carry none and stay replicated. Plan it on
    a mesh with axes ``fsdp`` and ``tp``, or map the names with logical rules.

    Under a mesh with those axes (``jax.set_mesh``) its activations are
    constrained as trainers constrain them (``LlamaConfig.shard_activations``):
    the batch over ``data`` and ``fsdp``, heads, MLP units, vocabulary and the
    residual stream's sequence over ``tp``. With no mesh it computes exactly
    what :func:`llama_tiny` does.

    Example:
        >>> from nnx_introspect import abstract_model, mesh_config_report
        >>> model = abstract_model(llama_tiny_sharded)
        >>> report = mesh_config_report(model, "fsdp=2,tp=4")
        >>> report.ok, sum(1 for leaf in report.leaves if not leaf.replicated_over)
        (True, 58)
    """
    return Llama(_sharded(LLAMA_TINY), rngs=rngs)


def llama_7b_sharded(rngs: nnx.Rngs) -> Llama:
    """:func:`llama_7b` with sharding annotations (``fsdp``, ``tp``): a real split.

    The same annotations and activation constraints as
    :func:`llama_tiny_sharded`, and the same bfloat16 compute with float32
    parameters as :func:`llama_7b` (:func:`llama_7b_sharded_f32` computes in
    float32). On ``fsdp=2,tp=4`` the
    embedding, the head and the 224 layer kernels split 8 ways and the 65 norm
    scales stay replicated; on ``fsdp=3,tp=5`` nothing divides 4096 or 11008,
    and the plan lists 450 indivisible dimensions.

    Example:
        >>> from nnx_introspect import abstract_model, mesh_config_report
        >>> model = abstract_model(llama_7b_sharded)
        >>> good = mesh_config_report(model, "fsdp=2,tp=4")
        >>> good.ok, good.bytes_per_device
        (True, 3370139648)
        >>> bad = mesh_config_report(model, "fsdp=3,tp=5")
        >>> bad.ok, len(bad.errors)
        (False, 450)
    """
    return Llama(_sharded(LLAMA_7B), rngs=rngs)


def llama_7b_sharded_f32(rngs: nnx.Rngs) -> Llama:
    """:func:`llama_7b_sharded` computing in float32: activations and matmuls too.

    The example as it was before it computed in bfloat16
    (``LlamaConfig.dtype=None``): the same parameters, shardings and state
    bytes; only the step's activations (twice the bytes) and its matmuls'
    precision differ.

    Example:
        >>> from nnx_introspect import abstract_model, count_params
        >>> from nnx_introspect import mesh_config_report
        >>> model = abstract_model(llama_7b_sharded_f32)
        >>> count_params(model) == count_params(abstract_model(llama_7b_sharded))
        True
        >>> mesh_config_report(model, "fsdp=2,tp=4").bytes_per_device
        3370139648
    """
    return Llama(_sharded(LLAMA_7B_F32), rngs=rngs)


def llama_7b_sharded_remat(rngs: nnx.Rngs) -> Llama:
    """:func:`llama_7b_sharded` with each decoder layer rematerialised.

    ``LlamaConfig.remat``: the backward pass keeps each layer's input and
    recomputes its attention and MLP, instead of keeping their activations
    (the attention probabilities, ``f32[B, heads, T, T]`` per layer, above
    all). The same parameters and the same forward values; bfloat16 compute,
    float32 parameters, as :func:`llama_7b_sharded`.

    Example:
        >>> from nnx_introspect import abstract_model, count_params
        >>> count_params(abstract_model(llama_7b_sharded_remat))
        6738415616
    """
    return Llama(dataclasses.replace(_sharded(LLAMA_7B), remat=True), rngs=rngs)


def llama_7b_sharded_remat_f32(rngs: nnx.Rngs) -> Llama:
    """:func:`llama_7b_sharded_remat` computing in float32 (``LlamaConfig.dtype=None``).

    Example:
        >>> from nnx_introspect import abstract_model, count_params
        >>> model = abstract_model(llama_7b_sharded_remat_f32)
        >>> count_params(model) == count_params(abstract_model(llama_7b_sharded_remat))
        True
    """
    return Llama(dataclasses.replace(_sharded(LLAMA_7B_F32), remat=True), rngs=rngs)

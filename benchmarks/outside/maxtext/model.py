"""MaxText's decoder as NNX, at a ``global_parameter_scale``, layers scanned.

The model that made MaxText's published TPU tables (``tables.json``: the v5e
table of 2023-10-31 and the v5p table of 2023-12-15) is MaxText's decoder of
that time (``MaxText/layers/models.py`` at commit 76bd53b0f): one RMSNorm,
then attention (RoPE) and a ReLU MLP side by side on its output, their sum
added to the residual; tied embeddings, the logits ``embed.attend(y) /
sqrt(emb)``. Today's ``base.yml`` (commit 81c79260b) is a Llama-2 block
instead (two norms in sequence, a SiLU-gated MLP, an untied float32 logits
kernel); ``BASES`` holds both, as ``tables.json`` records them, and
:func:`scaled` applies ``pyconfig.get_individual_scales`` to either.

The layers are one stack of parameters with a leading layer axis, run by
``jax.lax.scan`` (MaxText's ``scan_layers=True``; MaxText keeps the layer axis
at ``param_scan_axis=1``, here it is axis 0), each layer under
``jax.checkpoint`` with MaxText's remat policy (``full``: nothing saved;
``minimal``: ``checkpoint_dots_with_no_batch_dims``). Parameters carry the
mesh axes MaxText's ``logical_axis_rules`` give them (``embed`` over
``fsdp``; heads, MLP units and vocabulary over ``tensor``) and activations
are constrained as its ``activation_*`` rules constrain them (batch over
``data`` and ``fsdp``, the residual's width over ``tensor``).

The factory the step compiles by name is :func:`from_env`: it reads the row
from ``MAXTEXT_ROW`` (``SCALE,BASE,REMAT,ATTENTION``), so the child process
that compiles a named topology builds the same model.
"""

import dataclasses
import math
import os
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import PartitionSpec

BATCH = ("data", "fsdp")
TENSOR = ("tensor",)


@dataclasses.dataclass(frozen=True)
class Base:
    """A ``base.yml``'s model shapes, before ``global_parameter_scale``."""

    emb: int
    heads: int
    kv_heads: int
    head_dim: int
    mlp: int
    layers: int
    vocab: int
    activations: tuple[str, ...]
    parallel_block: bool
    tied_logits: bool


BASES = {
    # MaxText/configs/base.yml at 76bd53b0f (2023-12-15), the tables' model
    "2023": Base(2560, 8, 8, 256, 8192, 16, 32768, ("relu",), True, True),
    # MaxText/configs/base.yml at 81c79260b (2025-08-13), decoder_block llama2
    "llama2": Base(
        2048, 16, 16, 128, 7168, 16, 32000, ("silu", "linear"), False, False
    ),
    # not MaxText's: the 2023 block at a width a test compiles in seconds
    "tiny": Base(256, 2, 2, 128, 512, 2, 1024, ("relu",), True, True),
}


def constrain(x: jax.Array, *dims: tuple[str, ...]) -> jax.Array:
    """``x`` split over the named axes of the current mesh that divide it (MaxText's
    ``nn.with_logical_constraint``: an axis already used, or absent, is left out)."""
    mesh = jax.sharding.get_abstract_mesh()
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes, strict=True))
    if not sizes:
        return x
    taken: set[str] = set()
    spec: list[Any] = []
    for size, names in zip(x.shape, dims, strict=True):
        used: list[str] = []
        for name in names:
            fits = name in sizes and not size % (
                math.prod(sizes[u] for u in used) * sizes.get(name, 1)
            )
            if fits and name not in taken:
                used.append(name)
        taken.update(used)
        spec.append(tuple(used) if used else None)
    out: jax.Array = jax.lax.with_sharding_constraint(x, PartitionSpec(*spec))
    return out


def individual_scales(scale: int) -> tuple[int, int, int, int]:
    """``pyconfig.get_individual_scales``: (emb, heads, mlp, layers) powers of 2."""
    log2 = int(math.log2(scale))
    if 2**log2 != scale:
        raise ValueError(f"global_parameter_scale {scale} is not a power of 2")
    base, rem = divmod(log2, 3)
    heads = base + int(rem > 0)
    return base + int(rem > 1), heads, heads, base


def scaled(base: Base, scale: int) -> Base:
    """``base`` at ``global_parameter_scale=scale``, as pyconfig scales it."""
    emb, heads, mlp, layers = individual_scales(scale)
    return dataclasses.replace(
        base,
        emb=base.emb * 2**emb,
        heads=base.heads * 2**heads,
        kv_heads=base.kv_heads * 2**heads,
        mlp=base.mlp * 2**mlp,
        layers=base.layers * 2**layers,
    )


def param_count(cfg: Base) -> int:
    """The parameters MaxText counts (``calculate_num_params_from_pytree``)."""
    attn = cfg.emb * (cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim
    attn += cfg.heads * cfg.head_dim * cfg.emb
    mlp = cfg.emb * cfg.mlp * (len(cfg.activations) + 1)
    norms = 1 if cfg.parallel_block else 2
    layer = attn + mlp + norms * cfg.emb
    logits = 0 if cfg.tied_logits else cfg.emb * cfg.vocab
    return cfg.layers * layer + cfg.vocab * cfg.emb + logits + cfg.emb


def _param(
    rngs: nnx.Rngs, shape: tuple[int, ...], axes: tuple[Any, ...]
) -> nnx.Param[jax.Array]:
    fan_in = shape[1] if len(shape) > 1 else 1
    value = jax.random.normal(rngs.params(), shape, jnp.float32) / math.sqrt(fan_in)
    return nnx.Param(value, out_sharding=axes)


def _rope(x: jax.Array) -> jax.Array:
    half = x.shape[-1] // 2
    freq = 10000.0 ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angle = jnp.arange(x.shape[1], dtype=jnp.float32)[:, None] * freq
    cos, sin = jnp.cos(angle)[None, :, None], jnp.sin(angle)[None, :, None]
    x1, x2 = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
    y = jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
    return y.astype(x.dtype)


def _norm(x: jax.Array, scale: jax.Array) -> jax.Array:
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + 1e-6)
    return (y * scale).astype(jnp.bfloat16)


class MaxTextDecoder(nnx.Module):
    """MaxText's decoder at one scale.

    ``remat``: ``full``, ``minimal`` or ``none``; ``attention``: ``xla``
    (``jax.nn.dot_product_attention``, XLA's own), ``flash`` (the Pallas
    flash kernel the tables ran) or ``splash`` (today's MaxText's), the
    kernels under ``shard_map`` (:mod:`attention`).

    Example:
        >>> cfg = scaled(BASES["2023"], 1)
        >>> (cfg.emb, cfg.heads, cfg.mlp, cfg.layers)
        (2560, 8, 8192, 16)
    """

    def __init__(
        self, cfg: Base, remat: str, attention: str, *, rngs: nnx.Rngs
    ) -> None:
        with nnx.use_eager_sharding(False):  # the annotations only, as metadata
            self._build(cfg, remat, attention, rngs)

    def _build(self, cfg: Base, remat: str, attention: str, rngs: nnx.Rngs) -> None:
        e, h, k, d = cfg.emb, cfg.heads, cfg.kv_heads, cfg.head_dim
        f, n = cfg.mlp, cfg.layers
        self.cfg, self.remat, self.attention = cfg, remat, attention
        self.embed = _param(rngs, (cfg.vocab, e), ("tensor", "fsdp"))
        layer = {
            "norm": nnx.Param(jnp.ones((n, e)), out_sharding=(None, "fsdp")),
            "q": _param(rngs, (n, e, h, d), (None, "fsdp", "tensor", None)),
            "k": _param(rngs, (n, e, k, d), (None, "fsdp", "tensor", None)),
            "v": _param(rngs, (n, e, k, d), (None, "fsdp", "tensor", None)),
            "o": _param(rngs, (n, h, d, e), (None, "tensor", None, "fsdp")),
            "wo": _param(rngs, (n, f, e), (None, "tensor", "fsdp")),
        }
        for i in range(len(cfg.activations)):
            layer[f"wi_{i}"] = _param(rngs, (n, e, f), (None, "fsdp", "tensor"))
        if not cfg.parallel_block:
            layer["mlp_norm"] = nnx.Param(jnp.ones((n, e)), out_sharding=(None, "fsdp"))
        self.layers = nnx.Dict(layer)
        self.final_norm = nnx.Param(jnp.ones((e,)), out_sharding=("fsdp",))
        if not cfg.tied_logits:
            self.logits = _param(rngs, (e, cfg.vocab), ("fsdp", "tensor"))

    def _attend(self, q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        if self.attention in ("flash", "splash"):
            from benchmarks.outside.maxtext.attention import attend

            return attend(self.attention, q, k, v)
        # MaxText folds 1/sqrt(head_dim) into the query kernel's initialiser
        return jax.nn.dot_product_attention(q, k, v, scale=1.0, is_causal=True)

    def _layer(self, x: jax.Array, p: dict[str, jax.Array]) -> jax.Array:
        cfg = self.cfg
        x = constrain(x, BATCH, (), TENSOR)
        h = _norm(x, p["norm"])
        h = constrain(h, BATCH, (), TENSOR)
        bf = {name: w.astype(jnp.bfloat16) for name, w in p.items()}
        heads = (BATCH, (), TENSOR, ())
        q = constrain(_rope(jnp.einsum("bse,ehd->bshd", h, bf["q"])), *heads)
        k = constrain(_rope(jnp.einsum("bse,ehd->bshd", h, bf["k"])), *heads)
        v = constrain(jnp.einsum("bse,ehd->bshd", h, bf["v"]), *heads)
        att = constrain(self._attend(q, k, v), *heads)
        att_out = constrain(
            jnp.einsum("bshd,hde->bse", att, bf["o"]), BATCH, (), TENSOR
        )
        if not cfg.parallel_block:
            x = x + att_out
            h = constrain(_norm(x, p["mlp_norm"]), BATCH, (), TENSOR)
        acts = []
        for i, name in enumerate(cfg.activations):
            wi = constrain(
                jnp.einsum("bse,ef->bsf", h, bf[f"wi_{i}"]), BATCH, (), TENSOR
            )
            acts.append(
                {"relu": jax.nn.relu, "silu": jax.nn.silu}.get(name, lambda a: a)(wi)
            )
        hidden = constrain(math.prod(acts[1:], start=acts[0]), BATCH, (), TENSOR)
        mlp_out = constrain(
            jnp.einsum("bsf,fe->bse", hidden, bf["wo"]), BATCH, (), TENSOR
        )
        out = x + mlp_out + att_out if cfg.parallel_block else x + mlp_out
        return constrain(out, BATCH, (), TENSOR)

    def __call__(self, tokens: jax.Array) -> jax.Array:
        """Logits ``[batch, length, vocab]`` (float32) of ``tokens``."""
        cfg = self.cfg
        x = jnp.take(self.embed[...], tokens, axis=0).astype(jnp.bfloat16)
        policy = {
            "full": jax.checkpoint_policies.nothing_saveable,
            "minimal": jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims,
        }.get(self.remat)
        body = self._layer
        if self.remat != "none":
            body = jax.checkpoint(self._layer, policy=policy, prevent_cse=False)
        params = {name: leaf[...] for name, leaf in self.layers.items()}
        x, _ = jax.lax.scan(lambda c, p: (body(c, p), None), x, params)
        y = constrain(_norm(x, self.final_norm[...]), BATCH, (), TENSOR)
        if cfg.tied_logits:
            w = self.embed[...].astype(jnp.bfloat16)
            logits = jnp.einsum("bse,ve->bsv", y, w) / jnp.sqrt(jnp.float32(cfg.emb))
        else:
            logits = jnp.einsum("bse,ev->bsv", y.astype(jnp.float32), self.logits[...])
        return constrain(logits.astype(jnp.float32), BATCH, (), TENSOR)


def from_env(rngs: nnx.Rngs) -> MaxTextDecoder:
    """The row's model: ``MAXTEXT_ROW=SCALE,BASE,REMAT,ATTENTION``.

    For example ``32,2023,full,xla``: the 32B of the tables, remat ``full``,
    XLA's attention.
    """
    scale, base, remat, attention = os.environ.get(
        "MAXTEXT_ROW", "1,2023,full,xla"
    ).split(",")
    return MaxTextDecoder(scaled(BASES[base], int(scale)), remat, attention, rngs=rngs)

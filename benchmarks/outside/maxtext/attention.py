"""MaxText's TPU attention kernels under ``shard_map``, for :mod:`model`.

``flash``: the kernel the published tables ran (``attention='flash'`` at
MaxText commit 76bd53b0f, ``MaxText/layers/attentions.py``):
``jax.experimental.pallas.ops.tpu.flash_attention`` with its block sizes
(512, ``block_b`` 2, ``block_q_dq`` 1024, ``block_k_dq`` 256), causal, on
``[batch, heads, length, head_dim]`` split as MaxText's logical rules split it
(batch over ``data`` and ``fsdp``, heads over ``tensor``). MaxText passes
segment ids (all ones on its synthetic data); here there are none.

``splash``: today's MaxText ``attention='flash'``: the splash kernel
(``jax.experimental.pallas.ops.tpu.splash_attention``) with ``base.yml``'s
512-wide blocks, a causal mask, over the same split.
"""

import jax
from jax.sharding import PartitionSpec as P

_SPEC = P(("data", "fsdp"), "tensor", None, None)


def _present(spec: P) -> P:
    names = set(jax.sharding.get_abstract_mesh().axis_names)
    entries = []
    for entry in spec:
        kept = tuple(
            n for n in (entry if isinstance(entry, tuple) else (entry,)) if n in names
        )
        entries.append(kept if kept else None)
    return P(*entries)


def _flash(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    s = q.shape[2]
    sizes = fa.BlockSizes(
        block_q=min(512, s),
        block_k_major=min(512, s),
        block_k=min(512, s),
        block_b=min(2, q.shape[0]),
        block_q_major_dkv=min(512, s),
        block_k_major_dkv=min(512, s),
        block_q_dkv=min(512, s),
        block_k_dkv=min(512, s),
        block_q_dq=min(1024, s),
        block_k_dq=min(256, s),
        block_k_major_dq=min(512, s),
    )
    out: jax.Array = fa.flash_attention(
        q, k, v, causal=True, sm_scale=1.0, block_sizes=sizes
    )
    return out


def _splash(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    from jax.experimental.pallas.ops.tpu.splash_attention import (
        splash_attention_kernel as splash,
    )
    from jax.experimental.pallas.ops.tpu.splash_attention import (
        splash_attention_mask as masks,
    )

    heads, s = q.shape[1], q.shape[2]
    mask = masks.MultiHeadMask([masks.CausalMask((s, s))] * heads)
    sizes = splash.BlockSizes(
        block_q=512,
        block_kv=512,
        block_kv_compute=512,
        block_q_dkv=512,
        block_kv_dkv=512,
        block_kv_dkv_compute=512,
        block_q_dq=512,
        block_kv_dq=512,
    )
    kernel = splash.make_splash_mha(
        mask, head_shards=1, q_seq_shards=1, block_sizes=sizes
    )
    out: jax.Array = jax.vmap(kernel)(q, k, v)
    return out


def attend(kind: str, q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    """Causal attention of ``[b, s, h, d]`` q, k, v by ``kind`` (``flash``/``splash``).

    Example:
        >>> _SPEC
        PartitionSpec(('data', 'fsdp'), 'tensor', None, None)
    """
    kernel = {"flash": _flash, "splash": _splash}[kind]
    spec = _present(_SPEC)
    run = jax.shard_map(kernel, in_specs=(spec,) * 3, out_specs=spec, check_vma=False)
    q, k, v = (x.transpose(0, 2, 1, 3) for x in (q, k, v))
    return run(q, k, v).transpose(0, 2, 1, 3)

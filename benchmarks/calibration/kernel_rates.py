"""Time JAX's TPU Pallas kernels on the chip: splash, flash, megablox gmm/tgmm.

Each kernel runs ``R`` times inside one program (a ``fori_loop`` whose carry
takes one element of each output, so no call is dispatched alone and none can
be dropped: a Pallas call is opaque to XLA's simplifier), and the median of
10 such runs over ``R`` is one call's time. ``rule_flops`` is the FLOPs of
the blocks the kernel computes (attention: ``4·B·H·bq·bk·D`` per computed
block, a causal mask's blocks counted; backward ``3.5x`` the forward, a rule
of thumb recorded as such), ``xla_cost`` what XLA's cost analysis says of the
program (a kernel's own ``pl.CostEstimate`` where it has one: flash attention's
counts every block, causal or not; splash attention carries none). The
compiled programs' text is kept too (``kernel_hlo``).

Run on the TPU machine (jax only; nothing else is imported)::

    OUT=DIR python3 benchmarks/calibration/kernel_rates.py

With ``BLOCKS=1`` it times only splash attention (MHA, the first four
shapes) at the block size ``BLOCK`` (default 512), forward and forward +
backward with every gradient used, so that no backward kernel is dropped
(``splash_fwd_bwd_all``, its rule FLOPs 4.5x the forward's: forward 4, dq 6,
dkv 8 QKD a block)::

    for b in 128 256 512; do
        BLOCKS=1 BLOCK=$b OUT=DIR python3 benchmarks/calibration/kernel_rates.py
    done

Records: ``data/kernel-rates-v5e-0.0.42.1.json`` (one v5e chip, libtpu
0.0.42.1, 2026-12-07) and ``data/kernel-hlo-v5e-0.0.42.1.json.gz``; with
``BLOCKS=1``, ``data/kernel-rates-blocks-b{128,256,512}-v5e-0.0.42.1.json``
and ``data/kernel-hlo-blocks-b*-v5e-0.0.42.1.json.gz``, whose forward times fit
``computed blocks x 0.65 us + FLOPs at the matrix unit's rate`` within 3% for
nine of twelve (docs/accuracy.md, "Pallas kernels").
"""

import functools
import gzip
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.experimental.pallas.ops.tpu.megablox
import jax.numpy as jnp
import numpy as np
from jax.experimental.pallas.ops.tpu import flash_attention as fa
from jax.experimental.pallas.ops.tpu.splash_attention import (
    splash_attention_kernel as sk,
)
from jax.experimental.pallas.ops.tpu.splash_attention import (
    splash_attention_mask as sm,
)

_MEGABLOX = sys.modules["jax.experimental.pallas.ops.tpu.megablox.gmm"]
OUT = os.environ.get("OUT", "/tmp/out")
R = 10
KEY = jax.random.PRNGKey(0)
SPLASH = [  # B, H, S, D, causal, query heads per KV head
    (4, 16, 2048, 128, True, 1),
    (4, 16, 2048, 128, False, 1),
    (2, 16, 4096, 128, True, 1),
    (1, 32, 8192, 128, True, 1),
    (4, 32, 2048, 128, True, 4),
    (8, 8, 2048, 64, False, 1),
]
FLASH = [(4, 16, 2048, 128, True), (4, 16, 2048, 128, False), (2, 16, 4096, 128, True)]
GMM = [(32768, 2048, 768, 8), (65536, 1024, 1024, 16), (16384, 4096, 1024, 4)]
BACKWARD = 3.5  # the rule of thumb the records' fwd+bwd FLOPs use
BLOCKS = os.environ.get("BLOCKS") == "1"  # splash alone, at BLOCK, every gradient
BLOCK = int(os.environ.get("BLOCK", "512"))


def looped(f: Callable[..., Any]) -> Any:
    """R calls of f in one program, each fed by the last (no dispatch per call)."""

    def run(x: Any, *rest: Any) -> Any:
        def body(i: Any, x: Any) -> Any:
            o = f(x, *rest)
            if isinstance(o, tuple) and BLOCKS:  # every gradient used
                keep = sum(t.ravel()[0].astype(jnp.float32) for t in o)
                return x + (keep * 0).astype(x.dtype)
            o = o[0] if isinstance(o, tuple) else o
            return x + (o.ravel()[0] * 0).astype(x.dtype)

        return jax.lax.fori_loop(0, R, body, x)

    return jax.jit(run)


def timeit(f: Callable[..., Any], *args: Any, n: int = 10) -> tuple[Any, ...]:
    """One call's median and minimum seconds, XLA's cost analysis, the text."""
    c = looped(f).lower(*args).compile()
    cost = c.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    for _ in range(4):
        jax.block_until_ready(c(*args))
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        jax.block_until_ready(c(*args))
        ts.append((time.perf_counter() - t) / R)
    kept = ("flops", "bytes accessed", "transcendentals")
    figures = {k: float(v) for k, v in (cost or {}).items() if k in kept}
    return float(np.median(ts)), float(np.min(ts)), figures, c.as_text()


def causal_blocks(seq: int, bq: int, bk: int) -> int:
    """The (query block, key block) pairs a causal mask computes."""
    return sum(
        1
        for i in range(seq // bq)
        for j in range(seq // bk)
        if j * bk <= (i + 1) * bq - 1
    )


rows: list[dict[str, Any]] = []
texts: dict[str, str] = {}


def record(
    name: str,
    shape: dict[str, Any],
    r: tuple[Any, ...],
    flops: float,
    extra: dict[str, Any],
    keep_text: bool = True,
) -> None:
    med, mn, cost, text = r
    rows.append(
        dict(
            kernel=name,
            shape=shape,
            median_s=med,
            min_s=mn,
            rule_flops=flops,
            xla_cost=cost,
            **extra,
        )
    )
    if keep_text:
        texts[f"{name}-{'-'.join(str(v) for v in shape.values())}"] = text
    rate = flops / med / 1e12
    print(name, shape, f"{med * 1e3:.3f} ms", f"{rate:.1f} TF/s (rule)", cost)


def splash(b: int, h: int, s: int, d: int, causal: bool, gqa: int) -> None:
    bq = bk = BLOCK
    blocks = sk.BlockSizes(
        block_q=bq,
        block_kv=bk,
        block_kv_compute=bk,
        block_q_dkv=bq,
        block_kv_dkv=bk,
        block_kv_dkv_compute=bk,
        block_q_dq=bq,
        block_kv_dq=bk,
    )
    mask = sm.CausalMask((s, s)) if causal else sm.FullMask((s, s))
    heads = sm.MultiHeadMask([mask] * h)
    make = sk.make_splash_mha if gqa == 1 else sk.make_splash_mqa
    kern = make(heads, block_sizes=blocks, head_shards=1, q_seq_shards=1)
    kvh = h // gqa
    q = jax.random.normal(KEY, (b, h, s, d), jnp.bfloat16)
    k = jax.random.normal(KEY, (b, kvh, s, d), jnp.bfloat16)

    def attn(q: Any, k: Any, v: Any) -> Any:
        if gqa == 1:
            return jax.vmap(kern)(q, k, v)
        # splash MQA shares one KV head: GQA is MQA per group of query heads
        qg = q.reshape(b, kvh, gqa, s, d)
        return jax.vmap(jax.vmap(kern))(qg, k, v).reshape(b, h, s, d)

    def loss(q: Any, k: Any, v: Any) -> Any:
        return attn(q, k, v).astype(jnp.float32).sum()

    n = causal_blocks(s, bq, bk) if causal else (s // bq) * (s // bk)
    fwd = 4 * b * h * bq * bk * d * n
    shape = dict(B=b, H=h, S=s, D=d, causal=causal, gqa=gqa)
    if BLOCKS:
        shape["block"] = bq
    extra = dict(blocks=n, block=bq)
    record("splash_fwd", shape, timeit(attn, q, k, k), fwd, extra, keep_text=False)
    grad = jax.grad(loss, argnums=(0, 1, 2))
    if BLOCKS:
        record("splash_fwd_bwd_all", shape, timeit(grad, q, k, k), fwd * 4.5, extra)
    else:
        record("splash_fwd_bwd", shape, timeit(grad, q, k, k), fwd * BACKWARD, extra)


def flash(b: int, h: int, s: int, d: int, causal: bool) -> None:
    q = jax.random.normal(KEY, (b, h, s, d), jnp.bfloat16)
    sizes = fa.BlockSizes(
        block_q=512,
        block_k_major=512,
        block_k=512,
        block_b=1,
        block_q_major_dkv=512,
        block_k_major_dkv=512,
        block_k_dkv=512,
        block_q_dkv=512,
        block_k_major_dq=512,
        block_k_dq=512,
        block_q_dq=512,
    )
    attn = functools.partial(fa.flash_attention, causal=causal, block_sizes=sizes)

    def loss(q: Any, k: Any, v: Any) -> Any:
        return attn(q, k, v).astype(jnp.float32).sum()

    n = causal_blocks(s, 512, 512) if causal else (s // 512) ** 2
    fwd = 4 * b * h * 512 * 512 * d * n
    shape = dict(B=b, H=h, S=s, D=d, causal=causal)
    record("flash_fwd", shape, timeit(attn, q, q, q), fwd, dict(blocks=n))
    grad = jax.grad(loss, argnums=(0, 1, 2))
    record(
        "flash_fwd_bwd", shape, timeit(grad, q, q, q), fwd * BACKWARD, dict(blocks=n)
    )


def grouped(m: int, k: int, n: int, g: int) -> None:
    lhs = jax.random.normal(KEY, (m, k), jnp.bfloat16)
    rhs = jax.random.normal(KEY, (g, k, n), jnp.bfloat16)
    dout = jax.random.normal(KEY, (m, n), jnp.bfloat16)
    sizes = jnp.full((g,), m // g, jnp.int32)
    tiling = (512, 512, 512)
    shape = dict(M=m, K=k, N=n, G=g)

    def gmm(a: Any, b: Any, s: Any) -> Any:
        return _MEGABLOX.gmm(
            a, b, s, preferred_element_type=jnp.bfloat16, tiling=tiling
        )

    def tgmm(a: Any, b: Any, s: Any) -> Any:
        return _MEGABLOX.tgmm(
            a.T, b, s, preferred_element_type=jnp.bfloat16, tiling=tiling
        )

    record("gmm", shape, timeit(gmm, lhs, rhs, sizes), 2 * m * k * n, {})
    record("tgmm", shape, timeit(tgmm, lhs, dout, sizes), 2 * m * k * n, {})


def main() -> None:
    if BLOCKS:
        for case in SPLASH[:4]:
            splash(*case)
        _write(f"_b{BLOCK}")
        return
    for case in SPLASH:
        splash(*case)
    for flash_case in FLASH:
        flash(*flash_case)
    for gmm_case in GMM:
        grouped(*gmm_case)
    _write("")


def _write(suffix: str) -> None:
    with open(f"{OUT}/kernel_rates{suffix}.json", "w") as fh:
        json.dump(rows, fh, indent=1)
    with gzip.open(f"{OUT}/kernel_hlo{suffix}.json.gz", "wt") as fh:
        json.dump(texts, fh)


if __name__ == "__main__":
    main()

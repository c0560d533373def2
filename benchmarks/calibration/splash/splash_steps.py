"""Splash-attention training steps on the chip (``measure=5``) and deviceless.

Three models of ``splash_models.py`` (attention by splash attention at its
default block sizes under ``shard_map``, as MaxText's ``attention='flash'``,
and a GELU MLP; AdamW), each run on the chip and compiled deviceless for
``v5e-1`` in another process, so the two compiles' memory can be held
against each other to the byte and the estimate against the run. On the TPU
machine, with the project's dependencies on ``PYTHONPATH`` and this folder
too::

    python3 splash_steps.py chip OUT.jsonl
    JAX_PLATFORMS=cpu python3 splash_steps.py deviceless OUT.jsonl

Record: ``data/splash-steps-v5e-0.0.42.1.jsonl`` (2026-12-07).
"""

import json
import os
import sys
import time

import jax
import jax.numpy as jnp

from nnx_introspect import step_memory_report

MODE = sys.argv[1]  # chip | deviceless
CASES = [
    c
    for c in [("splash_a", 4, 2048), ("splash_b", 2, 4096), ("splash_c", 8, 1024)]
    if c[0] in os.environ.get("CASES", "splash_a,splash_b,splash_c")
]
out = open(sys.argv[2], "a")  # noqa: SIM115 - appended to, row by row
for name, b, s in CASES:
    x = jax.ShapeDtypeStruct(
        (b, s, {"splash_a": 1024, "splash_b": 768, "splash_c": 512}[name]), jnp.bfloat16
    )
    t = time.time()
    kw = dict(loss="splash_models:loss", optimizer="adamw")
    if MODE == "chip":
        r = step_memory_report(
            f"splash_models:{name}", "fsdp=1", x, measure=5, cache=False, **kw
        )
    else:
        r = step_memory_report(
            f"splash_models:{name}", "fsdp=1", x, topology="v5e-1", cache=False, **kw
        )
    m = r.memory
    row = dict(
        mode=MODE,
        case=name,
        batch=b,
        seq=s,
        seconds=time.time() - t,
        arguments=m.argument_bytes,
        outputs=m.output_bytes,
        temps=m.temp_bytes,
        aliased=m.alias_bytes,
        flops=r.flops,
        estimate=None
        if r.roofline is None or r.roofline.time is None
        else r.roofline.time.seconds,
        words=None if r.roofline is None else r.roofline.label,
        measured=None if r.measured is None else list(r.measured.seconds),
    )
    out.write(json.dumps(row) + "\n")
    out.flush()
    print(
        json.dumps(
            {
                k: row[k]
                for k in ("mode", "case", "temps", "estimate", "measured", "seconds")
            }
        ),
        flush=True,
    )

"""Each instruction's time on the chip, from a JAX profile: ``timecal.py``'s profiler.

With ``TIMECAL_PROFILE=1`` in its environment, ``timecal.py chip`` runs each
case inside :func:`jax.profiler.trace` and :func:`summarize` reads the trace
back: for every device plane (``/device:TPU:0``), the programs it ran (the
``XLA Modules`` line: each module's runs and total time) and, inside them,
every instruction (the ``XLA Ops`` line, named as in the optimized HLO): its
runs and total time, each attributed to the module whose run it falls in.
That is the chip's own time of each fusion, held against the time model's
estimate of the same instruction (``timefit.py ops``).

Only the standard library and JAX are imported.
"""

import bisect
import glob
import os
from typing import Any


def summarize(trace_dir: str) -> dict[str, Any]:
    """Per device plane: modules and instructions, with runs and total ns."""
    from jax.profiler import ProfileData

    files = sorted(
        glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)
    )
    out: dict[str, Any] = {"files": files, "planes": {}}
    for path in files:
        data = ProfileData.from_file(path)
        for plane in data.planes:
            lines = {line.name: list(line.events) for line in plane.lines}
            if "TPU" not in plane.name and "GPU" not in plane.name:
                out["planes"].setdefault(plane.name, {"lines": sorted(lines)})
                continue
            modules_line = next((k for k in lines if "Module" in k), None)
            ops_line = next((k for k in lines if k == "XLA Ops"), None)
            runs = sorted(
                (e.start_ns, e.start_ns + e.duration_ns, e.name)
                for e in lines.get(modules_line or "", [])
            )
            starts = [r[0] for r in runs]
            modules: dict[str, list[float]] = {}
            for s, e, name in runs:
                found = modules.setdefault(name, [0, 0.0])
                found[0] += 1
                found[1] += e - s
            ops: dict[str, dict[str, list[float]]] = {}
            for event in lines.get(ops_line or "", []):
                i = bisect.bisect_right(starts, event.start_ns) - 1
                module = runs[i][2] if i >= 0 and event.start_ns <= runs[i][1] else "?"
                found = ops.setdefault(module, {}).setdefault(event.name, [0, 0.0])
                found[0] += 1
                found[1] += event.duration_ns
            out["planes"][plane.name] = {
                "lines": {k: len(v) for k, v in lines.items()},
                "modules": modules,
                "ops": ops,
            }
    return out

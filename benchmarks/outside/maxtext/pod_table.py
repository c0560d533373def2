"""MaxText's published TPU tables against the deviceless step-time estimate (issue 54).

For each row of ``tables.json`` (MaxText's v5p table: calibration rows; its
v5e table: check rows), the training step of :mod:`model` at that row's
``global_parameter_scale``, remat policy, mesh (ICI ``fsdp`` x ``tensor``
within a slice, DCN ``data`` over the slices), per-device batch and
``LIBTPU_INIT_ARGS`` (``compiler_flags=``) is compiled deviceless through
:func:`nnx_introspect.step_memory_report` (AdamW, next-token loss,
``topology="v5p-128"``, ``"2xv5e-256"``...). One JSON line per row goes to
``results.jsonl`` as soon as it is compiled: the memory verdict, our step
time, MaxText's (its FLOPs formula over its TFLOP/s per chip, from
``tables.json``), the ratio, and whether the row calibrates or checks::

    PYTHONPATH=src:. python benchmarks/outside/maxtext/pod_table.py run \\
        v5p-32b-1x v5e-16b-1x [--attention xla] [--base 2023]
    PYTHONPATH=src:. python benchmarks/outside/maxtext/pod_table.py table

``run`` with no row names runs every row not yet in ``results.jsonl``,
smallest first; ``table`` prints the markdown table docs/accuracy.md quotes.
``--base llama2`` compiles today's ``base.yml`` block instead of the one the
tables ran; its lines are kept in ``results.jsonl`` but left out of the
table, whose MaxText times are of the tables' model.
Public API only.
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse
import json
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
TABLES = HERE / "tables.json"
RESULTS = HERE / "results.jsonl"
FACTORY = "benchmarks.outside.maxtext.model:from_env"


def load_rows() -> list[dict[str, Any]]:
    """Every published row of ``tables.json``, each with its table's settings."""
    data = json.loads(TABLES.read_text())
    return [
        {**table["settings"][row["model"]], **row, "table": name, "kind": table["kind"]}
        for name, table in data["tables"].items()
        for row in table["rows"]
    ]


def load_results(path: Path = RESULTS) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The latest result of each (row id, attention, base) in ``results.jsonl``."""
    if not path.exists():
        return {}
    found = (json.loads(line) for line in path.read_text().splitlines() if line)
    return {(r["id"], r["attention"], r["base"]): r for r in found}


def mesh_of(row: dict[str, Any]) -> str:
    """The row's mesh: ``data`` over the slices, ``fsdp`` x ``tensor`` within one."""
    tensor = row["ici_tensor_parallelism"]
    return (
        f"data={row['slices']},fsdp={row['chips_per_slice'] // tensor},tensor={tensor}"
    )


def run_row(row: dict[str, Any], attention: str, base: str) -> dict[str, Any]:
    """Compile ``row``'s step deviceless and return its result line."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    from nnx_introspect import step_memory_report

    os.environ["MAXTEXT_ROW"] = (
        f"{row['global_parameter_scale']},{base},{row['remat_policy']},{attention}"
    )
    chips = row["chips_per_slice"] * row["slices"]
    batch = jax.ShapeDtypeStruct(
        (row["per_device_batch_size"] * chips, row["max_target_length"]), jnp.int32
    )
    topology = row["topology"]
    if row["slices"] > 1:
        topology = f"{row['slices']}x{topology}"
    start = time.perf_counter()
    result: dict[str, Any] = {"id": row["id"], "kind": row["kind"], "base": base}
    result |= {"attention": attention, "topology": topology, "mesh": mesh_of(row)}
    try:
        report = step_memory_report(
            FACTORY,
            mesh_of(row),
            batch,
            loss="lm",
            optimizer="adamw",
            topology=topology,
            batch_spec=P(("data", "fsdp", "tensor")),
            compiler_flags=row["libtpu_init_args"],
            cache=False,
        )
    except (ValueError, TypeError, RuntimeError) as error:
        result["error"] = f"{type(error).__name__}: {error}"[:2000]
    else:
        roof = report.roofline
        ours = None if roof is None else roof.seconds
        result |= {
            "fits": report.fits(),
            "peak_bytes": report.peak_bytes,
            "compile_seconds": round(report.compilation.seconds, 1),
            "ours_seconds": ours,
            "compute_seconds": None if roof is None else roof.compute_seconds,
            "comm_seconds": None
            if roof is None
            else {"+".join(t.axes): t.seconds for t in roof.comm},
            "memory_seconds": None if roof is None else roof.memory_seconds,
            "bounds": None if roof is None else [roof.low_seconds, roof.high_seconds],
            "assumptions": None if roof is None else list(roof.assumptions),
            "maxtext_seconds": row["maxtext_step_seconds"],
            "ratio": None if ours is None else ours / row["maxtext_step_seconds"],
        }
    result["wall_seconds"] = round(time.perf_counter() - start, 1)
    return result


def table(rows: list[dict[str, Any]], results: dict[tuple[str, str, str], Any]) -> str:
    """The pod table in markdown: every compiled row, in ``tables.json`` order."""
    lines = [
        "| Row | Topology | Slices | Remat | Attention | Fits | MaxText (s) "
        "| Ours (s) | Ours / MaxText | Row is | Compile (s) |",
        "| :--- | :--- | ---: | :--- | :--- | :--- | ---: | ---: | ---: | :--- "
        "| ---: |",
    ]
    for row in rows:
        for (rid, attention, base), found in results.items():
            if rid != row["id"] or found.get("ours_seconds") is None:
                continue
            if base != "2023":  # another model than the one MaxText's time is of
                continue
            ours, maxtext = found["ours_seconds"], row["maxtext_step_seconds"]
            lines.append(
                f"| {rid} | {row['topology']} | {row['slices']} "
                f"| {row['remat_policy']} "
                f"| {attention} | {'yes' if found['fits'] else 'NO'} | {maxtext:.2f} "
                f"| {ours:.2f} | {ours / maxtext:.2f} | {row['kind']} "
                f"| {found['compile_seconds']:.0f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("run", "table"))
    parser.add_argument("rows", nargs="*", help="row ids (tables.json); all if none")
    parser.add_argument(
        "--attention", choices=("xla", "flash", "splash"), default="xla"
    )
    parser.add_argument("--base", choices=("2023", "llama2"), default="2023")
    args = parser.parse_args()
    rows = load_rows()
    if args.what == "table":
        print(table(rows, load_results()))
        return
    done = {
        rid for rid, attention, base in load_results() if attention == args.attention
    }
    chosen = (
        [r for r in rows if r["id"] in args.rows]
        if args.rows
        else sorted(
            (r for r in rows if r["id"] not in done),
            key=lambda r: (
                r["global_parameter_scale"],
                r["chips_per_slice"] * r["slices"],
            ),
        )
    )
    for row in chosen:
        result = run_row(row, args.attention, args.base)
        print(json.dumps(result), flush=True)
        with RESULTS.open("a") as out:
            out.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()

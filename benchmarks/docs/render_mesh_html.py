"""Render a mesh plan's HTML page in headless Chromium and save a screenshot.

Not part of the test suite (it needs a browser): run it after changing the HTML
output and look at the PNG. On Debian: ``apt-get install chromium``.

    python benchmarks/docs/render_mesh_html.py [--out DIR] [--chromium PATH]
        [--mesh fsdp=2,tp=4] [--budget-mib 40]

Writes ``DIR/mesh.html`` (the annotated small Llama, ``llama_tiny_sharded``,
with AdamW on the mesh, against the budget) and ``DIR/mesh.png`` (the first
screen); exits 1 if Chromium fails. ``--mesh fsdp=3,tp=5`` shows a plan with
problems.
"""

import os

# The CPU is all this measures; with libtpu installed, JAX would probe for a TPU.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nnx_introspect as ni
from nnx_introspect.examples import llama_tiny_sharded


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp()))
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    parser.add_argument("--mesh", default="fsdp=2,tp=4")
    parser.add_argument("--budget-mib", type=int, default=40)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    model = ni.abstract_model(llama_tiny_sharded)
    report = ni.mesh_config_report(model, args.mesh, optimizer="adamw")
    page = args.out / "mesh.html"
    budget = args.budget_mib * 2**20
    page.write_text(report.to_html(max_device_bytes=budget), encoding="utf-8")
    png = args.out / "mesh.png"
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run(
            [
                args.chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                f"--user-data-dir={profile}",
                "--window-size=1400,1600",
                f"--screenshot={png}",
                page.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    if done.returncode != 0 or not png.exists():
        sys.stderr.write(done.stderr)
        return 1
    print(f"{page}\n{png} ({png.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

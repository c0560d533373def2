"""Render a ``--fit`` report's HTML page in headless Chromium and save a screenshot.

Not part of the test suite (it needs a browser): run it after changing the fit
page's chart and look at the PNG. On Debian: ``apt-get install chromium``.

    python benchmarks/docs/render_fit_html.py [--out DIR] [--chromium PATH]

Writes ``DIR/fit.html`` and ``DIR/fit.png`` (1400 px wide) for a search shaped
like tunix's Llama-3.2-1B at B=32, T=2,048 on ``h100-8`` (issue 28: seven
compiled rows, long remat names, one row just under the budget and one just
over it); the figures are illustrative, no compile runs. Exits 1 if Chromium
fails.
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nnx_introspect as ni
from nnx_introspect._sweep.fit.report import FitStatus

GIB = 2**30
MESH = (("fsdp", 4), ("tp", 2))


def search() -> ni.FitSearch:
    """Seven compiled rows and two not compiled, the budget 59.33 GiB."""
    d, n, o = (
        "dots_saveable",
        "dots_with_no_batch_dims_saveable",
        "nothing_saveable",
    )

    def row(remat: str, policy: str, k: int, gib: float, s: float) -> ni.FitRow:
        peak = int(gib * GIB)
        status: FitStatus = "fits" if peak <= int(59.33 * GIB) else "does not fit"
        pairs = ((remat, policy),) if remat else ()
        return ni.FitRow(MESH, pairs, k, status, peak_bytes=peak, seconds=(s, s * 1.5))

    rows = (
        row("", "", 1, 60.57, 0.333),
        row("DecoderLayer", d, 1, 60.15, 0.341),
        row("DecoderLayer", n, 1, 36.39, 0.368),
        row("DecoderLayer", o, 1, 30.10, 0.441),
        row("Attention", d, 1, 67.37, 0.335),
        row("", "", 2, 50.30, 0.316),
        row("Attention", n, 1, 59.20, 0.352),
        ni.FitRow(MESH, (("DecoderLayer", o),), 2, "not compiled", why="dominated"),
    )
    chosen = rows[5]
    return ni.FitSearch(
        "tunix_llama:model",
        ("int32[32,2048]",),
        "h100-8",
        int(59.33 * GIB),
        "80 GiB H100 less the runtime's reserve",
        rows,
        chosen,
        "DecoderLayer",
        "DecoderLayer: 31.2 GiB of kept activations under its 16 instances",
        7,
        312.0,
        "a spawn process pool of 2 workers",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp()))
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    page = args.out / "fit.html"
    page.write_text(search().to_html(), encoding="utf-8")
    png = args.out / "fit.png"
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
                "--window-size=1400,1400",
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

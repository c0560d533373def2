"""What the time model adds to a report's wall time.

``PYTHONPATH=src:. python benchmarks/speed/bench_timemodel.py`` reads every
program the v5e chip ran (``benchmarks/calibration/data/timecal-chip/``: each
case's report wall time there, and each program's optimized HLO) and times,
here, what the time model adds to a report:
:func:`nnx_introspect._xla.program_work` over the parsed program (the parse
itself is shared with the traffic and collectives readers, which ran before
it) and :func:`~nnx_introspect._roofline.timing.program_time`. It prints the
added seconds against the case's report on the chip, largest share first.
"""

import gzip
import json
import tarfile
import time
from pathlib import Path

from nnx_introspect._accelerators import hardware_for
from nnx_introspect._roofline.timing import program_time
from nnx_introspect._xla import program_work
from nnx_introspect._xla.hlo import parse_module

RUNS = Path(__file__).parents[1] / "calibration" / "data" / "timecal-chip"


def main() -> None:
    v5e = hardware_for("v5e-1")
    shares = []
    for records in sorted(RUNS.glob("run*.jsonl")):
        hlo = Path(str(records).removesuffix(".jsonl") + "-hlo.tar")
        if not hlo.exists():  # a deviceless twin's memory record: no HLO kept
            continue
        with tarfile.open(hlo) as tar:
            texts = {
                Path(m.name).name: tar.extractfile(m).read()  # type: ignore[union-attr]
                for m in tar.getmembers()
                if m.name.endswith(".hlo.gz")
            }
        for line in records.read_text().splitlines():
            case = json.loads(line)
            added = 0.0
            for row in case["programs"].values():
                if not row.get("hlo"):
                    continue
                text = gzip.decompress(texts[row["hlo"]]).decode()
                module = parse_module(text)
                began = time.perf_counter()
                program_time(program_work(module), v5e)
                added += time.perf_counter() - began
            if added:
                shares.append(
                    (added / case["seconds"], added, case["seconds"], case["case"])
                )
    shares.sort(reverse=True)
    for share, added, seconds, name in shares:
        print(f"{share:7.2%}  {added * 1e3:8.1f} ms of {seconds:6.1f} s  {name}")
    print(f"largest share {shares[0][0]:.2%}; median {shares[len(shares) // 2][0]:.2%}")


if __name__ == "__main__":
    main()

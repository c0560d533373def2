"""Issue 55, item 6: the decode rows say what their time is; the step page draws time.

2. The RL page's decode row is the whole completion (its time every token's
   step), the serving page's one token's step: the RL row says how many
   tokens (``decode (16 tokens)``), the serving one says ``decode (one
   token)`` (tests/test_html_phase_chart.py holds it on a compiled report).
3. The step page drew memory and no time: with an estimate it draws the
   estimate, its error bar and a measured run; without one, no time figure.
"""

import xml.etree.ElementTree as ET

from nnx_introspect._accelerators import Budget
from nnx_introspect._rl.report import RLMemoryReport, RLPhase

NS = "{http://www.w3.org/2000/svg}"
MiB = 2**20


def _svgs(page: str) -> list[ET.Element]:
    found, start = [], page.find("<svg")
    while start >= 0:
        end = page.index("</svg>", start) + 6
        found.append(ET.fromstring(page[start:end]))
        start = page.find("<svg", end)
    return found


def _texts(page: str) -> list[str]:
    return [t.text or "" for svg in _svgs(page) for t in svg.iter(f"{NS}text")]


# --- 2. the RL page's decode row names its tokens ---------------------------------


def test_the_rl_decode_row_is_the_whole_completion_and_says_so() -> None:
    step = 2.5e-3  # one token's step
    phases = (
        RLPhase("prefill", 15 * MiB, estimate=4e-3),
        RLPhase("decode", 15 * MiB, steps=16, estimate=16 * step),
        RLPhase("train", 50 * MiB, estimate=9e-3),
    )
    report = RLMemoryReport(
        target="llama_tiny",
        mesh_axes=(("fsdp", 2), ("tp", 2)),
        topology=None,
        batch=2,
        generations=2,
        prompt=16,
        completion=16,
        reference=False,
        roles=(("actor parameters", 10 * MiB),),
        phases=phases,
        budget=Budget(16 * 2**30, "the budget given"),
    )
    texts = _texts(report.to_html())
    assert texts.count("decode (16 tokens)") == 2  # its memory row and its time row
    assert "decode" not in texts and "prefill" in texts and "train" in texts
    assert "40 ms" in texts  # 16 x 2.5 ms: the whole completion

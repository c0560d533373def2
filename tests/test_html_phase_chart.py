"""The phase chart of the serving and RL pages (issue 44, newcomer item 5).

Each phase's memory (resident, then the program's own) against the budget and
its time, from plain numbers; a report that offers ``phase_bars()`` gets it on
its HTML page. The serving report is a real compile of a tiny Llama; the RL
report is built from its phases' figures (no compile). Both reports' own
``phase_bars()`` methods draw the charts tested here.
"""

import dataclasses
import html
import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from nnx_introspect import ServeMemoryReport, serve_memory_report
from nnx_introspect._accelerators import Budget
from nnx_introspect._render import (
    PhaseBar,
    PhaseBars,
    Report,
    Table,
    format_bytes,
    phase_chart_svg,
)
from nnx_introspect._rl.report import RLMemoryReport, RLPhase
from nnx_introspect.examples import LlamaConfig, llama

NS = "{http://www.w3.org/2000/svg}"
MiB, GiB = 2**20, 2**30


def _root(page: str) -> ET.Element:
    start = page.index("<svg")
    return ET.fromstring(page[start : page.index("</svg>", start) + 6])


def _texts(page: str) -> list[str]:
    return [t.text or "" for t in _root(page).iter(f"{NS}text")]


def _rects(page: str) -> list[tuple[float, float, str, str]]:
    """``(x, width, fill, tooltip)`` of every rect with a tooltip (the bars)."""
    out = []
    for r in _root(page).iter(f"{NS}rect"):
        title = r.find(f"{NS}title")
        if title is not None:
            out.append(
                (
                    float(r.get("x") or 0),
                    float(r.get("width") or 0),
                    r.get("fill") or "",
                    title.text or "",
                )
            )
    return out


# --- the chart from plain numbers ----------------------------------------------------

TINY_RL = (  # a tiny Llama's GRPO step on a 15.75 GiB v5e chip (bytes per device)
    PhaseBar("prefill", 5_278_720, 31_312_904, seconds=2.08e-3, error=0.14),
    PhaseBar("decode", 4_966_400, 31_837_196, seconds=32.3e-3, error=0.14),
    PhaseBar("reference", 13_574_656, 31_312_904, seconds=2.04e-3, error=0.14),
    PhaseBar("train", 56_799_232, 10_437_632, seconds=3.08e-3, error=0.14),
)
V5E = int(15.75 * GiB)


def test_each_phase_is_one_bar_of_resident_then_program_bytes() -> None:
    chart = phase_chart_svg(TINY_RL, V5E, "v5e-4")
    rects = [r for r in _rects(chart) if ": resident " in r[3] or ": program " in r[3]]
    assert len(rects) == 2 * len(TINY_RL)
    for bar, (resident, program) in zip(
        TINY_RL, zip(rects[::2], rects[1::2], strict=True), strict=True
    ):
        assert resident[3] == f"{bar.name}: resident {format_bytes(bar.resident_bytes)}"
        assert program[3] == f"{bar.name}: program {format_bytes(bar.program_bytes)}"
        assert program[0] == pytest.approx(resident[0] + resident[1], abs=0.1)
        # both parts on one linear scale: lengths in the ratio of the bytes
        ratio = resident[1] / program[1]
        assert ratio == pytest.approx(bar.resident_bytes / bar.program_bytes, rel=0.02)
    texts = _texts(chart)
    for bar in TINY_RL:  # the peak and its share of the budget, by hand
        share = 100 * (bar.program_bytes + bar.resident_bytes) / V5E
        peak = format_bytes(bar.program_bytes + bar.resident_bytes)
        assert f"{peak} ({share:.2g}%)" in texts
    assert "budget 15.75 GiB" in texts
    assert "Memory per device (v5e-4)" in texts


def test_a_tiny_model_against_a_large_budget_is_drawn_past_a_break() -> None:
    chart = phase_chart_svg(TINY_RL, V5E, "v5e-4")
    rects = _rects(chart)
    left = min(x for x, _, _, _ in rects)
    budget_x = next(
        float(line.get("x1") or 0)
        for line in _root(chart).iter(f"{NS}line")
        if line.get("stroke") == "#cf222e"
    )
    train = [w for _, w, _, t in rects if t.startswith("train:")]
    # the largest peak fills over half the way to the budget, not 0.4% of it
    assert sum(train) > 0.5 * (budget_x - left)
    assert "The bytes axis is broken" in chart
    assert f"{V5E / (80 * MiB):,.0f}x that" in chart  # 80 MiB: the round tick above
    assert "80 MiB" in _texts(chart)


def test_a_small_part_of_a_bar_stays_visible() -> None:
    bars = [PhaseBar("decode", 1024, 40 * GiB, seconds=1e-6), PhaseBar("x", 0, 1)]
    chart = phase_chart_svg(bars, 60 * GiB)
    widths = {
        t.split(":")[1].split()[0]: w
        for _, w, _, t in _rects(chart)
        if t.startswith("decode")
    }
    assert widths["program"] >= 3 and widths["resident"] > 300
    time_bar = [w for _, w, _, t in _rects(chart) if "(estimate)" in t]
    assert time_bar and time_bar[0] >= 3


def test_colours_say_fits_does_not_or_no_budget() -> None:
    bars = [
        PhaseBar("a", 10 * GiB, 40 * GiB),
        PhaseBar("b", 30 * GiB, 40 * GiB),
        PhaseBar("c", 1 * GiB, 1 * GiB, refused=True),
    ]
    fills = {
        t.split(":")[0]: f
        for _, _, f, t in _rects(phase_chart_svg(bars, 60 * GiB))
        if ": program " in t
    }
    assert fills == {"a": "#1a7f37", "b": "#cf222e", "c": "#cf222e"}
    none = phase_chart_svg(bars[:1], None)
    assert [f for _, _, f, t in _rects(none) if ": program " in t] == ["#0969da"]
    assert "budget" not in " ".join(_texts(none))
    assert "refused for memory" in " ".join(_texts(phase_chart_svg(bars, 60 * GiB)))


def test_times_carry_their_error_bars_and_measured_runs() -> None:
    bars = [
        PhaseBar("prefill", 1, 1, seconds=0.002, error=0.1, measured=0.0023),
        PhaseBar("decode", 1, 1, seconds=0.03),
        PhaseBar("train", 1, 1),
    ]
    chart = phase_chart_svg(bars, None)
    texts = _texts(chart)
    assert "2 ms ±10%; measured 2.3 ms" in texts
    assert "30 ms" in texts and "no estimate" in texts
    assert "whiskers are its calibrated error" in chart
    assert "a black diamond is a measured run" in chart
    # no time panel when no phase has a time
    assert "Estimated time" not in phase_chart_svg([PhaseBar("a", 1, 1)], None)


def test_bad_bars_are_one_line_naming_the_argument() -> None:
    with pytest.raises(
        ValueError, match=r"`bars\[0\].program_bytes` must be .* got -1"
    ):
        phase_chart_svg([PhaseBar("a", -1)])
    with pytest.raises(TypeError, match=r"`bars\[0\]` must be a PhaseBar, got tuple"):
        phase_chart_svg([("a", 1, 2)])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"`budget` must be a positive .* got 0"):
        phase_chart_svg([PhaseBar("a", 1)], 0)
    assert phase_chart_svg([]) == ""


# --- the hook: a report that offers phase bars gets the chart -----------------------


@dataclasses.dataclass(frozen=True)
class _Offering(Report):
    bars: Any
    ok: bool = True
    verdict: str = "fits: peak 100 B per device of a 1 KiB budget"
    max_device_bytes: int | None = 1024

    def table(self) -> Table:
        return Table(
            "Phases", ("phase", "bytes"), (("a", "100 B"),), lead=(self.verdict,)
        )

    def phase_bars(self) -> Any:
        return self.bars


def test_the_page_of_a_report_offering_phase_bars_shows_the_chart() -> None:
    offered = PhaseBars((PhaseBar("prefill", 60, 40),), 1024, "cpu")
    page = _Offering(offered).to_html()
    assert page.count("<svg") == 1
    assert page.index('class="verdict ok"') < page.index("<svg") < page.index("<table>")
    assert ">Memory per device (cpu)</text>" in page
    assert _Offering(offered)._repr_html_().count("<svg") == 1  # notebooks too
    assert "<svg" not in _Offering(None).to_html()  # None: no chart
    with pytest.raises(TypeError, match=r"`_Offering.phase_bars\(\)` must return"):
        _Offering([PhaseBar("a", 1)]).to_html()


# --- a real serving report, and an RL report from its phases' figures ----------------

CFG = LlamaConfig(vocab=64, d_model=32, n_layers=2, n_heads=4, d_ff=48, n_kv_heads=2)


@pytest.fixture(scope="module")
def served() -> ServeMemoryReport:
    return serve_memory_report(
        llama(CFG),
        {"data": 2, "tp": 2},
        sequences=4,
        context=16,
        prompt=8,
        max_device_bytes="1GiB",
    )


def test_the_serving_page_charts_prefill_and_decode(
    served: ServeMemoryReport,
) -> None:
    page = served.to_html()
    assert page.index('class="verdict') < page.index("<svg") < page.index("<table>")
    texts = _texts(page)
    for program, name in (
        (served.prefill, "prefill"),
        (served.decode, "decode (one token)"),
    ):
        assert name in texts
        resident = program.weights_bytes + program.kv_cache_bytes
        peak = (
            program.memory.argument_bytes
            + program.memory.output_bytes
            + program.memory.temp_bytes
            - program.memory.alias_bytes
        )
        tips = [t for _, _, _, t in _rects(page) if t.startswith(name + ":")]
        assert tips == [
            f"{name}: resident {format_bytes(resident)}",
            f"{name}: program {format_bytes(peak - resident)}",
        ]
        assert f"{format_bytes(peak)} ({100 * peak / GiB:.2g}%)" in texts
    assert "weights and KV cache" in texts
    assert "The bytes axis is broken" in page  # a tiny model against 1 GiB
    assert "budget 1 GiB" in texts


def _rl_report(**changes: Any) -> RLMemoryReport:
    phases = (
        RLPhase("prefill", 15_716_352, (("actor optimizer state", 20_875_272),)),
        RLPhase("decode", 15_404_032, (("actor optimizer state", 20_875_272),)),
        RLPhase("reference", 13_574_656, (("actor parameters", 10_437_632),)),
        RLPhase("train", 56_799_232, (("reference parameters", 10_437_632),)),
    )
    fields: dict[str, Any] = {
        "target": "llama_tiny",
        "mesh_axes": (("fsdp", 2), ("tp", 2)),
        "topology": None,
        "batch": 2,
        "generations": 2,
        "prompt": 16,
        "completion": 16,
        "reference": True,
        "roles": (("actor parameters", 10_437_632),),
        "phases": phases,
        "budget": Budget(V5E, "the budget given"),
    }
    fields.update(changes)
    return RLMemoryReport(**fields)


def test_the_rl_page_charts_every_phase() -> None:
    report = _rl_report()
    page = report.to_html()
    assert page.index('class="verdict ok"') < page.index("<svg") < page.index("<table>")
    texts = _texts(page)
    for phase in report.phases:
        peak = phase.program_peak_bytes + sum(n for _, n in phase.resident)
        assert f"{format_bytes(peak)} ({100 * peak / V5E:.2g}%)" in texts
    assert "Memory per device (this process's devices)" in html.unescape(
        " ".join(texts)
    )
    refused = _rl_report(
        phases=(RLPhase("train", 56_799_232, out_of_memory=True),),
    ).to_html()
    assert re.search(r"54\.17 MiB, refused for memory", refused)

"""Issue 55, item 6: the decode rows say what their time is; the step page draws time.

2. The RL page's decode row is the whole completion (its time every token's
   step), the serving page's one token's step: the RL row says how many
   tokens (``decode (16 tokens)``), the serving one says ``decode (one
   token)`` (tests/test_html_phase_chart.py holds it on a compiled report).
3. The step page drew memory and no time: with an estimate it draws the
   estimate, its error bar and a measured run; without one, no time figure.
"""

import xml.etree.ElementTree as ET

import jax
import jax.numpy as jnp

from nnx_introspect import step_memory_report
from nnx_introspect._accelerators import Budget
from nnx_introspect._rl.report import RLMemoryReport, RLPhase

NS = "{http://www.w3.org/2000/svg}"
MiB = 2**20
TWO = "nnx_introspect.examples:two_layer"


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


# --- 3. the step page draws its time -----------------------------------------------

X = jax.ShapeDtypeStruct((8, 3), jnp.float32)


def _shown(seconds: float) -> str:
    """Three significant figures in the largest unit under the time."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        if seconds >= scale or unit == "ns":
            return f"{float(f'{seconds / scale:.3g}'):g} {unit}"
    raise AssertionError


def _time_figure(page: str) -> ET.Element | None:
    for svg in _svgs(page):
        if svg.get("aria-label") == "the estimated time of one step":
            return svg
    return None


def test_the_step_page_draws_the_estimate_with_its_error_bar() -> None:
    report = step_memory_report(TWO, {"data": 8}, (X,), topology="v5e-8")
    assert report.roofline is not None and report.roofline.time is not None
    page = report.to_html()
    chart = _time_figure(page)
    assert chart is not None
    texts = [t.text or "" for t in chart.iter(f"{NS}text")]
    point, error = report.roofline.time.seconds, report.roofline.time.error
    value = _shown(point) + ("" if error is None else f" ±{round(error * 100)}%")
    assert value in texts, texts
    assert "Estimated time of one step (v5e-8)" in texts
    # the bar: its tooltip holds the estimate; after the memory chart
    titles = [t.text for t in chart.iter(f"{NS}title")]
    assert titles == [f"step: {value} (estimate)"]
    assert page.index("the peak per device") < page.index("of one step")


def test_a_measured_step_draws_its_run_and_no_estimate_draws_nothing() -> None:
    plain = step_memory_report(TWO, {"data": 1}, (X,))
    assert plain.roofline is None and plain.measured is None
    assert _time_figure(plain.to_html()) is None
    measured = step_memory_report(TWO, {"data": 1}, (X,), measure=2)
    assert measured.measured is not None and measured.measured.error is None
    chart = _time_figure(measured.to_html())
    assert chart is not None
    texts = " ".join(t.text or "" for t in chart.iter(f"{NS}text"))
    median = sorted(measured.measured.seconds)  # two runs: their mean
    assert f"no estimate; measured {_shown(sum(median) / 2)}" in texts
    assert len(list(chart.iter(f"{NS}polygon"))) == 1  # the measured diamond

"""Every report's verdict box in HTML, and ``print(report)`` as text."""

import concurrent.futures
import dataclasses
import html
import importlib
import pkgutil
import re
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
import pytest
from flax import nnx

import nnx_introspect
from nnx_introspect import (
    Table,
    checkpoint_report,
    compare_states,
    fit_step,
    mesh_config_report,
    param_fingerprint,
    summarize,
)
from nnx_introspect._accelerators.budget import Budget
from nnx_introspect._breakdown.report import Breakdown, BreakdownRow
from nnx_introspect._render.table import Report, verdict_html
from nnx_introspect._rl.layouts import RLLayoutComparison
from nnx_introspect._rl.report import RLMemoryReport, RLPhase
from nnx_introspect._rl.size_search import RLBatchSearch
from nnx_introspect._serve import (
    ServeMemoryReport,
    ServeMeshComparison,
    ServeSearch,
    serve_memory_report,
)
from nnx_introspect._step import step_memory_report
from nnx_introspect._sweep.batch.search import max_batch
from nnx_introspect._sweep.mesh_comparison import compare_meshes
from nnx_introspect.examples import LlamaConfig, llama

X = jax.ShapeDtypeStruct((8, 4), jnp.float32)
SERVE_MODEL = llama(
    LlamaConfig(vocab=64, d_model=32, n_layers=2, n_heads=4, d_ff=48, n_kv_heads=2)
)


def linear(rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(4, 6, rngs=rngs)


def _box(page: str) -> tuple[str, str]:
    """The verdict box's class and text: the first element of the page's body."""
    body = page[page.index("<body>") + len("<body>") :]
    match = re.match(r'<p class="verdict (\w+)">([^<]*)</p>', body)
    assert match is not None, body[:200]
    return match.group(1), match.group(2)


@pytest.fixture(scope="module")
def peak() -> int:
    return step_memory_report(linear, "data=8", X).peak_bytes


@pytest.mark.parametrize(
    ("budget", "tone"),
    [(None, "neutral"), ("1MiB", "ok"), (100, "bad")],
)
def test_step_page_opens_with_a_coloured_verdict(
    peak: int, budget: int | str | None, tone: str
) -> None:
    report = step_memory_report(linear, "data=8", X, max_device_bytes=budget)
    # independent: the peak against the budget, in bytes
    expected: dict[int | str | None, str] = {
        None: "neutral",
        "1MiB": "ok" if peak <= 2**20 else "bad",
        100: "ok" if peak <= 100 else "bad",
    }
    assert tone == expected[budget]
    page = report.to_html()
    colour, text = _box(page)
    assert colour == tone
    assert text == report.verdict + "."
    # the box comes before the table and the verdict is not repeated as caption
    assert page.index('class="verdict') < page.index("<table>")
    assert page.count(report.verdict) == 2  # the page's <title> and the box
    assert report._repr_html_().startswith(f'<p class="verdict {tone}">')


def test_out_of_memory_is_red_and_the_box_css_has_three_colours() -> None:
    page = step_memory_report(linear, "data=8", X, max_device_bytes=0).to_html()
    assert _box(page)[0] == "bad"
    for tone in ("ok", "bad", "neutral"):
        assert f"p.verdict.{tone}{{background:" in page


@dataclasses.dataclass(frozen=True)
class Judged(Report):
    """A report of someone else's: a verdict, ``ok`` and maybe a budget."""

    ok: bool
    max_device_bytes: int | None = 10

    @property
    def verdict(self) -> str:
        return "All good" if self.ok else "Not good"

    def table(self) -> Table:
        return Table("Judged", ("path", "n"), (("a", "1"),))

    def json_data(self) -> dict[str, Any]:
        return {}


@pytest.mark.parametrize(
    ("report", "tone", "caption"),
    [
        (Judged(ok=True), "ok", True),
        (Judged(ok=False), "bad", True),
        (Judged(ok=True, max_device_bytes=None), "neutral", True),
    ],
)
def test_any_report_with_a_verdict_gets_the_box(
    report: Judged, tone: str, caption: bool
) -> None:
    page = report.to_html()
    assert _box(page) == (tone, report.verdict + ".")
    assert ("<caption>Judged</caption>" in page) is caption  # a title, not the verdict


def test_a_report_without_a_verdict_has_no_box() -> None:
    page = summarize(nnx.Linear(2, 2, rngs=nnx.Rngs(0))).to_html()
    assert 'class="verdict' not in page


def test_verdict_html_escapes_and_refuses_an_unknown_tone() -> None:
    assert verdict_html("a < b!", "neutral") == (
        '<p class="verdict neutral">a &lt; b!</p>'
    )
    with pytest.raises(ValueError, match="`tone` must be 'ok', 'bad' or 'neutral'"):
        verdict_html("x", "green")  # type: ignore[arg-type]


def test_the_serving_pages_box_their_verdicts(reports: dict[str, Report]) -> None:
    for name in ("ServeMemoryReport", "ServeSearch"):
        report = reports[name]
        assert isinstance(report, ServeMemoryReport | ServeSearch)
        assert _box(report.to_html()) == ("ok", report.verdict + ".")
    none = ServeSearch("context", 0, 1, ((2, 8, 110, False),), Budget(100, None))
    assert _box(none.to_html()) == ("bad", none.verdict + ".")


def test_the_max_batch_page_uses_the_same_box() -> None:
    fits = max_batch(linear, "data=8", X, max_device_bytes="2KiB", loss=None)
    assert _box_after_h1(fits.to_html()) == ("ok", fits.verdict + ".")
    none = max_batch(linear, "data=8", X, max_device_bytes=100, loss=None)
    assert _box_after_h1(none.to_html()) == ("bad", none.verdict + ".")


def _box_after_h1(page: str) -> tuple[str, str]:
    match = re.search(r'</h1><p class="verdict (\w+)">([^<]*)</p>', page)
    assert match is not None
    return match.group(1), match.group(2)


# --- print(report) -------------------------------------------------------------------


def _report_classes() -> set[type[Report]]:
    """Every ``Report`` subclass the package defines (all its modules imported)."""
    for module in pkgutil.walk_packages(
        nnx_introspect.__path__, nnx_introspect.__name__ + "."
    ):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    found: set[type[Report]] = set()
    todo = list(Report.__subclasses__())
    while todo:
        cls = todo.pop()
        if cls.__module__.startswith("nnx_introspect."):
            found.add(cls)
        todo += cls.__subclasses__()
    return found


_ONE_THREAD = concurrent.futures.ThreadPoolExecutor(1)


def _collectives() -> Any:
    """The collectives of a sum over 8 devices' shards: one all-reduce."""
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from nnx_introspect._xla.collectives import compiled_hlo_text, read_collectives

    mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
    x = jax.ShapeDtypeStruct(
        (8, 4), jnp.float32, sharding=NamedSharding(mesh, PartitionSpec("data"))
    )
    compiled = jax.jit(lambda a: a.sum()).lower(x).compile()
    return read_collectives(compiled_hlo_text(compiled), (("data", 8),))


def _rl(budget: int) -> RLMemoryReport:
    """An RL report of two phases, the train phase's peak 90 + 10 bytes."""
    phases = (
        RLPhase("decode", 50, (("actor optimizer state", 20),)),
        RLPhase("train", 90, (("reference parameters", 10),)),
    )
    roles = (("actor optimizer state", 20), ("reference parameters", 10))
    return RLMemoryReport(
        "m", (("tp", 1),), None, 2, 4, 8, 8, True, roles, phases, Budget(budget, "b")
    )


def test_the_rl_page_boxes_its_verdict() -> None:
    # the peak, 90 + 10 bytes in the train phase, against 120 and 99 bytes
    for budget, tone in ((120, "ok"), (99, "bad")):
        report = _rl(budget)
        assert _box(report.to_html()) == (tone, report.verdict + ".")
        assert ("does NOT fit" in report.verdict) is (tone == "bad")


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Report]:
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    path = tmp_path_factory.mktemp("issue17") / "ckpt"
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(path, nnx.state(model))
    other = nnx.Linear(3, 2, rngs=nnx.Rngs(1))
    serve = serve_memory_report(
        SERVE_MODEL, "tp=2", sequences=2, context=8, max_device_bytes="1GiB"
    )
    return {
        "CheckpointReport": checkpoint_report(path),
        "MeshConfigReport": mesh_config_report(model, "model=2", max_device_bytes=8),
        "ModelSummary": summarize(model),
        "ParamFingerprint": param_fingerprint(model),
        "StateDiff": compare_states(model, other),
        "StepMemoryReport": step_memory_report(linear, "data=8", X),
        "BatchSearch": max_batch(linear, "data=8", X, max_device_bytes="2KiB"),
        "Collectives": _collectives(),
        "MeshComparison": compare_meshes(
            "tests.test_render_verdicts:linear",
            ["data=8", "data=4,model=2"],
            X,
            executor=_ONE_THREAD,
        ),
        "FitSearch": fit_step(
            "tests.test_render_verdicts:linear",
            "data=8",
            X,
            max_device_bytes="1MiB",
            executor=_ONE_THREAD,
        ),
        "ServeMemoryReport": serve,
        "RLMemoryReport": _rl(120),
        "RLBatchSearch": RLBatchSearch(
            "m",
            (("data", 2),),
            None,
            4,
            8,
            8,
            1,
            3,
            ((3, 90, "train", True), (4, 120, "train", False)),
            Budget(100, "b"),
        ),
        "RLLayoutComparison": RLLayoutComparison((_rl(120),), (), "in order"),
        "ServeMeshComparison": ServeMeshComparison((serve,), (), "this process"),
        "ServeSearch": ServeSearch(
            "sequences", 2, 1, ((2, 8, 90, True), (3, 8, 110, False)), Budget(100, None)
        ),
        "Breakdown": Breakdown(
            "cpu",
            "jit_f",
            0,
            "t",
            100,
            100,
            (
                BreakdownRow(
                    "optimizer state",
                    "opt/mu/w",
                    41,
                    (41,),
                    "u8",
                    "p",
                    "parameter",
                    None,
                    "opt/mu/w",
                    None,
                    0,
                    None,
                ),
                BreakdownRow(
                    "temporary",
                    "t",
                    59,
                    (59,),
                    "u8",
                    "t",
                    "fusion",
                    None,
                    None,
                    None,
                    None,
                    None,
                ),
            ),
        ),
    }


def test_every_report_class_is_covered(reports: dict[str, Report]) -> None:
    classes = _report_classes()
    assert {cls.__name__ for cls in classes} == set(reports)
    for cls in classes:
        # one implementation, inherited; a step report and a batch search append
        # their breakdowns to its text
        if cls.__name__ not in ("StepMemoryReport", "BatchSearch"):
            assert cls.__str__ is Report.__str__, cls


@pytest.mark.parametrize(
    "name",
    [
        "CheckpointReport",
        "MeshConfigReport",
        "ModelSummary",
        "ParamFingerprint",
        "StateDiff",
        "StepMemoryReport",
        "BatchSearch",
        "Breakdown",
        "Collectives",
        "MeshComparison",
        "FitSearch",
        "ServeMemoryReport",
        "ServeSearch",
        "ServeMeshComparison",
        "RLMemoryReport",
        "RLBatchSearch",
        "RLLayoutComparison",
    ],
)
def test_print_leads_with_the_verdict_then_the_table(
    reports: dict[str, Report], name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    report = reports[name]
    print(report)
    text = capsys.readouterr().out
    lines = text.splitlines()
    table = report.table()
    verdict = getattr(report, "verdict", None)
    assert lines[0] == (verdict if isinstance(verdict, str) else table.title)
    assert text.count(lines[0]) == 1  # not repeated as the table's title
    for row in table.rows:  # every row's first cell, whole
        cells = [line.lstrip(" │┃") for line in lines]  # a box's left border
        assert any(cell.startswith(row[0]) for cell in cells), row[0]
    assert "\x1b[" not in text  # no colour codes
    assert f"{type(report).__name__}(" not in text  # not the repr
    assert repr(report).startswith(f"{type(report).__name__}(")  # repr unchanged
    assert all(line == line.rstrip() for line in lines)


def test_print_of_a_mesh_plan_gives_its_verdict_first(
    reports: dict[str, Report],
) -> None:
    lines = str(reports["MeshConfigReport"]).splitlines()
    # 3x2 kernel + 2 bias of float32, replicated over model=2: 32 B > 8 B
    assert lines[0].startswith("FAIL: 32 B per device EXCEEDS the budget of 8 B")
    assert lines[1] == "Mesh plan (model=2; 2 devices)"


def test_str_fits_the_terminal(
    reports: dict[str, Report], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    narrow = str(reports["MeshConfigReport"]).splitlines()
    assert max(len(line) for line in narrow[1:]) <= 40
    monkeypatch.setenv("COLUMNS", "200")
    wide = str(reports["MeshConfigReport"]).splitlines()
    assert len(wide) < len(narrow)


def test_the_notes_read_left_to_right(tmp_path: Path) -> None:
    report = summarize(nnx.Linear(2, 2, rngs=nnx.Rngs(0)))
    lines = str(report).splitlines()
    note = report.table().notes[0]
    assert any(line.startswith(note[:30]) for line in lines)


def test_a_verdict_in_the_lead_is_not_repeated_under_its_box() -> None:
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    report = mesh_config_report(model, "model=2", max_device_bytes=8)  # 32 B > 8 B
    assert report.verdict in report.table().lead
    fragment = report._repr_html_()
    assert fragment.startswith('<p class="verdict bad">')
    assert fragment.count(html.escape(report.verdict)) == 1
    assert "Per device: 32 B" in fragment  # the other lead sentences stay


def test_the_first_line_is_never_wrapped(
    reports: dict[str, Report], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long verdict or title (a checkpoint's path) stays one line, however
    narrow the terminal: a terminal soft-wraps it, a pipe keeps it whole."""
    monkeypatch.setenv("COLUMNS", "30")
    for report in reports.values():
        verdict = getattr(report, "verdict", None)
        first = verdict if isinstance(verdict, str) else report.table().title
        assert len(first) > 30
        assert str(report).splitlines()[0] == first

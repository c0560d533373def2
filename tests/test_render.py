"""Shared renderers: one table, every format."""

import dataclasses
import io
import json
from typing import Any

import pytest
from flax import nnx
from rich.console import Console

from nnx_introspect import (
    Table,
    abstract_model,
    compare_states,
    mesh_config_report,
    param_fingerprint,
    summarize,
)
from nnx_introspect._render.table import (
    Report,
    format_bytes,
    to_html,
    to_markdown,
    to_rich,
)
from nnx_introspect.examples import llama_7b, llama_7b_sharded

TABLE = Table(
    title="Demo",
    columns=("path", "bytes"),
    rows=(("a|b", "1 KiB"), ("c[bold]x[/bold]", "2 B")),
    totals=(("total", "1 KiB"),),
    notes=("a <note>",),
)


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1 KiB"),
        (1536, "1.50 KiB"),
        (3 * 2**30, "3 GiB"),
        (2**60, "1024 PiB"),
    ],
)
def test_format_bytes(n: int, text: str) -> None:
    assert format_bytes(n) == text


def test_markdown_escapes_pipes_and_bolds_totals() -> None:
    md = to_markdown(TABLE)
    assert "| a\\|b | 1 KiB |" in md
    assert "| **total** | **1 KiB** |" in md
    assert md.splitlines()[3] == "| :--- | ---: |"
    assert "- a <note>" in md


def test_html_is_self_contained_and_escaped() -> None:
    page = to_html(TABLE)
    assert page.startswith("<!DOCTYPE html>")
    assert "a &lt;note&gt;" in page and "<script" not in page and "http" not in page


def test_rich_table_renders_every_row() -> None:
    console = Console(width=100, record=True)
    console.print(to_rich(TABLE))
    text = console.export_text()
    for cell in ["Demo", "a|b", "total", "a <note>", "c[bold]x[/bold]"]:
        assert cell in text


@dataclasses.dataclass(frozen=True)
class Dummy(Report):
    SCHEMA = "nnx-introspect/dummy"
    SCHEMA_VERSION = 3
    n: int

    def table(self) -> Table:
        return TABLE

    def json_data(self) -> dict[str, Any]:
        return {"n": self.n}


def test_report_mixin_formats() -> None:
    report = Dummy(n=10**15)
    payload = json.loads(report.to_json())
    assert list(payload) == ["schema", "version", "n"]
    assert payload == {"schema": "nnx-introspect/dummy", "version": 3, "n": 10**15}
    assert report.to_markdown() == to_markdown(TABLE)
    assert report.to_html() == to_html(TABLE)
    assert "<table>" in report._repr_html_()


LONG_PATHS = (
    "optimizer/opt_state/0/mu/layers/31/attn_norm/scale",
    "embed/embedding",
    "lm_head/kernel",
    "grads/layers/0/mlp/down_proj/kernel_with_a_long_name",
)
WIDE = Table(
    title="Differences",
    columns=("path", "shape", "dtype", "spec", "source", "shard", "over", "bytes"),
    rows=tuple(
        (
            p,
            "(4096, 11008)",
            "bfloat16",
            "P('fsdp', 'tp')",
            "metadata + logical rules",
            "(512, 43)",
            "fsdp, tp",
            "1.50 GiB",
        )
        for p in LONG_PATHS
    ),
    totals=(("0 common path(s)", "", "", "", "", "", "", "3 GiB"),),
    notes=("a note",),
)


def render(table: Table, width: int) -> str:
    console = Console(width=width, file=io.StringIO(), record=True)
    console.print(to_rich(table))
    return console.export_text()


@pytest.mark.parametrize("width", [240, 120, 80, 60, 40, 20])
def test_paths_are_never_truncated(width: int) -> None:
    text = render(WIDE, width)
    assert "…" not in text
    lines = text.splitlines()
    for path in (*LONG_PATHS, "0 common path(s)"):
        if len(path) <= width:  # whole, on one line
            assert any(path in line for line in lines), (width, path)
        else:  # folded only where no console could hold it: consecutive lines
            assert path in "".join(text.split()), (width, path)
    assert max(len(line.rstrip()) for line in lines) <= width


def test_wide_console_keeps_a_table_with_whole_paths() -> None:
    text = render(WIDE, 240)
    assert text.count("┃") > 0  # a table, not blocks
    rows = [line for line in text.splitlines() if "embed/embedding" in line]
    assert len(rows) == 1 and "bfloat16" in rows[0] and "1.50 GiB" in rows[0]
    # At the narrowest width that holds every cell whole, still a boxed table
    # with the paths whole in the first column.
    fitted = to_rich(WIDE)
    narrow = fitted.min_table_width()
    text = render(WIDE, narrow)
    assert "┃" in text
    for path in LONG_PATHS:
        assert any(line.startswith(f"│ {path} ") for line in text.splitlines())


def test_narrow_console_prints_one_block_per_row() -> None:
    text = render(WIDE, 60)
    lines = text.splitlines()
    start = lines.index("embed/embedding")
    assert lines[start + 1].startswith("  shape: (4096, 11008); dtype: bfloat16")
    assert "0 common path(s)" in lines


def test_rich_measure_is_the_full_table() -> None:
    console = Console(width=10_000, file=io.StringIO())
    fitted = to_rich(WIDE)
    assert (
        console.measure(fitted).maximum == console.measure(fitted.rich_table()).maximum
    )


# --- issue 13/14: at 80 columns no cell is split and the verdict comes first ------


def _numbers_whole(table: Table, text: str) -> None:
    """Every cell holding a digit stands whole on one line of ``text``."""
    lines = text.splitlines()
    for row in (*table.rows, *table.totals):
        for cell in row[1:]:
            if any(ch.isdigit() for ch in cell):
                assert any(cell in line for line in lines), cell


@pytest.mark.parametrize("width", [200, 120, 100, 80, 60, 40])
def test_numbers_never_wrap_at_any_width(width: int) -> None:
    text = render(WIDE, width)
    _numbers_whole(WIDE, text)
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width


def test_the_7b_summary_at_80_columns_keeps_every_number_whole() -> None:
    summary = summarize(abstract_model(llama_7b))
    console = Console(width=80, file=io.StringIO(), record=True)
    console.print(summary)
    text = console.export_text()
    _numbers_whole(summary.table(), text)
    assert "6,738,415,616" in text  # the total, on one line
    # One line per variable (a borderless table), not a block of several.
    assert len(text.splitlines()) < 2 * len(summary.rows)


def test_the_7b_mesh_plan_at_80_columns_gives_verdict_and_totals_first() -> None:
    report = mesh_config_report(
        abstract_model(llama_7b_sharded),
        "fsdp=2,tp=4",
        optimizer="adamw",
        max_device_bytes="8GiB",
    )
    console = Console(width=80, file=io.StringIO(), record=True)
    console.print(report)
    lines = console.export_text().splitlines()
    first_leaf = next(i for i, line in enumerate(lines) if "embed/embedding" in line)
    verdict = next(i for i, line in enumerate(lines) if line.startswith("FAIL: "))
    totals = next(i for i, line in enumerate(lines) if line.startswith("Per device: "))
    assert verdict < totals < first_leaf < 10
    assert "EXCEEDS the budget of 8 GiB" in " ".join(lines[verdict : verdict + 2])
    _numbers_whole(report.table(), "\n".join(lines))


def test_markdown_and_html_put_the_lead_before_the_rows() -> None:
    table = Table("T", ("path", "n"), (("a", "1"),), lead=("FAIL: it does not fit.",))
    assert to_markdown(table).splitlines()[:3] == [
        "**T**",
        "",
        "FAIL: it does not fit.",
    ]
    page = to_html(table)
    assert page.index("FAIL: it does not fit.") < page.index("<td>a</td>")


def test_every_report_repr_is_short() -> None:
    model = abstract_model(llama_7b)
    summary = summarize(model)
    text = repr(summary)
    assert len(text) <= 300 and text.startswith("ModelSummary(title='Llama', rows=291,")
    plan = mesh_config_report(model, "data=8")
    assert len(repr(plan)) <= 300
    small = nnx.Linear(4, 3, rngs=nnx.Rngs(0))
    diff = compare_states(small, nnx.Linear(4, 3, rngs=nnx.Rngs(1)))
    assert repr(diff).startswith("StateDiff(a_label='a', b_label='b', entries=1,")
    assert repr(diff).endswith("equal=False)")
    fingerprint = param_fingerprint(small)
    assert repr(fingerprint) == "ParamFingerprint(leaves=2)"
    # The base class wins over the dataclass-generated repr, also in a subclass
    # defined elsewhere (StepMemoryReport, a user's report).

    @dataclasses.dataclass(frozen=True)
    class Mine(Report):
        name: str
        rows: tuple[int, ...]

    assert repr(Mine("x", tuple(range(1000)))) == "Mine(name='x', rows=1000)"
    long = Mine("y" * 1000, ())
    assert len(repr(long)) <= 300

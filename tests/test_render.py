"""Shared renderers: one table, every format."""

import dataclasses
import json
from typing import Any

import pytest
from rich.console import Console

from nnx_introspect import Table
from nnx_introspect._render import Report, format_bytes, to_html, to_markdown, to_rich

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

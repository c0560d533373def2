"""``nnx-introspect serve``: a report, exit codes, one line per mistake naming the flag."""

import json
from pathlib import Path

import pytest

from nnx_introspect.cli import main
from tests.llama_tiny_layers import LAYERS
from tests.shared_compiles import cache_in

TINY = "nnx_introspect.examples:llama_tiny"
# llama_tiny's widths and heads on 2 of its 8 layers (tests/llama_tiny_layers.py)
TINY_2 = "tests.llama_tiny_layers:llama_tiny_2_layers"
REPORT = ["serve", TINY_2, "--mesh", "tp=2", "--sequences", "2", "--context", "32"]


def test_a_report_in_json(
    module_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the module's reports are one request under two budgets and two formats:
    # compiled once, then read back (the budget never reaches the compiler)
    with cache_in(module_cache):
        code = main([*REPORT, "--max-device-bytes", "1GiB", "--format", "json"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fits"] is True
    # k and v, each layer's 4 KV heads over tp=2, 64 dimensions, bfloat16
    assert data["kv_bytes_per_token"] == 2 * LAYERS * (4 // 2) * 64 * 2
    with cache_in(module_cache):
        code = main([*REPORT, "--max-device-bytes", "1MiB", "--format", "json"])
    assert code == 1
    err = capsys.readouterr().err
    assert "does NOT fit" in err


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--sequences", "2", "--context", "8", "--prompt", "9"], "--prompt"),
        (["--sequences", "0", "--context", "8"], "--sequences"),
        (["--context", "8"], "--sequences"),
        (["--sequences", "2", "--context", "8", "--kv-cache", "int4"], "--kv-cache"),
        (["--sequences", "2", "--context", "8", "--mesh", "tp=8"], "--mesh"),
    ],
)
def test_mistakes_exit_2_naming_the_flag(
    capsys: pytest.CaptureFixture[str], extra: list[str], flag: str
) -> None:
    assert main(["serve", TINY, *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) <= 2  # the progress line, then the one line of the mistake
    assert f"error: argument {flag}: " in err[-1]
    assert err[-1].startswith("nnx-introspect")


def test_a_report_as_an_html_page(
    module_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with cache_in(module_cache):
        code = main([*REPORT, "--max-device-bytes", "1MiB", "--format", "html"])
    assert code == 1
    page = capsys.readouterr().out
    assert page.startswith("<!DOCTYPE html>") or page.startswith("<html")
    assert '<p class="verdict bad">does NOT fit' in page
    assert "<td>KV cache</td>" in page

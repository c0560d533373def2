"""``nnx-introspect serve``: a report, exit codes, one line per mistake naming the flag."""

import json

import pytest

from nnx_introspect.cli import main

TINY = "nnx_introspect.examples:llama_tiny"


def test_a_report_in_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["serve", TINY, "--mesh", "tp=2", "--sequences", "2", "--context", "32"]
    assert main([*argv, "--max-device-bytes", "1GiB", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fits"] is True
    assert data["kv_bytes_per_token"] == 2 * 8 * (4 // 2) * 64 * 2
    assert main([*argv, "--max-device-bytes", "1MiB", "--format", "json"]) == 1
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


def test_a_report_as_an_html_page(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["serve", TINY, "--mesh", "tp=2", "--sequences", "2", "--context", "32"]
    assert main([*argv, "--max-device-bytes", "1MiB", "--format", "html"]) == 1
    page = capsys.readouterr().out
    assert page.startswith("<!DOCTYPE html>") or page.startswith("<html")
    assert '<p class="verdict bad">does NOT fit' in page
    assert "<td>KV cache</td>" in page

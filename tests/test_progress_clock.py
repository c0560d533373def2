"""The one-step spinner and ``--fit``'s line show the time elapsed (issue 24)."""

import io

import pytest
from rich.console import Console

from nnx_introspect._sweep.fit import FitRow
from nnx_introspect.cli.progress import ClockLine, live_status


def test_the_line_counts_time_and_fit_compiles() -> None:
    now = [100.0]
    line = ClockLine("Compiling the step...", clock=lambda: now[0])
    assert line.text() == "Compiling the step... (0s)"
    now[0] = 165.0
    assert line.text() == "Compiling the step... (1m 05s)"
    row = FitRow((("fsdp", 8),), (("Block", "dots_saveable"),), 2, "fits")
    line.fitted(3, 4, row)
    assert line.text() == (
        "Compiling the step... (1m 05s); 3 of 4 compiled; fsdp=8 with remat "
        "Block (dots_saveable), 2 microbatches: fits"
    )


def test_it_is_drawn_on_a_terminal_only(capsys: pytest.CaptureFixture[str]) -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=80)
    with live_status(ClockLine("Working..."), console=console):
        pass
    assert "Working..." in out.getvalue()
    capsys.readouterr()
    with live_status(ClockLine("Working...")) as redraw:  # captured stderr: no tty
        redraw()
    assert capsys.readouterr().err == ""

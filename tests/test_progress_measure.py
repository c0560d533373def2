"""``--measure``'s progress line reaches the terminal while the work runs (issue 55, 6.1).

The compile and the measured runs write their native logs to file descriptor
2, captured into a temporary file for the time they run; the progress line,
written to descriptor 2 too, went into that file and appeared only when the
capture ended. Here stderr is a real terminal (a pseudo-terminal on
descriptor 2) and the measured run is slowed down: the line must arrive on
the terminal during the run.
"""

import os
import select
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import nnx_introspect._xla.analysis as analysis
from nnx_introspect._xla.run import run_compiled
from nnx_introspect.cli.entry import main

STEP = ["step", "nnx_introspect.examples:two_layer", "--mesh", "data=1"]


class _Terminal:
    """A pseudo-terminal on file descriptor 2; what reached it, with the time."""

    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        self.chunks: list[tuple[float, bytes]] = []
        self.stop = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)

    def _read(self) -> None:
        while not self.stop.is_set():
            ready, _, _ = select.select([self.master], [], [], 0.05)
            if ready:
                try:
                    data = os.read(self.master, 65536)
                except OSError:
                    return
                self.chunks.append((time.monotonic(), data))

    def between(self, start: float, end: float) -> bytes:
        return b"".join(data for at, data in self.chunks if start <= at <= end)


@contextmanager
def _on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Terminal]:
    """Descriptor 2 and ``sys.stderr`` a terminal for the block.

    In the test's body, not a fixture: pytest's capture points descriptor 2
    and ``sys.stderr`` at its own files when the test's call begins.
    """
    shown = _Terminal()
    saved = os.dup(2)
    os.dup2(shown.slave, 2)
    stream = open(2, "w", closefd=False)  # noqa: SIM115 - closed below
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.setenv("COLUMNS", "200")
    shown.reader.start()
    try:
        yield shown
    finally:
        stream.flush()
        os.dup2(saved, 2)
        os.close(saved)
        time.sleep(0.1)
        shown.stop.set()
        shown.reader.join()
        os.close(shown.slave)
        os.close(shown.master)
        monkeypatch.undo()
        stream.close()


def test_the_measure_line_shows_while_the_step_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    times: list[float] = []

    def slow_run(compiled: Any, runs: int) -> dict[str, Any]:
        times.append(time.monotonic())
        time.sleep(1.2)  # the line is redrawn every 0.25 s
        times.append(time.monotonic())
        return run_compiled(compiled, runs)

    with _on_a_terminal(monkeypatch) as terminal:
        assert sys.stderr.isatty()
        monkeypatch.setattr(analysis, "run_compiled", slow_run)
        code = main([*STEP, "--batch", "float32[8,3]", "--measure", "1"])
    assert code == 0 and len(times) == 2
    during = terminal.between(times[0] + 0.3, times[1])
    assert b"Running the step 1 times" in during, terminal.chunks

"""--max-batch progress on a terminal; path-like targets and sizes on the command line."""

import io
import re
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from flax import nnx
from rich.console import Console

from nnx_introspect import mesh_config_report
from nnx_introspect._mesh import parse_bytes
from nnx_introspect._step import step_memory_report
from nnx_introspect._sweep.batch.search import max_batch
from nnx_introspect.cli import main
from nnx_introspect.cli.progress import SearchLine, _duration, live_status
from tests.cli_helpers import run, usage

TARGETS = textwrap.dedent(
    """
    from flax import nnx

    def linear(rngs):
        return nnx.Linear(4, 6, rngs=rngs)
    """
)


STEP = ["step", "issue17_targets:linear", "--mesh", "data=8", "--batch", "float32[8,4]"]
SEARCH = [*STEP, "--max-batch", "--max-device-bytes", "2KiB", "--loss", "none"]


# --- 3. --max-batch progress ---------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


TARGET_MODULES = {"issue17_targets": TARGETS}


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (59.9, "59s"), (60, "1m 00s"), (72.4, "1m 12s"), (3725, "1h 02m")],
)
def test_duration(seconds: float, text: str) -> None:
    assert _duration(seconds) == text


def test_the_line_shows_the_batch_compiling_its_number_and_the_time() -> None:
    clock = Clock()
    line = SearchLine("Searching...", clock)
    assert line.text() == "Searching..."  # before the first compile
    line.compiling(8, 1)
    assert line.text() == "compiling batch 8 (compile 1, 0s)"  # from the first on
    clock.now += 40
    line.done((8, 1536, True))
    line.compiling(16, 2)
    clock.now += 32
    assert line.text() == (
        "compiling batch 16 (compile 2, 1m 12s); batch 8 fits (1.50 KiB per device)"
    )


def test_the_line_moves_on_a_terminal() -> None:
    clock = Clock()
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=120)
    line = SearchLine("Searching the largest batch", clock)
    with live_status(line, console=console, redraw_every=60) as redraw:
        line.redraw = redraw
        line.compiling(24, 5)
        first = buffer.getvalue()
        clock.now += 72
        redraw()  # the clock moved: the same line, redrawn
        second = buffer.getvalue()[len(first) :]
    assert "compiling batch 24 (compile 5, 0s)" in first
    assert "compiling batch 24 (compile 5, 1m 12s)" in second
    assert "\x1b[" in buffer.getvalue()  # drawn in place with control codes


def test_no_line_off_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    pipe = io.StringIO()  # isatty() is False
    monkeypatch.setattr(sys, "stderr", pipe)
    line = SearchLine("Searching", Clock())
    with live_status(line) as redraw:
        line.redraw = redraw
        line.compiling(8, 1)
        redraw()
    assert pipe.getvalue() == ""


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_max_batch_on_a_terminal_shows_every_compile(
    targets_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main([*SEARCH, "--format", "json"]) == 0
    shown = terminal.getvalue()
    monkeypatch.undo()
    numbers = [int(n) for n in re.findall(r"\(compile (\d+), \d+s\)", shown)]
    assert numbers and numbers[0] == 1  # from the first compile on
    assert sorted(set(numbers)) == list(range(1, max(numbers) + 1))
    assert "compiling batch 8 (compile 1, " in shown
    # into a pipe: nothing on stderr
    code, _, err = run([*SEARCH, "--format", "json"], capsys)
    assert code == 0 and err == ""


# --- 7. a target written as a path ----------------------------------------------------


@pytest.mark.parametrize(
    ("target", "module", "where"),
    [
        ("./issue17_targets.py:linear", "issue17_targets", "the current folder"),
        ("issue17_targets.py:linear", "issue17_targets", "the current folder"),
        ("models/my_model.py:make", "my_model", "'models'"),
        ("models/my_model:make", "my_model", "'models'"),
        ("/abs/models/my_model.py:Model.create", "my_model", "'/abs/models'"),
    ],
)
def test_a_path_target_is_one_line_naming_the_module(
    targets_dir: Path,
    capsys: pytest.CaptureFixture[str],
    target: str,
    module: str,
    where: str,
) -> None:
    attr = target.rsplit(":", 1)[1]
    for argv in (["summary", target], ["mesh", target, "--mesh", "a=2"]):
        code, out, err = run(argv, capsys)
        assert code == 2 and out == ""
        assert err == usage(
            argv[0],
            f"nnx-introspect: error: TARGET {target!r} is written like a file path; "
            f"use `module:callable`, e.g. `{module}:{attr}`, run from the folder "
            f"holding {module}.py ({where}) or with that folder on PYTHONPATH.\n",
        )
        assert "package" not in err  # not Python's "'package' argument is required"


def test_the_module_name_the_error_gives_works(
    targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["summary", "issue17_targets:linear"], capsys)
    assert code == 0, err


# --- 8. sizes need a unit --------------------------------------------------------------


@pytest.mark.parametrize(
    "command", [["mesh", "issue17_targets:linear", "--mesh", "a=2"], STEP]
)
@pytest.mark.parametrize("number", ["80", "1.5", "1e3", "0"])
def test_a_bare_number_is_refused_on_the_command_line(
    targets_dir: Path,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
    number: str,
) -> None:
    code, out, err = run([*command, "--max-device-bytes", number], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert (
        f"error: argument --max-device-bytes: needs a unit, got '{number}': write "
        f"{number}GiB, {number}GB, or {number}B for bytes (see 'nnx-introspect "
        f"{command[0]} --help')\n"
    ) in err


@pytest.mark.parametrize(
    ("text", "expected"),
    [("80B", 80), ("80 b", 80), ("80GB", 80 * 10**9), ("80GiB", 80 * 2**30)],
)
def test_a_size_with_its_unit_is_taken(
    targets_dir: Path, capsys: pytest.CaptureFixture[str], text: str, expected: int
) -> None:
    assert parse_bytes(text) == expected
    code, out, err = run(
        ["mesh", "issue17_targets:linear", "--mesh", "a=2", "--max-device-bytes",
         text, "--format", "json"],
        capsys,
    )  # fmt: skip
    # Linear(4, 6) replicated: (4 * 6 + 6) * 4 = 120 bytes per device
    assert code == (0 if expected >= 120 else 1), err
    assert f'"max_device_bytes": {expected}' in out


X = jax.ShapeDtypeStruct((8, 4), jnp.float32)


def linear(rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(4, 6, rngs=rngs)


def test_in_python_an_int_is_bytes_and_a_bare_string_is_refused() -> None:
    model = linear(nnx.Rngs(0))
    plan = mesh_config_report(model, "a=2", max_device_bytes=80)
    assert plan.max_device_bytes == 80 and not plan.ok  # 120 bytes > 80 bytes
    assert parse_bytes(80) == 80 and parse_bytes(80.0) == 80
    match = (
        r"`max_device_bytes` needs a unit, got '80': write '80GiB', '80GB', or "
        r"'80B' for bytes \(an int such as 80 is bytes\)\."
    )
    with pytest.raises(ValueError, match=match):
        parse_bytes("80")
    with pytest.raises(ValueError, match=match):
        mesh_config_report(model, "a=2", max_device_bytes="80")
    with pytest.raises(ValueError, match=match):
        step_memory_report(linear, "data=8", X, max_device_bytes="80")
    with pytest.raises(ValueError, match=match):
        max_batch(linear, "data=8", X, max_device_bytes="80")
    report = step_memory_report(linear, "data=8", X)
    with pytest.raises(ValueError, match=match):
        report.fits("80")
    assert report.fits(10**6) and not report.fits(80)

"""Issue 44's newcomer's list, items 3, 4, 6 and 7, on the command line.

3. A failed ``--measure`` exits with 1 (it exited 0), and a warning comes before
   the run when the compiled program needs more memory than the devices have.
4. Into a file or a pipe, progress is plain lines (it was nothing at all).
6. Every command's default TARGET is the same; the help states the defaults and
   the extras ``--topology`` needs; ``--measure``'s help reads well everywhere.
7. Every message names the flag: each command's table from the library's
   argument to its flag, held by triggering each argument through the command;
   the library's Python phrases of the audit rewritten; an error from a flag
   left at its default says it was the default.
"""

import argparse
import io
import json
import pathlib
import re
import sys
import time
from typing import Any

import pytest

import nnx_introspect
import nnx_introspect._mesh as mesh_module
import nnx_introspect._step as step_module
import nnx_introspect._summary as summary_module
from nnx_introspect._targets import DEFAULT_TARGET
from nnx_introspect._typing import ArgumentError, ArgumentTypeError
from nnx_introspect.cli import progress
from nnx_introspect.cli.errors import COMMAND_FLAGS, in_flags
from nnx_introspect.cli.output import in_flags_report
from nnx_introspect.cli.parser import build_parser
from nnx_introspect.cli.progress import ClockLine, live_status, plain_lines
from tests.cli_helpers import run, usage

TWO = "nnx_introspect.examples:two_layer"
TINY = "nnx_introspect.examples:llama_tiny"
SMALL = "tests.llama_tiny_layers:llama_small"
"""2 layers of width 32: where a serving test compiles, and the size is not held."""
STEP = ["step", TWO, "--mesh", "data=8", "--batch", "float32[8,3]"]
E = "nnx-introspect: error: "


# --- 3. --measure: a failed run exits 1; a warning before a run too big -----------


def _failing_run(seen: list[str], capsys: pytest.CaptureFixture[str]) -> Any:
    def run_compiled(compiled: Any, runs: int) -> dict[str, Any]:
        seen.append(capsys.readouterr().err)  # what stderr said before the run
        return {"error": "RESOURCE_EXHAUSTED: Out of memory allocating 9 GiB",
                "runs": runs, "platform": "cpu", "device_kind": "cpu", "devices": 1}  # fmt: skip

    return run_compiled


def test_a_failed_measured_step_exits_1_after_a_warning(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    monkeypatch.setattr(
        "nnx_introspect._xla.analysis.run_compiled", _failing_run(seen, capsys)
    )
    monkeypatch.setattr(
        "nnx_introspect.cli.measuring.room_to_run", lambda n: (100, "100 B here")
    )
    argv = ["step", TWO, "--mesh", "data=1", "--batch", "float32[8,3]"]
    code, out, err = run([*argv, "--measure", "2", "--format", "json"], capsys)
    assert code == 1
    data = json.loads(out)
    assert data["measured"]["error"].startswith("RESOURCE_EXHAUSTED")
    # the warning came before the run: stderr held it when the run started
    assert len(seen) == 1 and seen[0].startswith("nnx-introspect: warning: the step ")
    assert (
        f"needs {data['peak_bytes']} B per device" in seen[0] or "per device" in seen[0]
    )
    assert "more than 100 B here" in seen[0]
    assert err == (
        "nnx-introspect: error: the measured run of the step failed: "
        "RESOURCE_EXHAUSTED: Out of memory allocating 9 GiB\n"
    )


def test_a_measured_step_that_fits_exits_0_without_a_warning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["step", TWO, "--mesh", "data=1", "--batch", "float32[8,3]"]
    code, out, err = run([*argv, "--measure", "2", "--format", "json"], capsys)
    assert (code, err) == (0, "")
    assert len(json.loads(out)["measured"]["seconds"]) == 2


def test_a_failed_measured_serving_run_exits_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    monkeypatch.setattr(
        "nnx_introspect._xla.analysis.run_compiled", _failing_run(seen, capsys)
    )
    argv = ["serve", SMALL, "--mesh", "tp=1", "--sequences", "2", "--context", "16"]
    code, _, err = run([*argv, "--measure", "1", "--format", "json"], capsys)
    assert code == 1 and seen == ["", ""]  # room for it: no warning
    assert err == (
        "nnx-introspect: error: the measured run of prefill failed: "
        "RESOURCE_EXHAUSTED: Out of memory allocating 9 GiB\n"
        "nnx-introspect: error: the measured run of decode failed: "
        "RESOURCE_EXHAUSTED: Out of memory allocating 9 GiB\n"
    )


def test_the_room_to_run_is_the_hosts_available_memory() -> None:
    from nnx_introspect.cli.measuring import room_to_run

    meminfo = pathlib.Path("/proc/meminfo")
    if not meminfo.exists():
        pytest.skip("no /proc/meminfo")
    fields = dict(line.split(":", 1) for line in meminfo.read_text().splitlines())
    available = int(fields["MemAvailable"].split()[0]) * 1024
    room = room_to_run(4)
    assert room is not None
    # within what the host freed or took between the two readings
    assert abs(room[0] - available // 4) < available // 4 * 0.2
    assert room[1].startswith("this host's ") and "shared by 4 CPU devices" in room[1]


# --- 4. progress into a file or a pipe ---------------------------------------------


def test_plain_lines_after_the_quiet_time(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "stderr.txt"
    with path.open("w") as stream:
        line = ClockLine("Searching...")
        with plain_lines(line, stream, quiet_seconds=0.05, every=0.1) as redraw:
            time.sleep(0.45)
            redraw()
    lines = path.read_text().splitlines()
    assert len(lines) >= 3
    assert all(x.startswith("nnx-introspect: Searching...") for x in lines)
    assert lines[0].startswith("nnx-introspect: Searching... (0s)")
    assert lines[-1] == "nnx-introspect: Searching... done (0s)"


def test_a_quick_run_writes_nothing(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "stderr.txt"
    with path.open("w") as stream, live_status(ClockLine("Quick..."), stream=stream):
        pass
    assert path.read_text() == ""


def test_no_lines_into_a_stream_without_a_file_or_when_off(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    buffer = io.StringIO()
    with live_status(ClockLine("x"), stream=buffer, quiet_seconds=0, every=0.01):
        time.sleep(0.05)
    assert buffer.getvalue() == ""
    monkeypatch.setenv("NNX_INTROSPECT_PROGRESS", "off")
    path = tmp_path / "stderr.txt"
    with (
        path.open("w") as stream,
        live_status(ClockLine("x"), stream=stream, quiet_seconds=0, every=0.01),
    ):
        time.sleep(0.05)
    assert path.read_text() == ""


def test_a_search_into_a_file_says_what_it_does(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``serve --max-sequences`` with stderr redirected: lines, and a last one."""
    monkeypatch.setattr(progress, "QUIET_SECONDS", 0.0)
    monkeypatch.setattr(progress, "EVERY_SECONDS", 0.5)
    path = tmp_path / "stderr.txt"
    argv = ["serve", SMALL, "--mesh", "tp=1", "--context", "16", "--max-sequences"]
    argv += ["--max-device-bytes", "64KiB", "--format", "json"]
    with path.open("w") as stream:
        monkeypatch.setattr(sys, "stderr", stream)
        code = nnx_introspect.cli.main(argv)
        monkeypatch.undo()
    lines = path.read_text().splitlines()
    searching = f"nnx-introspect: Searching prefill and decode of {SMALL} with XLA..."
    assert code == 1  # no sequence fits 64 KiB: said last
    assert lines[0].startswith(f"{searching} (0s)")
    assert any(x.startswith(f"{searching} done (") for x in lines)


# --- 6. defaults and help ----------------------------------------------------------

REQUIRED = {
    "summary": [],
    "mesh": ["--mesh", "fsdp=2,tp=4"],
    "step": ["--mesh", "fsdp=2,tp=4", "--batch", "int32[8,128]"],
    "serve": ["--sequences", "8", "--context", "128"],
    "rl": ["--batch", "2", "--generations", "2", "--prompt", "8", "--completion", "8"],
}


@pytest.mark.parametrize("command", REQUIRED)
def test_every_command_has_the_same_default_target(command: str) -> None:
    args = build_parser().parse_args([command, *REQUIRED[command]])
    assert args.target == DEFAULT_TARGET == "nnx_introspect.examples:llama_7b_sharded"


def _help(command: str) -> str:
    """``command --help``, its lines joined (never cut at a hyphen)."""
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return " ".join(action.choices[command].format_help().split())
    raise AssertionError(command)


@pytest.mark.parametrize(
    ("command", "reads"),
    [
        ("step", "run the compiled step on this machine's devices"),
        ("serve", "run the compiled prefill and decode on this machine's devices"),
        ("rl", "run the compiled program of each phase on this machine's devices"),
    ],
)
def test_the_measure_help_reads_well(command: str, reads: str) -> None:
    text = _help(command)
    assert reads in text and "default 5" in text


@pytest.mark.parametrize("command", ["step", "serve"])
def test_the_topology_help_names_the_extras(command: str) -> None:
    text = _help(command)
    assert 'pip install "nnx-introspect[tpu]"' in text
    assert 'pip install "nnx-introspect[gpu]"' in text


def test_the_microbatches_help_states_its_default() -> None:
    assert "(default: 1, the whole batch at once)" in _help("step")


def test_serve_max_device_bytes_is_read_with_its_unit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["serve", TINY, "--sequences", "2", "--context", "16"]
    code, _, err = run([*argv, "--max-device-bytes", "12"], capsys)
    assert code == 2
    assert "an int such as" not in err
    assert err.startswith(
        "nnx-introspect serve: error: argument --max-device-bytes: needs a unit, "
        "got '12': write 12GiB, 12GB, or 12B for bytes"
    )


# --- 7. the flags' words -----------------------------------------------------------


def _raises(error: BaseException) -> Any:
    def fail(*args: Any, **kwargs: Any) -> None:
        raise error

    return fail


ENTRY = {  # where each command first hands its flags to the library
    "summary": (summary_module, "summarize", ["summary", TWO]),
    "mesh": (mesh_module, "mesh_config_report", ["mesh", TWO, "--mesh", "data=8"]),
    "step": (step_module, "step_memory_report", STEP),
    "serve": (nnx_introspect, "serve_memory_report",
              ["serve", TINY, "--mesh", "tp=1", "--sequences", "2", "--context", "8"]),
    "rl": (nnx_introspect, "rl_memory_report",
           ["rl", TINY, "--mesh", "tp=1", "--batch", "1", "--generations", "1",
            "--prompt", "4", "--completion", "4"]),
}  # fmt: skip


@pytest.mark.parametrize(
    ("command", "argument"),
    [(c, a) for c in ENTRY for a in COMMAND_FLAGS[c]],
)
def test_every_argument_of_a_command_reaches_its_flag(
    command: str,
    argument: str,
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module, name, argv = ENTRY[command]
    flag = COMMAND_FLAGS[command][argument]
    kind = ArgumentTypeError if argument == "optimizer" else ArgumentError
    error = kind(argument, f"`{argument}` 3 is wrong; pass `{argument}=4`.")
    monkeypatch.setattr(module, name, _raises(error))
    if flag == "--rules":  # a rules file given: the rules are the cause
        (tmp_path / "rules.json").write_text("[]")
        argv = [*argv, "--rules", str(tmp_path / "rules.json")]
    code, out, err = run(argv, capsys)
    assert (code, out) == (2, "")
    assert err.startswith(
        f"nnx-introspect {command}: error: argument {flag}: {flag} 3 is wrong; pass "
    )
    assert "`" not in err and f"{argument}=" not in err
    assert err.count("\n") == 1


# The audit's messages, each from the library as it words it for Python callers
AUDIT = {
    "measure": (
        [*STEP[:2], "--mesh", "data=16", "--batch", "float32[16,3]", "--measure", "5"],
        "argument --measure: --measure 5 runs the step on this process's devices, "
        "but --mesh data=16 needs 16 and this process has 8 (cpu). Measure on a "
        "machine with the mesh's devices, or leave --measure out.",
    ),
    "microbatches": (
        [*STEP, "--microbatches", "3"],
        "argument --microbatches: --microbatches 3 does not divide the 1st --batch's "
        "8 rows. Pass a divisor of 8.",
    ),
    "default mesh": (
        ["serve", TINY, "--sequences", "2", "--context", "16"],
        "argument --mesh: --mesh tp=8 does not divide the 4 KV heads of the cache. "
        "Use a tensor-parallel size of [1, 2, 4], with the rest of the devices as "
        "data-parallel replicas. --mesh tp=8 is the default (no --mesh was given).",
    ),
}


@pytest.mark.parametrize("case", AUDIT)
def test_the_audits_messages_name_the_flags(
    case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv, message = AUDIT[case]
    code, out, err = run(argv, capsys)
    assert (code, out, err) == (2, "", usage(argv[0], f"{E}{message}\n"))


PHRASES = {  # the command, the library's words for Python callers, the flags'
    "generations": (
        "rl",
        "Pass generations=1, or no critic for GRPO.",
        "Pass --generations 1, or no critic for GRPO.",
    ),
    "rollout split": (
        "rl",
        "`batch` 6 (prefilled 6 at a time) does not split over the 4 data-parallel "
        "devices of the mesh. Pass a multiple of 4. (the rollout's 6 sequences are "
        "batch x generations)",
        "the rollout's 6 sequences (--batch x --generations) do not split over the "
        "4 data-parallel devices of the mesh. Make --batch x --generations a "
        "multiple of 4.",
    ),
    "network": (
        "step",
        "one 400 Gb/s NIC per GPU, 400/8 GB/s per direction (override with "
        "`network_bytes_per_second`)",
        "one 400 Gb/s NIC per GPU, 400/8 GB/s per direction (override with "
        "--network-bandwidth)",
    ),
    "lo and hi": (
        "step",
        "the answer fits, a larger batch may too. Start from a batch nearer the "
        "answer, or narrow `lo` and `hi`.",
        "the answer fits, a larger batch may too. Start from a --batch nearer the "
        "answer.",
    ),
    "path": (
        "checkpoint",
        "`path` '/x' does not exist.",
        "PATH /x does not exist.",
    ),
    "an int is bytes": (
        "rl",
        "`max_device_bytes` needs a unit, got '12': write '12GiB', '12GB', or '12B' "
        "for bytes (an int such as 12 is bytes).",
        "--max-device-bytes needs a unit, got '12': write '12GiB', '12GB', or '12B' "
        "for bytes.",
    ),
}


def _library_source() -> str:
    """The library's source (not the command line's), its lines joined."""
    root = pathlib.Path(nnx_introspect.__file__).parent
    texts = [p.read_text() for p in sorted(root.rglob("*.py")) if "cli" not in p.parts]
    joined = " ".join(" ".join(texts).split())
    return re.sub(r'" f?"', "", joined)  # adjacent string literals as one


@pytest.mark.parametrize("case", PHRASES)
def test_the_librarys_python_phrases_become_the_flags(case: str) -> None:
    command, python, cli = PHRASES[case]
    # the library still says it so (else this test would test nothing)
    for word in ("generations=1", "at a time)", "(override with `network_bytes",
                 "narrow `lo` and `hi`", "does not exist", "is bytes)"):  # fmt: skip
        if word in python:
            assert word in _library_source(), word
    assert in_flags(python, command) == cli


def test_a_reports_notes_are_in_the_flags_words() -> None:
    from nnx_introspect._render import Table

    class Noted(nnx_introspect._render.Report):
        def table(self) -> Table:
            return Table("t", ("a",), (("1",),), notes=(PHRASES["network"][1],))

    report = Noted()
    shown = in_flags_report(report, "step")
    assert shown.table().notes == (PHRASES["network"][2],)
    assert report.table().notes == (PHRASES["network"][1],)  # the report unchanged
    assert "--network-bandwidth" in shown.to_markdown()

"""The ``mesh`` subcommand: formats, rules files, budgets and exit codes."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.cli_helpers import run

TARGETS = textwrap.dedent(
    """
    from flax import nnx

    def linear(rngs):
        return nnx.Linear(4, 6, rngs=rngs)

    def sharded(rngs):
        init = nnx.with_partitioning(nnx.initializers.lecun_normal(), (None, "tp"))
        return nnx.Linear(4, 6, kernel_init=init, rngs=rngs)

    class Stack(nnx.Module):
        def __init__(self, rngs):
            self.layers = nnx.List([sharded(rngs) for _ in range(32)])

    def stack32(rngs):
        return Stack(rngs)
    """
)


TARGET_MODULES = {"mesh_targets_mod": TARGETS}


def test_json_plan_exit_0(
    targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        [
            "mesh",
            "mesh_targets_mod:linear",
            "--mesh",
            "data=2,model=4",
            "--format",
            "json",
        ],
        capsys,
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["mesh"] == {"data": 2, "model": 4}
    assert data["bytes_per_device"] == (4 * 6 + 6) * 4  # replicated
    assert data["ok"] is True


def test_rules_file_and_optimizer(
    targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = targets_dir / "rules.json"
    rules.write_text('[["kernel", [null, "model"]], ["nothing", []]]')
    code, out, err = run(
        [
            "mesh",
            "mesh_targets_mod:linear",
            "--mesh",
            "model=2",
            "--rules",
            str(rules),
            "--optimizer",
            "adamw",
            "--format",
            "json",
        ],
        capsys,
    )
    assert code == 0, err  # an unmatched rule is a warning, not a failure
    data = json.loads(out)
    kernel = next(x for x in data["leaves"] if x["path"] == "kernel")
    assert kernel["shard_shape"] == [4, 3]
    assert data["unmatched_rules"] == ["nothing"]
    # params 12 + 6 floats; adamw mu + nu of both, count, step; gradients as params.
    assert data["bytes_per_device_by_category"] == {
        "params": (12 + 6) * 4,
        "other state": 0,
        "optimizer state": 2 * (12 + 6) * 4 + 4 + 4,
        "gradients": (12 + 6) * 4,
    }


def test_logical_rules_from_file(
    targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = targets_dir / "rules.json"
    rules.write_text('{"logical_rules": [["tp", "model"]]}')
    args = ["mesh", "mesh_targets_mod:sharded", "--mesh", "model=3", "--format", "json"]
    code, out, _ = run([*args, "--rules", str(rules)], capsys)
    assert code == 0
    kernel = next(x for x in json.loads(out)["leaves"] if x["path"] == "kernel")
    assert (kernel["spec"], kernel["shard_shape"]) == ([None, "model"], [4, 2])
    # Without the translation, 'tp' is not a mesh axis: a problem, exit code 1.
    code, out, err = run(args, capsys)
    assert code == 1
    assert "mesh plan has 1 problem(s)" in err
    assert json.loads(out)["problems"][0]["kind"] == "unknown-axis"


def test_indivisible_exit_1(
    targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = targets_dir / "rules.json"
    rules.write_text('[["kernel", ["model", "data"]], ["bias", ["model"]]]')
    code, out, err = run(
        [
            "mesh",
            "mesh_targets_mod:linear",
            "--mesh",
            "data=4,model=8",
            "--rules",
            str(rules),
            "--format",
            "markdown",
        ],
        capsys,
    )
    assert code == 1
    assert "mesh plan has 3 problem(s)" in err
    # All three at once: kernel dims 0 (4 over 8) and 1 (6 over 4), bias (6 over 8).
    assert "dimension 0 (size 4) does not divide over model (product 8)" in out
    assert "dimension 1 (size 6) does not divide over data (product 4)" in out
    assert "`bias` with shape (6,): dimension 0 (size 6)" in out


@pytest.mark.parametrize(("budget", "code"), [("120B", 0), ("119B", 1), ("1KiB", 0)])
def test_budget_exit_code(
    budget: str, code: int, targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    got, _, err = run(
        [
            "mesh",
            "mesh_targets_mod:linear",
            "--mesh",
            "model=2",
            "--max-device-bytes",
            budget,
            "--format",
            "json",
        ],
        capsys,
    )
    assert got == code  # 30 float32 replicated = 120 bytes per device
    if code:
        assert err == (
            "nnx-introspect: 120 B (120 bytes) per device exceed the budget of "
            "119 B (119 bytes).\n"
        )


def test_budget_message_uses_the_table_units(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The 7B example on one device: 6,738,415,616 float32 parameters (the
    # one without sharding names: the default names fsdp and tp)
    argv = ["mesh", "nnx_introspect.examples:llama_7b", "--mesh", "data=1"]
    code, _, err = run(
        [*argv, "--max-device-bytes", "1GiB", "--format", "json"], capsys
    )
    assert code == 1
    assert 6_738_415_616 * 4 == 26_953_662_464
    assert err == (
        "nnx-introspect: 25.10 GiB (26,953,662,464 bytes) per device exceed the "
        "budget of 1 GiB (1,073,741,824 bytes).\n"
    )


def test_problems_and_budget_are_one_line(
    targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        ["mesh", "mesh_targets_mod:sharded", "--mesh", "model=2",
         "--max-device-bytes", "100B", "--format", "json"],
        capsys,
    )  # fmt: skip
    assert code == 1
    assert err == (
        "nnx-introspect: mesh plan has 1 problem(s); see the notes; 120 B "
        "(120 bytes) per device exceed the budget of 100 B (100 bytes).\n"
    )


def test_html_format(targets_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        [
            "mesh",
            "mesh_targets_mod:linear",
            "--mesh",
            "data=2,model=4",
            "--format",
            "html",
            "--max-device-bytes",
            "100B",
        ],
        capsys,
    )
    assert code == 1  # 120 B > 100 B
    assert out.startswith("<!DOCTYPE html>")
    assert "Bytes per device by kind" in out and "EXCEEDS the budget" in out


def test_table_format_is_full_width(
    targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(["mesh", "mesh_targets_mod:linear", "--mesh", "model=2"], capsys)
    assert code == 0
    assert "kernel" in out and "replicated over" in out and "total per device" in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--mesh", "data2"], "argument --mesh: must look like 'data=2,model=4', got "
         "'data2': 'data2' is not 'axis=size'"),
        (["--mesh", "model=0"], "argument --mesh: the size of axis 'model' must be a "
         "positive integer, got '0' in 'model=0'"),
        (["--mesh", "a=2,a=4"], "argument --mesh: names axis 'a' twice in 'a=2,a=4'"),
        (["--mesh", "model=2", "--max-device-bytes", "lots"], "argument "
         "--max-device-bytes: must be a size like '16GiB', '500MB' or '4096B', got 'lots'"),
        (["--mesh", "model=2", "--max-device-bytes", "0.1B"], "argument "
         "--max-device-bytes: must be a whole number of bytes, got '0.1B'"),
        (["--mesh", "model=2", "--max-device-bytes", "80"], "argument "
         "--max-device-bytes: needs a unit, got '80': write 80GiB, 80GB, or 80B for "
         "bytes"),
        (["--mesh", "model=2", "--optimizer", "adamx"], "argument --optimizer: invalid "
         "choice: 'adamx'"),
        ([], "the following arguments are required: --mesh"),
    ],
)  # fmt: skip
def test_usage_errors_exit_2(
    extra: list[str],
    message: str,
    targets_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(["mesh", "mesh_targets_mod:linear", *extra], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("nnx-introspect mesh: error: ")
    assert message in err
    assert "max_device_bytes" not in err  # the flag, never the Python parameter


def test_mesh_limits_checked_by_the_library_name_the_flag(
    targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Past the syntax check, the library's own checks still name the flag.
    code, out, err = run(
        ["mesh", "mesh_targets_mod:linear", "--mesh", f"model={10**40}"], capsys
    )
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("nnx-introspect mesh: error: argument --mesh: `--mesh")
    assert "Traceback" not in err and "bad_cast" not in err


def test_bad_rules_file_exit_2(
    targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = targets_dir / "bad.json"
    bad.write_text("{not json")
    for path in (str(bad), str(targets_dir / "missing.json")):
        code, _, err = run(
            ["mesh", "mesh_targets_mod:linear", "--mesh", "model=2", "--rules", path],
            capsys,
        )
        assert code == 2 and err.count("\n") == 1
        assert "argument --rules: " in err


def test_bad_target_exit_2(
    targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["mesh", "mesh_targets_mod:nope", "--mesh", "model=2"], capsys)
    assert code == 2
    assert "nope" in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('[["(", [null]]]', "`rules[0]` has an invalid regular expression '('"),
        ('[["kernel", [5]]]', "`rules[0]` entries must be None, an axis name"),
        ('{"logical_rules": [["tp"]]}', "`logical_rules"),
    ],
)
def test_rules_the_planner_rejects_name_the_flag(
    content: str, message: str, targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = targets_dir / "rules.json"
    rules.write_text(content)
    code, out, err = run(
        [
            "mesh",
            "mesh_targets_mod:sharded",
            "--mesh",
            "model=2",
            "--rules",
            str(rules),
        ],
        capsys,
    )
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(
        f"nnx-introspect mesh: error: argument --rules: {str(rules)!r}: "
    )
    assert message in err


# --- one verdict in every format and the exit code (issue 13) ---------------------


def _verdict_line(text: str) -> str:
    import html as html_lib
    import re

    match = re.search(r'<p class="verdict[^"]*">([^<]*)</p>', text)
    if match:  # the HTML page: its verdict paragraph
        return html_lib.unescape(match.group(1))
    return next(line for line in text.splitlines() if line.startswith(("OK", "FAIL")))


@pytest.mark.parametrize(("budget", "ok"), [("100B", False), ("1KiB", True)])
def test_every_format_and_the_exit_code_give_one_verdict(
    targets_dir: Path, capsys: pytest.CaptureFixture[str], budget: str, ok: bool
) -> None:
    # nnx.Linear(4, 6) replicated over model=4: (4 * 6 + 6) * 4 = 120 B per device.
    argv = ["mesh", "mesh_targets_mod:linear", "--mesh", "model=4"]
    argv += ["--max-device-bytes", budget]
    code, out, err = run([*argv, "--format", "json"], capsys)
    data = json.loads(out)
    assert code == (0 if ok else 1)
    assert (data["ok"], data["fits"], data["max_device_bytes"]) == (
        ok,
        ok,
        100 if budget == "100B" else 1024,
    )
    assert data["bytes_per_device"] == 120
    assert (err == "") is ok
    verdicts = {"json": data["verdict"]}
    for fmt in ("markdown", "html", "table"):
        code, out, err = run([*argv, "--format", fmt], capsys)
        assert code == (0 if ok else 1), fmt
        verdicts[fmt] = _verdict_line(out)
        if fmt == "markdown":  # right under the title, before the table
            assert out.splitlines()[2] == verdicts[fmt]
        if fmt == "table":  # before the first leaf row
            lines = out.splitlines()
            first = next(i for i, line in enumerate(lines) if "kernel" in line)
            assert lines.index(verdicts[fmt]) < first
    assert len(set(verdicts.values())) == 1, verdicts
    verdict = verdicts["json"]
    assert verdict.startswith("OK: " if ok else "FAIL: ")
    assert ("EXCEEDS the budget of 100 B" in verdict) is not ok


# --- no accelerator start-up noise on stderr (issue 14) ----------------------------


def _cli_process(*argv: str) -> "subprocess.CompletedProcess[str]":
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    env.pop("XLA_FLAGS", None)  # as a user runs it: no virtual devices either
    return subprocess.run(
        [sys.executable, "-m", "nnx_introspect", *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env=env,
    )


def test_commands_print_nothing_on_stderr_without_jax_platforms() -> None:
    result = _cli_process("summary", "nnx_introspect.examples:llama_tiny")
    assert (result.returncode, result.stderr) == (0, "")
    result = _cli_process(
        "mesh", "nnx_introspect.examples:llama_tiny", "--mesh", "data=2"
    )
    assert (result.returncode, result.stderr) == (0, "")
    result = _cli_process(
        "mesh", "nnx_introspect.examples:llama_tiny_sharded", "--mesh", "fsdp=3,tp=5"
    )
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("nnx-introspect: mesh plan has ")


def test_a_bad_mesh_folds_its_32_layers(
    targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every layer's kernel (4, 6) puts 6 over tp=4: 32 problems, 64 leaves.
    args = ["mesh", "mesh_targets_mod:stack32", "--mesh", "tp=4"]
    code, out, err = run([*args, "--format", "markdown"], capsys)
    assert code == 1 and "mesh plan has 32 problem(s)" in err
    rows = [line for line in out.splitlines() if line.startswith("| layers/")]
    # One row per leaf of a layer, bytes summed over the 32: the kernel cannot
    # be applied, so each device holds it whole (4 * 6 float32), the bias is
    # replicated (6 float32).
    assert rows == [
        "| layers/*/bias \u00d732 | (6,) | P() | default | (6,) | tp | 768 B | 192 B |",
        "| layers/*/kernel \u00d732 | (4, 6) | P(None, 'tp') | metadata | - | tp | "
        "3 KiB | 768 B |",
    ]
    assert 32 * 6 * 4 == 768 and 32 * 4 * 6 * 4 == 3 * 1024
    problems = [line for line in out.splitlines() if "does not divide" in line]
    assert problems == [
        "- `layers/*/kernel` \u00d732 with shape (4, 6): dimension 1 (size 6) does not "
        "divide over tp (product 4). Pad the dimension to a multiple of 4 or choose "
        "axes whose product divides it."
    ]
    assert len(out.splitlines()) < 30  # was 110: 64 rows and 32 notes
    code, out, _ = run([*args, "--format", "json"], capsys)
    data = json.loads(out)  # the JSON keeps every leaf and every problem
    assert len(data["leaves"]) == 64 and len(data["problems"]) == 32


def test_the_readmes_bad_mesh_prints_one_note_per_distinct_problem(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The 7B example on fsdp=3,tp=5: per layer, q, k, v, gate and up split
    # 4096 over fsdp=3 and 4096 or 11008 over tp=5, o and down the same two the
    # other way round (14 problems); the embedding and lm_head split 4096 over
    # fsdp=3 (32000 divides by 5): 32 * 14 + 2 = 450 problems, 16 distinct.
    code, out, err = run(
        ["mesh", "nnx_introspect.examples:llama_7b_sharded", "--mesh", "fsdp=3,tp=5"],
        capsys,
    )
    assert code == 1 and "mesh plan has 450 problem(s)" in err
    assert 32 * 14 + 2 == 450
    notes = [line for line in out.splitlines() if "does not divide over" in line]
    assert len(notes) == 16
    assert sum("\u00d732" in note for note in notes) == 14
    assert len(out.splitlines()) < 100  # one line per leaf and problem: 1,209

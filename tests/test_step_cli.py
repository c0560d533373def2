"""The ``step`` subcommand: batches, losses, budgets and exit codes."""

import io
import json
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from nnx_introspect._step import parse_batch, step_memory_report
from nnx_introspect.cli import batch_arg, main
from tests.cli_helpers import run, usage

TARGETS = textwrap.dedent(
    """
    from flax import nnx

    def linear(rngs):
        return nnx.Linear(4, 6, rngs=rngs)

    def sharded(rngs):
        init = nnx.with_partitioning(nnx.initializers.lecun_normal(), (None, "tp"))
        return nnx.Linear(4, 6, kernel_init=init, rngs=rngs)

    def first_sum(model, batch):
        return model(batch[0]).sum()

    def vector_loss(model, batch):
        return model(batch[0])

    def not_a_module(rngs):
        return 3
    """
)


BASE = [
    "step",
    "step_cli_targets:linear",
    "--mesh",
    "data=8",
    "--batch",
    "float32[8,4]",
]


TARGET_MODULES = {"step_cli_targets": TARGETS}


def test_json_report_exit_0(
    targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run([*BASE, "--format", "json", "--optimizer", "adamw"], capsys)
    assert code == 0, err
    data = json.loads(out)
    params = (4 * 6 + 6) * 4
    # params, mu, nu replicated; one row of x; adam's count and the step counter
    assert data["argument_bytes"] == 3 * params + 4 * 4 + 4 + 4
    assert data["optimizer"] == "adamw" and data["loss"] == "mean"
    assert data["mesh"] == {"data": 8}
    assert err == ""  # stderr is not a terminal: no progress line


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("extra", "shown"),
    [
        ([], "Compiling the step of step_cli_targets:linear on 8 devices"),
        (
            ["--max-batch", "--max-device-bytes", "1MiB", "--loss", "none"],
            "Searching the largest batch of step_cli_targets:linear on 8 devices",
        ),
    ],
)
def test_progress_only_on_a_terminal(
    targets_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    extra: list[str],
    shown: str,
) -> None:
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    code = main([*BASE, *extra, "--format", "json"])
    assert code == 0
    assert shown in terminal.getvalue()
    monkeypatch.undo()
    code, _, err = run([*BASE, *extra, "--format", "json"], capsys)
    assert code == 0 and err == ""


def test_over_budget_exits_1(
    targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        [*BASE, "--max-device-bytes", "100B", "--format", "json"], capsys
    )
    data = json.loads(out)
    peak = data["peak_bytes"]
    assert peak > 100
    assert code == 1
    # stderr's one line is the report's verdict, word for word
    assert err == f"nnx-introspect: {data['verdict']}.\n"
    assert data["verdict"].startswith("Does not fit: needs ")
    assert "the budget is 100 B (the budget given)" in data["verdict"]
    # the report's verdict is the exit code's, in every format
    assert data["ok"] is False and data["fits"] is False
    assert data["max_device_bytes"] == 100
    code, out, _ = run(
        [*BASE, "--max-device-bytes", "100B", "--format", "markdown"], capsys
    )
    assert code == 1 and out.startswith("**Does not fit")
    code, out, err = run(
        [*BASE, "--max-device-bytes", f"{peak}B", "--format", "json"], capsys
    )
    assert code == 0, err
    assert json.loads(out)["ok"] is True and json.loads(out)["fits"] is True


def test_table_puts_the_verdict_first(
    targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run([*BASE, "--loss", "none", "--format", "markdown"], capsys)
    assert code == 0, err
    assert out.startswith("**Peak ")
    assert "XLA:CPU" in out.splitlines()[0]
    code, out, _ = run([*BASE, "--loss", "none"], capsys)
    assert code == 0 and out.lstrip().startswith("Peak ")
    code, out, _ = run([*BASE, "--format", "html"], capsys)
    assert code == 0 and out.startswith("<!DOCTYPE html>")


def test_custom_loss_rules_and_several_batches(
    targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = targets_dir / "rules.json"
    rules.write_text(json.dumps([["kernel", [None, "data"]]]))
    code, out, err = run(
        [
            "step",
            "step_cli_targets:linear",
            "--mesh",
            "data=2",
            "--batch",
            "float32[8,4]",
            "--batch",
            "int32[8]",
            "--loss",
            "step_cli_targets:first_sum",
            "--rules",
            str(rules),
            "--format",
            "json",
        ],
        capsys,
    )
    assert code == 0, err
    data = json.loads(out)
    # the int32 leaf is unused by the loss but still on the device: counted
    assert data["argument_bytes"] == (4 * 6 // 2 + 6) * 4 + 4 * 4 * 4 + 4 * 4
    assert data["batch"] == ["float32[8,4]", "int32[8]"]


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--batch", "float32[8,5]"], "--batch (float32[8,4], float32[8,5])"),
        (["--loss", "lm"], "--loss lm needs the 1st --batch"),
        (["--loss", "bogus"], "argument --loss: must be 'mean', 'lm', 'none'"),
        (["--loss", "step_cli_targets:nothing"], "has no attribute 'nothing'"),
        (["--topology", "v5e-3"], "--topology v5e-3"),
        (["--topology", "v5e-4"], "--topology v5e-4 has 4 chips"),
        (["--rules", "missing.json"], "the rules file 'missing.json' does not exist"),
    ],
)
def test_bad_input_exits_2(
    targets_dir: Path,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    match: str,
) -> None:
    code, out, err = run([*BASE, *extra], capsys)
    assert code == 2, err
    assert match in err and out == ""
    assert err.count("\n") == 1  # one error line, no progress line


def test_indivisible_plan_exits_2(
    targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        ["step", "step_cli_targets:sharded", "--mesh", "data=2,tp=4", *BASE[4:]],
        capsys,
    )
    assert code == 2
    # the kernel's 6 columns over tp = 4: the mesh is the flag to change
    assert err.startswith("nnx-introspect step: error: argument --mesh: ")
    assert "`kernel` dimension 1, size 6, over tp = 4" in err


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--batch", "int32(8,2)"], "argument --batch: must look like 'int32[8,2048]'"),
        (["--batch", "int33[8]"], "'int33' is not a dtype"),
        (["--batch", "int32[8,x]"], "dimensions must be integers"),
        (["--mesh", "data"], "argument --mesh: must look like"),
        (["--max-device-bytes", "lots"], "argument --max-device-bytes: must be a size"),
    ],
)
def test_unparsable_arguments_exit_2(
    targets_dir: Path, capsys: pytest.CaptureFixture[str], argv: list[str], match: str
) -> None:
    base = ["step", "step_cli_targets:linear", "--mesh", "data=8"]
    if "--batch" not in argv:
        base += ["--batch", "float32[8,4]"]
    code, _, err = run([*base, *argv], capsys)
    assert code == 2
    assert match in err


def test_bad_target_exits_2(
    targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["step", "nope_module:f", *BASE[2:]], capsys)
    assert code == 2
    assert "cannot import module 'nope_module'" in err


def test_parse_batch() -> None:
    leaf = parse_batch(*batch_arg("bfloat16[2, 3]"))
    assert leaf.shape == (2, 3) and leaf.dtype == jnp.bfloat16
    assert parse_batch(*batch_arg("int32[]")).shape == ()
    with pytest.raises(ValueError, match="'int33' is not a dtype"):
        parse_batch("int33", (8,))


# --- every flag, one bad value at a time ---------------------------------------

STEP = ["step", "step_cli_targets:linear"]
MESH = ["--mesh", "data=8"]
BATCH = ["--batch", "float32[8,4]"]
SEARCH = ["--max-batch", "--max-device-bytes", "1MiB"]

SWEEP: dict[str, tuple[list[str], str]] = {
    # id: (argv after "step", what the one stderr line must say)
    "target-missing-module": (["nope_module:f", *MESH, *BATCH], "TARGET"),
    "target-not-a-module": (["step_cli_targets:not_a_module", *MESH, *BATCH], "TARGET"),
    "mesh-syntax": ([STEP[1], "--mesh", "data", *BATCH], "argument --mesh"),
    "mesh-zero": ([STEP[1], "--mesh", "data=0", *BATCH], "argument --mesh"),
    "mesh-huge": ([STEP[1], "--mesh", "data=99999999999", *BATCH], "argument --mesh"),
    "mesh-indivisible": ([STEP[1], "--mesh", "data=3", *BATCH], "argument --batch"),
    "rules-missing": ([STEP[1], *MESH, *BATCH, "--rules", "nope.json"], "--rules"),
    "rules-not-json": ([STEP[1], *MESH, *BATCH, "--rules", "bad.json"], "--rules"),
    "rules-bad-regex": ([STEP[1], *MESH, *BATCH, "--rules", "regex.json"], "--rules"),
    "rules-unknown-axis": ([STEP[1], *MESH, *BATCH, "--rules", "axis.json"], "--rules"),
    "optimizer-unknown": (
        [STEP[1], *MESH, *BATCH, "--optimizer", "adamz"],
        "--optimizer",
    ),
    "optimizer-no-loss": (
        [STEP[1], *MESH, *BATCH, "--optimizer", "adamw", "--loss", "none"],
        "argument --optimizer",
    ),
    "budget-word": (
        [STEP[1], *MESH, *BATCH, "--max-device-bytes", "lots"],
        "--max-device-bytes",
    ),
    "budget-negative": (
        [STEP[1], *MESH, *BATCH, "--max-device-bytes", "-1"],
        "--max-device-bytes",
    ),
    "budget-fraction": (
        [STEP[1], *MESH, *BATCH, "--max-device-bytes", "1.5B"],
        "--max-device-bytes",
    ),
    "budget-infinite": (
        [STEP[1], *MESH, *BATCH, "--max-device-bytes", "1e400B"],
        "--max-device-bytes",
    ),
    "budget-no-unit": (
        [STEP[1], *MESH, *BATCH, "--max-device-bytes", "80"],
        "--max-device-bytes",
    ),
    "batch-syntax": ([STEP[1], *MESH, "--batch", "int32(8,2)"], "argument --batch"),
    "batch-dtype": ([STEP[1], *MESH, "--batch", "int33[8]"], "argument --batch"),
    "batch-dims": ([STEP[1], *MESH, "--batch", "int32[8,x]"], "argument --batch"),
    "batch-width": ([STEP[1], *MESH, "--batch", "float32[8,5]"], "argument --batch"),
    "batch-scalar": ([STEP[1], *MESH, "--batch", "float32[]"], "argument --batch"),
    "batch-indivisible": (
        [STEP[1], *MESH, "--batch", "float32[7,4]"],
        "argument --batch",
    ),
    "batch-huge": (
        [STEP[1], *MESH, "--batch", "float32[99999999999999999999,4]"],
        "argument --batch",
    ),
    "loss-unknown": ([STEP[1], *MESH, *BATCH, "--loss", "bogus"], "argument --loss"),
    "loss-lm-on-floats": ([STEP[1], *MESH, *BATCH, "--loss", "lm"], "argument --loss"),
    "loss-missing": (
        [STEP[1], *MESH, *BATCH, "--loss", "step_cli_targets:nothing"],
        "argument --loss",
    ),
    "loss-not-scalar": (
        [STEP[1], *MESH, *BATCH, "--loss", "step_cli_targets:vector_loss"],
        "argument --loss",
    ),
    "topology-unknown": (
        [STEP[1], *MESH, *BATCH, "--topology", "v9-4"],
        "argument --topology",
    ),
    "topology-chips": (
        [STEP[1], *MESH, *BATCH, "--topology", "v5e-3"],
        "argument --topology",
    ),
    "topology-mesh": (
        [STEP[1], *MESH, *BATCH, "--topology", "v5e-4"],
        "argument --topology",
    ),
    "format-unknown": (
        [STEP[1], *MESH, *BATCH, "--format", "yaml"],
        "argument --format",
    ),
    "max-batch-no-budget": (
        [STEP[1], *MESH, *BATCH, "--max-batch"],
        "argument --max-batch",
    ),
    "max-batch-scalar": (
        [STEP[1], *MESH, "--batch", "float32[]", *SEARCH],
        "argument --batch",
    ),
    "max-batch-leading": (
        [STEP[1], *MESH, *BATCH, "--batch", "int32[16]", *SEARCH],
        "argument --batch",
    ),
}


@pytest.mark.parametrize(("argv", "flag"), SWEEP.values(), ids=SWEEP.keys())
def test_every_flag_rejects_bad_values_in_one_line(
    targets_dir: Path, capsys: pytest.CaptureFixture[str], argv: list[str], flag: str
) -> None:
    (targets_dir / "bad.json").write_text("{nope")
    (targets_dir / "regex.json").write_text(json.dumps([["[", [None]]]))
    (targets_dir / "axis.json").write_text(json.dumps([["kernel", [None, "nope"]]]))
    code, out, err = run(["step", *argv], capsys)
    assert code == 2, err
    assert out == ""
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert flag in err, err
    assert "Traceback" not in err


# --- --max-batch ---------------------------------------------------------------


def test_max_batch_json_and_exit_0(
    targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    budget = 4096
    code, out, err = run(
        [
            *BASE,
            "--loss",
            "none",
            "--max-batch",
            "--max-device-bytes",
            f"{budget}B",
            "--format",
            "json",
        ],
        capsys,
    )
    assert code == 0 and err == ""
    data = json.loads(out)
    best = data["best"]
    assert data["schema"] == "nnx-introspect/max-batch" and data["ok"] is True
    assert data["converged"] and data["data_parallel"] == 8 and best % 8 == 0
    points = {p["batch"]: (p["peak_bytes"], p["fits"]) for p in data["points"]}
    assert points[best][1] and not points[best + 8][1]
    # the answer held against direct compiles
    for size, fits in ((best, True), (best + 8, False)):
        batch = jax.ShapeDtypeStruct((size, 4), jnp.float32)
        report = step_memory_report(
            "step_cli_targets:linear", "data=8", batch, loss=None
        )
        assert (report.peak_bytes <= budget) == fits
        assert report.peak_bytes == points[size][0]


def test_max_batch_nothing_fits_exits_1(
    targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [*BASE, "--max-batch", "--max-device-bytes", "100B"]
    code, out, err = run([*argv, "--format", "json"], capsys)
    assert code == 1
    assert json.loads(out)["ok"] is False
    # Linear(4, 6): (4 * 6 + 6) float32 parameters on every device, 120 B
    assert err.startswith(
        "nnx-introspect: No batch fits: the plan alone needs 120 B per device of "
        "the budget 100 B (nothing compiled"
    )
    assert err.count("\n") == 1
    code, out, _ = run([*argv, "--format", "html"], capsys)
    assert code == 1
    assert out.startswith("<!DOCTYPE html>") and 'class="verdict bad"' in out
    code, out, _ = run([*argv, "--format", "markdown"], capsys)
    assert code == 1 and out.startswith("**No batch fits")


def test_a_missing_compiler_is_bad_input_naming_topology(
    targets_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import nnx_introspect._step as step_package
    from nnx_introspect._xla import toolchain

    monkeypatch.setattr(toolchain, "libtpu_version", lambda: None)
    argv = ["step", "step_cli_targets:linear", "--mesh", "data=4", *BATCH]
    code, out, err = run([*argv, "--topology", "v5e-4"], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "argument --topology" in err
    assert 'pip install "nnx-introspect[tpu]"' in err

    def no_plugin(*args: object, **kwargs: object) -> None:
        raise ModuleNotFoundError("No module named 'jax_plugins'")

    # an ImportError naming no argument, from a compile for a named topology
    monkeypatch.setattr(step_package, "step_memory_report", no_plugin)
    code, out, err = run([*argv, "--topology", "h100-4"], capsys)
    assert code == 2 and out == ""
    assert err == usage(
        "step",
        "nnx-introspect: error: argument --topology: ModuleNotFoundError: No "
        "module named 'jax_plugins'\n",
    )

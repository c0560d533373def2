"""The ``step`` subcommand: batches, losses, budgets and exit codes."""

import json
import sys
import textwrap
from pathlib import Path

import jax.numpy as jnp
import pytest

from nnx_introspect._step import parse_batch
from nnx_introspect.cli import _batch_arg, main

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
    """
)


@pytest.fixture
def targets_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "step_cli_targets.py").write_text(TARGETS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "step_cli_targets", raising=False)
    return tmp_path


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


BASE = [
    "step",
    "step_cli_targets:linear",
    "--mesh",
    "data=8",
    "--batch",
    "float32[8,4]",
]


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
    assert "Compiling the step of step_cli_targets:linear on 8 devices" in err


def test_over_budget_exits_1(
    targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        [*BASE, "--max-device-bytes", "100", "--format", "json"], capsys
    )
    peak = json.loads(out)["peak_bytes"]
    assert peak > 100
    assert code == 1
    assert f"({peak:,} bytes) per device exceeds the budget" in err
    code, _, err = run([*BASE, "--max-device-bytes", str(peak)], capsys)
    assert code == 0, err


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
        (["--batch", "float32[8,5]"], "`batch` (float32[8,4], float32[8,5])"),
        (["--loss", "lm"], "`loss='lm'` needs `batch[0]`"),
        (["--loss", "bogus"], "argument --loss: must be 'mean', 'lm', 'none'"),
        (["--loss", "step_cli_targets:nothing"], "has no attribute 'nothing'"),
        (["--topology", "v5e-3"], "`topology` 'v5e-3'"),
        (["--topology", "v5e-4"], "`topology` 'v5e-4' has 4 chip(s)"),
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
    assert err.count("\n") <= 2  # the progress line and one error line


def test_indivisible_plan_exits_2(
    targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        ["step", "step_cli_targets:sharded", "--mesh", "data=2,tp=4", *BASE[4:]],
        capsys,
    )
    assert code == 2
    assert "dimension 1 (size 6) does not divide over tp" in err


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
    leaf = parse_batch(*_batch_arg("bfloat16[2, 3]"))
    assert leaf.shape == (2, 3) and leaf.dtype == jnp.bfloat16
    assert parse_batch(*_batch_arg("int32[]")).shape == ()
    with pytest.raises(ValueError, match="'int33' is not a dtype"):
        parse_batch("int33", (8,))

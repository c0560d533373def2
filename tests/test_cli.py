import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nnx_introspect import cli

TARGETS = textwrap.dedent(
    """
    from flax import nnx

    def linear(rngs):
        return nnx.Linear(4, 3, rngs=rngs)

    def raises(rngs):
        raise RuntimeError("no weights today")

    def not_a_module(rngs):
        return 42

    NOT_CALLABLE = 3
    """
)


@pytest.fixture
def targets_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "cli_targets_mod.py").write_text(TARGETS)
    (tmp_path / "cli_broken_mod.py").write_text("import does_not_exist_xyz\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "cli_targets_mod", raising=False)
    monkeypatch.delitem(sys.modules, "cli_broken_mod", raising=False)
    return tmp_path


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_default_target_is_the_7b_example(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["summary", "--format", "json"], capsys)
    assert code == 0 and err == ""
    data = json.loads(out)
    assert data["schema"] == "nnx-introspect/summary"
    assert data["n_params"] == 6_738_415_616
    assert data["n_state_leaves"] == 291
    assert data["abstract"] is True


def test_table_markdown_depth(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["summary", "--depth", "1"], capsys)
    assert code == 0
    assert "6,738,415,616" in out and "288 leaves" in out and "Param total" in out
    code, out, _ = run(
        ["summary", "nnx_introspect.examples:bn_dropout_mlp", "--format", "markdown"],
        capsys,
    )
    assert code == 0
    assert out.startswith("**BNDropoutMLP (abstract): 42 parameters")
    assert "| bn/mean | BatchStat | (5,) | float32 | 5 | 20 B |" in out


def test_local_target_and_seed(
    targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = list(sys.path)
    code, out, _ = run(
        ["summary", "cli_targets_mod:linear", "--seed", "3", "--format", "json"], capsys
    )
    assert code == 0
    assert json.loads(out)["n_params"] == 4 * 3 + 3
    assert sys.path == before


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("no_colon", r"TARGET must look like 'package\.module:callable', got 'no_colon'"),
        (":x", r"TARGET must look like"),
        ("no_such_module_xyz:f", r"cannot import module 'no_such_module_xyz' .*"
         r"ModuleNotFoundError: No module named 'no_such_module_xyz'"),
        ("cli_broken_mod:f", r"cannot import module 'cli_broken_mod' .*does_not_exist_xyz"),
        ("cli_targets_mod:missing", r"module 'cli_targets_mod' has no attribute 'missing'"),
        ("cli_targets_mod:NOT_CALLABLE", r"target 'cli_targets_mod:NOT_CALLABLE' is a "
         r"int, not a callable taking `rngs`"),
        ("cli_targets_mod:raises", r"factory 'cli_targets_mod:raises' raised "
         r"RuntimeError: no weights today"),
        ("cli_targets_mod:not_a_module", r"factory 'cli_targets_mod:not_a_module' "
         r"returned ShapeDtypeStruct\(shape=\(\), dtype=int32.*\), not an nnx\.Module\.$"),
    ],
)  # fmt: skip
def test_target_errors_are_one_line_exit_2(
    targets_dir: Path, capsys: pytest.CaptureFixture[str], target: str, message: str
) -> None:
    code, out, err = run(["summary", target], capsys)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("nnx-introspect: error: ")
    assert "Traceback" not in err
    assert re.search(message, err.rstrip("\n")), err


def test_debug_shows_traceback(
    targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["summary", "cli_targets_mod:raises", "--debug"], capsys)
    assert code == 2
    assert "Traceback (most recent call last)" in err
    assert "RuntimeError: no weights today" in err
    assert err.rstrip().splitlines()[-1].startswith("nnx-introspect: error: factory")


@pytest.mark.parametrize(
    "argv",
    [
        ["summary", "--depth", "0"],
        ["summary", "--seed", "-1"],
        ["summary", "--format", "x"],
        [],
    ],
)
def test_usage_errors_exit_2(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(argv, capsys)
    assert code == 2 and out == ""
    assert "usage: nnx-introspect" in err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["summary", "--help"], capsys)
    assert code == 0
    assert "--format {table,markdown,json}" in out and "--depth" in out


def test_python_dash_m() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "nnx_introspect", "summary",
         "nnx_introspect.examples:tied_embedding", "--format", "json"],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["n_params"] == 40
    bad = subprocess.run(
        [sys.executable, "-m", "nnx_introspect", "summary", "nope:nope"],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "Traceback" not in bad.stderr

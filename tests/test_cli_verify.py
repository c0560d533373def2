"""The ``diff`` and ``checkpoint`` subcommands."""

import json
import os
import pathlib
from typing import Any

import orbax.checkpoint as ocp
import pytest
from flax import nnx

from nnx_introspect.cli import main
from nnx_introspect.examples import two_layer

TWO_LAYER = "nnx_introspect.examples:two_layer"


def save(path: pathlib.Path, tree: Any) -> str:
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(path, tree)
    return str(path)


@pytest.fixture
def ckpt(tmp_path: pathlib.Path) -> str:
    return save(tmp_path / "ckpt", nnx.state(two_layer(nnx.Rngs(0))))


@pytest.fixture
def wide_target(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A target whose hidden width differs from two_layer's."""
    (tmp_path / "verify_cli_models.py").write_text(
        "from nnx_introspect.examples import TwoLayer\n\n"
        "def wide(rngs):\n    return TwoLayer(3, 8, rngs=rngs)\n"
    )
    monkeypatch.chdir(tmp_path)
    return "verify_cli_models:wide"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_diff_of_two_targets(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "diff", TWO_LAYER, TWO_LAYER, "--format", "json")
    assert code == 0 and err == "" and json.loads(out)["equal"] is True
    code, out, err = run(
        capsys, "diff", TWO_LAYER, TWO_LAYER, "--seed-b", "1", "--format", "json"
    )
    payload = json.loads(out)
    assert code == 1 and "2 difference(s) at 2 path(s)" in err
    assert [(e["path"], e["problem"]) for e in payload["entries"]] == [
        ("l1/kernel", "value"),
        ("l2/kernel", "value"),
    ]
    assert payload["values_compared"] is True


def test_diff_shapes_only_is_abstract(
    capsys: pytest.CaptureFixture[str], wide_target: str
) -> None:
    code, out, _ = run(
        capsys, "diff", TWO_LAYER, TWO_LAYER, "--seed-b", "1", "--shapes-only",
        "--format", "json",
    )  # fmt: skip
    assert code == 0 and json.loads(out)["values_compared"] is False
    code, out, _ = run(capsys, "diff", TWO_LAYER, wide_target, "--shapes-only")
    assert code == 1 and "l1/kernel" in out and "shape" in out


def test_diff_of_a_target_and_checkpoints(
    capsys: pytest.CaptureFixture[str], ckpt: str, tmp_path: pathlib.Path
) -> None:
    assert run(capsys, "diff", TWO_LAYER, ckpt)[0] == 0
    assert run(capsys, "diff", ckpt, TWO_LAYER, "--seed", "1")[0] == 1
    code, out, _ = run(capsys, "diff", TWO_LAYER, ckpt, "--seed", "1", "--atol", "10")
    assert code == 0
    other = save(tmp_path / "other", nnx.state(two_layer(nnx.Rngs(1))))
    code, out, _ = run(capsys, "diff", ckpt, other, "--format", "markdown")
    assert code == 1 and "| l2/kernel | value |" in out
    assert run(capsys, "diff", ckpt, other, "--shapes-only")[0] == 0


def test_checkpoint_report_and_check(
    capsys: pytest.CaptureFixture[str], ckpt: str, wide_target: str
) -> None:
    code, out, _ = run(capsys, "checkpoint", ckpt, "--format", "json")
    payload = json.loads(out)
    assert (
        code == 0 and payload["n_elements"] == 36 and payload["layout"] == "nnx-state"
    )
    code, out, _ = run(
        capsys, "checkpoint", ckpt, "--model", TWO_LAYER, "--format", "json"
    )
    assert code == 0 and json.loads(out)["values_compared"] is False
    code, out, err = run(capsys, "checkpoint", ckpt, "--model", wide_target)
    assert code == 1 and "4 difference(s) at 4 path(s)" in err
    code, out, _ = run(
        capsys, "checkpoint", ckpt, "--model", TWO_LAYER, "--seed", "2", "--verify"
    )
    assert code == 1 and "l1/kernel" in out
    code, out, _ = run(capsys, "checkpoint", ckpt, "--format", "html")
    assert code == 0 and out.startswith("<!DOCTYPE html>")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["checkpoint", "nowhere"], "'nowhere' does not exist"),
        (["diff", "nowhere", TWO_LAYER], "'nowhere' is neither an existing checkpoint"),
        (["diff", TWO_LAYER, "no_such_module_xyz:f"], "cannot import module"),
        (["checkpoint", ".", "--verify"], "no _METADATA file"),
    ],
)
def test_usage_errors_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and message in err


def test_verify_needs_a_model(capsys: pytest.CaptureFixture[str], ckpt: str) -> None:
    code, _, err = run(capsys, "checkpoint", ckpt, "--verify")
    assert code == 2 and "--verify needs --model TARGET" in err


def test_bad_tolerance_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], ckpt: str
) -> None:
    code, _, err = run(capsys, "diff", ckpt, ckpt, "--rtol", "-1")
    assert code == 2 and "expected a finite number >= 0, got -1" in err


def _damage_index(ckpt: str) -> None:
    """Truncate the array store's index node (two_layer's arrays live inline in it)."""
    (node,) = (pathlib.Path(ckpt) / "d").iterdir()
    node.write_bytes(node.read_bytes()[:10])


@pytest.mark.parametrize(
    "argv",
    [
        ["checkpoint", "{ckpt}"],
        ["checkpoint", "{ckpt}", "--format", "json"],
        ["checkpoint", "{ckpt}", "--model", TWO_LAYER],
        ["checkpoint", "{ckpt}", "--model", TWO_LAYER, "--verify"],
        ["diff", TWO_LAYER, "{ckpt}"],
        ["diff", "{ckpt}", TWO_LAYER],
        ["diff", "{ckpt}", "{ckpt}"],
        ["diff", "{ckpt}", "{ckpt}", "--shapes-only"],
    ],
    ids=" ".join,
)
def test_a_damaged_checkpoint_exits_1_with_one_line(
    capsys: pytest.CaptureFixture[str], ckpt: str, argv: list[str]
) -> None:
    assert run(capsys, *[a.format(ckpt=ckpt) for a in argv])[0] == 0  # clean first
    _damage_index(ckpt)
    code, out, err = run(capsys, *[a.format(ckpt=ckpt) for a in argv])
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith("nnx-introspect: error: "), err
    assert "is a damaged orbax checkpoint, not an empty one: `d/" in err
    assert "(holds the array index) is truncated" in err


def test_a_non_utf8_path_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    good = save(tmp_path / "ckpt", nnx.state(two_layer(nnx.Rngs(0))))
    raw = os.fsencode(tmp_path) + b"/step\xff"
    os.rename(os.fsencode(good), raw)
    for argv in (
        ["checkpoint", os.fsdecode(raw)],
        ["diff", TWO_LAYER, os.fsdecode(raw)],
    ):
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == "" and err.count("\n") == 1, err
        assert "is not a UTF-8 path (byte 0xff is not UTF-8)" in err
        assert "Rename the directory" in err


# --- sharding-annotated models with values; names in the title (issue 14) ---------

TINY = "nnx_introspect.examples:llama_tiny"
TINY_SHARDED = "nnx_introspect.examples:llama_tiny_sharded"


def test_diff_of_a_model_and_its_sharded_variant_compares_values(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "diff", TINY, TINY_SHARDED, "--format", "json")
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert data["equal"] and data["values_compared"]
    # llama_tiny: embed + 8 layers x 9 + norm + head = 75 leaves, all common.
    assert (data["n_paths_a"], data["n_paths_b"], data["n_common"]) == (75, 75, 75)
    assert (data["a_label"], data["b_label"]) == ("llama_tiny", "llama_tiny_sharded")
    code, out, _ = run(capsys, "diff", TINY, TINY_SHARDED, "--format", "markdown")
    assert out.startswith("**State diff: llama_tiny vs llama_tiny_sharded: equal")
    # Another seed on one side: the values differ, and the diff says so.
    code, out, err = run(capsys, "diff", TINY, TINY_SHARDED, "--seed-b", "1")
    assert code == 1 and "difference(s)" in err


def test_checkpoint_verify_builds_a_sharded_model(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from nnx_introspect.examples import llama_tiny

    path = save(tmp_path / "tiny", nnx.state(llama_tiny(nnx.Rngs(0))))
    argv = ["checkpoint", path, "--model", TINY_SHARDED, "--verify", "--format", "json"]
    code, out, err = run(capsys, *argv)
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert data["equal"] and data["values_compared"] and data["n_common"] == 75


def test_diff_names_its_sides_as_given(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = save(tmp_path / "a", nnx.state(two_layer(nnx.Rngs(0))))
    b = save(tmp_path / "b", nnx.state(two_layer(nnx.Rngs(1))))
    code, out, _ = run(capsys, "diff", a, b, "--format", "markdown")
    assert code == 1
    assert out.startswith(f"**State diff: {a} vs {b}: ")
    code, out, _ = run(capsys, "diff", TWO_LAYER, TWO_LAYER, "--seed-b", "1")
    assert code == 1
    code, out, _ = run(
        capsys, "diff", TWO_LAYER, TWO_LAYER, "--seed-b", "1", "--format", "json"
    )
    data = json.loads(out)
    assert (data["a_label"], data["b_label"]) == (
        "two_layer (seed 0)",
        "two_layer (seed 1)",
    )

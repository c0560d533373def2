"""What the command line settles before a compile (issue 28, items 9, 12, 13).

A misspelt subcommand leads with the closest one; loss names are spelt
exactly; no ``--loss`` on integer token ids gets one line naming ``--loss lm``;
a mesh axis the model names and ``--mesh`` leaves out is compiled as size 1
(noted), a misspelt one refused naming it; on a 100-column terminal a mesh
comparison stays a table and the progress line stays one line.
"""

import argparse
import dataclasses
import io
import json
import re

import jax
import jax.numpy as jnp
import pytest
from rich.console import Console

from nnx_introspect._render.table import Table, to_rich
from nnx_introspect.cli.errors import UsageError
from nnx_introspect.cli.preflight import LOSS_NOTE, complete_meshes, loss_note
from nnx_introspect.cli.progress import ClockLine, live_status
from tests.cli_helpers import run
from tests.test_meshes_label_utilisation import GIB, compare, estimate, row

SHARDED = "nnx_introspect.examples:llama_tiny_sharded"  # names fsdp and tp
TWO_LAYER = "nnx_introspect.examples:two_layer"  # names no axis


# --- item 12: a misspelt subcommand -------------------------------------------


def test_a_misspelt_subcommand_leads_with_the_closest(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(["stpe", SHARDED, "--mesh", "fsdp=8"], capsys)
    assert code == 2 and out == ""
    assert err.startswith(
        "nnx-introspect: error: unknown command 'stpe' (did you mean 'step'?); the "
        "commands are summary, mesh, diff, checkpoint, step"
    ), err
    assert "--mesh" not in err and err.count("\n") == 1
    # nothing close: no suggestion, the commands still listed
    code, _, err = run(["zzz"], capsys)
    assert code == 2 and "did you mean" not in err
    assert "unknown command 'zzz'; the commands are summary" in err


# --- item 9: the loss ------------------------------------------------------------


@pytest.mark.parametrize(("given", "meant"), [("LM", "lm"), ("Mean", "mean")])
def test_a_loss_name_in_another_case_is_refused_naming_the_spelling(
    capsys: pytest.CaptureFixture[str], given: str, meant: str
) -> None:
    argv = ["step", TWO_LAYER, "--mesh", "data=8", "--batch", "float32[8,3]"]
    code, out, err = run([*argv, "--loss", given], capsys)
    assert code == 2 and out == ""
    assert f"argument --loss: write '{meant}' (lower case), got '{given}'" in err


def _args(loss: str | None) -> argparse.Namespace:
    return argparse.Namespace(loss=loss)


def test_the_loss_note_is_written_for_token_ids_and_no_loss_given() -> None:
    ids = (jax.ShapeDtypeStruct((8, 64), jnp.int32),)
    out = io.StringIO()
    assert loss_note(_args(None), ids, out) is True
    assert out.getvalue() == LOSS_NOTE and out.getvalue().count("\n") == 1
    assert "--loss lm" in LOSS_NOTE and "not a training loss" in LOSS_NOTE
    # false where the loss was chosen, or the batch is not integer ids
    for args, batch in [
        (_args("mean"), ids),
        (_args("lm"), ids),
        (_args(None), (jax.ShapeDtypeStruct((8, 3), jnp.float32),)),
    ]:
        quiet = io.StringIO()
        assert loss_note(args, batch, quiet) is False and quiet.getvalue() == ""


# --- item 12: meshes -------------------------------------------------------------


def _mesh_args(target: str) -> argparse.Namespace:
    return argparse.Namespace(target=target, rules=None)


def test_an_axis_the_model_names_and_the_mesh_omits_is_added_with_size_1() -> None:
    out = io.StringIO()
    meshes = ["fsdp=8", "fsdp=4,tp=2", "tp=8"]
    assert complete_meshes(_mesh_args(SHARDED), meshes, None, None, out) == [
        "fsdp=8,tp=1",
        "fsdp=4,tp=2",
        "tp=8,fsdp=1",
    ]
    lines = out.getvalue().splitlines()
    assert lines == [
        "nnx-introspect: note: --mesh fsdp=8 leaves out tp, which the model's "
        "sharding names: compiling fsdp=8,tp=1 (an axis of size 1 shards "
        "nothing); give tp a size in --mesh to shard over it",
        "nnx-introspect: note: --mesh tp=8 leaves out fsdp, which the model's "
        "sharding names: compiling tp=8,fsdp=1 (an axis of size 1 shards "
        "nothing); give fsdp a size in --mesh to shard over it",
    ]
    # a model naming no axis: nothing added, nothing said
    quiet = io.StringIO()
    assert complete_meshes(_mesh_args(TWO_LAYER), ["data=8"], None, None, quiet) == [
        "data=8"
    ]
    assert quiet.getvalue() == ""


def test_an_axis_only_the_rules_name_is_not_added() -> None:
    from jax.sharding import PartitionSpec as P

    rules = [("kernel", P(None, "nope"))]
    out = io.StringIO()
    # 'data' is the batch's axis; 'nope' is the rules' (the library refuses it,
    # naming --rules), so it is not made up here
    assert complete_meshes(_mesh_args(TWO_LAYER), ["data=8"], rules, None, out) == [
        "data=8"
    ]
    assert out.getvalue() == ""


def test_a_misspelt_axis_is_named_with_the_closest() -> None:
    with pytest.raises(UsageError, match=r"axis 'tpp' .*\(did you mean 'tp'\?\)"):
        complete_meshes(_mesh_args(SHARDED), ["fsdp=2,tpp=4"], None, None)


def test_step_compiles_a_mesh_with_the_omitted_axis_and_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["step", SHARDED, "--mesh", "fsdp=8", "--batch", "int32[8,16]"]
    code, out, err = run([*argv, "--loss", "none", "--format", "json"], capsys)
    assert code == 0, err
    assert json.loads(out)["mesh"] == {"fsdp": 8, "tp": 1}
    assert err == (
        "nnx-introspect: note: --mesh fsdp=8 leaves out tp, which the model's "
        "sharding names: compiling fsdp=8,tp=1 (an axis of size 1 shards "
        "nothing); give tp a size in --mesh to shard over it\n"
    )


def test_step_refuses_a_misspelt_axis_before_compiling(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["step", SHARDED, "--mesh", "fsdp=2,tpp=4", "--batch", "int32[8,16]"]
    code, out, err = run(argv, capsys)
    assert code == 2 and out == ""
    assert "axis 'tpp' of the 1st --mesh (fsdp=2,tpp=4) (did you mean 'tp'?)" in err
    assert "leaves name axes the mesh lacks" not in err


# --- item 13: a 100-column terminal ------------------------------------------------


def _rendered(renderable: object, width: int) -> list[str]:
    console = Console(width=width, file=io.StringIO(), record=True)
    console.print(renderable)
    return console.export_text().splitlines()


def _comparison_text(width: int) -> list[str]:
    """A comparison as wide as a real one: float32 (two MFU figures), collectives."""
    tf32 = 494.5e12
    wire = [
        {"fsdp": 56 * 2**20},
        {"tp": 12 * 2**20, "fsdp": 12 * 2**20, "?": 321 * 2**10, "fsdp,tp": 30 << 10},
        {"fsdp": 36 * 2**20, "tp": 4 * 2**20, "fsdp,tp": 30 << 10},
    ]
    rows = [
        dataclasses.replace(
            row(
                mesh,
                estimate(tf32 / 10, "float32", model=tf32 / 50, seconds=k / 2900),
                (20 + k) * GIB + 389 * 2**20,
            ),
            collective_bytes_by_axis=axes,
        )
        for k, (mesh, axes) in enumerate(
            zip(["fsdp=8,tp=1", "fsdp=4,tp=2", "fsdp=2,tp=4"], wire, strict=True), 1
        )
    ]
    return _rendered(compare(*rows), width)


def test_a_mesh_comparison_stays_a_table_on_a_narrow_terminal() -> None:
    # The stand-in's cells are ~10 columns narrower than llama_tiny_sharded's
    # on h100-8 (measured: a table at 100 columns, peak bytes left out), so 90.
    lines = _comparison_text(90)
    assert max(map(len, lines)) <= 90
    # one line per mesh, its status and peak beside it (not a block of fields)
    rows = [line for line in lines if re.match(r"fsdp=\d,tp=\d +fits ", line)]
    assert len(rows) == 3 and all("GiB" in r for r in rows), lines
    assert not any(line.lstrip().startswith("status:") for line in lines)
    header = next(line for line in lines if line.startswith("mesh "))
    assert header.split() == [
        "mesh", "status", "step", "s", "(est.)", "(est.)", "peak", "budget",
        "state", "wire", "per", "device",
    ]  # fmt: skip
    left = [i for i, line in enumerate(lines) if line.startswith("Left out at")]
    assert len(left) == 1
    assert lines[left[0]].startswith("Left out at this width: peak bytes (a wider")
    # the note comes right after the table, before the other notes
    assert left[0] < next(i for i, s in enumerate(lines) if s.startswith("Budget:"))
    # wide enough: every column, long headers, no note
    wide = _comparison_text(200)
    assert any("peak bytes" in line and "peak per device" in line for line in wide)
    assert not any(line.startswith("Left out") for line in wide)


def test_a_table_without_optional_columns_still_falls_back_to_blocks() -> None:
    columns = ("mesh", "status", "a long column", "another long column")
    cells = ("fsdp=8", "fits", "x" * 40, "y" * 40)
    plain = Table("T", columns, (cells,))
    assert any(
        line.startswith("  status: fits") for line in _rendered(to_rich(plain), 60)
    )
    narrow = Table("T", columns, (cells,), optional=("another long column",))
    lines = _rendered(to_rich(narrow), 60)
    assert any(line.startswith("fsdp=8") and "fits" in line for line in lines)
    assert "y" * 40 not in "\n".join(lines)


def test_the_progress_line_stays_within_the_width() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, width=60, force_terminal=True, color_system=None)
    line = ClockLine("Searching the fastest configuration of " + "m" * 80)
    with live_status(line, console=console) as redraw:
        redraw()
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buffer.getvalue())
    shown = [s for s in re.split(r"[\r\n]", drawn) if s.strip()]
    assert shown and all(len(s) <= 60 for s in shown), shown
    assert all(s.rstrip().endswith("…") for s in shown)  # cut, not wrapped


def test_fit_searches_the_completed_mesh_after_both_notes(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import types

    import nnx_introspect._sweep as fit_module  # the face the command line calls

    seen: dict[str, object] = {}

    def fake_fit_step(target: str, meshes: object, batch: object, **kwargs: object):  # type: ignore[no-untyped-def]
        seen.update(meshes=meshes, loss=kwargs["loss"])
        return types.SimpleNamespace(ok=True, to_json=lambda: "{}")

    monkeypatch.setattr(fit_module, "fit_step", fake_fit_step)
    argv = ["step", SHARDED, "--mesh", "fsdp=8", "--batch", "int32[8,16]", "--fit"]
    code, out, err = run(
        [*argv, "--max-device-bytes", "1GiB", "--format", "json"], capsys
    )
    assert code == 0 and out == "{}\n", err
    assert seen == {"meshes": "fsdp=8,tp=1", "loss": "mean"}
    lines = err.splitlines()
    assert len(lines) == 2, err
    assert lines[0].startswith("nnx-introspect: note: --mesh fsdp=8 leaves out tp")
    assert lines[1] == LOSS_NOTE.rstrip("\n")

import argparse
import json
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nnx_introspect import cli
from tests.cli_helpers import run, usage

TARGETS = textwrap.dedent(
    """
    import sys

    from flax import nnx

    def linear(rngs):
        return nnx.Linear(4, 3, rngs=rngs)

    def raises(rngs):
        raise RuntimeError("no weights today")

    def not_a_module(rngs):
        return 42

    NOT_CALLABLE = 3

    def exits_0(rngs):
        sys.exit(0)

    def exits_with_message(rngs):
        sys.exit("bye")

    class Odd(BaseException):
        pass

    def raises_base_exception(rngs):
        raise Odd("not an Exception")

    def interrupted(rngs):
        raise KeyboardInterrupt

    class Holder:
        @property
        def make(self):
            sys.exit(0)

    holder = Holder()
    """
)

# Modules whose import (or attribute lookup) ends the interpreter if let through.
# Each defines `f` after its exit, so the target is spelt right: the command line
# reads a module's source for the name before importing it (issue 44).
_F = "\n\ndef f(rngs):\n    pass\n"
USER_EXIT_MODULES = {
    "cli_exit0_on_import": f"import sys\nsys.exit(0){_F}",
    "cli_exit3_on_import": f"import sys\nsys.exit(3){_F}",
    "cli_getattr_exits": "import sys\n\ndef __getattr__(name):\n    sys.exit(0)\n",
}


TARGET_MODULES = {
    "cli_targets_mod": TARGETS,
    "cli_broken_mod": f"import does_not_exist_xyz{_F}",
    **USER_EXIT_MODULES,
}


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
        ("cli_targets_mod:raises", r"factory 'cli_targets_mod:raises' failed: "
         r"RuntimeError: no weights today"),
        ("cli_targets_mod:not_a_module", r"factory 'cli_targets_mod:not_a_module' "
         r"failed: TypeError: `factory` must return an nnx\.Module .*got 42 of type int"),
    ],
)  # fmt: skip
def test_target_errors_are_one_line_exit_2(
    targets_dir: Path, capsys: pytest.CaptureFixture[str], target: str, message: str
) -> None:
    code, out, err = run(["summary", target], capsys)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("nnx-introspect summary: error: ")
    assert err.endswith(" (see 'nnx-introspect summary --help')\n")
    assert "Traceback" not in err
    assert re.search(message, err.rstrip("\n")), err


def test_debug_shows_traceback(
    targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["summary", "cli_targets_mod:raises", "--debug"], capsys)
    assert code == 2
    assert "Traceback (most recent call last)" in err
    assert "RuntimeError: no weights today" in err
    last = err.rstrip().splitlines()[-1]
    assert last.startswith("nnx-introspect summary: error: factory")


def test_concrete_build_checks_what_the_factory_returns(
    targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `diff` builds concretely (values are needed): the resolver checks the result.
    code, out, err = run(
        ["diff", "cli_targets_mod:not_a_module", "nnx_introspect.examples:two_layer"],
        capsys,
    )
    assert (code, out) == (2, "")
    assert err == usage(
        "diff",
        "nnx-introspect: error: factory 'cli_targets_mod:not_a_module' returned 42, "
        "not an nnx.Module.\n",
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["summary", "--depth", "0"], "argument --depth: must be an integer >= 1, got 0"),
        (["summary", "--depth", "two"], "argument --depth: must be an integer >= 1, got 'two'"),
        (["summary", "--seed", "-1"], "argument --seed: must be an integer from 0 to "
         "9223372036854775807, got -1"),
        (["summary", "--seed", "1.5"], "argument --seed: must be an integer from 0 to "
         "9223372036854775807, got '1.5'"),
        (["diff", "a:b", "c:d", "--seed-b", str(2**63)], "argument --seed-b: must be an "
         "integer from 0 to 9223372036854775807, got 9223372036854775808"),
        (["summary", "--format", "x"], "argument --format: invalid choice: 'x'"),
        (["summary", "--bogus"], "unrecognized arguments: --bogus"),
        (["frobnicate"], "unknown command 'frobnicate'; the commands are summary, mesh"),
        ([], "the following arguments are required: COMMAND"),
    ],
)  # fmt: skip
def test_usage_errors_are_one_line_naming_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(argv, capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("nnx-introspect")
    assert message in err
    assert err.rstrip().endswith("--help')")  # where to look next


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


# --- user code that exits (#10) ---------------------------------------------------

USER_EXITS = [
    ("cli_targets_mod:exits_0", r"factory 'cli_targets_mod:exits_0' failed: SystemExit\(0\)"),
    ("cli_targets_mod:exits_with_message",
     r"factory 'cli_targets_mod:exits_with_message' failed: SystemExit\('bye'\)"),
    ("cli_targets_mod:raises_base_exception",
     r"factory 'cli_targets_mod:raises_base_exception' failed: Odd: not an Exception"),
    ("cli_exit0_on_import:f",
     r"cannot import module 'cli_exit0_on_import' of target 'cli_exit0_on_import:f': "
     r"SystemExit\(0\)"),
    ("cli_exit3_on_import:f", r"cannot import module 'cli_exit3_on_import' .*SystemExit\(3\)"),
    ("cli_getattr_exits:make",
     r"looking up 'make' of target 'cli_getattr_exits:make' failed: SystemExit\(0\)"),
    ("cli_targets_mod:holder.make",
     r"looking up 'make' of target 'cli_targets_mod:holder.make' failed: SystemExit\(0\)"),
]  # fmt: skip


@pytest.fixture(scope="module")
def two_layer_ckpt(tmp_path_factory: pytest.TempPathFactory) -> str:
    import orbax.checkpoint as ocp
    from flax import nnx

    from nnx_introspect.examples import two_layer

    path = tmp_path_factory.mktemp("ckpt") / "two_layer"
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(path, nnx.state(two_layer(nnx.Rngs(0))))
    return str(path)


def _every_subcommand(target: str, ckpt: str) -> list[list[str]]:
    other = "nnx_introspect.examples:two_layer"
    return [
        ["summary", target],
        ["mesh", target, "--mesh", "data=2"],
        ["diff", target, other],
        ["diff", other, target, "--shapes-only"],
        ["diff", ckpt, target],
        ["checkpoint", ckpt, "--model", target],
        ["checkpoint", ckpt, "--model", target, "--verify"],
    ]


@pytest.mark.parametrize(
    ("target", "message"), USER_EXITS, ids=[t for t, _ in USER_EXITS]
)
def test_user_exit_is_a_bad_target_in_every_subcommand(
    targets_dir: Path,
    two_layer_ckpt: str,
    capsys: pytest.CaptureFixture[str],
    target: str,
    message: str,
) -> None:
    for argv in _every_subcommand(target, two_layer_ckpt):
        code, out, err = run(argv, capsys)
        assert code == 2, (argv, err)
        assert out == "" and "Traceback" not in err
        assert err.count("\n") == 1
        assert err.startswith(f"nnx-introspect {argv[0]}: error: ")
        assert re.search(message, err), (argv, err)


def test_keyboard_interrupt_still_interrupts(
    targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from nnx_introspect._targets import build_target

    # The resolver lets Ctrl-C through instead of calling it a bad target ...
    with pytest.raises(KeyboardInterrupt):
        build_target("cli_targets_mod:interrupted")
    # ... and the command stops with the conventional code 128 + SIGINT.
    code, out, err = run(["summary", "cli_targets_mod:interrupted"], capsys)
    assert (code, out, err) == (130, "", "nnx-introspect: error: interrupted\n")


def test_unexpected_exit_from_a_handler_is_a_failure(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # SystemExit(0) raised anywhere after parsing (a library, a model's code) must
    # not pass for success.
    def exits(model: object, **kwargs: object) -> None:
        sys.exit(0)

    monkeypatch.setattr("nnx_introspect._summary.summarize", exits)
    code, out, err = run(["summary", "nnx_introspect.examples:two_layer"], capsys)
    assert (code, out) == (1, "")
    assert err == "nnx-introspect: error: unexpected SystemExit(0)\n"


@pytest.mark.parametrize(
    ("module", "source", "code"),
    [("cli_exit0_on_import", f"import sys\nsys.exit(0){_F}", 2),
     ("cli_exit3_on_import", f"import sys\nsys.exit(3){_F}", 2),
     ("cli_factory_exits", "import sys\n\ndef f(rngs):\n    sys.exit(0)\n", 2)],
)  # fmt: skip
def test_user_exit_as_a_real_process(
    tmp_path: Path, module: str, source: str, code: int
) -> None:
    (tmp_path / f"{module}.py").write_text(source)
    result = subprocess.run(
        [sys.executable, "-m", "nnx_introspect", "summary", f"{module}:f"],
        capture_output=True, text=True, check=False, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == code, result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "SystemExit(" in result.stderr


# --- startup: no JAX before a handler runs ------------------------------------------


def _python(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    return result.stdout.strip()


HEAVY = "('jax', 'flax', 'orbax', 'optax', 'rich')"


def test_importing_the_cli_and_the_package_imports_no_jax() -> None:
    code = (
        "import sys, nnx_introspect, nnx_introspect.cli\n"
        "v = nnx_introspect.__version__\n"
        f"print([m for m in {HEAVY} if m in sys.modules])"
    )
    assert _python(code) == "[]"


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["summary", "--help"],
        ["mesh", "--help"],
        ["diff", "--help"],
        ["checkpoint", "--help"],
        [],
        ["frobnicate"],
        ["summary", "--seed", "-1"],
        ["summary", "--depth", "0"],
        ["mesh", "--mesh", "data2"],
        ["mesh", "--mesh", "data=0"],
        ["mesh", "--mesh", "data=2", "--max-device-bytes", "lots"],
        ["mesh", "--mesh", "data=2", "--rules", "no_such_rules.json"],
        ["mesh", "--mesh", "data=2", "--optimizer", "adamx"],
        ["diff", "only_one"],
        ["diff", "a", "b", "--rtol", "-1"],
        ["checkpoint"],
        ["step", "--help"],
        ["step", "--mesh", "data=2", "--batch", "int32(8)"],
        ["step", "--mesh", "data=2", "--batch", "int32[8]", "--loss", "bogus"],
        ["step", "--mesh", "data=2"],
        ["--version"],
        ["mesh", "--mesh", "data=2", "--mseh", "x"],
    ],
)
def test_help_and_argument_errors_import_no_jax(argv: list[str]) -> None:
    code = (
        "import contextlib, io, sys\n"
        "from nnx_introspect.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), "
        "contextlib.redirect_stderr(io.StringIO()):\n"
        f"    code = main({argv!r})\n"
        f"print(code, [m for m in {HEAVY} if m in sys.modules])"
    )
    ok = "--help" in argv or "--version" in argv
    assert _python(code) == ("0 []" if ok else "2 []")


def test_python_dash_m_help_imports_no_jax() -> None:
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "nnx_introspect", "--help"],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    assert "summary" in result.stdout and "checkpoint" in result.stdout
    # `-X importtime` lists every module imported, one per stderr line.
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()}
    assert "nnx_introspect.cli" in imported
    assert not {m.split(".")[0] for m in imported} & {"jax", "flax", "orbax", "rich"}


def test_public_names_load_on_first_use() -> None:
    code = (
        "import sys\n"
        "from nnx_introspect import count_params\n"
        "import nnx_introspect, nnx_introspect._counting as c\n"
        "print('jax' in sys.modules, count_params is c.count_params,\n"
        "      nnx_introspect.summarize.__module__)"
    )
    assert _python(code) == "True True nnx_introspect._summary"


def test_lazy_names_match_the_type_checking_imports_and_all() -> None:
    import ast

    import nnx_introspect

    tree = ast.parse(Path(nnx_introspect.__file__).read_text())
    # the re-exports: the `if typing.TYPE_CHECKING:` block (other imports, such
    # as a private helper the lazy lookup uses, are not part of the API)
    (block,) = (
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "typing.TYPE_CHECKING"
    )
    imports: dict[str, str] = {}
    for node in ast.walk(block):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                assert alias.asname == alias.name, "re-export as `X as X`"
                imports[alias.name] = str(node.module)
    assert imports == nnx_introspect._LAZY
    assert sorted(imports) == nnx_introspect.__all__
    # the block is the one listing: no name is written again as a string
    strings = {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    assert not strings & set(imports)
    assert set(nnx_introspect.__all__) <= set(dir(nnx_introspect))
    with pytest.raises(AttributeError, match="has no attribute 'count_parms'"):
        nnx_introspect.count_parms  # type: ignore[attr-defined]  # noqa: B018


# --- converters without JAX agree with the library ----------------------------------


def test_optimizer_choices_are_the_library_names() -> None:
    from nnx_introspect._mesh import OPTIMIZER_NAMES

    assert cli.OPTIMIZERS == OPTIMIZER_NAMES


SIZES = ["16GiB", "1.5 kB", "4096", " 7 b ", "0", "1e3", "2E2MiB", "0.5KiB", "0.3kB",
         "0.1", "1.5", "lots", "", "GiB", "-1", "1 PiB", "1.5e400", "inf", "nan", "1,000",
         "0x10", "16 gib", "5 bytes", "1e-3kB", ".5kB", "5.kB"]  # fmt: skip


def _cli_bytes(text: str) -> int | None:
    try:
        return cli.bytes_arg(text)
    except argparse.ArgumentTypeError:
        return None


def _library_bytes(text: str) -> int | None:
    from nnx_introspect._mesh import parse_bytes

    try:
        return parse_bytes(text)
    except (TypeError, ValueError):
        return None


@pytest.mark.parametrize("text", SIZES)
def test_max_device_bytes_parses_as_the_library_does(text: str) -> None:
    assert _cli_bytes(text) == _library_bytes(text)


@settings(deadline=None, max_examples=300)
@given(st.text(alphabet="0123456789.eE+- kKmMgGtTiIbB", max_size=10))
def test_max_device_bytes_parses_as_the_library_does_property(text: str) -> None:
    assert _cli_bytes(text) == _library_bytes(text)


MESHES = ["data=2,model=4", "a=1", " a = 2 , b = 3 ", "a=2.0", "a=1e1", "data2", "=2",
          "a=", "a=0", "a=-1", "a=1.5", "a=x", "a=2,a=2", "1a=2", "a=2,", "", "a=inf",
          "a=nan", "a-b=2", "a=2,b", "a=1e400", "a=2;b=2"]  # fmt: skip


@pytest.mark.parametrize("text", MESHES)
def test_mesh_syntax_check_rejects_only_what_the_library_rejects(text: str) -> None:
    from nnx_introspect._mesh import as_abstract_mesh

    try:
        as_abstract_mesh(text, "--mesh")
        library_ok = True
    except (TypeError, ValueError):
        library_ok = False
    try:
        cli.mesh_arg(text)
        cli_ok = True
    except argparse.ArgumentTypeError:
        cli_ok = False
    assert cli_ok == library_ok


# --- diff A B reads as A vs B ---------------------------------------------------------

OTHER = textwrap.dedent(
    """
    from flax import nnx

    class Other(nnx.Module):
        def __init__(self, rngs):
            self.l1 = nnx.Linear(3, 4, rngs=rngs)  # as two_layer's l1, same seed
            self.head = nnx.Linear(4, 2, rngs=rngs)

    def other(rngs):
        return Other(rngs)
    """
)


@pytest.mark.parametrize("shapes_only", [False, True])
def test_diff_reads_in_argument_order(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    two_layer_ckpt: str,
    capsys: pytest.CaptureFixture[str],
    shapes_only: bool,
) -> None:
    (tmp_path / "cli_other_mod.py").write_text(OTHER)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "cli_other_mod", raising=False)
    extra = ["--shapes-only"] if shapes_only else []
    # The checkpoint holds l1 and l2 (two_layer); the model holds l1 and head.
    in_ckpt_only = [("l2/bias", "-"), ("l2/kernel", "-")]
    in_model_only = [("head/bias", "-"), ("head/kernel", "-")]
    for a, b, labels, missing, extras in [
        (two_layer_ckpt, "cli_other_mod:other", [two_layer_ckpt, "other"],
         in_ckpt_only, in_model_only),
        ("cli_other_mod:other", two_layer_ckpt, ["other", two_layer_ckpt],
         in_model_only, in_ckpt_only),
    ]:  # fmt: skip
        code, out, err = run(["diff", a, b, "--format", "json", *extra], capsys)
        assert code == 1 and err == "nnx-introspect: 4 difference(s) at 4 path(s).\n"
        data = json.loads(out)
        assert [data["a_label"], data["b_label"]] == labels
        assert data["values_compared"] is not shapes_only
        assert (data["n_paths_a"], data["n_paths_b"], data["n_common"]) == (4, 4, 2)
        got = {(e["problem"], e["path"]): (e["a"], e["b"]) for e in data["entries"]}
        assert sorted(k for k in got) == sorted(
            [("missing", p) for p, _ in missing] + [("extra", p) for p, _ in extras]
        )
        for path, _ in missing:  # present in A: A's column holds it, B's is '-'
            assert got["missing", path][0] != "-" and got["missing", path][1] == "-"
        for path, _ in extras:
            assert got["extra", path][0] == "-" and got["extra", path][1] != "-"
        # The messages name the two sides as given, in argument order.
        messages = {(e["problem"], e["path"]): e["message"] for e in data["entries"]}
        path = missing[0][0]
        assert messages["missing", path].startswith(
            f"{path}: in {labels[0]} ("
        ) and messages["missing", path].endswith(f"not in {labels[1]}.")
        code, out, _ = run(["diff", a, b, "--format", "markdown", *extra], capsys)
        assert f"State diff: {labels[0]} vs {labels[1]}: 4 difference(s)" in out


# --- bad input sweep: every subcommand, one bad argument at a time ------------------

T = "cli_targets_mod:linear"  # a good target, so that only the named argument is bad
TWO_LAYER = "nnx_introspect.examples:two_layer"


@pytest.fixture(scope="module")
def sweep_files(
    tmp_path_factory: pytest.TempPathFactory, two_layer_ckpt: str
) -> dict[str, str]:
    """Checkpoints (good and damaged), rules files and a plain directory."""
    root = tmp_path_factory.mktemp("sweep")
    files = {"ckpt": two_layer_ckpt, "plain_dir": str(root / "plain")}
    (root / "plain").mkdir()
    damages: dict[str, Callable[[Path], object]] = {
        "garbage_meta": lambda p: (p / "_METADATA").write_text("{garbage"),
        "no_manifest": lambda p: (p / "manifest.ocdbt").unlink(),
        "trunc_sharding": lambda p: (p / "_sharding").write_bytes(b'{"a'),
        "trunc_d": lambda p: min((p / "d").iterdir()).write_bytes(b"0123456789"),
    }
    for name, damage in damages.items():
        path = root / name
        shutil.copytree(two_layer_ckpt, path)
        damage(path)
        files[name] = str(path)
    rules = {
        "rules_not_json": "{not json",
        "rules_not_a_list": '{"rules": 3}',
        "rules_bad_entry": "[[1]]",
        "rules_bad_spec": '[["kernel", [5]]]',
        "rules_bad_regex": '[["(", [null]]]',
        "rules_bad_logical": '{"logical_rules": 7}',
    }
    for name, text in rules.items():
        (root / f"{name}.json").write_text(text)
        files[name] = str(root / f"{name}.json")
    return files


# (argv, exit code). `{name}` is a path from `sweep_files`.
SWEEP = [
    # summary
    (["summary", "no_colon"], 2),
    (["summary", "no_such_module_xyz:f"], 2),
    (["summary", "cli_broken_mod:f"], 2),
    (["summary", "cli_targets_mod:missing"], 2),
    (["summary", "cli_targets_mod:NOT_CALLABLE"], 2),
    (["summary", "cli_targets_mod:raises"], 2),
    (["summary", "cli_targets_mod:not_a_module"], 2),
    (["summary", "cli_targets_mod:exits_0"], 2),
    (["summary", T, "--seed", "-1"], 2),
    (["summary", T, "--seed", "x"], 2),
    (["summary", T, "--depth", "0"], 2),
    (["summary", T, "--format", "html"], 2),
    (["summary", T, "extra_positional"], 2),
    # mesh
    (["mesh", T], 2),
    (["mesh", "no_colon", "--mesh", "a=2"], 2),
    (["mesh", "cli_targets_mod:missing", "--mesh", "a=2"], 2),
    (["mesh", "cli_targets_mod:raises", "--mesh", "a=2"], 2),
    (["mesh", "cli_targets_mod:not_a_module", "--mesh", "a=2"], 2),
    (["mesh", T, "--mesh", "data2"], 2),
    (["mesh", T, "--mesh", "a=0"], 2),
    (["mesh", T, "--mesh", "a=2.5"], 2),
    (["mesh", T, "--mesh", "a=2,a=2"], 2),
    (["mesh", T, "--mesh", f"a={2**31}"], 2),
    (["mesh", T, "--mesh", "a=65536,b=65536"], 2),
    (["mesh", T, "--mesh", "a=2", "--rules", "{plain_dir}"], 2),
    (["mesh", T, "--mesh", "a=2", "--rules", "no_such_rules.json"], 2),
    (["mesh", T, "--mesh", "a=2", "--rules", "{rules_not_json}"], 2),
    (["mesh", T, "--mesh", "a=2", "--rules", "{rules_not_a_list}"], 2),
    (["mesh", T, "--mesh", "a=2", "--rules", "{rules_bad_entry}"], 2),
    (["mesh", T, "--mesh", "a=2", "--rules", "{rules_bad_logical}"], 2),
    (["mesh", T, "--mesh", "a=2", "--rules", "{rules_bad_spec}"], 2),
    (["mesh", T, "--mesh", "a=2", "--rules", "{rules_bad_regex}"], 2),
    (["mesh", T, "--mesh", "a=2", "--max-device-bytes", "lots"], 2),
    (["mesh", T, "--mesh", "a=2", "--max-device-bytes", "-1"], 2),
    (["mesh", T, "--mesh", "a=2", "--max-device-bytes", "0.5B"], 2),
    (["mesh", T, "--mesh", "a=2", "--max-device-bytes", "80"], 2),
    (["mesh", T, "--mesh", "a=2", "--optimizer", "adamx"], 2),
    (["mesh", T, "--mesh", "a=2", "--seed", "-1"], 2),
    # diff
    (["diff", T], 2),
    (["diff", "nowhere", T], 2),
    (["diff", T, "nowhere"], 2),
    (["diff", "{plain_dir}", T], 2),
    (["diff", T, "no_such_module_xyz:f"], 2),
    (["diff", "cli_targets_mod:raises", T], 2),
    (["diff", "cli_targets_mod:not_a_module", T], 2),
    (["diff", T, T, "--seed", "-1"], 2),
    (["diff", T, T, "--seed-b", "x"], 2),
    (["diff", T, T, "--seed", str(2**63)], 2),
    (["diff", T, T, "--rtol", "-1"], 2),
    (["diff", T, T, "--atol", "nan"], 2),
    (["diff", T, T, "--rtol", "inf"], 2),
    (["diff", "{garbage_meta}", TWO_LAYER], 1),
    (["diff", "{ckpt}", "{trunc_d}"], 1),
    (["diff", "{no_manifest}", "{ckpt}", "--shapes-only"], 1),
    # serve
    (["serve", T, "--sequences", "2"], 2),
    (["serve", T, "--sequences", "0", "--context", "8"], 2),
    (["serve", T, "--sequences", "2", "--context", "8", "--prompt", "9"], 2),
    (["serve", T, "--sequences", "2", "--context", "8", "--kv-cache", "int4"], 2),
    (["serve", T, "--sequences", "2", "--context", "8", "--weights", "f16x"], 2),
    (["serve", T, "--sequences", "2", "--context", "8", "--format", "csv"], 2),
    (["serve", T, "--sequences", "2", "--context", "8", "--mesh", "tp=0"], 2),
    # checkpoint
    (["checkpoint"], 2),
    (["checkpoint", "nowhere"], 2),
    (["checkpoint", "{plain_dir}"], 2),
    (["checkpoint", "{ckpt}", "--verify"], 2),
    (["checkpoint", "{ckpt}", "--model", "no_colon"], 2),
    (["checkpoint", "{ckpt}", "--model", "cli_targets_mod:raises"], 2),
    (["checkpoint", "{ckpt}", "--model", "cli_targets_mod:not_a_module"], 2),
    (["checkpoint", "{ckpt}", "--model", TWO_LAYER, "--seed", "-1"], 2),
    (["checkpoint", "{ckpt}", "--model", TWO_LAYER, "--verify", "--rtol", "x"], 2),
    (["checkpoint", "{garbage_meta}"], 1),
    (["checkpoint", "{no_manifest}"], 1),
    (["checkpoint", "{trunc_sharding}"], 1),
    (["checkpoint", "{trunc_d}"], 1),
    (["checkpoint", "{garbage_meta}", "--model", TWO_LAYER], 1),
    (["checkpoint", "{trunc_d}", "--model", TWO_LAYER, "--verify"], 1),
]


def _fill(argv: list[str], files: dict[str, str]) -> list[str]:
    return [a.format(**files) if a.startswith("{") else a for a in argv]


@pytest.mark.parametrize(("argv", "code"), SWEEP, ids=[" ".join(a) for a, _ in SWEEP])
def test_bad_input_sweep(
    argv: list[str],
    code: int,
    targets_dir: Path,
    sweep_files: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    got, out, err = run(_fill(argv, sweep_files), capsys)
    assert got == code, err
    assert out == ""
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert err.startswith("nnx-introspect") and ": error: " in err
    assert "Traceback" not in err


# The same, as real processes: what a shell or CI sees, logging included: the
# refusals made where libraries run and may log (a factory, JAX, orbax). A
# flag's or a rules file's value refused by the command line itself is held
# by the sweep above, and an argument error in a fresh interpreter by
# test_help_and_argument_errors_import_no_jax.
SWEEP_PROCESSES = [
    (["summary", "cli_targets_mod:raises"], 2),
    (["mesh", T, "--mesh", f"a={2**31}"], 2),
    (["diff", "{ckpt}", "{trunc_d}"], 1),
    (["checkpoint", "{garbage_meta}"], 1),
    (["checkpoint", "{no_manifest}", "--model", TWO_LAYER, "--verify"], 1),
    (["checkpoint", "{trunc_d}", "--model", TWO_LAYER, "--verify"], 1),
]


@pytest.mark.parametrize(
    ("argv", "code"), SWEEP_PROCESSES, ids=[" ".join(a) for a, _ in SWEEP_PROCESSES]
)
def test_bad_input_sweep_as_real_processes(
    argv: list[str], code: int, targets_dir: Path, sweep_files: dict[str, str]
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "nnx_introspect", *_fill(argv, sweep_files)],
        capture_output=True, text=True, check=False, timeout=120, cwd=targets_dir,
    )  # fmt: skip
    assert result.returncode == code, result.stderr
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert ": error: " in result.stderr and "Traceback" not in result.stderr


LOGS_A_WARNING = textwrap.dedent(
    """
    from absl import logging
    from flax import nnx

    def noisy(rngs):
        logging.warning("a library warning on the way")
        return nnx.Linear(2, 2, rngs=rngs)
    """
)


def test_library_warnings_stay_off_stderr_unless_debug(tmp_path: Path) -> None:
    (tmp_path / "cli_noisy_mod.py").write_text(LOGS_A_WARNING)

    def stderr(*extra: str) -> str:
        result = subprocess.run(
            [sys.executable, "-m", "nnx_introspect", "summary", "cli_noisy_mod:noisy",
             "--format", "json", *extra],
            capture_output=True, text=True, check=True, timeout=120, cwd=tmp_path,
        )  # fmt: skip
        return result.stderr

    assert stderr() == ""
    assert "a library warning on the way" in stderr("--debug")


def test_main_restores_the_absl_verbosity(capsys: pytest.CaptureFixture[str]) -> None:
    from absl import logging

    before = logging.get_verbosity()
    assert run(["summary", "nnx_introspect.examples:tied_embedding"], capsys)[0] == 0
    assert logging.get_verbosity() == before


# --- --version and misspelt flags (issue 14) ----------------------------------------


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    import nnx_introspect

    code, out, err = run(["--version"], capsys)
    assert code == 0 and err == ""
    assert out == f"nnx-introspect {nnx_introspect.__version__}\n"
    assert out == "nnx-introspect 0.1.0\n"


@pytest.mark.parametrize(
    ("argv", "command", "message"),
    [
        (["mesh", "nnx_introspect.examples:llama_tiny", "--mesh", "data=2",
          "--mseh", "x"], "mesh", "unrecognized arguments: --mseh x (did you mean --mesh?)"),
        (["mesh", "--mseh", "x"], "mesh",
         "unrecognized arguments: --mseh (did you mean --mesh?); the following "
         "arguments are required: --mesh"),
        (["summary", "x:y", "--fromat", "json"], "summary",
         "unrecognized arguments: --fromat json (did you mean --format?)"),
        (["diff", "a:b", "c:d", "--shape-only"], "diff",
         "unrecognized arguments: --shape-only (did you mean --shapes-only?)"),
        (["checkpoint", "p", "--verfiy"], "checkpoint",
         "unrecognized arguments: --verfiy (did you mean --verify?)"),
    ],
)  # fmt: skip
def test_a_misspelt_flag_points_to_its_subcommands_help(
    argv: list[str], command: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(argv, capsys)
    assert code == 2 and out == ""
    assert err == (
        f"nnx-introspect {command}: error: {message} "
        f"(see 'nnx-introspect {command} --help')\n"
    )


def test_orbax_restore_leftovers_are_dropped_and_others_kept() -> None:
    """The command line drops the unraisable echoes of a failed orbax restore
    (abandoned coroutines, callbacks on a closed loop), and nothing else."""
    import gc
    import os
    import sys
    import types
    from typing import Any

    from nnx_introspect.cli.quiet import orbax_leftovers_dropped

    def coroutine_from(filename: str) -> "types.CoroutineType[Any, Any, None]":
        namespace: dict[str, Any] = {}
        source = "async def read():\n    raise ValueError('gone')\n"
        exec(compile(source, filename, "exec"), namespace)
        coroutine: "types.CoroutineType[Any, Any, None]" = namespace["read"]()
        return coroutine

    orbax_file = os.sep.join(["", "site-packages", "orbax", "checkpoint", "x.py"])
    seen: list[Any] = []
    before = sys.unraisablehook
    test_hook = seen.append
    sys.unraisablehook = test_hook
    try:
        with orbax_leftovers_dropped():
            for source in (orbax_file, "user_code.py"):
                cor = coroutine_from(source)
                sys.unraisablehook(
                    types.SimpleNamespace(
                        exc_value=Exception("x"), object=cor, exc_type=Exception
                    )
                )
                cor.close()
            sys.unraisablehook(
                types.SimpleNamespace(
                    exc_value=RuntimeError("Event loop is closed"),
                    object=None,
                    exc_type=RuntimeError,
                )
            )
            sys.unraisablehook(
                types.SimpleNamespace(
                    exc_value=RuntimeError("something else"),
                    object=None,
                    exc_type=RuntimeError,
                )
            )
        assert sys.unraisablehook is test_hook  # restored on exit
    finally:
        sys.unraisablehook = before
        gc.collect()
    kept = [(type(u.exc_value).__name__, str(u.exc_value)) for u in seen]
    assert kept == [("Exception", "x"), ("RuntimeError", "something else")]
    assert seen[0].object.cr_code.co_filename == "user_code.py"

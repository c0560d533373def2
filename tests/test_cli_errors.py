"""The library's bad arguments on the command line: one table from argument to flag.

A library function refuses a value with an ``ArgumentError`` naming its Python
argument; the command line names the flag from its command's table
(``cli.errors.COMMAND_FLAGS``, every command's together in ``FLAGS``) and exits
with 2, never reading the flag from the message's text; the message's Python
spellings of the command's arguments are rewritten as the flags (issue 44).
"""

import argparse

import pytest

import nnx_introspect._step as step_module
import nnx_introspect._sweep as search_module  # the face the command line calls
from nnx_introspect._typing import ArgumentError
from nnx_introspect.cli.errors import COMMAND_FLAGS, FLAGS, describe, usage_error
from tests.cli_helpers import run, usage

GIVEN = argparse.Namespace(rules="rules.json", topology="v5e-4")
"""A ``step`` whose every optional flag was given."""

BARE = argparse.Namespace(rules=None, topology=None)
"""A ``step`` given neither ``--rules`` nor ``--topology``."""

STEP = ["step", "nnx_introspect.examples:two_layer", "--batch", "float32[8,3]"]


@pytest.mark.parametrize(
    ("command", "argument", "flag"),
    [(c, a, f) for c, table in COMMAND_FLAGS.items() for a, f in table.items()],
)
def test_every_argument_of_each_table_names_its_flag(
    command: str, argument: str, flag: str
) -> None:
    args = argparse.Namespace(rules="rules.json", topology="v5e-4", command=command)
    message = f"`{argument}` must be something else, got  3.\n Pass 4."
    error = usage_error(ArgumentError(argument, message), args)
    assert (
        str(error) == f"argument {flag}: {flag} must be something else, got 3. Pass 4."
    )
    # an item of the argument (`batch[1]`, `mesh['data']`) names the same flag
    indexed = usage_error(
        ArgumentError(f"{argument}[1]", f"`{argument}[1]` is bad."), args
    )
    assert str(indexed) == f"argument {flag}: the 2nd {flag} is bad."


def test_a_command_rewrites_its_own_arguments_only() -> None:
    # rl has no --sequences, serve no --batch: those words are left as they are
    rl = argparse.Namespace(command="rl", rules=None, topology=None)
    error = ArgumentError("batch", "`batch` 3 with `sequences` 6.")
    assert (
        str(usage_error(error, rl)) == "argument --batch: --batch 3 with `sequences` 6."
    )
    serve = argparse.Namespace(command="serve", rules=None, topology=None)
    error = ArgumentError("sequences", "`sequences` 3, `batch` 6.")
    assert str(usage_error(error, serve)) == (
        "argument --sequences: --sequences 3, `batch` 6."
    )


def test_the_table_names_flags_only() -> None:
    flags = {f for table in COMMAND_FLAGS.values() for f in table.values()}
    assert all(f.startswith("--") or f in ("TARGET", "PATH", "A or B") for f in flags)
    assert all(f.startswith("--") or f == "TARGET" for f in FLAGS.values())
    assert FLAGS["max_device_bytes"] == "--max-device-bytes"
    assert FLAGS["network_bytes_per_second"] == "--network-bandwidth"
    assert FLAGS["max_workers"] == "--jobs"
    assert FLAGS["meshes"] == FLAGS["mesh"] == "--mesh"
    assert FLAGS["logical_rules"] == FLAGS["rules"] == "--rules"
    assert FLAGS["kv_cache"] == "--kv-cache"
    assert FLAGS["prefill_sequences"] == "--prefill-sequences"
    assert FLAGS["init_cache"] == "--init-cache"


def test_the_message_is_never_read_for_a_flag() -> None:
    # a plain ValueError naming an argument in backticks names no flag (its
    # words are the flags' all the same)
    error = usage_error(ValueError("`batch` is wrong"), GIVEN)
    assert str(error) == "ValueError: --batch is wrong"
    # an argument the table does not hold keeps the library's ValueError
    error = usage_error(ArgumentError("lo", "`lo` (8) must be at most `hi`."), GIVEN)
    assert str(error) == "ValueError: `lo` (8) must be at most `hi`."
    error = usage_error(TypeError("`loss` must be callable"), GIVEN)
    assert str(error) == "TypeError: --loss must be callable"


def test_rules_name_the_flag_only_when_it_was_given() -> None:
    for argument in ("rules", "logical_rules"):
        error = ArgumentError(argument, f"`{argument}[0]` is bad.")
        assert (
            str(usage_error(error, GIVEN))
            == "argument --rules: the 1st --rules is bad."
        )
        assert str(usage_error(error, BARE)) == "ValueError: the 1st --rules is bad."


def test_a_missing_compiler_names_the_topology() -> None:
    own = ImportError("`topology='v5e-4'` compiles with XLA:TPU, which needs libtpu.")
    assert str(usage_error(own, GIVEN)) == (
        "argument --topology: --topology v5e-4 compiles with XLA:TPU, which needs "
        "libtpu."
    )
    missing = ModuleNotFoundError("No module named 'jax_plugins'")
    assert str(usage_error(missing, GIVEN)) == (
        "argument --topology: ModuleNotFoundError: No module named 'jax_plugins'"
    )
    assert str(usage_error(missing, BARE)) == (
        "ModuleNotFoundError: No module named 'jax_plugins'"
    )


def test_an_argument_error_reads_as_the_value_error_it_is() -> None:
    from nnx_introspect._typing import ArgumentTypeError

    assert describe(ArgumentError("x", "`x` is bad.")) == "ValueError: `x` is bad."
    assert describe(ArgumentTypeError("x", "`x` is bad.")) == "TypeError: `x` is bad."
    assert describe(KeyError("k")) == "KeyError: 'k'"
    assert describe(ValueError("`measure` 2"), "step") == "ValueError: --measure 2"


def _raises(error: BaseException) -> object:
    def fail(*args: object, **kwargs: object) -> None:
        raise error

    return fail


@pytest.mark.parametrize(
    ("module", "name", "argv", "argument", "flag"),
    [
        (step_module, "step_memory_report", ["--mesh", "data=8"],
         "max_device_bytes", "--max-device-bytes"),
        (step_module, "step_memory_report", ["--mesh", "data=8"], "target", "TARGET"),
        (search_module, "max_batch",
         ["--mesh", "data=8", "--max-batch", "--max-device-bytes", "1MiB"],
         "batch", "--batch"),
        (search_module, "compare_meshes", ["--mesh", "data=8", "--mesh", "data=4,x=2"],
         "max_workers", "--jobs"),
        (search_module, "compare_meshes", ["--mesh", "data=8", "--mesh", "data=4,x=2"],
         "meshes", "--mesh"),
    ],
)  # fmt: skip
def test_a_library_argument_error_exits_2_naming_the_flag(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    module: object,
    name: str,
    argv: list[str],
    argument: str,
    flag: str,
) -> None:
    error = ArgumentError(f"{argument}[0]", f"`{argument}[0]` is bad.\nFix it.")
    monkeypatch.setattr(module, name, _raises(error))
    code, out, err = run([*STEP, *argv], capsys)
    assert (code, out) == (2, "")
    given = "" if flag == "TARGET" else f" the 1st {flag} is bad."
    assert err == usage(
        "step",
        f"nnx-introspect: error: argument {flag}:{given or ' the 1st TARGET is bad.'}"
        " Fix it.\n",
    )


def test_the_library_own_argument_error_reaches_the_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # the command line refuses the slice before JAX starts, in the words the
    # library's refusal has on the command line
    code, out, err = run([*STEP, "--mesh", "data=8", "--topology", "v5e-3"], capsys)
    assert (code, out) == (2, "")
    assert err == usage(
        "step",
        "nnx-introspect: error: argument --topology: --topology v5e-3: a v5e slice "
        "has one of [1, 2, 4, 8, 16, 32, 64, 128, 256] chips, got 3.\n",
    )


def test_a_plain_value_error_exits_2_with_its_type(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        step_module, "step_memory_report", _raises(ValueError("`mesh` odd"))
    )
    code, out, err = run([*STEP, "--mesh", "data=8"], capsys)
    assert (code, out, err) == (
        2,
        "",
        usage("step", "nnx-introspect: error: ValueError: --mesh odd\n"),
    )


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        # refused before JAX starts: a TARGET that names nothing, a bad --mesh
        (["summary", "nnx_introspect.examples:two_layr"], "module 'nnx_introspect"),
        ([*STEP, "--mesh", "data=8", "--topology", "v5e-3"], "argument --topology: "),
        # refused by the library, after JAX starts
        (
            [*STEP[:2], "--batch", "float32[7,3]", "--mesh", "data=8"],
            "argument --batch: --mesh data=8 cannot shard the step",
        ),
    ],
)
def test_every_usage_error_names_its_command_and_its_help(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # as argparse says its own: `nnx-introspect step: error: ... (see ...)`
    code, out, err = run(argv, capsys)
    command = argv[0]
    assert (code, out) == (2, "")
    assert err.startswith(f"nnx-introspect {command}: error: {said}")
    assert err.endswith(f" (see 'nnx-introspect {command} --help')\n")
    assert err.count("\n") == 1


def test_a_flag_the_message_names_beside_its_python_spelling_is_said_once() -> None:
    # the library's words for Python callers name the flag in parentheses too
    from nnx_introspect._step.kernels import DENSE_PATH
    from nnx_introspect._step.report_render import loss_text
    from nnx_introspect.cli.errors import in_flags

    dense = in_flags(DENSE_PATH, "step")
    assert dense.endswith("compiled for the target: --trace-as-cpu")
    loss = in_flags(loss_text("mean", ("int32[8,16]",)), "step")
    assert loss.endswith("for a language model's training step pass --loss lm.")
    # a different flag in the parentheses is kept
    assert (
        in_flags("pass loss='lm' (--batch 8).", "step") == "pass --loss lm (--batch 8)."
    )

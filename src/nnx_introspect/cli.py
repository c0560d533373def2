"""The ``nnx-introspect`` command line: argument parsing and rendering only.

Each subcommand has an ``_add_<name>_parser(subparsers)`` function that declares
its arguments (with :func:`_add_output_args` for ``--format``/``--debug`` and
:func:`_add_target_args` for ``TARGET``/``--seed``) and sets its handler
``_run_<name>(args) -> int``. Targets are resolved by :mod:`._targets`; a target
error prints one line on stderr and exits with code 2 (``--debug`` adds the
traceback).
"""

import argparse
import math
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console

from nnx_introspect._checkpoint import (
    check_checkpoint,
    checkpoint_report,
    diff_checkpoints,
    resolve_checkpoint,
    verify_restore,
)
from nnx_introspect._compare import StateDiff, compare_states
from nnx_introspect._mesh import (
    OPTIMIZER_NAMES,
    as_abstract_mesh,
    load_rules_file,
    mesh_config_report,
    parse_bytes,
)
from nnx_introspect._render import Report, to_rich
from nnx_introspect._summary import summarize
from nnx_introspect._targets import DEFAULT_TARGET, TargetError, build_target

__all__ = ["main"]

PROG = "nnx-introspect"
FORMATS = ("table", "markdown", "json")

Handler = Callable[[argparse.Namespace], int]


def _add_output_args(
    parser: argparse.ArgumentParser, formats: Sequence[str] = FORMATS
) -> None:
    """Add ``--format`` (first choice is the default) and ``--debug``."""
    parser.add_argument(
        "--format",
        choices=tuple(formats),
        default=formats[0],
        help=f"output format (default: {formats[0]})",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the full traceback when something fails",
    )


def _add_target_args(parser: argparse.ArgumentParser) -> None:
    """Add the ``TARGET`` positional (default: the 7B example) and ``--seed``."""
    parser.add_argument(
        "target",
        metavar="TARGET",
        nargs="?",
        default=DEFAULT_TARGET,
        help="'package.module:callable', a factory taking `rngs` and returning an "
        f"nnx.Module (default: {DEFAULT_TARGET})",
    )
    parser.add_argument(
        "--seed",
        type=_nonnegative_int,
        default=0,
        help="seed of the nnx.Rngs given to the factory (default: 0)",
    )


def _nonnegative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def _positive_int(text: str) -> int:
    value = _nonnegative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def _emit(report: Report, fmt: str) -> None:
    """Write ``report`` to stdout in ``fmt`` (``table`` uses rich)."""
    if fmt == "json":
        sys.stdout.write(report.to_json() + "\n")
    elif fmt == "markdown":
        sys.stdout.write(report.to_markdown())
    elif fmt == "html":
        sys.stdout.write(report.to_html())
    else:
        console = Console(file=sys.stdout)
        if not console.is_terminal:
            console = Console(file=sys.stdout, width=120)
        console.print(report)


# --- summary ----------------------------------------------------------------------


def _add_summary_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "summary",
        help="every variable of a model, with totals per type and dtype",
        description="Summarize a model built abstractly from TARGET: one row per "
        "variable (path, type, shape, dtype, elements, bytes), totals per "
        "variable type and per dtype. Nothing is allocated.",
    )
    _add_target_args(parser)
    parser.add_argument(
        "--depth",
        type=_positive_int,
        default=None,
        help="aggregate rows by module prefix of this many path keys",
    )
    _add_output_args(parser)
    parser.set_defaults(handler=_run_summary)


def _run_summary(args: argparse.Namespace) -> int:
    model = build_target(args.target, seed=args.seed)
    _emit(summarize(model, depth=args.depth), args.format)
    return 0


# --- mesh -------------------------------------------------------------------------


def _mesh_arg(text: str) -> str:
    try:
        as_abstract_mesh(text, "--mesh")
    except (TypeError, ValueError) as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def _bytes_arg(text: str) -> int:
    try:
        return parse_bytes(text)
    except (TypeError, ValueError) as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _add_mesh_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "mesh",
        help="per-device memory of a model (and its training state) over a mesh",
        description="Plan how every state leaf of TARGET splits over a proposed "
        "mesh: partition spec and where it came from, shard shape, bytes per "
        "device, replicated axes, problems. No devices are needed. Exits with 1 "
        "when a spec cannot be applied or the budget is exceeded.",
    )
    _add_target_args(parser)
    parser.add_argument(
        "--mesh",
        required=True,
        type=_mesh_arg,
        help="the proposed mesh, e.g. 'data=2,model=4' (any size)",
    )
    parser.add_argument(
        "--rules",
        metavar="FILE",
        default=None,
        help='JSON file: [[regex, spec], ...] or {"rules": [...], '
        '"logical_rules": [[name, axis], ...]}; first matching regex wins',
    )
    parser.add_argument(
        "--optimizer",
        choices=OPTIMIZER_NAMES,
        default=None,
        help="also plan this optimizer's state and the gradients",
    )
    parser.add_argument(
        "--max-device-bytes",
        type=_bytes_arg,
        default=None,
        metavar="SIZE",
        help="per-device budget such as 16GiB; exceeding it exits with 1",
    )
    _add_output_args(parser, (*FORMATS, "html"))
    parser.set_defaults(handler=_run_mesh)


def _run_mesh(args: argparse.Namespace) -> int:
    rules: Any = None
    logical: Any = None
    if args.rules is not None:
        try:
            rules, logical = load_rules_file(args.rules)
        except (OSError, ValueError) as error:
            return _fail(f"--rules: {error}", error, args.debug, 2)
    model = build_target(args.target, seed=args.seed)
    report = mesh_config_report(
        model, args.mesh, rules=rules, logical_rules=logical, optimizer=args.optimizer
    )
    budget: int | None = args.max_device_bytes
    if args.format == "html":
        sys.stdout.write(report.to_html(max_device_bytes=budget))
    elif args.format == "table" and not Console(file=sys.stdout).is_terminal:
        # Plans are wide: into a file or pipe, print the table at its full width.
        table = to_rich(report.table())
        width = Console(file=sys.stdout, width=10_000).measure(table).maximum
        Console(file=sys.stdout, width=max(120, width)).print(table)
    else:
        _emit(report, args.format)
    code = 0
    if not report.ok:
        sys.stderr.write(
            f"{PROG}: mesh plan has {len(report.errors)} problem(s); see the notes.\n"
        )
        code = 1
    if budget is not None and not report.fits(budget):
        sys.stderr.write(
            f"{PROG}: {report.bytes_per_device} bytes per device exceed the budget "
            f"of {budget} bytes.\n"
        )
        code = 1
    return code


# --- diff and checkpoint ------------------------------------------------------------


def _tolerance_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text}")
    return value


def _add_tolerance_args(parser: argparse.ArgumentParser) -> None:
    for name, what in (("rtol", "relative"), ("atol", "absolute")):
        parser.add_argument(
            f"--{name}",
            type=_tolerance_arg,
            default=0.0,
            help=f"{what} tolerance for floating values (default: 0, exact)",
        )


def _checkpoint_path(text: str) -> str:
    """``text`` if it is an orbax checkpoint directory, else a TargetError."""
    try:
        resolve_checkpoint(text)
    except (OSError, ValueError) as error:
        raise TargetError(" ".join(str(error).split())) from error
    return text


def _is_checkpoint_operand(text: str) -> bool:
    """Whether a ``diff`` operand names a checkpoint (an existing path)."""
    if os.path.exists(text):
        _checkpoint_path(text)
        return True
    if ":" not in text:
        raise TargetError(
            f"{text!r} is neither an existing checkpoint directory nor a target "
            f"like 'package.module:callable' (for example {DEFAULT_TARGET})."
        )
    return False


def _verdict(diff: StateDiff) -> int:
    if diff.equal:
        return 0
    sys.stderr.write(
        f"{PROG}: {len(diff.entries)} difference(s) at {len(diff.paths)} path(s).\n"
    )
    return 1


def _add_diff_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "diff",
        help="compare two models or checkpoints path by path (exit 1 if they differ)",
        description="Compare A with B path by path: missing and extra paths, "
        "variable types, shapes, dtypes and values. A and B are each a checkpoint "
        "directory (an existing path) or a 'package.module:callable' target, built "
        "concretely from --seed (values are needed). A model against a checkpoint "
        "restores the checkpoint into the model's abstract state. Exit code 1 when "
        "they differ.",
    )
    parser.add_argument("a", metavar="A", help="the reference: checkpoint or target")
    parser.add_argument("b", metavar="B", help="the other side: checkpoint or target")
    parser.add_argument(
        "--seed",
        type=_nonnegative_int,
        default=0,
        help="seed of the nnx.Rngs for target A, and B unless --seed-b (default: 0)",
    )
    parser.add_argument(
        "--seed-b", type=_nonnegative_int, default=None, help="seed for target B"
    )
    parser.add_argument(
        "--shapes-only",
        action="store_true",
        help="compare structure, shapes and dtypes only: targets are built "
        "abstractly and checkpoints read from metadata (nothing allocated)",
    )
    _add_tolerance_args(parser)
    _add_output_args(parser, (*FORMATS, "html"))
    parser.set_defaults(handler=_run_diff)


def _run_diff(args: argparse.Namespace) -> int:
    seed_b = args.seed if args.seed_b is None else args.seed_b
    values = not args.shapes_only
    rtol, atol = args.rtol, args.atol
    a_is_ckpt = _is_checkpoint_operand(args.a)
    b_is_ckpt = _is_checkpoint_operand(args.b)
    diff: StateDiff
    if a_is_ckpt and b_is_ckpt:
        diff = diff_checkpoints(args.a, args.b, values=values, rtol=rtol, atol=atol)
    elif a_is_ckpt or b_is_ckpt:
        if a_is_ckpt:
            path, spec, seed = args.a, args.b, seed_b
        else:
            path, spec, seed = args.b, args.a, args.seed
        model = build_target(spec, seed=seed, abstract=not values)
        if values:
            diff = verify_restore(path, model, rtol=rtol, atol=atol)
        else:
            diff = check_checkpoint(path, model)
    else:
        a = build_target(args.a, seed=args.seed, abstract=not values)
        b = build_target(args.b, seed=seed_b, abstract=not values)
        diff = compare_states(a, b, rtol=rtol, atol=atol)
    _emit(diff, args.format)
    return _verdict(diff)


def _add_checkpoint_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "checkpoint",
        help="describe an orbax checkpoint, or check it against a model",
        description="Without --model: list the arrays of the orbax checkpoint at "
        "PATH from its metadata (tree, shapes, dtypes, shardings), loading none. "
        "With --model: compare that metadata per path with the model built "
        "abstractly from TARGET (nothing allocated); --verify also restores and "
        "compares values. Exit code 1 when the model and the checkpoint differ.",
    )
    parser.add_argument("path", metavar="PATH", help="the checkpoint directory")
    parser.add_argument(
        "--model",
        metavar="TARGET",
        default=None,
        help="'package.module:callable' to compare the checkpoint with",
    )
    parser.add_argument(
        "--seed",
        type=_nonnegative_int,
        default=0,
        help="seed of the nnx.Rngs given to the --model factory (default: 0)",
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="also restore and compare values (builds the model concretely)",
    )
    _add_tolerance_args(parser)
    _add_output_args(parser, (*FORMATS, "html"))
    parser.set_defaults(handler=_run_checkpoint)


def _run_checkpoint(args: argparse.Namespace) -> int:
    path = _checkpoint_path(args.path)
    if args.model is None:
        if args.verify:
            sys.stderr.write(f"{PROG}: error: --verify needs --model TARGET\n")
            return 2
        _emit(checkpoint_report(path), args.format)
        return 0
    model = build_target(args.model, seed=args.seed, abstract=not args.verify)
    if args.verify:
        diff = verify_restore(path, model, rtol=args.rtol, atol=args.atol)
    else:
        diff = check_checkpoint(path, model)
    _emit(diff, args.format)
    return _verdict(diff)


# --- parser and entry point -----------------------------------------------------


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Exact, read-only introspection of Flax NNX models.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    _add_summary_parser(subparsers)
    _add_mesh_parser(subparsers)
    _add_diff_parser(subparsers)
    _add_checkpoint_parser(subparsers)
    return parser


def _fail(message: str, error: BaseException, debug: bool, code: int) -> int:
    if debug:
        traceback.print_exception(error, file=sys.stderr)
    sys.stderr.write(f"{PROG}: error: {message}\n")
    return code


def main(argv: list[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``).

    Returns:
        The exit code: 0 on success, 2 for a usage or target error, 1 for any
        other failure.
    """
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 2
    handler: Handler = args.handler
    debug = bool(getattr(args, "debug", False))
    try:
        return handler(args)
    except TargetError as error:
        return _fail(str(error), error, debug, 2)
    except Exception as error:
        text = " ".join(str(error).split())
        return _fail(f"{type(error).__name__}: {text}", error, debug, 1)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

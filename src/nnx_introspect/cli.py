"""The ``nnx-introspect`` command line: argument parsing and rendering only.

Each subcommand has an ``_add_<name>_parser(subparsers)`` function that declares
its arguments (with :func:`_add_output_args` for ``--format``/``--debug`` and
:func:`_add_target_args` for ``TARGET``/``--seed``) and sets its handler
``_run_<name>(args) -> int`` with ``parser.set_defaults(handler=...)``; a new
subcommand adds one line to :func:`_build_parser`. Targets are resolved by
:mod:`._targets`; a target error prints one line on stderr and exits with code 2
(``--debug`` adds the traceback).

Startup is cheap: JAX, flax, orbax and rich are imported inside the handlers,
never at module level, so ``--help`` and argument errors do not wait for them.
Every argument converter here is pure Python for the same reason.
"""

import argparse
import math
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, NoReturn

from nnx_introspect._targets import DEFAULT_TARGET, TargetError, build_target

if TYPE_CHECKING:
    from nnx_introspect._compare import StateDiff
    from nnx_introspect._render import Report

__all__ = ["main"]

PROG = "nnx-introspect"
FORMATS = ("table", "markdown", "json")
OPTIMIZERS = (
    "adafactor",
    "adagrad",
    "adam",
    "adamw",
    "lion",
    "momentum",
    "rmsprop",
    "sgd",
)
"""``--optimizer`` choices: ``_mesh.OPTIMIZER_NAMES``, spelt out to keep JAX out of
``--help`` (a test holds the two equal)."""

Handler = Callable[[argparse.Namespace], int]


class UsageError(Exception):
    """A bad argument found by a handler; the message starts with the flag."""


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line: no usage block."""

    def error(self, message: str) -> NoReturn:
        text = " ".join(message.split())
        self.exit(2, f"{self.prog}: error: {text} (see '{self.prog} --help')\n")


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


def _add_target_args(parser: argparse.ArgumentParser, *, seed: bool = True) -> None:
    """Add the ``TARGET`` positional (default: the 7B example) and ``--seed``."""
    parser.add_argument(
        "target",
        metavar="TARGET",
        nargs="?",
        default=DEFAULT_TARGET,
        help="'package.module:callable', a factory taking `rngs` and returning an "
        f"nnx.Module (default: {DEFAULT_TARGET})",
    )
    if not seed:
        return
    parser.add_argument(
        "--seed",
        type=_seed,
        default=0,
        help="seed of the nnx.Rngs given to the factory (default: 0)",
    )


def _int_arg(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse converter to ``int`` in ``[minimum, maximum]``."""
    need = f"an integer >= {minimum}"
    if maximum is not None:
        need = f"an integer from {minimum} to {maximum}"

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {need}, got {text!r}") from None
        if value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"must be {need}, got {value}")
        return value

    return convert


_positive_int = _int_arg(1)
_seed = _int_arg(0, 2**63 - 1)  # what nnx.Rngs (jax.random.key) takes


def _emit(report: "Report", fmt: str) -> None:
    """Write ``report`` to stdout in ``fmt`` (``table`` uses rich)."""
    from rich.console import Console

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
    from nnx_introspect._summary import summarize

    model = build_target(args.target, seed=args.seed)
    _emit(summarize(model, depth=args.depth), args.format)
    return 0


# --- mesh -------------------------------------------------------------------------


def _integral(text: str) -> int | None:
    """``text`` as an integer (``"4"``, ``"4.0"``, ``"1e3"``), else ``None``."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if math.isfinite(value) and value.is_integer() else None


def _mesh_arg(text: str) -> str:
    """Check the syntax of ``--mesh`` without JAX; the handler checks the rest.

    This accepts at least every string ``as_abstract_mesh`` accepts (a test holds
    them together); limits such as the largest axis are left to the library.
    """
    seen: set[str] = set()
    for part in text.split(","):
        axis, sep, size = (x.strip() for x in part.partition("="))
        if not sep or not axis.isidentifier():
            raise argparse.ArgumentTypeError(
                f"must look like 'data=2,model=4', got {text!r}: {part!r} is not "
                "'axis=size'"
            )
        if axis in seen:
            raise argparse.ArgumentTypeError(
                f"names axis {axis!r} twice in {text!r}; name each axis once"
            )
        seen.add(axis)
        number = _integral(size)
        if number is None or number < 1:
            raise argparse.ArgumentTypeError(
                f"the size of axis {axis!r} must be a positive integer, got "
                f"{size!r} in {text!r}"
            )
    return text


_SIZE = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([A-Za-z]*)\s*")
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_UNITS |= {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def _bytes_arg(text: str) -> int:
    """``--max-device-bytes``: what ``_mesh.parse_bytes`` gives, without JAX.

    A test holds the two equal (same value, or both reject).
    """
    match = _SIZE.fullmatch(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise argparse.ArgumentTypeError(
            f"must be a size like '16GiB', '500MB' or '4096', got {text!r} "
            "(units: B, kB, MB, GB, TB, KiB, MiB, GiB, TiB)"
        )
    value = float(match.group(1)) * _UNITS[unit]
    if not math.isfinite(value) or not value.is_integer():
        raise argparse.ArgumentTypeError(
            f"must be a whole number of bytes, got {text!r} ({value:g} bytes)"
        )
    return int(value)


def _rules_arg(text: str) -> str:
    """``--rules``: an existing file (its content is checked by the handler)."""
    if not os.path.isfile(text):
        what = "is a directory" if os.path.isdir(text) else "does not exist"
        raise argparse.ArgumentTypeError(
            f"the rules file {text!r} {what}; pass a JSON file of [regex, spec] pairs"
        )
    return text


def _add_plan_args(
    parser: argparse.ArgumentParser, *, optimizer_help: str, budget_help: str
) -> None:
    """Add ``--mesh``, ``--rules``, ``--optimizer`` and ``--max-device-bytes``."""
    parser.add_argument(
        "--mesh",
        required=True,
        type=_mesh_arg,
        help="the proposed mesh, e.g. 'data=2,model=4' (any size)",
    )
    parser.add_argument(
        "--rules",
        metavar="FILE",
        type=_rules_arg,
        default=None,
        help='JSON file: [[regex, spec], ...] or {"rules": [...], '
        '"logical_rules": [[name, axis], ...]}; first matching regex wins',
    )
    parser.add_argument(
        "--optimizer", choices=OPTIMIZERS, default=None, help=optimizer_help
    )
    parser.add_argument(
        "--max-device-bytes",
        type=_bytes_arg,
        default=None,
        metavar="SIZE",
        help=budget_help,
    )


def _mesh_and_rules(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """The ``AbstractMesh`` and the rules of ``--mesh`` / ``--rules``.

    The library's own checks (such as the largest mesh) are usage errors naming
    the flag.
    """
    from nnx_introspect._mesh import as_abstract_mesh, load_rules_file

    try:
        mesh = as_abstract_mesh(args.mesh, "--mesh")
    except (TypeError, ValueError) as error:
        raise UsageError(f"argument --mesh: {error}") from error
    rules: Any = None
    logical: Any = None
    if args.rules is not None:
        try:
            rules, logical = load_rules_file(args.rules)
        except (OSError, ValueError) as error:
            raise UsageError(f"argument --rules: {error}") from error
    return mesh, rules, logical


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
    _add_plan_args(
        parser,
        optimizer_help="also plan this optimizer's state and the gradients",
        budget_help="per-device budget such as 16GiB; exceeding it exits with 1",
    )
    _add_output_args(parser, (*FORMATS, "html"))
    parser.set_defaults(handler=_run_mesh)


_RULES_ARGS = ("`rules", "`logical_rules")
"""How the planner's messages about the rules start (they name the argument)."""


def _run_mesh(args: argparse.Namespace) -> int:
    from rich.console import Console

    from nnx_introspect._mesh import mesh_config_report
    from nnx_introspect._render import format_bytes, to_rich

    mesh, rules, logical = _mesh_and_rules(args)
    model = build_target(args.target, seed=args.seed)
    try:
        report = mesh_config_report(
            model, mesh, rules=rules, logical_rules=logical, optimizer=args.optimizer
        )
    except (TypeError, ValueError) as error:
        # A rule the file holds but the planner rejects is still a bad --rules.
        if args.rules is not None and str(error).startswith(_RULES_ARGS):
            raise UsageError(f"argument --rules: {args.rules!r}: {error}") from error
        raise
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
    failures = []
    if not report.ok:
        failures.append(f"mesh plan has {len(report.errors)} problem(s); see the notes")
    if budget is not None and not report.fits(budget):
        used = report.bytes_per_device
        failures.append(
            f"{format_bytes(used)} ({used:,} bytes) per device exceed the budget of "
            f"{format_bytes(budget)} ({budget:,} bytes)"
        )
    if failures:  # one line on stderr, whatever failed
        sys.stderr.write(f"{PROG}: {'; '.join(failures)}.\n")
        return 1
    return 0


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
    from nnx_introspect._checkpoint import resolve_checkpoint

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


def _verdict(diff: "StateDiff") -> int:
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
        description="Compare A with B path by path: missing paths (in A, not in "
        "B), extra paths (in B, not in A), variable types, shapes, dtypes and "
        "values; the report reads 'A vs B'. A and B are each a checkpoint "
        "directory (an existing path) or a 'package.module:callable' target, built "
        "concretely from --seed (values are needed). A model against a checkpoint "
        "restores the checkpoint into the model's abstract state. Exit code 1 when "
        "they differ.",
    )
    parser.add_argument("a", metavar="A", help="the reference: checkpoint or target")
    parser.add_argument("b", metavar="B", help="the other side: checkpoint or target")
    parser.add_argument(
        "--seed",
        type=_seed,
        default=0,
        help="seed of the nnx.Rngs for target A, and B unless --seed-b (default: 0)",
    )
    parser.add_argument("--seed-b", type=_seed, default=None, help="seed for target B")
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
    from nnx_introspect._checkpoint import (
        check_checkpoint,
        diff_checkpoints,
        verify_restore,
    )
    from nnx_introspect._compare import compare_states

    seed_b = args.seed if args.seed_b is None else args.seed_b
    values = not args.shapes_only
    rtol, atol = args.rtol, args.atol
    a_is_ckpt = _is_checkpoint_operand(args.a)
    b_is_ckpt = _is_checkpoint_operand(args.b)
    diff: "StateDiff"
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
        if a_is_ckpt:  # the library reads model vs checkpoint; the user asked A vs B
            diff = diff.reversed()
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
        type=_seed,
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
    from nnx_introspect._checkpoint import (
        check_checkpoint,
        checkpoint_report,
        verify_restore,
    )

    path = _checkpoint_path(args.path)
    if args.model is None:
        if args.verify:
            raise UsageError("--verify needs --model TARGET")
        _emit(checkpoint_report(path), args.format)
        return 0
    model = build_target(args.model, seed=args.seed, abstract=not args.verify)
    if args.verify:
        diff = verify_restore(path, model, rtol=args.rtol, atol=args.atol)
    else:
        diff = check_checkpoint(path, model)
    _emit(diff, args.format)
    return _verdict(diff)


# --- step -------------------------------------------------------------------------

_BATCH = re.compile(r"\s*([A-Za-z][A-Za-z0-9_]*)\s*\[([^\]]*)\]\s*")


def _batch_arg(text: str) -> tuple[str, tuple[int, ...]]:
    """``--batch "int32[8,2048]"`` -> ``("int32", (8, 2048))``, without JAX.

    The dtype name is checked by the handler (``_step.parse_batch``).
    """
    match = _BATCH.fullmatch(text)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"must look like 'int32[8,2048]' (dtype[dims]), got {text!r}"
        )
    dims = (
        [d.strip() for d in match.group(2).split(",")] if match.group(2).strip() else []
    )
    if any(not d.isdigit() for d in dims):
        raise argparse.ArgumentTypeError(
            f"dimensions must be integers separated by commas, got {text!r}"
        )
    return match.group(1), tuple(int(d) for d in dims)


def _loss_arg(text: str) -> str:
    """``--loss``: a loss name or a ``package.module:function`` (resolved later)."""
    if text.lower() in ("mean", "lm", "none") or ":" in text:
        return text
    raise argparse.ArgumentTypeError(
        f"must be 'mean', 'lm', 'none' or 'package.module:function', got {text!r}"
    )


def _add_step_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "step",
        help="compile one training step and report XLA's memory per device",
        description="Compile one step of TARGET (forward, backward and, with "
        "--optimizer, the update) on a mesh without allocating anything, and "
        "report XLA's per-device bytes (arguments, outputs, temporaries, donated "
        "aliases, peak) beside the exact plan. Compiles on virtual CPU devices (in "
        "a child process when the mesh needs more than this one has) or, with "
        "--topology, with XLA:TPU for a TPU slice (needs the tpu extra). Exits "
        "with 1 when the peak exceeds --max-device-bytes, 2 on bad input.",
    )
    _add_target_args(parser, seed=False)  # built abstractly: no seed to choose
    _add_plan_args(
        parser,
        optimizer_help="compile the full training step with this optimizer",
        budget_help="per-device budget such as 80GiB; a larger peak exits with 1",
    )
    parser.add_argument(
        "--batch",
        required=True,
        action="append",
        type=_batch_arg,
        metavar="DTYPE[DIMS]",
        help="one positional argument of the model, e.g. 'int32[8,2048]'; repeat "
        "for several; the leading dimension splits over the mesh's first axis",
    )
    parser.add_argument(
        "--loss",
        default="mean",
        type=_loss_arg,
        metavar="LOSS",
        help="'mean' (default: the mean of the output), 'lm' (next-token "
        "cross-entropy against the first --batch), 'none' (forward only) or "
        "'package.module:function' taking (model, batch)",
    )
    parser.add_argument(
        "--topology",
        default=None,
        metavar="NAME",
        help="compile with XLA:TPU for this TPU slice, e.g. v5e-256, v6e-8, "
        'v5p-8 (4 chips), v4-16 (8 chips); needs pip install "nnx-introspect[tpu]"',
    )
    _add_output_args(parser, (*FORMATS, "html"))
    parser.set_defaults(handler=_run_step)


def _run_step(args: argparse.Namespace) -> int:
    from rich.console import Console

    from nnx_introspect._render import format_bytes
    from nnx_introspect._step import parse_batch, step_memory_report

    mesh, rules, logical = _mesh_and_rules(args)
    try:
        batch = tuple(parse_batch(name, dims) for name, dims in args.batch)
    except ValueError as error:
        raise UsageError(f"argument --batch: {error}") from error
    loss: Any = None if args.loss.lower() == "none" else args.loss.lower()
    if ":" in args.loss:
        loss = args.loss
    where = f"XLA:TPU for {args.topology}" if args.topology else "XLA"
    message = (
        f"Compiling the step of {args.target} on {mesh.size} devices with {where}..."
    )
    console = Console(file=sys.stderr)
    if console.is_terminal:
        progress: Any = console.status(message)
    else:
        sys.stderr.write(f"{PROG}: {message}\n")
        progress = nullcontext()
    try:
        with progress:
            report = step_memory_report(
                args.target,
                mesh,
                batch,
                loss=loss,
                optimizer=args.optimizer,
                rules=rules,
                logical_rules=logical,
                topology=args.topology,
            )
    except (TypeError, ValueError, ImportError) as error:
        # Bad input to the step (target, batch, loss, topology, a plan whose
        # specs cannot be applied): a usage error, exit 2.
        raise UsageError(_describe(error)) from error
    _emit(report, args.format)
    budget: int | None = args.max_device_bytes
    if budget is not None and not report.fits(budget):
        sys.stderr.write(
            f"{PROG}: the step's peak of {format_bytes(report.peak_bytes)} "
            f"({report.peak_bytes:,} bytes) per device exceeds the budget of "
            f"{format_bytes(budget)} ({budget:,} bytes), by {report.compiler}.\n"
        )
        return 1
    return 0


# --- parser and entry point -----------------------------------------------------


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Exact, read-only introspection of Flax NNX models.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    _add_summary_parser(subparsers)
    _add_mesh_parser(subparsers)
    _add_diff_parser(subparsers)
    _add_checkpoint_parser(subparsers)
    _add_step_parser(subparsers)
    return parser


def _fail(message: str, error: BaseException, debug: bool, code: int) -> int:
    if debug:
        traceback.print_exception(error, file=sys.stderr)
    text = " ".join(message.split())  # one line, whatever the message holds
    sys.stderr.write(f"{PROG}: error: {text}\n")
    return code


def _describe(error: BaseException) -> str:
    if isinstance(error, SystemExit):
        return f"unexpected SystemExit({error.code!r})"
    try:
        text = " ".join(str(error).split())
    except Exception:  # an exception whose __str__ fails
        text = "<unprintable>"
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


@contextmanager
def _quiet_library_logs(debug: bool) -> Iterator[None]:
    """Silence absl warnings (orbax logs through absl) unless ``--debug``.

    Failures reach the user as one line from the exception; the warnings orbax
    logs on the way would only add noise to stderr. Restored on exit, so calling
    :func:`main` in-process leaves the logging state as it was.
    """
    if debug:
        yield
        return
    from absl import logging as absl_logging

    before = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.ERROR)
    try:
        yield
    finally:
        absl_logging.set_verbosity(before)


def main(argv: list[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``).

    Every failure is one line on stderr (``--debug`` adds the traceback).
    ``KeyboardInterrupt`` (Ctrl-C) stops the command with code 130; any other
    exception or exit, including ``sys.exit()`` called by the user's code, is a
    failure, never a success.

    Returns:
        The exit code: 0 on success, 2 for a usage or target error, 1 for a
        difference, a problem or any other failure, 130 when interrupted.
    """
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 2
    handler: Handler = args.handler
    debug = bool(getattr(args, "debug", False))
    try:
        with _quiet_library_logs(debug):
            return handler(args)
    except (TargetError, UsageError) as error:
        return _fail(str(error), error, debug, 2)
    except KeyboardInterrupt as error:
        return _fail("interrupted", error, debug, 130)
    except BaseException as error:  # SystemExit from a library or a model too
        return _fail(_describe(error), error, debug, 1)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

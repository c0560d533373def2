"""The ``step`` subcommand: will one training step fit on each device?

``nnx-introspect step TARGET --mesh data=2,model=4 --batch "int32[8,2048]"``
compiles the step with :func:`~nnx_introspect.step_memory_report` and renders the
report. Exit codes: 0 when it fits (or no budget is given), 1 over
``--max-device-bytes``, 2 on bad input (a bad target, batch, mesh, rules file,
loss, topology, or a plan whose specs cannot be applied).

Wired into :mod:`nnx_introspect.cli` by ``_step_cli.add_parser(subparsers)``.
The few argument helpers are local so that this module never imports ``cli``
(which imports it).
"""

import argparse
import re
import sys
import traceback
from typing import Any

import jax
import jax.numpy as jnp
from rich.console import Console

from nnx_introspect._mesh import (
    OPTIMIZER_NAMES,
    as_abstract_mesh,
    load_rules_file,
    parse_bytes,
)
from nnx_introspect._render import format_bytes
from nnx_introspect._step import LOSSES, StepMemoryReport, step_memory_report
from nnx_introspect._targets import DEFAULT_TARGET, TargetError, resolve_factory

__all__ = ["add_parser", "parse_batch", "run"]

PROG = "nnx-introspect"
FORMATS = ("table", "markdown", "json", "html")

_BATCH_RE = re.compile(r"\s*([A-Za-z0-9_]+)\s*\[([^\]]*)\]\s*")


def parse_batch(text: str) -> jax.ShapeDtypeStruct:
    """``"int32[8,2048]"`` -> ``jax.ShapeDtypeStruct((8, 2048), int32)``.

    Raises:
        ValueError: If ``text`` is not ``dtype[d0,d1,...]`` with a known dtype.
    """
    match = _BATCH_RE.fullmatch(text)
    if match is None:
        raise ValueError(
            f"`--batch` must look like 'int32[8,2048]' (dtype[dims]), got {text!r}."
        )
    name, dims = match.group(1), match.group(2)
    try:
        dtype = jnp.dtype(name)
    except TypeError:
        raise ValueError(
            f"`--batch` {text!r}: {name!r} is not a dtype (int32, float32, "
            "bfloat16...)."
        ) from None
    parts = [d.strip() for d in dims.split(",")] if dims.strip() else []
    if any(not p.isdigit() for p in parts):
        raise ValueError(
            f"`--batch` {text!r}: dimensions must be integers separated by commas."
        )
    return jax.ShapeDtypeStruct(tuple(int(p) for p in parts), dtype)


def _batch_arg(text: str) -> jax.ShapeDtypeStruct:
    try:
        return parse_batch(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


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


def add_parser(subparsers: Any) -> None:
    """Declare the ``step`` subcommand on ``subparsers``."""
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
    parser.add_argument(
        "target",
        metavar="TARGET",
        nargs="?",
        default=DEFAULT_TARGET,
        help="'package.module:callable', a factory taking `rngs` and returning an "
        f"nnx.Module (default: {DEFAULT_TARGET})",
    )
    parser.add_argument(
        "--mesh",
        required=True,
        type=_mesh_arg,
        help="the mesh, e.g. 'data=2,model=4'",
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
        metavar="LOSS",
        help="'mean' (default: the mean of the output), 'lm' (next-token "
        "cross-entropy against the first --batch), 'none' (forward only) or "
        "'package.module:function' taking (model, batch)",
    )
    parser.add_argument(
        "--optimizer",
        choices=OPTIMIZER_NAMES,
        default=None,
        help="compile the full training step with this optimizer",
    )
    parser.add_argument(
        "--rules",
        metavar="FILE",
        default=None,
        help='JSON file: [[regex, spec], ...] or {"rules": [...], '
        '"logical_rules": [[name, axis], ...]}, as for the mesh subcommand',
    )
    parser.add_argument(
        "--topology",
        default=None,
        metavar="NAME",
        help="compile with XLA:TPU for this TPU slice, e.g. v5e-256, v6e-8, "
        'v5p-8 (4 chips), v4-16 (8 chips); needs pip install "nnx-introspect[tpu]"',
    )
    parser.add_argument(
        "--max-device-bytes",
        type=_bytes_arg,
        default=None,
        metavar="SIZE",
        help="per-device budget such as 80GiB; a larger peak exits with 1",
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default=FORMATS[0],
        help=f"output format (default: {FORMATS[0]})",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the full traceback when something fails",
    )
    parser.set_defaults(handler=run)


def _loss(text: str) -> Any:
    if text.lower() == "none":
        return None
    if text in LOSSES:
        return text
    if ":" not in text:
        raise ValueError(
            f"`--loss` must be 'mean', 'lm', 'none' or 'package.module:function', "
            f"got {text!r}."
        )
    return resolve_factory(text)


def _fail(message: str, error: BaseException, debug: bool, code: int) -> int:
    if debug:
        traceback.print_exception(error, file=sys.stderr)
    sys.stderr.write(f"{PROG}: error: {message}\n")
    return code


def _compile(args: argparse.Namespace, rules: Any, logical: Any) -> StepMemoryReport:
    n = 1
    for size in as_abstract_mesh(args.mesh, "--mesh").axis_sizes:
        n *= int(size)
    where = f"XLA:TPU for {args.topology}" if args.topology else "XLA"
    message = f"Compiling the step of {args.target} on {n} devices with {where}..."
    console = Console(file=sys.stderr)
    kwargs = {
        "loss": _loss(args.loss),
        "optimizer": args.optimizer,
        "rules": rules,
        "logical_rules": logical,
        "topology": args.topology,
    }
    batch = tuple(args.batch)
    if console.is_terminal:
        with console.status(message):
            return step_memory_report(args.target, args.mesh, batch, **kwargs)
    sys.stderr.write(f"{PROG}: {message}\n")
    return step_memory_report(args.target, args.mesh, batch, **kwargs)


def run(args: argparse.Namespace) -> int:
    """Handle ``step``: 0 fits, 1 over budget, 2 bad input."""
    rules: Any = None
    logical: Any = None
    try:
        if args.rules is not None:
            try:
                rules, logical = load_rules_file(args.rules)
            except OSError as error:
                raise ValueError(f"`--rules` file {args.rules!r}: {error}") from None
        report = _compile(args, rules, logical)
    except TargetError as error:
        return _fail(str(error), error, args.debug, 2)
    except (TypeError, ValueError, ImportError) as error:
        text = " ".join(str(error).split())
        return _fail(text, error, args.debug, 2)
    if args.format == "json":
        sys.stdout.write(report.to_json() + "\n")
    elif args.format == "markdown":
        sys.stdout.write(report.to_markdown())
    elif args.format == "html":
        sys.stdout.write(report.to_html())
    else:
        console = Console(file=sys.stdout)
        if not console.is_terminal:
            console = Console(file=sys.stdout, width=120)
        console.print(report)
    budget: int | None = args.max_device_bytes
    if budget is not None and not report.fits(budget):
        sys.stderr.write(
            f"{PROG}: the step's peak of {format_bytes(report.peak_bytes)} "
            f"({report.peak_bytes} bytes) per device exceeds the budget of "
            f"{format_bytes(budget)} ({budget} bytes), by {report.compiler}.\n"
        )
        return 1
    return 0

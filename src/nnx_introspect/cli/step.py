"""The ``step`` subcommand: compile one training step, report XLA's memory."""

import argparse
import re
import sys
from contextlib import nullcontext
from typing import Any

from nnx_introspect.cli.args import FORMATS, PROG, _add_output_args, _add_target_args
from nnx_introspect.cli.errors import UsageError, _describe
from nnx_introspect.cli.output import _emit
from nnx_introspect.cli.plan_args import _add_plan_args, _mesh_and_rules

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

"""The ``summary`` subcommand: every variable of a model, with totals."""

import argparse
from typing import Any

from nnx_introspect._targets import build_target
from nnx_introspect.cli.args import add_output_args, add_target_args, positive_int
from nnx_introspect.cli.output import emit


def add_summary_parser(subparsers: Any) -> None:
    """Adds the ``summary`` command to ``subparsers``."""
    parser = subparsers.add_parser(
        "summary",
        help="every variable of a model, with totals per type and dtype",
        description="Summarize a model built abstractly from TARGET: one row per "
        "variable (path, type, shape, dtype, elements, bytes), the identical "
        "variables of a list of layers folded into one row (layers/*/q/kernel "
        "\u00d732; --every-leaf lists them all), totals per variable type and "
        "per dtype. Nothing is allocated.",
    )
    add_target_args(parser)
    parser.add_argument(
        "--depth",
        type=positive_int,
        default=None,
        help="aggregate rows by module prefix of this many path keys (identical "
        "groups of a list of layers are then folded as without --depth)",
    )
    parser.add_argument(
        "--every-leaf",
        action="store_true",
        help="one row per variable; by default the identical rows of a list of "
        "layers are folded into one (layers/*/q/kernel \u00d732)",
    )
    add_output_args(parser)
    parser.set_defaults(handler=_run_summary)


def _run_summary(args: argparse.Namespace) -> int:
    from nnx_introspect._summary import summarize

    model = build_target(args.target, seed=args.seed)
    emit(
        summarize(model, depth=args.depth, group_layers=not args.every_leaf),
        args.format,
        "summary",
    )
    return 0

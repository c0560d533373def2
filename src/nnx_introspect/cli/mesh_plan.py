"""The ``mesh`` subcommand: per-device memory of a model over a proposed mesh."""

import argparse
import dataclasses
import sys
from typing import Any

from nnx_introspect._targets import build_target
from nnx_introspect.cli.args import FORMATS, PROG, add_output_args, add_target_args
from nnx_introspect.cli.output import emit, in_flags_report
from nnx_introspect.cli.plan_args import add_plan_args, mesh_and_rules


def add_mesh_parser(subparsers: Any) -> None:
    """Adds the ``mesh`` command to ``subparsers``."""
    parser = subparsers.add_parser(
        "mesh",
        help="per-device memory of a model (and its training state) over a mesh",
        description="Plan how every state leaf of TARGET splits over a proposed "
        "mesh: partition spec and where it came from, shard shape, bytes per "
        "device, replicated axes, problems. No devices are needed. Exits with 1 "
        "when a spec cannot be applied or the budget is exceeded.",
    )
    add_target_args(parser)
    add_plan_args(
        parser,
        optimizer_help="also plan this optimizer's state and the gradients",
        budget_help="per-device budget with its unit, such as 16GiB, 16GB or 4096B; "
        "exceeding it exits with 1",
    )
    parser.add_argument(
        "--every-leaf",
        action="store_true",
        help="list every leaf in the table; by default the rows and problems "
        "of a list of identical layers fold into one each (layers/*/q/kernel "
        "x32, bytes summed); the JSON always lists every leaf",
    )
    add_output_args(parser, (*FORMATS, "html"))
    parser.set_defaults(handler=_run_mesh)


def _run_mesh(args: argparse.Namespace) -> int:
    from rich.console import Console

    from nnx_introspect._mesh import mesh_config_report
    from nnx_introspect._render import format_bytes

    # A rule the file holds but the planner refuses is a bad --rules, named so.
    mesh, rules, logical = mesh_and_rules(args, name_the_file=True)
    model = build_target(args.target, seed=args.seed)
    budget: int | None = args.max_device_bytes
    # The budget travels with the report, so every format, the JSON `ok` and
    # this exit code give one verdict.
    report = mesh_config_report(
        model,
        mesh,
        rules=rules,
        logical_rules=logical,
        optimizer=args.optimizer,
        max_device_bytes=budget,
    )
    report = dataclasses.replace(report, group_layers=not args.every_leaf)
    if args.format == "table" and not Console(file=sys.stdout).is_terminal:
        report = in_flags_report(report, "mesh")
        # Plans are wide: into a file or pipe, print the table at its full width.
        width = Console(file=sys.stdout, width=10_000).measure(report).maximum
        Console(file=sys.stdout, width=max(120, width)).print(report)
    else:
        emit(report, args.format, "mesh")
    if report.ok:
        return 0
    failures = []
    if report.errors:
        failures.append(f"mesh plan has {len(report.errors)} problem(s); see the notes")
    if budget is not None and not report.fits():
        used = report.bytes_per_device
        failures.append(
            f"{format_bytes(used)} ({used:,} bytes) per device exceed the budget of "
            f"{format_bytes(budget)} ({budget:,} bytes)"
        )
    # One line on stderr, whatever failed.
    sys.stderr.write(f"{PROG}: {'; '.join(failures)}.\n")
    return 1

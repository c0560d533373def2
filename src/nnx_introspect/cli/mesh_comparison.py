"""``step`` with several ``--mesh`` (or ``--mesh auto``): compare the meshes.

:func:`run_compare` is what the ``step`` subcommand runs when ``--mesh`` is
repeated or is ``auto``: one compile per mesh, ``--jobs`` at a time, rendered
like every report, exit code 0 when the best mesh fits, 1 when none does, 2 for
bad input (a :class:`UsageError` naming the flag).
"""

import argparse
import sys

from nnx_introspect.cli.args import PROG
from nnx_introspect.cli.checks import (
    AUTO_ON_ONE_DEVICE,
    check_compare_flags,
    check_network_used,
)
from nnx_introspect.cli.errors import UsageError, in_flags, usage_error
from nnx_introspect.cli.options import option_kwargs
from nnx_introspect.cli.output import emit
from nnx_introspect.cli.plan_args import read_rules, step_inputs
from nnx_introspect.cli.preflight import complete_meshes, loss_note
from nnx_introspect.cli.progress import CompareLine as CompareLine  # tests import
from nnx_introspect.cli.progress import live_status


def jobs_arg(text: str) -> int:
    """``--jobs``: how many compiles run at once, a positive integer.

    For ``argparse``'s ``type=``; its error names the flag (``argument
    --jobs: must be a positive integer ...``).

    Example:
        >>> jobs_arg("4")
        4
        >>> jobs_arg("0")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: must be a positive integer (how many compiles \
run at once), got '0'
    """
    need = "must be a positive integer (how many compiles run at once)"
    try:
        value = int(text.strip(), 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{need}, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{need}, got {text!r}")
    return value


def run_compare(args: argparse.Namespace, meshes: list[str], jobs: int | None) -> int:
    """Compare ``meshes`` for the ``step`` subcommand's other arguments.

    Each mesh's step is compiled by ``compare_meshes``, ``jobs`` at a time in
    a local process pool (default: one per CPU); a progress line is shown on
    stderr only when it is a terminal. The comparison is written to stdout in
    ``--format``.

    Args:
        args: The ``step`` subcommand's parsed arguments (``target``,
            ``batch``, ``loss``, ``optimizer``, ``rules``, ``topology``,
            ``max_device_bytes``, ``trace_as_cpu``, ``format``).
        meshes: The ``--mesh`` values: several meshes (``"fsdp=8"``), or
            ``["auto"]`` for every factorisation of the device count over the
            axes the model's sharding names.
        jobs: ``--jobs``: compiles at once (``None``: one per CPU).

    Returns:
        The exit code: 0 when the best mesh fits (or, with no budget, some
        mesh compiled), 1 when none does (the verdict is written to stderr).

    Raises:
        UsageError: For bad input (the command exits with 2): the flag and
            what is wrong with it.
    """
    from nnx_introspect._sweep import compare_meshes

    check_compare_flags(args, meshes)  # main checked them before JAX
    auto = len(meshes) == 1 and meshes[0].strip().lower() == "auto"
    if auto and args.topology is None:
        import jax

        if jax.device_count() < 2:
            raise UsageError(AUTO_ON_ONE_DEVICE)
    batch, loss = step_inputs(args)
    rules, logical = read_rules(args)
    try:
        check_network_used(args)
    except (TypeError, ValueError, ImportError) as error:
        raise usage_error(error, args) from error
    meshes = complete_meshes(args, meshes, rules, logical)
    loss_note(args, batch)
    where = f"XLA for {args.topology}" if args.topology else "XLA"
    what = "every factorisation" if auto else f"{len(meshes)} meshes"
    message = f"Comparing {what} of {args.target} with {where}..."
    line = CompareLine(message)
    try:
        with live_status(line) as redraw:
            line.redraw = redraw
            comparison = compare_meshes(
                args.target,
                "auto" if auto else meshes,
                batch,
                loss=loss,
                optimizer=args.optimizer,
                rules=rules,
                logical_rules=logical,
                topology=args.topology,
                max_device_bytes=args.max_device_bytes,
                max_workers=jobs,
                trace_as_target=not getattr(args, "trace_as_cpu", False),
                progress=line.progress,
                compiling=line.compiling,
                network_bytes_per_second=getattr(args, "network_bandwidth", None),
                **option_kwargs(args),
            )
    except (TypeError, ValueError, ImportError) as error:
        raise usage_error(error, args) from error
    emit(comparison, args.format, "step")
    if comparison.ok:
        return 0
    sys.stderr.write(f"{PROG}: {in_flags(comparison.verdict, 'step')}.\n")
    return 1

"""The ``step`` subcommand: compile one training step, report XLA's memory."""

import argparse
import dataclasses
import re
import sys
from typing import TYPE_CHECKING, Any

from nnx_introspect._text import plural
from nnx_introspect.cli.args import FORMATS, PROG, add_output_args, add_target_args
from nnx_introspect.cli.checks import check_network_used, check_one_step, check_step
from nnx_introspect.cli.errors import in_flags, usage_error
from nnx_introspect.cli.fit import run_fit
from nnx_introspect.cli.measuring import measurable, measure_failed, warn_if_too_big
from nnx_introspect.cli.mesh_comparison import jobs_arg, run_compare
from nnx_introspect.cli.options import add_measure_arg, add_option_args, option_kwargs
from nnx_introspect.cli.output import emit
from nnx_introspect.cli.plan_args import (
    add_plan_args,
    mesh_and_rules,
    read_rules,
    step_inputs,
)
from nnx_introspect.cli.preflight import complete_meshes, loss_note
from nnx_introspect.cli.progress import ClockLine, SearchLine, live_status
from nnx_introspect.cli.rates import rate_arg

if TYPE_CHECKING:
    from nnx_introspect._step import StepMemoryReport
    from nnx_introspect._sweep import BatchSearch

_BATCH = re.compile(r"\s*([A-Za-z][A-Za-z0-9_]*)\s*\[([^\]]*)\]\s*")


def batch_arg(text: str) -> tuple[str, tuple[int, ...]]:
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


_LOSS_NAMES = ("mean", "lm", "none")


def _loss_arg(text: str) -> str:
    """``--loss``: a loss name or a ``package.module:function`` (resolved later).

    The names are spelt exactly (``LM`` is refused, saying so), as the
    library spells them.

    Example:
        >>> _loss_arg("lm"), _loss_arg("pkg.mod:fn")
        ('lm', 'pkg.mod:fn')
        >>> _loss_arg("LM")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: write 'lm' (lower case), got 'LM'
    """
    if text in _LOSS_NAMES or ":" in text:
        return text
    if text.strip().lower() in _LOSS_NAMES:
        raise argparse.ArgumentTypeError(
            f"write {text.strip().lower()!r} (lower case), got {text!r}"
        )
    raise argparse.ArgumentTypeError(
        f"must be 'mean', 'lm', 'none' or 'package.module:function', got {text!r}"
    )


def add_step_parser(subparsers: Any) -> None:
    """Adds the ``step`` command to ``subparsers``."""
    parser = subparsers.add_parser(
        "step",
        help="compile one training step and report XLA's memory per device",
        description="Compile one step of TARGET (forward, backward and, with "
        "--optimizer, the update) on a mesh without allocating anything, and "
        "report XLA's per-device bytes (arguments, outputs, temporaries, donated "
        "aliases, peak) beside the exact plan. Compiles on virtual CPU devices (in "
        "a child process when the mesh needs more than this one has) or, with "
        "--topology, with XLA:TPU or XLA:GPU for a named slice (no device "
        "needed). With --max-batch, search the largest global batch that fits "
        "instead; with --fit, the fastest configuration (remat, microbatches, "
        "mesh) that fits. Exits with 1 when the step does not fit "
        "--max-device-bytes (or the topology's device memory), no batch or no "
        "configuration fits, 2 on bad input, 3 when a --fit search itself "
        "fails (its worker processes died, or every compile raised).",
    )
    add_target_args(parser, seed=False)  # built abstractly: no seed to choose
    add_plan_args(
        parser,
        several_meshes=True,
        optimizer_help="compile the full training step with this optimizer",
        budget_help="per-device budget with its unit, such as 80GiB, 80GB or 4096B; a "
        "larger peak exits with 1",
    )
    _add_inputs_and_target_args(parser)
    add_option_args(parser)
    add_measure_arg(parser, "step")
    _add_search_and_breakdown_args(parser)
    add_output_args(parser, (*FORMATS, "html"))
    parser.set_defaults(handler=_run_step, check=check_step)


def _add_inputs_and_target_args(parser: argparse.ArgumentParser) -> None:
    """Add what the step compiles, and for what: ``--batch`` to ``--trace-as-cpu``."""
    parser.add_argument(
        "--batch",
        required=True,
        action="append",
        type=batch_arg,
        metavar="DTYPE[DIMS]",
        help="one positional argument of the model, e.g. 'int32[8,2048]'; repeat "
        "for several; the leading dimension splits over the mesh's first axis",
    )
    parser.add_argument(
        "--loss",
        default=None,
        type=_loss_arg,
        metavar="LOSS",
        help="'mean' (default: the mean of the model's output, a stand-in, not "
        "a training loss), 'lm' (next-token cross-entropy against the first "
        "--batch: the one for integer token ids), 'none' (forward only) or "
        "'package.module:function' taking (model, batch)",
    )
    parser.add_argument(
        "--topology",
        default=None,
        metavar="NAME",
        help="compile for this accelerator slice with its compiler, no device "
        "needed: a TPU slice (v5e-256, v6e-8, v5p-8 = 4 chips, v4-16 = 8 chips; "
        'pip install "nnx-introspect[tpu]") or NVIDIA GPUs (h100-8, a100-64; '
        'pip install "nnx-introspect[gpu]"); the default budget is the memory '
        "a run gets there (a GPU: the share JAX's allocator takes, "
        "XLA_CLIENT_MEM_FRACTION or 0.75; a TPU: the HBM XLA:TPU lets a program "
        "use). The model is traced as on the target: jax.devices() answers with "
        "its devices",
    )
    parser.add_argument(
        "--trace-as-cpu",
        action="store_true",
        help="trace the model for a --topology with JAX's own (CPU) devices, "
        "not the target's (a model that shards activations only off the CPU "
        "then compiles without those constraints)",
    )


def _add_search_and_breakdown_args(parser: argparse.ArgumentParser) -> None:
    """Add the search's, the estimate's and the breakdown's flags, ``--top`` last."""
    parser.add_argument(
        "--max-batch",
        action="store_true",
        help="search the largest global batch whose step fits --max-device-bytes "
        "instead (each --batch's leading dimension is the batch dimension; its "
        "size is where the search starts); exits with 1 when no batch fits",
    )
    parser.add_argument(
        "--fit",
        action="store_true",
        help="search the fastest configuration that fits the budget instead: "
        "the --mesh (or several, or auto) x rematerialising a layer (--remat "
        "CLASS, default: the repeated classes whose subtrees keep the most "
        "activations) under each jax.checkpoint_policies policy x microbatches, "
        "each compiled (a few compiles, pruned by what the last ones showed); "
        "exits with 1 when nothing fits, 3 when the search itself fails (its "
        "worker processes died: a script without the __main__ guard, say)",
    )
    parser.add_argument(
        "--jobs",
        type=jobs_arg,
        default=None,
        metavar="N",
        help="with several --mesh, auto or --fit: compile N steps at once in "
        "local processes (default: the CPUs this process may use)",
    )
    parser.add_argument(
        "--network-bandwidth",
        type=rate_arg,
        default=None,
        metavar="RATE",
        help="for a GPU --topology of several hosts (h100-16 and up; one host "
        "has no network, and is refused): the network bandwidth per GPU between "
        "hosts, for the step-time estimate, in bits per second as NICs are sold "
        "(400Gb/s, 400Gbps, 100Mbps) or bytes per second (50GB, 50GB/s, 50GBps): "
        "a lowercase b is bits, an uppercase B bytes (default: the reference "
        "system's, 400Gb/s = 50GB/s for H100: one 400 Gb/s NIC per GPU)",
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="also break the peak down: every buffer live at XLA's peak with its "
        "kind (parameter, optimizer state, gradient, activation kept for the "
        "backward pass...), its state path or source line, the totals by kind, "
        "the memory curve (HTML) and what to change; with --max-batch, for the "
        "largest batch that fits and the smallest that does not",
    )
    parser.add_argument(
        "--top",
        type=_top_arg,
        default=None,
        metavar="N",
        help="with --breakdown: show the N largest buffers (default 20; JSON has "
        "them all)",
    )


def _top_arg(text: str) -> int:
    """``--top``: a positive integer."""
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a positive integer (how many buffers to show), got {text!r}"
        ) from None
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"must be a positive integer (how many buffers to show), got {text!r}"
        )
    return value


def _run_step(args: argparse.Namespace) -> int:
    meshes: list[str] = list(args.mesh)
    if args.fit:
        return run_fit(args, meshes)
    if len(meshes) > 1 or meshes[0] == "auto":
        return run_compare(args, meshes, args.jobs)
    check_one_step(args)  # main checked it before JAX; again for direct callers
    args.mesh = complete_meshes(args, meshes, *read_rules(args))[0]
    mesh, rules, logical = mesh_and_rules(args)
    batch, loss = step_inputs(args)
    if loss is not None:
        loss_note(args, batch)
    try:
        check_network_used(args)
    except ValueError as error:  # a bad --topology
        raise usage_error(error, args) from error
    where = f"XLA for {args.topology}" if args.topology else "XLA"
    what = "Searching the largest batch" if args.max_batch else "Compiling the step"
    devices = plural(mesh.size, "device")
    message = f"{what} of {args.target} on {devices} with {where}..."
    common: dict[str, Any] = {
        "loss": loss,
        "optimizer": args.optimizer,
        "rules": rules,
        "logical_rules": logical,
        "topology": args.topology,
        "max_device_bytes": args.max_device_bytes,
        "trace_as_target": not args.trace_as_cpu,
        "breakdown": args.breakdown,
        **option_kwargs(args),
    }
    if args.network_bandwidth is not None:
        common["network_bytes_per_second"] = args.network_bandwidth
    try:
        if args.max_batch:
            search = _search(args.target, mesh, batch, message, common)
        else:
            report = _compile(
                args.target, mesh, batch, message, common, args.debug, args.measure
            )
    except (TypeError, ValueError, ImportError) as error:
        # Bad input to the step (target, batch, loss, topology, a plan whose
        # specs cannot be applied): a usage error, exit 2.
        raise usage_error(error, args) from error
    if args.max_batch:
        return _show_search(search, args)
    return _show_step(report, args)


def _search(
    target: str,
    mesh: Any,
    batch: tuple[Any, ...],
    message: str,
    common: dict[str, Any],
) -> "BatchSearch":
    """``--max-batch``: the search, its progress line on a terminal."""
    from nnx_introspect._sweep import max_batch

    line = SearchLine(message)
    with live_status(line) as redraw:
        line.redraw = redraw
        return max_batch(
            target,
            mesh,
            batch,
            progress=line.done,
            compiling=line.compiling,
            **common,
        )


def _compile(
    target: str,
    mesh: Any,
    batch: tuple[Any, ...],
    message: str,
    common: dict[str, Any],
    debug: bool,
    measure: int | None = None,
) -> "StepMemoryReport":
    """One step's report, a spinner on a terminal while it compiles.

    With ``measure``, the step is compiled first (from the cache, when it was
    before) and a warning written when its peak is more than the devices
    hold; then compiled again on them and run.
    """
    from nnx_introspect._step import step_memory_report

    if measure is not None and measurable(mesh.size):
        with live_status(ClockLine(message)):
            compiled = step_memory_report(target, mesh, batch, **common)
        warn_if_too_big(compiled.peak_bytes, mesh.size, "the step")
        message = f"Running the step {measure} times on this machine's devices..."
    with live_status(ClockLine(message)):
        return step_memory_report(
            target, mesh, batch, debug=debug, measure=measure, **common
        )


def _show_search(search: "BatchSearch", args: argparse.Namespace) -> int:
    """Write the search in ``--format``; 1 (and its verdict) when no batch fits."""
    if args.top is not None:
        search = search.with_top(args.top)
    emit(search, args.format, "step")
    if not search.ok:
        sys.stderr.write(f"{PROG}: {in_flags(search.verdict, 'step')}.\n")
        return 1
    return 0


def _show_step(report: "StepMemoryReport", args: argparse.Namespace) -> int:
    """Write the report in ``--format``; 1 (and its verdict) when it does not fit."""
    if args.debug and report.compiler_log:  # the compiler's own log, asked for
        sys.stderr.write(report.compiler_log)
    if report.breakdown is not None and (args.top is not None or args.debug):
        top = report.breakdown.top_n if args.top is None else args.top
        shown = dataclasses.replace(report.breakdown, top_n=top, debug=args.debug)
        report = dataclasses.replace(report, breakdown=shown)
    for warning in report.warnings:
        if warning.startswith("No breakdown of the peak"):
            sys.stderr.write(f"{PROG}: warning: {in_flags(warning, 'step')}\n")
    emit(report, args.format, "step")
    if not report.ok:  # the report's own verdict: its JSON, markdown and HTML say so
        sys.stderr.write(f"{PROG}: {in_flags(report.verdict, 'step')}.\n")
        return 1
    return 1 if measure_failed([("the step", report.measured)]) else 0

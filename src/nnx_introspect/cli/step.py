"""The ``step`` subcommand: compile one training step, report XLA's memory."""

import argparse
import dataclasses
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from nnx_introspect.cli.args import FORMATS, PROG, _add_output_args, _add_target_args
from nnx_introspect.cli.errors import UsageError, _describe
from nnx_introspect.cli.meshes import jobs_arg, run_compare
from nnx_introspect.cli.output import _emit
from nnx_introspect.cli.plan_args import _add_plan_args, _bytes_arg, _mesh_and_rules

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
        "--topology, with XLA:TPU or XLA:GPU for a named slice (no device "
        "needed). With --max-batch, search the largest global batch that fits "
        "instead. Exits with 1 when the step does not fit --max-device-bytes (or "
        "the topology's device memory) or no batch fits, 2 on bad input.",
    )
    _add_target_args(parser, seed=False)  # built abstractly: no seed to choose
    _add_plan_args(
        parser,
        several_meshes=True,
        optimizer_help="compile the full training step with this optimizer",
        budget_help="per-device budget with its unit, such as 80GiB, 80GB or 4096B; a "
        "larger peak exits with 1",
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
    parser.add_argument(
        "--max-batch",
        action="store_true",
        help="search the largest global batch whose step fits --max-device-bytes "
        "instead (each --batch's leading dimension is the batch dimension; its "
        "size is where the search starts); exits with 1 when no batch fits",
    )
    parser.add_argument(
        "--jobs",
        type=jobs_arg,
        default=None,
        metavar="N",
        help="with several --mesh (or auto): compile N meshes at once in local "
        "processes (default: the CPUs this process may use)",
    )
    parser.add_argument(
        "--network-bandwidth",
        type=_bytes_arg,
        default=None,
        metavar="SIZE",
        help="for a GPU --topology of several hosts: the network bandwidth per GPU "
        "between hosts, per second, for the step-time estimate (default: the "
        "reference system's, 50GB for H100: one 400 Gb/s NIC per GPU)",
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
    _add_output_args(parser, (*FORMATS, "html"))
    parser.set_defaults(handler=_run_step)


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


_FLAGS = {
    "target": "TARGET",
    "batch": "--batch",
    "batch_spec": "--batch",
    "loss": "--loss",
    "optimizer": "--optimizer",
    "topology": "--topology",
    "mesh": "--mesh",
    "rules": "--rules",
    "logical_rules": "--rules",
    "max_device_bytes": "--max-device-bytes",
    "network_bytes_per_second": "--network-bandwidth",
}
"""The library's argument names (in backticks in its messages) and their flags."""

_ARGUMENT = re.compile(r"`([A-Za-z_]+)")


def _usage_error(
    error: BaseException, *, rules_given: bool, topology_given: bool
) -> UsageError:
    """The library's ``error`` about bad input, as one line naming the flag.

    The first argument the message names in backticks that is a flag's gives
    the flag. ``rules`` and ``logical_rules`` count only when ``--rules`` was
    given: a plan problem of the model's own sharding metadata names them as
    the fix, not the cause. A step that cannot be sharded ("`mesh` {...}
    cannot shard the step (...): problems") is judged by its problems: a
    batch leaf's gives ``--batch``, a plan's ``--rules`` when rules were given
    (they name the axes), else ``--mesh``. An ``ImportError`` naming no flag
    is the ``--topology``'s compiler missing when one was given; any other
    message naming no flag is kept whole.
    """
    text = " ".join(str(error).split())
    _, shard, problems = text.partition("cannot shard the step")
    if shard:
        problems = problems.partition("): ")[2]
        if rules_given and "`rules`" in problems and not problems.startswith("`batch"):
            return UsageError(f"argument --rules: {text}")
    for name in _ARGUMENT.findall(problems if shard else text):
        flag = _FLAGS.get(name)
        if flag == "--rules" and not rules_given:
            continue
        if flag is not None:
            return UsageError(f"argument {flag}: {text}")
    if isinstance(error, ImportError) and topology_given:
        return UsageError(f"argument --topology: {_describe(error)}")
    return UsageError(_describe(error))


def _duration(seconds: float) -> str:
    """``72.4`` -> ``"1m 12s"``: whole seconds, minutes and hours."""
    total = int(seconds)
    if total < 60:
        return f"{total}s"
    if total < 3600:
        return f"{total // 60}m {total % 60:02d}s"
    return f"{total // 3600}h {total // 60 % 60:02d}m"


class _SearchLine:
    """The ``--max-batch`` progress line, its text recomputed at each redraw.

    Before the first compile, ``message``; from it on, the batch compiling now,
    the compile's number and the time since the search began (``compiling
    batch 24 (compile 5, 1m 12s)``), then the last batch's answer.
    """

    def __init__(
        self, message: str, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.message = message
        self.clock = clock
        self.began = clock()
        self.batch: int | None = None
        self.count = 0
        self.last: tuple[int, int, bool] | None = None
        self.redraw: Callable[[], None] = lambda: None

    def compiling(self, batch: int, count: int) -> None:
        """``max_batch``'s ``compiling``: batch ``batch``, compile ``count``."""
        self.batch, self.count = batch, count
        self.redraw()

    def done(self, point: tuple[int, int, bool]) -> None:
        """``max_batch``'s ``progress``: a compile's answer."""
        self.last = point
        self.redraw()

    def text(self) -> str:
        """The line as it reads now."""
        if self.batch is None:
            return self.message
        from nnx_introspect._render.table import format_bytes

        elapsed = _duration(self.clock() - self.began)
        line = f"compiling batch {self.batch} (compile {self.count}, {elapsed})"
        if self.last is not None:
            batch, peak, fits = self.last
            verdict = "fits" if fits else "does not fit"
            line += f"; batch {batch} {verdict} ({format_bytes(peak)} per device)"
        return line

    def __rich__(self) -> Any:
        from rich.text import Text

        return Text(self.text())  # never console markup: a target may hold "[...]"


@contextmanager
def _status(
    renderable: Any, console: Any = None, redraw_every: float = 0.25
) -> Iterator[Callable[[], None]]:
    """A spinner and ``renderable`` on one line of stderr while the body runs.

    Only when stderr is a terminal (or on the rich ``console`` given): into a
    file or a pipe, a successful run writes nothing on stderr. The line is
    redrawn every ``redraw_every`` seconds (a clock in it moves) and cleared at
    the end. Yields a function that redraws it at once (a no-op off a
    terminal).
    """
    if console is None:
        if not sys.stderr.isatty():
            yield lambda: None
            return
        from rich.console import Console

        console = Console(file=sys.stderr, force_terminal=True)
    from rich.live import Live
    from rich.spinner import Spinner

    line = Spinner("dots", text=renderable)
    with Live(
        line, console=console, refresh_per_second=1 / redraw_every, transient=True
    ) as live:
        yield live.refresh


def _run_step(args: argparse.Namespace) -> int:
    from nnx_introspect._search.batch import max_batch
    from nnx_introspect._step import parse_batch, step_memory_report

    meshes: list[str] = list(args.mesh)
    if len(meshes) > 1 or meshes[0] == "auto":
        return run_compare(args, meshes, args.jobs)
    if args.jobs is not None:
        raise UsageError(
            "argument --jobs: compiles several meshes at once; give --mesh more "
            "than once, or --mesh auto"
        )
    args.mesh = meshes[0]
    mesh, rules, logical = _mesh_and_rules(args)
    try:
        batch = tuple(parse_batch(name, dims) for name, dims in args.batch)
    except ValueError as error:
        raise UsageError(f"argument --batch: {error}") from error
    loss: Any = None if args.loss.lower() == "none" else args.loss.lower()
    if ":" in args.loss:
        loss = args.loss
    budget: int | None = args.max_device_bytes
    if args.top is not None and not args.breakdown:
        raise UsageError(
            "argument --top: shows the largest buffers of the breakdown; add "
            "--breakdown"
        )
    if args.max_batch and budget is None and args.topology is None:
        raise UsageError(
            "argument --max-batch: needs --max-device-bytes SIZE, the per-device "
            "budget the step must fit (for example --max-device-bytes 16GiB), or "
            "a --topology whose memory gives the budget"
        )
    where = f"XLA for {args.topology}" if args.topology else "XLA"
    what = "Searching the largest batch" if args.max_batch else "Compiling the step"
    message = f"{what} of {args.target} on {mesh.size} devices with {where}..."
    common: dict[str, Any] = {
        "loss": loss,
        "optimizer": args.optimizer,
        "rules": rules,
        "logical_rules": logical,
        "topology": args.topology,
        "max_device_bytes": budget,
        "trace_as_target": not args.trace_as_cpu,
        "breakdown": args.breakdown,
    }
    if args.network_bandwidth is not None:
        if args.max_batch:
            raise UsageError(
                "argument --network-bandwidth: sets the step-time estimate of one "
                "step's report; --max-batch reports memory only"
            )
        common["network_bytes_per_second"] = args.network_bandwidth
    try:
        if args.max_batch:
            line = _SearchLine(message)
            with _status(line) as redraw:
                line.redraw = redraw
                search = max_batch(
                    args.target,
                    mesh,
                    batch,
                    progress=line.done,
                    compiling=line.compiling,
                    **common,
                )
        else:
            with _status(message):
                report = step_memory_report(
                    args.target, mesh, batch, debug=args.debug, **common
                )
    except (TypeError, ValueError, ImportError) as error:
        # Bad input to the step (target, batch, loss, topology, a plan whose
        # specs cannot be applied): a usage error, exit 2.
        raise _usage_error(
            error,
            rules_given=args.rules is not None,
            topology_given=args.topology is not None,
        ) from error
    if args.max_batch:
        if args.top is not None:
            search = search.with_top(args.top)
        _emit(search, args.format)
        if not search.ok:
            sys.stderr.write(f"{PROG}: {search.verdict}.\n")
            return 1
        return 0
    if args.debug and report.compiler_log:  # the compiler's own log, asked for
        sys.stderr.write(report.compiler_log)
    if args.top is not None and report.breakdown is not None:
        report = dataclasses.replace(
            report, breakdown=dataclasses.replace(report.breakdown, top_n=args.top)
        )
    for warning in report.warnings:
        if warning.startswith("No breakdown of the peak"):
            sys.stderr.write(f"{PROG}: warning: {warning}\n")
    _emit(report, args.format)
    if report.ok:  # the report's own verdict: its JSON, markdown and HTML say so
        return 0
    sys.stderr.write(f"{PROG}: {report.verdict}.\n")
    return 1

"""``step`` with several ``--mesh`` (or ``--mesh auto``): compare the meshes.

:func:`run_compare` is what the ``step`` subcommand runs when ``--mesh`` is
repeated or is ``auto``: one compile per mesh, ``--jobs`` at a time, rendered
like every report, exit code 0 when the best mesh fits, 1 when none does, 2 for
bad input (a :class:`UsageError` naming the flag).

It imports from :mod:`nnx_introspect.cli.step` (the progress line, the flags
of the library's messages) inside its functions, so ``step`` may import
:func:`run_compare` and :func:`jobs_arg` at its top.
"""

import argparse
import re
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nnx_introspect.cli.args import PROG
from nnx_introspect.cli.errors import UsageError
from nnx_introspect.cli.output import _emit

if TYPE_CHECKING:
    from nnx_introspect._search.meshes import MeshCandidate

_COMPARE_FLAGS = {
    "meshes": "--mesh",
    "max_workers": "--jobs",
    "network_bytes_per_second": "--network-bandwidth",
}
"""The comparison's own argument names (in backticks in its messages), as flags."""

_ARGUMENT = re.compile(r"`([A-Za-z_]+)")

_ONE_STEP_FLAGS = (
    ("max_batch", "--max-batch", "searches the largest batch of one mesh"),
    ("breakdown", "--breakdown", "breaks down the peak of one step"),
    ("top", "--top", "shows the largest buffers of one step's breakdown"),
)
"""Flags of one step that a comparison of several meshes does not take."""


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


class _CompareLine:
    """The progress line of a comparison, its text recomputed at each redraw.

    Before the compiles are submitted, ``message``; then how many have
    finished, the time since the comparison began, and the last one's answer
    (``3 of 6 meshes compiled (1m 12s); fsdp=8 fits (1.2 GiB per device)``).
    """

    def __init__(
        self, message: str, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.message = message
        self.clock = clock
        self.began = clock()
        self.total: int | None = None
        self.done = 0
        self.last: "MeshCandidate | None" = None
        self.redraw: Callable[[], None] = lambda: None

    def progress(self, done: int, total: int, row: "MeshCandidate | None") -> None:
        """``compare_meshes``'s ``progress``: ``done`` of ``total`` resolved."""
        self.done, self.total = done, total
        if row is not None:
            self.last = row
        self.redraw()

    def text(self) -> str:
        """The line as it reads now."""
        if self.total is None:
            return self.message
        from nnx_introspect._render.table import format_bytes
        from nnx_introspect.cli.step import _duration

        elapsed = _duration(self.clock() - self.began)
        line = f"{self.done} of {self.total} meshes compiled ({elapsed})"
        last = self.last
        if last is not None:
            peak = last.peak_bytes
            size = "" if peak is None else f" ({format_bytes(peak)} per device)"
            line += f"; {last.name}: {last._short_status()}{size}"
        return line

    def __rich__(self) -> Any:
        from rich.text import Text

        return Text(self.text())  # never console markup: a target may hold "[...]"


def _compare_usage_error(error: BaseException, args: argparse.Namespace) -> UsageError:
    """The comparison's ``error`` about bad input, as one line naming the flag.

    The first argument named in backticks gives the flag: the comparison's own
    (``meshes`` is ``--mesh``, ``max_workers`` ``--jobs``) here, the step's
    through the ``step`` subcommand's rules.
    """
    from nnx_introspect.cli.step import _usage_error  # step imports this module

    text = " ".join(str(error).split())
    names = _ARGUMENT.findall(text)
    if names and names[0] in _COMPARE_FLAGS:
        return UsageError(f"argument {_COMPARE_FLAGS[names[0]]}: {text}")
    return _usage_error(
        error,
        rules_given=args.rules is not None,
        topology_given=args.topology is not None,
    )


def _rules(args: argparse.Namespace) -> tuple[Any, Any]:
    """``(rules, logical_rules)`` of ``--rules`` (``None`` without it)."""
    if args.rules is None:
        return None, None
    from nnx_introspect._mesh import load_rules_file

    try:
        return load_rules_file(args.rules)
    except (OSError, ValueError) as error:
        raise UsageError(f"argument --rules: {error}") from error


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
    from nnx_introspect._search.meshes import compare_meshes
    from nnx_introspect._step import parse_batch
    from nnx_introspect.cli.step import _status  # step imports this module

    for name, flag, what in _ONE_STEP_FLAGS:
        if getattr(args, name, None) not in (None, False):
            raise UsageError(
                f"argument {flag}: {what}, not a comparison of several --mesh; "
                f"compare first, then run the best mesh with {flag}"
            )
    auto = [m for m in meshes if m.strip().lower() == "auto"]
    if auto and len(meshes) > 1:
        raise UsageError(
            "argument --mesh: 'auto' compares every factorisation of the device "
            f"count by itself; give it alone or list the meshes, got {meshes}"
        )
    if auto and args.topology is None:
        import jax

        if jax.device_count() < 2:
            raise UsageError(
                "argument --mesh: 'auto' factors the device count of a --topology "
                "(such as h100-8 or v5e-16), and this process has 1 CPU device; "
                "give a --topology, or list the meshes"
            )
    try:
        batch = tuple(parse_batch(name, dims) for name, dims in args.batch)
    except ValueError as error:
        raise UsageError(f"argument --batch: {error}") from error
    loss: Any = None if args.loss.lower() == "none" else args.loss.lower()
    if ":" in args.loss:
        loss = args.loss
    rules, logical = _rules(args)
    where = f"XLA for {args.topology}" if args.topology else "XLA"
    what = "every factorisation" if auto else f"{len(meshes)} meshes"
    message = f"Comparing {what} of {args.target} with {where}..."
    line = _CompareLine(message)
    try:
        with _status(line) as redraw:
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
                network_bytes_per_second=getattr(args, "network_bandwidth", None),
            )
    except (TypeError, ValueError, ImportError) as error:
        raise _compare_usage_error(error, args) from error
    _emit(comparison, args.format)
    if comparison.ok:
        return 0
    sys.stderr.write(f"{PROG}: {comparison.verdict}.\n")
    return 1

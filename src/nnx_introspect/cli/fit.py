"""``step --fit``: the fastest configuration of the step that fits."""

import argparse
import sys

from nnx_introspect.cli.args import PROG
from nnx_introspect.cli.errors import UsageError, in_flags, usage_error
from nnx_introspect.cli.options import xla_flags
from nnx_introspect.cli.output import emit
from nnx_introspect.cli.plan_args import read_rules, step_inputs
from nnx_introspect.cli.preflight import complete_meshes, loss_note
from nnx_introspect.cli.progress import ClockLine, live_status

__all__ = ["check_fit_flags", "run_fit"]

_NOT_WITH_FIT = (
    ("max_batch", "--max-batch", "searches batch sizes of one configuration"),
    ("breakdown", "--breakdown", "breaks down one step's peak"),
    ("top", "--top", "shows one step's largest buffers"),
    ("measure", "--measure", "runs one step's compiled program"),
)


def check_fit_flags(args: argparse.Namespace) -> None:
    """Refuse flags ``--fit`` chooses itself or cannot take: usage errors."""
    for name, flag, what in _NOT_WITH_FIT:
        if getattr(args, name, None) not in (None, False):
            raise UsageError(
                f"argument {flag}: {what}, and --fit searches configurations; "
                f"run the chosen configuration with {flag} afterwards"
            )
    if getattr(args, "microbatches", 1) != 1:
        raise UsageError(
            "argument --microbatches: --fit chooses the microbatches itself; "
            "leave --microbatches out"
        )
    remat = getattr(args, "remat", None) or []
    if len(remat) > 1 or any(policy is not None for _, policy in remat):
        raise UsageError(
            "argument --remat: with --fit, give one class (--remat LlamaLayer): "
            "--fit tries every policy"
        )
    if args.max_device_bytes is None and args.topology is None:
        raise UsageError(
            "argument --fit: needs a budget: --max-device-bytes SIZE or a "
            "--topology whose memory gives it"
        )
    if args.loss == "none":
        raise UsageError(
            "argument --fit: changes the backward pass; --loss none compiles the "
            "forward only"
        )


def run_fit(args: argparse.Namespace, meshes: list[str]) -> int:
    """Run ``fit_step`` for ``step --fit``: 0 fits, 1 none fits, 3 the search failed.

    A failed search (its worker processes died, or every compile raised) is
    not a memory verdict: its cause is the verdict, and the exit code is 3.
    """
    from nnx_introspect._sweep import fit_step

    check_fit_flags(args)
    batch, loss = step_inputs(args)
    rules, logical = read_rules(args)
    meshes = complete_meshes(args, meshes, rules, logical)
    loss_note(args, batch)
    remat = getattr(args, "remat", None) or []
    message = f"Searching the fastest configuration of {args.target} that fits..."
    line = ClockLine(message)
    try:
        with live_status(line) as redraw:
            line.redraw = redraw
            search = fit_step(
                args.target,
                meshes[0] if len(meshes) == 1 else meshes,
                batch,
                loss=loss,
                optimizer=args.optimizer,
                rules=rules,
                logical_rules=logical,
                topology=args.topology,
                max_device_bytes=args.max_device_bytes,
                remat=remat[0][0] if remat else None,
                max_workers=args.jobs,
                trace_as_target=not getattr(args, "trace_as_cpu", False),
                network_bytes_per_second=getattr(args, "network_bandwidth", None),
                tokens_per_step=getattr(args, "tokens_per_step", None),
                compiler_flags=xla_flags(args),
                cache=not getattr(args, "no_cache", False),
                progress=line.fitted,
            )
    except (TypeError, ValueError, ImportError) as error:
        raise usage_error(error, args) from error
    emit(search, args.format, "step")
    if search.ok:
        return 0
    sys.stderr.write(f"{PROG}: {in_flags(search.verdict, 'step')}.\n")
    return 3 if search.failure is not None else 1

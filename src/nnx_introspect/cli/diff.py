"""The ``diff`` subcommand: two models or checkpoints compared path by path."""

import argparse
import dataclasses
import os
from typing import TYPE_CHECKING, Any

from nnx_introspect._targets import DEFAULT_TARGET, TargetError, build_target
from nnx_introspect.cli.args import (
    FORMATS,
    add_output_args,
    add_tolerance_args,
    seed_arg,
)
from nnx_introspect.cli.checkpoint import checkpoint_path, model_against_checkpoint
from nnx_introspect.cli.output import emit, verdict_code

if TYPE_CHECKING:
    from nnx_introspect._compare import StateDiff


def _is_checkpoint_operand(text: str, what: str = "A") -> bool:
    """Whether a ``diff`` operand (``what``: A or B) names a checkpoint (a path)."""
    if os.path.exists(text):
        checkpoint_path(text, what)
        return True
    if ":" not in text:
        raise TargetError(
            f"{text!r} is neither an existing checkpoint directory nor a target "
            f"like 'package.module:callable' (for example {DEFAULT_TARGET})."
        )
    return False


def add_diff_parser(subparsers: Any) -> None:
    """Adds the ``diff`` command to ``subparsers``."""
    parser = subparsers.add_parser(
        "diff",
        help="compare two models or checkpoints path by path (exit 1 if they differ)",
        description="Compare A with B path by path: missing paths (in A, not in "
        "B), extra paths (in B, not in A), variable types, shapes, dtypes and "
        "values; the report reads 'A vs B', each named as given (a target by its "
        "callable's name, a checkpoint by its path). A and B are each a checkpoint "
        "directory (an existing path) or a 'package.module:callable' target, built "
        "concretely from --seed (values are needed). A model against a checkpoint "
        "restores the checkpoint into the model's abstract state. Exit code 1 when "
        "they differ.",
    )
    parser.add_argument("a", metavar="A", help="the reference: checkpoint or target")
    parser.add_argument("b", metavar="B", help="the other side: checkpoint or target")
    parser.add_argument(
        "--seed",
        type=seed_arg,
        default=0,
        help="seed of the nnx.Rngs for target A, and B unless --seed-b (default: 0)",
    )
    parser.add_argument(
        "--seed-b", type=seed_arg, default=None, help="seed for target B"
    )
    parser.add_argument(
        "--shapes-only",
        action="store_true",
        help="compare structure, shapes and dtypes only: targets are built "
        "abstractly and checkpoints read from metadata (nothing allocated)",
    )
    add_tolerance_args(parser)
    add_output_args(parser, (*FORMATS, "html"))
    parser.set_defaults(handler=_run_diff)


def _run_diff(args: argparse.Namespace) -> int:
    from nnx_introspect._checkpoint import diff_checkpoints
    from nnx_introspect._compare import compare_states

    seed_b = args.seed if args.seed_b is None else args.seed_b
    values = not args.shapes_only
    rtol, atol = args.rtol, args.atol
    a_is_ckpt = _is_checkpoint_operand(args.a, "A")
    b_is_ckpt = _is_checkpoint_operand(args.b, "B")
    diff: "StateDiff"
    if a_is_ckpt and b_is_ckpt:
        diff = diff_checkpoints(args.a, args.b, values=values, rtol=rtol, atol=atol)
    elif a_is_ckpt or b_is_ckpt:
        if a_is_ckpt:
            path, spec, seed = args.a, args.b, seed_b
        else:
            path, spec, seed = args.b, args.a, args.seed
        diff = model_against_checkpoint(
            path, spec, seed, values=values, rtol=rtol, atol=atol
        )
        if a_is_ckpt:  # the library reads model vs checkpoint; the user asked A vs B
            diff = diff.reversed()
    else:
        a = build_target(args.a, seed=args.seed, abstract=not values)
        b = build_target(args.b, seed=seed_b, abstract=not values)
        diff = compare_states(a, b, rtol=rtol, atol=atol)
    a_label, b_label = _labels(args.a, args.b, a_is_ckpt, b_is_ckpt, args.seed, seed_b)
    diff = _relabelled(diff, a_label, b_label)
    emit(diff, args.format, "diff")
    return verdict_code(diff)


def _labels(
    a: str, b: str, a_is_ckpt: bool, b_is_ckpt: bool, seed_a: int, seed_b: int
) -> tuple[str, str]:
    """What the report calls A and B: the names given, as short as stays distinct.

    A checkpoint is its path as typed; a target its callable's name
    (``llama_tiny``), or the whole ``package.module:callable`` when both
    callables share a name; the seed is added when it alone tells them apart.
    """
    short_a = a if a_is_ckpt else a.partition(":")[2]
    short_b = b if b_is_ckpt else b.partition(":")[2]
    if short_a == short_b and a != b:
        short_a, short_b = a, b
    if a == b and seed_a != seed_b:
        short_a, short_b = f"{short_a} (seed {seed_a})", f"{short_b} (seed {seed_b})"
    return short_a, short_b


def _relabelled(diff: "StateDiff", a_label: str, b_label: str) -> "StateDiff":
    """``diff`` with its sides named ``a_label`` and ``b_label``, messages too.

    :meth:`StateDiff.reversed` rewrites every structural message for the
    labels it holds and keeps the measured figures, so reversing twice gives
    the same comparison with its messages under the new names.
    """
    named = dataclasses.replace(diff, a_label=a_label, b_label=b_label)
    return named.reversed().reversed()

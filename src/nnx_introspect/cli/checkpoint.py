"""The ``checkpoint`` subcommand: describe an orbax checkpoint, or check a model."""

import argparse
from typing import TYPE_CHECKING, Any

from nnx_introspect._targets import TargetError, build_target
from nnx_introspect.cli.args import (
    FORMATS,
    add_output_args,
    add_tolerance_args,
    seed_arg,
)
from nnx_introspect.cli.errors import UsageError
from nnx_introspect.cli.output import emit, verdict_code

if TYPE_CHECKING:
    from nnx_introspect._compare import StateDiff


def checkpoint_path(text: str, what: str = "PATH") -> str:
    """``text`` if it is an orbax checkpoint directory, else a TargetError.

    The library's message names its argument ```path```; here it is ``what``,
    the operand as ``--help`` names it (``PATH``, or ``diff``'s ``A``, ``B``).
    """
    from nnx_introspect._checkpoint import resolve_checkpoint

    try:
        resolve_checkpoint(text)
    except (OSError, ValueError) as error:
        words = " ".join(str(error).split()).replace("`path`", what)
        raise TargetError(words.replace("`_METADATA`", "_METADATA")) from error
    return text


def model_against_checkpoint(
    path: str, target: str, seed: int, *, values: bool, rtol: float, atol: float
) -> "StateDiff":
    """The model of ``target`` against the checkpoint at ``path`` (model vs file).

    With ``values`` the model is built concretely and the checkpoint restored and
    compared within ``rtol``/``atol``; without, the abstract model is compared with
    the checkpoint's metadata (nothing allocated).
    """
    from nnx_introspect._checkpoint import check_checkpoint, verify_restore

    model = build_target(target, seed=seed, abstract=not values)
    if values:
        return verify_restore(path, model, rtol=rtol, atol=atol)
    return check_checkpoint(path, model)


def add_checkpoint_parser(subparsers: Any) -> None:
    """Adds the ``checkpoint`` command to ``subparsers``."""
    parser = subparsers.add_parser(
        "checkpoint",
        help="describe an orbax checkpoint, or check it against a model",
        description="Without --model: list the arrays of the orbax checkpoint at "
        "PATH from its metadata (tree, shapes, dtypes, shardings), loading none. "
        "With --model: compare that metadata per path with the model built "
        "abstractly from TARGET (nothing allocated); --verify also restores and "
        "compares values. Exit code 1 when the model and the checkpoint differ.",
    )
    parser.add_argument("path", metavar="PATH", help="the checkpoint directory")
    parser.add_argument(
        "--model",
        metavar="TARGET",
        default=None,
        help="'package.module:callable' to compare the checkpoint with",
    )
    parser.add_argument(
        "--seed",
        type=seed_arg,
        default=0,
        help="seed of the nnx.Rngs given to the --model factory (default: 0)",
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="also restore and compare values (builds the model concretely)",
    )
    add_tolerance_args(parser)
    add_output_args(parser, (*FORMATS, "html"))
    parser.set_defaults(handler=_run_checkpoint)


def _run_checkpoint(args: argparse.Namespace) -> int:
    from nnx_introspect._checkpoint import checkpoint_report

    path = checkpoint_path(args.path)
    if args.model is None:
        if args.verify:
            raise UsageError("--verify needs --model TARGET")
        emit(checkpoint_report(path), args.format, "checkpoint")
        return 0
    diff = model_against_checkpoint(
        path,
        args.model,
        args.seed,
        values=args.verify,
        rtol=args.rtol,
        atol=args.atol,
    )
    emit(diff, args.format, "checkpoint")
    return verdict_code(diff)

"""Arguments every subcommand shares: output, target, seed and tolerance flags.

Every converter here is pure Python, so ``--help`` and argument errors need no JAX.
"""

import argparse
import math
from collections.abc import Callable, Sequence

from nnx_introspect._targets import DEFAULT_TARGET

PROG = "nnx-introspect"
FORMATS = ("table", "markdown", "json")


def add_output_args(
    parser: argparse.ArgumentParser, formats: Sequence[str] = FORMATS
) -> None:
    """Add ``--format`` (first choice is the default) and ``--debug``."""
    parser.add_argument(
        "--format",
        choices=tuple(formats),
        default=formats[0],
        help=f"output format (default: {formats[0]})",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the full traceback when something fails",
    )


def add_target_args(
    parser: argparse.ArgumentParser,
    *,
    seed: bool = True,
    default: str = DEFAULT_TARGET,
) -> None:
    """Add the ``TARGET`` positional (default: the 7B example) and ``--seed``."""
    parser.set_defaults(target=default)
    parser.add_argument(
        "target",
        metavar="TARGET",
        nargs="?",
        default=default,
        help="'package.module:callable', a factory taking `rngs` and returning an "
        f"nnx.Module (default: {default})",
    )
    if not seed:
        return
    parser.add_argument(
        "--seed",
        type=seed_arg,
        default=0,
        help="seed of the nnx.Rngs given to the factory (default: 0)",
    )


def _int_arg(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse converter to ``int`` in ``[minimum, maximum]``."""
    need = f"an integer >= {minimum}"
    if maximum is not None:
        need = f"an integer from {minimum} to {maximum}"

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {need}, got {text!r}") from None
        if value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"must be {need}, got {value}")
        return value

    return convert


positive_int = _int_arg(1)
seed_arg = _int_arg(0, 2**63 - 1)  # what nnx.Rngs (jax.random.key) takes


def _tolerance_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text}")
    return value


def add_tolerance_args(parser: argparse.ArgumentParser) -> None:
    """Adds ``--rtol`` and ``--atol`` (the tolerances of a value comparison)."""
    for name, what in (("rtol", "relative"), ("atol", "absolute")):
        parser.add_argument(
            f"--{name}",
            type=_tolerance_arg,
            default=0.0,
            help=f"{what} tolerance for floating values (default: 0, exact)",
        )

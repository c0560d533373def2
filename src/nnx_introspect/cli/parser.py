"""The argument parser: one-line argument errors, one subparser per subcommand."""

import argparse
from collections.abc import Callable
from typing import NoReturn

from nnx_introspect.cli.args import PROG
from nnx_introspect.cli.checkpoint import _add_checkpoint_parser
from nnx_introspect.cli.diff import _add_diff_parser
from nnx_introspect.cli.mesh import _add_mesh_parser
from nnx_introspect.cli.step import _add_step_parser
from nnx_introspect.cli.summary import _add_summary_parser

Handler = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line: no usage block."""

    def error(self, message: str) -> NoReturn:
        text = " ".join(message.split())
        self.exit(2, f"{self.prog}: error: {text} (see '{self.prog} --help')\n")


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Exact, read-only introspection of Flax NNX models.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    _add_summary_parser(subparsers)
    _add_mesh_parser(subparsers)
    _add_diff_parser(subparsers)
    _add_checkpoint_parser(subparsers)
    _add_step_parser(subparsers)
    return parser

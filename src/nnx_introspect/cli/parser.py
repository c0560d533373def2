"""The argument parser: one-line argument errors, one subparser per subcommand."""

import argparse
import difflib
import re
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from nnx_introspect import __version__
from nnx_introspect.cli.args import PROG
from nnx_introspect.cli.checkpoint import add_checkpoint_parser
from nnx_introspect.cli.diff import add_diff_parser
from nnx_introspect.cli.mesh_plan import add_mesh_parser
from nnx_introspect.cli.rl import add_rl_parser
from nnx_introspect.cli.serve import add_serve_parser
from nnx_introspect.cli.step import add_step_parser
from nnx_introspect.cli.summary import add_summary_parser

Handler = Callable[[argparse.Namespace], int]


class _Formatter(argparse.HelpFormatter):
    """``--help`` wrapped at spaces only.

    ``nnx-introspect[tpu]`` and ``--max-device-bytes`` are never cut at a
    hyphen, so a line copied from the help works.
    """

    def _split_lines(self, text: str, width: int) -> list[str]:
        text = " ".join(text.split())
        return textwrap.wrap(text, width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        text = " ".join(text.split())
        return textwrap.fill(
            text,
            width,
            initial_indent=indent,
            subsequent_indent=indent,
            break_on_hyphens=False,
        )


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line: no usage block.

    An unknown flag is reported by the subcommand it was given to, pointing to
    that subcommand's ``--help`` and suggesting the closest flag.
    """

    _parsing: Sequence[str] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # no abbreviations: --sequence is a misspelling (answered with the
        # closest flag), never --sequences
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._parsing = list(args) if args is not None else sys.argv[1:]
        return super().parse_known_args(args, namespace)

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            owner = self._subcommand(parsed) or self
            owner.error(owner._unknown(extras))
        return parsed

    def _subcommand(self, parsed: argparse.Namespace) -> "_Parser | None":
        """The subparser that parsed ``parsed`` (``None`` if there is none)."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                found = action.choices.get(str(getattr(parsed, action.dest, "")))
                return found if isinstance(found, _Parser) else None
        return None

    def _unknown(self, extras: Sequence[str]) -> str:
        """``unrecognized arguments: ...``, with the closest flag if one is close."""
        text = f"unrecognized arguments: {' '.join(extras)}"
        flags = [a.split("=")[0] for a in extras if a.startswith("--")]
        for flag in flags:
            close = difflib.get_close_matches(flag, self._option_string_actions, 1)
            if close:
                return f"{text} (did you mean {close[0]}?)"
        return text

    def error(self, message: str) -> NoReturn:
        command = _INVALID_COMMAND.match(message)
        if command is not None:  # a misspelt subcommand: the flags after it are
            # unknown to this parser only because the subcommand is
            self._exit_one_line(_unknown_command(command.group(1), self._commands()))
        unknown = [
            a
            for a in self._parsing
            if a.startswith("--") and a.split("=")[0] not in self._option_string_actions
        ]
        if unknown and not message.startswith("unrecognized"):
            # A missing required flag is often a misspelt one: say both.
            message = f"{self._unknown(unknown)}; {message}"
        self._exit_one_line(message)

    def _exit_one_line(self, message: str) -> NoReturn:
        text = " ".join(message.split())
        self.exit(2, f"{self.prog}: error: {text} (see '{self.prog} --help')\n")

    def _commands(self) -> list[str]:
        """The subcommands' names, in the order ``--help`` lists them."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                return list(action.choices)
        return []


_INVALID_COMMAND = re.compile(r"argument COMMAND: invalid choice: '(.*?)'")


def _unknown_command(given: str, commands: Sequence[str]) -> str:
    """A subcommand that does not exist, led by the closest one.

    Example:
        >>> _unknown_command("stpe", ["summary", "mesh", "step"])
        "unknown command 'stpe' (did you mean 'step'?); the commands are summary, \
mesh, step"
        >>> _unknown_command("x", ["summary", "step"])
        "unknown command 'x'; the commands are summary, step"
    """
    close = difflib.get_close_matches(given, commands, 1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown command {given!r}{hint}; the commands are {', '.join(commands)}"


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser, with every command."""
    parser = _Parser(
        prog=PROG,
        description="Exact, read-only introspection of Flax NNX models.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    add_summary_parser(subparsers)
    add_mesh_parser(subparsers)
    add_diff_parser(subparsers)
    add_checkpoint_parser(subparsers)
    add_step_parser(subparsers)
    add_serve_parser(subparsers)
    add_rl_parser(subparsers)
    return parser

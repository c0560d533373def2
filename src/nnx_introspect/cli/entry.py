"""The entry point: parse, run the handler, turn every failure into an exit code."""

import contextlib
import os
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from nnx_introspect._targets import TargetError
from nnx_introspect.cli.args import PROG
from nnx_introspect.cli.early import check_early
from nnx_introspect.cli.errors import (
    UsageError,
    describe,
    names_an_argument,
    usage_error,
)
from nnx_introspect.cli.parser import Handler, build_parser
from nnx_introspect.cli.quiet import orbax_leftovers_dropped, start_jax_quietly


def _fail(message: str, error: BaseException, debug: bool, code: int) -> int:
    if debug:
        traceback.print_exception(error, file=sys.stderr)
    text = " ".join(message.split())  # one line, whatever the message holds
    sys.stderr.write(f"{PROG}: error: {text}\n")
    return code


def _usage(message: str, error: BaseException, args: Any) -> int:
    """A usage or target error (exit 2), said as argparse says its own.

    ``nnx-introspect step: error: ... (see 'nnx-introspect step --help')``:
    the subcommand, and where its flags are described.
    """
    if bool(getattr(args, "debug", False)):
        traceback.print_exception(error, file=sys.stderr)
    command = getattr(args, "command", None)
    prog = f"{PROG} {command}" if isinstance(command, str) else PROG
    text = " ".join(message.split())
    sys.stderr.write(f"{prog}: error: {text} (see '{prog} --help')\n")
    return 2


@contextmanager
def _quiet_library_logs(debug: bool) -> Iterator[None]:
    """Silence absl warnings (orbax logs through absl) unless ``--debug``.

    Failures reach the user as one line from the exception; the warnings orbax
    logs on the way would only add noise to stderr. Restored on exit, so calling
    :func:`main` in-process leaves the logging state as it was.
    """
    if debug:
        yield
        return
    from absl import logging as absl_logging

    before = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.ERROR)
    try:
        yield
    finally:
        absl_logging.set_verbosity(before)


@contextmanager
def _cpu_only() -> Iterator[None]:
    """Run with ``JAX_PLATFORMS=cpu`` unless the user set ``JAX_PLATFORMS``.

    No subcommand needs an accelerator (``step`` compiles a named TPU or GPU
    topology in a child process with its own environment), but JAX initialises
    every backend it finds: with ``libtpu`` installed (the ``tpu`` extra) on a
    machine without a TPU, that prints several ``E0000 ... INVALID_ARGUMENT``
    lines on stderr, and the CUDA plugin (the ``gpu`` extra) a traceback. JAX reads the
    variable when it is imported, which the command line does only in the
    handler, after this is set. Restored on exit, so :func:`main` called
    in-process leaves the environment as it was. An empty ``JAX_PLATFORMS``
    is unset to JAX (every backend), so to this too.
    """
    given = os.environ.get("JAX_PLATFORMS")
    if given is not None and given.strip():
        yield
        return
    os.environ["JAX_PLATFORMS"] = "cpu"
    try:
        yield
    finally:
        if given is None:
            os.environ.pop("JAX_PLATFORMS", None)
        else:
            os.environ["JAX_PLATFORMS"] = given


def main(argv: list[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``).

    Every failure is one line on stderr (``--debug`` adds the traceback); a
    usage or target error (exit code 2) is said as argparse says its own:
    ``nnx-introspect step: error: ... (see 'nnx-introspect step --help')``.
    Every subcommand runs JAX on the CPU unless ``JAX_PLATFORMS`` is set, so
    no accelerator plugin logs its start-up failures.
    What the flags alone show is wrong (a TARGET that names nothing, an
    unknown ``--topology``, a mesh of another size, a ``--batch`` dtype...:
    :func:`~nnx_introspect.cli.early.check_early`) and a subcommand's
    ``check`` (set with ``parser.set_defaults(check=...)``) run before JAX is
    imported: such mistakes fail in a fraction of a second. The flags given
    are kept as ``args.given_flags``, so an error from a flag left at its
    default says that it was the default.
    ``KeyboardInterrupt`` (Ctrl-C) stops the command with code 130; any other
    exception or exit, including ``sys.exit()`` called by the user's code, is a
    failure, never a success.

    A library's refusal of a value that reaches here (an ``ArgumentError`` or
    ``ArgumentTypeError``, from a handler that does not catch it) is a usage
    error too, naming the flag.

    Returns:
        The exit code: 0 on success, 2 for a usage or target error, 1 for a
        difference, a problem or any other failure, 130 when interrupted.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 2
    handler: Handler = args.handler
    debug = bool(getattr(args, "debug", False))
    check = getattr(args, "check", None)
    given = sys.argv[1:] if argv is None else argv
    args.given_flags = frozenset(a.split("=")[0] for a in given if a.startswith("--"))
    try:
        check_early(args)  # what the flags alone show, before JAX starts
        if check is not None:  # the flags against each other, before JAX starts
            check(args)
    except (TargetError, UsageError) as error:
        return _usage(str(error), error, args)
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(_cpu_only())
            stack.enter_context(_quiet_library_logs(debug))
            if not debug:  # dependencies' native and leftover noise stays off stderr
                stack.enter_context(orbax_leftovers_dropped())
                start_jax_quietly()
            return handler(args)
    except (TargetError, UsageError) as error:
        return _usage(str(error), error, args)
    except (TypeError, ValueError) as error:
        if not names_an_argument(error):  # not the library's refusal of a value
            return _fail(describe(error, args.command), error, debug, 1)
        return _usage(str(usage_error(error, args)), error, args)
    except KeyboardInterrupt as error:
        return _fail("interrupted", error, debug, 130)
    except BaseException as error:  # SystemExit from a library or a model too
        return _fail(describe(error, args.command), error, debug, 1)

"""What the command-line tests share: one run of ``main`` with its output."""

import pytest

from nnx_introspect.cli import main


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``main(argv)``'s exit code, then what it wrote to stdout and stderr."""
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def usage(command: str, line: str) -> str:
    """A usage error's ``line`` as ``command`` says it, in argparse's form.

    ``line`` is ``nnx-introspect: error: <message>`` (and its newline, if
    any); a line in another form is returned as it is.
    """
    head = "nnx-introspect: error: "
    if not line.startswith(head):
        return line
    prog = f"nnx-introspect {command}"
    end = "\n" if line.endswith("\n") else ""
    return f"{prog}: error: {line[len(head) :].rstrip()} (see '{prog} --help'){end}"

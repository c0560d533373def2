"""What the command-line tests share: one run of ``main`` with its output."""

import pytest

from nnx_introspect.cli import main


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``main(argv)``'s exit code, then what it wrote to stdout and stderr."""
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err

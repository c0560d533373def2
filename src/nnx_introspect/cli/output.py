"""Writing a report to stdout, and a comparison's verdict to stderr and exit code."""

import io
import sys
from typing import TYPE_CHECKING

from nnx_introspect.cli.args import PROG

if TYPE_CHECKING:
    from nnx_introspect._compare import StateDiff
    from nnx_introspect._render import Report


def emit(report: "Report", fmt: str) -> None:
    """Write ``report`` to stdout in ``fmt`` (``table`` uses rich)."""
    from rich.console import Console

    if fmt == "json":
        sys.stdout.write(report.to_json() + "\n")
    elif fmt == "markdown":
        sys.stdout.write(report.to_markdown())
    elif fmt == "html":
        sys.stdout.write(report.to_html())
    else:
        console = Console(file=sys.stdout)
        if console.is_terminal:
            console.print(report)
            return
        # a file or a pipe: 120 columns, no line ending in the padding of a
        # wrapped sentence (which a diff or a test of the output would trip on)
        buffer = io.StringIO()
        Console(file=buffer, width=120).print(report)
        lines = buffer.getvalue().splitlines()
        sys.stdout.write("".join(line.rstrip() + "\n" for line in lines))


def verdict_code(diff: "StateDiff") -> int:
    """The exit code of a comparison: 0 when equal, else 1 (its count on stderr)."""
    if diff.equal:
        return 0
    sys.stderr.write(
        f"{PROG}: {len(diff.entries)} difference(s) at {len(diff.paths)} path(s).\n"
    )
    return 1

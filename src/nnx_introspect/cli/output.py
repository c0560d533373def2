"""Writing a report to stdout, and a comparison's verdict to stderr and exit code.

A report's words are the library's, written for Python callers: its notes say
```network_bytes_per_second``` or "narrow ```lo``` and ```hi```". Written by
the command line (table, markdown, HTML), they are the flags' words instead
(:func:`in_flags_report`, by :func:`~nnx_introspect.cli.errors.in_flags`);
JSON keeps the library's, as data.
"""

import copy
import dataclasses
import io
import sys
from typing import TYPE_CHECKING, Any

from nnx_introspect.cli.args import PROG
from nnx_introspect.cli.errors import in_flags

if TYPE_CHECKING:
    from nnx_introspect._compare import StateDiff
    from nnx_introspect._render import Report


def in_flags_report(report: Any, command: str | None = None) -> Any:
    """``report`` whose table (title, lead sentences, notes) says ``command``'s flags.

    A copy whose :meth:`table` gives the table with its words rewritten
    (every format drawn from it follows); ``report`` itself unchanged, and
    returned as it is when no word changes or it cannot be copied so.
    """
    table_of = getattr(report, "table", None)
    if not callable(table_of):
        return report
    from nnx_introspect._render import Table

    table = table_of()
    if not isinstance(table, Table):
        return report
    words = dataclasses.replace(
        table,
        title=in_flags(table.title, command),
        lead=tuple(in_flags(s, command) for s in table.lead),
        notes=tuple(in_flags(n, command) for n in table.notes),
    )
    if words == table:
        return report
    try:
        copied = copy.copy(report)
        object.__setattr__(copied, "table", lambda: words)
    except (TypeError, AttributeError):  # slots, or a copy refused
        return report
    return copied


def emit(report: "Report", fmt: str, command: str | None = None) -> None:
    """Write ``report`` to stdout in ``fmt`` (``table`` uses rich).

    Table, markdown and HTML in ``command``'s flags' words
    (:func:`in_flags_report`); JSON as the library gives it.
    """
    from rich.console import Console

    if fmt != "json":
        report = in_flags_report(report, command)
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

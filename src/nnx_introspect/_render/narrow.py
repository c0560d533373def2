"""A table for a console too narrow for all of it: short headers, fewer columns.

A report may give its :class:`~nnx_introspect.Table` shorter headers
(``short``) and name the columns a narrow console may leave out
(``optional``, the first left out first). :func:`narrower` lists the tables
a terminal tries in turn, before it gives up the table for one block per row:
the table as it is, with the short headers, then without each optional
column in turn. A column left out is named in a note after the table; the
markdown, JSON and HTML keep every column.
"""

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, Protocol, TypeVar


class _Narrowable(Protocol):
    """What :func:`narrower` reads of a ``Table`` (``table.py`` imports this)."""

    __dataclass_fields__: ClassVar[dict[str, "dataclasses.Field[Any]"]]

    @property
    def columns(self) -> tuple[str, ...]: ...
    @property
    def rows(self) -> tuple[tuple[str, ...], ...]: ...
    @property
    def totals(self) -> tuple[tuple[str, ...], ...]: ...
    @property
    def notes(self) -> tuple[str, ...]: ...
    @property
    def short(self) -> tuple[str, ...]: ...
    @property
    def optional(self) -> tuple[str, ...]: ...


_T = TypeVar("_T", bound=_Narrowable)

__all__ = ["SHORT_HEADERS", "narrower", "short_headers"]

SHORT_HEADERS = {
    "step seconds (est.)": "step s (est.)",
    "roofline range (s)": "range (s)",
    "peak per device": "peak",
    "peak bytes": "bytes",
    "state per device": "state",
    "collectives on the wire per device": "wire per device",
}
"""Reports' long headers and the short ones a narrow terminal shows instead."""


def short_headers(columns: Sequence[str]) -> tuple[str, ...]:
    """``Table.short`` for ``columns``: :data:`SHORT_HEADERS`'s, ``""`` elsewhere.

    Example:
        >>> short_headers(["mesh", "peak per device"])
        ('', 'peak')
    """
    return tuple(SHORT_HEADERS.get(c, "") for c in columns)


def narrower(table: _T) -> Iterator[_T]:
    """``table``, then narrower versions of it, the narrowest last.

    Example:
        >>> from nnx_introspect import Table
        >>> wide = Table(
        ...     "T", ("mesh", "peak per device", "peak bytes"),
        ...     (("tp=8", "1 GiB", "1,073,741,824"),),
        ...     short=("", "peak", ""), optional=("peak bytes",),
        ... )
        >>> [t.columns for t in narrower(wide)]
        [('mesh', 'peak per device', 'peak bytes'), ('mesh', 'peak', 'peak bytes'), \
('mesh', 'peak')]
        >>> list(narrower(wide))[-1].notes
        ('Left out at this width: peak bytes (a wider console, --format markdown or \
json shows every column).',)
    """
    yield table
    if not (table.short or table.optional):
        return
    short = tuple(
        (table.short[i] if i < len(table.short) else "") or column
        for i, column in enumerate(table.columns)
    )
    current = dataclasses.replace(table, columns=short)
    if short != table.columns:
        yield current
    dropped: list[str] = []
    for name in table.optional:
        if name not in table.columns:
            continue
        keep = [i for i, c in enumerate(table.columns) if c not in (*dropped, name)]
        dropped.append(name)
        note = (
            f"Left out at this width: {', '.join(dropped)} (a wider console, "
            "--format markdown or json shows every column)."
        )
        yield dataclasses.replace(
            table,
            columns=tuple(current.columns[i] for i in keep),
            rows=tuple(tuple(r[i] for i in keep if i < len(r)) for r in table.rows),
            totals=tuple(tuple(r[i] for i in keep if i < len(r)) for r in table.totals),
            notes=(note, *table.notes),
        )

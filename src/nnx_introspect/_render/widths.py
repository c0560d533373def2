"""How wide each column of a terminal table is, so nothing is cropped or split.

Rich shrinks a table wider than its console by narrowing the widest column,
then widens each column back to its ``min_width``: a table whose headers could
wrap ends up wider than the console and cropped, and a right-aligned cell of
its last column vanishes. The widths here are computed instead: each column at
its natural width (its header and its widest cell on one line) while the table
fits; narrower, headers wrap between their words; narrower still, a cell of
several ``"; "``-separated parts (``"fsdp: 49.10 GiB; tp: 2.02 TiB"``) wraps
between its parts. A number, a shape or a part is never split.
"""

from collections.abc import Sequence

__all__ = [
    "cell_lines",
    "cell_parts",
    "fit_widths",
    "narrowest",
    "pack",
]

_SEPARATOR = "; "


def cell_parts(cell: str) -> list[str]:
    """The pieces a cell may wrap between: its ``"; "``-separated parts.

    Every part but the last keeps its ``;``, as it ends a line.

    Example:
        >>> cell_parts("fsdp: 49.10 GiB; tp: 2.02 TiB")
        ['fsdp: 49.10 GiB;', 'tp: 2.02 TiB']
        >>> cell_parts("1.50 GiB")
        ['1.50 GiB']
    """
    parts = cell.split(_SEPARATOR)
    return [p + ";" for p in parts[:-1]] + parts[-1:]


def cell_lines(cell: str, width: int) -> str:
    """``cell`` as it stands in a column ``width`` wide: parts packed into lines.

    Example:
        >>> print(cell_lines("fsdp: 49.10 GiB; tp: 2.02 TiB", 20))
        fsdp: 49.10 GiB;
        tp: 2.02 TiB
        >>> cell_lines("fsdp: 49.10 GiB; tp: 2.02 TiB", 40)
        'fsdp: 49.10 GiB; tp: 2.02 TiB'
    """
    if len(cell) <= width:
        return cell
    lines: list[str] = []
    for part in cell_parts(cell):
        if lines and len(lines[-1]) + 1 + len(part) <= width:
            lines[-1] += " " + part
        else:
            lines.append(part)
    return "\n".join(lines)


def _shrink(widths: list[int], floors: Sequence[int], excess: int) -> int:
    """Narrow ``widths`` (in place) towards ``floors`` by up to ``excess`` columns.

    The column with the most room above its floor gives a column first, so
    the columns narrow evenly. Returns the excess left.
    """
    while excess > 0:
        room = [w - f for w, f in zip(widths, floors, strict=True)]
        i = max(range(len(widths)), key=lambda k: room[k])
        if room[i] <= 0:
            break
        widths[i] -= 1
        excess -= 1
    return excess


def _bounds(
    columns: Sequence[str], rows: Sequence[Sequence[str]]
) -> tuple[list[int], list[int], list[int]]:
    """Per column: its natural, header-wrapped and narrowest widths.

    The narrowest wraps a cell of several parts between them too.
    """
    n = len(columns)
    cells = [[row[i] for row in rows if len(row) > i] for i in range(n)]
    natural = [max([len(columns[i]), *map(len, cells[i])]) for i in range(n)]
    words = [max([0, *map(len, columns[i].split())]) for i in range(n)]
    whole = [max([1, words[i], *map(len, cells[i])]) for i in range(n)]
    parts = [
        max([1, words[i], *(len(p) for c in cells[i] for p in cell_parts(c))])
        for i in range(n)
    ]
    if n:  # the first column (paths, names) never wraps
        whole[0] = parts[0] = natural[0]
    return natural, whole, parts


def fit_widths(
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    available: int,
    overhead: int,
) -> tuple[list[int], bool] | None:
    """Each column's width in a table ``available`` wide, or ``None``.

    Args:
        columns: The headers; the first column never wraps.
        rows: The cells, row by row.
        available: The console's width.
        overhead: What the table adds to its columns' widths (padding and
            borders).

    Returns:
        The widths and whether they are the natural ones (every header and
        cell on one line), or ``None`` when no widths fit without splitting a
        word of a header, a cell of one part or a part.

    Example:
        >>> fit_widths(("mesh", "wire"), [("tp=8", "a: 1 GiB; b: 2 GiB")], 80, 0)
        ([4, 18], True)
        >>> fit_widths(("mesh", "wire"), [("tp=8", "a: 1 GiB; b: 2 GiB")], 15, 0)
        ([4, 11], False)
        >>> fit_widths(("mesh", "wire"), [("tp=8", "a: 1 GiB; b: 2 GiB")], 12, 0)
    """
    natural, whole, parts = _bounds(columns, rows)
    excess = sum(natural) + overhead - available
    if excess <= 0:
        return natural, True
    widths = list(natural)
    # Headers wrap first; cells of several parts only when that is not enough.
    excess = _shrink(widths, whole, excess)
    excess = _shrink(widths, parts, excess)
    return (widths, False) if excess <= 0 else None


def narrowest(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> int:
    """The sum of the narrowest widths :func:`fit_widths` may give the columns.

    Example:
        >>> narrowest(("mesh", "wire"), [("tp=8", "a: 1 GiB; b: 2 GiB")])
        13
    """
    return sum(_bounds(columns, rows)[2])


def pack(fields: list[str], width: int) -> list[str]:
    """``fields`` joined by ``"; "`` into lines of at most ``width``, none split.

    A field longer than ``width`` starts a line and breaks between its own
    ``"; "``-separated parts; only a part longer than ``width`` is longer than
    a line (the console folds it).

    Example:
        >>> pack(["a: 1", "b: 2", "wire: x: 1 GiB; y: 2 GiB"], 16)
        ['a: 1; b: 2', 'wire: x: 1 GiB;', 'y: 2 GiB']
    """
    lines: list[str] = []
    for field in fields:
        if lines and len(lines[-1]) + 2 + len(field) <= width:
            lines[-1] += _SEPARATOR + field
        elif len(field) <= width:
            lines.append(field)
        else:
            lines += cell_lines(field, width).split("\n")
    return lines

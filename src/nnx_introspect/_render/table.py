"""Shared renderers: any report's table as rich, markdown, JSON or HTML.

A report exposes one :class:`Table` (and a JSON-ready payload); the functions
here turn it into every output format, so a new report gets all of them for
free and no report formats its own strings.
"""

import dataclasses
import html
import io
import json
import shutil
from collections.abc import Sequence
from typing import Any, Literal, TypeAlias

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table as RichTable
from rich.text import Text

from nnx_introspect._render.css import CSS as _CSS
from nnx_introspect._render.narrow import narrower
from nnx_introspect._render.phase_chart import PhaseBars, phase_chart_svg
from nnx_introspect._render.widths import cell_lines, fit_widths, narrowest, pack
from nnx_introspect._text import format_bytes

__all__ = [
    "FittedTable",
    "Report",
    "Table",
    "Tone",
    "format_bytes",
    "page_html",
    "table_html",
    "table_text",
    "to_html",
    "to_markdown",
    "to_rich",
    "verdict_html",
]

Tone: TypeAlias = Literal["ok", "bad", "neutral"]
"""The colour of a verdict box: green (fits), red (does not) or grey (no budget)."""


@dataclasses.dataclass(frozen=True)
class Table:
    """A rendered-agnostic table: what every report shows.

    Attributes:
        title: One line naming the report.
        columns: Column headers.
        rows: One tuple of cells per row (already human-formatted strings).
        totals: Summary rows shown after a rule.
        notes: Sentences shown below the table (caveats, problems).
        lead: Sentences shown first, under the title and before any row: a
            report's verdict and headline figures, so a long table never
            hides them.
        emphasis: The first cells of the totals rows shown in bold; ``None``
            (the default): every totals row.
        short: Shorter headers, one per column (``""`` keeps one), for a
            terminal too narrow for the table (see ``_render/narrow.py``).
        optional: Headers of the columns such a terminal may leave out, the
            first left out first (a note names them; other formats keep them).

    Example:
        >>> from flax import nnx
        >>> from nnx_introspect import summarize
        >>> table = summarize(nnx.Linear(4, 3, rngs=nnx.Rngs(0))).table()
        >>> table.columns
        ('Path', 'Type', 'Shape', 'Dtype', 'Elements', 'Bytes')
        >>> table.rows[0]
        ('bias', 'Param', '(3,)', 'float32', '3', '12 B')
    """

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    totals: tuple[tuple[str, ...], ...] = ()
    notes: tuple[str, ...] = ()
    lead: tuple[str, ...] = ()
    emphasis: tuple[str, ...] | None = None
    short: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()


def _emphasised(table: Table, row: tuple[str, ...]) -> bool:
    """Whether the totals row ``row`` of ``table`` is shown in bold."""
    return table.emphasis is None or (bool(row) and row[0] in table.emphasis)


def to_rich(table: Table) -> "FittedTable":
    """A rich renderable for terminals and notebooks; nothing is cut or split.

    The title and the lead sentences (a verdict, headline totals) come first.
    The table takes the console's width, never more: its columns at their
    natural widths while they fit, else headers wrap between their words and
    a cell of several ``"; "``-separated parts (``fsdp: 49.10 GiB; tp: 2.02
    TiB``) between its parts. A number, a shape or a path always stands whole
    on one line. When the console is too narrow for the boxed table, the
    borders go; narrower still, each row is printed as a block (the path on
    its own line, then ``column: value`` fields, packed into lines without
    splitting one), so nothing is cut at any width. A title or a note longer
    than the table is printed at the console's width, not squeezed to the
    table's. Cells are plain :class:`rich.text.Text`, never parsed as console
    markup, so a path or spec containing ``[...]`` shows as written.

    Example:
        >>> import io
        >>> from rich.console import Console
        >>> table = Table("Demo", ("path", "bytes"), (("a/very/long/path", "1 KiB"),))
        >>> console = Console(width=20, file=io.StringIO(), record=True)
        >>> console.print(to_rich(table))
        >>> print(console.export_text().strip())
        Demo
        a/very/long/path
          bytes: 1 KiB
    """
    return FittedTable(table)


class FittedTable:
    """A :class:`Table` rendered by rich at whatever width the console has.

    At a width that holds every cell whole, a ``rich.table.Table`` (each column
    at least as wide as its widest cell, or as the widest part of a cell of
    ``"; "``-separated parts; a header of several words may wrap); a little
    narrower, the same table without borders; below that, one block per row.
    The table is never wider than the console. The title and the lead
    sentences come first either way (with ``title_above``, the title is always
    its own first line, never centred over the table). :meth:`rich_table`
    gives the table itself.
    """

    def __init__(self, table: Table, *, title_above: bool = False) -> None:
        self.table = table
        self.title_above = title_above
        first = [row[0] for row in (*table.rows, *table.totals) if row]
        self.first_width = max(
            [len(table.columns[0]) if table.columns else 0, *map(len, first)]
        )

    def rich_table(
        self,
        *,
        title: bool = True,
        compact: bool = False,
        notes: bool = True,
        widths: Sequence[int] | None = None,
    ) -> RichTable:
        """The ``rich.table.Table``: every cell whole, on one line.

        Args:
            title: Whether the table carries the title (off when the title
                and lead sentences are printed above it).
            compact: No borders and one space between columns (for consoles
                narrower than the boxed table).
            notes: Whether the notes are the table's caption (off when they
                are printed after it, wrapped at the console's width: rich
                drops a character where it wraps a caption narrower than its
                text).
            widths: Each column's width (without padding), as
                :func:`~nnx_introspect._render.widths.fit_widths` gives them:
                a cell wider than its column breaks between its ``"; "``
                parts. Default: each column as wide as its widest cell.
        """
        table = self.table
        caption = Text("\n".join(table.notes)) if table.notes and notes else None
        out = RichTable(
            title=Text(table.title) if title else None,
            caption=caption,
            caption_justify="left" if self.title_above else "center",
        )
        if compact:
            out = RichTable(
                title=Text(table.title) if title else None,
                caption=caption,
                box=None,
                padding=(0, 1, 0, 0),
                pad_edge=False,
                header_style="bold underline",
                caption_justify="left",
            )
        for i, name in enumerate(table.columns):
            if widths is not None:
                out.add_column(
                    Text(name),
                    justify="left" if i == 0 else "right",
                    no_wrap=i == 0,
                    width=widths[i],
                )
            elif i == 0:
                out.add_column(Text(name), no_wrap=True, min_width=self.first_width)
            else:
                # At least as wide as its widest cell, so no cell ever wraps;
                # only a header of several words may.
                out.add_column(
                    Text(name),
                    justify="right",
                    overflow="fold",
                    min_width=self._widest(i),
                )

        def cells(row: tuple[str, ...]) -> list[Text]:
            if widths is None:
                return [Text(c) for c in row]
            return [
                Text(c if i == 0 else cell_lines(c, widths[i]))
                for i, c in enumerate(row)
            ]

        last = len(table.rows) - 1
        for i, row in enumerate(table.rows):
            # A rule between the body and the totals.
            out.add_row(*cells(row), end_section=bool(table.totals) and i == last)
        for row in table.totals:
            out.add_row(*cells(row), style="bold" if _emphasised(table, row) else "")
        return out

    def _widest(self, i: int) -> int:
        """The widest cell of column ``i`` (at least one character)."""
        cells = [r[i] for r in (*self.table.rows, *self.table.totals) if len(r) > i]
        return max([1, *map(len, cells)])

    def _overhead(self, compact: bool) -> int:
        """What borders and padding add to the columns' widths."""
        n = len(self.table.columns)
        return n - 1 if compact else 3 * n + 1

    def _fit(self, width: int, compact: bool) -> tuple[list[int], bool] | None:
        """The columns' widths in a console ``width`` wide (see ``fit_widths``)."""
        rows = (*self.table.rows, *self.table.totals)
        return fit_widths(self.table.columns, rows, width, self._overhead(compact))

    def min_table_width(self, *, compact: bool = False) -> int:
        """The narrowest console that shows the table with every cell whole.

        Headers may wrap between their words, never inside one; a cell of
        several ``"; "``-separated parts between its parts.

        Args:
            compact: For the borderless table (one space between columns).
        """
        rows = (*self.table.rows, *self.table.totals)
        return narrowest(self.table.columns, rows) + self._overhead(compact)

    def __rich_console__(
        self, console: Console, options: ConsoleOptions
    ) -> RenderResult:
        width = options.max_width
        for table in narrower(self.table):  # short headers, then fewer columns
            fitted = FittedTable(table, title_above=self.title_above)
            for compact in (False, True):
                layout = fitted._fit(width, compact=compact)
                if layout is not None:
                    yield from fitted._table(compact, *layout)
                    return
        yield from self._blocks(width)

    def _table(self, compact: bool, widths: list[int], natural: bool) -> RenderResult:
        """The title and lead, the table at ``widths``, the notes after it."""
        table = self.table
        size = sum(widths) + self._overhead(compact)
        # A title or note longer than the table goes above or below it at the
        # console's width: squeezed into the table's, it would wrap early.
        inside = not (table.lead or self.title_above or compact)
        inside = inside and len(table.title) <= size
        notes_inside = inside and all(len(n) <= size for n in table.notes)
        if not inside:
            yield Text(table.title, style="bold")
            for sentence in table.lead:
                yield Text(sentence)
        yield self.rich_table(
            title=inside,
            compact=compact,
            notes=notes_inside,
            widths=None if natural else widths,
        )
        if not notes_inside:
            for note in table.notes:
                yield Text(note)

    def _blocks(self, width: int) -> RenderResult:
        """The title and lead, then one block per row, then the notes."""
        table = self.table
        yield Text(table.title, style="bold")
        for sentence in table.lead:
            yield Text(sentence)
        width = max(1, width - 2)
        blocks = [(row, None) for row in table.rows] + [
            (row, "bold" if _emphasised(table, row) else None) for row in table.totals
        ]
        for row, style in blocks:
            if not row:
                continue
            yield Text(row[0], style=style or "", overflow="fold")
            fields = [
                f"{name}: {cell}"
                for name, cell in zip(table.columns[1:], row[1:], strict=False)
                if cell
            ]
            for line in pack(fields, width):
                yield Padding(Text(line, overflow="fold"), (0, 0, 0, 2))
        for note in table.notes:
            yield Text(note)

    def __rich_measure__(
        self, console: Console, options: ConsoleOptions
    ) -> Measurement:
        measured: Measurement = Measurement.get(console, options, self.rich_table())
        return measured


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(table: Table) -> str:
    """A GitHub-flavoured markdown table, totals in bold, notes as a list.

    Only the totals rows of ``table.emphasis`` are bold when it is given.
    """
    lines = [f"**{_md_cell(table.title)}**", ""]
    for sentence in table.lead:
        lines += [_md_cell(sentence), ""]
    lines.append("| " + " | ".join(_md_cell(c) for c in table.columns) + " |")
    aligns = [":---"] + ["---:"] * (len(table.columns) - 1)
    lines.append("| " + " | ".join(aligns) + " |")
    for row in table.rows:
        lines.append("| " + " | ".join(_md_cell(c) for c in row) + " |")
    for row in table.totals:
        bold = _emphasised(table, row)
        cells = [f"**{_md_cell(c)}**" if c and bold else _md_cell(c) for c in row]
        lines.append("| " + " | ".join(cells) + " |")
    if table.notes:
        lines.append("")
        lines.extend(f"- {_md_cell(n)}" for n in table.notes)
    return "\n".join(lines) + "\n"


def table_html(table: Table, *, caption: bool = True) -> str:
    """The ``<table>`` element (and notes) for ``table``, without a page around it.

    Args:
        table: The table.
        caption: Whether the title is the table's caption (off when the page
            shows it already, as a verdict's box).
    """
    esc = html.escape
    parts = [f'<p class="lead">{esc(sentence)}</p>' for sentence in table.lead]
    head = f"<caption>{esc(table.title)}</caption>" if caption else ""
    parts.append(f"<table>{head}<thead><tr>")
    parts += [f"<th>{esc(c)}</th>" for c in table.columns]
    parts.append("</tr></thead><tbody>")
    for row in table.rows:
        parts.append("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>")
    for row in table.totals:
        kind = "total" if _emphasised(table, row) else "total plain"
        cells = "".join(f"<td>{esc(c)}</td>" for c in row)
        parts.append(f'<tr class="{kind}">{cells}</tr>')
    parts.append("</tbody></table>")
    if table.notes:
        parts.append('<ul class="notes">')
        parts += [f"<li>{esc(n)}</li>" for n in table.notes]
        parts.append("</ul>")
    return "".join(parts)


def to_html(table: Table, *, extra: str = "") -> str:
    """A self-contained HTML page (inline CSS, no scripts or external files)."""
    return page_html(table.title, extra + table_html(table))


def verdict_html(text: str, tone: Tone) -> str:
    """A report's verdict as a coloured box: the first thing a page shows.

    Args:
        text: The verdict, one sentence (a full stop is added if it has none).
        tone: ``"ok"`` (green: fits), ``"bad"`` (red: out of memory, over the
            budget, a problem) or ``"neutral"`` (grey: nothing to judge
            against, such as no budget).

    Example:
        >>> verdict_html("Fits in 1 KiB of 2 KiB per device", "ok")
        '<p class="verdict ok">Fits in 1 KiB of 2 KiB per device.</p>'
    """
    if tone not in ("ok", "bad", "neutral"):
        raise ValueError(
            f"`tone` must be 'ok', 'bad' or 'neutral', got {tone!r}. Pass the "
            "verdict's colour: green, red or grey."
        )
    sentence = text if text.endswith((".", "!", "?")) else text + "."
    return f'<p class="verdict {tone}">{html.escape(sentence)}</p>'


def page_html(title: str, body: str) -> str:
    """A self-contained HTML page around ``body`` (an HTML fragment)."""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>"
        f"<body>{body}</body></html>\n"
    )


_REPR_LIMIT = 300
"""The longest ``repr`` of a report; the full view is rich, markdown or HTML."""

_VERDICTS = ("ok", "equal")
"""Properties a report's ``repr`` ends with when the class has them."""


class Report:
    """Mixin giving a report every output format from its :meth:`table`.

    Subclasses implement :meth:`table` and :meth:`json_data`, and set
    ``SCHEMA`` / ``SCHEMA_VERSION``. Every subclass, dataclass or not, gets the
    short :meth:`__repr__` below (at most 300 characters) unless it defines its
    own in its class body: a dataclass's generated ``repr`` would spell out every
    row, 75,000 characters for a 7B plan. Override :meth:`_repr_items` to choose
    what it shows.

    Example:
        >>> from flax import nnx
        >>> from nnx_introspect import summarize
        >>> summarize(nnx.Linear(4, 3, rngs=nnx.Rngs(0)))
        ModelSummary(title='Linear', rows=2, by_kind=1, by_dtype=1, n_params=15, \
n_state_leaves=2, param_bytes=60, total_bytes=60, abstract=False, depth=None)
    """

    SCHEMA: str = "nnx-introspect/report"
    SCHEMA_VERSION: int = 1

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # ``@dataclass`` only writes ``__repr__`` when the class body has none:
        # putting the short one there first keeps it (``repr=False`` needed on
        # no subclass).
        if "__repr__" not in cls.__dict__:
            cls.__repr__ = Report.__repr__  # type: ignore[method-assign]

    def _repr_items(self) -> dict[str, Any]:
        """The ``name: value`` pairs of the ``repr``: scalars and sizes.

        Scalar and short string fields as they are, a long container by its
        length (``rows=291``), other objects left out; then ``ok`` or
        ``equal`` when the class has that verdict.
        """
        items: dict[str, Any] = {}
        fields: tuple[dataclasses.Field[Any], ...] = (
            dataclasses.fields(self) if dataclasses.is_dataclass(self) else ()
        )
        for field in fields:
            value = getattr(self, field.name)
            if value is None or isinstance(value, bool | int | float):
                items[field.name] = value
            elif isinstance(value, str):
                items[field.name] = value if len(value) <= 60 else value[:57] + "..."
            elif isinstance(value, tuple | list | dict):
                short = len(repr(value)) <= 60 and all(
                    isinstance(v, str | int | float) for v in value
                )
                items[field.name] = value if short else _Len(len(value))
        for name in _VERDICTS:
            if name not in items and isinstance(
                getattr(type(self), name, None), property
            ):
                items[name] = getattr(self, name)
        return items

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._repr_items().items())
        text = f"{type(self).__name__}({inner})"
        if len(text) > _REPR_LIMIT:
            text = text[: _REPR_LIMIT - 4] + "...)"
        return text

    def table(self) -> Table:
        """The report as a :class:`Table`."""
        raise NotImplementedError

    def json_data(self) -> dict[str, Any]:
        """The report's JSON payload (exact integers, no formatting)."""
        raise NotImplementedError

    def to_markdown(self) -> str:
        """The report as a markdown table."""
        return to_markdown(self.table())

    def to_json(self, *, indent: int | None = 2) -> str:
        """The report as JSON with ``schema`` and ``version`` fields first.

        Args:
            indent: Spaces per nesting level (``None``: one line).
        """
        if indent is not None:
            from nnx_introspect._typing import as_int  # _typing imports JAX

            indent = as_int(indent, "indent", minimum=0)
        payload = {"schema": self.SCHEMA, "version": self.SCHEMA_VERSION}
        payload.update(self.json_data())
        return json.dumps(payload, indent=indent)

    def to_html(self) -> str:
        """The report as a self-contained HTML page, its verdict boxed first.

        A report with a ``verdict`` and an ``ok`` opens with the verdict in a
        coloured box (:meth:`_verdict_tone`); a report with a ``phase_bars()``
        method (phases of several programs: serving, RL) shows their chart
        next (:func:`~nnx_introspect._render.phase_chart.phase_chart_svg`);
        the table follows.
        """
        table = self.table()
        return page_html(table.title, self._body_html(table))

    def __rich__(self) -> "FittedTable":
        """The report as a rich table (``rich.print(report)``)."""
        return to_rich(self.table())

    def _repr_html_(self) -> str:
        return self._body_html(self.table())

    def _verdict_tone(self) -> Tone | None:
        """The colour of the verdict's box, or ``None`` for a report without one.

        A report has a box when it has a ``verdict`` (a string) and an ``ok``
        (a bool): red when not ``ok``; grey when ``ok`` only because there is
        no budget to judge (a ``max_device_bytes`` of ``None``), green
        otherwise. A subclass may override this.
        """
        verdict = getattr(self, "verdict", None)
        ok = getattr(self, "ok", None)
        if not isinstance(verdict, str) or not isinstance(ok, bool):
            return None
        if not ok:
            return "bad"
        if getattr(self, "max_device_bytes", 0) is None:
            return "neutral"
        return "ok"

    def _body_html(self, table: Table) -> str:
        """The verdict's box (if any), the phase chart (if offered), the table.

        The verdict, already boxed, is left out of the table's caption and
        lead sentences.
        """
        tone = self._verdict_tone()
        chart = self._phase_chart_html()
        if tone is None:
            return self._after_verdict_html() + chart + table_html(table)
        verdict = str(getattr(self, "verdict"))  # noqa: B009  # checked by the tone
        lead = tuple(s for s in table.lead if s != verdict)
        rest = dataclasses.replace(table, lead=lead)
        return (
            verdict_html(verdict, tone)
            + self._after_verdict_html()
            + chart
            + table_html(rest, caption=table.title != verdict)
        )

    def _phase_chart_html(self) -> str:
        """The phase chart of a report that offers ``phase_bars()``; else nothing.

        A report of several programs run one after another (serving, an RL
        step) offers its phases as a
        :class:`~nnx_introspect._render.phase_chart.PhaseBars` (or ``None``:
        no chart), and its page shows
        :func:`~nnx_introspect._render.phase_chart.phase_chart_svg` of them.
        """
        offer = getattr(self, "phase_bars", None)
        if not callable(offer):
            return ""
        phases = offer()
        if phases is None:
            return ""
        if not isinstance(phases, PhaseBars):
            raise TypeError(
                f"`{type(self).__name__}.phase_bars()` must return PhaseBars or "
                f"None, got {type(phases).__name__}. Return PhaseBars(bars, budget, "
                "device)."
            )
        return phase_chart_svg(
            phases.bars, phases.budget, phases.device, resident=phases.resident
        )

    def _after_verdict_html(self) -> str:
        """HTML the reader needs right after the verdict (none by default)."""
        return ""

    def __str__(self) -> str:
        """The report as plain text: what ``print(report)`` shows.

        The verdict (or, for a report without one, the title) on the first
        line, then the table as the terminal would show it (at the terminal's
        width, 100 columns when there is none), without colours. ``repr`` stays
        the short one.

        Example:
            >>> from flax import nnx
            >>> from nnx_introspect import mesh_config_report
            >>> report = mesh_config_report(nnx.Linear(4, 3, rngs=nnx.Rngs(0)), "a=2")
            >>> print(str(report).splitlines()[0])
            OK: every leaf can be placed as specified; 60 B per device (no budget set).
        """
        verdict = getattr(self, "verdict", None)
        return table_text(self.table(), verdict if isinstance(verdict, str) else None)


def table_text(table: Table, first: str | None = None) -> str:
    """``table`` as plain text, ``first`` (else its title) on the first line whole.

    What ``print(report)`` shows (see :meth:`Report.__str__`): the table at the
    terminal's width (100 columns when there is none), without colours.

    Example:
        >>> table = Table("Totals", ("name", "bytes"), (("w", "8 B"),))
        >>> print(table_text(table).splitlines()[0])
        Totals
    """
    # The first line whole, never wrapped by the table's renderer (a long
    # checkpoint path or verdict stays one line, as a terminal soft-wraps it)
    first = first if first is not None else table.title
    lines: list[str] = [first] if first else []
    if table.title == first:
        table = dataclasses.replace(table, title="")
    table = dataclasses.replace(table, lead=tuple(s for s in table.lead if s != first))
    width = shutil.get_terminal_size((100, 24)).columns
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=max(20, width),
        color_system=None,
        force_terminal=False,
        force_jupyter=False,
        legacy_windows=False,
    )
    console.print(FittedTable(table, title_above=True))
    rendered = [line.rstrip() for line in buffer.getvalue().splitlines()]
    if rendered and not rendered[0]:  # an emptied title
        rendered = rendered[1:]
    return "\n".join([*lines, *rendered]).rstrip("\n")


class _Len(int):
    """A container's length in a report's ``repr``: prints as the number."""

    def __repr__(self) -> str:
        return str(int(self))

"""The collectives report: its rows, their totals, the ring wire factor, table, JSON."""

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from nnx_introspect._render import Report, Table, format_bytes
from nnx_introspect._typing import ArgumentError
from nnx_introspect._xla.collectives.irregular import note_irregular, span_axes
from nnx_introspect._xla.collectives.ragged import note_ragged
from nnx_introspect._xla.collectives.rows import (
    ANY_QUESTION,
    DCN_MARK,
    Collective,
    CollectiveTotal,
    where_words,
)
from nnx_introspect._xla.hlo import source_json as _source_json

# --- the report ----------------------------------------------------------------


@dataclass(frozen=True)
class Collectives(Report):
    """Every collective of a compiled step, with its bytes and mesh axes.

    Attributes:
        module: XLA's module name (``jit_train``).
        mesh_axes: the mesh the program was compiled for, ``(name, size)`` in
            ``mesh.devices`` order.
        rows: one :class:`Collective` per HLO collective, in the program's order.
        dcn_axes: for a program over several TPU slices, each axis's share of
            the slices (``mesh_axes`` is then one slice's mesh); ``()`` for one.

    Example:
        >>> row = Collective("all-gather", "ag", "all-gather", "sync", "main",
        ...     1024, 1024, 256, ("f32",), ((16, 16),), 4, ((0, 1, 2, 3),),
        ...     ("fsdp",), None, 1, None, None, (), 3, True, ("while.1",))
        >>> found = Collectives("jit_f", (("fsdp", 4),), (row,))
        >>> found.nbytes, found.wire_bytes, found.by_axis()[("fsdp",)].count
        (3072, Fraction(2304, 1), 3)
    """

    SCHEMA = "nnx-introspect/collectives"
    SCHEMA_VERSION = 1

    module: str
    mesh_axes: tuple[tuple[str, int], ...]
    rows: tuple[Collective, ...]
    dcn_axes: tuple[tuple[str, int], ...] = ()

    @property
    def nbytes(self) -> int:
        """Every row's bytes over one step (``nbytes * count``), added up."""
        return sum(row.total_bytes for row in self.rows)

    @property
    def wire_bytes(self) -> Fraction:
        """What each device sends over one step, by the ring model."""
        return sum((row.total_wire_bytes for row in self.rows), Fraction(0))

    @property
    def unsourced_wire_bytes(self) -> Fraction:
        """What each device sends per step for arrays without a source line."""
        return sum((row.unsourced_wire_bytes for row in self.rows), Fraction(0))

    @property
    def trip_counts_known(self) -> bool:
        """Whether every loop around a collective has a known trip count."""
        return all(row.trip_count_known for row in self.rows)

    def by_kind(self) -> dict[str, CollectiveTotal]:
        """Totals per kind, most wire bytes first."""
        return _totals(self.rows, lambda row: row.kind, lambda key: str(key))

    def by_axis(self) -> dict[tuple[str, ...], CollectiveTotal]:
        """Totals per mesh-axis combination (``("fsdp",)``, ``("?",)``...).

        Most wire bytes first; ``()`` holds groups of one device. The rows
        across slices (``network="DCN"``) are keyed apart, each axis marked
        :data:`DCN_MARK` (``("data@DCN",)``).
        """
        return _totals(self.rows, axes_key, _axes_label)

    def _repr_items(self) -> dict[str, Any]:
        items = super()._repr_items()
        items["mesh_axes"] = dict(self.mesh_axes)
        if self.dcn_axes:
            items["dcn_axes"] = dict(self.dcn_axes)
        else:
            items.pop("dcn_axes", None)
        items["nbytes"] = self.nbytes
        items["wire_bytes"] = _number(self.wire_bytes)
        return items

    def top(self, n: int = 20) -> tuple[Collective, ...]:
        """The ``n`` rows that send the most per step (ties in program order)."""
        if n < 1:
            raise ArgumentError("n", f"`n` must be a positive integer, got {n}.")
        return tuple(sorted(self.rows, key=lambda row: -row.total_wire_bytes)[:n])

    def table(self, top: int = 20) -> Table:
        """The ``top`` rows that send the most, then totals by kind and by axes."""
        rows: tuple[tuple[str, ...], ...] = tuple(
            (
                row.name,
                row.kind,
                _axes_label(row.axes),
                _short_type(row),
                str(row.count) + ("" if row.trip_count_known else "?"),
                format_bytes(row.total_bytes),
                format_bytes(float(row.total_wire_bytes)),
                _row_where(row),
            )
            for row in self.top(top)
        )
        notes = self._notes()
        if len(self.rows) > len(rows):
            notes.append(f"{len(self.rows) - len(rows)} smaller collectives not shown.")
        mesh = ", ".join(f"{name}={size}" for name, size in self.mesh_axes)
        columns: tuple[str, ...] = (
            "Collective",
            "Kind",
            "Mesh axes",
            "Type",
            "Count",
            "Bytes",
            "Wire bytes",
            "Source",
        )
        totals = self._total_rows()
        if self.dcn_axes:  # several slices: each row's network, after its axes
            crossing = ", ".join(f"{n}={f}" for n, f in self.dcn_axes if f > 1)
            mesh += f" per slice; over slices {crossing}"
            notes.append(
                "Network: DCN for a transfer across slices (the megascale "
                "runtime's send/recv over the data-center network), ICI within "
                "a slice."
            )
            columns = (*columns[:3], "Network", *columns[3:])
            rows = tuple(
                (*cells[:3], row.network or "", *cells[3:])
                for cells, row in zip(rows, self.top(top), strict=True)
            )
            totals = tuple((*cells[:3], "", *cells[3:]) for cells in totals)
        return Table(
            title=f"Collectives of {self.module} ({mesh})",
            columns=columns,
            rows=rows,
            totals=totals,
            notes=tuple(notes),
            lead=(
                f"{len(self.rows)} collectives, {format_bytes(self.nbytes)} per "
                f"device and step; each device sends "
                f"{format_bytes(float(self.wire_bytes))}.",
            ),
        )

    def _total_rows(self) -> tuple[tuple[str, ...], ...]:
        """The table's totals: by kind, by mesh axes, then all collectives."""
        totals = [
            *((k, t) for k, t in self.by_kind().items()),
            *((f"over {t.label}", t) for t in self.by_axis().values()),
        ]
        every = (
            "all collectives",
            sum(row.count for row in self.rows),
            self.nbytes,
            self.wire_bytes,
        )
        return tuple(
            (
                label,
                "",
                "",
                "",
                str(count),
                format_bytes(nbytes),
                format_bytes(float(wire)),
                "",
            )
            for label, count, nbytes, wire in [
                *((label, t.count, t.nbytes, t.wire_bytes) for label, t in totals),
                every,
            ]
        )

    def _notes(self) -> list[str]:
        """The table's notes on bytes, unknown trip counts and partial axes."""
        notes = [
            "Bytes: the result of an all-gather, all-reduce, all-to-all and "
            "collective-permute, the operand of a reduce-scatter, per device and "
            "step (a ragged all-to-all's payload: see below). Wire: what each "
            "device sends by the ring algorithms, (n-1)/n of the bytes for an "
            "all-gather, reduce-scatter and all-to-all, 2(n-1)/n for an "
            "all-reduce, the whole buffer for a permute.",
        ]
        ragged = self.ragged_note()
        if ragged is not None:
            notes.append(ragged)
        if not self.trip_counts_known:
            notes.append(
                "A count with '?' is inside a while loop whose trip count XLA "
                "does not state: each unknown loop counts once."
            )
        irregular = self.irregular_note()
        if irregular is not None:
            notes.append(irregular)
        return notes

    def ragged_note(self) -> str | None:
        """What the ragged all-to-alls' bytes are; ``None`` without one.

        Example:
            >>> Collectives("jit_f", (("fsdp", 8),), ()).ragged_note() is None
            True
        """
        return note_ragged(
            [
                (row.worst_case_receive_bytes or 0, row.nbytes, row.count)
                for row in self.rows
                if row.kind == "ragged-all-to-all"
            ]
        )

    def irregular_wire_bytes(self) -> tuple[tuple[tuple[str, ...], int], ...]:
        """The wire bytes of the ``("?",)`` rows, per the axes their groups lie in.

        Each row over device groups that are not whole mesh axes, keyed by its
        span: the mesh axes along which some group's devices differ, the
        smallest combination of whole axes each group lies inside (so the
        links it uses); per device and step, rounded, most first. What
        :func:`~nnx_introspect._roofline.program.program_roofline` counts
        them as (``irregular_wire_bytes``).

        Example:
            >>> row = Collective("all-gather", "ag", "all-gather", "sync", "main",
            ...     64, 64, 32, ("f32",), ((16,),), 2, ((0, 1), (2, 3)), ("?",),
            ...     None, 1, None, None, (), 1, True, ())
            >>> Collectives("jit_f", (("fsdp", 4),), (row,)).irregular_wire_bytes()
            ((('fsdp',), 32),)
        """
        spans: dict[tuple[str, ...], Fraction] = {}
        for row in self.rows:
            if row.axes == ANY_QUESTION:
                span = span_axes(row.groups, self.mesh_axes)
                spans[span] = spans.get(span, Fraction(0)) + row.total_wire_bytes
        ranked = sorted(spans.items(), key=lambda item: -item[1])
        return tuple((span, round(wire)) for span, wire in ranked if wire)

    def irregular_note(self) -> str | None:
        """What the ``"?"`` axes are, with their bytes and groups; ``None`` without.

        Example:
            >>> Collectives("jit_f", (("fsdp", 4),), ()).irregular_note() is None
            True
        """
        rows = sorted(
            (row for row in self.rows if row.axes == ANY_QUESTION),
            key=lambda row: -row.total_wire_bytes,
        )
        return note_irregular(
            [
                (
                    row.name,
                    row.kind,
                    row.groups,
                    round(row.total_wire_bytes),
                    _row_where(row),
                )
                for row in rows
            ],
            self.mesh_axes,
            round(self.wire_bytes),
        )

    def json_data(self) -> dict[str, Any]:
        """Every row and the totals, in exact integers.

        ``dcn_axes`` is there only for a program over several slices.

        A wire figure is an integer when the ring factor divides the bytes
        evenly, else a float.
        """
        several = {"dcn_axes": [[name, f] for name, f in self.dcn_axes]}
        return {
            "module": self.module,
            "mesh_axes": [[name, size] for name, size in self.mesh_axes],
            **(several if self.dcn_axes else {}),
            "bytes": self.nbytes,
            "wire_bytes": _number(self.wire_bytes),
            "trip_counts_known": self.trip_counts_known,
            "rows": [_row_json(row) for row in self.rows],
            "by_kind": [_total_json(t) for t in self.by_kind().values()],
            "by_axis": [
                {"axes": list(axes)} | _total_json(t)
                for axes, t in self.by_axis().items()
            ],
        }


# --- rendering helpers ---------------------------------------------------------


def axes_key(row: Collective) -> tuple[str, ...]:
    """A row's key in :meth:`Collectives.by_axis`: its axes, marked when DCN.

    Example:
        >>> row = Collective("all-reduce", "send", "send", "megascale host "
        ...     "transfer", "main", 64, 64, 64, ("f32",), ((16,),), 2, (),
        ...     ("data",), None, 1, None, None, (), 1, True, (), network="DCN")
        >>> axes_key(row)
        ('data@DCN',)
    """
    if row.network == "DCN":
        return tuple(f"{axis}{DCN_MARK}" for axis in row.axes)
    return row.axes


def _axes_label(axes: Hashable) -> str:
    assert isinstance(axes, tuple)
    return "+".join(axes) if axes else "(none)"


def _short_type(row: Collective) -> str:
    """``type_str``, or for a combined collective of many arrays, a summary."""
    if len(row.shapes) <= 3:
        return row.type_str
    dtypes = "/".join(dict.fromkeys(row.dtypes))
    return f"({len(row.shapes)} {dtypes} arrays)"


def _row_where(row: Collective) -> str:
    """The table's source of a row: its sources counted when it combines several."""
    if len(set(row.sources)) <= 1:
        return where_words(row.source)
    parts = row.source_summary.split(", ")
    more = f" and {len(parts) - 3} more" if len(parts) > 3 else ""
    return ", ".join(parts[:3]) + more


def _totals(
    rows: Sequence[Collective],
    key: Callable[[Collective], Any],
    label: Callable[[Any], str],
) -> dict[Any, CollectiveTotal]:
    members: dict[Any, list[Collective]] = {}
    for row in rows:
        members.setdefault(key(row), []).append(row)
    totals = {
        group_key: CollectiveTotal(
            label=label(group_key),
            instructions=len(group),
            count=sum(row.count for row in group),
            nbytes=sum(row.total_bytes for row in group),
            wire_bytes=sum((row.total_wire_bytes for row in group), Fraction(0)),
        )
        for group_key, group in members.items()
    }
    return dict(sorted(totals.items(), key=lambda item: -item[1].wire_bytes))


def _number(value: Fraction) -> int | float:
    return value.numerator if value.denominator == 1 else float(value)


def _row_json(row: Collective) -> dict[str, Any]:
    return {
        "kind": row.kind,
        "name": row.name,
        "opcode": row.opcode,
        "form": row.form,
        "computation": row.computation,
        "bytes": row.nbytes,
        "wire_bytes": _number(row.wire_bytes),
        "result_bytes": row.result_bytes,
        "operand_bytes": row.operand_bytes,
        "dtypes": list(row.dtypes),
        "shapes": [list(shape) for shape in row.shapes],
        "group_size": row.group_size,
        "groups": [list(group) for group in row.groups],
        "axes": list(row.axes),
        "source_target_pairs": None
        if row.source_target_pairs is None
        else [list(pair) for pair in row.source_target_pairs],
        "channel_id": row.channel_id,
        "op_name": row.op_name,
        "source": _source_json(row.source),
        "count": row.count,
        "trip_count_known": row.trip_count_known,
        "loops": list(row.loops),
        "sources": [_source_json(source) for source in row.sources],
        "worst_case_receive_bytes": row.worst_case_receive_bytes,
        "network": row.network,
    }


def _total_json(total: CollectiveTotal) -> dict[str, Any]:
    return {
        "label": total.label,
        "instructions": total.instructions,
        "count": total.count,
        "bytes": total.nbytes,
        "wire_bytes": _number(total.wire_bytes),
    }

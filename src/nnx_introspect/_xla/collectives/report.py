"""The collectives report: its rows, their totals, the ring wire factor, table, JSON."""

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

from nnx_introspect._render import Report, Table, format_bytes
from nnx_introspect._typing import ArgumentError, typechecked
from nnx_introspect._xla.collectives.irregular import note_irregular, span_axes
from nnx_introspect._xla.collectives.ragged import note_ragged
from nnx_introspect._xla.hlo import SourceLocation, array_bytes
from nnx_introspect._xla.hlo import source_json as _source_json

KINDS: Final = (
    "all-gather",
    "reduce-scatter",
    "all-reduce",
    "all-to-all",
    "ragged-all-to-all",
    "collective-permute",
)
"""The collectives :func:`read_collectives` reports."""


ANY_QUESTION: Final = ("?",)
"""The axes of a collective whose groups are not whole mesh axes."""

DCN_MARK: Final = "@DCN"
"""What :meth:`Collectives.by_axis` appends to each axis of a DCN row's key
(``("data@DCN",)``): its bytes cross the data-center network, not the ICI
of the same axis."""


# --- results -------------------------------------------------------------------


@typechecked
def wire_factor(kind: str, group_size: int) -> Fraction:
    """Bytes each device sends per byte of :attr:`Collective.nbytes`, ring model.

    The standard bandwidth-optimal (ring) algorithms over a group of ``n``
    devices: an all-gather, a reduce-scatter and an all-to-all each send
    ``(n - 1) / n`` of their bytes from every device, an all-reduce (a
    reduce-scatter, then an all-gather) twice that, ``2 (n - 1) / n``; a
    collective-permute sends its buffer once. A group of one sends nothing.

    An all-to-all's device keeps ``1 / n`` of its buffer (its own block) and
    sends the rest, one block to each other device; a ragged all-to-all's
    blocks are as large as the routing makes them at run time, and the factor
    takes them even (each device keeps ``1 / n`` of its payload). These are
    the bytes each device puts on its links; on a ring or torus a block bound
    for a device several hops away also crosses the links between them, which
    the factor does not count.

    Args:
        kind: one of :data:`KINDS`.
        group_size: the devices in each group (for a collective-permute, any
            positive number: its factor is 1 whenever a pair moves data).

    Returns:
        The exact factor.

    Raises:
        ArgumentError: `kind` is not one of :data:`KINDS`, or `group_size` is not
            positive.

    Example:
        >>> wire_factor("all-gather", 8), wire_factor("all-reduce", 8)
        (Fraction(7, 8), Fraction(7, 4))
        >>> wire_factor("ragged-all-to-all", 8)
        Fraction(7, 8)
        >>> wire_factor("collective-permute", 2), wire_factor("all-reduce", 1)
        (Fraction(1, 1), Fraction(0, 1))
    """
    if kind not in KINDS:
        raise ArgumentError(
            "kind", f"`kind` must be one of {list(KINDS)}, got {kind!r}."
        )
    if group_size < 1:
        raise ArgumentError(
            "group_size", f"`group_size` must be a positive integer, got {group_size}."
        )
    if kind == "collective-permute":
        return Fraction(1)
    share = Fraction(group_size - 1, group_size)
    return 2 * share if kind == "all-reduce" else share


@dataclass(frozen=True)
class Collective:
    """One collective of the compiled step: what it moves, over which mesh axes.

    Attributes:
        kind: one of :data:`KINDS`.
        name: the HLO instruction (for a start/done pair, the start; for
            XLA:TPU's reduce-scatter fusion, the fusion).
        opcode: that instruction's opcode (``all-gather``, ``all-gather-start``,
            ``fusion``...).
        form: how XLA wrote it: ``"sync"``, ``"async"`` (a ``-start`` /
            ``-done`` pair), ``"async wrapper"`` (inside an ``async-start``'s
            computation), ``"fused"`` (inside a fusion), ``"TPU async
            collective fusion"`` or ``"TPU reduce-scatter fusion"``.
        computation: the HLO computation that holds it.
        nbytes: its bytes per device, one execution: the **result** for an
            all-gather (the gathered buffer), an all-reduce, an all-to-all and a
            collective-permute, the **operand** (the input, before the scatter)
            for a reduce-scatter; summed over a combined collective's arrays.
            For a ragged all-to-all, whose sizes are run-time values, its
            payload: the smaller of its send buffer (operand 0) and its
            receive buffer (the result), what each device sends on average
            when every row of the send buffer is sent (a dropless MoE's
            dispatch and combine); see :attr:`worst_case_receive_bytes`.
        result_bytes: the result's bytes per device, one execution (for a
            ragged all-to-all, its receive buffer).
        operand_bytes: the operands' bytes per device, one execution (for a
            ragged all-to-all, all six: the send and receive buffers, the
            offsets and the sizes).
        dtypes: XLA's element type of each array of ``nbytes`` (``f32``...).
        shapes: the shape of each array of ``nbytes``.
        group_size: devices per group (for a collective-permute, the largest
            set of devices its pairs connect).
        groups: the groups as partition ids (positions in ``mesh.devices.flat``);
            for a collective-permute, the sets its pairs connect.
        axes: the mesh axes each group spans, in the mesh's order: ``()`` for
            groups of one device, ``("?",)`` when a group is not a whole
            combination of mesh axes (or the groups differ).
        source_target_pairs: a collective-permute's ``(source, target)``
            partition ids, else ``None``.
        channel_id: XLA's channel id, if any.
        op_name: JAX's op name from the metadata, if any.
        source: the innermost frame of ``stack`` outside JAX, jaxlib, flax,
            optax and numpy (:func:`~nnx_introspect._xla.hlo.frames.user_frame`:
            the model's line, not flax's ``Linear.__call__`` inside it), else
            the innermost; ``None`` when the metadata carries no frame.
        stack: every frame, innermost first, the libraries' included.
        count: how many times one step runs it: the product of the known trip
            counts of the while loops around it (summed over call sites).
        trip_count_known: whether every loop around it has a known trip count
            (an unknown one counts once).
        loops: the while instructions around it, outermost first (along its
            first call path).
        sources: one source per array of ``nbytes`` (parallel to ``shapes``),
            ``None`` where none was found: the collective's own frame, or for
            one without (XLA's combiners leave a combined collective none),
            the array's as its ``get-tuple-element``, the users of its result
            or the producers of its operand give it; ``()`` when not read
            (a row rebuilt from JSON without them). ``source`` is then the
            source of the most bytes.
        network: what it crosses: ``"DCN"`` for a transfer across TPU slices
            (a megascale host transfer, over the data-center network),
            ``"ICI"`` for the other collectives of a TPU program; on GPUs
            ``"NVLink"`` when each group stays in one host, else
            ``"network"``; ``None`` when unsaid (XLA:CPU, or a reading
            given no hosts).
    """

    kind: str
    name: str
    opcode: str
    form: str
    computation: str
    nbytes: int
    result_bytes: int
    operand_bytes: int
    dtypes: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    group_size: int
    groups: tuple[tuple[int, ...], ...]
    axes: tuple[str, ...]
    source_target_pairs: tuple[tuple[int, int], ...] | None
    channel_id: int | None
    op_name: str | None
    source: SourceLocation | None
    stack: tuple[SourceLocation, ...]
    count: int
    trip_count_known: bool
    loops: tuple[str, ...]
    sources: tuple[SourceLocation | None, ...] = ()
    network: str | None = None

    @property
    def worst_case_receive_bytes(self) -> int | None:
        """A ragged all-to-all's receive buffer, per device; ``None`` for the rest.

        XLA sizes it statically (``result_bytes``) for the most rows the
        program lets one device receive; tunix's MoE dispatch sizes it at
        ``min(top_k, local experts) x tokens x devices`` rows. How much of it
        a step fills depends on the routing.

        Example:
            >>> row = Collective("ragged-all-to-all", "r", "ragged-all-to-all",
            ...     "sync", "main", 262144, 1048576, 1310848, ("f32",),
            ...     ((256, 1, 256),), 8, (tuple(range(8)),), ("fsdp",), None, 1,
            ...     None, None, (), 1, True, ())
            >>> row.worst_case_receive_bytes, row.wire_bytes
            (1048576, Fraction(229376, 1))
        """
        return self.result_bytes if self.kind == "ragged-all-to-all" else None

    @property
    def unsourced_wire_bytes(self) -> Fraction:
        """``total_wire_bytes`` of the arrays without a source.

        Each array's share of the wire bytes is its share of ``nbytes``;
        without per-array ``sources``, all of them when ``source`` is
        ``None``, else none.
        """
        if len(self.sources) != len(self.shapes) or not self.nbytes:
            return self.total_wire_bytes if self.source is None else Fraction(0)
        sizes = [
            array_bytes(dtype, shape)
            for dtype, shape in zip(self.dtypes, self.shapes, strict=True)
        ]
        missing = sum(
            size
            for size, source in zip(sizes, self.sources, strict=True)
            if source is None
        )
        return self.total_wire_bytes * Fraction(missing, sum(sizes) or 1)

    @property
    def source_summary(self) -> str:
        """Its sources as ``"examples.py:402 \u00d78, examples.py:398 \u00d74"``.

        Each distinct source of ``sources`` with its number of arrays, most
        arrays first (``"? \u00d72"`` for arrays without one); for a row with one
        array or none listed, ``source`` alone (``""`` when ``None``).
        """
        if len(self.sources) <= 1:
            return _short_where(self.source)
        counts: dict[str, int] = {}
        for source in self.sources:
            key = _short_where(source) or "?"
            counts[key] = counts.get(key, 0) + 1
        if len(counts) == 1 and "?" not in counts:
            return next(iter(counts))
        ranked = sorted(counts.items(), key=lambda item: (item[0] == "?", -item[1]))
        return ", ".join(f"{where} \u00d7{n}" for where, n in ranked)

    @property
    def wire_bytes(self) -> Fraction:
        """Bytes each device sends per execution: ``nbytes`` times the ring factor.

        See :func:`wire_factor`; a collective-permute whose pairs all send to
        themselves moves nothing.
        """
        if self.kind == "collective-permute" and not any(
            source != target for source, target in self.source_target_pairs or ()
        ):
            return Fraction(0)
        return self.nbytes * wire_factor(self.kind, self.group_size)

    @property
    def total_bytes(self) -> int:
        """``nbytes * count``: its bytes over one step."""
        return self.nbytes * self.count

    @property
    def total_wire_bytes(self) -> Fraction:
        """``wire_bytes * count``: what each device sends for it in one step."""
        return self.wire_bytes * self.count

    @property
    def type_str(self) -> str:
        """``f32[1024,256]``, or a combined collective's ``(f32[8], bf16[4,4])``."""
        arrays = [
            f"{dtype}[{','.join(map(str, shape))}]"
            for dtype, shape in zip(self.dtypes, self.shapes, strict=True)
        ]
        return arrays[0] if len(arrays) == 1 else f"({', '.join(arrays)})"


@dataclass(frozen=True)
class CollectiveTotal:
    """The collectives of one kind or one mesh-axis combination, added up.

    Attributes:
        label: the kind, or the axes joined by ``+`` (``"(none)"`` for groups
            of one device).
        instructions: how many rows (HLO instructions).
        count: how many executions per step (the rows' counts added).
        nbytes: their bytes per step (each row's ``nbytes * count``).
        wire_bytes: what each device sends for them per step.
    """

    label: str
    instructions: int
    count: int
    nbytes: int
    wire_bytes: Fraction


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


def _where(source: SourceLocation | None) -> str:
    if source is None:
        return ""
    file = source.file.rsplit("/", 1)[-1]
    return f"{source.function} {file}:{source.line}".strip()


def _short_where(source: SourceLocation | None) -> str:
    """``examples.py:402``: a source's file name and line (``""`` for none)."""
    if source is None:
        return ""
    return f"{source.file.rsplit('/', 1)[-1]}:{source.line}"


def _row_where(row: Collective) -> str:
    """The table's source of a row: its sources counted when it combines several."""
    if len(set(row.sources)) <= 1:
        return _where(row.source)
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

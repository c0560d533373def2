"""One collective of a compiled step: its kind, bytes, mesh axes and wire bytes.

:class:`Collective` is a row of the collectives report
(:class:`~nnx_introspect._xla.collectives.report.Collectives`);
:func:`wire_factor` is the ring model of the bytes each device sends for it,
and :class:`CollectiveTotal` a kind's or an axis combination's rows added up.
"""

from dataclasses import dataclass
from fractions import Fraction
from typing import Final

from nnx_introspect._typing import ArgumentError, typechecked
from nnx_introspect._xla.hlo import SourceLocation, array_bytes

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


def where_words(source: SourceLocation | None) -> str:
    if source is None:
        return ""
    file = source.file.rsplit("/", 1)[-1]
    return f"{source.function} {file}:{source.line}".strip()


def _short_where(source: SourceLocation | None) -> str:
    """``examples.py:402``: a source's file name and line (``""`` for none)."""
    if source is None:
        return ""
    return f"{source.file.rsplit('/', 1)[-1]}:{source.line}"


__all__ = [
    "ANY_QUESTION",
    "DCN_MARK",
    "KINDS",
    "Collective",
    "CollectiveTotal",
    "where_words",
    "wire_factor",
]

"""What XLA's peak is made of: each buffer live there with a kind, a path or a source.

A pure function of :class:`~nnx_introspect._xla.dump.PeakBuffers` (what XLA's
dumps say) and of what the step knows about its arguments (their state paths);
nothing here compiles or reads a file. :func:`classify` gives each buffer its
kind by the rules of :mod:`nnx_introspect._breakdown.kinds` and returns the
:class:`Breakdown`: its grouped views, its table and its JSON.

Example:
    >>> import tempfile
    >>> import jax, jax.numpy as jnp
    >>> from nnx_introspect._xla.dump import dump_options, read_peak
    >>> def step(w, x):
    ...     return jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w) ** 2))(w)
    >>> with tempfile.TemporaryDirectory() as directory:
    ...     compiled = (
    ...         jax.jit(step)
    ...         .lower(jax.ShapeDtypeStruct((64, 64), jnp.float32),
    ...                jax.ShapeDtypeStruct((128, 64), jnp.float32))
    ...         .compile(compiler_options=dump_options(directory))
    ...     )
    ...     peak = read_peak(directory, backend="cpu")
    >>> arguments = [
    ...     ArgumentLeaf(0, "w", "parameter"), ArgumentLeaf(1, "batch[0]", "batch")
    ... ]
    >>> breakdown = classify(peak, arguments, held_bytes=peak.peak_bytes)
    >>> sum(row.nbytes for row in breakdown.rows) == breakdown.live_peak_bytes
    True
    >>> [row.label for row in breakdown.rows if row.kind == "parameter"]
    ['w']
"""

import re
from collections.abc import Callable, Collection, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from nnx_introspect._breakdown.rows import (
    ARGUMENT_KINDS,
    EXPERT_KINDS,
    KINDS,
    TIMES,
    ArgumentLeaf,
    BreakdownRow,
    ExpertSteps,
    argument_leaves,
    backward_has_begun,
    classify_buffer,
    layout_links,
    row_from_json,
    row_json,
    where,
)
from nnx_introspect._render import Report, Table, format_bytes, whole_percent
from nnx_introspect._typing import ArgumentError, IntLike, as_int, typechecked
from nnx_introspect._xla import LiveCurve, PeakBuffers, Phases, SourceLocation
from nnx_introspect._xla import source_json as _source_json

__all__ = [
    "ARGUMENT_KINDS",
    "EXPERT_KINDS",
    "KINDS",
    "ArgumentLeaf",
    "Breakdown",
    "BreakdownRow",
    "ExpertSteps",
    "Group",
    "argument_leaves",
    "buffer_count",
    "classify",
    "percent_text",
]


@dataclass(frozen=True)
class Group:
    """Buffers of a grouped view: their label, kind (if one), count and bytes.

    Attributes:
        label: the group's name (a kind, ``"Attention.__call__ model.py:120"``,
            ``layers/*/attn/q/kernel`` and its count after a multiplication sign).
        count: how many buffers.
        nbytes: their bytes.
        kind: the kind all of them share, or ``None`` for a group of several.
        source: the source location they share, if grouped by source.
    """

    label: str
    count: int
    nbytes: int
    kind: str | None = None
    source: SourceLocation | None = None


@dataclass(frozen=True)
class Breakdown(Report):
    """The buffers live at XLA's peak of a compiled step, each with its kind.

    Attributes:
        backend: ``cpu``, ``gpu`` or ``tpu``.
        module: XLA's module name (``jit_train``).
        peak_time: the program point of the peak, as XLA numbers it.
        peak_instruction: the instruction scheduled there.
        live_peak_bytes: the most bytes in use at one program point, each
            slice of an allocation once, the arguments' and outputs'
            allocations at every point (see
            :class:`~nnx_introspect._xla.dump.PeakBuffers`): the rows add up to
            it exactly.
        held_bytes: what the device holds for the step (arguments + outputs +
            XLA's temp buffer - aliased, from ``memory_analysis()``).
        rows: every buffer live at the peak, largest first.
        curve: the bytes live at each program point, or ``None``.
        top_n: how many of the largest buffers :meth:`table` shows.
        xla_peak_time: the point XLA's live-range dump names its peak; it is
            ``peak_time`` unless more bytes are in use at another point (see
            :class:`PeakBuffers`), ``None`` when not read.
        xla_peak_bytes: the bytes XLA lists live at its point, each value by
            its instruction's shape: bytes two values share count twice, a
            multi-output fusion's outputs as 8-byte pointers.
        debug: whether :meth:`table` adds the notes on XLA's internals (how
            XLA's own live-range peak differs from the one listed); not in
            the JSON.
        backward_start: the first program point of the backward pass
            (:mod:`~nnx_introspect._xla.hlo.phases`), ``None`` when the
            program has none or it was not read.
        optimizer_start: the first program point of the optimizer update,
            ``None`` when none or not read.
        expert_notes: For a mixture of experts, what sizes its dispatch and
            combine buffers (the experts' capacity, or the dropless inputs
            and the worst case XLA sizes a ragged all-to-all's receive buffer
            for), one sentence each; notes under :meth:`table`.

    Example:
        >>> row = BreakdownRow("batch", "batch[0]", 96, (8, 3), "f32", "x", \
"parameter", "x", "batch[0]", None, 0, None)
        >>> breakdown = Breakdown("cpu", "jit_f", 3, "dot", 96, 128, (row,))
        >>> breakdown.gap_bytes, breakdown.by_kind()[0].label
        (32, 'batch')
    """

    SCHEMA = "nnx-introspect/peak-breakdown"
    SCHEMA_VERSION = 2

    backend: str
    module: str
    peak_time: int
    peak_instruction: str
    live_peak_bytes: int
    held_bytes: int
    rows: tuple[BreakdownRow, ...]
    curve: LiveCurve | None = None
    top_n: int = 20
    xla_peak_time: int | None = None
    xla_peak_bytes: int | None = None
    debug: bool = False
    backward_start: int | None = None
    optimizer_start: int | None = None
    expert_notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.debug, bool):
            raise TypeError(f"`debug` must be a bool, got {self.debug!r}.")
        if self.top_n < 1:
            raise ArgumentError(
                "top_n",
                f"`top_n` must be a positive integer, got {self.top_n}: the table"
                " shows that many of the largest buffers.",
            )

    @property
    def phase(self) -> str | None:
        """The peak's phase: ``forward``, ``backward`` or ``optimizer``.

        The latest begun by the peak's program point (XLA may interleave
        them); ``None`` when the schedule's phases were not read.

        Example:
            >>> Breakdown("cpu", "jit_f", 12, "x", 0, 0, (), backward_start=10,
            ...           optimizer_start=30).phase
            'backward'
        """
        return Phases(self.backward_start, self.optimizer_start).at(self.peak_time)

    @property
    def gap_bytes(self) -> int:
        """``held_bytes - live_peak_bytes``; negative when the live ranges say more."""
        return self.held_bytes - self.live_peak_bytes

    @property
    def gap_reason(self) -> str:
        """Why what the device holds differs from the buffers live at the peak."""
        gap = self.gap_bytes
        if gap > 0:
            return (
                f"The device holds {format_bytes(gap)} more than the buffers live at"
                " the peak: XLA packs every temporary into one preallocated buffer"
                " sized for the whole program (with alignment padding), not all of"
                " it in use at the peak."
            )
        if gap < 0:
            return (
                f"XLA's live-range peak is {format_bytes(-gap)} above what"
                " memory_analysis() counts as held (arguments + outputs + temp"
                " buffer - aliased), so neither figure alone is the device's peak:"
                " XLA may place values in a memory space memory_analysis() does not"
                " count (on XLA:TPU, values with S(1) in their layout, in a temp"
                " allocation of their own)."
            )
        return "The device holds exactly the buffers live at the peak."

    def top(self, n: IntLike = 20) -> tuple[BreakdownRow, ...]:
        """The ``n`` largest buffers (ties in XLA's order).

        Args:
            n: how many, a positive integer.
        """
        count = as_int(n, "n", minimum=1)
        return tuple(sorted(self.rows, key=lambda row: -row.nbytes)[:count])

    def by_kind(self) -> tuple[Group, ...]:
        """Bytes and count per kind, largest first."""
        return _groups(self.rows, lambda row: row.kind, lambda row, n: row.kind)

    def by_source(self) -> tuple[Group, ...]:
        """Bytes and count per source location (file, line, function), largest first.

        Buffers without a source (entry parameters, XLA's own copies) make one
        group labelled ``"(no source)"``.
        """
        return _groups(
            self.rows,
            lambda row: row.source,
            lambda row, n: where(row.source) if row.source else "(no source)",
            with_source=True,
        )

    def by_layer(self, container: str = "layers") -> tuple[Group, ...]:
        """One row per layer pattern: ``layers/N`` collapsed, repeats counted.

        An argument's path becomes a pattern with ``{container}/*`` in place of
        ``{container}/N`` (``layers/*/attn/q/kernel``, then a multiplication sign
        and the count when more than one); any other buffer is grouped by its
        kind, source location, dtype and shape, so one line of a layer's code run
        by every layer is one row, counted the same way.

        Args:
            container: the path component that holds the layers by number.
        """
        if not isinstance(container, str) or not container or "/" in container:
            raise TypeError(
                f"`container` must be one path component such as 'layers', got"
                f" {container!r}."
            )
        pattern = re.compile(rf"(^|/){re.escape(container)}/\d+(?=/|$)")

        def key(row: BreakdownRow) -> Hashable:
            if row.path is not None:
                return (row.kind, pattern.sub(rf"\1{container}/*", row.path))
            if row.source is not None:
                return (row.kind, row.source, row.type_str)
            return (row.kind, row.opcode, row.type_str)

        def label(row: BreakdownRow, count: int) -> str:
            if row.path is not None:
                text = pattern.sub(rf"\1{container}/*", row.path)
            elif row.source is not None:
                text = f"{where(row.source)} {row.type_str}"
            else:
                text = f"{row.opcode} {row.type_str}"
            return f"{text} {TIMES}{count}" if count > 1 else text

        groups = _groups(self.rows, key, label)
        labels = [g.label for g in groups]
        return tuple(  # two kinds of one line and type: the kind says which
            replace(g, label=f"{g.label} ({g.kind})")
            if labels.count(g.label) > 1 and g.kind
            else g
            for g in groups
        )

    def table(self, top: IntLike | None = None) -> Table:
        """The ``top`` largest rows of buffers, then the totals by kind and the gap.

        Identical buffers (the same label, kind, type and memory space: one
        line of a layer run by every layer) make one row, their count after a
        multiplication sign, the type one buffer's and the bytes their sum.

        Args:
            top: how many rows; default :attr:`top_n`.
        """
        top = self.top_n if top is None else as_int(top, "top", minimum=1)
        peak = self.live_peak_bytes
        same: dict[tuple[str, str, str, int], list[BreakdownRow]] = {}
        for row in self.rows:
            key = (_layers_alike(row), row.kind, row.type_str, row.memory_space)
            same.setdefault(key, []).append(row)
        largest = sorted(same.values(), key=lambda g: -sum(r.nbytes for r in g))
        rows = tuple(
            (
                _layers_alike(group[0])
                + (f" [S({group[0].memory_space})]" if group[0].memory_space else "")
                + (f" {TIMES}{len(group)}" if len(group) > 1 else ""),
                group[0].kind,
                group[0].type_str,
                format_bytes(sum(r.nbytes for r in group)),
                percent_text(sum(r.nbytes for r in group), peak),
            )
            for group in largest[:top]
        )
        kinds = tuple(
            (
                g.label,
                "",
                buffer_count(g.count),
                format_bytes(g.nbytes),
                percent_text(g.nbytes, peak),
            )
            for g in self.by_kind()
        )
        totals = (
            *kinds,
            (
                "live-range peak",
                "",
                buffer_count(len(self.rows)),
                format_bytes(peak),
                "100%",
            ),
            ("held by the device", "", "", format_bytes(self.held_bytes), ""),
            ("gap (held - peak)", "", "", _signed_bytes(self.gap_bytes), ""),
        )
        notes = self._table_notes(largest[:top])
        return Table(
            title=f"Buffers live at XLA's peak ({self.backend}, {self.module})",
            columns=("Buffer", "Kind", "Type", "Bytes", "Share"),
            rows=rows,
            totals=totals,
            notes=notes,
            lead=(
                f"Peak at program point {self.peak_time} ({self.peak_instruction}):"
                f" {format_bytes(peak)} in {buffer_count(len(self.rows))}.",
            ),
        )

    def _table_notes(self, shown: list[list[BreakdownRow]]) -> tuple[str, ...]:
        """The notes under :meth:`table`, given the groups of buffers it shows."""
        peak = self.live_peak_bytes
        notes = [self.gap_reason]
        if any(len(group) > 1 for group in shown):
            notes.append(
                f"{TIMES}N: N buffers alike (one line of a layer, run by every"
                " layer): Type is one buffer's, Bytes their sum."
            )
        notes += _layout_notes(shown)
        notes += self.expert_notes
        moment, listed = self.xla_peak_time, self.xla_peak_bytes
        if self.debug and moment is not None and listed is not None and listed != peak:
            notes.append(
                f"XLA's live-range dump names point {moment} its peak, with"
                f" {format_bytes(listed)} live; {format_bytes(peak)} are in use at"
                f" point {self.peak_time}, each slice of an allocation counted once"
                " and the arguments' and outputs' allocations at every point, and"
                " those are the buffers listed. XLA's figure"
                " (HloLiveRange::ComputePeakMemoryMoment) sizes each value by its"
                " defining instruction's whole shape: bytes two values share (a"
                " fusion's output written in place over its operand) count twice,"
                " an output of a multi-output fusion as the tuple's 8-byte pointers."
            )
        spaces = sorted({row.memory_space for row in self.rows} - {0})
        if spaces:
            on_chip = sum(r.nbytes for r in self.rows if r.memory_space)
            notes.append(
                f"{format_bytes(on_chip)} of the peak is in memory space"
                f" {', '.join(f'S({n})' for n in spaces)} (on XLA:TPU, S(1) is the"
                " core's on-chip VMEM), not in the device's main memory; rows"
                " marked [S(n)]."
            )
        listed_rows = sum(len(group) for group in shown)
        if len(self.rows) > listed_rows:
            notes.append(f"{len(self.rows) - listed_rows} smaller buffers not shown.")
        return tuple(notes)

    def json_data(self) -> dict[str, Any]:
        """Every row, the grouped views and the gap, in exact integers."""
        return {
            "backend": self.backend,
            "module": self.module,
            "peak_time": self.peak_time,
            "peak_instruction": self.peak_instruction,
            "live_peak_bytes": self.live_peak_bytes,
            "xla_peak_time": self.xla_peak_time,
            "xla_peak_bytes": self.xla_peak_bytes,
            "held_bytes": self.held_bytes,
            "phase": self.phase,
            "backward_start": self.backward_start,
            "optimizer_start": self.optimizer_start,
            "gap": {"bytes": self.gap_bytes, "reason": self.gap_reason},
            "expert_notes": list(self.expert_notes),
            "rows": [row_json(row) for row in self.rows],
            "curve": _curve_json(self.curve),
            "groups": {
                "by_kind": [_group_json(g) for g in self.by_kind()],
                "by_source": [_group_json(g) for g in self.by_source()],
                "by_layer": [_group_json(g) for g in self.by_layer()],
            },
        }

    @classmethod
    def from_json_data(cls, data: dict[str, Any]) -> "Breakdown":
        """The breakdown :meth:`json_data` wrote (for a compile in a child process).

        Example:
            >>> row = BreakdownRow("batch", "batch[0]", 96, (8, 3), "f32", "x", \
"parameter", "x", "batch[0]", None, 0, None)
            >>> b = Breakdown("cpu", "jit_f", 3, "dot", 96, 128, (row,))
            >>> Breakdown.from_json_data(b.json_data()) == b
            True
        """
        curve = data.get("curve")
        return cls(
            backend=str(data["backend"]),
            module=str(data["module"]),
            peak_time=int(data["peak_time"]),
            peak_instruction=str(data["peak_instruction"]),
            live_peak_bytes=int(data["live_peak_bytes"]),
            xla_peak_time=data.get("xla_peak_time"),
            xla_peak_bytes=data.get("xla_peak_bytes"),
            held_bytes=int(data["held_bytes"]),
            rows=tuple(row_from_json(row) for row in data["rows"]),
            backward_start=data.get("backward_start"),
            optimizer_start=data.get("optimizer_start"),
            expert_notes=tuple(str(n) for n in data.get("expert_notes", ())),
            curve=None
            if curve is None
            else LiveCurve(
                points=int(curve["points"]),
                times=tuple(int(t) for t in curve["times"]),
                live_bytes=tuple(int(b) for b in curve["live_bytes"]),
                highest_time=int(curve["highest_time"]),
                highest_bytes=int(curve["highest_bytes"]),
            ),
        )


@typechecked
def classify(
    peak: PeakBuffers,
    arguments: Sequence[ArgumentLeaf],
    *,
    held_bytes: int,
    outputs: Sequence[str] = (),
    gradient_types: Collection[tuple[str, tuple[int, ...]]] = (),
    experts: ExpertSteps | None = None,
) -> Breakdown:
    """Each buffer live at XLA's peak with its kind and its path or source.

    The rules are the module's (see its docstring): arguments by their
    :class:`ArgumentLeaf`, then outputs, collectives, activations kept for the
    backward pass, temporaries.

    Args:
        peak: XLA's peak, from :func:`~nnx_introspect._xla.dump.read_peak`.
        arguments: one leaf per entry parameter of the step, any order.
        held_bytes: what the device holds (arguments + outputs + XLA's temp
            buffer - aliased, from ``compiled.memory_analysis()``).
        outputs: a name per top-level output index (``"loss"``, ``"new
            params"``), used in the outputs' labels; unnamed ones show their
            index.
        gradient_types: ``(XLA element type, per-device shape)`` of each
            differentiated parameter (``("f32", (512, 4096))``): a backward
            value of one of them is a ``gradient``.
        experts: a mixture of experts' dispatch and combine steps by their
            user frames (:data:`~nnx_introspect._breakdown.rows.ExpertSteps`,
            from the traced program): the values they make are ``expert
            dispatch`` and ``expert combine``.

    Returns:
        The classified :class:`Breakdown`; its rows add up to XLA's live-range
        peak.

    Raises:
        ValueError: two leaves share a parameter number, an entry parameter
            live at the peak has no leaf, or ``held_bytes`` is negative.
    """
    if held_bytes < 0:
        raise ArgumentError(
            "held_bytes",
            f"`held_bytes` must be a non-negative integer, got {held_bytes}.",
        )
    by_number: dict[int, ArgumentLeaf] = {}
    for leaf in arguments:
        if leaf.parameter in by_number:
            raise ArgumentError(
                "arguments",
                f"`arguments` has two leaves numbered {leaf.parameter}"
                f" ({by_number[leaf.parameter].path!r} and {leaf.path!r}); number"
                " each entry parameter once.",
            )
        by_number[leaf.parameter] = leaf
    missing = sorted(
        {b.parameter for b in peak.buffers if b.parameter is not None} - set(by_number)
    )
    if missing:
        raise ArgumentError(
            "arguments",
            f"`arguments` has no leaf for XLA's entry parameters {missing} (it"
            f" numbers {len(by_number)}); pass one ArgumentLeaf per flattened"
            " argument of the jitted step.",
        )
    backward_begun = backward_has_begun(peak)
    gradients = frozenset(gradient_types)
    links = layout_links(peak)
    rows = tuple(
        classify_buffer(
            replace(buffer, aliases=buffer.aliases + links.get(buffer.instruction, ())),
            by_number,
            outputs,
            backward_begun,
            gradients,
            peak.peak_time,
            experts,
        )
        for buffer in peak.buffers
    )
    return Breakdown(
        backend=peak.backend,
        module=peak.module,
        peak_time=peak.peak_time,
        peak_instruction=peak.peak_instruction,
        live_peak_bytes=peak.peak_bytes,
        held_bytes=held_bytes,
        rows=rows,
        curve=peak.curve,
        xla_peak_time=peak.xla_peak_time,
        xla_peak_bytes=peak.xla_peak_bytes,
        backward_start=peak.phases.backward_start if peak.phases else None,
        optimizer_start=peak.phases.optimizer_start if peak.phases else None,
    )


_CACHE_LAYER = re.compile(r"\blayer_\d+\b")


def _layers_alike(row: BreakdownRow) -> str:
    """A KV cache row's label with its layer number starred (``layer_*/v``).

    Every layer's cache leaf is one row of the table, its count after the
    multiplication sign, as one line of a layer run by every layer is.
    """
    if row.kind not in ("KV cache", "KV cache copy"):
        return row.label
    return _CACHE_LAYER.sub("layer_*", row.label)


def _groups(
    rows: Sequence[BreakdownRow],
    key: Callable[[BreakdownRow], Hashable],
    label: Callable[[BreakdownRow, int], str],
    *,
    with_source: bool = False,
) -> tuple[Group, ...]:
    members: dict[Hashable, list[BreakdownRow]] = {}
    for row in rows:
        members.setdefault(key(row), []).append(row)
    groups = []
    for group in members.values():
        kinds = {row.kind for row in group}
        groups.append(
            Group(
                label=label(group[0], len(group)),
                count=len(group),
                nbytes=sum(row.nbytes for row in group),
                kind=kinds.pop() if len(kinds) == 1 else None,
                source=group[0].source if with_source else None,
            )
        )
    return tuple(sorted(groups, key=lambda g: -g.nbytes))


def _layout_notes(shown: list[list[BreakdownRow]]) -> list[str]:
    """A note per two rows shown that are one tensor in two layouts."""
    number = {row.instruction: n for n, group in enumerate(shown, 1) for row in group}
    pairs = sorted(
        {
            (min(n, number[name]), max(n, number[name]))
            for n, group in enumerate(shown, 1)
            for row in group
            for name in row.aliases
            if number.get(name, n) != n
        }
    )
    return [
        f"Rows {a} and {b} are one tensor in two layouts ({shown[a - 1][0].type_str}"
        f" and {shown[b - 1][0].type_str}): one is a copy, bitcast or reshape of"
        " the other, and each holds its own bytes."
        for a, b in pairs
    ]


def buffer_count(n: int) -> str:
    return f"{n} buffer" if n == 1 else f"{n} buffers"


def percent_text(part: int, whole: int) -> str:
    """``part`` as a whole percent of ``whole``, halves rounded up, in exact ints."""
    if not whole:
        return "-"
    return f"{whole_percent(part, whole)}%"


def _signed_bytes(n: int) -> str:
    return format_bytes(n) if n >= 0 else "-" + format_bytes(-n)


def _curve_json(curve: LiveCurve | None) -> dict[str, Any] | None:
    if curve is None:
        return None
    return {
        "points": curve.points,
        "times": list(curve.times),
        "live_bytes": list(curve.live_bytes),
        "highest_time": curve.highest_time,
        "highest_bytes": curve.highest_bytes,
    }


def _group_json(group: Group) -> dict[str, Any]:
    return {
        "label": group.label,
        "kind": group.kind,
        "count": group.count,
        "bytes": group.nbytes,
        "source": _source_json(group.source),
    }

"""The collectives of a compiled, SPMD-partitioned step, read from its HLO text.

:func:`read_collectives` reads the optimized per-device module XLA compiled
(``compiled.as_text()``, or :func:`compiled_hlo_text`, which works for XLA:CPU,
a deviceless XLA:GPU and XLA:TPU compile alike) and lists every all-gather,
reduce-scatter, all-reduce, all-to-all and collective-permute with its bytes,
the mesh axes its groups span, its source line and how many times one step runs
it. Nothing is compiled or executed here.

What one row is, per backend (as the pinned jaxlib 0.10.2 and libtpu 0.0.52
write their programs):

* a synchronous collective (``all-gather``, XLA:CPU's and XLA:TPU's usual form);
* an asynchronous pair (``all-gather-start`` / ``all-gather-done``, XLA:GPU's
  form): one row, at the start;
* an ``async-start`` wrapping a computation that holds the collective: one row,
  the collective inside;
* XLA:TPU's async collective fusion: the same collective appears in three kinds
  of fusion, one whose root is ``custom-call(..., custom_call_target=
  "AsyncCollectiveStart")``, continuations (a ``continuation_config`` in their
  ``backend_config``) and one whose root is ``AsyncCollectiveDone``: one row,
  at the start;
* XLA:TPU's reduce-scatter fusion (a ``kCustom`` fusion whose computation
  all-reduces and keeps this device's ``dynamic-slice`` of the sum): one
  ``reduce-scatter`` row named after the fusion, since that is what it moves.
  XLA:CPU has no reduce-scatter: it all-reduces and slices afterwards, and the
  row is the all-reduce it runs.

Bytes (``Collective.nbytes``) are per device and execution, and logical:
elements times the element size, without a backend's tile padding; the
**result** of an all-gather (the gathered buffer), an all-reduce, an all-to-all
and a collective-permute, the **operand** (the input) of a reduce-scatter.
Wire bytes are what each device sends by the ring algorithms over groups of
``n``: ``(n-1)/n`` of the bytes for an all-gather, a reduce-scatter and an
all-to-all, ``2(n-1)/n`` for an all-reduce, the bytes for a collective-permute
(:func:`wire_factor`), kept exact as a :class:`~fractions.Fraction`.

Replica-group ids are partition ids: positions in the flat mesh, in
``mesh.devices.flat`` order (the order ``jax.jit`` hands XLA its devices), so a
mesh laid out in any physical device order maps back to its axes. XLA's
``mesh['axis_0'=...]`` form names its own factoring of the devices, not the
mesh's axes (XLA:CPU prints ``mesh['axis_0'=8,'axis_1'=1]`` for a one-axis mesh,
XLA:GPU ``mesh['axis_0'=2,'axis_1'=1,'axis_2'=4]`` for a 2x4 one), so its groups
are expanded to ids first and mapped back to the mesh from there.

A collective inside while loops counts once per iteration: XLA's
``known_trip_count`` (XLA:CPU and XLA:GPU state it), else the trips of a counter
compared ``LT`` with a constant and stepped by a constant from a constant
(XLA:TPU states none); a pipelined collective XLA peels out of its loop is a
row of its own, outside.

Example:
    >>> import jax, jax.numpy as jnp, numpy as np
    >>> from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    >>> mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("data", "fsdp"))
    >>> w = jax.ShapeDtypeStruct((64, 32), jnp.float32,
    ...                          sharding=NamedSharding(mesh, P("fsdp")))
    >>> gather = jax.jit(lambda w: w * 2, out_shardings=NamedSharding(mesh, P()))
    >>> found = read_collectives(
    ...     compiled_hlo_text(gather.lower(w).compile()), (("data", 2), ("fsdp", 4))
    ... )
    >>> [(row.kind, row.axes, row.nbytes, row.wire_bytes) for row in found.rows]
    [('all-gather', ('fsdp',), 8192, Fraction(6144, 1))]
"""

import math
import re
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

import jax
import numpy as np

from nnx_introspect._render import Report, Table, format_bytes
from nnx_introspect._step.dump import (
    _FILE_LOCATION,
    _FILE_NAME,
    _STACK_FRAME,
    DumpFormatError,
    SourceLocation,
    _jaxlib,
    _metadata,
)
from nnx_introspect._typing import typechecked

__all__ = [
    "KINDS",
    "Collective",
    "CollectiveFormatError",
    "CollectiveTotal",
    "Collectives",
    "compiled_hlo_text",
    "read_collectives",
    "wire_factor",
]

KINDS: Final = (
    "all-gather",
    "reduce-scatter",
    "all-reduce",
    "all-to-all",
    "collective-permute",
)
"""The collectives :func:`read_collectives` reports."""

_UNREAD: Final = frozenset(
    f"{op}{suffix}"
    for op in ("ragged-all-to-all", "collective-broadcast", "send", "recv")
    for suffix in ("", "-start", "-done")
)
"""Collective opcodes XLA has that this reader does not count: a program holding
one raises :class:`CollectiveFormatError` rather than report less than it moves."""

_ANY_QUESTION: Final = ("?",)
"""The axes of a collective whose groups are not whole mesh axes."""


class CollectiveFormatError(DumpFormatError):
    """XLA's HLO text holds a collective in a form this code does not read."""


# --- results ---------------------------------------------------------------------


@typechecked
def wire_factor(kind: str, group_size: int) -> Fraction:
    """Bytes each device sends per byte of :attr:`Collective.nbytes`, ring model.

    The standard bandwidth-optimal (ring) algorithms over a group of ``n``
    devices: an all-gather, a reduce-scatter and an all-to-all each send
    ``(n - 1) / n`` of their bytes from every device, an all-reduce (a
    reduce-scatter, then an all-gather) twice that, ``2 (n - 1) / n``; a
    collective-permute sends its buffer once. A group of one sends nothing.

    Args:
        kind: one of :data:`KINDS`.
        group_size: the devices in each group (for a collective-permute, any
            positive number: its factor is 1 whenever a pair moves data).

    Returns:
        The exact factor.

    Raises:
        ValueError: `kind` is not one of :data:`KINDS`, or `group_size` is not
            positive.

    Example:
        >>> wire_factor("all-gather", 8), wire_factor("all-reduce", 8)
        (Fraction(7, 8), Fraction(7, 4))
        >>> wire_factor("collective-permute", 2), wire_factor("all-reduce", 1)
        (Fraction(1, 1), Fraction(0, 1))
    """
    if kind not in KINDS:
        raise ValueError(f"`kind` must be one of {list(KINDS)}, got {kind!r}.")
    if group_size < 1:
        raise ValueError(f"`group_size` must be a positive integer, got {group_size}.")
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
        result_bytes: the result's bytes per device, one execution.
        operand_bytes: the operands' bytes per device, one execution.
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
        source: the innermost user frame, if the metadata carries one.
        stack: every frame, innermost first.
        count: how many times one step runs it: the product of the known trip
            counts of the while loops around it (summed over call sites).
        trip_count_known: whether every loop around it has a known trip count
            (an unknown one counts once).
        loops: the while instructions around it, outermost first (along its
            first call path).
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

    @property
    def nbytes(self) -> int:
        """Every row's bytes over one step (``nbytes * count``), added up."""
        return sum(row.total_bytes for row in self.rows)

    @property
    def wire_bytes(self) -> Fraction:
        """What each device sends over one step, by the ring model."""
        return sum((row.total_wire_bytes for row in self.rows), Fraction(0))

    @property
    def trip_counts_known(self) -> bool:
        """Whether every loop around a collective has a known trip count."""
        return all(row.trip_count_known for row in self.rows)

    def by_kind(self) -> dict[str, CollectiveTotal]:
        """Totals per kind, most wire bytes first."""
        return _totals(self.rows, lambda row: row.kind, lambda key: str(key))

    def by_axis(self) -> dict[tuple[str, ...], CollectiveTotal]:
        """Totals per mesh-axis combination (``("fsdp",)``, ``("?",)``...).

        Most wire bytes first; ``()`` holds groups of one device.
        """
        return _totals(self.rows, lambda row: row.axes, _axes_label)

    def _repr_items(self) -> dict[str, Any]:
        items = super()._repr_items()
        items["mesh_axes"] = dict(self.mesh_axes)
        items["nbytes"] = self.nbytes
        items["wire_bytes"] = _number(self.wire_bytes)
        return items

    def top(self, n: int = 20) -> tuple[Collective, ...]:
        """The ``n`` rows that send the most per step (ties in program order)."""
        if n < 1:
            raise ValueError(f"`n` must be a positive integer, got {n}.")
        return tuple(sorted(self.rows, key=lambda row: -row.total_wire_bytes)[:n])

    def table(self, top: int = 20) -> Table:
        """The ``top`` rows that send the most, then totals by kind and by axes."""
        rows = tuple(
            (
                row.name,
                row.kind,
                _axes_label(row.axes),
                _short_type(row),
                str(row.count) + ("" if row.trip_count_known else "?"),
                format_bytes(row.total_bytes),
                format_bytes(float(row.total_wire_bytes)),
                _where(row.source),
            )
            for row in self.top(top)
        )
        totals = [
            (
                label,
                "",
                "",
                "",
                str(t.count),
                format_bytes(t.nbytes),
                format_bytes(float(t.wire_bytes)),
                "",
            )
            for label, t in [
                *((k, t) for k, t in self.by_kind().items()),
                *((f"over {t.label}", t) for t in self.by_axis().values()),
            ]
        ]
        totals.append(
            (
                "all collectives",
                "",
                "",
                "",
                str(sum(row.count for row in self.rows)),
                format_bytes(self.nbytes),
                format_bytes(float(self.wire_bytes)),
                "",
            )
        )
        notes = [
            "Bytes: the result of an all-gather, all-reduce, all-to-all and "
            "collective-permute, the operand of a reduce-scatter, per device and "
            "step. Wire: what each device sends by the ring algorithms, (n-1)/n "
            "of the bytes for an all-gather, reduce-scatter and all-to-all, "
            "2(n-1)/n for an all-reduce, the whole buffer for a permute.",
        ]
        if not self.trip_counts_known:
            notes.append(
                "A count with '?' is inside a while loop whose trip count XLA "
                "does not state: each unknown loop counts once."
            )
        if any(row.axes == _ANY_QUESTION for row in self.rows):
            notes.append(
                "Axes '?': the groups are not whole mesh axes (a part of an "
                "axis, or groups that differ)."
            )
        if len(self.rows) > len(rows):
            notes.append(f"{len(self.rows) - len(rows)} smaller collectives not shown.")
        mesh = ", ".join(f"{name}={size}" for name, size in self.mesh_axes)
        return Table(
            title=f"Collectives of {self.module} ({mesh})",
            columns=(
                "Collective",
                "Kind",
                "Mesh axes",
                "Type",
                "Count",
                "Bytes",
                "Wire bytes",
                "Source",
            ),
            rows=rows,
            totals=tuple(totals),
            notes=tuple(notes),
            lead=(
                f"{len(self.rows)} collectives, {format_bytes(self.nbytes)} per "
                f"device and step; each device sends "
                f"{format_bytes(float(self.wire_bytes))}.",
            ),
        )

    def json_data(self) -> dict[str, Any]:
        """Every row and the totals, in exact integers.

        A wire figure is an integer when the ring factor divides the bytes
        evenly, else a float.
        """
        return {
            "module": self.module,
            "mesh_axes": [[name, size] for name, size in self.mesh_axes],
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


# --- entry points ----------------------------------------------------------------


@typechecked
def compiled_hlo_text(compiled: jax.stages.Compiled) -> str:
    """The optimized per-device HLO text of a compiled step, on any backend.

    ``compiled.as_text()`` gives it for XLA:CPU, XLA:TPU and a deviceless
    XLA:GPU compile alike (checked with jaxlib 0.10.2, the CUDA plugin 0.10.2
    and libtpu 0.0.52); when it gives none, the executable's one HLO module is
    printed instead.

    Args:
        compiled: ``jax.jit(f).lower(...).compile()``.

    Returns:
        The module's text, starting with ``HloModule``.

    Raises:
        ValueError: the executable has no single HLO module to print.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> text = compiled_hlo_text(jax.jit(jnp.sin).lower(1.0).compile())
        >>> text.startswith("HloModule jit_sin")
        True
    """
    try:
        text = compiled.as_text()
    except Exception:  # a backend without the text: print the module instead
        text = None
    if isinstance(text, str) and text.startswith("HloModule"):
        return text
    executable = compiled.runtime_executable()
    modules = [] if executable is None else executable.hlo_modules()
    if len(modules) != 1:
        raise ValueError(
            f"`compiled` holds {len(modules)} HLO modules, not one; pass the "
            "compiled step of one jax.jit function."
        )
    printed: str = modules[0].to_string()
    return printed


@typechecked
def read_collectives(
    hlo_text: str, mesh_axes: tuple[tuple[str, int], ...]
) -> Collectives:
    r"""Every collective of a compiled SPMD program, its bytes and its mesh axes.

    Reads each all-gather, reduce-scatter, all-reduce, all-to-all and
    collective-permute once (see the module's docstring for how the backends
    write them), with:

    * ``nbytes``: per device and execution, the **result** bytes of an
      all-gather, all-reduce, all-to-all or collective-permute and the
      **operand** (input) bytes of a reduce-scatter;
    * ``wire_bytes``: the ring algorithms' bytes each device sends,
      ``(n-1)/n * nbytes`` for an all-gather, a reduce-scatter and an
      all-to-all, ``2(n-1)/n * nbytes`` for an all-reduce and ``nbytes`` for a
      collective-permute, over groups of ``n`` devices (:func:`wire_factor`);
    * ``axes``: the mesh axes each group spans, from the replica groups in any
      form XLA prints them (``{{0,1},{2,3}}``, ``[2,4]<=[8]``,
      ``[4,2]<=[2,4]T(1,0)`` or ``mesh['axis_0'=2,'axis_1'=4] {'axis_0'}``,
      whose ``axis_i`` are XLA's own factoring of the devices, not the mesh's
      axes: the groups are expanded to partition ids and mapped back);
    * ``count``: the product of the known trip counts of the while loops around
      it (XLA's ``known_trip_count``, or for a loop without one, XLA:TPU's, a
      counter compared ``LT`` with a constant, stepped by a constant from a
      constant); a loop with neither counts once and sets
      ``trip_count_known=False``. Collectives in a conditional's branches count
      as if every branch ran.

    Args:
        hlo_text: the optimized module (``compiled.as_text()`` or
            :func:`compiled_hlo_text`).
        mesh_axes: the mesh it was compiled for, ``(name, size)`` per axis in
            ``mesh.devices`` order (``tuple(mesh.shape.items())``); their
            product is the program's ``num_partitions``.

    Returns:
        The :class:`Collectives`, rows in the program's order.

    Raises:
        ValueError: `hlo_text` is not an HLO module, or `mesh_axes` is empty,
            repeats a name, has a size below 1 or does not multiply to the
            program's partitions.
        CollectiveFormatError: a collective (or the module around it) is in a
            form this code does not read, or is one it does not count
            (``ragged-all-to-all``, ``collective-broadcast``, ``send``/``recv``).

    Example:
        >>> text = "\n".join([
        ...     "HloModule jit_f, num_partitions=4",
        ...     "",
        ...     "ENTRY %main (p: f32[8]) -> f32[32] {",
        ...     "  %p = f32[8]{0} parameter(0)",
        ...     "  ROOT %ag = f32[32]{0} all-gather(%p), channel_id=1, replica_groups="
        ...     "[1,4]<=[4], dimensions={0}, use_global_device_ids=true",
        ...     "}",
        ... ])
        >>> (row,) = read_collectives(text, (("data", 4),)).rows
        >>> row.nbytes, row.group_size, row.axes, row.wire_bytes
        (128, 4, ('data',), Fraction(96, 1))
    """
    _check_mesh_axes(mesh_axes)
    module = _parse_module(hlo_text)
    partitions = math.prod(size for _, size in mesh_axes)
    if partitions != module.num_partitions:
        raise ValueError(
            f"`mesh_axes` {dict(mesh_axes)} has {partitions} devices but the "
            f"program {module.name} was partitioned for {module.num_partitions}; "
            "pass the axes of the mesh it was compiled on."
        )
    if module.replica_count != 1:
        raise CollectiveFormatError(
            f"{module.name} has replica_count={module.replica_count}: this code "
            "reads SPMD-partitioned programs of one replica (jax.jit's), where a "
            "replica group's ids are partitions."
        )
    calls = _call_counts(module)
    rows: list[Collective] = []
    for instructions in module.computations.values():
        for instruction in instructions:
            row = _collective(instruction, module, calls, mesh_axes)
            if row is not None:
                rows.append(row)
    _check_pairs(module)
    _check_tpu_fusions(module)
    return Collectives(module=module.name, mesh_axes=mesh_axes, rows=tuple(rows))


def _check_mesh_axes(mesh_axes: tuple[tuple[str, int], ...]) -> None:
    names = [name for name, _ in mesh_axes]
    if not mesh_axes or len(set(names)) != len(names):
        raise ValueError(
            "`mesh_axes` must name each mesh axis once, as (name, size) pairs such "
            f"as (('data', 2), ('fsdp', 4)), got {mesh_axes!r}."
        )
    bad = [(name, size) for name, size in mesh_axes if size < 1]
    if bad:
        raise ValueError(f"`mesh_axes` sizes must be positive integers, got {bad!r}.")


# --- the module text -------------------------------------------------------------


@dataclass(frozen=True)
class _Instruction:
    name: str
    computation: str
    shape: str
    opcode: str
    operands: tuple[str, ...]
    operand_text: str
    attributes: dict[str, str]
    text: str
    root: bool


@dataclass(frozen=True)
class _Module:
    name: str
    num_partitions: int
    replica_count: int
    entry: str
    computations: dict[str, list[_Instruction]]
    instructions: dict[str, _Instruction]
    users: dict[str, list[_Instruction]]
    callers: dict[str, list[_Instruction]]
    frames: dict[int, tuple[SourceLocation, ...]]


_HEADER = re.compile(r"^HloModule (\S+?),?(?: |$)")
_COMPUTATION = re.compile(r"^(ENTRY )?%(\S+) \(.*\) -> .*\{$")
_INSTRUCTION = re.compile(r"^\s+(ROOT )?%(\S+) = (.*)$")
_NAME = re.compile(r"%([A-Za-z0-9_.\-]+)")
_OPCODE = re.compile(r" ([a-z][a-z0-9\-_]*)\(")
_ATTRIBUTE_START = re.compile(r", ([a-z_][a-z0-9_]*)=")
_SECTIONS = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")


def _format_error(what: str, line: str) -> CollectiveFormatError:
    shown = line.strip()
    shown = shown if len(shown) <= 400 else shown[:397] + "..."
    return CollectiveFormatError(
        f"XLA's HLO text holds {what} in a form this code does not read (written "
        f"for jaxlib 0.10.2 / libtpu 0.0.52; installed jaxlib {_jaxlib()}): "
        f"{shown!r}. No collective is skipped, so none is reported."
    )


def _parse_module(text: str) -> _Module:
    lines = text.splitlines()
    header = _HEADER.match(lines[0]) if lines else None
    if header is None:
        raise ValueError(
            "`hlo_text` must be an XLA HLO module (its first line 'HloModule "
            f"...'), got {text[:60]!r}; pass compiled_hlo_text(compiled)."
        )
    if sum(line.startswith("HloModule ") for line in lines) != 1:
        raise ValueError(
            "`hlo_text` holds several HLO modules; pass one module's text."
        )
    partitions = re.search(r"\bnum_partitions=(\d+)", lines[0])
    replicas = re.search(r"\breplica_count=(\d+)", lines[0])
    computations: dict[str, list[_Instruction]] = {}
    instructions: dict[str, _Instruction] = {}
    entry = ""
    current: str | None = None
    sections: dict[str, list[str]] = {}
    section = ""
    for line in lines[1:]:
        if current is None:
            if line in _SECTIONS:
                section = line
                sections[section] = []
                continue
            if not line.strip():
                section = ""
                continue
            if section:
                sections[section].append(line)
                continue
            found = _COMPUTATION.match(line)
            if found is None:
                raise _format_error("a computation header", line)
            current = found[2]
            computations[current] = []
            if found[1]:
                entry = current
            continue
        if line == "}":
            current = None
            continue
        instruction = _instruction(line, current)
        computations[current].append(instruction)
        instructions[instruction.name] = instruction
    if not entry:
        raise _format_error("an ENTRY computation", lines[0])
    users: dict[str, list[_Instruction]] = {}
    callers: dict[str, list[_Instruction]] = {}
    for instruction in instructions.values():
        for operand in instruction.operands:
            users.setdefault(operand, []).append(instruction)
        for called in _called(instruction):
            callers.setdefault(called, []).append(instruction)
    return _Module(
        name=header[1],
        num_partitions=int(partitions[1]) if partitions else 1,
        replica_count=int(replicas[1]) if replicas else 1,
        entry=entry,
        computations=computations,
        instructions=instructions,
        users=users,
        callers=callers,
        frames=_frames(sections),
    )


def _instruction(line: str, computation: str) -> _Instruction:
    found = _INSTRUCTION.match(line)
    if found is None:
        raise _format_error("an instruction", line)
    rest = found[3]
    end = _shape_end(rest)
    opcode = _OPCODE.match(rest, end)
    if opcode is None:
        raise _format_error("an instruction's opcode", line)
    start = opcode.end()
    close = _closing(rest, start - 1)
    if close < 0:
        raise _format_error("an instruction's operands", line)
    operand_text = rest[start:close]
    return _Instruction(
        name=found[2],
        computation=computation,
        shape=rest[:end],
        opcode=opcode[1],
        operands=tuple(_NAME.findall(re.sub(r"/\*.*?\*/", "", operand_text))),
        operand_text=operand_text,
        attributes=_attributes(rest[close + 1 :]),
        text=line,
        root=bool(found[1]),
    )


def _shape_end(text: str) -> int:
    """Where an instruction's shape (perhaps a nested tuple) ends."""
    depth = 0
    for at, char in enumerate(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == " " and depth == 0:
            return at
    return len(text)


def _closing(text: str, start: int) -> int:
    """The index of the bracket closing the one at ``start``, or -1."""
    depth = 0
    quote = ""
    at = start
    while at < len(text):
        char = text[at]
        if quote:
            if char == "\\":
                at += 1
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth == 0:
                return at
        at += 1
    return -1


def _attributes(text: str) -> dict[str, str]:
    """``, key=value`` pairs after the operands; values may nest and quote."""
    out: dict[str, str] = {}
    at = 0
    while at < len(text):
        found = _ATTRIBUTE_START.match(text, at)
        if found is None:
            break
        key, at = found[1], found.end()
        depth, quote, start = 0, "", at
        while at < len(text):
            char = text[at]
            if quote:
                if char == "\\":
                    at += 1
                elif char == quote:
                    quote = ""
            elif char in "\"'":
                quote = char
            elif char in "([{":
                depth += 1
            elif char in ")]}":
                depth -= 1
            elif depth == 0 and _ATTRIBUTE_START.match(text, at):
                break
            at += 1
        out[key] = text[start:at]
    return out


def _called(instruction: _Instruction) -> list[str]:
    """The computations ``instruction`` calls (async halves after the start: none)."""
    if instruction.opcode in ("async-update", "async-done"):
        return []
    names = []
    for key, value in instruction.attributes.items():
        if key in (
            "calls",
            "body",
            "condition",
            "to_apply",
            "branch_computations",
            "true_computation",
            "false_computation",
            "called_computations",
        ):
            names.extend(_NAME.findall(value))
    return names


def _frames(sections: dict[str, list[str]]) -> dict[int, tuple[SourceLocation, ...]]:
    """Stack frames by id (innermost first), as dump.py reads them from a dump."""
    tables: dict[str, dict[str, str]] = {}
    for name in ("FileNames", "FunctionNames"):
        table = {}
        for line in sections.get(name, []):
            row = _FILE_NAME.match(line)
            if row is None:
                raise _format_error("a numbered name", line)
            table[row[1]] = row[2]
        tables[name] = table
    locations: dict[int, SourceLocation] = {}
    for line in sections.get("FileLocations", []):
        row = _FILE_LOCATION.match(line)
        if (
            row is None
            or row[2] not in tables["FileNames"]
            or row[3] not in tables["FunctionNames"]
        ):
            raise _format_error("a file location", line)
        locations[int(row[1])] = SourceLocation(
            tables["FileNames"][row[2]], int(row[4]), tables["FunctionNames"][row[3]]
        )
    parents: dict[int, tuple[int, int | None]] = {}
    for line in sections.get("StackFrames", []):
        row = _STACK_FRAME.match(line)
        if row is None or int(row[2]) not in locations:
            raise _format_error("a stack frame", line)
        parents[int(row[1])] = (int(row[2]), int(row[3]) if row[3] else None)
    frames: dict[int, tuple[SourceLocation, ...]] = {}
    for frame in parents:
        stack, seen, at = [], set(), frame
        while at in parents and at not in seen:
            seen.add(at)
            location, parent = parents[at]
            stack.append(locations[location])
            # a frame's parent is printed as its id + 1, 1 for none (dump.py)
            at = parent - 1 if parent is not None else 0
        frames[frame] = tuple(stack)
    return frames


# --- shapes and bytes ------------------------------------------------------------

_BITS: Final = {
    "pred": 8,
    **{t: 8 for t in ("s8", "u8")},
    **{t: 16 for t in ("s16", "u16", "f16", "bf16")},
    **{t: 32 for t in ("s32", "u32", "f32")},
    **{t: 64 for t in ("s64", "u64", "f64", "c64")},
    "c128": 128,
    **{t: 4 for t in ("s4", "u4", "f4e2m1fn")},
    **{t: 2 for t in ("s2", "u2")},
    **{t: 1 for t in ("s1", "u1")},
}
_ARRAY = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\](\{[^}]*\})?")


def _arrays(shape: str, line: str) -> list[tuple[str, tuple[int, ...], int]]:
    """``(dtype, dims, bytes)`` of each array of an XLA shape (tuples flattened)."""
    shape = re.sub(r"/\*.*?\*/", "", shape)
    out = []
    for item in re.finditer(r"[a-z][a-z0-9]*\[[^\]]*\](?:\{[^}]*\})?|token\b", shape):
        if item[0] == "token":
            continue
        array = _ARRAY.fullmatch(item[0])
        if array is None:  # pragma: no cover - the pattern above matched it
            raise _format_error("an array shape", line)
        dtype, dims_text, layout = array[1], array[2], array[3] or ""
        bits = 8 if dtype.startswith("f8") else _BITS.get(dtype)
        if bits is None:
            raise _format_error(f"an element type it knows ({dtype!r})", line)
        dims = tuple(int(d) for d in dims_text.replace("<=", "").split(",") if d)
        elements = math.prod(dims)
        packed = re.search(r"E\((\d+)\)", layout)
        if bits < 8:
            # sub-byte types take a byte each unless the layout packs them
            bits = int(packed[1]) if packed else 8
        out.append((dtype, dims, (elements * bits + 7) // 8))
    if not out and re.sub(r"[()\s,]|token(\[\])?", "", shape):
        raise _format_error("an array shape", line)
    return out


def _bytes(shape: str, line: str) -> int:
    return sum(nbytes for _, _, nbytes in _arrays(shape, line))


# --- loops -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Calls:
    count: int
    known: bool
    loops: tuple[str, ...]


def _call_counts(module: _Module) -> dict[str, _Calls]:
    """How many times one run of ENTRY runs each reachable computation."""
    done: dict[str, _Calls] = {}
    active: set[str] = set()

    def visit(name: str) -> _Calls:
        if name in done:
            return done[name]
        if name == module.entry:
            done[name] = _Calls(1, True, ())
            return done[name]
        if name in active:
            raise _format_error("a call graph without cycles", f"computation {name}")
        active.add(name)
        count, known, loops = 0, True, None
        for caller in module.callers.get(name, []):
            if caller.opcode in ("async-update", "async-done"):
                continue
            outer = visit(caller.computation)
            factor, here_known, here_loops = 1, True, outer.loops
            if caller.opcode == "while" and name in (
                _NAME.findall(caller.attributes.get("body", ""))
                + _NAME.findall(caller.attributes.get("condition", ""))
            ):
                trips = _trip_count(caller, module)
                here_known = trips is not None
                factor = trips if trips is not None else 1
                here_loops = (*outer.loops, caller.name)
            count += outer.count * factor
            known = known and outer.known and here_known
            loops = here_loops if loops is None else loops
        active.discard(name)
        done[name] = _Calls(count, known, loops or ())
        return done[name]

    for name in module.computations:
        if name == module.entry or module.callers.get(name):
            visit(name)
    return done


_KNOWN_TRIPS = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')


def _trip_count(loop: _Instruction, module: _Module) -> int | None:
    """XLA's ``known_trip_count``, else a constant-bounded counter's trips."""
    stated = _KNOWN_TRIPS.search(loop.attributes.get("backend_config", ""))
    if stated:
        return int(stated[1])
    return _counter_trips(loop, module)


def _through_copies(name: str, module: _Module) -> _Instruction | None:
    seen = set()
    at = module.instructions.get(name)
    while at is not None and at.opcode in ("copy", "bitcast") and at.name not in seen:
        seen.add(at.name)
        at = module.instructions.get(at.operands[0]) if at.operands else None
    return at


def _constant(name: str, module: _Module) -> int | None:
    at = _through_copies(name, module)
    if at is None or at.opcode != "constant":
        return None
    try:
        return int(at.operand_text.strip())
    except ValueError:
        return None


def _tuple_index(name: str, module: _Module) -> int | None:
    """``i`` when ``name`` is ``get-tuple-element(<the parameter>), index=i``."""
    at = _through_copies(name, module)
    if at is None or at.opcode != "get-tuple-element" or not at.operands:
        return None
    source = module.instructions.get(at.operands[0])
    if source is None or source.opcode != "parameter":
        return None
    index = at.attributes.get("index", "")
    return int(index) if index.isdigit() else None


def _counter_trips(loop: _Instruction, module: _Module) -> int | None:
    """Trips of ``for (i = K; i < N; i += c)`` written as XLA:TPU leaves it.

    The condition's root compares a tuple element ``i`` of its parameter
    ``LT`` a constant ``N``; the body's root tuple sets element ``i`` to itself
    plus a positive constant ``c``; the loop's initial tuple holds a constant
    ``K`` there (copies allowed anywhere). Anything else: ``None``.
    """
    condition = _NAME.findall(loop.attributes.get("condition", ""))
    body = _NAME.findall(loop.attributes.get("body", ""))
    if len(condition) != 1 or len(body) != 1 or len(loop.operands) != 1:
        return None
    cond_root = _root(module, condition[0])
    body_root = _root(module, body[0])
    start = _through_copies(loop.operands[0], module)
    if (
        cond_root is None
        or body_root is None
        or start is None
        or cond_root.opcode != "compare"
        or cond_root.attributes.get("direction") != "LT"
        or len(cond_root.operands) != 2
        or body_root.opcode != "tuple"
        or start.opcode != "tuple"
    ):
        return None
    index = _tuple_index(cond_root.operands[0], module)
    bound = _constant(cond_root.operands[1], module)
    if index is None or bound is None:
        return None
    if index >= len(body_root.operands) or index >= len(start.operands):
        return None
    first = _constant(start.operands[index], module)
    step_of = _through_copies(body_root.operands[index], module)
    if first is None or step_of is None or step_of.opcode != "add":
        return None
    if len(step_of.operands) != 2:
        return None
    a, b = step_of.operands
    if _tuple_index(a, module) == index:
        step = _constant(b, module)
    elif _tuple_index(b, module) == index:
        step = _constant(a, module)
    else:
        return None
    if step is None or step <= 0:
        return None
    return max(0, -((first - bound) // step))


def _root(module: _Module, computation: str) -> _Instruction | None:
    found = [i for i in module.computations.get(computation, []) if i.root]
    return found[0] if len(found) == 1 else None


# --- one collective ----------------------------------------------------------------


def _base(opcode: str) -> str:
    for suffix in ("-start", "-done"):
        if opcode.endswith(suffix):
            return opcode[: -len(suffix)]
    return opcode


def _collective(
    instruction: _Instruction,
    module: _Module,
    calls: dict[str, _Calls],
    mesh_axes: tuple[tuple[str, int], ...],
) -> Collective | None:
    opcode = instruction.opcode
    if opcode in _UNREAD:
        raise _format_error(
            f"a {opcode} (not one of the collectives this code counts: "
            f"{', '.join(KINDS)})",
            instruction.text,
        )
    kind = _base(opcode)
    if kind not in KINDS:
        return None
    if opcode.endswith("-done"):
        return None  # counted at its start (_check_pairs: one done per start)
    if instruction.computation not in calls:
        raise _format_error(
            "a collective in a computation no instruction calls", instruction.text
        )
    named = instruction
    form = "sync"
    result_shape = instruction.shape
    callers = [
        c
        for c in module.callers.get(instruction.computation, [])
        if c.opcode not in ("async-update", "async-done")
    ]
    fusions = [c for c in callers if c.opcode == "fusion"]
    if opcode.endswith("-start"):
        form, result_shape = "async", _start_result(instruction, module)
    elif fusions:
        root = _root(module, instruction.computation)
        target = root.attributes.get("custom_call_target", "") if root else ""
        if target == '"AsyncCollectiveDone"':
            return None  # the done half of XLA:TPU's async collective fusion
        if any(
            "continuation_config" in f.attributes.get("backend_config", "")
            for f in fusions
        ):
            return None  # a continuation of the same collective
        form = (
            "TPU async collective fusion"
            if (target == '"AsyncCollectiveStart"')
            else "fused"
        )
        scatter = _scatter_fusion(instruction, fusions, module)
        if scatter is not None:
            kind, named, form = "reduce-scatter", scatter, "TPU reduce-scatter fusion"
            result_shape = scatter.shape
    elif any(c.opcode == "async-start" for c in callers):
        form = "async wrapper"
    count = calls[instruction.computation]
    groups, pairs = _groups(instruction, module.num_partitions)
    result = _arrays(result_shape, instruction.text)
    operands = [
        array
        for name in instruction.operands
        for array in _arrays(
            _operand_shape(name, module, instruction), instruction.text
        )
    ]
    counted = operands if kind == "reduce-scatter" else result
    metadata = _metadata(named.text)
    stack: tuple[SourceLocation, ...] = ()
    if "stack_frame_id" in metadata:
        frame = int(metadata["stack_frame_id"])
        if frame not in module.frames:
            raise _format_error(f"the stack frame {frame}", named.text)
        stack = module.frames[frame]
    elif "source_file" in metadata and "source_line" in metadata:
        stack = (
            SourceLocation(metadata["source_file"], int(metadata["source_line"]), ""),
        )
    channel = instruction.attributes.get("channel_id")
    return Collective(
        kind=kind,
        name=named.name,
        opcode=named.opcode,
        form=form,
        computation=named.computation,
        nbytes=sum(nbytes for _, _, nbytes in counted),
        result_bytes=sum(nbytes for _, _, nbytes in result),
        operand_bytes=sum(nbytes for _, _, nbytes in operands),
        dtypes=tuple(dtype for dtype, _, _ in counted),
        shapes=tuple(dims for _, dims, _ in counted),
        group_size=max((len(g) for g in groups), default=1),
        groups=groups,
        axes=_axes(groups, mesh_axes),
        source_target_pairs=pairs,
        channel_id=int(channel) if channel and channel.isdigit() else None,
        op_name=metadata.get("op_name"),
        source=stack[0] if stack else None,
        stack=stack,
        count=count.count,
        trip_count_known=count.known,
        loops=count.loops,
    )


def _start_result(start: _Instruction, module: _Module) -> str:
    """The result shape of an async ``-start``, read from its own shape.

    An all-reduce-start's shape is its result; the other starts' are tuples
    whose second element is the result (``(operands, results)``, then a
    collective-permute's context words). A done that uses the start directly
    must hold as many bytes; a done reached through a loop's tuple (a
    pipelined collective) is not needed.
    """
    if start.opcode == "all-reduce-start":
        own = start.shape
    else:
        elements = _tuple_elements(start.shape)
        if len(elements) < 2:
            raise _format_error(f"a {start.opcode} of (operands, results)", start.text)
        own = elements[1]
    done = f"{_base(start.opcode)}-done"
    for user in module.users.get(start.name, []):
        if user.opcode == done and _bytes(user.shape, user.text) != _bytes(
            own, start.text
        ):
            raise _format_error(f"a {done} of its start's result", user.text)
    return own


def _tuple_elements(shape: str) -> list[str]:
    """The top-level elements of a tuple shape (``[]`` for an array)."""
    shape = re.sub(r"/\*.*?\*/", "", shape).strip()
    if not shape.startswith("("):
        return []
    elements, depth, start = [], 0, 1
    for at, char in enumerate(shape):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth == 0:
                elements.append(shape[start:at].strip())
        elif char == "," and depth == 1:
            elements.append(shape[start:at].strip())
            start = at + 1
    return [e for e in elements if e]


def _check_pairs(module: _Module) -> None:
    """As many ``X-done`` as ``X-start`` for each kind, or the reading is off."""
    for kind in KINDS:
        starts = dones = 0
        for instruction in module.instructions.values():
            starts += instruction.opcode == f"{kind}-start"
            dones += instruction.opcode == f"{kind}-done"
        if starts != dones:
            raise _format_error(
                f"one {kind}-done per {kind}-start (found {starts} and {dones})",
                module.name,
            )


def _operand_shape(name: str, module: _Module, at: _Instruction) -> str:
    operand = module.instructions.get(name)
    if operand is None:
        raise _format_error(f"the operand %{name}", at.text)
    return operand.shape


def _scatter_fusion(
    instruction: _Instruction, fusions: list[_Instruction], module: _Module
) -> _Instruction | None:
    """XLA:TPU's reduce-scatter fusion around ``instruction``, if it is one.

    A ``kCustom`` fusion whose computation all-reduces and uses the sum only
    through ``dynamic-slice``s (each device keeps its share), with a result of
    ``1 / n`` of the all-reduce's bytes over groups of ``n``.
    """
    if instruction.opcode != "all-reduce" or len(fusions) != 1:
        return None
    fusion = fusions[0]
    if fusion.attributes.get("kind") != "kCustom":
        return None
    users = module.users.get(instruction.name, [])
    slices = []
    for user in users:
        if user.opcode == "get-tuple-element":
            slices.extend(module.users.get(user.name, []))
        else:
            slices.append(user)
    if not slices or any(s.opcode != "dynamic-slice" for s in slices):
        return None
    groups, _ = _groups(instruction, module.num_partitions)
    size = max((len(g) for g in groups), default=1)
    reduced = _bytes(instruction.shape, instruction.text)
    if _bytes(fusion.shape, fusion.text) * size != reduced:
        return None
    return fusion


def _check_tpu_fusions(module: _Module) -> None:
    """As many XLA:TPU async collective starts as dones, or the reading is off."""
    targets: dict[str, int] = {}
    for name in module.computations:
        root = _root(module, name)
        if root is None or root.opcode != "custom-call":
            continue
        target = root.attributes.get("custom_call_target", "")
        if target in ('"AsyncCollectiveStart"', '"AsyncCollectiveDone"'):
            callers = [c for c in module.callers.get(name, []) if c.opcode == "fusion"]
            targets[target] = targets.get(target, 0) + len(callers)
    starts = targets.get('"AsyncCollectiveStart"', 0)
    dones = targets.get('"AsyncCollectiveDone"', 0)
    if starts != dones:
        raise _format_error(
            f"as many AsyncCollectiveStart fusions as AsyncCollectiveDone ones "
            f"(found {starts} and {dones})",
            module.name,
        )


# --- groups and axes -------------------------------------------------------------

_EXPLICIT = re.compile(r"\{(?:\{[\d,]*\}(?:,\{[\d,]*\})*)?\}")
_IOTA = re.compile(r"\[(\d+),(\d+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")
_MESH_ONLY = re.compile(r"mesh\[(?P<axes>[^\]]*)\] (?P<group>\{[^}]*\})")
_MESH = re.compile(
    r"mesh\[(?P<axes>[^\]]*)\] \((?:\[(?P<iota>[\d,]+)\](?:T\((?P<perm>[\d,]+)\))?"
    r"|(?P<list>(?:\[[\d,]+\])?[\d,]+))\) (?P<group>\{[^}]*\})"
)
_MESH_AXIS = re.compile(r"'([^']*)'=(\d+)")
_MESH_GROUP = re.compile(r"'([^']*)'(?::\((\d+)\)(\d+))?")


def _groups(
    instruction: _Instruction, partitions: int
) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, int], ...] | None]:
    """The groups as partition ids, and a permute's pairs."""
    attributes = instruction.attributes
    cross_replica = "channel_id" not in attributes
    if cross_replica and attributes.get("use_global_device_ids") == "true":
        raise _format_error(
            "global device ids with a channel id (XLA requires one)", instruction.text
        )
    if _base(instruction.opcode) == "collective-permute":
        text = attributes.get("source_target_pairs")
        if text is None or not _EXPLICIT.fullmatch(text):
            raise _format_error("source_target_pairs={{s,t},...}", instruction.text)
        pairs = tuple((int(s), int(t)) for s, t in re.findall(r"\{(\d+),(\d+)\}", text))
        if cross_replica:  # replica ids; one replica: each device alone
            return _alone(pairs, instruction, partitions), pairs
        _check_ids([i for pair in pairs for i in pair], partitions, instruction)
        return _components(pairs), pairs
    text = attributes.get("replica_groups")
    if text is None:
        raise _format_error("replica_groups=", instruction.text)
    if text.startswith("mesh["):
        groups = _mesh_groups(text, attributes.get("device_ids"), instruction)
    elif _EXPLICIT.fullmatch(text):
        groups = [
            tuple(int(i) for i in group.split(",") if i)
            for group in re.findall(r"\{([\d,]*)\}", text[1:-1])
        ]
    elif found := _IOTA.fullmatch(text):
        dims = [int(d) for d in found[3].split(",")]
        perm = [int(p) for p in found[4].split(",")] if found[4] else None
        ids = np.arange(math.prod(dims)).reshape(dims)
        ids = ids.transpose(perm) if perm else ids
        groups = [tuple(int(i) for i in g) for g in ids.reshape(int(found[1]), -1)]
        if len(groups[0]) != int(found[2]):
            raise _format_error("an iota replica group list", instruction.text)
    else:
        raise _format_error("replica groups", instruction.text)
    if cross_replica:
        flat = [i for g in groups for i in g]
        return _alone([(i, i) for i in flat], instruction, partitions), None
    if not groups or groups == [()]:
        groups = [tuple(range(partitions))]
    _check_ids([i for g in groups for i in g], partitions, instruction)
    return tuple(groups), None


def _alone(
    pairs: Sequence[tuple[int, int]], instruction: _Instruction, partitions: int
) -> tuple[tuple[int, ...], ...]:
    """Cross-replica groups with one replica: ids 0 only; each device alone."""
    if any(i != 0 for pair in pairs for i in pair):
        raise _format_error("replica ids of a one-replica program", instruction.text)
    return tuple((p,) for p in range(partitions))


def _check_ids(ids: Sequence[int], partitions: int, instruction: _Instruction) -> None:
    if any(i >= partitions for i in ids):
        raise _format_error(
            f"partition ids below num_partitions={partitions}", instruction.text
        )


def _components(pairs: Sequence[tuple[int, int]]) -> tuple[tuple[int, ...], ...]:
    """The sets of devices a permute's pairs connect (each sorted)."""
    parent: dict[int, int] = {}

    def find(i: int) -> int:
        parent.setdefault(i, i)
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for source, target in pairs:
        parent[find(source)] = find(target)
    members: dict[int, list[int]] = {}
    for i in sorted(parent):
        members.setdefault(find(i), []).append(i)
    return tuple(tuple(group) for group in members.values())


def _mesh_groups(
    text: str, device_ids: str | None, instruction: _Instruction
) -> list[tuple[int, ...]]:
    """XLA's ``mesh[...] {axes}`` replica groups, expanded as XLA expands them.

    XLA's ``MeshAxesReplicaGroupList``: the mesh's device array (iota, or the
    ``device_ids``) reshaped so each named (sub-)axis is a dimension, the named
    ones moved last in the order listed, then cut into groups.
    """
    # without device ids: "mesh[...] {axes}"; with them, XLA prints
    # "mesh[...], device_ids=(...) {axes}", read as two attributes
    found = (
        _MESH_ONLY.fullmatch(text)
        if device_ids is None
        else _MESH.fullmatch(text + " " + device_ids)
    )
    if found is None:
        raise _format_error("a mesh replica group list", instruction.text)
    axes = [(name, int(size)) for name, size in _MESH_AXIS.findall(found["axes"])]
    if not axes or ",".join(f"'{n}'={s}" for n, s in axes) != found["axes"]:
        raise _format_error("a mesh's axes", instruction.text)
    sizes = [size for _, size in axes]
    total = math.prod(sizes)
    if device_ids is None:
        devices = np.arange(total)
    elif found["iota"]:
        dims = [int(d) for d in found["iota"].split(",")]
        perm = [int(p) for p in found["perm"].split(",")] if found["perm"] else None
        devices = np.arange(math.prod(dims)).reshape(dims)
        devices = (devices.transpose(perm) if perm else devices).reshape(-1)
    else:
        listed = re.sub(r"^\[[\d,]+\]", "", found["list"])
        devices = np.array([int(i) for i in listed.split(",") if i])
    selected = found["group"]
    if devices.size != total or sorted(devices.tolist()) != list(range(total)):
        raise _format_error("a mesh's device ids", instruction.text)
    inner = selected[1:-1]
    refs = [
        (name, int(pre) if pre else None, int(size) if size else None)
        for name, pre, size in _MESH_GROUP.findall(inner)
    ]
    written = ",".join(
        f"'{n}'" + (f":({p}){s}" if p is not None else "") for n, p, s in refs
    )
    index = {name: i for i, (name, _) in enumerate(axes)}
    if written != inner or any(name not in index for name, _, _ in refs):
        raise _format_error("a mesh's grouped axes", instruction.text)
    # each mesh dimension split as its (sub-)axes need; the grouped parts found
    reshape: list[int] = []
    grouped: list[int] = [0] * len(refs)
    for dim, (_, size) in enumerate(axes):
        mine = [(k, ref) for k, ref in enumerate(refs) if index[ref[0]] == dim]
        if not mine:
            reshape.append(size)
            continue
        if any(ref[1] is None for _, ref in mine):
            if len(mine) != 1:
                raise _format_error("a mesh's grouped axes", instruction.text)
            grouped[mine[0][0]] = len(reshape)
            reshape.append(size)
            continue
        product = 1
        for k, (_, pre, sub) in sorted(mine, key=lambda item: item[1][1] or 0):
            assert pre is not None and sub is not None
            if pre % product or size % (pre * sub):
                raise _format_error("a mesh's sub-axes", instruction.text)
            if pre != product:
                reshape.append(pre // product)
            grouped[k] = len(reshape)
            reshape.append(sub)
            product = pre * sub
        if product != size:
            reshape.append(size // product)
    rest = [d for d in range(len(reshape)) if d not in grouped]
    arranged = devices.reshape(reshape).transpose(rest + grouped)
    group_size = math.prod(reshape[d] for d in grouped)
    return [tuple(int(i) for i in g) for g in arranged.reshape(-1, group_size)]


def _axes(
    groups: tuple[tuple[int, ...], ...], mesh_axes: tuple[tuple[str, int], ...]
) -> tuple[str, ...]:
    """The mesh axes every group spans whole, or ``("?",)``."""
    sizes = [size for _, size in mesh_axes]
    spans = set()
    for group in groups:
        if len(set(group)) != len(group):
            return _ANY_QUESTION
        coords = np.array(np.unravel_index(list(group), sizes)).T
        varying = tuple(
            d for d in range(len(sizes)) if len(set(coords[:, d].tolist())) > 1
        )
        if len(group) != math.prod(sizes[d] for d in varying):
            return _ANY_QUESTION
        spans.add(varying)
    if len(spans) != 1:
        return () if not spans else _ANY_QUESTION
    (span,) = spans
    return tuple(mesh_axes[d][0] for d in span)


# --- rendering helpers -------------------------------------------------------------


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


def _source_json(source: SourceLocation | None) -> dict[str, Any] | None:
    if source is None:
        return None
    return {"file": source.file, "line": source.line, "function": source.function}


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
    }


def _total_json(total: CollectiveTotal) -> dict[str, Any]:
    return {
        "label": total.label,
        "instructions": total.instructions,
        "count": total.count,
        "bytes": total.nbytes,
        "wire_bytes": _number(total.wire_bytes),
    }

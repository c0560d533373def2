"""The bytes a compiled program moves, instruction by instruction.

XLA's ``cost_analysis()`` gives one total of bytes accessed. To say *which*
lines of a model move the bytes a program moves beyond reading its arguments
once, :func:`program_traffic` counts them per instruction of the optimized
program, by the rule XLA's cost analysis follows: an instruction reads its
operands and writes its outputs, wherever they live (an on-chip copy made by
XLA:TPU's memory-space assignment, ``S(1)``, counts as XLA counts it), with
these refinements:

* an asynchronous copy (``copy-start``, ``slice-start``) reads its source and
  writes its destination once;
* an update in place (a ``dynamic-update-slice`` or ``scatter``, alone or as
  a fusion's root, whose output is its first operand's buffer) reads and
  writes the update, not the buffer it lands in;
* a fusion reads of an operand only what it slices (``dynamic-slice``,
  ``slice``, ``gather``) when slicing is all it does with it;
* a loop's body is counted once per trip
  (:func:`~nnx_introspect._xla.hlo.loops.trip_count`), a conditional's
  costliest branch once, a ``call`` as its computation;
* bitcasts, tuples, parameters, constants and the ``-done`` halves of
  asynchronous pairs move nothing.

Its total is near XLA's own (0.70-0.97 of it on the v5e programs of
``benchmarks/calibration/calibrate.py``), never in its place: a report's
estimate uses XLA's figure; these rows say where the bytes go, each with the
user's source line (:func:`~nnx_introspect._xla.hlo.frames.user_frame`).
"""

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any, Final

from nnx_introspect._xla.hlo.frames import (
    SourceLocation,
    source_json,
    source_stack,
    user_frame,
)
from nnx_introspect._xla.hlo.instructions import Instruction, metadata
from nnx_introspect._xla.hlo.loops import trip_count
from nnx_introspect._xla.hlo.module import Module, called_computations
from nnx_introspect._xla.hlo.shapes import (
    arrays,
    memory_space,
    shape_bytes,
    tuple_elements,
)

__all__ = [
    "Traffic",
    "TrafficRow",
    "bytes_moved",
    "executed",
    "hbm_bytes_of",
    "moves_nothing",
    "program_traffic",
    "traffic_json",
]


@dataclasses.dataclass(frozen=True)
class TrafficRow:
    """One instruction's bytes read and written, all its trips together.

    Attributes:
        instruction: Its name in the optimized program.
        opcode: Its opcode (``fusion``, ``copy``, ``copy-start``...).
        op_name: JAX's name of the operation it came from (its metadata).
        read_bytes: Bytes it reads, every trip.
        written_bytes: Bytes it writes, every trip.
        trips: How many times it runs (its loops' trips multiplied).
        shape: Its output's shape, as the program prints it.
        source: The user's source line it came from, where the program says.
        hbm_bytes: Of its bytes, those read from or written to HBM (memory
            space 0): on XLA:TPU, not those of the on-chip copies XLA's
            memory-space assignment made (``S(1)``).
    """

    instruction: str
    opcode: str
    op_name: str
    read_bytes: int
    written_bytes: int
    trips: int
    shape: str
    source: SourceLocation | None = None
    hbm_bytes: int = 0

    @property
    def bytes(self) -> int:
        """Read and written bytes together."""
        return self.read_bytes + self.written_bytes


@dataclasses.dataclass(frozen=True)
class Traffic:
    """A program's bytes moved: the total and each instruction's share.

    Attributes:
        rows: Every instruction that moves bytes, most bytes first.
        unknown_trips: Loops whose trip count the program does not state
            (their bodies counted once).
    """

    rows: tuple[TrafficRow, ...]
    unknown_trips: tuple[str, ...] = ()

    @property
    def read_bytes(self) -> int:
        """Bytes read."""
        return sum(row.read_bytes for row in self.rows)

    @property
    def written_bytes(self) -> int:
        """Bytes written."""
        return sum(row.written_bytes for row in self.rows)

    @property
    def bytes(self) -> int:
        """Bytes read and written."""
        return self.read_bytes + self.written_bytes

    @property
    def hbm_bytes(self) -> int:
        """Bytes read from and written to HBM (memory space 0)."""
        return sum(row.hbm_bytes for row in self.rows)


_NOTHING: Final = frozenset(
    {
        "parameter",
        "constant",
        "tuple",
        "get-tuple-element",
        "bitcast",
        "copy-done",
        "slice-done",
        "after-all",
        "partition-id",
        "replica-id",
        "opt-barrier",
        "add-dependency",
        "domain",
        "all-gather-done",
        "all-reduce-done",
        "collective-permute-done",
        "async-done",
        "send-done",
        "recv-done",
        "copy-to-host-done",
    }
)
"""Opcodes that move no bytes of their own: views, bookkeeping, and the second
halves of asynchronous pairs (their first half is counted)."""

_NO_OP_CALLS: Final = frozenset(
    {"ConcatBitcast", "AllocateBuffer", "Sharding", "AssumeGatherIndicesInBound"}
)
"""Custom calls that name existing bytes or reserve a buffer, moving none."""

_IN_PLACE: Final = frozenset({"dynamic-update-slice", "scatter"})
_SLICING: Final = frozenset({"dynamic-slice", "slice", "gather"})


def _bytes(shape: str) -> int:
    """Bytes of every array of ``shape`` (tuples flattened)."""
    return sum(size for _, _, size in arrays(shape)) if shape else 0


def _hbm_bytes(shape: str) -> int:
    """Bytes of the arrays of ``shape`` in HBM (memory space 0)."""
    elements = tuple_elements(shape)
    if not elements:
        return _bytes(shape) if memory_space(shape) == 0 else 0
    return sum(_hbm_bytes(element) for element in elements)


def _shape_of(module: Module, name: str) -> str:
    found = module.instructions.get(name)
    return "" if found is None else found.shape


def _fused_reads(module: Module, fusion: Instruction) -> list[int | None]:
    """Per operand of ``fusion``: the bytes it reads, or ``None`` for all of it.

    An operand the fused computation only slices reads the slices; one it
    only updates in place (the buffer an update lands in) reads nothing.
    """
    called = called_computations(fusion)
    body = module.computations.get(called[0], []) if called else []
    reads: list[int | None] = [None] * len(fusion.operands)
    for inst in body:
        number = int(inst.operand_text) if inst.operand_text.isdigit() else -1
        if inst.opcode != "parameter" or not 0 <= number < len(reads):
            continue
        uses = list(_uses(module, inst.name))
        if uses and all(u.opcode in _SLICING and at == 0 for u, at in uses):
            reads[number] = sum(shape_bytes(u.shape) for u, _ in uses)
        elif uses and all(u.opcode in _IN_PLACE and at == 0 for u, at in uses):
            reads[number] = 0
    return reads


def _uses(module: Module, name: str) -> Iterator[tuple[Instruction, int]]:
    """``(user, operand number)`` of each use of ``name``, looking through views."""
    for user in module.users.get(name, []):
        if user.opcode in ("bitcast", "reshape"):
            yield from _uses(module, user.name)
        else:
            for at, operand in enumerate(user.operands):
                if operand == name:
                    yield user, at


def _in_place_update(module: Module, inst: Instruction) -> Instruction | None:
    """The update-in-place op ``inst`` is (or its fusion's root is), if any."""
    if inst.opcode in _IN_PLACE:
        return inst
    if inst.opcode != "fusion":
        return None
    called = called_computations(inst)
    root = module.root(called[0]) if called else None
    while root is not None and root.opcode in ("bitcast", "reshape") and root.operands:
        root = module.instructions.get(root.operands[0])
    return root if root is not None and root.opcode in _IN_PLACE else None


def _update_bytes(module: Module, update: Instruction) -> int:
    """Bytes of what an in-place update writes: its update operand(s)."""
    if update.opcode == "dynamic-update-slice":
        return shape_bytes(_shape_of(module, update.operands[1]))
    # scatter(operands..., indices, updates...): the updates are the last half
    count = (len(update.operands) - 1) // 2
    return sum(shape_bytes(_shape_of(module, n)) for n in update.operands[-count:])


def _moved(
    module: Module, inst: Instruction, size: Callable[[str], int] = _bytes
) -> tuple[int, int]:
    """``(read, written)`` bytes of one run of ``inst``, each array by ``size``."""
    op = inst.opcode
    if op in ("copy-start", "slice-start", "copy-to-host-start"):
        # copy-start's shape is (destination, source, context); slice-start's
        # ((sources), destination, ...)
        elements = tuple_elements(inst.shape) or [inst.shape, inst.shape]
        if op == "slice-start":  # reads what it slices: its destination's size
            target = elements[1]
            return size(target), size(target)
        target, source = elements[0], elements[1]
        return size(source), size(target)
    if op == "custom-call":
        target = inst.attributes.get("custom_call_target", "").strip('"')
        if target in _NO_OP_CALLS:
            return 0, 0
    update = _in_place_update(module, inst)
    updated = _tuple_updates(module, inst) if update is None else {}
    reads: list[int | None] = [None] * len(inst.operands)
    if op == "fusion":
        reads = _fused_reads(module, inst)
    read = 0
    for number, name in enumerate(inst.operands):
        if update is not None and update is inst and number == 0:
            continue  # the buffer updated in place
        if number in {parameter for parameter, _ in updated.values()}:
            continue  # a buffer one of the fusion's outputs updates in place
        whole = size(_shape_of(module, name))
        part = reads[number]
        read += whole if part is None else min(part, whole)
    if update is not None:
        written = _update_bytes(module, update) if size(inst.shape) else 0
        return read, written
    if updated:
        written = 0
        for at, element in enumerate(tuple_elements(inst.shape)):
            found = updated.get(at)
            if found is None:
                written += size(element)
            elif size(element):
                written += _update_bytes(module, found[1])
        return read, written
    return read, size(inst.shape)


def _tuple_updates(
    module: Module, inst: Instruction
) -> dict[int, tuple[int, Instruction]]:
    """A multi-output fusion's outputs that update a parameter's buffer in place.

    ``{output index: (parameter number, the update)}``: XLA:TPU fuses a
    serving step's writes of the new keys and values into one fusion whose
    root is a tuple of ``dynamic-update-slice`` s, each aliasing its buffer
    (a v5e chip ran one in the time of its update's bytes, not the cache's).
    """
    if inst.opcode != "fusion":
        return {}
    called = called_computations(inst)
    root = module.root(called[0]) if called else None
    if root is None or root.opcode != "tuple":
        return {}
    out = {}
    for at, name in enumerate(root.operands):
        element = module.instructions.get(name)
        while (
            element is not None
            and element.opcode in ("bitcast", "reshape")
            and element.operands
        ):
            element = module.instructions.get(element.operands[0])
        if element is None or element.opcode not in _IN_PLACE or not element.operands:
            continue
        buffer = module.instructions.get(element.operands[0])
        if buffer is not None and buffer.opcode == "parameter":
            number = buffer.text.split("parameter(")[-1].split(")")[0]
            if number.isdigit():
                out[at] = (int(number), element)
    return out


def bytes_moved(
    module: Module, inst: Instruction, size: Callable[[str], int] = _bytes
) -> tuple[int, int]:
    """``(read, written)`` bytes of one run of ``inst``, each array by ``size``.

    ``size`` is a shape's bytes (all of them by default; :func:`hbm_bytes_of`
    for those in HBM), by the rules of this module's text.
    """
    return _moved(module, inst, size)


def moves_nothing(inst: Instruction) -> bool:
    """Whether ``inst`` is a custom call that names existing bytes, running nothing.

    XLA:TPU's ``ConcatBitcast`` (a concatenation laid out in place) and the
    like appear in the program but run no work: a v5e chip's profile shows
    them taking no time.

    Example:
        >>> from nnx_introspect._xla.hlo.instructions import instruction
        >>> moves_nothing(instruction(
        ...     '%c = f32[4]{0} custom-call(%a), custom_call_target="ConcatBitcast"'))
        True
    """
    target = inst.attributes.get("custom_call_target", "").strip('"')
    return inst.opcode == "custom-call" and target in _NO_OP_CALLS


def hbm_bytes_of(shape: str) -> int:
    """Bytes of the arrays of ``shape`` in HBM (memory space 0).

    Example:
        >>> hbm_bytes_of("(f32[8]{0}, f32[8]{0:S(1)})")
        32
    """
    return _hbm_bytes(shape)


def executed(
    module: Module, computation: str, trips: int, unknown: list[str]
) -> Iterator[tuple[Instruction | None, int]]:
    """Every instruction ``computation`` runs, and what it calls, with its trips.

    A while loop's body counts once per trip (its trips appended to
    ``unknown`` by name when the program does not state them, then once), a
    conditional's costliest branch once, a ``call`` as its computation; each
    loop also yields ``(None, trips)``: its control, once per trip. Views and
    the second halves of asynchronous pairs (``_NOTHING``) are left out.
    """
    for inst in module.computations.get(computation, []):
        if inst.opcode == "while":
            count = trip_count(inst, module)
            if count is None:
                unknown.append(inst.name)
                count = 1
            yield None, trips * count
            body = inst.attributes.get("body", "").lstrip("%")
            yield from executed(module, body, trips * count, unknown)
        elif inst.opcode == "conditional":
            branches = called_computations(inst)
            costliest = max(
                branches,
                key=lambda b: sum(
                    sum(_moved(module, i)) for i in module.computations.get(b, [])
                ),
                default=None,
            )
            if costliest is not None:
                yield from executed(module, costliest, trips, unknown)
        elif inst.opcode == "call":
            for called in called_computations(inst):
                yield from executed(module, called, trips, unknown)
        elif inst.opcode not in _NOTHING:
            yield inst, trips


def program_traffic(module: Module) -> Traffic:
    r"""The bytes ``module`` (one device's optimized program) moves, by instruction.

    Example:
        >>> from nnx_introspect._xla.hlo import parse_module
        >>> module = parse_module("\n".join([
        ...     "HloModule jit_f",
        ...     "",
        ...     "ENTRY %main (c: bf16[8,1024], u: bf16[8,1], i: s32[])"
        ...     " -> bf16[8,1024] {",
        ...     "  %c = bf16[8,1024]{1,0} parameter(0)",
        ...     "  %u = bf16[8,1]{1,0} parameter(1)",
        ...     "  %i = s32[] parameter(2)",
        ...     "  %z = s32[] constant(0)",
        ...     "  ROOT %d = bf16[8,1024]{1,0} dynamic-update-slice(%c, %u, %z, %i)",
        ...     "}",
        ... ]))
        >>> traffic = program_traffic(module)
        >>> traffic.read_bytes, traffic.written_bytes  # the update, 2 indices
        (24, 16)
    """
    unknown: list[str] = []
    rows = []
    for inst, trips in executed(module, module.entry, 1, unknown):
        if inst is None:
            continue  # a loop's control moves nothing
        read, written = _moved(module, inst)
        if read + written == 0:
            continue
        hbm = sum(_moved(module, inst, _hbm_bytes))
        items = metadata(inst.text)
        stack = source_stack(items, module.frames)
        rows.append(
            TrafficRow(
                inst.name,
                inst.opcode,
                items.get("op_name", ""),
                read * trips,
                written * trips,
                trips,
                inst.shape,
                user_frame(stack, stack[0] if stack else None),
                hbm * trips,
            )
        )
    rows.sort(key=lambda row: -row.bytes)
    return Traffic(tuple(rows), tuple(unknown))


ROWS_KEPT: Final = 16
"""Rows :func:`traffic_json` keeps: the instructions that move the most bytes."""


def traffic_json(traffic: Traffic, rows: int = ROWS_KEPT) -> dict[str, Any]:
    """``traffic`` as JSON data: its totals and its ``rows`` largest rows.

    Example:
        >>> row = TrafficRow("f", "fusion", "jit(f)/dot", 8, 4, 1, "f32[1]{0}")
        >>> data = traffic_json(Traffic((row,)))
        >>> data["read_bytes"], data["written_bytes"], data["rows"][0]["instruction"]
        (8, 4, 'f')
    """
    return {
        "read_bytes": traffic.read_bytes,
        "written_bytes": traffic.written_bytes,
        "hbm_bytes": traffic.hbm_bytes,
        "by_source": _by_source(traffic, rows),
        "unknown_trips": list(traffic.unknown_trips),
        "rows": [
            {
                "instruction": row.instruction,
                "opcode": row.opcode,
                "op_name": row.op_name,
                "read_bytes": row.read_bytes,
                "written_bytes": row.written_bytes,
                "trips": row.trips,
                "shape": row.shape,
                "source": source_json(row.source),
                "hbm_bytes": row.hbm_bytes,
            }
            for row in traffic.rows[:rows]
        ],
    }


def _by_source(traffic: Traffic, rows: int) -> list[dict[str, Any]]:
    """The bytes moved, summed by source line and operation: the largest ``rows``."""
    groups: dict[tuple[str, str, int, str], list[TrafficRow]] = {}
    for row in traffic.rows:
        source = row.source
        key = (
            row.op_name.rsplit("/", 1)[-1] or row.opcode,
            "" if source is None else source.file,
            0 if source is None else source.line,
            "" if source is None else source.function,
        )
        groups.setdefault(key, []).append(row)
    ranked = sorted(groups.items(), key=lambda item: -sum(r.bytes for r in item[1]))
    return [
        {
            "op": op,
            "source": None
            if not file
            else {"file": file, "line": line, "function": function},
            "instructions": len(members),
            "bytes": sum(r.bytes for r in members),
            "hbm_bytes": sum(r.hbm_bytes for r in members),
            "shape": members[0].shape,
        }
        for (op, file, line, function), members in ranked[:rows]
    ]

"""Read XLA's compile dumps: the buffers live at the step's peak, by source line.

This module is the one place that knows the format of the files XLA writes when a
compile is given ``xla_dump_to``; that format is XLA's, not a stable API, so every
expectation is checked and a drift raises :class:`DumpFormatError` naming the
jaxlib version instead of returning a partial breakdown.

It reads the *text* dumps (``xla_dump_hlo_as_text``), not the protobuf ones: the
live-range dump with XLA's own "Live ranges at N (peak)" list exists only as text,
and decoding ``*.hlo.pb`` (an ``HloProto``) needs XLA's ``hlo.proto`` definitions,
which jaxlib does not ship. The text files carry everything needed: the peak list
(``*-live-range.txt``), each value's allocation, size and shape
(``*-buffer-assignment.txt``), each value's HLO instruction with its metadata and
positions (``*-buffer-assignment-values.txt``) and the module with its stack-frame
index (``*after_optimizations.txt``).

Example:
    >>> import tempfile
    >>> import jax, jax.numpy as jnp
    >>> with tempfile.TemporaryDirectory() as directory:
    ...     compiled = (
    ...         jax.jit(lambda x: jnp.sin(x) * 2)
    ...         .lower(jax.ShapeDtypeStruct((256,), jnp.float32))
    ...         .compile(compiler_options=dump_options(directory))
    ...     )
    ...     peak = read_peak(directory, backend="cpu")
    >>> sum(buffer.nbytes for buffer in peak.buffers) == peak.peak_bytes
    True
    >>> any(buffer.parameter == 0 for buffer in peak.buffers)
    True
"""

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from nnx_introspect._typing import ArgumentError, typechecked
from nnx_introspect._xla.hlo import (
    HloTextError,
    Module,
    SourceLocation,
    instruction,
    memory_space,
    metadata,
    parse_module,
    parse_shape,
    shape_bytes,
    source_json,
    source_stack,
)
from nnx_introspect._xla.hlo.lineage import origin
from nnx_introspect._xla.hlo.phases import schedule_phases
from nnx_introspect._xla.peak import LiveCurve as LiveCurve
from nnx_introspect._xla.peak import PeakBuffer as PeakBuffer
from nnx_introspect._xla.peak import PeakBuffers as PeakBuffers
from nnx_introspect._xla.slices import (
    Slice,
    downsample,
    held_spans,
    occupied_at,
    occupied_curve,
    reserved,
)
from nnx_introspect._xla.toolchain import jaxlib_version

__all__ = [
    "DumpFormatError",
    "LiveCurve",
    "PeakBuffer",
    "PeakBuffers",
    "SourceLocation",
    "dump_options",
    "module_text",
    "read_peak",
    "source_json",
]

# The stem of the entry module's optimized-module files, per backend, as the pinned
# jaxlib (0.10.2) and libtpu (0.0.52) name them; group 1 is the module's name.
_STEMS: dict[str, re.Pattern[str]] = {
    "cpu": re.compile(r"module_\d+\.(jit_.+?)\.cpu_after_optimizations"),
    "gpu": re.compile(r"module_\d+\.(jit_.+?)\.sm_[0-9a-z.]+_gpu_after_optimizations"),
    "tpu": re.compile(r"module_\d+\.(jit_.+?)\.cl_\d+\.after_optimizations"),
}
_LIVE_RANGE = "-live-range.txt"
_ASSIGNMENT = "-buffer-assignment.txt"
_VALUES = "-buffer-assignment-values.txt"
_MODULE = ".txt"
_NOT_HELD = ("constant", "thread-local")  # in the executable; not in memory

_PEAK_HEADER = re.compile(r"^  Live ranges at (\d+) \(peak\):$")
_PEAK_ROW = re.compile(
    r"^    (\S+?)(\{[\d,]*\}): (\d+) bytes \(cumulative: (\d+) bytes\)$"
)
_SEQUENCE_ROW = re.compile(r"^    (\d+):(\S+)$")
_RANGE_ROW = re.compile(r"^    (\S+?)(\{[\d,]*\}):(\d+)-(\d+)$")
_ALLOCATION = re.compile(r"^allocation (\d+): size (\d+), (.*):$")
_PARAMETER = re.compile(
    r"(?:^|, )parameter (\d+), shape \|.*\| at ShapeIndex \{([\d,]*)\}"
)
# A value as HloValue::ToShortString prints it: <id name{index} (phi) @color>,
# the index only for a tuple-shaped instruction, " (phi)" for a value merged at
# a while loop or conditional (XLA:TPU's widened loop parameters, wide.param.N)
_VALUE = r"<(\d+) (\S+?)(\{[\d,]*\})?(?: \(phi\))? @(\d+)>"
_ASSIGNED_VALUE = re.compile(rf"^ value: {_VALUE} \(size=(\d+),offset=(\d+)\): (.+)$")
_VALUE_HEADER = re.compile(rf"^{_VALUE}$")
_POSITION = re.compile(r"^  (\S+?)(?: \{([\d,]*)\})?$")
_INSTRUCTION = re.compile(r"^ from instruction: %(\S+) = (.*)$")


class DumpFormatError(ValueError):
    """XLA's dump is missing, partial or in a format this code does not know."""


@typechecked
def dump_options(directory: str | Path) -> dict[str, str | bool]:
    """The compiler options that make XLA write what :func:`read_peak` reads.

    Args:
        directory: an empty directory the compile may write into.

    Returns:
        Options to merge into ``compile(compiler_options=...)``.

    Example:
        >>> dump_options("/tmp/d")
        {'xla_dump_to': '/tmp/d', 'xla_dump_hlo_as_text': True}
    """
    return {"xla_dump_to": str(directory), "xla_dump_hlo_as_text": True}


@typechecked
def read_peak(
    directory: str | Path, *, backend: str, max_points: int = 2000
) -> PeakBuffers:
    """The buffers live at XLA's peak of the entry ``jit_*`` module in a dump.

    Args:
        directory: the ``xla_dump_to`` directory of exactly one compile.
        backend: ``"cpu"``, ``"gpu"`` or ``"tpu"``: which compiler wrote it.
        max_points: the most points of the memory curve kept (at least 2); a
            longer schedule is downsampled to the most bytes live in each of
            ``max_points`` equal spans, XLA's peak point and the curve's
            highest point kept exactly.

    Returns:
        The peak's program point and bytes, every buffer in use there and the
        memory curve (see :class:`PeakBuffers`).

    Raises:
        ArgumentError: `backend` is not one of the three, or `max_points` is
            below 2.
        DumpFormatError: a file is missing, or a line is not in the format the
            pinned jaxlib writes.
    """
    if backend not in _STEMS:
        raise ArgumentError(
            "backend", f"`backend` must be one of {sorted(_STEMS)}, got {backend!r}."
        )
    if max_points < 2:
        raise ArgumentError(
            "max_points",
            f"`max_points` must be an integer of at least 2, got {max_points}.",
        )
    stem, module = _entry_stem(Path(directory), backend)
    peak_time, peak_rows, peak_bytes = _read_peak_list(stem, _LIVE_RANGE)
    sequence = _read_sequence(stem)
    assigned = _read_assignment(stem)
    values = _read_values(stem)
    parsed = _read_module(stem)
    by_key: dict[tuple[str, tuple[int, ...]], _Assigned] = {}
    for item in assigned.values():
        by_key.setdefault((item.name, item.index), item)
    if peak_time not in sequence:
        raise _error(stem, _LIVE_RANGE, f"the instruction at program point {peak_time}")
    sizes = {(name, index): nbytes for name, index, nbytes in peak_rows}
    for item in assigned.values():
        sizes.setdefault((item.name, item.index), _byte_size(item.shape_text))
    ranges = _read_ranges(stem, len(sequence))
    _check_peak(stem, ranges, sizes, peak_time, peak_bytes)
    # each value in its slice of an allocation (one of its own when unassigned)
    spans: list[Any] = [
        (
            by_key[(name, index)].where
            if (name, index) in by_key
            else Slice(-1 - n, 0, sizes[(name, index)]),
            (name, index),
            start,
            end,
        )
        for n, (name, index, start, end) in enumerate(ranges)
        if getattr(by_key.get((name, index)), "allocation", "") not in _NOT_HELD
    ]
    length = max([peak_time, *(end for *_, end in ranges)]) + 1
    spans += held_spans(spans, _held(assigned), length)
    live = occupied_curve([(w, a, b) for w, _, a, b in spans], length)
    times, kept = downsample(live, peak_time, max_points)
    highest = int(np.argmax(live))
    curve = LiveCurve(len(live), times, kept, highest, int(live[highest]))
    # XLA's own moment unless more bytes are in use elsewhere
    at = peak_time if live[peak_time] == curve.highest_bytes else curve.highest_time
    buffers = _peak_buffers(spans, at, by_key, values, parsed, stem, ranges, sequence)
    return PeakBuffers(
        backend=backend,
        module=module,
        peak_time=at,
        peak_instruction=sequence[at],
        peak_bytes=int(live[at]),
        buffers=tuple(buffers),
        curve=curve,
        xla_peak_time=peak_time,
        xla_peak_bytes=peak_bytes,
        phases=schedule_phases(sequence, parsed),
    )


def _peak_buffers(
    spans: list[Any],
    at: int,
    by_key: dict[tuple[str, tuple[int, ...]], "_Assigned"],
    values: dict[int, "_Value"],
    parsed: Module,
    stem: Path,
    ranges: list["_Range"],
    sequence: dict[int, str],
) -> list[PeakBuffer]:
    """Each slice occupied at ``at`` as a :class:`PeakBuffer`, largest first."""
    live_ranges = {(name, index): (start, end) for name, index, start, end in ranges}
    points = {name: point for point, name in sequence.items()}
    buffers = []
    for occupant in occupied_at(spans, at):
        keys: list[Any] = list(occupant.members)
        (name, index), *others = keys or [
            reserved(spans, occupant.slice.allocation, at)
        ]
        found = by_key.get((name, index))
        if found is None:
            raise _error(stem, _ASSIGNMENT, f"a value {name}{_index_text(index)}")
        value = values.get(found.value_id)
        if value is None:
            raise _error(stem, _VALUES, f"the value <{found.value_id} {name}>")
        buffer = _buffer(found, value, occupant.nbytes, parsed, stem)
        aliases = tuple(f"{n}{_index_text(i) if i else ''}" for n, i in others)
        buffers.append(
            replace(
                buffer,
                aliases=aliases,
                live_range=live_ranges.get((name, index)),
                empty=not occupant.members,
                done_at=_done_at(parsed, buffer, points),
            )
        )
    return buffers


def _done_at(parsed: Module, buffer: PeakBuffer, points: dict[str, int]) -> int | None:
    """The program point of an asynchronous ``-start``'s ``-done``, if scheduled."""
    if not buffer.opcode.endswith("-start"):
        return None
    done = buffer.opcode.removesuffix("-start") + "-done"
    return next(
        (
            points[user.name]
            for user in parsed.users.get(buffer.instruction, [])
            if user.opcode == done and user.name in points
        ),
        None,
    )


@typechecked
def module_text(directory: str | Path, *, backend: str) -> str:
    """The entry ``jit_*`` module's optimized HLO text, as the compiler dumped it.

    The same program :func:`read_peak` reads, printed by the compiler that
    compiled it (``*after_optimizations.txt``), not read back and printed by
    jaxlib as ``compiled.as_text()`` is.

    Args:
        directory: the ``xla_dump_to`` directory of exactly one compile.
        backend: ``"cpu"``, ``"gpu"`` or ``"tpu"``: which compiler wrote it.

    Returns:
        The module's text, starting with ``HloModule``.

    Raises:
        ArgumentError: `backend` is not one of the three.
        DumpFormatError: the file is missing or holds no ``HloModule``.

    Example:
        >>> import tempfile
        >>> import jax, jax.numpy as jnp
        >>> with tempfile.TemporaryDirectory() as directory:
        ...     _ = jax.jit(jnp.sin).lower(1.0).compile(
        ...         compiler_options=dump_options(directory))
        ...     text = module_text(directory, backend="cpu")
        >>> text.startswith("HloModule jit_sin")
        True
    """
    if backend not in _STEMS:
        raise ArgumentError(
            "backend", f"`backend` must be one of {sorted(_STEMS)}, got {backend!r}."
        )
    stem, _ = _entry_stem(Path(directory), backend)
    text = "\n".join(_lines(stem, _MODULE))
    if not text.startswith("HloModule "):
        raise _error(stem, _MODULE, "a first line 'HloModule ...'")
    return text


# --- the files ----------------------------------------------------------------


@dataclass(frozen=True)
class _Assigned:
    value_id: int
    name: str
    index: tuple[int, ...]
    shape_text: str
    allocation: str
    parameter: int | None
    parameter_index: tuple[int, ...] | None
    where: Slice
    allocation_bytes: int


@dataclass(frozen=True)
class _Value:
    positions: tuple[tuple[str, tuple[int, ...]], ...]
    instruction_text: str


def _error(stem: Path, suffix: str, expected: str) -> DumpFormatError:
    return DumpFormatError(
        f"XLA's dump file {stem.name}{suffix} does not hold {expected} in the format"
        f" this code reads (written for jaxlib 0.10.2 / libtpu 0.0.52; installed"
        f" jaxlib {jaxlib_version()}); no breakdown of the peak can be given."
    )


def _entry_stem(directory: Path, backend: str) -> tuple[Path, str]:
    pattern = _STEMS[backend]
    found = []
    for path in sorted(directory.rglob(f"*{_LIVE_RANGE}")):
        match = pattern.fullmatch(path.name[: -len(_LIVE_RANGE)])
        if match:
            found.append((path.with_name(path.name[: -len(_LIVE_RANGE)]), match[1]))
    if len(found) != 1:
        what = "none" if not found else ", ".join(str(p.name) for p, _ in found)
        raise DumpFormatError(
            f"expected exactly one entry module's live-range dump matching"
            f" {pattern.pattern}{_LIVE_RANGE} in {directory} (XLA:{backend.upper()},"
            f" jaxlib 0.10.2 / libtpu 0.0.52; installed jaxlib {jaxlib_version()}),"
            f" found {what}. Was the module compiled with dump_options(...)?"
        )
    return found[0]


def _lines(stem: Path, suffix: str) -> list[str]:
    path = stem.with_name(stem.name + suffix)
    try:
        return path.read_text().splitlines()
    except OSError as error:
        raise _error(stem, suffix, f"anything ({error.strerror})") from error


def _index(text: str | None) -> tuple[int, ...]:
    text = (text or "").strip("{}")
    return tuple(int(part) for part in text.split(",")) if text else ()


def _index_text(index: tuple[int, ...]) -> str:
    return "{" + ",".join(map(str, index)) + "}"


def _read_peak_list(
    stem: Path, suffix: str
) -> tuple[int, list[tuple[str, tuple[int, ...], int]], int]:
    lines = _lines(stem, suffix)
    starts = [i for i, line in enumerate(lines) if _PEAK_HEADER.match(line)]
    if len(starts) != 1:
        raise _error(stem, suffix, "one line 'Live ranges at N (peak):'")
    header = _PEAK_HEADER.match(lines[starts[0]])
    assert header is not None
    rows: list[tuple[str, tuple[int, ...], int]] = []
    total = 0
    for line in lines[starts[0] + 1 :]:
        row = _PEAK_ROW.match(line)
        if row is None:
            break
        total += int(row[3])
        if total != int(row[4]):
            raise _error(stem, suffix, f"a cumulative count that adds up at {line!r}")
        rows.append((row[1], _index(row[2]), int(row[3])))
    else:
        raise _error(stem, suffix, "a line after the peak's buffers")
    after = lines[starts[0] + 1 + len(rows)]
    stated = re.fullmatch(
        r"  Stack trace breakdown for peak usage: ([\d ]+) bytes", after
    )
    if not rows or stated is None:
        raise _error(stem, suffix, "the peak's buffers, then the peak usage in bytes")
    if int(stated[1].replace(" ", "")) != total:
        raise _error(stem, suffix, f"a peak usage equal to its buffers' {total} bytes")
    return int(header[1]), rows, total


def _read_sequence(stem: Path) -> dict[int, str]:
    lines = _lines(stem, _LIVE_RANGE)
    if "  InstructionSequence:" not in lines:
        raise _error(stem, _LIVE_RANGE, "an 'InstructionSequence:' section")
    sequence = {}
    for line in lines[lines.index("  InstructionSequence:") + 1 :]:
        row = _SEQUENCE_ROW.match(line)
        if row is None:
            break
        sequence[int(row[1])] = row[2]
    return sequence


_Range = tuple[str, tuple[int, ...], int, int]


def _read_ranges(stem: Path, points: int) -> list[_Range]:
    """Each value's live range ``(name, index, start, end)``: ``BufferLiveRange``."""
    lines = _lines(stem, _LIVE_RANGE)
    if "  BufferLiveRange:" not in lines:
        raise _error(stem, _LIVE_RANGE, "a 'BufferLiveRange:' section")
    ranges = []
    for line in lines[lines.index("  BufferLiveRange:") + 1 :]:
        row = _RANGE_ROW.match(line)
        if row is None:
            break
        start, end = int(row[3]), int(row[4])
        if not 0 <= start <= end <= points:
            raise _error(stem, _LIVE_RANGE, f"a live range within 0-{points}: {line!r}")
        ranges.append((row[1], _index(row[2]), start, end))
    return ranges


def _held(assigned: dict[int, "_Assigned"]) -> dict[int, int]:
    """The allocations held for the whole step (arguments, outputs), by index."""
    kinds = ("parameter", "output", "maybe-live-out")
    mine = [a for a in assigned.values() if a.allocation in kinds]
    held = {a.where.allocation: a.allocation_bytes for a in mine}
    for a in assigned.values():  # a tuple's index table is written when made
        if a.shape_text.startswith("("):
            held.pop(a.where.allocation, None)
    return held


def _check_peak(
    stem: Path,
    ranges: list[_Range],
    sizes: dict[tuple[str, tuple[int, ...]], int],
    peak_time: int,
    peak_bytes: int,
) -> None:
    """Check XLA's live ranges and sizes add up to its own peak list at its point."""
    total = 0
    for name, index, start, end in ranges:
        if (name, index) not in sizes:
            raise _error(
                stem, _ASSIGNMENT, f"the size of the value {name}{_index_text(index)}"
            )
        if start <= peak_time <= end:
            total += sizes[(name, index)]
    if total != peak_bytes:
        raise _error(
            stem,
            _LIVE_RANGE,
            f"live ranges that add up to the peak's {peak_bytes} bytes at point"
            f" {peak_time} (they add up to {total})",
        )


def _byte_size(shape_text: str) -> int:
    """``ShapeUtil::ByteSizeOf(shape, 8)`` of a value's shape (:func:`shape_bytes`)."""
    try:
        return shape_bytes(shape_text)
    except HloTextError as error:
        raise DumpFormatError(
            f"XLA's dump has a value of element type {error.dtype!r}"
            f" ({shape_text[:80]}), whose size this code does not know (written for"
            f" jaxlib 0.10.2 / libtpu 0.0.52; installed jaxlib {jaxlib_version()})."
        ) from None


def _read_assignment(stem: Path) -> dict[int, _Assigned]:
    lines = _lines(stem, _ASSIGNMENT)
    if not lines or lines[0] != "BufferAssignment:":
        raise _error(stem, _ASSIGNMENT, "a first line 'BufferAssignment:'")
    assigned: dict[int, _Assigned] = {}
    header: re.Match[str] | None = None
    for line in lines[1:]:
        if line.startswith("allocation "):
            header = _ALLOCATION.match(line)
            if header is None:
                raise _error(stem, _ASSIGNMENT, f"an allocation header, got {line!r}")
            continue
        if not line.startswith(" value: "):
            if header is not None and not line.strip():
                continue
            break  # the allocations end; XLA's summary follows
        value = _ASSIGNED_VALUE.match(line)
        if header is None or value is None:
            raise _error(stem, _ASSIGNMENT, f"a value line, got {line!r}")
        parameter = _PARAMETER.search(header[3])
        assigned[int(value[1])] = _Assigned(
            value_id=int(value[1]),
            name=value[2],
            index=_index(value[3]),
            shape_text=value[7],
            allocation=_allocation_kind(header[3]),
            parameter=int(parameter[1]) if parameter else None,
            parameter_index=_index(parameter[2]) if parameter else None,
            where=Slice(int(header[1]), int(value[6]), int(value[5])),
            allocation_bytes=int(header[2]),
        )
    if not assigned:
        raise _error(stem, _ASSIGNMENT, "any value")
    return assigned


def _allocation_kind(attributes: str) -> str:
    for kind in (
        "parameter",
        "output",
        "preallocated-temp",
        "constant",
        "thread-local",
    ):
        if re.search(rf"(?:^|, ){kind}\b", attributes):
            return kind
    return "maybe-live-out" if "maybe-live-out" in attributes else "temp"


def _read_values(stem: Path) -> dict[int, _Value]:
    lines = _lines(stem, _VALUES)
    values: dict[int, _Value] = {}
    current: int | None = None
    positions: list[tuple[str, tuple[int, ...]]] = []
    section = ""
    for line in lines:
        header = _VALUE_HEADER.match(line)
        if header:
            current, positions, section = int(header[1]), [], ""
        elif current is None:
            continue
        elif line in (" positions:", " uses:"):
            section = line.strip()
        elif section == "positions:" and (position := _POSITION.match(line)):
            positions.append((position[1], _index(position[2])))
        elif _INSTRUCTION.match(line):
            values[current] = _Value(tuple(positions), line)
            current = None
    if not values:
        raise _error(stem, _VALUES, "any value with its 'from instruction:' line")
    return values


def _read_module(stem: Path) -> Module:
    """The entry module: its instructions, stack frames and computations."""
    try:
        parsed = parse_module("\n".join(_lines(stem, _MODULE)))
    except HloTextError as error:
        raise _error(stem, _MODULE, f"{error.what}, got {error.text!r}") from None
    if parsed.root(parsed.entry) is None:
        raise _error(stem, _MODULE, "an ENTRY computation with a ROOT instruction")
    return parsed


# --- one buffer ------------------------------------------------------------------


def _buffer(
    item: _Assigned,
    value: _Value,
    nbytes: int,
    parsed: Module,
    stem: Path,
) -> PeakBuffer:
    text = value.instruction_text[len(" from instruction: ") :]
    try:
        defining = instruction(text)
    except HloTextError:
        raise _error(
            stem, _VALUES, f"an opcode, got {value.instruction_text[:200]!r}"
        ) from None
    items = metadata(text)
    try:
        stack = source_stack(items, parsed.frames)
    except HloTextError as error:
        raise _error(stem, _MODULE, error.what) from None
    dtype, shape = parse_shape(item.shape_text)
    opcode = defining.opcode
    is_parameter = item.parameter is not None and opcode == "parameter"
    root = parsed.root(parsed.entry)
    output = next(
        (index for name, index in value.positions if root and name == root.name),
        None,
    )
    return PeakBuffer(
        nbytes=nbytes,
        shape=shape,
        dtype=dtype,
        instruction=item.name,
        shape_index=item.index,
        opcode=opcode,
        op_name=items.get("op_name"),
        source=stack[0] if stack else None,
        stack=stack,
        parameter=item.parameter if is_parameter else None,
        parameter_index=item.parameter_index if is_parameter else None,
        output_index=output,
        allocation=item.allocation,
        memory_space=memory_space(item.shape_text),
        operands=defining.operands,
        origin=origin(parsed, item.name, item.index),
    )

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

import importlib.metadata
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nnx_introspect._typing import typechecked

__all__ = [
    "DumpFormatError",
    "LiveCurve",
    "PeakBuffer",
    "PeakBuffers",
    "SourceLocation",
    "dump_options",
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
_ASSIGNED_VALUE = re.compile(
    r"^ value: <(\d+) (\S+?)(\{[\d,]*\})? @(\d+)> \(size=(\d+),offset=(\d+)\): (.+)$"
)
_VALUE_HEADER = re.compile(r"^<(\d+) (\S+?)(\{[\d,]*\})? @(\d+)>$")
_POSITION = re.compile(r"^  (\S+?)(?: \{([\d,]*)\})?$")
_INSTRUCTION = re.compile(r"^ from instruction: %(\S+) = (.*)$")
_ARRAY = re.compile(r"^([a-z][a-z0-9]*)\[([^\]]*)\]")
_FILE_NAME = re.compile(r'^(\d+) "(.*)"$')
_FILE_LOCATION = re.compile(
    r"^(\d+) \{file_name_id=(\d+) function_name_id=(\d+) line=(\d+)"
)
_STACK_FRAME = re.compile(r"^(\d+) \{file_location_id=(\d+)(?: parent_frame_id=(\d+))?")
_METADATA_ITEM = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^\s}]+)')


class DumpFormatError(ValueError):
    """XLA's dump is missing, partial or in a format this code does not know."""


@dataclass(frozen=True)
class SourceLocation:
    """One frame of user source: file, line and function, as XLA's metadata has it."""

    file: str
    line: int
    function: str


def source_json(source: SourceLocation | None) -> dict[str, Any] | None:
    """``source`` as JSON data (``file``, ``line``, ``function``), or ``None``."""
    if source is None:
        return None
    return {"file": source.file, "line": source.line, "function": source.function}


@dataclass(frozen=True)
class PeakBuffer:
    """One buffer live at the peak.

    Attributes:
        nbytes: its bytes in XLA's live-range accounting.
        shape: the array shape (``()`` for a tuple's index table).
        dtype: XLA's element type (``f32``, ``bf16``, ...; ``tuple`` for an index
            table).
        instruction: the HLO instruction that defines it.
        shape_index: its index in that instruction's (tuple) shape.
        opcode: the instruction's opcode (``fusion``, ``parameter``, ``dot``, ...).
        op_name: JAX's op name from the metadata, if any.
        source: the innermost user frame, if the metadata carries one.
        stack: every frame, innermost first.
        parameter: the entry parameter number when it is an entry parameter.
        parameter_index: the index inside that parameter's (tuple) shape.
        output_index: its index in the entry's output when it is (part of) it.
        allocation: the kind of XLA allocation that holds it (``parameter``,
            ``output``, ``maybe-live-out``, ``preallocated-temp``, ``constant``,
            ``thread-local``, ``temp``).
        memory_space: the memory space in its layout (``S(1)`` on XLA:TPU is
            its on-chip VMEM, outside the HBM figures); 0, the device's main
            memory, when the layout names none.
    """

    nbytes: int
    shape: tuple[int, ...]
    dtype: str
    instruction: str
    shape_index: tuple[int, ...]
    opcode: str
    op_name: str | None
    source: SourceLocation | None
    stack: tuple[SourceLocation, ...]
    parameter: int | None
    parameter_index: tuple[int, ...] | None
    output_index: tuple[int, ...] | None
    allocation: str
    memory_space: int = 0

    @property
    def is_output(self) -> bool:
        """Whether the buffer is (part of) the entry computation's output."""
        return self.output_index is not None


@dataclass(frozen=True)
class LiveCurve:
    """Bytes live at each program point of the step, as XLA scheduled it.

    A value is live from the point its instruction runs to its last use,
    inclusive (``start-end`` in XLA's live-range dump); the bytes are XLA's own
    sizes (``ShapeUtil::ByteSizeOf``, 8 bytes per element of a tuple's index
    table), the same the dump's peak list gives. At XLA's peak the curve equals
    the peak list's sum exactly (:func:`read_peak` checks it).

    XLA chooses its peak point with a sweep that keeps a value one point past
    its last use (``HloLiveRange::ComputePeakMemoryMoment``), so the curve can
    be higher elsewhere: :attr:`highest_time` says where.

    Attributes:
        points: program points in the schedule (``HloLiveRange (max N)``).
        times: the program points kept, ascending (every one, or at most
            ``max_points`` after downsampling).
        live_bytes: the bytes live at each of ``times``; after downsampling,
            the most live at any point a kept point stands for.
        highest_time: the program point where the most bytes are live.
        highest_bytes: the bytes live there.
    """

    points: int
    times: tuple[int, ...]
    live_bytes: tuple[int, ...]
    highest_time: int
    highest_bytes: int

    @property
    def downsampled(self) -> bool:
        """Whether fewer points are kept than the schedule has."""
        return len(self.times) < self.points


@dataclass(frozen=True)
class PeakBuffers:
    """XLA's peak of one compiled module and every buffer live there.

    Attributes:
        backend: ``cpu``, ``gpu`` or ``tpu``.
        module: the module's name (``jit_step``).
        peak_time: the program point of the peak, as XLA's live-range dump numbers it.
        peak_instruction: the instruction scheduled at that point.
        peak_bytes: XLA's live-range peak; the buffers add up to it exactly.
        buffers: the buffers live at the peak, largest first as XLA lists them.
        curve: the bytes live at every program point, or ``None`` when not read.
        xla_peak_time: the point XLA's live-range dump names its peak, when read.
        xla_peak_bytes: the bytes XLA lists live there.

    The peak is XLA's own ("Live ranges at N (peak)") unless more bytes are live
    at another point by XLA's own live ranges and sizes: XLA picks its moment
    with a sweep (``HloLiveRange::ComputePeakMemoryMoment``) that keeps each
    value one point past its last use and sizes it by its defining
    instruction's whole shape, so an element of a multi-output fusion counts
    as the tuple's 8-byte pointers there. Then the peak is that other point,
    its buffers those live there, and ``xla_peak_*`` keep XLA's.
    """

    backend: str
    module: str
    peak_time: int
    peak_instruction: str
    peak_bytes: int
    buffers: tuple[PeakBuffer, ...]
    curve: LiveCurve | None = None
    xla_peak_time: int | None = None
    xla_peak_bytes: int | None = None


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
        The peak's program point, XLA's live-range peak, every buffer live there
        and the memory curve.

    Raises:
        ValueError: `backend` is not one of the three.
        DumpFormatError: a file is missing, or a line is not in the format the
            pinned jaxlib writes.
    """
    if backend not in _STEMS:
        raise ValueError(f"`backend` must be one of {sorted(_STEMS)}, got {backend!r}.")
    if max_points < 2:
        raise ValueError(
            f"`max_points` must be an integer of at least 2, got {max_points}."
        )
    stem, module = _entry_stem(Path(directory), backend)
    peak_time, peak_rows, peak_bytes = _read_peak_list(stem, _LIVE_RANGE)
    sequence = _read_sequence(stem)
    assigned = _read_assignment(stem)
    values = _read_values(stem)
    frames, root = _read_module(stem)
    by_key: dict[tuple[str, tuple[int, ...]], _Assigned] = {}
    for item in assigned.values():
        by_key.setdefault((item.name, item.index), item)
    if peak_time not in sequence:
        raise _error(stem, _LIVE_RANGE, f"the instruction at program point {peak_time}")
    sizes = {(name, index): nbytes for name, index, nbytes in peak_rows}
    for item in assigned.values():
        sizes.setdefault((item.name, item.index), _byte_size(item.shape_text))
    ranges = _read_ranges(stem, len(sequence))
    curve, live = _curve(stem, ranges, sizes, peak_time, peak_bytes, max_points)
    # XLA's own moment unless more bytes are live elsewhere by its live ranges
    at = peak_time if live[peak_time] == curve.highest_bytes else curve.highest_time
    rows = peak_rows
    if at != peak_time:
        live_there = [
            (name, index, sizes[(name, index)])
            for name, index, start, end in ranges
            if start <= at <= end
        ]
        rows = sorted(live_there, key=lambda r: (-r[2], r[0], r[1]))
    buffers = []
    for name, index, nbytes in rows:
        found = by_key.get((name, index))
        if found is None:
            raise _error(stem, _ASSIGNMENT, f"a value {name}{_index_text(index)}")
        value = values.get(found.value_id)
        if value is None:
            raise _error(stem, _VALUES, f"the value <{found.value_id} {name}>")
        buffers.append(_buffer(found, value, nbytes, frames, root, stem))
    return PeakBuffers(
        backend=backend,
        module=module,
        peak_time=at,
        peak_instruction=sequence[at],
        peak_bytes=sum(nbytes for _, _, nbytes in rows),
        buffers=tuple(buffers),
        curve=curve,
        xla_peak_time=peak_time,
        xla_peak_bytes=peak_bytes,
    )


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


@dataclass(frozen=True)
class _Value:
    positions: tuple[tuple[str, tuple[int, ...]], ...]
    instruction_text: str


def _jaxlib() -> str:
    try:
        return importlib.metadata.version("jaxlib")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover
        return "unknown"


def _error(stem: Path, suffix: str, expected: str) -> DumpFormatError:
    return DumpFormatError(
        f"XLA's dump file {stem.name}{suffix} does not hold {expected} in the format"
        f" this code reads (written for jaxlib 0.10.2 / libtpu 0.0.52; installed"
        f" jaxlib {_jaxlib()}); no breakdown of the peak can be given."
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
            f" jaxlib 0.10.2 / libtpu 0.0.52; installed jaxlib {_jaxlib()}),"
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


def _curve(
    stem: Path,
    ranges: list[_Range],
    sizes: dict[tuple[str, tuple[int, ...]], int],
    peak_time: int,
    peak_bytes: int,
    max_points: int,
) -> tuple[LiveCurve, "np.ndarray[Any, np.dtype[np.int64]]"]:
    """The memory curve, and the bytes live at every point before downsampling."""
    points = max((end for *_, end in ranges), default=peak_time)
    points = max(points, peak_time)
    delta = np.zeros(points + 2, dtype=np.int64)
    for name, index, start, end in ranges:
        if (name, index) not in sizes:
            raise _error(
                stem, _ASSIGNMENT, f"the size of the value {name}{_index_text(index)}"
            )
        delta[start] += sizes[(name, index)]
        delta[end + 1] -= sizes[(name, index)]
    live = np.cumsum(delta)[: points + 1]
    if int(live[peak_time]) != peak_bytes:
        raise _error(
            stem,
            _LIVE_RANGE,
            f"live ranges that add up to the peak's {peak_bytes} bytes at point"
            f" {peak_time} (they add up to {int(live[peak_time])})",
        )
    full, highest = live, int(np.argmax(live))
    times = np.arange(points + 1)
    if len(live) > max_points:
        edges = np.linspace(0, len(live), max_points - 1, dtype=np.int64)
        starts = edges[:-1]
        times = np.unique(np.concatenate([starts, [peak_time, highest]]))
        bounds = np.searchsorted(times, np.arange(len(live)), side="right") - 1
        kept = np.full(len(times), np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(kept, bounds, live)
        kept[np.searchsorted(times, peak_time)] = live[peak_time]
        live = kept
    curve = LiveCurve(
        points=points + 1,
        times=tuple(int(t) for t in times),
        live_bytes=tuple(int(b) for b in live),
        highest_time=highest,
        highest_bytes=int(full[highest]),
    )
    return curve, full


_ITEM_BITS: dict[str, int] = {
    "pred": 8,
    "s2": 2,
    "u2": 2,
    "s4": 4,
    "u4": 4,
    "s8": 8,
    "u8": 8,
    "s16": 16,
    "u16": 16,
    "f16": 16,
    "bf16": 16,
    "s32": 32,
    "u32": 32,
    "f32": 32,
    "s64": 64,
    "u64": 64,
    "f64": 64,
    "c64": 64,
    "c128": 128,
    "token": 0,
}


def _byte_size(shape_text: str) -> int:
    """``ShapeUtil::ByteSizeOf(shape, 8)`` from a value's shape text.

    An array: its elements times the element's size (a sub-byte element packed
    only when the layout says ``E(bits)``); a tuple: 8 bytes per element (its
    index table of pointers). Tiling padding is not in it, as XLA's live ranges
    do not count it either.
    """
    if shape_text.startswith("("):
        depth, elements = 0, 1
        for char in shape_text[1:-1] if shape_text.endswith(")") else "":
            if char in "([{":
                depth += 1
            elif char in ")]}":
                depth -= 1
            elif char == "," and depth == 0:
                elements += 1
        return 0 if shape_text == "()" else 8 * elements
    dtype, shape = _shape(shape_text)
    if dtype.startswith("f8") or dtype.startswith("f4") or dtype.startswith("f6"):
        bits = 8
    else:
        bits = _ITEM_BITS.get(dtype, -1)
    if bits < 0:
        raise DumpFormatError(
            f"XLA's dump has a value of element type {dtype!r} ({shape_text[:80]}),"
            " whose size this code does not know (written for jaxlib 0.10.2 /"
            f" libtpu 0.0.52; installed jaxlib {_jaxlib()})."
        )
    packed = re.search(r"E\((\d+)\)", shape_text)
    elements = math.prod(shape)
    if packed is not None:
        return -(-elements * int(packed[1]) // 8)
    return elements * max(bits, 8) // 8 if bits else 0


def _memory_space(shape_text: str) -> int:
    """The ``S(n)`` memory space of an array's layout; 0 when it names none."""
    if shape_text.startswith("("):
        return 0
    layout = re.search(r"\{[^{}]*\}\s*$", shape_text)
    space = re.search(r"S\((\d+)\)", layout[0]) if layout else None
    return int(space[1]) if space else 0


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


def _read_module(stem: Path) -> tuple[dict[int, tuple[SourceLocation, ...]], str]:
    """The stack frames by id (innermost first) and the entry's root instruction."""
    lines = _lines(stem, _MODULE)
    sections: dict[str, list[str]] = {}
    name = ""
    for line in lines:
        if line in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            name = line
            sections[name] = []
        elif not line:
            name = ""
        elif name:
            sections[name].append(line)
    files = _table(sections.get("FileNames", []), _FILE_NAME, stem)
    functions = _table(sections.get("FunctionNames", []), _FILE_NAME, stem)
    locations: dict[int, SourceLocation] = {}
    for line in sections.get("FileLocations", []):
        row = _FILE_LOCATION.match(line)
        if row is None or row[2] not in files or row[3] not in functions:
            raise _error(stem, _MODULE, f"a file location, got {line!r}")
        locations[int(row[1])] = SourceLocation(
            files[row[2]], int(row[4]), functions[row[3]]
        )
    parents: dict[int, tuple[int, int | None]] = {}
    for line in sections.get("StackFrames", []):
        row = _STACK_FRAME.match(line)
        if row is None or int(row[2]) not in locations:
            raise _error(stem, _MODULE, f"a stack frame, got {line!r}")
        parents[int(row[1])] = (int(row[2]), int(row[3]) if row[3] else None)
    frames: dict[int, tuple[SourceLocation, ...]] = {}
    for frame in parents:
        stack, seen, at = [], set(), frame
        while at in parents and at not in seen:
            seen.add(at)
            location, parent = parents[at]
            stack.append(locations[location])
            # XLA's text prints a frame's parent as its id + 1, 1 for none (checked
            # on the pinned jaxlib: only that reading gives the Python call chain)
            at = parent - 1 if parent is not None else 0
        frames[frame] = tuple(stack)
    entry = [i for i, line in enumerate(lines) if line.startswith("ENTRY ")]
    root = next(
        (
            match[1]
            for line in lines[entry[0] :]
            if entry
            if (match := re.match(r"^  ROOT %(\S+) = ", line))
        ),
        None,
    )
    if root is None:
        raise _error(stem, _MODULE, "an ENTRY computation with a ROOT instruction")
    return frames, root


def _table(lines: list[str], pattern: re.Pattern[str], stem: Path) -> dict[str, str]:
    table = {}
    for line in lines:
        row = pattern.match(line)
        if row is None:
            raise _error(stem, _MODULE, f"a numbered name, got {line!r}")
        table[row[1]] = row[2]
    return table


# --- one buffer ------------------------------------------------------------------


def _buffer(
    item: _Assigned,
    value: _Value,
    nbytes: int,
    frames: dict[int, tuple[SourceLocation, ...]],
    root: str,
    stem: Path,
) -> PeakBuffer:
    instruction = _INSTRUCTION.match(value.instruction_text)
    assert instruction is not None
    opcode = _opcode(instruction[2])
    if opcode is None:
        raise _error(stem, _VALUES, f"an opcode, got {value.instruction_text[:200]!r}")
    metadata = _metadata(instruction[2])
    stack: tuple[SourceLocation, ...] = ()
    if "stack_frame_id" in metadata:
        frame = int(metadata["stack_frame_id"])
        if frame not in frames:
            raise _error(stem, _MODULE, f"the stack frame {frame}")
        stack = frames[frame]
    elif "source_file" in metadata and "source_line" in metadata:
        stack = (
            SourceLocation(metadata["source_file"], int(metadata["source_line"]), ""),
        )
    dtype, shape = _shape(item.shape_text)
    is_parameter = item.parameter is not None and opcode == "parameter"
    output = next((index for name, index in value.positions if name == root), None)
    return PeakBuffer(
        nbytes=nbytes,
        shape=shape,
        dtype=dtype,
        instruction=item.name,
        shape_index=item.index,
        opcode=opcode,
        op_name=metadata.get("op_name"),
        source=stack[0] if stack else None,
        stack=stack,
        parameter=item.parameter if is_parameter else None,
        parameter_index=item.parameter_index if is_parameter else None,
        output_index=output,
        allocation=item.allocation,
        memory_space=_memory_space(item.shape_text),
    )


def _opcode(text: str) -> str | None:
    """The opcode after an instruction's shape (which may be a nested tuple)."""
    depth, end = 0, len(text)
    for at, char in enumerate(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == " " and depth == 0:
            end = at
            break
    match = re.match(r" ([a-z][a-z0-9\-_]*)\(", text[end:])
    return match[1] if match else None


def _metadata(text: str) -> dict[str, str]:
    start = text.find("metadata={")
    if start < 0:
        return {}
    items: dict[str, str] = {}
    for match in _METADATA_ITEM.finditer(text, start + len("metadata={")):
        items[match[1]] = (
            re.sub(r"\\(.)", r"\1", match[2][1:-1])
            if match[2].startswith('"')
            else match[2]
        )
        end = match.end()
        if end >= len(text) or text[end] == "}":
            break
    return items


def _shape(text: str) -> tuple[str, tuple[int, ...]]:
    if text.startswith("("):
        return "tuple", ()
    array = _ARRAY.match(text)
    if array is None:
        return text.split("[")[0], ()
    dims = array[2].replace("<=", "")
    return array[1], tuple(int(d) for d in dims.split(",")) if dims else ()

"""Source locations: the module's stack-frame index and each instruction's frames."""

import functools
import importlib.util
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from nnx_introspect._xla.hlo.text import HloTextError

__all__ = [
    "SECTIONS",
    "SourceLocation",
    "entry_root",
    "frame_sections",
    "in_package",
    "source_json",
    "source_stack",
    "stack_frames",
    "user_frame",
    "user_frames",
]


@dataclass(frozen=True)
class SourceLocation:
    """One frame of user source: file, line and function, as XLA's metadata has it."""

    file: str
    line: int
    function: str


def source_json(source: SourceLocation | None) -> dict[str, Any] | None:
    """``source`` as JSON data (``file``, ``line``, ``function``), or ``None``.

    Example:
        >>> source_json(SourceLocation("/m.py", 3, "f"))
        {'file': '/m.py', 'line': 3, 'function': 'f'}
    """
    if source is None:
        return None
    return {"file": source.file, "line": source.line, "function": source.function}


_LIBRARIES: Final = ("jax", "jaxlib", "flax", "optax", "numpy")
"""Packages whose frames are not the user's model: a value's source is the
innermost frame outside them (``TwoLayerMLP.__call__``, not the
``Linear.__call__`` of flax it calls)."""


def user_frame(
    stack: Sequence[SourceLocation], fallback: SourceLocation | None = None
) -> SourceLocation | None:
    """The innermost frame of ``stack`` outside JAX, jaxlib, flax, optax and numpy.

    A frame is a library's when its file, symlinks resolved, lies under the
    directory of one of those packages as installed here (found with
    :func:`importlib.util.find_spec`, which imports none of them). The step
    report labels buffers and collectives by this frame: the model's line that
    called ``nnx.Linear``, not flax's line inside it.

    Args:
        stack: An instruction's frames, innermost first (:func:`source_stack`).
        fallback: What to return when every frame is a library's (or there
            are none); the callers pass the innermost frame, ``stack[0]``.

    Returns:
        The innermost user frame, else ``fallback``.

    Example:
        >>> import importlib.util, os
        >>> (flax_dir, *_) = importlib.util.find_spec("flax").submodule_search_locations
        >>> linear = SourceLocation(
        ...     os.path.join(flax_dir, "nnx", "nn", "linear.py"), 390, "__call__")
        >>> model = SourceLocation("/src/model.py", 12, "MLP.__call__")
        >>> user_frame((linear, model)) == model
        True
        >>> user_frame((linear,)) is None, user_frame((linear,), linear) == linear
        (True, True)
    """
    for frame in stack:
        if not _in_library(frame.file):
            return frame
    return fallback


def user_frames(stack: Sequence[SourceLocation]) -> tuple[SourceLocation, ...]:
    """The frames of ``stack`` outside JAX, jaxlib, flax, optax and numpy, in order.

    The user's call chain of an instruction (innermost first), by the rule of
    :func:`user_frame`: ``Attention.__call__`` under ``DecoderLayer.__call__``
    under ``Llama.__call__``, without flax's and JAX's frames between them,
    nor this library's private modules' (the step it builds around the model).

    Example:
        >>> import importlib.util, os
        >>> (flax_dir, *_) = importlib.util.find_spec("flax").submodule_search_locations
        >>> linear = SourceLocation(
        ...     os.path.join(flax_dir, "nnx", "nn", "linear.py"), 390, "__call__")
        >>> layer = SourceLocation("/src/model.py", 12, "Layer.__call__")
        >>> model = SourceLocation("/src/model.py", 30, "Model.__call__")
        >>> [f.function for f in user_frames((linear, layer, linear, model))]
        ['Layer.__call__', 'Model.__call__']
    """
    return tuple(
        frame
        for frame in stack
        if not _in_library(frame.file) and not _in_private(frame.file)
    )


_OWN: Final = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
)
"""This library's package directory (``.../nnx_introspect``)."""


@functools.cache
def _in_private(file: str) -> bool:
    """Whether ``file`` is one of this library's private modules (``_step/...``).

    The step built around the model, not the user's side of it. The library's
    public modules (the example models of ``nnx_introspect/examples/``, which
    a user's code is like) are the user's side: their frames are kept.
    """
    path = os.path.realpath(file)
    if not path.startswith(os.path.join(_OWN, "")):
        return False
    return os.path.relpath(path, _OWN).startswith("_")


@functools.cache
def _library_roots() -> tuple[str, ...]:
    """Each library's package directory, symlinks resolved, ending in a separator."""
    roots = []
    for name in _LIBRARIES:
        spec = importlib.util.find_spec(name)
        for location in (spec.submodule_search_locations or []) if spec else []:
            roots.append(os.path.join(os.path.realpath(location), ""))
    return tuple(roots)


@functools.cache
def in_package(file: str, package: str) -> bool:
    """Whether ``file`` lies in ``package`` as installed here (symlinks resolved).

    Example:
        >>> import optax.transforms
        >>> in_package(optax.transforms.__file__, "optax")
        True
        >>> in_package("/src/model.py", "optax")
        False
    """
    spec = importlib.util.find_spec(package)
    locations = (spec.submodule_search_locations or []) if spec else []
    roots = tuple(os.path.join(os.path.realpath(path), "") for path in locations)
    return bool(roots) and os.path.realpath(file).startswith(roots)


@functools.cache
def _in_library(file: str) -> bool:
    return os.path.realpath(file).startswith(_library_roots())


SECTIONS: Final = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_FILE_NAME: Final = re.compile(r'^(\d+) "(.*)"$')
_FILE_LOCATION: Final = re.compile(
    r"^(\d+) \{file_name_id=(\d+) function_name_id=(\d+) line=(\d+)"
)
_STACK_FRAME: Final = re.compile(
    r"^(\d+) \{file_location_id=(\d+)(?: parent_frame_id=(\d+))?"
)


def frame_sections(lines: list[str]) -> dict[str, list[str]]:
    """The lines of a module's ``FileNames`` ... ``StackFrames`` sections.

    Each section starts at its name alone on a line and ends at a blank line.

    Example:
        >>> frame_sections(["HloModule m", "", "FileNames", '1 "a.py"', "", "x"])
        {'FileNames': ['1 "a.py"']}
    """
    sections: dict[str, list[str]] = {}
    name = ""
    for line in lines:
        if line in SECTIONS:
            name = line
            sections[name] = []
        elif not line:
            name = ""
        elif name:
            sections[name].append(line)
    return sections


def stack_frames(
    sections: dict[str, list[str]],
) -> dict[int, tuple[SourceLocation, ...]]:
    """The stack frames of a module's index by id, innermost frame first.

    Raises:
        HloTextError: a numbered name, file location or stack frame this
            does not read (``what`` names which).

    Example:
        >>> frames = stack_frames({
        ...     "FileNames": ['1 "/m.py"'],
        ...     "FunctionNames": ['1 "inner"', '2 "outer"'],
        ...     "FileLocations": [
        ...         "1 {file_name_id=1 function_name_id=1 line=5 end_line=5}",
        ...         "2 {file_name_id=1 function_name_id=2 line=9 end_line=9}"],
        ...     "StackFrames": ["1 {file_location_id=2}",
        ...                     "2 {file_location_id=1 parent_frame_id=2}"],
        ... })
        >>> [(s.function, s.line) for s in frames[2]]
        [('inner', 5), ('outer', 9)]
    """
    tables: dict[str, dict[str, str]] = {}
    for name in ("FileNames", "FunctionNames"):
        table = {}
        for line in sections.get(name, []):
            row = _FILE_NAME.match(line)
            if row is None:
                raise HloTextError("a numbered name", line)
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
            raise HloTextError("a file location", line)
        locations[int(row[1])] = SourceLocation(
            tables["FileNames"][row[2]], int(row[4]), tables["FunctionNames"][row[3]]
        )
    parents: dict[int, tuple[int, int | None]] = {}
    for line in sections.get("StackFrames", []):
        row = _STACK_FRAME.match(line)
        if row is None or int(row[2]) not in locations:
            raise HloTextError("a stack frame", line)
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
    return frames


def source_stack(
    items: dict[str, str], frames: dict[int, tuple[SourceLocation, ...]]
) -> tuple[SourceLocation, ...]:
    """The frames an instruction's metadata points at, innermost first.

    Its ``stack_frame_id`` in the module's index, else its ``source_file`` and
    ``source_line`` as one frame without a function, else none.

    Raises:
        HloTextError: the id is not in ``frames`` (``what`` says so).

    Example:
        >>> source_stack({"source_file": "/m.py", "source_line": "4"}, {})
        (SourceLocation(file='/m.py', line=4, function=''),)
    """
    if "stack_frame_id" in items:
        frame = int(items["stack_frame_id"])
        if frame not in frames:
            raise HloTextError(f"the stack frame {frame}", str(items))
        return frames[frame]
    if "source_file" in items and "source_line" in items:
        return (SourceLocation(items["source_file"], int(items["source_line"]), ""),)
    return ()


def entry_root(lines: list[str]) -> str | None:
    """The name of the ENTRY computation's ROOT instruction, if the text has one.

    Example:
        >>> entry_root(["ENTRY %main () -> f32[] {", "  ROOT %c = f32[] constant(1)"])
        'c'
    """
    entry = [i for i, line in enumerate(lines) if line.startswith("ENTRY ")]
    return next(
        (
            match[1]
            for line in lines[entry[0] :]
            if entry
            if (match := re.match(r"^  ROOT %(\S+) = ", line))
        ),
        None,
    )

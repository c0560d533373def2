"""A cache of compile results: what XLA said about a lowered program, kept on disk.

JAX's own persistent compilation cache cannot serve a deviceless compile (the
compile-only client cannot deserialise executables), and the report needs the
analysis, not the executable: so the *readings* of a compile (memory, costs,
collectives, the breakdown's data) are stored, one JSON file per program.

The key (:func:`compile_key`) is a SHA-256 of everything the readings depend
on: the lowered program's text with its source locations (the breakdown and
the collectives name source lines), the devices it compiles for (platform,
kind, ids, mesh axes), the named topology and its description, the compiler
options, the ``XLA_*``/``LIBTPU*``/``TPU_*`` environment, the versions of jax,
jaxlib, the CUDA plugin, libtpu and of this package's own source (a reader
that changes reads anew), and the options a caller adds (a breakdown's
argument names). The budget is not in it: it never reaches the compiler.

A child process's whole answer (a step's readings, a serving request's) is
kept too, under :func:`answer_key`: the request it was sent (every name,
shape, spec and option), the source of every loaded module of the packages
its names import from (the model's, the loss's, the cache maker's: an edit
there is a miss) and their versions, with the toolchain, the environment and
this package's source as above. A hit starts no child: nothing is traced, so
a report read back whole costs what building its request costs.

What a hit says: the readings' ``cached`` holds when the program was compiled
and how long that compile took, as an ISO 8601 interval of a duration and its
end (``PT31.3S/2026-12-05T07:30:12+00:00``, :func:`cached_interval`; the
reports read it with ``_step``'s ``split_cached``), and ``compile_seconds`` the
time this run spent finding it: a report never gives the first compile's time
as if it were now.

Where: ``$NNX_INTROSPECT_CACHE_DIR``, else ``$XDG_CACHE_HOME/nnx-introspect``,
else ``~/.cache/nnx-introspect``. ``NNX_INTROSPECT_CACHE=off`` (or ``0``,
``false``, ``no``) turns it off, as ``cache=False`` does. The directory is
kept under :data:`MAX_CACHE_BYTES`, the least recently used entries removed
first. A damaged entry (unreadable, another format, another key) is a miss and
is removed, never an error; a cache that cannot be written is skipped.
"""

import contextlib
import datetime
import functools
import hashlib
import importlib.metadata
import json
import os
import pathlib
import re
import tempfile
import time
from collections.abc import Collection, Mapping
from typing import Any, NamedTuple

from nnx_introspect._xla.readings import XlaReadings
from nnx_introspect._xla.toolchain import (
    cuda_plugin_version,
    jaxlib_version,
    libtpu_version,
)

__all__ = [
    "MAX_CACHE_BYTES",
    "CachedResult",
    "answer_key",
    "cache_directory",
    "cache_enabled",
    "cached_interval",
    "compile_key",
    "load_answer",
    "load_result",
    "store_answer",
    "store_result",
    "without_callers",
]

MAX_CACHE_BYTES = 2**30
"""The most bytes the cache directory holds (1 GiB); the oldest used go first."""

FORMAT = 1
"""The entries' format; an entry of another is a miss."""

_OFF = frozenset({"off", "0", "false", "no"})
_ENV_PREFIXES = ("XLA_", "LIBTPU", "TPU_")


def cache_enabled(cache: bool = True) -> bool:
    """Whether results are cached: ``cache`` and not ``NNX_INTROSPECT_CACHE=off``.

    Example:
        >>> cache_enabled(False)
        False
    """
    setting = os.environ.get("NNX_INTROSPECT_CACHE", "").strip().lower()
    return cache and setting not in _OFF


def cache_directory() -> pathlib.Path:
    """Where entries are kept (see the module's docstring)."""
    given = os.environ.get("NNX_INTROSPECT_CACHE_DIR")
    if given:
        return pathlib.Path(given).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return pathlib.Path(base).expanduser() / "nnx-introspect"


@functools.cache
def _source_digest() -> str:
    """SHA-256 of this package's Python source: a changed reader reads anew."""
    root = pathlib.Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _toolchain() -> dict[str, Any]:
    return {
        "jax": _version("jax"),
        "jaxlib": jaxlib_version(),
        "cuda_plugin": cuda_plugin_version(),
        "libtpu": libtpu_version(),
        "nnx_introspect": _version("nnx-introspect"),
        "source": _source_digest(),
    }


def _devices(mesh: Any) -> list[Any]:
    """Each device as the compiler sees it: platform, kind, id, coordinates."""
    out = []
    for device in mesh.devices.flat:
        coords = getattr(device, "coords", None)
        out.append(
            [
                str(device.platform),
                str(device.device_kind),
                int(device.id),
                None if coords is None else [int(c) for c in coords],
                getattr(device, "core_on_chip", None),
            ]
        )
    return out


_LOC_DEFINITION = re.compile(r"^(#loc\d*) = loc\((.*)\)$", re.MULTILINE)
_LOC_REFERENCE = re.compile(r"#loc\d*(?!\w)")
_FILE_LOC = re.compile(r'^"(.*)":(\d+):\d+')
_FRAME_LOC = re.compile(r'^"[^"\n]*"\((#loc\d*)\)$')
_CALLSITE = re.compile(r"^callsite\((#loc\d*) at (#loc\d*)\)$")
_CALLER = "caller"


def without_callers(program_text: str, callers: Collection[tuple[str, int]]) -> str:
    r"""``program_text`` with the frames of its lowering's callers left out.

    A program lowered with its source locations names every frame above the
    traced function too: the script line that asked for the report, and its
    function, each in a location of its own and each a link of the call-site
    chains (``callsite(inner at outer)``). Those frames (``callers``:
    ``(file, line)`` of the stack that lowered the program) are not the
    program's, so they are left out of the key: a caller's frame is
    ``caller``, a call site at a caller is its inner frame alone, and the
    locations are numbered anew as the program first names them (each after
    the locations it names).
    The same step asked for from another line, or from a deeper stack (a
    command line's, a test's), is the same text, so the same compile.

    Example:
        >>> text = (
        ...     "op loc(#loc5)\n"
        ...     '#loc1 = loc("/m.py":4:2 to :9)\n'
        ...     '#loc2 = loc("/run.py":17:0 to :30)\n'
        ...     '#loc3 = loc("main"(#loc2))\n'
        ...     '#loc4 = loc("f"(#loc1))\n'
        ...     "#loc5 = loc(callsite(#loc4 at #loc3))"
        ... )
        >>> print(without_callers(text, {("/run.py", 17)}))
        op loc(#loc2)
        #loc1 = loc("/m.py":4:2 to :9)
        #loc2 = loc("f"(#loc1))
    """
    if not callers:
        return program_text
    definitions = {m[1]: m[2] for m in _LOC_DEFINITION.finditer(program_text)}
    body = _LOC_DEFINITION.sub("", program_text).rstrip("\n")
    resolved: dict[str, str] = {}  # an old alias -> its new one, or ``caller``
    renamed: dict[str, str] = {}  # a new definition's text -> its new alias
    lines: list[str] = []

    def resolve(alias: str) -> str:
        if alias in resolved:
            return resolved[alias]
        if alias not in definitions:
            return alias  # not defined here (``#loc`` itself, say): kept as named
        resolved[alias] = alias  # a cycle (none in MLIR's text) ends here
        text = definitions[alias]
        frame = _FRAME_LOC.match(text)  # a function's name at its line
        call = _CALLSITE.match(text)
        if _is_caller_file(text, callers) or (
            frame and _is_caller_file(definitions.get(frame[1], ""), callers)
        ):
            new = _CALLER
        elif call and resolve(call[2]) == _CALLER:
            new = resolve(call[1])
        else:
            named = _LOC_REFERENCE.sub(lambda m: resolve(m[0]), text)
            if named not in renamed:
                renamed[named] = f"#loc{len(renamed) + 1}"
                lines.append(f"{renamed[named]} = loc({named})")
            new = renamed[named]
        resolved[alias] = new
        return new

    body = _LOC_REFERENCE.sub(lambda m: resolve(m[0]), body)
    return "\n".join([body, *lines])


def _is_caller_file(text: str, callers: Collection[tuple[str, int]]) -> bool:
    """Whether the location ``text`` is a file's line among ``callers``."""
    file = _FILE_LOC.match(text)
    return file is not None and (file[1], int(file[2])) in callers


def compile_key(
    program_text: str,
    mesh: Any,
    *,
    topology: Any = None,
    compiler_options: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> str:
    """The SHA-256 (hex) naming a compile's results.

    Args:
        program_text: The lowered program's text, with its source locations.
        mesh: The ``jax.sharding.Mesh`` it compiles for.
        topology: The named topology and its description (JSON-able, or its
            ``repr`` is taken), or ``None``.
        compiler_options: The options the compile is given.
        extra: Whatever else the readings depend on (JSON-able, or ``repr``).

    Example:
        >>> import jax
        >>> from jax.sharding import Mesh
        >>> mesh = Mesh(jax.devices()[:2], ("data",))
        >>> a = compile_key("module @f {}", mesh)
        >>> a == compile_key("module @f {}", mesh)
        True
        >>> a == compile_key("module @g {}", mesh)
        False
        >>> len(a)
        64
    """
    environment = {
        k: v for k, v in sorted(os.environ.items()) if k.startswith(_ENV_PREFIXES)
    }
    described = {
        "format": FORMAT,
        "devices": _devices(mesh),
        "axes": [[str(a), int(s)] for a, s in mesh.shape.items()],
        "topology": topology,
        "options": dict(compiler_options or {}),
        "environment": environment,
        "toolchain": _toolchain(),
        "extra": dict(extra or {}),
    }
    text = json.dumps(described, sort_keys=True, default=repr)
    digest = hashlib.sha256(text.encode())
    digest.update(b"\0")
    digest.update(program_text.encode())
    return digest.hexdigest()


class CachedResult(NamedTuple):
    """A cache hit: the stored readings, and when and in how long they were compiled.

    ``compiled_on`` is :func:`cached_interval`'s: the first compile's
    duration and the time it ended (ISO 8601).
    """

    readings: XlaReadings
    compiled_on: str


def cached_interval(compiled_on: str, seconds: float | None) -> str:
    """``PT31.3S/2026-12-05T07:30:12+00:00``: a compile's duration and its end.

    An ISO 8601 interval (a duration, then the end) for a compile that ended
    at ``compiled_on`` and took ``seconds``; ``compiled_on`` alone when the
    time is not known.

    Example:
        >>> cached_interval("2026-12-05T07:30:12+00:00", 31.25)
        'PT31.25S/2026-12-05T07:30:12+00:00'
        >>> cached_interval("2026-12-05T07:30:12+00:00", 1234.5678)
        'PT1234.568S/2026-12-05T07:30:12+00:00'
        >>> cached_interval("2026-12-05T07:30:12+00:00", None)
        '2026-12-05T07:30:12+00:00'
    """
    if seconds is None or not 0 <= seconds < float("inf"):
        return compiled_on
    return f"PT{round(float(seconds), 3)}S/{compiled_on}"


def _entry(key: str) -> pathlib.Path:
    return cache_directory() / "results" / f"{key}.json"


def _read(path: pathlib.Path, key: str, field: str) -> dict[str, Any] | None:
    """The entry at ``path`` if it is ``key``'s, with a dict ``field``; or ``None``.

    A damaged entry (unreadable, another format, another key) is a miss and is
    removed; a hit marks the entry used now (for the least-recently-used bound).
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if (
            not isinstance(data, dict)
            or data.get("format") != FORMAT
            or data.get("key") != key
            or not isinstance(data.get(field), dict)
            or not isinstance(data.get("compiled_on"), str)
        ):
            raise ValueError("not an entry of this format")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, UnicodeDecodeError):
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    with contextlib.suppress(OSError):
        os.utime(path)
    return data


def load_result(key: str) -> CachedResult | None:
    """The entry named ``key``, or ``None``: absent, or damaged (then removed).

    A hit marks the entry used now (for the least-recently-used bound).
    """
    path = _entry(key)
    data = _read(path, key, "readings")
    if data is None:
        return None
    try:
        readings = XlaReadings.from_json_data(data["readings"])
    except ValueError:
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    when = readings.cached or cached_interval(
        data["compiled_on"], readings.compile_seconds
    )
    return CachedResult(readings, when)


def store_result(
    key: str, readings: XlaReadings, *, limit: int = MAX_CACHE_BYTES
) -> None:
    """Keep ``readings`` under ``key``; then hold the size bound.

    Written to a temporary file and renamed into place, so a reader never
    sees half an entry; a directory that cannot be written is skipped.
    """
    path = _entry(key)
    entry = {
        "format": FORMAT,
        "key": key,
        "compiled_on": datetime.datetime.now(datetime.UTC).isoformat(
            timespec="seconds"
        ),
        "readings": readings.json_data(),
    }
    _write(path, entry, limit)


def _write(path: pathlib.Path, entry: Mapping[str, Any], limit: int) -> None:
    """``entry`` written to ``path`` whole; then the directory held to ``limit``.

    A temporary file renamed into place, so a reader never sees half an
    entry; a directory that cannot be written is skipped.
    """
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                json.dump(entry, file)
            os.replace(temporary, path)
        finally:
            if os.path.exists(temporary):
                os.unlink(temporary)
        _hold_bound(path.parent, limit)


def _hold_bound(directory: pathlib.Path, limit: int) -> None:
    """Remove the least recently used entries until ``directory`` holds ``limit``."""
    entries = []
    for path in directory.glob("*.json"):
        with contextlib.suppress(OSError):
            stat = path.stat()
            entries.append((stat.st_mtime, stat.st_size, path))
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries, key=lambda e: (e[0], str(e[2]))):
        if total <= limit:
            return
        with contextlib.suppress(OSError):
            path.unlink()
        total -= size


_NAMED = re.compile(r"^([A-Za-z_][\w.]*):[A-Za-z_]\w*$")
"""A ``"package.module:name"`` in a child's request."""


def _package_code(top: str) -> dict[str, Any]:
    """The version of package ``top`` and a digest of its loaded modules' source."""
    import sys

    digest = hashlib.sha256()
    for name in sorted(
        n for n in list(sys.modules) if n == top or n.startswith(top + ".")
    ):
        path = getattr(sys.modules.get(name), "__file__", None)
        if not path or not path.endswith(".py"):
            continue
        digest.update(name.encode())
        with contextlib.suppress(OSError):
            digest.update(pathlib.Path(path).read_bytes())
    version = None
    with contextlib.suppress(ValueError):
        version = _version(top)
    return {"version": version, "source": digest.hexdigest()}


def answer_key(module: str, payload: Mapping[str, Any], devices: int) -> str:
    """The SHA-256 (hex) naming a child's answer to ``payload``.

    The request itself, the code its ``"package.module:name"`` values import
    (every loaded module of each such top-level package: source and
    version), the environment, the toolchain and this package's source.

    Example:
        >>> a = answer_key("m", {"target": "json:loads", "mesh": [["x", 2]]}, 2)
        >>> a == answer_key("m", {"target": "json:loads", "mesh": [["x", 2]]}, 2)
        True
        >>> a == answer_key("m", {"target": "json:loads", "mesh": [["x", 4]]}, 4)
        False
    """
    tops = sorted(
        {
            found[1].split(".")[0]
            for value in payload.values()
            if isinstance(value, str) and (found := _NAMED.match(value))
        }
    )
    described = {
        "format": FORMAT,
        "module": module,
        "devices": devices,
        "request": dict(payload),
        "code": {top: _package_code(top) for top in tops},
        "environment": {
            k: v for k, v in sorted(os.environ.items()) if k.startswith(_ENV_PREFIXES)
        },
        "toolchain": _toolchain(),
    }
    text = json.dumps(described, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def _answer_entry(key: str) -> pathlib.Path:
    return cache_directory() / "answers" / f"{key}.json"


def _marked(data: Any, when: str, seconds: float) -> Any:
    """``data`` with every XLA readings' ``cached`` and ``compile_seconds`` now.

    ``cached`` (when not set already: a compile the child itself found in the
    cache keeps its own) is the compile that ended at ``when``, with the
    seconds it took; ``compile_seconds`` is ``seconds``, this look-up's.
    """
    if isinstance(data, dict):
        out = {k: _marked(v, when, seconds) for k, v in data.items()}
        if "compiler_log" in out:
            if out.get("cached") is None:
                took = out.get("compile_seconds")
                number = took if isinstance(took, int | float) else None
                out["cached"] = cached_interval(when, number)
            out["compile_seconds"] = seconds
        return out
    if isinstance(data, list):
        return [_marked(v, when, seconds) for v in data]
    return data


def load_answer(key: str) -> dict[str, Any] | None:
    """The answer kept under ``key`` (its readings marked as cached), or ``None``.

    Each readings' ``cached`` gives the first compile's end and seconds, its
    ``compile_seconds`` the seconds this look-up took (reading the entry).
    A damaged entry is a miss, and is removed.
    """
    began = time.perf_counter()
    entry = _read(_answer_entry(key), key, "answer")
    if entry is None:
        return None
    seconds = time.perf_counter() - began
    marked: dict[str, Any] = _marked(entry["answer"], entry["compiled_on"], seconds)
    return marked


def store_answer(
    key: str, answer: Mapping[str, Any], *, limit: int = MAX_CACHE_BYTES
) -> None:
    """Keep a child's ``answer`` under ``key``, as :func:`store_result` does."""
    path = _answer_entry(key)
    entry = {
        "format": FORMAT,
        "key": key,
        "compiled_on": datetime.datetime.now(datetime.UTC).isoformat(
            timespec="seconds"
        ),
        "answer": dict(answer),
    }
    _write(path, entry, limit // 4)

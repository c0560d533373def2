"""Compiler flags as the user runs them: given, from the environment, listed.

A training script sets XLA's flags three ways, and a compile here honours all
three: ``XLA_FLAGS`` (XLA's ``DebugOptions``, every backend, read when the
compiler starts), ``LIBTPU_INIT_ARGS`` (libtpu's, read when libtpu loads: a
TPU target's) and options given to the compile itself
(``lowered.compile(compiler_options=...)``), which a report's
``compiler_flags=`` (``--xla-flag NAME=VALUE`` on the command line) sets.

:func:`as_compiler_flags` normalises what a user gives (a mapping, ``"--name=value"``
strings, or one string of them as ``LIBTPU_INIT_ARGS`` spells them) into
``(name, value)`` text pairs; :func:`compile_options` turns them into the
compile's options; :func:`flags_used` lists every flag a compile ran with and
where each came from (:class:`CompilerFlag`). The library's own
``--xla_force_host_platform_device_count`` (the virtual CPU devices of a
child compile) is never listed.
"""

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple, TypeAlias

from nnx_introspect._typing import ArgumentError

__all__ = [
    "FLAG_SOURCES",
    "CompilerFlag",
    "CompilerFlagsLike",
    "as_compiler_flags",
    "compile_options",
    "flag_refusal",
    "flags_text",
    "flags_used",
]

CompilerFlagsLike: TypeAlias = Mapping[str, Any] | Sequence[Any] | str | None
"""What ``compiler_flags=`` takes: ``{"xla_name": True}``, ``["--xla_name=true"]``,
``"--xla_a=true --xla_b=1"``, ``(name, value)`` pairs, or ``None`` for none."""

FLAG_SOURCES = ("XLA_FLAGS", "LIBTPU_INIT_ARGS", "compiler_flags")
"""Where a flag came from: the two environment variables, or the argument."""

HOST_DEVICE_COUNT = "xla_force_host_platform_device_count"
"""The library's own flag (a child's virtual CPU devices): never listed."""

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_INTEGER = re.compile(r"^[+-]?\d+$")
_FIX = (
    "Pass NAME=VALUE pairs as XLA and libtpu spell them, e.g. "
    "compiler_flags={'xla_tpu_enable_async_collective_fusion': False} or "
    "compiler_flags='--xla_tpu_enable_async_collective_fusion=false'."
)


class CompilerFlag(NamedTuple):
    """One flag a program was compiled with, and where it came from.

    ``source`` is one of :data:`FLAG_SOURCES`.

    Example:
        >>> flag = CompilerFlag("xla_cpu_enable_fast_math", "true", "compiler_flags")
        >>> flag.name, flag.value, flag.source
        ('xla_cpu_enable_fast_math', 'true', 'compiler_flags')
    """

    name: str
    value: str
    source: str


def _value_text(name: str, value: Any) -> str:
    """A flag's value as text: ``True`` is ``"true"``, ``4`` is ``"4"``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    raise ArgumentError(
        "compiler_flags",
        f"`compiler_flags` gives {name!r} the value {value!r}, a "
        f"{type(value).__name__}: a flag's value is a bool, a number or text. " + _FIX,
    )


def _pair(entry: Any) -> tuple[str, str]:
    """One entry, ``"--name=value"`` or ``(name, value)``, as a normalised pair."""
    if isinstance(entry, str):
        name, equals, value = entry.strip().partition("=")
        if not equals:
            raise ArgumentError(
                "compiler_flags",
                f"`compiler_flags` entry {entry!r} has no value: each flag is "
                f"NAME=VALUE ('{entry.strip()}=true' for a switch). " + _FIX,
            )
    elif isinstance(entry, Sequence) and len(entry) == 2:
        name, value = entry[0], entry[1]
        if not isinstance(name, str):
            raise ArgumentError(
                "compiler_flags",
                f"`compiler_flags` entry {tuple(entry)!r} names no flag. " + _FIX,
            )
    else:
        raise ArgumentError(
            "compiler_flags",
            f"`compiler_flags` entry {entry!r} is neither '--NAME=VALUE' nor a "
            "(name, value) pair. " + _FIX,
        )
    name = name.strip().lstrip("-")
    if not _NAME.match(name):
        raise ArgumentError(
            "compiler_flags",
            f"`compiler_flags` entry {entry!r} names no flag ({name!r} is not a "
            "flag's name). " + _FIX,
        )
    return name, _value_text(name, value)


def as_compiler_flags(flags: CompilerFlagsLike) -> tuple[tuple[str, str], ...]:
    """``flags`` as ``(name, value)`` text pairs, names without their dashes.

    Raises:
        ArgumentError: For an entry that is not NAME=VALUE, a value that is
            not a bool, number or text, or a flag given twice (``argument``
            ``"compiler_flags"``).

    Example:
        >>> as_compiler_flags({"xla_tpu_enable_async_collective_fusion": False})
        (('xla_tpu_enable_async_collective_fusion', 'false'),)
        >>> as_compiler_flags("--xla_a=true  --xla_b=4")
        (('xla_a', 'true'), ('xla_b', '4'))
        >>> as_compiler_flags(["--xla_a=true", ("xla_b", 4)])
        (('xla_a', 'true'), ('xla_b', '4'))
        >>> as_compiler_flags(None)
        ()
        >>> try:
        ...     as_compiler_flags(["--xla_a"])
        ... except ValueError as error:
        ...     print(error.argument, "|", str(error)[:59])
        compiler_flags | `compiler_flags` entry '--xla_a' has no value: each flag is
    """
    if flags is None:
        return ()
    entries: Iterable[Any]
    if isinstance(flags, str):
        entries = flags.split()
    elif isinstance(flags, Mapping):
        entries = [(name, value) for name, value in flags.items()]
    elif isinstance(flags, Sequence):
        entries = flags
    else:
        raise ArgumentError(
            "compiler_flags",
            f"`compiler_flags` must be a mapping, a sequence of '--NAME=VALUE' "
            f"or one string of them, got {type(flags).__name__}. " + _FIX,
        )
    pairs: dict[str, str] = {}
    for entry in entries:
        name, value = _pair(entry)
        if name in pairs and pairs[name] != value:
            raise ArgumentError(
                "compiler_flags",
                f"`compiler_flags` gives {name!r} twice ({pairs[name]!r} and "
                f"{value!r}): give each flag once.",
            )
        pairs[name] = value
    return tuple(pairs.items())


def _option(value: str) -> bool | int | str:
    """A flag's text as the compile takes it: a bool, an integer or the text."""
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if _INTEGER.match(value):
        return int(value)
    return value


def compile_options(flags: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """The ``compiler_options=`` of normalised flags (see :func:`as_compiler_flags`).

    ``"true"``/``"false"`` are bools (XLA refuses them as text) and integers
    are ints; any other value is passed as its text.

    Example:
        >>> compile_options([("xla_a", "false"), ("xla_b", "4"), ("xla_c", "x")])
        {'xla_a': False, 'xla_b': 4, 'xla_c': 'x'}
    """
    return {name: _option(value) for name, value in flags}


def _environment(variable: str, environ: Mapping[str, str]) -> list[CompilerFlag]:
    """The flags one environment variable sets, as XLA's flag parser reads them."""
    out = []
    for word in environ.get(variable, "").split():
        name, equals, value = word.partition("=")
        name = name.lstrip("-")
        if not name or name == HOST_DEVICE_COUNT:
            continue
        out.append(CompilerFlag(name, value if equals else "true", variable))
    return out


def flags_used(
    given: Iterable[tuple[str, str]],
    backend: str,
    environ: Mapping[str, str] | None = None,
) -> tuple[CompilerFlag, ...]:
    """Every flag a compile for ``backend`` runs with, and where it came from.

    ``XLA_FLAGS`` (without the library's own
    ``--xla_force_host_platform_device_count``), then ``LIBTPU_INIT_ARGS``
    for a TPU backend, as ``environ`` (default: this process's environment)
    sets them, then the ``given`` ``compiler_flags``, which override both.

    Example:
        >>> environ = {
        ...     "XLA_FLAGS": "--xla_force_host_platform_device_count=8 --xla_x=1",
        ...     "LIBTPU_INIT_ARGS": "--xla_tpu_y=false",
        ... }
        >>> for flag in flags_used([("xla_z", "true")], "tpu", environ):
        ...     print(flag.name, flag.value, flag.source)
        xla_x 1 XLA_FLAGS
        xla_tpu_y false LIBTPU_INIT_ARGS
        xla_z true compiler_flags
    """
    environ = os.environ if environ is None else environ
    found = _environment("XLA_FLAGS", environ)
    if backend == "tpu":
        found += _environment("LIBTPU_INIT_ARGS", environ)
    return (
        *found,
        *(CompilerFlag(name, value, "compiler_flags") for name, value in given),
    )


def flags_text(flags: Sequence[CompilerFlag]) -> str | None:
    """The report's line of the flags a program compiled with; ``None`` for none.

    Example:
        >>> flags_text([
        ...     CompilerFlag("xla_a", "false", "LIBTPU_INIT_ARGS"),
        ...     CompilerFlag("xla_b", "true", "LIBTPU_INIT_ARGS"),
        ...     CompilerFlag("xla_c", "4", "compiler_flags"),
        ... ])  # doctest: +NORMALIZE_WHITESPACE
        'Compiler flags: xla_a=false, xla_b=true (LIBTPU_INIT_ARGS); xla_c=4
        (compiler_flags).'
    """
    if not flags:
        return None
    groups: list[tuple[str, list[str]]] = []
    for flag in flags:
        if not groups or groups[-1][0] != flag.source:
            groups.append((flag.source, []))
        groups[-1][1].append(f"{flag.name}={flag.value}")
    parts = [f"{', '.join(words)} ({source})" for source, words in groups]
    return f"Compiler flags: {'; '.join(parts)}."


_UNKNOWN = re.compile(r"No such compile option: '[^']*'")
_BAD_VALUE = re.compile(r"While setting option \S+?, .*?(?:value\.|$)", re.MULTILINE)


def flag_refusal(error: Exception, backend: str = "") -> ArgumentError | None:
    """The one-line error of a compile XLA refused for a flag; else ``None``.

    XLA's own words are quoted: a flag it does not know (``No such compile
    option``; XLA:TPU's ``xla_tpu_*`` flags exist only for a TPU target), or
    a value it cannot read for the flag's type.

    Example:
        >>> said = "INVALID_ARGUMENT: No such compile option: 'not_a_flag_xyz'"
        >>> print(flag_refusal(RuntimeError(said), "cpu"))
        XLA:CPU refused `compiler_flags`: No such compile option: \
'not_a_flag_xyz'. Pass only flags this compiler knows, spelled as XLA and \
libtpu spell them (the xla_tpu_* flags need a TPU `topology`).
        >>> flag_refusal(RuntimeError("RESOURCE_EXHAUSTED: Ran out of memory")) is None
        True
    """
    text = str(error)
    compiler = f"XLA:{backend.upper()}" if backend else "XLA"
    unknown = _UNKNOWN.search(text)
    if unknown is not None:
        hint = (
            "" if backend == "tpu" else " (the xla_tpu_* flags need a TPU `topology`)"
        )
        return ArgumentError(
            "compiler_flags",
            f"{compiler} refused `compiler_flags`: {unknown[0]}. Pass only flags "
            f"this compiler knows, spelled as XLA and libtpu spell them{hint}.",
        )
    bad = _BAD_VALUE.search(text)
    if bad is not None:
        return ArgumentError(
            "compiler_flags",
            f"{compiler} refused `compiler_flags`: {bad[0].rstrip('.')}. Give "
            "the flag a value of its type: true or false for a switch, an "
            "integer for a count.",
        )
    return None

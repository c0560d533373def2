"""CLI targets: resolve ``package.module:callable`` and build the model it names.

Every subcommand goes through :func:`resolve_factory` and :func:`build_target`,
so import errors, missing attributes, non-callables and raising factories all
become one :class:`TargetError` with a one-line message (the CLI prints it and
exits with code 2). The original exception is kept as ``__cause__`` for
``--debug``.

User code (the module's import, an attribute lookup, the factory call) may end
in any way: an exception, ``sys.exit(...)`` (``SystemExit``, whatever its code)
or another ``BaseException``. All of them are the target's failure, never the
command's result, so ``sys.exit(0)`` in a factory cannot pass a CI gate. Only
``KeyboardInterrupt`` goes through: Ctrl-C still interrupts the command.

This module imports JAX and flax only when a model is built, so the CLI can
parse its arguments (and print ``--help``) without them. :func:`check_target`
goes further: it finds the target's module and reads its source without
importing either, so a misspelt target is refused (with the closest name) in a
fraction of a second, before JAX starts.
"""

import ast
import difflib
import importlib
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable
from typing import Any

from nnx_introspect._text import error_line

__all__ = [
    "DEFAULT_TARGET",
    "TargetError",
    "build_target",
    "check_target",
    "resolve_factory",
]

DEFAULT_TARGET = "nnx_introspect.examples:llama_7b_sharded"
"""The target every command uses when none is given: Llama-2-7B shapes with
sharding annotations (``fsdp``, ``tp``), built abstractly."""


class TargetError(Exception):
    """A target that cannot be resolved or built; the message is one line."""


def _not_interrupt(error: BaseException) -> None:
    """Re-raise ``error`` if it is a ``KeyboardInterrupt`` (Ctrl-C interrupts)."""
    if isinstance(error, KeyboardInterrupt):
        raise error


def _short_repr(value: object) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= 80 else text[:77] + "..."


def resolve_factory(spec: str) -> Callable[..., Any]:
    """The callable named by ``spec`` (``"package.module:callable"``).

    The attribute part may be dotted (``"pkg.mod:Class.create"``). The current
    directory is importable during the lookup, as with ``python -m``.

    Raises:
        TargetError: If ``spec`` is malformed or written like a file path
            (``models/my_model.py:make``), the module cannot be imported, the
            attribute is missing or is not callable.
    """
    module_name, attr_path = _parts(spec)
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except BaseException as error:  # any import-time failure is the target's fault
        _not_interrupt(error)
        raise TargetError(
            f"cannot import module {module_name!r} of target {spec!r}: "
            f"{error_line(error)}"
        ) from error
    finally:
        if added and cwd in sys.path:  # the module may have changed either
            sys.path.remove(cwd)
    obj: Any = module
    for part in attr_path.split("."):
        owner = f"{type(obj).__name__} {getattr(obj, '__name__', attr_path)!r}"
        try:  # a module `__getattr__` or a property is user code too
            obj = getattr(obj, part)
        except AttributeError as error:
            names = [n for n in dir(obj) if not n.startswith("_")]
            raise TargetError(
                f"{owner} has no attribute {part!r} (target {spec!r})"
                f"{_closest(spec, part, names)}."
            ) from error
        except BaseException as error:
            _not_interrupt(error)
            raise TargetError(
                f"looking up {part!r} of target {spec!r} failed: {error_line(error)}"
            ) from error
    if not callable(obj):
        raise TargetError(
            f"target {spec!r} is a {type(obj).__name__}, not a callable taking "
            "`rngs` and returning an nnx.Module."
        )
    return obj  # type: ignore[no-any-return]


def _parts(spec: str, what: str = "TARGET") -> tuple[str, str]:
    """``(module, attribute path)`` of ``spec``, or the error of its form."""
    module_name, sep, attr_path = spec.partition(":")
    if not sep or not module_name or not attr_path:
        raise TargetError(
            f"{what} must look like 'package.module:callable', got {spec!r}. "
            f"For example: {DEFAULT_TARGET}."
        )
    _refuse_a_path(spec, module_name, attr_path)
    return module_name, attr_path


def _closest(spec: str, given: str, names: list[str]) -> str:
    """``" (did you mean 'pkg.mod:name'?)"`` for the name closest to ``given``.

    Example:
        >>> _closest("pkg.mod:lama", "lama", ["llama", "mistral"])
        " (did you mean 'pkg.mod:llama'?)"
    """
    close = difflib.get_close_matches(given, names, 1)
    if not close:
        return ""
    head, _, tail = spec.partition(":")
    return f" (did you mean {head + ':' + tail.replace(given, close[0], 1)!r}?)"


def check_target(spec: str, what: str = "TARGET") -> None:
    """Refuse ``spec`` when it surely names nothing, importing neither it nor JAX.

    Its form (``package.module:callable``, not a file path); its module, found
    on the import path as Python would find it (the top-level package by
    ``importlib.util.find_spec``, which imports nothing, then its folders);
    and, when the module is Python source, that it defines the callable's
    first name (read with :mod:`ast`). A module whose names the source cannot
    tell (a ``from x import *``, a module ``__getattr__``), or one that is not
    source (an extension, a zip), is left to :func:`resolve_factory`.

    ``what`` names ``spec`` in the messages as the command line does
    (``TARGET``, ``--loss``...).

    Raises:
        TargetError: Naming what is wrong and, when one is close, the name
            meant: ``module 'pkg.models' has no attribute 'lama_7b' (TARGET
            'pkg.models:lama_7b') (did you mean 'pkg.models:llama_7b'?)``.

    Example:
        >>> check_target("nnx_introspect.examples:llama_tiny")
        >>> check_target("nnx_introspect.examples:lama_tiny")
        Traceback (most recent call last):
        ...
        nnx_introspect._targets.TargetError: module 'nnx_introspect.examples' \
has no attribute 'lama_tiny' (TARGET 'nnx_introspect.examples:lama_tiny') (did \
you mean 'nnx_introspect.examples:llama_tiny'?).
    """
    module_name, attr_path = _parts(spec, what)
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:  # the module's own imports are looked up as the import would
        source = _module_source(spec, module_name, what)
        names = None if source is None else _defined_names(source[0])
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)
    if source is None:
        return
    folders = source[1]
    first = attr_path.split(".")[0]
    if names is None or first in names or first in _submodules(folders):
        return
    public = sorted(n for n in names if not n.startswith("_"))
    raise TargetError(
        f"module {module_name!r} has no attribute {first!r} ({what} {spec!r})"
        f"{_closest(spec, first, public)}."
    )


def _module_source(
    spec: str, module_name: str, what: str = "TARGET"
) -> tuple[str, list[str]] | None:
    """The module's source file and its package folders, or ``None`` if not known.

    Raises:
        TargetError: If the module surely does not exist: its top-level
            package is nowhere on the import path, or a package's folders
            hold no submodule of the name.
    """
    parts = module_name.split(".")
    try:
        found = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError):
        return None  # the import will say what is wrong
    if found is None:
        raise TargetError(
            f"cannot import module {module_name!r} of {what} {spec!r}: "
            f"ModuleNotFoundError: No module named {parts[0]!r}"
        )
    origin = found.origin if found.has_location else None
    folders = list(found.submodule_search_locations or [])
    for depth, part in enumerate(parts[1:], start=1):
        if not folders:
            return None  # a module, not a package: the import will say so
        located = _submodule(folders, part)
        if located is None:
            known = sorted(_submodules(folders))
            close = difflib.get_close_matches(part, known, 1)
            name = ".".join(parts[: depth + 1])
            hint = (
                f" (did you mean {'.'.join([*parts[:depth], close[0]])!r}?)"
                if close
                else ""
            )
            raise TargetError(
                f"cannot import module {module_name!r} of {what} {spec!r}: "
                f"ModuleNotFoundError: No module named {name!r}{hint}"
            )
        origin, folders = located
    if origin is None or not origin.endswith(".py"):
        return None
    return origin, folders


def _submodule(folders: list[str], name: str) -> tuple[str | None, list[str]] | None:
    """``(source or None, its folders)`` of submodule ``name``, or ``None``."""
    for folder in folders:
        package = os.path.join(folder, name)
        if os.path.isfile(os.path.join(package, "__init__.py")):
            return os.path.join(package, "__init__.py"), [package]
        if os.path.isfile(package + ".py"):
            return package + ".py", []
        for suffix in importlib.machinery.all_suffixes():
            if os.path.isfile(package + suffix):
                return None, []  # compiled or an extension: not read here
        if os.path.isdir(package):
            return None, [package]  # a namespace package
    return None


def _submodules(folders: list[str]) -> set[str]:
    """The modules and packages the package ``folders`` hold."""
    names = set()
    for folder in folders:
        try:
            entries = os.listdir(folder)
        except OSError:
            continue
        for entry in entries:
            stem = entry.split(".")[0]
            if stem.isidentifier() and (
                entry.endswith(tuple(importlib.machinery.all_suffixes()))
                or os.path.isdir(os.path.join(folder, entry))
            ):
                names.add(stem)
    return names


def _defined_names(path: str) -> set[str] | None:
    """The names a module's top level binds, or ``None`` when its source cannot tell.

    Definitions, assignments and imports, inside ``if``/``try``/``with``
    blocks too; ``None`` for a ``from x import *``, a module ``__getattr__``,
    a write to ``globals()``, or source that does not parse; ``None`` too for
    a top level that may stop the import before the name (a ``raise`` or an
    ``assert``, an import of a package not on the import path): the import
    then says why, not a missing name.
    """
    try:
        with open(path, encoding="utf-8") as file:
            tree = ast.parse(file.read(), path)
    except (OSError, SyntaxError, ValueError):
        return None
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            return None
        if isinstance(node, ast.Name) and node.id in ("globals", "setattr", "vars"):
            return None
    body = list(tree.body)
    while body:
        node = body.pop(0)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name == "__getattr__":
                return None
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            if not _importable(node):
                return None
            for alias in node.names:
                names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.Raise | ast.Assert):
            return None
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.If | ast.Try | ast.With | ast.For | ast.While):
            for field in ("body", "orelse", "finalbody"):
                body += getattr(node, field, [])
            for handler in getattr(node, "handlers", []):
                body += handler.body
            if isinstance(node, ast.For):
                names.update(
                    n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)
                )
        elif isinstance(node, ast.Expr | ast.Pass):
            continue
    return names


def _importable(node: ast.Import | ast.ImportFrom) -> bool:
    """Whether the top-level packages an import statement names are on the path.

    Found as :func:`check_target` finds a target's, importing nothing; a
    relative import counts as found.
    """
    if isinstance(node, ast.ImportFrom):
        tops = [node.module.split(".")[0]] if node.module and not node.level else []
    else:
        tops = [alias.name.split(".")[0] for alias in node.names]
    for top in tops:
        try:
            if importlib.util.find_spec(top) is None:
                return False
        except (ImportError, ValueError):
            return False
    return True


def _refuse_a_path(spec: str, module_name: str, attr_path: str) -> None:
    """A target written as a file (``./my_model.py:make``) is named as a module.

    Python's import system would answer ``the 'package' argument is
    required`` (a leading dot) or ``No module named 'models/my_model'``.
    """
    path = module_name.replace("\\", "/")
    if "/" not in path and not path.endswith(".py") and not path.startswith("."):
        return
    stem = path.rstrip("/").rsplit("/", 1)[-1].lstrip(".")
    stem = stem.removesuffix(".py") or "my_model"
    folder = path.rsplit("/", 1)[0] if "/" in path.strip("/") else "."
    where = "the current folder" if folder in ("", ".") else f"{folder!r}"
    raise TargetError(
        f"TARGET {spec!r} is written like a file path; use `module:callable`, "
        f"e.g. `{stem}:{attr_path}`, run from the folder holding {stem}.py "
        f"({where}) or with that folder on PYTHONPATH."
    )


def _build_concrete(factory: Callable[..., Any], seed: int) -> Any:
    """``factory(nnx.Rngs(seed))``, also for models annotated with shardings.

    A user without a mesh builds such a model with eager sharding off: the
    annotations stay as metadata and the values are the ones the same seed
    gives the unannotated model (:func:`~nnx_introspect._nnx.build_without_mesh`).
    """
    from flax import nnx

    from nnx_introspect._nnx import build_without_mesh

    return build_without_mesh(lambda: factory(nnx.Rngs(seed)))


def build_target(spec: str, *, seed: int = 0, abstract: bool = True) -> Any:
    """Resolve ``spec`` and build its model from ``nnx.Rngs(seed)``.

    Abstractly by default (:func:`~nnx_introspect.abstract_model`: nothing is
    allocated); concretely with ``abstract=False``, for reports that need values.
    A model annotated with shardings builds concretely with no mesh set, as its
    abstract build does (flax's eager sharding off), with the values of the
    unannotated model for the same seed.

    Raises:
        TargetError: If the target cannot be resolved, the factory raises, or it
            returns something other than an NNX graph node.
    """
    factory = resolve_factory(spec)
    # Heavy imports (JAX, flax) only once a model is really built.
    from flax import nnx

    from nnx_introspect._abstract import abstract_model

    try:
        if abstract:
            model = abstract_model(factory, seed=seed)
        else:
            model = _build_concrete(factory, seed)
    except BaseException as error:
        _not_interrupt(error)
        raise TargetError(f"factory {spec!r} failed: {error_line(error)}") from error
    if not isinstance(model, nnx.Pytree):
        raise TargetError(
            f"factory {spec!r} returned {_short_repr(model)}, not an nnx.Module."
        )
    return model

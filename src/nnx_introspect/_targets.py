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
parse its arguments (and print ``--help``) without them.
"""

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from nnx_introspect._text import error_line

__all__ = [
    "DEFAULT_TARGET",
    "TargetError",
    "build_target",
    "resolve_factory",
]

DEFAULT_TARGET = "nnx_introspect.examples:llama_7b"
"""The target used when none is given: Llama-2-7B shapes, built abstractly."""


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
    module_name, sep, attr_path = spec.partition(":")
    if not sep or not module_name or not attr_path:
        raise TargetError(
            f"TARGET must look like 'package.module:callable', got {spec!r}. "
            f"For example: {DEFAULT_TARGET}."
        )
    _refuse_a_path(spec, module_name, attr_path)
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
            raise TargetError(
                f"{owner} has no attribute {part!r} (target {spec!r})."
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

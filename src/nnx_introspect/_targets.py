"""CLI targets: resolve ``package.module:callable`` and build the model it names.

Every subcommand goes through :func:`resolve_factory` and :func:`build_target`,
so import errors, missing attributes, non-callables and raising factories all
become one :class:`TargetError` with a one-line message (the CLI prints it and
exits with code 2). The original exception is kept as ``__cause__`` for
``--debug``.
"""

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from flax import nnx

from nnx_introspect._abstract import abstract_model

__all__ = ["DEFAULT_TARGET", "TargetError", "build_target", "resolve_factory"]

DEFAULT_TARGET = "nnx_introspect.examples:llama_7b"
"""The target used when none is given: Llama-2-7B shapes, built abstractly."""


class TargetError(Exception):
    """A target that cannot be resolved or built; the message is one line."""


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    if len(text) > 300:
        text = text[:297] + "..."
    name = type(error).__name__
    return f"{name}: {text}" if text else name


def _short_repr(value: object) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= 80 else text[:77] + "..."


def resolve_factory(spec: str) -> Callable[..., Any]:
    """The callable named by ``spec`` (``"package.module:callable"``).

    The attribute part may be dotted (``"pkg.mod:Class.create"``). The current
    directory is importable during the lookup, as with ``python -m``.

    Raises:
        TargetError: If ``spec`` is malformed, the module cannot be imported, the
            attribute is missing or is not callable.
    """
    module_name, sep, attr_path = spec.partition(":")
    if not sep or not module_name or not attr_path:
        raise TargetError(
            f"TARGET must look like 'package.module:callable', got {spec!r}. "
            f"For example: {DEFAULT_TARGET}."
        )
    added = os.getcwd() not in sys.path
    if added:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # any import-time failure is the target's fault
        raise TargetError(
            f"cannot import module {module_name!r} of target {spec!r}: "
            f"{_one_line(error)}"
        ) from error
    finally:
        if added:
            sys.path.remove(os.getcwd())
    obj: Any = module
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            raise TargetError(
                f"{type(obj).__name__} {getattr(obj, '__name__', attr_path)!r} has "
                f"no attribute {part!r} (target {spec!r})."
            )
        obj = getattr(obj, part)
    if not callable(obj):
        raise TargetError(
            f"target {spec!r} is a {type(obj).__name__}, not a callable taking "
            "`rngs` and returning an nnx.Module."
        )
    return obj  # type: ignore[no-any-return]


def build_target(spec: str, *, seed: int = 0, abstract: bool = True) -> Any:
    """Resolve ``spec`` and build its model from ``nnx.Rngs(seed)``.

    Abstractly by default (:func:`~nnx_introspect.abstract_model`: nothing is
    allocated); concretely with ``abstract=False``, for reports that need values.

    Raises:
        TargetError: If the target cannot be resolved, the factory raises, or it
            returns something other than an NNX graph node.
    """
    factory = resolve_factory(spec)
    try:
        if abstract:
            model = abstract_model(factory, seed=seed)
        else:
            model = factory(nnx.Rngs(seed))
    except Exception as error:
        raise TargetError(f"factory {spec!r} raised {_one_line(error)}") from error
    if not isinstance(model, nnx.Pytree):
        raise TargetError(
            f"factory {spec!r} returned {_short_repr(model)}, not an nnx.Module."
        )
    return model

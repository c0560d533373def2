"""A package face that imports its modules on first use.

:func:`lazy_names` reads a face's names, :func:`lazy_getattr` makes its lookup.

A face written as a ``TYPE_CHECKING`` block of explicit re-exports (what type
checkers and IDEs read) and a PEP 562 ``__getattr__`` that imports a name's
module the first time the name is asked for, as ``lazy_loader``'s stubs do
(Scientific Python's SPEC 1). Importing such a package stays cheap: the
package face of ``nnx_introspect`` itself, and ``_xla``'s, whose
``native_log`` the command line imports before it knows whether it needs JAX.
"""

import ast
import contextlib
import importlib
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

__all__ = ["lazy_getattr", "lazy_names"]


def lazy_names(face: str) -> dict[str, str]:
    """Public name -> module, read from the ``TYPE_CHECKING`` block of file ``face``.

    The block is the one place a name of the face is written; the lazy lookup
    and ``__all__`` are derived from it. Parsing a face takes about a
    millisecond.

    Example:
        >>> import nnx_introspect._xla as xla
        >>> lazy_names(xla.__file__)["compile_lowered"]
        'nnx_introspect._xla.analysis'
    """
    tree = ast.parse(Path(face).read_text(encoding="utf-8"))
    (block,) = (
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "typing.TYPE_CHECKING"
    )
    return {
        alias.asname or alias.name: str(node.module)
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def lazy_getattr(
    face: str,
    names: dict[str, str],
    namespace: dict[str, Any],
    first_jax: Callable[[], AbstractContextManager[Any]] | None = None,
) -> Callable[[str], Any]:
    """The face's ``__getattr__``: ``name``'s module imported on first use.

    The value is kept in ``namespace`` (the face's ``globals()``), so the next
    lookup is a plain attribute. ``first_jax`` wraps an import made while JAX
    is not yet imported (the package's face keeps the native lines of JAX's
    plugins off stderr with it).

    Example:
        >>> names = {"sqrt": "math"}
        >>> space: dict[str, Any] = {}
        >>> getattr_ = lazy_getattr("face", names, space)
        >>> getattr_("sqrt")(9.0), "sqrt" in space
        (3.0, True)
        >>> getattr_("nothing")
        Traceback (most recent call last):
        AttributeError: module 'face' has no attribute 'nothing'
    """

    def lookup(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {face!r} has no attribute {name!r}")
        quiet: AbstractContextManager[Any] = contextlib.nullcontext()
        if first_jax is not None and "jax" not in sys.modules:
            quiet = first_jax()
        with quiet:
            value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return lookup

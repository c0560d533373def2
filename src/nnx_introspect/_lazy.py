"""A package face that imports its modules on first use: :func:`lazy_names`.

A face written as a ``TYPE_CHECKING`` block of explicit re-exports (what type
checkers and IDEs read) and a PEP 562 ``__getattr__`` that imports a name's
module the first time the name is asked for, as ``lazy_loader``'s stubs do
(Scientific Python's SPEC 1). Importing such a package stays cheap: the
package face of ``nnx_introspect`` itself, and ``_xla``'s, whose
``native_log`` the command line imports before it knows whether it needs JAX.
"""

import ast
from pathlib import Path

__all__ = ["lazy_names"]


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

"""What ``step`` says and settles before anything compiles.

Two things a newcomer gets wrong without an error to tell them:

- :func:`loss_note`: no ``--loss`` on a batch of integer token ids. The
  default, ``mean``, differentiates the mean of the model's outputs: a stand-in
  that gives a step of the right shape, not a training loss (a language
  model's step is ``--loss lm``). One line on stderr, before the compile or
  the search starts, whether stderr is a terminal or not.
- :func:`complete_meshes`: a ``--mesh`` that leaves out an axis the model's
  sharding names (``fsdp=8`` for a model naming ``fsdp`` and ``tp``). The
  axis is added with size 1 (which shards nothing, as the mesh meant), and a
  note on stderr says so. A mesh axis nothing names (``tpp=4`` for ``tp=4``)
  is a usage error naming it and the closest named axis.
"""

import argparse
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from nnx_introspect.cli.args import PROG
from nnx_introspect.cli.checks import check_axes_named
from nnx_introspect.cli.errors import _usage_error
from nnx_introspect.cli.plan_args import _mesh_axes

__all__ = ["complete_meshes", "loss_note", "missing_axes"]

LOSS_NOTE = (
    f"{PROG}: note: no --loss given: the step differentiates 'mean', the mean "
    "of the model's outputs, which is not a training loss; the batch is "
    "integer token ids, for which --loss lm (next-token cross-entropy) is "
    "likely the one meant\n"
)
"""The line :func:`loss_note` writes."""


def loss_note(
    args: argparse.Namespace, batch: Sequence[Any], out: TextIO | None = None
) -> bool:
    """Write :data:`LOSS_NOTE` when ``--loss`` was not given and the batch is ids.

    ``batch`` is the parsed ``--batch`` (``jax.ShapeDtypeStruct`` leaves); its
    first leaf is what ``lm`` takes as the tokens. Returns whether the note
    was written.
    """
    import numpy as np

    if getattr(args, "loss", "mean") is not None or not batch:
        return False
    if not np.issubdtype(np.dtype(batch[0].dtype), np.integer):
        return False
    (sys.stderr if out is None else out).write(LOSS_NOTE)
    return True


def missing_axes(text: str, named: Sequence[str]) -> tuple[str, ...]:
    """The axes in ``named`` that the mesh ``text`` leaves out, in ``named``'s order.

    Example:
        >>> missing_axes("fsdp=8", ("fsdp", "tp")), missing_axes("tp=2", ())
        (('tp',), ())
    """
    given = {axis for axis, _ in _mesh_axes(text)}
    return tuple(axis for axis in named if axis not in given)


def complete_meshes(
    args: argparse.Namespace,
    meshes: Sequence[str],
    rules: Any,
    logical: Any,
    out: TextIO | None = None,
) -> list[str]:
    """``meshes`` with every axis the model names, each omitted one of size 1.

    The axes the model's sharding and ``--rules`` name are read as
    ``compare_meshes`` reads them for ``auto`` (a plan on a probe mesh, no
    compile). A mesh axis nothing names is refused first (see
    :func:`.checks.check_axes_named`); then each mesh that leaves out an axis
    the model's own sharding names (not only ``--rules``: that is the rules'
    mistake, refused by the library naming ``--rules``) gets it with size 1
    (``fsdp=8`` -> ``fsdp=8,tp=1``), with a note on ``out`` (stderr) naming the
    mesh compiled. ``auto`` is returned as it is.

    Raises:
        UsageError: A misspelt axis, or a target or ``--rules`` the plan
            refuses (naming the flag).
    """
    if list(meshes) == ["auto"]:
        return list(meshes)
    from nnx_introspect._search.meshes.candidates import named_axes

    try:
        named = named_axes(args.target, rules=rules, logical_rules=logical)
        own = named_axes(args.target) if rules or logical else named
    except (TypeError, ValueError, ImportError) as error:
        raise _usage_error(error, args) from error
    check_axes_named(meshes, named)
    # Only the model's own axes: one only --rules names is the rules' mistake.
    named = tuple(axis for axis in named if axis in own)
    completed = []
    for text in meshes:
        missing = missing_axes(text, named)
        if not missing:
            completed.append(text)
            continue
        whole = ",".join([text.strip(), *(f"{axis}=1" for axis in missing)])
        completed.append(whole)
        names = ", ".join(missing)
        (sys.stderr if out is None else out).write(
            f"{PROG}: note: --mesh {text.strip()} leaves out {names}, which the "
            f"model's sharding names: compiling {whole} (an axis of size 1 "
            f"shards nothing); give {names} a size in --mesh to shard over "
            f"{'it' if len(missing) == 1 else 'them'}\n"
        )
    return completed

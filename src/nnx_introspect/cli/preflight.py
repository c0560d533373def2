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
import difflib
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from nnx_introspect.cli.args import PROG
from nnx_introspect.cli.errors import UsageError, ordinal, usage_error
from nnx_introspect.cli.plan_args import mesh_axes

__all__ = ["check_axes_named", "complete_meshes", "loss_note", "missing_axes"]

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
    given = {axis for axis, _ in mesh_axes(text)}
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
    :func:`check_axes_named`); then each mesh that leaves out an axis
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
    from nnx_introspect._sweep import named_axes

    try:
        named = named_axes(args.target, rules=rules, logical_rules=logical)
        own = named_axes(args.target) if rules or logical else named
        # a mixture of experts may name `ep` (its experts split over it), and
        # need not: checked as named, never added to a mesh that leaves it out
        usable = named_axes(
            args.target, rules=rules, logical_rules=logical, experts=True
        )
    except (TypeError, ValueError, ImportError) as error:
        raise usage_error(error, args) from error
    check_axes_named(meshes, usable)
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


def check_axes_named(
    meshes: Sequence[str], named: Sequence[str], *, batch_spec_given: bool = False
) -> None:
    """Refuse a mesh axis nothing in the step names, when the step names some.

    ``named`` are the mesh axes the step's sharding names (the model's specs,
    ``--rules`` and its logical rules). Each mesh's first axis is named too:
    the batch splits over it, unless it is close to a named axis that mesh
    lacks (``fsdpp=4,tp=2``). An axis no spec, rule or batch names shards
    nothing, so it is most likely misspelt (``tpp=4`` for ``tp=4``): a usage
    error before anything compiles, with the closest named axis. A step that
    names no axis (a model without sharding metadata, no rules) has nothing
    to hold the meshes against, and is not checked.
    """
    if not named:
        return
    problems = []
    for i, text in enumerate(meshes):
        axes = [a for a, _ in mesh_axes(text)]
        for k, axis in enumerate(axes):
            lacked = [a for a in named if a not in axes]
            close = difflib.get_close_matches(axis, lacked or list(named), 1)
            if axis in named or (k == 0 and not batch_spec_given and not lacked):
                continue
            if k == 0 and not batch_spec_given and not close:
                continue  # the batch's axis, not a named axis misspelt
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(
                f"axis {axis!r} of the {ordinal(i + 1)} --mesh ({text.strip()}){hint}"
            )
    if problems:
        verb = "is" if len(problems) == 1 else "are"
        raise UsageError(
            f"argument --mesh: {'; '.join(problems)} {verb} named by nothing in "
            f"the step: the model's sharding and --rules name {', '.join(named)}, "
            "and the batch splits over each mesh's first axis; fix the spelling, "
            "or leave the axis out"
        )

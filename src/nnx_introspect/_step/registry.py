"""The program kinds, by the name a child process's request gives them.

See :mod:`~nnx_introspect._step.program` for what a kind is and how a new one
plugs in: its own file, and one line in :data:`PROGRAM_KINDS` here.
"""

from nnx_introspect._step.logprobs import LOGPROBS
from nnx_introspect._step.program import ProgramKind
from nnx_introspect._step.train import TRAIN, TRAIN_OPTIMIZER_DONATED
from nnx_introspect._step.values import VALUES
from nnx_introspect._typing import ArgumentError

__all__ = ["PROGRAM_KINDS", "program_kind"]

PROGRAM_KINDS: tuple[ProgramKind, ...] = (
    TRAIN,
    TRAIN_OPTIMIZER_DONATED,
    LOGPROBS,
    VALUES,
)
"""Every program kind that compiles (in this process or in a child)."""


def program_kind(name: str) -> ProgramKind:
    """The program kind called ``name``.

    Raises:
        ArgumentError: If no kind has that name (``argument`` ``"program"``).
    """
    for kind in PROGRAM_KINDS:
        if kind.name == name:
            return kind
    names = [kind.name for kind in PROGRAM_KINDS]
    raise ArgumentError(
        "program",
        f"`program` must name a program kind, one of {names}; got {name!r}.",
    )

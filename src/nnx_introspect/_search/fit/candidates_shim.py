"""A stand-in for ``layers.remat_candidates`` until the breakdown's version lands.

The fit search takes its remat candidates from one import of this module
(in :mod:`nnx_introspect._search.fit.ladders`); the real
``remat_candidates(breakdown, model)`` in ``layers.py`` (the repeated module
classes whose subtrees hold the kept activations, outermost first) replaces it
by changing that one import. This fallback gives the one class that
:func:`~nnx_introspect._search.fit.layers.layer_to_remat` chooses.
"""

import dataclasses
from typing import Any

from flax import nnx

from nnx_introspect._breakdown.report import Breakdown
from nnx_introspect._search.fit.layers import layer_to_remat

__all__ = ["RematCandidate", "remat_candidates"]


@dataclasses.dataclass(frozen=True)
class RematCandidate:
    """A module class to rematerialise, and the evidence for it.

    Attributes:
        name: The module class's name.
        kept_bytes: Activations kept for the backward pass under its instances
            (0 where the evidence is not bytes).
        instances: How many instances of it the model holds.
        basis: The evidence, in words.

    Example:
        >>> RematCandidate("Block", 2**20, 4, "Block: 1 MiB kept").instances
        4
    """

    name: str
    kept_bytes: int
    instances: int
    basis: str


def remat_candidates(breakdown: Breakdown | None, model: Any) -> list[RematCandidate]:
    """The classes to try, best first (here: at most one, as ``layer_to_remat``).

    Example:
        >>> from nnx_introspect import abstract_model
        >>> from nnx_introspect.examples import llama_tiny
        >>> [c.name for c in remat_candidates(None, abstract_model(llama_tiny))]
        ['LlamaLayer']
    """
    name, basis = layer_to_remat(model, breakdown)
    if name is None:
        return []
    instances = sum(1 for _, m in nnx.iter_modules(model) if type(m).__name__ == name)
    return [RematCandidate(name, 0, instances, basis)]

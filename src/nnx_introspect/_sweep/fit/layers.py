"""Which layer to rematerialise: the repeated module classes whose subtrees keep bytes.

The breakdown of a failing compile lists each activation kept for the
backward pass with its user call chain (:attr:`BreakdownRow.stack`, innermost
frame first). A module class holds the kept bytes of every row made while one
of its ``__call__``s ran: a frame of the row's chain is that ``__call__``, by
its qualified name (``DecoderLayer.__call__``, as JAX records a frame) and
file, or by file and line range when the frame carries no function name.
Decorators are looked through (``inspect.unwrap``: tunix wraps ``__call__`` in
``jax.named_scope``, whose source file is JAX's). So a row under
``DecoderLayer.__call__`` then ``Attention.__call__`` counts for both: the
bytes a class holds are those of its whole subtree, which rematerialising it
would free.

The candidates (:func:`remat_candidates`) are the repeated classes (two or
more instances, the model's own class left out: to rematerialise it would
recompute the whole forward) that hold kept bytes: the outermost first (a
class no other candidate's instances contain), then those inside them, each
level heaviest first.
"""

import inspect
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flax import nnx

from nnx_introspect._breakdown import Breakdown, BreakdownRow
from nnx_introspect._render import format_bytes
from nnx_introspect._xla import SourceLocation

__all__ = ["KEPT", "RematCandidate", "layer_to_remat", "remat_candidates"]

KEPT = "activation kept for backward"
"""The breakdown's kind of the bytes a rematerialisation frees."""


@dataclass(frozen=True)
class RematCandidate:
    """A repeated module class to rematerialise, with the evidence for it.

    Attributes:
        name: the class's name (``"DecoderLayer"``).
        kept_bytes: the bytes per device of the activations kept for the
            backward pass at the peak that were made while one of its
            ``__call__``s ran (its subtree's, children's included).
        instances: how many modules of the class the model has.
        basis: the evidence in words: ``"DecoderLayer: 31.20 GiB of kept
            activations under its 16 instances"``, naming a tie as a tie.

    Example:
        >>> RematCandidate("Block", 1024, 2, "Block: 1 KiB ...").instances
        2
    """

    name: str
    kept_bytes: int
    instances: int
    basis: str


@dataclass(frozen=True)
class _CallSite:
    """Where a class's ``__call__`` is: its qualified name, file and lines."""

    qualname: str
    file: str | None
    first: int
    last: int

    def ran(self, frame: SourceLocation) -> bool:
        """Whether ``frame`` is a frame of this ``__call__``."""
        same_file = self.file is not None and os.path.realpath(frame.file) == self.file
        if frame.function:
            return frame.function == self.qualname and (self.file is None or same_file)
        return same_file and self.first <= frame.line <= self.last


def _call_site(cls: type) -> _CallSite | None:
    """Where ``cls.__call__`` (its own or inherited) is, decorators unwrapped."""
    call = next(
        (k.__dict__["__call__"] for k in cls.__mro__ if "__call__" in k.__dict__), None
    )
    if not callable(call):
        return None
    call = inspect.unwrap(call)
    qualname = getattr(call, "__qualname__", None)
    if not isinstance(qualname, str):
        return None
    file: str | None
    try:
        path = inspect.getsourcefile(call)
        lines, first = inspect.getsourcelines(call)
    except (OSError, TypeError):
        return _CallSite(qualname, None, 0, -1)
    file = os.path.realpath(path) if path else None
    return _CallSite(qualname, file, first, first + len(lines) - 1)


def _modules(model: Any) -> list[tuple[tuple[Any, ...], type]]:
    """``(path, class)`` of every module under ``model``, the model's own left out."""
    return [
        (tuple(path), type(module))
        for path, module in nnx.iter_modules(model)
        if module is not model
    ]


def _held(rows: Sequence[BreakdownRow], sites: dict[type, _CallSite]) -> Counter[type]:
    """The kept bytes each class's ``__call__`` ran over: every row once per class."""
    held: Counter[type] = Counter()
    for row in rows:
        if row.kind != KEPT:
            continue
        frames = row.stack or ((row.source,) if row.source is not None else ())
        for cls, site in sites.items():
            if any(site.ran(frame) for frame in frames):
                held[cls] += row.nbytes
    return held


def remat_candidates(breakdown: Breakdown | None, model: Any) -> list[RematCandidate]:
    """The repeated module classes whose subtrees hold the kept activations.

    Each class with two or more instances in ``model`` (its own class left
    out) that holds kept bytes in ``breakdown`` (see the module's
    docstring), the outermost first, then the classes inside them, each
    level heaviest first (ties by name). The basis names the evidence, and
    another candidate of the same level with the same bytes as a tie.

    Args:
        breakdown: the peak breakdown of the step (``None``: no evidence).
        model: the model (abstract or concrete) the step trains.

    Returns:
        The candidates, best first; ``[]`` when nothing repeated holds kept
        bytes (no breakdown, a peak in the forward pass, or no repeated class
        of the user's own code).

    Example:
        >>> from nnx_introspect.examples import llama_tiny
        >>> from nnx_introspect import abstract_model
        >>> remat_candidates(None, abstract_model(llama_tiny))
        []
    """
    if breakdown is None:
        return []
    modules = _modules(model)
    counts = Counter(cls for _, cls in modules)
    sites = {
        cls: site
        for cls, n in counts.items()
        if n > 1 and (site := _call_site(cls)) is not None
    }
    held = _held(breakdown.rows, sites)
    found = [cls for cls in sites if held[cls] > 0]
    level = {cls: _depth(cls, found, modules) for cls in found}
    found.sort(key=lambda c: (level[c], -held[c], c.__name__))
    total = sum(r.nbytes for r in breakdown.rows if r.kind == KEPT)
    return [
        RematCandidate(
            cls.__name__,
            held[cls],
            counts[cls],
            _basis(
                cls, held, counts, total, [c for c in found if level[c] == level[cls]]
            ),
        )
        for cls in found
    ]


def _depth(
    cls: type, found: Sequence[type], modules: Sequence[tuple[tuple[Any, ...], type]]
) -> int:
    """How many other candidate classes have an instance holding one of ``cls``'s."""
    mine = [path for path, c in modules if c is cls]
    return sum(
        1
        for other in found
        if other is not cls
        and any(
            len(outer) < len(path) and path[: len(outer)] == outer
            for outer, c in modules
            if c is other
            for path in mine
        )
    )


def _basis(
    cls: type,
    held: Counter[type],
    counts: Counter[type],
    total: int,
    level: Sequence[type],
) -> str:
    """``"Block: 1 GiB of kept activations under its 2 instances (50% of ...)"``."""
    nbytes = held[cls]
    share = f"{100 * nbytes / total:.0f}%" if total else "all"
    text = (
        f"{cls.__name__}: {format_bytes(nbytes)} of kept activations under its"
        f" {counts[cls]} instances ({share} of the {format_bytes(total)} kept at"
        " the peak)"
    )
    tied = sorted(c.__name__ for c in level if c is not cls and held[c] == nbytes)
    if tied:
        text += f"; a tie with {', '.join(tied)} (the same bytes)"
    return text


def layer_to_remat(model: Any, breakdown: Breakdown | None) -> tuple[str | None, str]:
    """``(class name or None, how it was chosen)`` for ``model``.

    The first of :func:`remat_candidates` when there is one; else the module
    class with the most instances that holds modules of its own (the
    repeated layer), in a tie the outermost, the tie named.

    Example:
        >>> from flax import nnx
        >>> from nnx_introspect.examples import llama_tiny
        >>> from nnx_introspect import abstract_model
        >>> layer_to_remat(abstract_model(llama_tiny), None)
        ('LlamaLayer', 'the module class repeated most (8 instances) with \
parameters of its own modules')
    """
    candidates = remat_candidates(breakdown, model)
    if candidates:
        return candidates[0].name, candidates[0].basis
    modules = _modules(model)
    counts = Counter(cls for _, cls in modules)
    layered = [
        cls for cls, n in counts.items() if n > 1 and _has_submodules(model, cls)
    ]
    if not layered:
        return None, "no module class repeats"
    most = max(counts[cls] for cls in layered)
    tied = [cls for cls in layered if counts[cls] == most]
    depth = {cls: _depth(cls, tied, modules) for cls in tied}
    tied.sort(key=lambda c: (depth[c], c.__name__))
    others = sorted(c.__name__ for c in tied[1:])
    tie = f"; a tie with {', '.join(others)}, the outermost taken" if others else ""
    return tied[0].__name__, (
        f"the module class repeated most ({most} instances) with parameters "
        f"of its own modules{tie}"
    )


def _has_submodules(model: Any, cls: type) -> bool:
    """Whether a module of class ``cls`` holds other modules (a layer, not a leaf)."""
    for _, module in nnx.iter_modules(model):
        if type(module) is cls:
            return any(m is not module for _, m in nnx.iter_modules(module))
    return False

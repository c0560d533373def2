"""The fit search's dimensions as ladders: ordered choices, memory falling along each.

A configuration of the step is a :class:`Config`: a mesh and one rung of every
ladder. Along a ladder the peak falls (or stays) and the step time rises (or
stays), so the search climbs one only from a configuration that does not fit,
and a rung is not compiled when a configuration no further along *every*
ladder already fits (:func:`dominates`). A new dimension of the search (host
offload of the optimizer state, pipeline stages) is a new :class:`Ladder`: its
field on :class:`Config`, the rungs after a configuration, and their order.

- :class:`RematLadder`: no remat, then each remat candidate (a module class,
  chosen from the breakdown's evidence) under each ``jax.checkpoint_policies``
  policy, most saved first; the candidates' rungs are not ordered against one
  another, only each one's policies are.
- :class:`MicrobatchLadder`: 1, then the fewest microbatches predicted to fit
  (the kept activations fall as 1/k), doubled while it does not fit.
"""

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol

from flax import nnx

from nnx_introspect._breakdown import Breakdown
from nnx_introspect._step import StepMemoryReport, StepSpec
from nnx_introspect._sweep.fit.layers import (
    KEPT,
    RematCandidate,
    layer_to_remat,
    remat_candidates,
)
from nnx_introspect._sweep.fit.report import FitRow
from nnx_introspect._sweep.mesh_comparison.rows import MeshAxes
from nnx_introspect._typing import ArgumentError

__all__ = [
    "HOST_OFFLOAD",
    "POLICY_LADDER",
    "Config",
    "Ladder",
    "MicrobatchLadder",
    "Remat",
    "RematCandidate",
    "RematLadder",
    "candidates_from",
    "dominates",
    "kept_bytes",
]

POLICY_LADDER: tuple[str | None, ...] = (
    None,
    "dots_saveable",
    "dots_with_no_batch_dims_saveable",
    "nothing_saveable",
)
"""Remat policies fastest first (most saved): memory falls along it."""

HOST_OFFLOAD = "offload_dot_with_no_batch_dims"
"""The host-offload policy: tried beside the ladder (a named topology only),
ordered against no other policy, and not split into microbatches."""

Remat = tuple[tuple[str, str], ...]
"""``((module class, policy), ...)``; empty: no remat."""


@dataclasses.dataclass(frozen=True)
class Config:
    """One configuration of the step: a mesh and a rung of every ladder.

    Example:
        >>> Config((("fsdp", 8),), (("Block", "dots_saveable"),), 2).microbatches
        2
    """

    mesh: MeshAxes
    remat: Remat = ()
    microbatches: int = 1


class SearchState(Protocol):
    """What a ladder reads of the search: the rows so far, the specs, the budget."""

    budget: int
    found: dict[Config, tuple[FitRow, StepMemoryReport | None]]
    specs: dict[MeshAxes, StepSpec]


class Ladder(Protocol):
    """One dimension of the search: ordered rungs, memory falling along them."""

    field: str
    """The :class:`Config` field the ladder sets."""
    first: Any
    """Its first rung (the step as given)."""
    rounds: int
    """How many times the search climbs it (each round from the last rungs)."""
    side_by_side: bool
    """Whether a round's rungs all compile at once (``False``: a rung waits
    while another of its round, no further along any ladder, may fit)."""

    def after(self, state: SearchState, config: Config) -> list[tuple[Any, str | None]]:
        """The rungs to try after ``config``'s: ``(rung, None)``, or with why not."""

    def at_most(self, a: Any, b: Any) -> bool:
        """Whether rung ``a`` is no further along than ``b``.

        Then ``a`` holds no less memory and takes no more time; ``False`` when
        the two are not ordered.
        """


def dominates(ladders: Sequence[Ladder], a: Config, b: Config) -> bool:
    """Whether ``a`` (another configuration) is no further along any ladder than ``b``.

    Then ``a`` is no slower than ``b``, and if it fits, ``b`` is not needed.

    Example:
        >>> ladders = (RematLadder([], ()), MicrobatchLadder())
        >>> mesh = (("data", 8),)
        >>> dominates(ladders, Config(mesh, (), 2), Config(mesh, (), 4))
        True
        >>> dominates(ladders, Config(mesh, (), 4), Config(mesh, (), 2))
        False
    """
    return (
        a != b
        and a.mesh == b.mesh
        and all(
            ld.at_most(getattr(a, ld.field), getattr(b, ld.field)) for ld in ladders
        )
    )


class RematLadder:
    """No remat, then each candidate class under each policy, most saved first.

    Example:
        >>> block = RematCandidate("Block", 0, 4, "")
        >>> ladder = RematLadder([block], ("dots_saveable", "nothing_saveable"),
        ...                      offload="no topology")
        >>> ladder.after(None, Config((("data", 8),)))  # doctest: +NORMALIZE_WHITESPACE
        [((('Block', 'dots_saveable'),), None),
         ((('Block', 'nothing_saveable'),), None),
         ((('Block', 'offload_dot_with_no_batch_dims'),), 'no topology')]
        >>> (dots, _), (nothing, _) = ladder.after(None, Config((("data", 8),)))[:2]
        >>> ladder.at_most(dots, nothing), ladder.at_most(nothing, dots)
        (True, False)
    """

    field = "remat"
    first: Remat = ()
    rounds = 1
    side_by_side = True  # one round: every candidate and policy at once

    def __init__(
        self,
        candidates: Sequence[RematCandidate],
        policies: tuple[str, ...],
        offload: str | None = None,
    ) -> None:
        """``offload``: why host offload is not tried (``None``: it is tried)."""
        self.candidates = tuple(candidates)
        self.policies = policies
        self.offload = offload

    def after(self, state: Any, config: Config) -> list[tuple[Remat, str | None]]:
        if config.remat:
            return []
        out: list[tuple[Remat, str | None]] = []
        for candidate in self.candidates:
            out += [(((candidate.name, p),), None) for p in self.policies]
            out.append((((candidate.name, HOST_OFFLOAD),), self.offload))
        return out

    def at_most(self, a: Remat, b: Remat) -> bool:
        if not a or a == b:
            return True
        if len(a) != 1 or len(b) != 1 or a[0][0] != b[0][0]:
            return False
        ranks = {p: i for i, p in enumerate(self.policies)}
        pa, pb = a[0][1], b[0][1]
        return pa in ranks and pb in ranks and ranks[pa] <= ranks[pb]


class MicrobatchLadder:
    """1, then the fewest microbatches predicted to fit, doubled while short.

    Example:
        >>> MicrobatchLadder().at_most(2, 4), MicrobatchLadder().at_most(4, 2)
        (True, False)
    """

    field = "microbatches"
    first = 1
    rounds = 8  # each round at least doubles k: 2**8 microbatches at most
    side_by_side = False

    def after(self, state: SearchState, config: Config) -> list[tuple[int, str | None]]:
        if any(policy == HOST_OFFLOAD for _, policy in config.remat):
            return []
        if state.found[config][0].status != "does not fit":
            return []
        k = _predicted_k(state, config)
        return [] if k is None else [(k, None)]

    def at_most(self, a: int, b: int) -> bool:
        return a <= b


def _allowed(spec: StepSpec, last: int) -> list[int]:
    """The microbatch counts above ``last`` (doubling) the batch divides into."""
    allowed = []
    k = last * 2
    while k <= 1 << 12:
        try:
            dataclasses.replace(spec, microbatches=k)
        except ArgumentError:
            break
        allowed.append(k)
        k *= 2
    return allowed


def _predicted_k(state: SearchState, config: Config) -> int | None:
    """The fewest microbatches (> ``config``'s) predicted to fit, the batch allowing.

    The kept activations fall as 1/k; the rest of the peak stays. A remat
    choice's kept bytes are its one-microbatch peak minus what the given
    step's peak holds besides its kept activations.
    """
    allowed = _allowed(state.specs[config.mesh], config.microbatches)
    if not allowed:
        return None
    one = state.found[dataclasses.replace(config, microbatches=1)][0]
    base_row, report = state.found[Config(config.mesh)]
    kept = kept_bytes(report)
    if one.peak_bytes is None or base_row.peak_bytes is None or kept is None:
        return allowed[0]
    rest = base_row.peak_bytes - kept
    kept_here = max(one.peak_bytes - rest, 0)
    for k in allowed:
        if rest + kept_here / k <= state.budget:
            return k
    return allowed[-1]


def kept_bytes(report: StepMemoryReport | None) -> int | None:
    """The activations kept for the backward pass at ``report``'s peak."""
    if report is None or report.breakdown is None:
        return None
    return sum(r.nbytes for r in report.breakdown.rows if r.kind == KEPT)


def candidates_from(breakdown: Breakdown | None, model: Any) -> list[RematCandidate]:
    """The remat candidates the breakdown's evidence names, best first.

    Without evidence (no breakdown of a failing compile, or no repeated class
    holding kept activations) the one class :func:`layer_to_remat` picks by
    the model's structure, its basis saying so.
    """
    found = remat_candidates(breakdown, model)
    if found:
        return found
    name, basis = layer_to_remat(model, breakdown)
    if name is None:
        return []
    instances = sum(1 for _, m in nnx.iter_modules(model) if type(m).__name__ == name)
    return [RematCandidate(name, 0, instances, basis)]

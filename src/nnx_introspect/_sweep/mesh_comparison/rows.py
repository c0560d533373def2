"""A mesh comparison's rows: :class:`MeshCandidate`, its :data:`Outcome`, their order.

What became of each candidate mesh, where each outcome sorts (best first:
:func:`sort_key`) and how a mesh is named; the report built on them is
:mod:`~nnx_introspect._sweep.mesh_comparison.report`.
"""

import dataclasses
from typing import Any, Literal, TypeAlias

from nnx_introspect._step import StepMemoryReport

__all__ = [
    "MeshAxes",
    "MeshCandidate",
    "Outcome",
    "answered",
    "error_text",
    "mesh_name",
    "plural",
    "sort_key",
]

Outcome: TypeAlias = Literal[
    "fits", "does not fit", "compiled", "rejected", "failed", "timed out"
]
"""What became of one candidate: compiled and judged against the budget
(``"compiled"``: no budget to judge by), rejected by the planner before any
compile, or a compile that raised or gave no result in time."""


MeshAxes: TypeAlias = tuple[tuple[str, int], ...]
"""A mesh as ``((axis name, size), ...)``, in the mesh's order."""


_GROUP: dict[str, int] = {
    "fits": 0,
    "compiled": 0,
    "does not fit": 1,
    "rejected": 2,
    "failed": 3,
    "timed out": 3,
}
"""Where each outcome sorts: answers first, then what did not fit, then the rest."""


@dataclasses.dataclass(frozen=True)
class MeshCandidate:
    """One candidate mesh of a :class:`MeshComparison` and what became of it.

    Attributes:
        mesh: The mesh as ``((axis name, size), ...)``, in its order.
        outcome: ``"fits"``, ``"does not fit"``, ``"compiled"`` (no budget to
            judge by), ``"rejected"`` (by the planner, nothing compiled),
            ``"failed"`` (the compile raised) or ``"timed out"``.
        reason: Why a candidate was rejected, failed or timed out, in words;
            ``None`` otherwise.
        report: The full :class:`StepMemoryReport` of a compiled candidate,
            else ``None``.
        plan_bytes: Bytes per device of the parameters, other state and
            optimizer state as the plan shards them (``None`` when the plan
            could not be applied: a rejected plan with errors has no figure of
            its own, and none of another layout is shown).
        estimated_seconds: The roofline's range of one step's time, ``(low,
            high)`` (every term overlapped, none) from the report's
            :attr:`~StepMemoryReport.roofline`, for a named ``topology``; a
            no bound, not what candidates are ranked by (that is
            :attr:`estimate`), except where a row has no point estimate; else
            ``None``.
        collective_bytes_by_axis: Bytes on the wire per device and step over
            each mesh-axis combination (``"fsdp"``, ``"fsdp,tp"``, ``"?"``),
            from the compiled program's collectives; ``None`` when not read.
        estimate: The point estimate of one step's time in seconds (the
            roofline's :attr:`~nnx_introspect._roofline.estimate.Roofline.seconds`,
            from the program's instructions at calibrated rates): what fitting
            candidates are ranked by; ``None`` where the program's work was not
            read or there is no topology.
        error: :attr:`estimate`'s calibrated error bar as a fraction (``0.09``:
            ±9%), or ``None`` (uncalibrated, or no estimate): two candidates
            whose estimates lie within it of each other are equal
            (:func:`~nnx_introspect._ranking.tied`).

    Example:
        >>> row = MeshCandidate((("fsdp", 4), ("tp", 2)), "rejected", "indivisible")
        >>> row.name, row.status
        ('fsdp=4,tp=2', 'rejected by the planner: indivisible')
    """

    mesh: MeshAxes
    outcome: Outcome
    reason: str | None = None
    report: StepMemoryReport | None = None
    plan_bytes: int | None = None
    estimated_seconds: tuple[float, float] | None = None
    collective_bytes_by_axis: dict[str, int] | None = None
    estimate: float | None = None
    error: float | None = None

    @property
    def planned_seconds(self) -> float | None:
        """The time the row is ranked by: :attr:`estimate`, else the low bound.

        Example:
            >>> MeshCandidate((("a", 8),), "fits", estimated_seconds=(1.0, 2.0),
            ...               estimate=1.4).planned_seconds
            1.4
            >>> MeshCandidate((("a", 8),), "fits",
            ...               estimated_seconds=(1.0, 2.0)).planned_seconds
            1.0
        """
        if self.estimate is not None:
            return self.estimate
        return None if self.estimated_seconds is None else self.estimated_seconds[0]

    @property
    def name(self) -> str:
        """The mesh as ``"fsdp=2,tp=4"``."""
        return mesh_name(self.mesh)

    @property
    def peak_bytes(self) -> int | None:
        """The compiled step's peak per device, or ``None`` with no compile."""
        return None if self.report is None else self.report.peak_bytes

    @property
    def fits(self) -> bool | None:
        """Whether the step fits the budget; ``None`` with no budget or compile."""
        if self.outcome in ("fits", "does not fit"):
            return self.outcome == "fits"
        return None

    @property
    def status(self) -> str:
        """The outcome in words, its reason included.

        ``"fits"``, ``"does not fit"``, ``"compiled (no budget)"``,
        ``"rejected by the planner: ..."``, ``"failed: ValueError: ..."`` or
        ``"timed out after 600 s"``.
        """
        if self.outcome == "rejected":
            return f"rejected by the planner: {self.reason}"
        if self.outcome == "failed":
            return f"failed: {self.reason}"
        if self.outcome == "timed out":
            return f"timed out {self.reason}" if self.reason else "timed out"
        return self._short_status()

    def _short_status(self) -> str:
        """The status without its reason: one table cell."""
        if self.outcome == "compiled":
            return "compiled (no budget)"
        refused = self.report is not None and self.report.compiler_message is not None
        if self.outcome == "does not fit" and refused:
            return "out of memory (refused by the compiler)"
        if self.outcome == "rejected":
            return "rejected by the planner"
        return self.outcome

    def json_data(self) -> dict[str, Any]:
        """Exact figures for JSON output; ``report`` is the step's whole payload."""
        estimate = self.estimated_seconds
        return {
            "mesh": self.name,
            "axis_names": [a for a, _ in self.mesh],
            "axis_sizes": [s for _, s in self.mesh],
            "outcome": self.outcome,
            "status": self.status,
            "fits": self.fits,
            "peak_bytes": self.peak_bytes,
            "plan_bytes": self.plan_bytes,
            "estimated_seconds": None if estimate is None else list(estimate),
            "roofline_bounds_seconds": None if estimate is None else list(estimate),
            "estimate_seconds": self.estimate,
            "estimate_error": self.error,
            "collective_bytes_by_axis": self.collective_bytes_by_axis,
            "report": None if self.report is None else self.report.json_data(),
        }


def answered(row: "MeshCandidate") -> bool:
    """Whether ``row`` is an answer: compiled and fits (or there is no budget)."""
    return _GROUP[row.outcome] == 0


def sort_key(index: int, row: MeshCandidate) -> tuple[Any, ...]:
    """Where ``row`` (the ``index``-th given) sorts: best first.

    Answers first, by their point estimate (:attr:`MeshCandidate.estimate`;
    where a row has none, the low end of its roofline range, then the high
    end), those with no time after them, each by peak; then those that do not
    fit, lowest peak first; then the rejected, then the failed, in the order
    given.

    Example:
        >>> rows = [
        ...     MeshCandidate((("a", 8),), "fits", estimated_seconds=(0.1, 0.9),
        ...                   estimate=0.6),
        ...     MeshCandidate((("b", 8),), "fits", estimated_seconds=(0.3, 0.4),
        ...                   estimate=0.35),
        ... ]
        >>> [r.name for _, r in sorted(enumerate(rows), key=lambda i: sort_key(*i))]
        ['b=8', 'a=8']
    """
    group = _GROUP[row.outcome]
    peak = row.peak_bytes or 0
    if group == 0:
        planned = row.planned_seconds
        bounds = row.estimated_seconds
        high = bounds[1] if row.estimate is None and bounds is not None else 0.0
        return (group, planned is None, planned or 0.0, high, peak, index)
    return (group, False, 0.0, 0.0, peak if group == 1 else 0, index)


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def mesh_name(mesh: MeshAxes) -> str:
    return ",".join(f"{a}={s}" for a, s in mesh)


def error_text(error: BaseException) -> str:
    """``"ValueError: ..."`` on one line, at most 500 characters."""
    text = " ".join(str(error).split())
    if len(text) > 500:
        text = text[:497] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__

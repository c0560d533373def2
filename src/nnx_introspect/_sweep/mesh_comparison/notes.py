"""A mesh comparison's notes: the budget, the order, what the estimates say.

The words under :class:`~nnx_introspect._sweep.mesh_comparison.report.MeshComparison`'s
table, apart from the table and the verdict they explain.
"""

import math
from collections.abc import Iterator
from typing import Protocol

from nnx_introspect._ranking import error_words, tie_error
from nnx_introspect._render import format_bytes
from nnx_introspect._roofline import RANGE_WORDS, Roofline
from nnx_introspect._sweep.mesh_comparison.rows import MeshCandidate, answered, plural
from nnx_introspect._sweep.mesh_comparison.utilisation import (
    utilisation_header,
    utilisation_notes,
)


class MeshComparison(Protocol):
    """What the notes read of a comparison (:class:`~.report.MeshComparison`)."""

    @property
    def candidates(self) -> tuple[MeshCandidate, ...]: ...

    @property
    def num_devices(self) -> int: ...

    @property
    def max_device_bytes(self) -> int | None: ...

    @property
    def budget_basis(self) -> str | None: ...

    @property
    def auto_axes(self) -> tuple[str, ...] | None: ...

    @property
    def batch(self) -> tuple[str, ...]: ...

    @property
    def step(self) -> str: ...

    @property
    def compiles(self) -> int: ...

    @property
    def seconds(self) -> float: ...

    @property
    def executor(self) -> str: ...

    @property
    def equals(self) -> tuple[MeshCandidate, ...]: ...

    @property
    def batch_headroom(self) -> float | None: ...

    def rooflines(self) -> list[Roofline | None]: ...


BOUNDS = "roofline range (s)"
"""The column of the roofline's ``(low, high)`` range: no bound, not the estimate."""


def comparison_notes(self: "MeshComparison") -> Iterator[str]:
    budget = self.max_device_bytes
    if budget is None:
        yield (
            "No budget: every compiled mesh is ranked by its peak alone. Pass "
            "`max_device_bytes` (--max-device-bytes) or a `topology`."
        )
    else:
        yield (
            f"Budget: {format_bytes(budget)} ({budget:,} bytes) per device: "
            f"{self.budget_basis}."
        )
    if self.auto_axes is not None:
        first = self.auto_axes[0]
        devices = plural(self.num_devices, "device")
        yield (
            f"'auto': every factorisation of {devices} over "
            f"the axes {', '.join(self.auto_axes)} (data-parallel names such "
            "as data and fsdp first, the outermost; then the others in the "
            "order `batch_spec`, the logical rules and the plan's specs name "
            f"them); the batch splits over each mesh's first axis ({first}) "
            "unless `batch_spec` says otherwise."
        )
    for c in self.candidates:
        if c.reason is not None:
            yield f"{c.name}: {c.status}"
    yield _order_words(self)
    yield from _estimate_notes(self)
    rooflines = self.rooflines()
    utilisation = utilisation_header(rooflines).removesuffix(" (est.)")
    if any(c.estimate is not None for c in self.candidates):
        times = [e.time for e in rooflines if e is not None and e.time is not None]
        bases = and_words(list(dict.fromkeys(t.constants_basis for t in times)))
        if any(t.comm_seconds and t.constants.calibrated for t in times):
            bases += (
                "; each mesh's collectives are added uncalibrated (data-sheet "
                "links, not overlapped)"
            )
        yield (
            f"Step seconds and {utilisation} are estimates, not measurements: "
            "each compiled program's instructions at the device's rates, one "
            f"after another ({bases}), the {utilisation} at that point "
            "estimate. The rows are ranked by it; two whose estimates lie "
            "within the error bar of each other are equal (marked tied). "
            f"'{BOUNDS}': the roofline's range, each program's FLOPs, bytes "
            "accessed and collective bytes on the target's data-sheet "
            f"figures from perfect overlap to none: {RANGE_WORDS} (each "
            "row's report lists the assumptions)."
        )
        yield from utilisation_notes(rooflines)
    elif any(c.estimated_seconds is not None for c in self.candidates):
        yield (
            f"Step seconds and {utilisation} are estimates, not measurements: a "
            "roofline of each compiled program's FLOPs, bytes accessed and "
            "collective bytes on the target's data-sheet figures, from perfect "
            "overlap to none (each row's report lists the assumptions)."
        )
        yield from utilisation_notes(rooflines)
    if any(c.collective_bytes_by_axis for c in self.candidates):
        yield (
            "Collectives on the wire: bytes each device sends per step over "
            "each mesh axis, by the ring algorithm's factors (all-gather and "
            "reduce-scatter (n-1)/n, all-reduce 2(n-1)/n); '?' marks device "
            "groups that are not whole mesh axes."
        )
    yield (
        f"{self.compiles} compile(s) of the step ({self.step}; batch "
        f"{', '.join(self.batch)}) in {self.seconds:.1f} s on {self.executor}."
    )
    if any(c.report is not None and c.report.backend == "cpu" for c in self.candidates):
        yield (
            "XLA:CPU compiled these steps: its temporaries can differ from an "
            "accelerator's many times over (arguments are exact). Pass a TPU "
            "or GPU `topology` for that compiler's numbers."
        )


def _order_words(self: "MeshComparison") -> str:
    """The order the rows are in, as :func:`sort_key` sorts them."""
    answers = [c for c in self.candidates if answered(c)]
    timed = [c for c in answers if c.planned_seconds is not None]
    points = [c for c in answers if c.estimate is not None]
    which = "compiled" if self.max_device_bytes is None else "fit"
    if not timed:
        order = f"the meshes that {which} first, lowest peak first"
    elif points:
        order = (
            f"the meshes that {which} first, fastest estimated step time "
            "first (the point estimate"
            + (
                "; where a row has none, the low end of its roofline range"
                if len(points) < len(timed)
                else ""
            )
            + ")"
        )
    else:
        order = (
            f"the meshes that {which} first, fastest estimated step time "
            "first (the low end of its range, then the high end)"
        )
        if len(timed) < len(answers):
            order += ", then those with no estimate, lowest peak first"
    if self.max_device_bytes is not None:
        order += "; then those that do not fit, lowest peak first"
    rejected = any(c.outcome == "rejected" for c in self.candidates)
    return (
        f"Order: {order}; then those rejected by the planner (nothing "
        "compiled), then those that failed or timed out, each in the order "
        "given. 'state per "
        "device': the plan's parameters, other state and optimizer state"
        + (
            " ('-' where the planner rejected the plan itself: it has no "
            "figure on that mesh)."
            if rejected and any(c.plan_bytes is None for c in self.candidates)
            else "."
        )
    )


def _estimate_notes(self: "MeshComparison") -> Iterator[str]:
    """What the estimates cannot tell apart, and the room left in the budget."""
    equals = self.equals
    if len(equals) > 1 and equals[0].estimate is not None:
        error = tie_error(*(c.error for c in equals))
        rooflines = [c.report.roofline for c in equals if c.report is not None]
        calibrated = any(
            r is not None and r.time is not None and r.time.constants.calibrated
            for r in rooflines
        )
        within = (
            f"within {error_words(error)} of each other"
            if error is not None
            else f"the same, {error_words(None, calibrated=calibrated)}"
        )
        points = and_words([f"{c.name} {c.estimate:.3g} s" for c in equals])
        yield (
            f"{and_words([c.name for c in equals])} are equal within the estimate "
            f"({points}: {within}): the estimate cannot rank them, and the "
            "order among them (marked tied) is the estimates', not a "
            "ranking. Measure them, or choose by peak or by what else "
            "matters."
        )
    elif len(equals) > 1:
        ranges = and_words(
            [
                f"{c.name} {low:.3g}-{high:.3g} s"
                for c in equals
                if c.estimated_seconds is not None
                for low, high in (c.estimated_seconds,)
            ]
        )
        yield (
            f"{and_words([c.name for c in equals])} are equal within the estimate "
            f"(ranges overlap: {ranges}): which is faster depends on how much "
            "communication overlaps compute, which the estimate does not "
            "know; the order among them (marked tied) is the low end's, not "
            "a ranking. "
            "Measure them, or choose by peak or by what else matters."
        )
    headroom = self.batch_headroom
    if headroom is not None and self.max_device_bytes is not None:
        highest = max(
            (c for c in self.candidates if c.peak_bytes is not None),
            key=lambda c: c.peak_bytes or 0,
        )
        part = share(highest.peak_bytes or 0, self.max_device_bytes)
        yield (
            "Every compiled mesh uses under 50% of the budget (the most, "
            f"{highest.name}, {part}): the batch can grow about "
            f"{_times(headroom)}x on each. An estimate: the budget over the "
            "highest peak, as if the whole peak grew with the batch (the "
            "parameters, gradients and optimizer state do not, so the room "
            "is likely larger). `--max-batch` (`max_batch`) finds it, one "
            "mesh at a time."
        )


def and_words(words: list[str]) -> str:
    """``"a"``, ``"a and b"``, ``"a, b and c"``."""
    if len(words) < 2:
        return "".join(words)
    return f"{', '.join(words[:-1])} and {words[-1]}"


def _times(ratio: float) -> str:
    """``ratio`` rounded down: one decimal below 10 (``"2.6"``), else whole."""
    digits = max(0, 1 - math.floor(math.log10(ratio)))
    scale = 10**digits
    return f"{math.floor(ratio * scale) / scale:.{digits}f}"


def share(peak: int, budget: int) -> str:
    """``peak`` as a share of ``budget``: ``"37%"``, ``"0.11%"`` below 1%."""
    share = peak / budget
    return f"{share:.0%}" if share >= 0.01 or share == 0 else f"{share:.2%}"

"""A comparison's report: :class:`MeshComparison` over its rows.

The rows (:class:`~nnx_introspect._sweep.mesh_comparison.rows.MeshCandidate`), their
outcomes and order are :mod:`~nnx_introspect._sweep.mesh_comparison.rows`'; here are
the verdict and the renderers: the table (its notes are ``notes``), JSON, and the HTML
page (its chart drawn by ``chart``).
"""

import dataclasses
import html
from typing import Any

from nnx_introspect._ranking import error_words, tie_error, tied
from nnx_introspect._render import (
    Report,
    Table,
    format_bytes,
    page_html,
    short_headers,
    table_html,
    verdict_html,
)
from nnx_introspect._roofline import Roofline
from nnx_introspect._step import duration
from nnx_introspect._sweep.mesh_comparison.chart import peaks_svg, time_peak_svg
from nnx_introspect._sweep.mesh_comparison.notes import (
    BOUNDS,
    and_words,
    comparison_notes,
    share,
)
from nnx_introspect._sweep.mesh_comparison.rows import MeshCandidate, answered
from nnx_introspect._sweep.mesh_comparison.utilisation import (
    utilisation_cells,
    utilisation_header,
)
from nnx_introspect._text import plural


@dataclasses.dataclass(frozen=True)
class MeshComparison(Report):
    """Candidate meshes for one step, each compiled by XLA, the best first.

    Each compiled candidate is one :func:`step_memory_report` call (its full
    report kept on the row); candidates the planner rejects are rows that say
    why, with no compile spent; a compile that raised or timed out is a row
    too. Order: the meshes that fit (by their point estimate of the step time,
    :attr:`MeshCandidate.estimate`, where rows have one, then by peak bytes,
    lowest first), then those that do not fit (lowest peak first), then those
    rejected by the planner, then those that failed or timed out; ties keep
    the candidates' order. Meshes whose estimates lie within the calibrated
    error of the first's are equal within the estimate (:attr:`equals`): the
    verdict names them all, not one best. The roofline's ``(low, high)``
    range (:attr:`MeshCandidate.estimated_seconds`) is shown, said to be no bound; it
    ranks only rows with no point estimate.

    Attributes:
        target: The model's ``"package.module:factory"`` name.
        candidates: One :class:`MeshCandidate` per mesh, best first.
        num_devices: Devices in every candidate mesh.
        max_device_bytes: The per-device budget every row is judged against
            (``None``: none given and none known, on XLA:CPU).
        budget_basis: How the budget was found, in words, or ``None``.
        topology: The named target compiled for, or ``None`` (XLA:CPU).
        auto_axes: With ``meshes="auto"``, the axes whose factorisations were
            enumerated, in mesh order; ``None`` when the meshes were listed.
        batch: Each batch leaf as ``"float32[8,256]"``.
        step: What each candidate compiled: ``"forward"``, ``"forward +
            backward"`` or ``"forward + backward + optimizer update"``.
        compiles: Compiles submitted (candidates not rejected by the planner).
        seconds: Wall time of the whole comparison.
        executor: What ran the compiles, e.g. ``"a spawn process pool of 2
            workers"`` or the executor's class name.

    Example:
        >>> from concurrent.futures import ThreadPoolExecutor
        >>> from nnx_introspect import compare_meshes
        >>> import jax, jax.numpy as jnp
        >>> from jax.sharding import PartitionSpec as P
        >>> x = jax.ShapeDtypeStruct((8, 3), jnp.float32)
        >>> with ThreadPoolExecutor(max_workers=1) as pool:
        ...     comparison = compare_meshes(
        ...         "nnx_introspect.examples:two_layer", ["data=8", "data=2,model=4"],
        ...         x, rules=[("kernel", P(None, "model"))],
        ...         max_device_bytes="1MiB", executor=pool,
        ...     )
        >>> [(c.name, c.outcome) for c in comparison.candidates]
        [('data=2,model=4', 'fits'), ('data=8', 'rejected')]
        >>> comparison.ok, comparison.best.report.num_devices
        (True, 8)
    """

    SCHEMA = "nnx-introspect/mesh-comparison"
    SCHEMA_VERSION = 1

    target: str
    candidates: tuple[MeshCandidate, ...]
    num_devices: int
    max_device_bytes: int | None
    budget_basis: str | None
    topology: str | None
    auto_axes: tuple[str, ...] | None
    batch: tuple[str, ...]
    step: str
    compiles: int
    seconds: float
    executor: str

    @property
    def best(self) -> MeshCandidate | None:
        """The first candidate when it fits (or, with no budget, compiled).

        First by the order, not necessarily faster: :attr:`equals` lists the
        candidates whose estimated step times it cannot be told from.
        """
        first = self.candidates[0] if self.candidates else None
        if first is None or not answered(first):
            return None
        return first

    @property
    def equals(self) -> tuple[MeshCandidate, ...]:
        """The best and every answer its step-time estimate cannot tell from it.

        The candidates that fit (with no budget: that compiled) whose point
        estimate lies within the calibrated error of :attr:`best`'s
        (:func:`~nnx_introspect._ranking.tied`: within the larger error bar
        of the two, times the larger estimate; uncalibrated, only the same
        estimate), the best first. When the best has no point estimate, the
        old rule: the answers whose roofline ``(low, high)`` ranges overlap
        its own (more than at one end, or the same range). Just the best
        when none is tied with it or it has no estimate; empty with no best.

        Example:
            >>> row = lambda mesh, seconds, error: MeshCandidate(
            ...     mesh, "fits", estimated_seconds=(0.1, 2.0),
            ...     estimate=seconds, error=error)
            >>> fast, close, slow = (  # 0.5 and 0.54: within 10% of 0.54
            ...     row((("fsdp", 8),), 0.50, 0.10),
            ...     row((("fsdp", 4), ("tp", 2)), 0.54, 0.10),
            ...     row((("tp", 8),), 0.56, 0.10),
            ... )
            >>> comparison = MeshComparison(
            ...     "m:f", (fast, close, slow), 8, 2**30, "the budget given", "v5e-8",
            ...     None, ("int32[8,512]",), "forward", 3, 1.0, "a pool",
            ... )
            >>> [c.name for c in comparison.equals]
            ['fsdp=8', 'fsdp=4,tp=2']

            With only the roofline's ranges, overlapping ranges are equal:

            >>> bounds = lambda mesh, low, high: MeshCandidate(
            ...     mesh, "fits", estimated_seconds=(low, high))
            >>> comparison = dataclasses.replace(comparison, candidates=(
            ...     bounds((("fsdp", 8),), 0.39, 0.83),
            ...     bounds((("fsdp", 4), ("tp", 2)), 0.79, 1.16),
            ...     bounds((("tp", 8),), 1.2, 1.5),
            ... ))
            >>> [c.name for c in comparison.equals]
            ['fsdp=8', 'fsdp=4,tp=2']
        """
        best = self.best
        if best is None:
            return ()
        if best.estimate is not None:
            point = best.estimate
            return tuple(
                c
                for c in self.candidates
                if answered(c)
                and c.estimate is not None
                and tied(c.estimate, point, c.error, best.error)
            )
        if best.estimated_seconds is None:
            return (best,)
        low, high = best.estimated_seconds
        return tuple(
            c
            for c in self.candidates
            if answered(c)
            and c.estimated_seconds is not None
            and (
                (c.estimated_seconds[0] < high and c.estimated_seconds[1] > low)
                or c.estimated_seconds == best.estimated_seconds
            )
        )

    @property
    def batch_headroom(self) -> float | None:
        """How many times the batch could grow, when every mesh uses under half.

        The budget over the highest compiled peak, when every compiled
        candidate fits in under half the budget; else ``None``. An estimate,
        and a floor of one: it takes the whole peak to grow with the batch,
        while the parameters, gradients and optimizer state do not.
        :func:`~nnx_introspect.max_batch` finds the batch itself, by compiling.

        Example:
            >>> rows = tuple(
            ...     MeshCandidate(((axis, 8),), "fits", plan_bytes=peak)
            ...     for axis, peak in (("data", 30), ("fsdp", 40))
            ... )
            >>> MeshComparison(
            ...     "m:f", rows, 8, 100, "the budget given", None, None, (),
            ...     "forward", 0, 1.0, "a pool",
            ... ).batch_headroom is None  # nothing compiled: no peak to go by
            True
        """
        peaks = [c.peak_bytes for c in self.candidates if c.peak_bytes is not None]
        budget = self.max_device_bytes
        if not budget or not peaks or 2 * max(peaks) >= budget:
            return None
        return budget / max(peaks, default=1)

    @property
    def ok(self) -> bool:
        """Whether some mesh fits (with no budget: whether some mesh compiled)."""
        return self.best is not None

    def fits(self) -> bool:
        """Whether a mesh was found whose step fits the budget: :attr:`ok`.

        Example:
            >>> from concurrent.futures import ThreadPoolExecutor
            >>> from nnx_introspect import compare_meshes
            >>> import jax, jax.numpy as jnp
            >>> x = jax.ShapeDtypeStruct((8, 3), jnp.float32)
            >>> with ThreadPoolExecutor(max_workers=1) as pool:
            ...     tight = compare_meshes(
            ...         "nnx_introspect.examples:two_layer", ["data=8", "data=4,x=2"],
            ...         x, max_device_bytes="200B", executor=pool,
            ...     )
            >>> tight.fits(), [c.outcome for c in tight.candidates]
            (False, ['does not fit', 'does not fit'])
        """
        return self.ok

    @property
    def compiler(self) -> str | None:
        """The compiler of the steps, as the reports name it, or ``None``."""
        return next(
            (c.report.compiler for c in self.candidates if c.report is not None),
            None,
        )

    def _counts(self) -> str:
        """``"2 of 4 fit, 1 rejected by the planner, 1 failed"``."""
        n = len(self.candidates)
        outcomes: list[str] = [c.outcome for c in self.candidates]
        parts = (
            [f"{outcomes.count('compiled')} of {n} compiled"]
            if self.max_device_bytes is None
            else [f"{outcomes.count('fits')} of {n} fit"]
        )
        for outcome, words in (
            ("rejected", "rejected by the planner"),
            ("failed", "failed"),
            ("timed out", "timed out"),
        ):
            if outcomes.count(outcome):
                parts.append(f"{outcomes.count(outcome)} {words}")
        return ", ".join(parts)

    @property
    def verdict(self) -> str:
        """One line: the best mesh and its peak, or why none fits."""
        best = self.best
        by = f", by {self.compiler}" if self.compiler else ""
        basis = (
            ""
            if self.budget_basis in (None, "the budget given")
            else f"; the budget is {self.budget_basis}"
        )
        counts = self._counts()
        if len(self.equals) > 1:
            return self._tie_verdict(counts, by, basis)
        if best is not None and best.report is not None:
            peak = format_bytes(best.report.peak_bytes)
            timed = _time_words(best)
            if self.max_device_bytes is None:
                first = "Lowest peak" if best.planned_seconds is None else "Fastest"
                return (
                    f"{first}: {best.name}, {peak} per device{timed} (no budget "
                    f"to judge against; {counts}){by}"
                )
            budget = format_bytes(self.max_device_bytes)
            return (
                f"Best mesh: {best.name}, peak {peak} of {budget} per device"
                f"{timed} ({counts}){by}{basis}"
            )
        lowest = next((c for c in self.candidates if c.report is not None), None)
        if lowest is not None and lowest.report is not None:
            budget = format_bytes(self.max_device_bytes or 0)
            return (
                f"No mesh fits: the lowest peak, {lowest.name}, needs "
                f"{format_bytes(lowest.report.peak_bytes)} per device, over the "
                f"budget of {budget} ({counts}){by}{basis}"
            )
        return f"No mesh fits: none compiled ({counts})"

    def _tie_verdict(self, counts: str, by: str, basis: str) -> str:
        """The verdict when several answers are equal within the estimate."""
        equals = self.equals
        peaks = and_words([format_bytes(c.peak_bytes or 0) for c in equals])
        budget = self.max_device_bytes
        of = (
            f"per device (no budget to judge against; {counts})"
            if budget is None
            else f"of {format_bytes(budget)} per device ({counts})"
        )
        return (
            f"No single best mesh: {and_words([c.name for c in equals])} are equal "
            f"within the estimate ({_tie_reason(equals)}), peaks {peaks} "
            f"{of}{by}{basis}"
        )

    def table(self) -> Table:
        """The comparison as a :class:`~nnx_introspect.Table`: a row per mesh."""
        budget = self.max_device_bytes
        estimates = any(c.planned_seconds is not None for c in self.candidates)
        points = any(c.estimate is not None for c in self.candidates)
        rooflines = self.rooflines()
        columns = ["mesh", "status"]
        if estimates:
            columns += ["step seconds (est.)", utilisation_header(rooflines)]
        if points:
            columns.append(BOUNDS)
        columns += ["peak per device", "peak bytes", "of budget", "state per device"]
        wired = any(c.collective_bytes_by_axis for c in self.candidates)
        if wired:
            columns.append("collectives on the wire per device")
        equals = self.equals
        rows = []
        for c, utilisation in zip(
            self.candidates, utilisation_cells(rooflines), strict=True
        ):
            peak = c.peak_bytes
            row = [c.name, c._short_status()]
            if estimates:
                tie = " (tied)" if len(equals) > 1 and c in equals else ""
                seconds = _seconds_cell(c)
                row.append(seconds if seconds == "-" else seconds + tie)
                row.append(utilisation)
            if points:
                row.append(_bounds_cell(c.estimated_seconds))
            row += [
                "-" if peak is None else format_bytes(peak),
                "-" if peak is None else f"{peak:,}",
                "-" if peak is None or not budget else share(peak, budget),
                "-" if c.plan_bytes is None else format_bytes(c.plan_bytes),
            ]
            if wired:
                row.append(
                    "; ".join(
                        f"{axes}: {format_bytes(n)}"
                        for axes, n in (c.collective_bytes_by_axis or {}).items()
                    )
                    or "-"
                )
            rows.append(tuple(row))
        return Table(
            title=self.verdict,
            columns=tuple(columns),
            rows=tuple(rows),
            notes=tuple(comparison_notes(self)),
            short=short_headers(columns),
            optional=("peak bytes", BOUNDS, "state per device", "of budget"),
        )

    def rooflines(self) -> list[Roofline | None]:
        """Each row's step-time estimate, ``None`` where it has none."""
        return [
            None if c.report is None else c.report.roofline for c in self.candidates
        ]

    def json_data(self) -> dict[str, Any]:
        """Exact figures for JSON output; each compiled row has its full report."""
        best = self.best
        return {
            "ok": self.ok,
            "verdict": self.verdict,
            "best": None if best is None else best.name,
            "equals": [c.name for c in self.equals],
            "batch_headroom": self.batch_headroom,
            "target": self.target,
            "num_devices": self.num_devices,
            "max_device_bytes": self.max_device_bytes,
            "budget_basis": self.budget_basis,
            "topology": self.topology,
            "compiler": self.compiler,
            "auto_axes": None if self.auto_axes is None else list(self.auto_axes),
            "batch": list(self.batch),
            "step": self.step,
            "compiles": self.compiles,
            "seconds": self.seconds,
            "executor": self.executor,
            "candidates": [c.json_data() for c in self.candidates],
        }

    def to_html(self) -> str:
        """A self-contained page: the verdict, peak against mesh, the table.

        The chart is an inline SVG: one bar per compiled mesh (green fits, red
        does not, blue with no budget), the budget as a dashed line; the best
        mesh's own step report follows the table.

        Example:
            >>> from concurrent.futures import ThreadPoolExecutor
            >>> from nnx_introspect import compare_meshes
            >>> import jax, jax.numpy as jnp
            >>> x = jax.ShapeDtypeStruct((8, 3), jnp.float32)
            >>> with ThreadPoolExecutor(max_workers=1) as pool:
            ...     page = compare_meshes(
            ...         "nnx_introspect.examples:two_layer", ["data=8"], x,
            ...         max_device_bytes="1MiB", executor=pool,
            ...     ).to_html()
            >>> page.index('class="verdict ok"') < page.index("<svg")
            True
        """
        parts = [
            f"<h1>Meshes compared: {html.escape(self.target)} on "
            f"{plural(self.num_devices, 'device')}</h1>",
            verdict_html(self.verdict, self._verdict_tone() or "neutral"),
        ]
        if self.candidates:
            rows = tuple(
                (
                    c.name,
                    c.peak_bytes,
                    c.outcome,
                    c._short_status(),
                    _chart_times(c),
                )
                for c in self.candidates
            )
            parts.append(peaks_svg(rows, self.max_device_bytes))
            parts.append(time_peak_svg(rows, self.max_device_bytes))
        parts.append(table_html(self.table(), caption=False))
        best = self.best
        if best is not None and best.report is not None:
            parts.append(f"<h2>The step on {html.escape(best.name)}</h2>")
            parts.append(table_html(best.report.table()))
        return page_html(self.verdict, "".join(parts))


def _seconds_cell(c: MeshCandidate) -> str:
    """The step time a row is ranked by: ``"0.512 ±9%"``, else its range.

    Example:
        >>> row = MeshCandidate((("a", 8),), "fits", estimated_seconds=(0.4, 0.9))
        >>> _seconds_cell(row)
        '0.4-0.9'
        >>> _seconds_cell(dataclasses.replace(row, estimate=0.5123, error=0.09))
        '0.512 ±9%'
        >>> _seconds_cell(dataclasses.replace(row, estimate=0.5123))
        '0.512'
    """
    if c.estimate is not None:
        return f"{c.estimate:.3g}" + ("" if c.error is None else f" ±{c.error:.0%}")
    return _bounds_cell(c.estimated_seconds)


def _bounds_cell(bounds: tuple[float, float] | None) -> str:
    """``(0.394, 0.826)`` -> ``"0.394-0.826"``; ``"-"`` without."""
    return "-" if bounds is None else f"{bounds[0]:.3g}-{bounds[1]:.3g}"


def _time_words(c: MeshCandidate) -> str:
    """``", 512 ms per step (estimate, ±9%)"``, or ``""`` with no point estimate."""
    if c.estimate is None:
        return ""
    roofline = None if c.report is None else c.report.roofline
    time = None if roofline is None else roofline.time
    calibrated = time is not None and time.constants.calibrated
    words = error_words(c.error, calibrated=calibrated)
    return f", {duration(c.estimate)} per step (estimate, {words})"


def _tie_reason(equals: tuple[MeshCandidate, ...]) -> str:
    """Why the ``equals`` cannot be ranked, in a few words."""
    if equals[0].estimate is None:
        return "step-time ranges overlap"
    error = tie_error(*(c.error for c in equals))
    if error is None:
        return "the same estimated step time"
    return f"step-time estimates within {error_words(error)} of each other"


def _chart_times(c: MeshCandidate) -> tuple[float, ...] | None:
    """The chart's times of a row: its range, then its point estimate if any."""
    if c.estimated_seconds is None:
        return None
    point = () if c.estimate is None else (c.estimate,)
    return (*c.estimated_seconds, *point)

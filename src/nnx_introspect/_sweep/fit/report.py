"""The fit search's report: :class:`FitSearch` and its :class:`FitRow` rows."""

import dataclasses
import html
from typing import Any, Literal, TypeAlias

from nnx_introspect._ranking import error_words, tie_error, tied
from nnx_introspect._render import (
    Report,
    Table,
    format_bytes,
    page_html,
    table_html,
    verdict_html,
)
from nnx_introspect._roofline import RANGE_WORDS
from nnx_introspect._sweep.mesh_comparison.chart import CHOSEN, time_peak_svg
from nnx_introspect._sweep.mesh_comparison.rows import MeshAxes, mesh_name

__all__ = ["FitRow", "FitSearch", "FitStatus"]

FitStatus: TypeAlias = Literal["fits", "does not fit", "failed", "not compiled"]
"""What became of one configuration: compiled and judged, a compile that
raised, or not compiled (its row says why)."""


@dataclasses.dataclass(frozen=True)
class FitRow:
    """One configuration of the step: a mesh, a remat choice, a microbatch count.

    Attributes:
        mesh: The mesh's ``(axis, size)`` pairs.
        remat: The ``(module class, policy)`` pairs rematerialised (empty: none).
        microbatches: How many microbatches the gradients accumulate over.
        status: A :data:`FitStatus`.
        why: Why it was not compiled, or the compile's error; else ``None``.
        peak_bytes: The compiled step's peak per device.
        seconds: The roofline's ``(low, high)`` range of the step time (a
            named topology): no bound, shown beside :attr:`estimate`; it ranks
            a row only when the row has no point estimate.
        mfu_ceiling: The roofline's utilisation at its range's low end (shown
            only where a row has no point estimate).
        flops: The program's FLOPs per device, loops counted per trip.
        estimate: The point estimate of the step time in seconds (from the
            program's instructions at calibrated rates): what rows are ranked
            by; ``None`` without one.
        error: :attr:`estimate`'s calibrated error bar as a fraction
            (``0.09``: ±9%), or ``None`` (uncalibrated, or no estimate).
        mfu: The utilisation at :attr:`estimate` (an MFU when the model's
            FLOPs are known, else the hardware FLOPs utilisation), or ``None``.

    Example:
        >>> row = FitRow((("fsdp", 8),), (("Block", "dots_saveable"),), 2, "fits",
        ...              peak_bytes=3 * 2**30, seconds=(0.5, 0.7))
        >>> row.name, row.options
        ('fsdp=8', 'remat Block (dots_saveable), 2 microbatches')
    """

    mesh: MeshAxes
    remat: tuple[tuple[str, str], ...]
    microbatches: int
    status: FitStatus
    why: str | None = None
    peak_bytes: int | None = None
    seconds: tuple[float, float] | None = None
    mfu_ceiling: float | None = None
    flops: float | None = None
    estimate: float | None = None
    error: float | None = None
    mfu: float | None = None

    @property
    def name(self) -> str:
        """The mesh as ``"fsdp=2,tp=4"``."""
        return mesh_name(self.mesh)

    @property
    def options(self) -> str:
        """The remat choice and the microbatches, in words."""
        layers = (
            "no remat"
            if not self.remat
            else "remat " + ", ".join(f"{c} ({p})" for c, p in self.remat)
        )
        passes = (
            "1 microbatch"
            if self.microbatches == 1
            else f"{self.microbatches} microbatches"
        )
        return f"{layers}, {passes}"

    def json_data(self) -> dict[str, Any]:
        """The row as JSON data."""
        return {
            "mesh": dict(self.mesh),
            "remat": dict(self.remat),
            "microbatches": self.microbatches,
            "status": self.status,
            "why": self.why,
            "peak_bytes": self.peak_bytes,
            "seconds": None if self.seconds is None else list(self.seconds),
            "roofline_bounds_seconds": None
            if self.seconds is None
            else list(self.seconds),
            "estimate_seconds": self.estimate,
            "estimate_error": self.error,
            "mfu": self.mfu,
            "mfu_ceiling": self.mfu_ceiling,
            "flops": self.flops,
        }


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether two ``(low, high)`` ranges overlap (more than at one end, or match)."""
    return (a[0] < b[1] and a[1] > b[0]) or a == b


def same_speed(a: FitRow, b: FitRow) -> bool:
    """Whether the estimates cannot rank ``a`` and ``b``.

    With point estimates on both: whether they lie within the calibrated
    error of each other (:func:`~nnx_introspect._ranking.tied`); otherwise,
    with the roofline's bounds on both, whether those overlap; else ``False``.

    Example:
        >>> row = lambda estimate, error=0.1: FitRow(
        ...     (("fsdp", 8),), (), 1, "fits", seconds=(0.1, 9.0),
        ...     estimate=estimate, error=error)
        >>> same_speed(row(1.0), row(1.1)), same_speed(row(1.0), row(1.12))
        (True, False)
        >>> same_speed(row(1.0, None), row(1.0, None))  # uncalibrated: equal only
        True
        >>> same_speed(FitRow((), (), 1, "fits", seconds=(1, 2)),
        ...            FitRow((), (), 1, "fits", seconds=(1.5, 3)))
        True
    """
    if a.estimate is not None and b.estimate is not None:
        return tied(a.estimate, b.estimate, a.error, b.error)
    if a.estimate is not None or b.estimate is not None:
        return False  # one point, one range: nothing to compare
    if a.seconds is None or b.seconds is None:
        return False
    return _overlap(a.seconds, b.seconds)


def surely_slower(row: FitRow, best: FitRow | None) -> bool:
    """Whether ``row`` is estimated slower than ``best``, beyond the error bar.

    By the point estimates where both have one (slower and not
    :func:`same_speed`); else by the roofline's bounds (``row``'s low above
    ``best``'s high); ``False`` when either has no time.

    Example:
        >>> row = lambda estimate: FitRow((), (), 1, "fits", seconds=(0.1, 9.0),
        ...                               estimate=estimate, error=0.1)
        >>> surely_slower(row(1.2), row(1.0)), surely_slower(row(1.1), row(1.0))
        (True, False)
    """
    if best is None:
        return False
    if row.estimate is not None and best.estimate is not None:
        return row.estimate > best.estimate and not same_speed(row, best)
    if row.seconds is None or best.seconds is None:
        return False
    return row.seconds[0] > best.seconds[1]


@dataclasses.dataclass(frozen=True)
class FitSearch(Report):
    """The configurations tried, and the fastest that fits.

    Attributes:
        target: The model's ``"package.module:factory"``.
        batch: Each batch leaf as ``"int32[8,2048]"``.
        topology: The named topology, or ``None`` (XLA:CPU).
        max_device_bytes: The budget per device.
        budget_basis: Where the budget comes from, in words.
        rows: Every configuration, compiled or not, in the order tried.
        chosen: The fastest configuration that fits (by the point estimate
            of the step time; else by the low end of the roofline's bounds;
            else by FLOPs), or ``None``.
        layer: The module class rematerialised, or ``None``.
        layer_basis: How it was chosen.
        compiles: How many compiles ran.
        seconds: Wall time of the search.
        executor: What ran the compiles, in words.
        smallest: When nothing fits: the configuration with the smallest peak.
        smallest_batch: When nothing fits: the largest global batch that fits
            with :attr:`smallest`'s options (``max_batch``), or ``None``.
        candidates: The remat candidates tried, ``(module class, evidence)``,
            in the order the evidence ranks them.
        failure: Why the search itself failed (its worker processes died, or
            every compile raised), or ``None``: then :attr:`verdict` says so
            first, and the CLI exits with 3.

    Example:
        >>> fits = FitRow((("fsdp", 8),), (), 2, "fits", peak_bytes=10, seconds=(1, 2))
        >>> no = FitRow((("fsdp", 8),), (), 1, "does not fit", peak_bytes=20)
        >>> search = FitSearch("m:f", ("int32[8,512]",), "h100-8", 16, "given",
        ...                    (no, fits), fits, None, "", 2, 1.0, "a pool")
        >>> search.ok, search.change
        (True, 'accumulate gradients over 2 microbatches of 4 (on mesh fsdp=8)')
    """

    SCHEMA = "nnx-introspect/fit-search"
    SCHEMA_VERSION = 2

    target: str
    batch: tuple[str, ...]
    topology: str | None
    max_device_bytes: int
    budget_basis: str
    rows: tuple[FitRow, ...]
    chosen: FitRow | None
    layer: str | None
    layer_basis: str
    compiles: int
    seconds: float
    executor: str
    smallest: FitRow | None = None
    smallest_batch: int | None = None
    candidates: tuple[tuple[str, str], ...] = ()
    failure: str | None = None

    @property
    def ok(self) -> bool:
        """Whether some configuration fits."""
        return self.chosen is not None

    @property
    def equals(self) -> tuple[FitRow, ...]:
        """The other fitting rows the estimates cannot tell from the chosen one.

        Those whose point estimates lie within the calibrated error of the
        chosen one's (:func:`same_speed`); where the chosen one has no point
        estimate, those whose roofline bounds overlap its own.

        Example:
            >>> row = lambda k, estimate: FitRow(
            ...     (("fsdp", 8),), (), k, "fits", peak_bytes=10,
            ...     seconds=(0.1, 9.0), estimate=estimate, error=0.05)
            >>> a, b, c = row(1, 1.0), row(2, 1.04), row(4, 1.2)
            >>> search = FitSearch("m:f", ("int32[8,512]",), "v5e-8", 16, "given",
            ...                    (a, b, c), a, None, "", 3, 1.0, "a pool")
            >>> [r.microbatches for r in search.equals]  # 1.04 within 5% of 1.0
            [2]
        """
        best = self.chosen
        if best is None:
            return ()
        return tuple(
            r
            for r in self.rows
            if r is not best and r.status == "fits" and same_speed(r, best)
        )

    @property
    def change(self) -> str | None:
        """The change to make, written as the user's code; ``None`` if none fits."""
        best = self.chosen
        if best is None:
            return None
        parts = [
            f"wrap `{cls}.__call__` in `nnx.remat(policy=jax.checkpoint_policies."
            f"{policy})`"
            for cls, policy in best.remat
        ]
        rows = _leading_rows(self.batch)
        if best.microbatches > 1:
            each = "" if rows is None else f" of {rows // best.microbatches}"
            parts.append(
                f"accumulate gradients over {best.microbatches} microbatches{each}"
            )
        if not parts:
            parts.append("nothing: the step fits as it is")
        return "; ".join(parts) + f" (on mesh {best.name})"

    @property
    def verdict(self) -> str:
        """One sentence: the configuration chosen, or that none fits."""
        budget = format_bytes(self.max_device_bytes)
        if self.failure is not None:
            on = "" if self.topology is None else f" on {self.topology}"
            return f"The search failed{on}: {self.failure}"
        best = self.chosen
        if best is not None and best.peak_bytes is not None:
            return (
                f"Fits: {best.name} with {best.options}, "
                f"{format_bytes(best.peak_bytes)} per device of {budget}"
            )
        small = self.smallest
        if small is None or small.peak_bytes is None:
            return f"Nothing fits {budget} per device: no configuration compiled"
        batch = (
            ""
            if self.smallest_batch is None
            else f"; with it the largest batch that fits is {self.smallest_batch}"
        )
        return (
            f"Nothing fits {budget} per device: the smallest peak is "
            f"{format_bytes(small.peak_bytes)} ({small.name} with {small.options})"
            f"{batch}"
        )

    def table(self) -> Table:
        """A row per configuration, the chosen one first."""
        estimates = any(r.seconds is not None for r in self.rows)
        points = any(r.estimate is not None for r in self.rows)
        columns = ["mesh", "remat", "microbatches", "status", "peak per device"]
        columns += ["of budget", "step seconds (est.)" if estimates else "FLOPs"]
        utilisation = "MFU (est.)" if points else "MFU ceiling (est.)"
        columns.append(utilisation if estimates else "why not compiled")
        if points:
            columns.append(BOUNDS)
        rows = []
        for r in self._ordered():
            peak = r.peak_bytes
            cells = [
                r.name,
                ", ".join(f"{c}: {p}" for c, p in r.remat) or "none",
                str(r.microbatches),
                "chosen: fits" if r is self.chosen else r.status,
                "-" if peak is None else format_bytes(peak),
                "-" if peak is None else f"{peak / self.max_device_bytes:.0%}",
            ]
            if estimates:
                cells.append(_seconds_cell(r))
                cells.append(_mfu_cell(r, points))
                if points:
                    cells.append(
                        "-"
                        if r.seconds is None
                        else f"{r.seconds[0]:.3g}-{r.seconds[1]:.3g}"
                    )
            else:
                cells.append("-" if r.flops is None else f"{r.flops:.3g}")
                cells.append(r.why or "")
            rows.append(tuple(cells))
        return Table(
            title=self.verdict,
            columns=tuple(columns),
            rows=tuple(rows),
            lead=tuple(self._lead()),
            notes=tuple(self._notes(estimates)),
            optional=(BOUNDS,) if points else (),
        )

    def _ordered(self) -> list[FitRow]:
        """Fitting rows fastest first, then the others in the order tried."""
        fitting = [r for r in self.rows if r.status == "fits"]
        fitting.sort(key=speed_key)
        return fitting + [r for r in self.rows if r.status != "fits"]

    def _lead(self) -> list[str]:
        lead = []
        if self.change is not None:
            lead.append(f"The change to make: {self.change}.")
        equals = self.equals
        best = self.chosen
        if equals and best is not None:
            names = "; ".join(f"{r.name} with {r.options}" for r in equals)
            if best.estimate is None:
                why = "their step-time ranges overlap"
            else:
                error = tie_error(best.error, *(r.error for r in equals))
                why = (
                    "the same estimated step time"
                    if error is None
                    else f"step-time estimates within {error_words(error)} of its own"
                )
            lead.append(f"Equal to it within the estimate ({why}): {names}.")
        return lead

    def _notes(self, estimates: bool) -> list[str]:
        notes = [
            f"Budget: {format_bytes(self.max_device_bytes)} per device "
            f"({self.budget_basis}). Batch {', '.join(self.batch)}; {self.compiles} "
            f"compiles in {self.seconds:.0f} s on {self.executor}.",
            self._remat_note(),
        ]
        if any(r.estimate is not None for r in self.rows):
            notes.append(
                "Ranked by the estimated step time (each compiled program's "
                "instructions at the device's rates, not a measurement; "
                + _errors(self.rows)
                + "): recompute and per-microbatch collectives are in the "
                "compiled program it reads; two rows within the error bar of each "
                "other are equal, and MFU is at the estimate. "
                f"'{BOUNDS}': the roofline's range from perfect overlap to "
                f"none, {RANGE_WORDS}."
            )
        elif estimates:
            notes.append(
                "Ranked by the estimated step time (a roofline range from perfect "
                "overlap to none, not a measurement): recompute and per-microbatch "
                "collectives are in the compiled program it reads."
            )
        elif self.topology is None:
            notes.append(
                "No topology, so no step-time estimate: ranked by the program's "
                "FLOPs per device (recompute included)."
            )
        else:
            notes.append(
                f"Topology {self.topology}: no row has a step-time estimate "
                "(nothing compiled), so none is ranked by time."
            )
        if estimates:
            notes += [
                f"{r.name} with {r.options}: {r.why}"
                for r in self.rows
                if r.why is not None
            ]
        return notes

    def _remat_note(self) -> str:
        """Which classes were rematerialised, each with its evidence."""
        if self.layer is None:
            return f"Remat: no layer to rematerialise ({self.layer_basis})."
        others = [(n, b) for n, b in self.candidates if n != self.layer]
        tried = "".join(f" Also tried: {_named(n, b)}." for n, b in others)
        return f"Remat: {_named(self.layer, self.layer_basis)}.{tried}"

    def json_data(self) -> dict[str, Any]:
        """The search as JSON data."""
        return {
            "ok": self.ok,
            "failure": self.failure,
            "verdict": self.verdict,
            "change": self.change,
            "target": self.target,
            "batch": list(self.batch),
            "topology": self.topology,
            "max_device_bytes": self.max_device_bytes,
            "budget_basis": self.budget_basis,
            "chosen": None if self.chosen is None else self.chosen.json_data(),
            "equals": [r.json_data() for r in self.equals],
            "layer": self.layer,
            "layer_basis": self.layer_basis,
            "candidates": [{"class": n, "basis": b} for n, b in self.candidates],
            "rows": [r.json_data() for r in self.rows],
            "compiles": self.compiles,
            "seconds": self.seconds,
            "executor": self.executor,
            "smallest": None if self.smallest is None else self.smallest.json_data(),
            "smallest_batch": self.smallest_batch,
        }

    def to_html(self) -> str:
        """A standalone page: the verdict, peak against time, the table."""
        table = self.table()
        points = []
        for r in self._ordered():
            if r.peak_bytes is None or r.seconds is None:
                continue
            outcome = "fits" if r.status == "fits" else "does not fit"
            if r is self.chosen:
                outcome = CHOSEN
            label = f"{'chosen: ' if r is self.chosen else ''}{r.name} {r.options}"
            point = () if r.estimate is None else (r.estimate,)
            times = (*r.seconds, *point)
            points.append((label, r.peak_bytes, outcome, outcome, times))
        chart = time_peak_svg(points, self.max_device_bytes)
        body = (
            verdict_html(table.title, "ok" if self.ok else "bad")
            + "".join(f'<p class="lead">{html.escape(s)}</p>' for s in table.lead)
            + chart
            + table_html(dataclasses.replace(table, lead=()), caption=False)
        )
        return page_html("nnx-introspect: make it fit", body)


def speed_key(row: FitRow) -> tuple[float, float, float]:
    """Fastest first: the point estimate, else the bounds, else the FLOPs; then peak.

    Example:
        >>> rows = [
        ...     FitRow((("a", 8),), (), 1, "fits", seconds=(0.1, 0.9), estimate=0.6),
        ...     FitRow((("b", 8),), (), 1, "fits", seconds=(0.3, 0.4), estimate=0.35),
        ... ]
        >>> [r.name for r in sorted(rows, key=speed_key)]
        ['b=8', 'a=8']
    """
    if row.estimate is not None:
        return (row.estimate, 0.0, float(row.peak_bytes or 0))
    if row.seconds is not None:
        return (row.seconds[0], row.seconds[1], float(row.peak_bytes or 0))
    flops = row.flops if row.flops is not None else float("inf")
    return (flops, flops, float(row.peak_bytes or 0))


BOUNDS = "roofline range (s)"
"""The column of the roofline's ``(low, high)`` range: no bound, not the estimate."""


def _seconds_cell(r: FitRow) -> str:
    """The step time a row is ranked by: ``"0.512 ±9%"``, else its range, else -."""
    if r.estimate is not None:
        return f"{r.estimate:.3g}" + ("" if r.error is None else f" ±{r.error:.0%}")
    return "-" if r.seconds is None else f"{r.seconds[0]:.3g}-{r.seconds[1]:.3g}"


def _mfu_cell(r: FitRow, points: bool) -> str:
    """The MFU at the estimate, else the ceiling (``"≤"`` among point figures)."""
    if r.mfu is not None:
        return f"{r.mfu:.0%}"
    if r.mfu_ceiling is None:
        return "-"
    return f"{'≤' if points else ''}{r.mfu_ceiling:.0%}"


def _errors(rows: tuple[FitRow, ...]) -> str:
    """The rows' error bars in words: ``"±9%"``, ``"uncalibrated"``, joined."""
    words = dict.fromkeys(error_words(r.error) for r in rows if r.estimate is not None)
    return " or ".join(words)


def _leading_rows(batch: tuple[str, ...]) -> int | None:
    """The leading dimension of the first batch leaf (``"int32[8,2048]"`` -> 8)."""
    if not batch or "[" not in batch[0]:
        return None
    dims = batch[0].split("[", 1)[1].rstrip("]").split(",")
    return int(dims[0]) if dims and dims[0].strip().isdigit() else None


def _named(name: str, basis: str) -> str:
    """``"X: 1 GiB of kept ..."`` as it is, else ``"X (basis)"``: the name once.

    Example:
        >>> _named("Block", "Block: 1 KiB of kept activations"), _named("B", "why")
        ('Block: 1 KiB of kept activations', 'B (why)')
    """
    return basis if basis.startswith(f"{name}: ") else f"{name} ({basis})"

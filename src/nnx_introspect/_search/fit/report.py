"""The fit search's report: :class:`FitSearch` and its :class:`FitRow` rows."""

import dataclasses
import html
from typing import Any, Literal, TypeAlias

from nnx_introspect._render import (
    Report,
    Table,
    format_bytes,
    page_html,
    table_html,
    verdict_html,
)
from nnx_introspect._search.meshes.chart import CHOSEN, time_peak_svg
from nnx_introspect._search.meshes.rows import MeshAxes, mesh_name

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
        seconds: The ``(low, high)`` step-time estimate (a named topology).
        mfu_ceiling: The estimate's utilisation at its low end.
        flops: The program's FLOPs per device, loops counted per trip.

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
            "mfu_ceiling": self.mfu_ceiling,
            "flops": self.flops,
        }


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return (a[0] < b[1] and a[1] > b[0]) or a == b


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
        chosen: The fastest configuration that fits (by estimated step time,
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
        """The other fitting rows whose estimated ranges overlap the chosen one's."""
        best = self.chosen
        if best is None or best.seconds is None:
            return ()
        return tuple(
            r
            for r in self.rows
            if r is not best
            and r.status == "fits"
            and r.seconds is not None
            and _overlap(r.seconds, best.seconds)
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
        columns = ["mesh", "remat", "microbatches", "status", "peak per device"]
        columns += ["of budget", "step seconds (est.)" if estimates else "FLOPs"]
        columns.append("MFU ceiling (est.)" if estimates else "why not compiled")
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
                cells.append(
                    "-"
                    if r.seconds is None
                    else f"{r.seconds[0]:.3g}-{r.seconds[1]:.3g}"
                )
                cells.append("-" if r.mfu_ceiling is None else f"{r.mfu_ceiling:.0%}")
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
        if equals:
            names = "; ".join(f"{r.name} with {r.options}" for r in equals)
            lead.append(
                f"Equal to it within the estimate (their step-time ranges "
                f"overlap): {names}."
            )
        return lead

    def _notes(self, estimates: bool) -> list[str]:
        notes = [
            f"Budget: {format_bytes(self.max_device_bytes)} per device "
            f"({self.budget_basis}). Batch {', '.join(self.batch)}; {self.compiles} "
            f"compiles in {self.seconds:.0f} s on {self.executor}.",
            self._remat_note(),
        ]
        if estimates:
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
            points.append((label, r.peak_bytes, outcome, outcome, r.seconds))
        chart = time_peak_svg(points, self.max_device_bytes)
        body = (
            verdict_html(table.title, "ok" if self.ok else "bad")
            + "".join(f'<p class="lead">{html.escape(s)}</p>' for s in table.lead)
            + chart
            + table_html(dataclasses.replace(table, lead=()), caption=False)
        )
        return page_html("nnx-introspect: make it fit", body)


def speed_key(row: FitRow) -> tuple[float, float, float]:
    """Fastest first: the estimated range, else the FLOPs; then the peak."""
    if row.seconds is not None:
        return (row.seconds[0], row.seconds[1], float(row.peak_bytes or 0))
    flops = row.flops if row.flops is not None else float("inf")
    return (flops, flops, float(row.peak_bytes or 0))


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

"""The answer of :func:`~nnx_introspect.max_batch`: :class:`BatchSearch`.

Every batch size the search compiled, the answer (the largest below the
smallest that does not fit), what the sizes past that edge found, and the
steps' reports at the answer and the edge, rendered as a table, JSON and an
HTML page with the chart of memory against the batch.
"""

import dataclasses
import html
from typing import Any

from nnx_introspect._render import (
    Point,
    Report,
    Table,
    chart_svg,
    format_bytes,
    page_html,
    table_html,
    table_text,
    to_markdown,
    to_rich,
    verdict_html,
)
from nnx_introspect._size_search import (
    Jump,
    SearchPoint,
    SizeSearch,
    answer_words,
    jump_notes,
)
from nnx_introspect._step import StepMemoryReport
from nnx_introspect._sweep.batch.sizes import MAX_COMPILES
from nnx_introspect._text import plural
from nnx_introspect._typing import IntLike, as_int

__all__ = ["BatchSearch"]


@dataclasses.dataclass(frozen=True)
class BatchSearch(Report, SizeSearch):
    """The largest global batch whose step fits, and every batch size tried.

    Each point is one compile of the step by :func:`step_memory_report`, the
    batch's leading dimension set to that size, judged against the search's
    budget (``peak_bytes <= max_device_bytes``, and not refused for memory by
    the compiler). The peak is not monotone in the batch (XLA compiles a
    different program at a different size), so the search compiles a few
    sizes past its edge too and names any that fits (``also_fits``).

    Attributes:
        most: The answer: the largest batch tried below the smallest that does
            not fit, so every batch tried up to it fits (0: none does). The
            same name and meaning in every search (``ServeSearch.most``,
            ``RLBatchSearch.most``); ``best`` is its older name.
        max_device_bytes: The per-device budget every point is judged against.
        budget_basis: How the budget was found: ``"the budget given"``,
            ``"the device's memory"`` (a TPU), on a GPU target the share of
            the device JAX's allocator takes (see ``step_budget``), or the
            present devices' (no ``topology`` on a TPU or GPU).
        data_parallel: The data-parallel size: every batch tried is a multiple
            of it (the product of the mesh axes the batch's leading dimension
            splits over; the least common multiple over batch leaves).
        lo: The smallest batch the search may try.
        hi: The largest batch the search may try: ``hi`` if given, else the
            largest multiple of ``data_parallel`` whose batch shards fit the
            budget beside ``plan_bytes`` (a step's peak holds its arguments,
            so no larger batch can fit).
        plan_bytes: Bytes per device of the parameters, the other state and
            (with an optimizer) the optimizer state, as the plan shards them:
            arguments of every step, whatever the batch.
        points: Every batch size tried, sorted: ``(batch, peak_bytes, fits)``
            (``tried`` holds the same compiles as :class:`SearchPoint` records,
            the form every search shares).
        converged: Whether the edge was found: ``most + data_parallel`` was
            tried and does not fit, ``most == hi``, or ``lo`` does not fit
            (compiled, or known from the arguments alone). ``False`` when the
            search stopped after :data:`MAX_COMPILES` compiles: ``most`` then
            fits, a larger batch may too.
        compiles: Compiles made (``len(points)``): 0 when the arguments of the
            smallest batch (``plan_bytes`` and batch ``lo``'s shards) already
            exceed the budget.
        seconds: Wall time of the whole search.
        report: The :class:`StepMemoryReport` of ``most`` (``None`` when
            nothing fits).
        compiler: The compiler of the step, as the reports name it (``None``
            when nothing was compiled).
        num_devices: Devices in the mesh.
        batch: Each batch leaf, its leading dimension written ``B``.
        failing_report: The :class:`StepMemoryReport` of the edge, the
            smallest batch tried that does not fit (``None`` when every batch
            tried fits): with ``breakdown=True``, its breakdown says what the
            peak of a step one size too large is made of.
        tried: Every compile as a :class:`SearchPoint`, by batch: its
            temporaries, whether it came from the cache, whether it was a
            probe past the edge.
        jumps: Every batch tried whose peak is below a smaller batch's
            (:class:`Jump`); the first that crosses the budget names the
            instruction at each peak.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from flax import nnx
        >>> from nnx_introspect import max_batch
        >>> x = jax.ShapeDtypeStruct((8, 4), jnp.float32)
        >>> search = max_batch(
        ...     lambda rngs: nnx.Linear(4, 6, rngs=rngs), "data=8", x,
        ...     max_device_bytes=2048, loss=None,
        ... )
        >>> search.most % search.data_parallel, search.ok, search.converged
        (0, True, True)
        >>> search.report.peak_bytes <= 2048, search.budget_basis
        (True, 'the budget given')
        >>> search.best == search.most, search.also_fits  # none fits past the edge
        (True, ())
        >>> search.edge_size == search.most + 8 < min(search.probed)
        True
    """

    SCHEMA = "nnx-introspect/max-batch"
    SCHEMA_VERSION = 3

    most: int
    max_device_bytes: int
    budget_basis: str
    data_parallel: int
    lo: int
    hi: int
    plan_bytes: int
    points: tuple[Point, ...]
    converged: bool
    compiles: int
    seconds: float
    report: StepMemoryReport | None
    compiler: str | None
    num_devices: int
    batch: tuple[str, ...]
    failing_report: StepMemoryReport | None = None
    tried: tuple[SearchPoint, ...] = ()
    jumps: tuple[Jump, ...] = ()
    hi_given: bool = False

    def __post_init__(self) -> None:
        """A search built from ``points`` alone gets its ``tried`` from them."""
        if not self.tried and self.points:
            tried = tuple(SearchPoint(b, p, f, "step") for b, p, f in self.points)
            object.__setattr__(self, "tried", tried)

    @property
    def best(self) -> int | None:
        """The answer, :attr:`most`, by its older name (``None``: none fits)."""
        return self.most or None

    def with_top(self, n: IntLike) -> "BatchSearch":
        """The search with its reports' breakdowns showing the ``n`` largest buffers.

        Args:
            n: how many rows of buffers each breakdown's table shows.

        Example:
            >>> import jax, jax.numpy as jnp
            >>> from flax import nnx
            >>> from nnx_introspect import max_batch
            >>> x = jax.ShapeDtypeStruct((8, 4), jnp.float32)
            >>> search = max_batch(
            ...     lambda rngs: nnx.Linear(4, 6, rngs=rngs), "data=8", x,
            ...     max_device_bytes="2KiB", loss=None, breakdown=True,
            ... )
            >>> search.with_top(1).report.breakdown.top_n
            1
        """
        n = as_int(n, "n", minimum=1)

        def top(report: StepMemoryReport | None) -> StepMemoryReport | None:
            if report is None or report.breakdown is None:
                return report
            return dataclasses.replace(
                report, breakdown=dataclasses.replace(report.breakdown, top_n=n)
            )

        return dataclasses.replace(
            self, report=top(self.report), failing_report=top(self.failing_report)
        )

    def _breakdowns(self) -> list[tuple[str, StepMemoryReport]]:
        """``(heading, report)`` of the best and the smallest failing step."""
        out = []
        if self.report is not None and self.report.breakdown is not None:
            out.append((f"The peak at batch {self.most} (fits)", self.report))
        failing = self.failing_report
        if failing is not None and failing.breakdown is not None:
            size = self.edge_size
            out.append((f"The peak at batch {size} (does not fit)", failing))
        return out

    def __str__(self) -> str:
        """The search's table, then each breakdown kept (``breakdown=True``)."""
        text = super().__str__()
        for heading, report in self._breakdowns():
            text += f"\n\n{heading}: {report.verdict}\n" + table_text(
                report._breakdown_table() or report.table()
            )
        return text

    def __rich__(self) -> Any:
        """The search's rich table, then each breakdown kept."""
        kept = self._breakdowns()
        if not kept:
            return super().__rich__()
        from rich.console import Group
        from rich.text import Text

        parts: list[Any] = [to_rich(self.table())]
        for heading, report in kept:
            table = report._breakdown_table() or report.table()
            parts += [Text(""), Text(f"{heading}: {report.verdict}"), to_rich(table)]
        return Group(*parts)

    def to_markdown(self) -> str:
        """The search's table, then each breakdown kept, as markdown."""
        text = super().to_markdown().rstrip("\n")
        for heading, report in self._breakdowns():
            table = report._breakdown_table() or report.table()
            text += f"\n\n**{heading}**: {report.verdict}\n\n" + to_markdown(table)
        return text

    @property
    def ok(self) -> bool:
        """Whether the answer is a batch that fits (``most > 0``)."""
        return self.most > 0

    def fits(self) -> bool:
        """Whether a batch was found that fits the budget: :attr:`ok`.

        The search's answer to the question :meth:`StepMemoryReport.fits`
        asks of one step: ``True`` when ``most`` is a batch whose step fits.

        Example:
            >>> import jax, jax.numpy as jnp
            >>> from flax import nnx
            >>> from nnx_introspect import max_batch
            >>> x = jax.ShapeDtypeStruct((8, 4), jnp.float32)
            >>> linear = lambda rngs: nnx.Linear(4, 6, rngs=rngs)
            >>> max_batch(linear, "data=8", x, max_device_bytes="2KiB").fits()
            True
            >>> max_batch(linear, "data=8", x, max_device_bytes="100B").fits()
            False
        """
        return self.ok

    @property
    def verdict(self) -> str:
        """One line: the answer, the budget (and what it is) and the compiler."""
        budget = format_bytes(self.max_device_bytes)
        basis = (
            ""
            if self.budget_basis == "the budget given"
            else f"; the budget is {self.budget_basis}"
        )
        devices = plural(self.num_devices, "device")
        if self.compiles == 0:
            state = format_bytes(self.plan_bytes)
            if self.plan_bytes > self.max_device_bytes:
                why = f"the plan alone needs {state} per device of the budget {budget}"
            else:
                room = format_bytes(self.max_device_bytes - self.plan_bytes)
                why = (
                    f"the plan's {state} per device leaves {room} of the budget "
                    f"{budget}, less than batch {self.lo}'s shards need"
                )
            return f"No batch fits: {why} (nothing compiled; {devices}){basis}"
        also = self.also_fits
        if self.most == 0:
            smallest = self.points[0]
            if not self.converged:
                return (
                    f"No batch tried fits: the smallest, {smallest[0]}, needs "
                    f"{format_bytes(smallest[1])} per device, over the budget of "
                    f"{budget}; the search stopped after {self.compiles} compiles, "
                    f"before trying {self.lo} ({devices}), by {self.compiler}{basis}"
                )
            if also:  # larger batches fit where the smallest does not
                words = answer_words("batch", 0, smallest[0], also)
                return (
                    f"{words[0].upper()}{words[1:]}: the peak is not monotone in "
                    f"the batch ({format_bytes(smallest[1])} per device at "
                    f"{smallest[0]}, over the budget of {budget}; {devices}), by "
                    f"{self.compiler}{basis}"
                )
            return (
                f"No batch fits: batch {smallest[0]} needs "
                f"{format_bytes(smallest[1])} per device, over the budget of "
                f"{budget} ({devices}), by {self.compiler}{basis}"
            )
        peak = format_bytes(self.report.peak_bytes if self.report else 0)
        where = f"peak {peak} per device of {budget}; {devices}"
        if also:
            words = answer_words("global batch", self.most, self.edge_size, also)
            return (
                f"{words[0].upper()}{words[1:]}: the peak is not monotone in the "
                f"batch (at {self.most}: {where}), by {self.compiler}{basis}"
            )
        answer = "Largest" if self.converged else "At least (search stopped early)"
        return (
            f"{answer} global batch: {self.most} ({where}), by {self.compiler}{basis}"
        )

    def table(self) -> Table:
        """The report as a :class:`~nnx_introspect.Table`: one row per batch tried."""
        dp = self.data_parallel
        rows = tuple(
            (
                str(p.size),
                str(p.size // dp),
                format_bytes(p.peak_bytes),
                f"{p.peak_bytes:,}",
                "yes" if p.fits else "no",
                self.role(p),
            )
            for p in self.tried
        )
        totals: tuple[tuple[str, ...], ...] = (("best: none", "", "", "", "", ""),)
        if self.most and self.report is not None:
            peak = self.report.peak_bytes
            totals = (
                (
                    f"best: {self.most}",
                    str(self.most // dp),
                    format_bytes(peak),
                    f"{peak:,}",
                    "yes",
                    "",
                ),
            )
        return Table(
            title=self.verdict,
            columns=(
                "batch",
                "per shard",
                "peak per device",
                "peak bytes",
                "fits",
                "tried as",
            ),
            rows=rows,
            totals=totals,
            notes=self._notes(),
        )

    def _notes(self) -> tuple[str, ...]:
        """The table's notes: the budget, the plan, the sizes, what lies above."""
        dp = self.data_parallel
        why_hi = (
            "given"
            if self.hi_given
            else "the largest batch whose shards fit the budget beside the plan's "
            "state: a step's peak holds its arguments, so no larger batch can fit"
        )
        notes = [
            f"Budget: {format_bytes(self.max_device_bytes)} "
            f"({self.max_device_bytes:,} bytes) per device: {self.budget_basis}. "
            f"Batch {', '.join(self.batch)}; every size tried is a multiple of the "
            f"data-parallel size {dp} (the 'per shard' column is batch / {dp}).",
            f"Parameters, other state and any optimizer state: "
            f"{format_bytes(self.plan_bytes)} per device (the plan), in every step.",
            f"{self.compiles} compile(s) in {self.seconds:.1f} s. The sizes the "
            f"search may try: multiples of {dp} from lo = {self.lo:,} to hi = "
            f"{self.hi:,} ({why_hi}).",
        ]
        if not self.converged:
            notes.append(
                f"The search stopped after {MAX_COMPILES} compiles: the answer "
                "fits, a larger batch may too. Start from a batch nearer the "
                "answer, or narrow `lo` and `hi`."
            )
        notes.append(self.above_note("batch", "batches"))
        notes += jump_notes(self.jumps, "batch")
        return tuple(n for n in notes if n)

    def json_data(self) -> dict[str, Any]:
        """Exact figures for JSON output; ``report`` is the best step's payload."""
        return {
            "ok": self.ok,
            "verdict": self.verdict,
            "best": self.best,
            "converged": self.converged,
            "max_device_bytes": self.max_device_bytes,
            "budget_basis": self.budget_basis,
            "plan_bytes": self.plan_bytes,
            "data_parallel": self.data_parallel,
            "lo": self.lo,
            "hi": self.hi,
            "num_devices": self.num_devices,
            "compiler": self.compiler,
            "batch": list(self.batch),
            "compiles": self.compiles,
            "seconds": self.seconds,
            "points": [
                {"batch": b, "peak_bytes": peak, "fits": fits}
                for b, peak, fits in self.points
            ],
            "most": self.most,
            "edge_size": self.edge_size,
            "also_fits": list(self.also_fits),
            "tried": [p.json_data() for p in self.tried],
            "jumps": [j.json_data() for j in self.jumps],
            "report": None if self.report is None else self.report.json_data(),
            "failing_report": None
            if self.failing_report is None
            else self.failing_report.json_data(),
        }

    def to_html(self) -> str:
        """A self-contained page: the verdict, memory against batch, the table.

        The chart is an inline SVG: each batch tried (green fits, red does not)
        with its peak per device, and the budget as a dashed line.

        Example:
            >>> import jax, jax.numpy as jnp
            >>> from flax import nnx
            >>> from nnx_introspect import max_batch
            >>> x = jax.ShapeDtypeStruct((8, 4), jnp.float32)
            >>> page = max_batch(
            ...     lambda rngs: nnx.Linear(4, 6, rngs=rngs), "data=8", x,
            ...     max_device_bytes=2048, loss=None,
            ... ).to_html()
            >>> page.index('class="verdict ok"') < page.index("<svg")
            True
        """
        table = self.table()
        parts = [
            f"<h1>Largest batch: {html.escape(', '.join(self.batch))} on "
            f"{plural(self.num_devices, 'device')}</h1>",
            verdict_html(self.verdict, self._verdict_tone() or "neutral"),
        ]
        if self.points:
            parts.append(chart_svg(self.points, self.max_device_bytes))
        parts.append(table_html(table, caption=False))
        if self.report is not None:
            parts.append(f"<h2>The step at batch {self.most}</h2>")
            parts.append(table_html(self.report.table()))
        for heading, report in self._breakdowns():
            parts.append(f"<h2>{html.escape(heading)}</h2>")
            parts.append(report._body_html(report.table()))
        return page_html(self.verdict, "".join(parts))

"""The largest global batch whose compiled step fits a per-device budget.

:func:`max_batch` asks :func:`step_memory_report` about one batch size at a time
(doubling from the given batch until a step does not fit, then bisecting on
multiples of the data-parallel size) and returns a :class:`BatchSearch`.
"""

import dataclasses
import html
import time
from collections.abc import Callable
from typing import Any, Unpack

from flax import nnx

from nnx_introspect._mesh import MeshLike
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
from nnx_introspect._search.sizes import (
    MAX_COMPILES,
    batch_range,
    bisect_sizes,
    largest_by_arguments,
    leading_size,
    leaf_with_b,
    search_budget,
    with_batch_size,
)
from nnx_introspect._step import (
    BatchLike,
    StepMemoryReport,
    StepOptions,
    StepSpec,
    as_step_spec,
    measure_step,
    plan_step,
)
from nnx_introspect._typing import IntLike, as_int, typechecked

__all__ = [
    "MAX_COMPILES",
    "BatchSearch",
    "max_batch",
]


@dataclasses.dataclass(frozen=True)
class BatchSearch(Report):
    """The largest global batch whose step fits, and every batch size tried.

    Each point is one compile of the step by :func:`step_memory_report`, the
    batch's leading dimension set to that size: ``(batch, peak_bytes, fits)``
    with ``fits`` XLA's verdict against the search's budget (``peak_bytes <=
    max_device_bytes``, and not refused for memory by the compiler).

    Attributes:
        best: The largest global batch tried that fits, or ``None`` when even
            ``lo`` does not fit.
        max_device_bytes: The per-device budget every point is judged against.
        budget_basis: How the budget was found: ``"the budget given"``,
            ``"the device's memory"`` (a TPU), or on a GPU target the share of
            the device JAX's allocator takes (see ``step_budget``).
        data_parallel: The data-parallel size: every batch tried is a multiple
            of it (the product of the mesh axes the batch's leading dimension
            splits over; the least common multiple over batch leaves).
        lo: The smallest batch the search may try.
        hi: The largest batch the search may try: ``hi`` if given, else the
            largest multiple of ``data_parallel`` whose batch shards fit the
            budget beside ``plan_bytes`` (a step's peak holds its arguments).
        plan_bytes: Bytes per device of the parameters, the other state and
            (with an optimizer) the optimizer state, as the plan shards them:
            arguments of every step, whatever the batch.
        points: Every batch size tried, sorted by batch.
        converged: Whether ``best`` is the exact answer: ``best + data_parallel``
            was tried and does not fit, ``best == hi``, or ``lo`` does not fit
            (compiled, or known from the arguments alone). ``False`` when the
            search stopped after :data:`MAX_COMPILES` compiles: ``best`` then
            fits, a larger batch may too.
        compiles: Compiles made (``len(points)``): 0 when the arguments of the
            smallest batch (``plan_bytes`` and batch ``lo``'s shards) already
            exceed the budget.
        seconds: Wall time of the whole search.
        report: The :class:`StepMemoryReport` of ``best`` (``None`` when
            nothing fits).
        failing_report: The :class:`StepMemoryReport` of the smallest batch
            tried that does not fit (``None`` when every batch tried fits):
            with ``breakdown=True``, its breakdown says what the peak of a
            step one size too large is made of.
        compiler: The compiler of the step, as the reports name it (``None``
            when nothing was compiled).
        num_devices: Devices in the mesh.
        batch: Each batch leaf, its leading dimension written ``B``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from flax import nnx
        >>> x = jax.ShapeDtypeStruct((8, 4), jnp.float32)
        >>> search = max_batch(
        ...     lambda rngs: nnx.Linear(4, 6, rngs=rngs), "data=8", x,
        ...     max_device_bytes=2048, loss=None,
        ... )
        >>> search.best % search.data_parallel, search.ok, search.converged
        (0, True, True)
        >>> search.report.peak_bytes <= 2048, search.budget_basis
        (True, 'the budget given')
    """

    SCHEMA = "nnx-introspect/max-batch"
    SCHEMA_VERSION = 3

    best: int | None
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

    def with_top(self, n: IntLike) -> "BatchSearch":
        """The search with its reports' breakdowns showing the ``n`` largest buffers.

        Args:
            n: how many rows of buffers each breakdown's table shows.

        Example:
            >>> import jax, jax.numpy as jnp
            >>> from flax import nnx
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
            out.append((f"The peak at batch {self.best} (fits)", self.report))
        failing = self.failing_report
        if failing is not None and failing.breakdown is not None:
            size = min(b for b, _, fits in self.points if not fits)
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
        """Whether some batch fits (``best is not None``)."""
        return self.best is not None

    def fits(self) -> bool:
        """Whether a batch was found that fits the budget: :attr:`ok`.

        The search's answer to the question :meth:`StepMemoryReport.fits`
        asks of one step: ``True`` when ``best`` is a batch whose step fits.

        Example:
            >>> import jax, jax.numpy as jnp
            >>> from flax import nnx
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
        devices = f"{self.num_devices} devices"
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
        if self.best is None:
            smallest = self.points[0]
            if not self.converged:
                return (
                    f"No batch tried fits: the smallest, {smallest[0]}, needs "
                    f"{format_bytes(smallest[1])} per device, over the budget of "
                    f"{budget}; the search stopped after {self.compiles} compiles, "
                    f"before trying {self.lo} ({devices}), by {self.compiler}{basis}"
                )
            return (
                f"No batch fits: batch {smallest[0]} needs "
                f"{format_bytes(smallest[1])} per device, over the budget of "
                f"{budget} ({devices}), by {self.compiler}{basis}"
            )
        peak = format_bytes(self.report.peak_bytes if self.report else 0)
        answer = "Largest" if self.converged else "At least (search stopped early)"
        return (
            f"{answer} global batch: {self.best} (peak {peak} per device of "
            f"{budget}; {devices}), by {self.compiler}{basis}"
        )

    def table(self) -> Table:
        """The report as a :class:`~nnx_introspect.Table`: one row per batch tried."""
        dp = self.data_parallel
        rows = tuple(
            (
                str(b),
                str(b // dp),
                format_bytes(peak),
                f"{peak:,}",
                "yes" if fits else "no",
            )
            for b, peak, fits in self.points
        )
        totals: tuple[tuple[str, ...], ...] = (("best: none", "", "", "", ""),)
        if self.best is not None and self.report is not None:
            peak = self.report.peak_bytes
            totals = (
                (
                    f"best: {self.best}",
                    str(self.best // dp),
                    format_bytes(peak),
                    f"{peak:,}",
                    "yes",
                ),
            )
        notes = [
            f"Budget: {format_bytes(self.max_device_bytes)} "
            f"({self.max_device_bytes:,} bytes) per device: {self.budget_basis}. "
            f"Batch {', '.join(self.batch)}; every size tried is a multiple of the "
            f"data-parallel size {dp} (the 'per shard' column is batch / {dp}).",
            f"Parameters, other state and any optimizer state: "
            f"{format_bytes(self.plan_bytes)} per device (the plan), in every step.",
            f"{self.compiles} compile(s) in {self.seconds:.1f} s, sizes {self.lo} "
            f"to {self.hi}.",
        ]
        if not self.converged:
            notes.append(
                f"The search stopped after {self.compiles} compiles (at most "
                f"{MAX_COMPILES}): the answer fits, a larger batch may too. Start "
                "from a batch nearer the answer, or narrow `lo` and `hi`."
            )
        notes.append(
            "Each point is XLA's own compile of the step; the search assumes the "
            "peak grows with the batch."
        )
        return Table(
            title=self.verdict,
            columns=("batch", "per shard", "peak per device", "peak bytes", "fits"),
            rows=rows,
            totals=totals,
            notes=tuple(notes),
        )

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
            f"{self.num_devices} devices</h1>",
            verdict_html(self.verdict, self._verdict_tone() or "neutral"),
        ]
        if self.points:
            parts.append(chart_svg(self.points, self.max_device_bytes))
        parts.append(table_html(table, caption=False))
        if self.report is not None:
            parts.append(f"<h2>The step at batch {self.best}</h2>")
            parts.append(table_html(self.report.table()))
        for heading, report in self._breakdowns():
            parts.append(f"<h2>{html.escape(heading)}</h2>")
            parts.append(report._body_html(report.table()))
        return page_html(self.verdict, "".join(parts))


@typechecked
def max_batch(
    target: StepSpec | nnx.Module | nnx.State[Any, Any] | Callable[..., Any] | str,
    mesh: MeshLike | None = None,
    batch: BatchLike | None = None,
    /,
    *,
    lo: IntLike | None = None,
    hi: IntLike | None = None,
    progress: Callable[[Point], object] | None = None,
    compiling: Callable[[int, int], object] | None = None,
    cache: bool = True,
    **options: Unpack[StepOptions],
) -> BatchSearch:
    """The largest global batch whose compiled step fits ``max_device_bytes``.

    Compiles the step (a :class:`~nnx_introspect.StepSpec` of the arguments,
    its batch varied) at one global batch size at a time, every batch leaf's
    leading dimension set to that size: first the given batch's size (rounded
    up to a multiple of the data-parallel size), doubling while the step fits,
    halving while it does not, then bisecting between the largest size that
    fits and the smallest that does not. A step fits when its peak per device
    is at most the budget and the compiler did not refuse it for memory. The
    search assumes the peak grows with the batch; it makes at most
    :data:`MAX_COMPILES` compiles, about ``2 * log2(hi / data_parallel)``.

    Before any compile, the plan (:func:`~nnx_introspect.mesh_config_report`
    of the same model, mesh, rules and optimizer) gives the bytes per device
    of the parameters, other state and optimizer state: arguments of every
    step. When they and batch ``lo``'s shards alone exceed the budget, the
    answer comes at once, with no compile; otherwise the default ``hi`` is the
    largest batch whose shards fit beside them.

    The data-parallel size is the product of the mesh axes the batch's leading
    dimension splits over (``batch_spec``; default: the mesh's first axis), the
    least common multiple over batch leaves.

    Args:
        target: The model (see :class:`~nnx_introspect.StepSpec`), or a
            :class:`~nnx_introspect.StepSpec` alone (then ``mesh`` and
            ``batch`` are left out; ``options`` given replace its own).
        mesh: See :class:`~nnx_introspect.StepSpec`.
        batch: See :class:`~nnx_introspect.StepSpec`; every leaf's leading
            dimension, the batch dimension, is where the search starts.
        lo: The smallest batch to try (a multiple of the data-parallel size;
            default: the data-parallel size).
        hi: The largest batch to try (a multiple of the data-parallel size;
            default: the largest whose batch shards fit the budget beside the
            plan's state).
        progress: Called with each point ``(batch, peak_bytes, fits)`` after
            its compile.
        compiling: Called with ``(batch, n)`` just before the ``n``-th compile
            (from 1) starts, at batch ``batch`` (the command line's progress
            line shows it).
        cache: Read each program compiled before from the cache of compile
            results (see :func:`~nnx_introspect.step_memory_report`).
        **options: The step's options (:class:`~nnx_introspect.StepOptions`),
            as :func:`~nnx_introspect.step_memory_report` takes them:
            ``max_device_bytes`` judges every point (required without a
            ``topology``); ``batch_spec``'s first entry per leaf gives the
            data-parallel axes; with ``breakdown``, the search keeps those of
            the largest batch that fits (``report``) and the smallest that
            does not (``failing_report``); with ``microbatches``, every size
            tried is a multiple of ``microbatches`` times the data-parallel
            size.

    Returns:
        A frozen :class:`BatchSearch`.

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: An ``ArgumentError`` naming the argument, if
            :class:`~nnx_introspect.StepSpec` or :func:`step_memory_report`
            rejects it, ``max_device_bytes`` is missing with no ``topology``,
            a batch leaf has no leading dimension or the leaves' leading
            dimensions differ, ``lo`` or ``hi`` is not a multiple of the
            data-parallel size or ``lo > hi``.
        ImportError: If ``topology``'s compiler is not installed.
        RuntimeError: If a child compile crashes or times out.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from flax import nnx
        >>> x = jax.ShapeDtypeStruct((8, 4), jnp.float32)  # 8 examples of 4
        >>> search = max_batch(
        ...     lambda rngs: nnx.Linear(4, 6, rngs=rngs), "data=8", x,
        ...     max_device_bytes="2KiB", loss=None,
        ... )
        >>> search.data_parallel, search.max_device_bytes
        (8, 2048)
        >>> [fits for _, peak, fits in search.points] == [
        ...     peak <= 2048 for _, peak, _ in search.points]
        True
    """
    began = time.perf_counter()
    spec = as_step_spec(target, mesh, batch, options, caller="max_batch")
    limit, basis = search_budget(spec.budget)
    start = leading_size(spec.batch)
    dp, low, top = batch_range(spec, lo, hi)
    # every size tried is a multiple of dp: it splits as `lo` does
    plan = plan_step(with_batch_size(spec, low))
    state = sum(leaf.bytes_per_device for leaf in plan.leaves + plan.optimizer_leaves)
    room = limit - state
    bound = -1 if room < 0 else largest_by_arguments(spec, dp, room)
    high = max(low, bound) if top is None else top
    common: dict[str, Any] = {
        "max_device_bytes": limit,
        "budget_basis": basis,
        "data_parallel": dp,
        "lo": low,
        "hi": high,
        "plan_bytes": state,
        "num_devices": spec.num_devices,
        "batch": tuple(leaf_with_b(leaf) for leaf in spec.batch),
    }
    if bound < low:  # the arguments of batch `lo` alone exceed the budget
        return BatchSearch(
            best=None,
            points=(),
            converged=True,
            compiles=0,
            seconds=time.perf_counter() - began,
            report=None,
            compiler=None,
            **common,
        )
    return _searched(spec, start, common, (progress, compiling), began, cache)


def _searched(
    spec: StepSpec,
    start: int,
    common: dict[str, Any],
    callbacks: tuple[Any, Any],
    began: float,
    cache: bool = True,
) -> BatchSearch:
    """The search itself: ``spec`` compiled at each batch size tried."""
    progress, compiling = callbacks
    limit, dp = common["max_device_bytes"], common["data_parallel"]
    low, high = common["lo"], common["hi"]
    reports: dict[int, StepMemoryReport] = {}
    points: dict[int, Point] = {}

    def fits(size: int) -> bool:
        if compiling is not None:
            compiling(size, len(points) + 1)
        report = measure_step(with_batch_size(spec, size), cache=cache)
        point = (size, report.peak_bytes, report.fits(limit))
        reports[size], points[size] = report, point
        if progress is not None:
            progress(point)
        return point[2]

    first = min(max(-(-start // dp) * dp, low), high)
    good, bad = bisect_sizes(fits, first, low, high, dp)
    converged = (
        (good is None and bad == low)
        or good == high
        or (good is not None and bad is not None and bad - good == dp)
    )
    return BatchSearch(
        best=good,
        points=tuple(points[b] for b in sorted(points)),
        converged=converged,
        compiles=len(points),
        seconds=time.perf_counter() - began,
        report=None if good is None else reports[good],
        compiler=reports[max(reports)].compiler,
        failing_report=None if bad is None else reports.get(bad),
        **common,
    )

"""The largest global batch whose compiled step fits a per-device budget.

:func:`max_batch` asks :func:`step_memory_report` about one batch size at a time
(doubling from the given batch until a step does not fit, then bisecting on
multiples of the data-parallel size) and returns a :class:`BatchSearch`.
"""

import dataclasses
import html
import math
import time
from collections.abc import Callable
from typing import Any

import jax
import optax
from flax import nnx
from jax.sharding import PartitionSpec

from nnx_introspect._mesh import (
    LogicalRulesLike,
    MeshLike,
    RulesLike,
    as_abstract_mesh,
    parse_bytes,
)
from nnx_introspect._mesh.specs import _entry_axes
from nnx_introspect._render import Report, Table, format_bytes, page_html, table_html
from nnx_introspect._step.formats import _batch_str
from nnx_introspect._step.inputs import (
    BatchLike,
    LossLike,
    SpecsLike,
    _as_batch,
    _as_batch_specs,
)
from nnx_introspect._step.measure import step_memory_report
from nnx_introspect._step.report import StepMemoryReport
from nnx_introspect._step.topology import _topology
from nnx_introspect._typing import IntLike, as_int, typechecked

MAX_COMPILES = 24
"""The most compiles one :func:`max_batch` search makes."""

Point = tuple[int, int, bool]
"""One batch size tried: ``(global batch, peak bytes per device, fits)``."""


@dataclasses.dataclass(frozen=True)
class BatchSearch(Report):
    """The largest global batch whose step fits, and every batch size tried.

    Each point is one compile of the step by :func:`step_memory_report`, the
    batch's leading dimension set to that size: ``(batch, peak_bytes, fits)``
    with ``fits`` XLA's verdict against the budget (``peak_bytes <=
    max_device_bytes``, and not refused for memory by the compiler).

    Attributes:
        best: The largest global batch tried that fits, or ``None`` when even
            ``lo`` does not fit.
        max_device_bytes: The per-device budget.
        data_parallel: The data-parallel size: every batch tried is a multiple
            of it (the product of the mesh axes the batch's leading dimension
            splits over; the least common multiple over batch leaves).
        lo: The smallest batch the search may try.
        hi: The largest batch the search may try: ``hi`` if given, else the
            largest multiple of ``data_parallel`` whose batch shards alone fit
            the budget (a step's peak holds its arguments).
        points: Every batch size tried, sorted by batch.
        converged: Whether ``best`` is the exact answer: ``best + data_parallel``
            was tried and does not fit, ``best == hi``, or ``lo`` does not fit.
            ``False`` when the search stopped after :data:`MAX_COMPILES`
            compiles: ``best`` then fits, a larger batch may too.
        compiles: Compiles made (``len(points)``).
        seconds: Wall time of the whole search.
        report: The :class:`StepMemoryReport` of ``best`` (``None`` when
            nothing fits).
        compiler: The compiler of the step, as the reports name it.
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
        >>> search.report.peak_bytes <= 2048
        True
    """

    SCHEMA = "nnx-introspect/max-batch"
    SCHEMA_VERSION = 1

    best: int | None
    max_device_bytes: int
    data_parallel: int
    lo: int
    hi: int
    points: tuple[Point, ...]
    converged: bool
    compiles: int
    seconds: float
    report: StepMemoryReport | None
    compiler: str
    num_devices: int
    batch: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """Whether some batch fits (``best is not None``)."""
        return self.best is not None

    @property
    def verdict(self) -> str:
        """One line: the answer, the budget and the compiler."""
        budget = format_bytes(self.max_device_bytes)
        if self.best is None:
            smallest = self.points[0] if self.points else (self.lo, 0, False)
            if not self.converged:
                return (
                    f"No batch tried fits: the smallest, {smallest[0]}, needs "
                    f"{format_bytes(smallest[1])} per device, over the budget of "
                    f"{budget}; the search stopped after {self.compiles} compiles, "
                    f"before trying {self.lo} ({self.num_devices} devices), by "
                    f"{self.compiler}"
                )
            return (
                f"No batch fits: batch {smallest[0]} needs "
                f"{format_bytes(smallest[1])} per device, over the budget of "
                f"{budget} ({self.num_devices} devices), by {self.compiler}"
            )
        peak = format_bytes(self.report.peak_bytes if self.report else 0)
        answer = "Largest" if self.converged else "At least (search stopped early)"
        return (
            f"{answer} global batch: {self.best} (peak {peak} per device of "
            f"{budget}; {self.num_devices} devices), by {self.compiler}"
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
            f"({self.max_device_bytes:,} bytes) per device. Batch "
            f"{', '.join(self.batch)}; every size tried is a multiple of the "
            f"data-parallel size {dp} (the 'per shard' column is batch / {dp}).",
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
            "best": self.best,
            "converged": self.converged,
            "max_device_bytes": self.max_device_bytes,
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
        esc = html.escape
        verdict = (
            f'<p class="verdict {"ok" if self.ok else "bad"}">{esc(self.verdict)}.</p>'
        )
        parts = [
            f"<h1>Largest batch: {esc(', '.join(self.batch))} on "
            f"{self.num_devices} devices</h1>",
            verdict,
            _chart_svg(self.points, self.max_device_bytes),
            table_html(self.table()),
        ]
        if self.report is not None:
            parts.append(f"<h2>The step at batch {self.best}</h2>")
            parts.append(table_html(self.report.table()))
        return page_html(self.verdict, "".join(parts))


def _chart_svg(points: tuple[Point, ...], budget: int) -> str:
    """Peak bytes per device against batch, the budget as a dashed line (SVG).

    The batch axis is logarithmic when the sizes tried span 16x or more (the
    search doubles), linear otherwise; the bytes axis is linear from 0.
    """
    width, height = 720, 320
    left, right, top, bottom = 90, 20, 20, 50
    sizes = [b for b, _, _ in points] or [1]
    x_min, x_max = min(sizes), max(sizes)
    log = x_max >= 16 * x_min
    y_max = max([1, budget, *(p for _, p, _ in points)]) * 1.05

    def x(b: float) -> float:
        linear = b / x_max
        share = math.log2(b / x_min) / math.log2(x_max / x_min) if log else linear
        return left + (width - left - right) * share

    def y(v: float) -> float:
        return height - bottom - (height - top - bottom) * v / y_max

    parts = [
        f'<figure class="bars"><svg xmlns="http://www.w3.org/2000/svg" '
        f'width="{width}" height="{height}" role="img" '
        f'aria-label="peak bytes per device against global batch">',
        f'<line x1="{left}" y1="{y(0):.1f}" x2="{width - right}" y2="{y(0):.1f}" '
        'stroke="#57606a"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{y(0):.1f}" stroke="#57606a"/>',
    ]
    for value in (0.0, y_max / 2, y_max / 1.05):
        parts.append(
            f'<text x="{left - 6}" y="{y(value) + 4:.1f}" font-size="11" '
            f'text-anchor="end">{html.escape(format_bytes(round(value)))}</text>'
        )
    for b in sorted({x_min, x_max} if log else {0, x_max}):
        parts.append(
            f'<text x="{x(b):.1f}" y="{height - bottom + 16}" font-size="11" '
            f'text-anchor="middle">{b}</text>'
        )
    axis = "global batch (log scale)" if log else "global batch"
    parts.append(
        f'<text x="{(left + width - right) / 2}" y="{height - 10}" font-size="12" '
        f'text-anchor="middle">{axis}</text>'
    )
    parts.append(
        f'<line x1="{left}" y1="{y(budget):.1f}" x2="{width - right}" '
        f'y2="{y(budget):.1f}" stroke="#cf222e" stroke-width="2" '
        'stroke-dasharray="6 4"/>'
        f'<text x="{width - right}" y="{y(budget) - 6:.1f}" font-size="11" '
        f'text-anchor="end" fill="#cf222e">budget '
        f"{html.escape(format_bytes(budget))}</text>"
    )
    if points:
        line = " ".join(f"{x(b):.1f},{y(p):.1f}" for b, p, _ in points)
        parts.append(
            f'<polyline points="{line}" fill="none" stroke="#0969da" '
            'stroke-width="1.5"/>'
        )
    for b, peak, fits in points:
        colour = "#1a7f37" if fits else "#cf222e"
        parts.append(
            f'<circle cx="{x(b):.1f}" cy="{y(peak):.1f}" r="4" fill="{colour}">'
            f"<title>batch {b}: {html.escape(format_bytes(peak))} "
            f"({'fits' if fits else 'does not fit'})</title></circle>"
        )
    parts.append(
        "</svg><figcaption>Peak bytes per device against the global batch: green "
        "fits, red does not; the dashed line is the budget.</figcaption></figure>"
    )
    return "".join(parts)


@typechecked
def max_batch(
    target: nnx.Module | nnx.State[Any, Any] | Callable[..., Any] | str,
    mesh: MeshLike,
    batch: BatchLike,
    /,
    *,
    loss: LossLike = "mean",
    optimizer: optax.GradientTransformation | str | None = None,
    rules: RulesLike | None = None,
    logical_rules: LogicalRulesLike | None = None,
    batch_spec: SpecsLike = None,
    topology: str | None = None,
    max_device_bytes: IntLike | str | None = None,
    lo: IntLike | None = None,
    hi: IntLike | None = None,
    progress: Callable[[Point], object] | None = None,
) -> BatchSearch:
    """The largest global batch whose compiled step fits ``max_device_bytes``.

    Compiles the step with :func:`step_memory_report` (same arguments) at one
    global batch size at a time, every batch leaf's leading dimension set to
    that size: first the given batch's size (rounded up to a multiple of the
    data-parallel size), doubling while the step fits, halving while it does
    not, then bisecting between the largest size that fits and the smallest
    that does not, on multiples of the data-parallel size. A step fits when
    its peak per device is at most the budget and the compiler did not refuse
    it for memory. The search assumes the peak grows with the batch (it does
    for a step's arguments and activations); it makes at most
    :data:`MAX_COMPILES` compiles, about ``2 * log2(hi / data_parallel)``.

    The data-parallel size is the product of the mesh axes the batch's leading
    dimension splits over (``batch_spec``; default: the mesh's first axis), the
    least common multiple over batch leaves.

    Args:
        target: As in :func:`step_memory_report`.
        mesh: As there.
        batch: The model's positional arguments as there; every leaf's leading
            dimension is the batch dimension, replaced by each size tried. Its
            size is where the search starts.
        loss: As in :func:`step_memory_report`.
        optimizer: As there.
        rules: As there.
        logical_rules: As there.
        batch_spec: As there; its first entry per leaf gives the data-parallel
            axes.
        topology: As there.
        max_device_bytes: The per-device budget: a byte count or a size such as
            ``"16GiB"``; default: the memory of one device of ``topology``
            (required without a topology).
        lo: The smallest batch to try (a multiple of the data-parallel size;
            default: the data-parallel size).
        hi: The largest batch to try (a multiple of the data-parallel size;
            default: the largest whose batch shards alone fit the budget).
        progress: Called with each point ``(batch, peak_bytes, fits)`` after
            its compile (the command line shows progress with it).

    Returns:
        A frozen :class:`BatchSearch`.

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: If ``max_device_bytes`` is not a size or is missing with no
            ``topology`` to give a device's memory, a batch
            leaf has no leading dimension or the leaves' leading dimensions
            differ, ``lo`` or ``hi`` is not a multiple of the data-parallel size
            or ``lo > hi``, or :func:`step_memory_report` rejects the step.
        ImportError: As :func:`step_memory_report`.
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
    budget = _budget(max_device_bytes, topology)
    leaves = _as_batch(batch)
    start = _leading_size(leaves)
    abstract_mesh = as_abstract_mesh(mesh)
    sizes = {
        str(a): int(s)
        for a, s in zip(abstract_mesh.axis_names, abstract_mesh.axis_sizes, strict=True)
    }
    specs, _ = _as_batch_specs(batch_spec, leaves, next(iter(sizes)))
    dp = math.lcm(*(_leading_split(spec, sizes) for spec in specs))
    low = dp if lo is None else _multiple(lo, "lo", dp)
    bound = max(low, _largest_by_arguments(leaves, specs, sizes, dp, budget))
    high = bound if hi is None else _multiple(hi, "hi", dp)
    if low > high:
        raise ValueError(
            f"`lo` ({low}) must be at most `hi` ({high}). Pass a smaller `lo` or a "
            "larger `hi`."
        )
    began = time.perf_counter()
    reports: dict[int, StepMemoryReport] = {}
    points: dict[int, Point] = {}

    def fits(size: int) -> bool:
        report = step_memory_report(
            target,
            mesh,
            tuple(
                jax.ShapeDtypeStruct((size, *leaf.shape[1:]), leaf.dtype)
                for leaf in leaves
            ),
            loss=loss,
            optimizer=optimizer,
            rules=rules,
            logical_rules=logical_rules,
            batch_spec=batch_spec,
            topology=topology,
            max_device_bytes=budget,
        )
        point = (size, report.peak_bytes, report.fits())
        reports[size], points[size] = report, point
        if progress is not None:
            progress(point)
        return point[2]

    good, bad = _search(fits, min(max(-(-start // dp) * dp, low), high), low, high, dp)
    converged = (
        (good is None and bad == low)
        or good == high
        or (good is not None and bad is not None and bad - good == dp)
    )
    last = reports[max(reports)]
    return BatchSearch(
        best=good,
        max_device_bytes=budget,
        data_parallel=dp,
        lo=low,
        hi=high,
        points=tuple(points[b] for b in sorted(points)),
        converged=converged,
        compiles=len(points),
        seconds=time.perf_counter() - began,
        report=None if good is None else reports[good],
        compiler=last.compiler,
        num_devices=last.num_devices,
        batch=tuple(_leaf_with_b(leaf) for leaf in leaves),
    )


def _search(
    fits: Callable[[int], bool], start: int, low: int, high: int, dp: int
) -> tuple[int | None, int | None]:
    """``(largest size known to fit, smallest known not to)``, multiples of ``dp``.

    Doubling from ``start`` while it fits (halving while it does not), then
    bisection; at most :data:`MAX_COMPILES` calls of ``fits``.
    """
    calls = 1
    good: int | None = None
    bad: int | None = None
    if fits(start):
        good = start
        while good < high and calls < MAX_COMPILES:
            size = min(2 * good, high)
            calls += 1
            if not fits(size):
                bad = size
                break
            good = size
    else:
        bad = start
        while bad > low and calls < MAX_COMPILES:
            size = max(low, bad // 2 // dp * dp)
            calls += 1
            if fits(size):
                good = size
                break
            bad = size
    while good is not None and bad is not None and bad - good > dp:
        if calls >= MAX_COMPILES:
            break
        size = good + (bad - good) // dp // 2 * dp
        calls += 1
        if fits(size):
            good = size
        else:
            bad = size
    return good, bad


def _budget(max_device_bytes: Any, topology: str | None) -> int:
    """``max_device_bytes`` in bytes, else the memory of a ``topology`` device."""
    if max_device_bytes is not None:
        return parse_bytes(max_device_bytes)
    memory = None if topology is None else _topology(topology).device_memory_bytes
    if memory is None:
        raise ValueError(
            "`max_device_bytes` is required: the per-device budget the step must "
            "fit, such as '16GiB' or 17179869184 (a `topology` such as 'v5e-4' "
            "gives its device's memory instead)."
        )
    return memory


def _leading_size(leaves: tuple[jax.ShapeDtypeStruct, ...]) -> int:
    """The batch size the leaves share as their leading dimension."""
    for i, leaf in enumerate(leaves):
        if not leaf.shape:
            raise ValueError(
                f"`batch[{i}]` ({_batch_str(leaf)}) is a scalar: every batch leaf's "
                "leading dimension is the batch dimension the search varies. Give "
                "each leaf a leading batch dimension."
            )
    sizes = {leaf.shape[0] for leaf in leaves}
    if len(sizes) > 1:
        raise ValueError(
            f"`batch` leaves must share their leading (batch) dimension, got "
            f"{', '.join(_batch_str(leaf) for leaf in leaves)}. Give every leaf "
            "the same leading size."
        )
    return max(1, int(leaves[0].shape[0]))


def _leading_split(spec: PartitionSpec, sizes: dict[str, int]) -> int:
    """How many pieces ``spec`` cuts the leading dimension into.

    An axis not in the mesh counts 1: :func:`step_memory_report` reports it.
    """
    if not len(spec):
        return 1
    return math.prod(sizes.get(a, 1) for a in _entry_axes(spec[0]))


def _multiple(value: Any, name: str, dp: int) -> int:
    size = as_int(value, name, minimum=1)
    if size % dp:
        raise ValueError(
            f"`{name}` must be a multiple of the data-parallel size {dp} (the mesh "
            f"axes the batch's leading dimension splits over), got {size}. Pass "
            f"{max(dp, size // dp * dp)} or {-(-size // dp) * dp}."
        )
    return size


def _largest_by_arguments(
    leaves: tuple[jax.ShapeDtypeStruct, ...],
    specs: tuple[PartitionSpec, ...],
    sizes: dict[str, int],
    dp: int,
    budget: int,
) -> int:
    """The largest multiple of ``dp`` whose batch shards alone fit ``budget``.

    A step's peak holds its arguments, the batch shards among them, so no
    larger batch fits. Bits per example and device are a lower bound (a split
    that does not divide is reported by :func:`step_memory_report`).
    """
    bits = 0.0
    for leaf, spec in zip(leaves, specs, strict=True):
        elements = 1.0 / _leading_split(spec, sizes)
        for dim, size in enumerate(leaf.shape[1:], start=1):
            axes = _entry_axes(spec[dim]) if dim < len(spec) else ()
            split = math.prod(sizes.get(a, 1) for a in axes)
            elements *= size / split
        bits += elements * int(jax.dtypes.itemsize_bits(leaf.dtype))
    if bits == 0:  # zero-size leaves: the batch costs nothing
        return dp << (MAX_COMPILES // 2)
    return int(budget * 8 / bits) // dp * dp


def _leaf_with_b(leaf: jax.ShapeDtypeStruct) -> str:
    text = _batch_str(leaf)
    head, _, rest = text.partition("[")
    dims = rest.rstrip("]").split(",")
    return f"{head}[{','.join(['B', *dims[1:]])}]"

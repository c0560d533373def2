"""The most sequences and the longest context whose serving programs fit.

Each value tried is :func:`~nnx_introspect.serve_memory_report`'s request at
that value, with the same ``prompt`` and ``prefill_sequences``: both programs
compiled, the point fitting when both do. So the answer, passed to the report
with the same arguments, fits, and one step more does not. Memory is close to
affine in ``sequences x context`` (the KV cache and the attention over it grow
with both, the weights with neither): two compiles give the line, the
prediction is confirmed by a compile on each side, and the answer is always a
compiled one. A prediction the compiles disagree with is bisected, never
trusted.
"""

import dataclasses
from typing import Any

import numpy as np

from nnx_introspect._accelerators import Budget
from nnx_introspect._render import Report, Table, format_bytes
from nnx_introspect._serve.child import serve_readings
from nnx_introspect._serve.compile import PROGRAMS
from nnx_introspect._serve.frontier import Frontier, frontier_svg, predict_frontier
from nnx_introspect._serve.spec import ServeOptions, ServeSpec
from nnx_introspect._step import memory_from_readings
from nnx_introspect._typing import ArgumentError, typechecked
from nnx_introspect._xla import start_backends_quietly

__all__ = ["ServeSearch", "max_context", "max_sequences", "search_serve"]


@dataclasses.dataclass(frozen=True)
class ServeSearch(Report):
    """The largest ``sequences`` or ``context`` whose serving programs fit.

    Attributes:
        searched: ``"sequences"`` or ``"context"``.
        value: The largest value that compiled within the budget (0: none).
        step: The granularity: the data-parallel size for sequences, 1 for
            context.
        points: Every value tried, in order: ``(sequences, context,
            peak_bytes, fits)``, the peak the larger of the two programs'.
        budget: The budget of one device.
        kv_bytes_per_token: The KV cache's bytes of one position of one
            sequence on a device (``None``: not known).
        data_parallel: The replicas the sequences are split over.
        limits: Per point, the program whose peak it is (``"prefill"`` or
            ``"decode"``; ``""`` where not known).
        cached: Per point, whether its programs were read from the cache of
            compile results.

    Example:
        >>> from nnx_introspect._accelerators.budget import Budget
        >>> points = ((1, 64, 50, True), (16, 64, 80, False),
        ...           (7, 64, 62, True), (8, 64, 64, False))
        >>> found = ServeSearch("sequences", 7, 1, points, Budget(63, None))
        >>> found.compiles, found.verdict
        (4, 'Most sequences that fit: 7, within 63 B per device')
        >>> found.table().rows[-1]
        ('8', '64', '64 B', 'no', '')
        >>> found.frontier.product  # sequences x context at the budget: 7.5 x 64
        480.0
    """

    SCHEMA = "nnx-introspect/serve-search"
    SCHEMA_VERSION = 1

    searched: str
    value: int
    step: int
    points: tuple[tuple[int, int, int, bool], ...]
    budget: Budget
    kv_bytes_per_token: int | None = None
    data_parallel: int = 1
    limits: tuple[str, ...] = ()
    cached: tuple[bool, ...] = ()

    @property
    def compiles(self) -> int:
        """Compiles made."""
        return len(self.points)

    @property
    def ok(self) -> bool:
        """Whether any value fits (``value`` > 0)."""
        return self.value > 0

    @property
    def max_device_bytes(self) -> int | None:
        """The budget of one device in bytes."""
        return self.budget.bytes

    @property
    def verdict(self) -> str:
        """The answer and the budget in one line."""
        basis = f" ({self.budget.basis})" if self.budget.basis else ""
        return (
            f"Most {self.searched} that fit: {self.value}, within "
            f"{format_bytes(self.budget.bytes or 0)} per device{basis}"
        )

    @property
    def frontier(self) -> Frontier | None:
        """Where the predicted peak per device (the larger program's) meets the budget.

        ``a + b x sequences x context`` per device, ``b`` the KV cache's bytes
        per position (exact), ``a`` fitted to the compiled points either side
        of the answer, so the curve passes between them; ``None`` without a
        budget or when nothing can fit. See
        :func:`~nnx_introspect._serve.frontier.predict_frontier`.
        """
        if self.budget.bytes is None:
            return None
        per_position = None
        if self.kv_bytes_per_token:
            per_position = self.kv_bytes_per_token / self.data_parallel
        return predict_frontier(self.points, self.budget.bytes, per_position)

    def frontier_svg(self) -> str:
        """The frontier chart as a standalone SVG document.

        Context (x) against sequences (y): every compile (green filled fits,
        red hollow does not), the answer ringed and labelled, the predicted
        frontier dashed with the region under it shaded, the budget named.
        The HTML page (:meth:`to_html`) shows it after the verdict.

        Example:
            >>> from nnx_introspect._accelerators.budget import Budget
            >>> points = ((1, 64, 50, True), (7, 64, 62, True), (8, 64, 64, False))
            >>> chart = ServeSearch("sequences", 7, 1, points, Budget(63, None))
            >>> chart.frontier_svg().startswith("<svg"), "budget 63 B per device" in \
chart.frontier_svg()
            (True, True)
        """
        return frontier_svg(
            self.points,
            self.budget.bytes or 0,
            self.searched,
            self.value,
            self.frontier,
        )

    def _after_verdict_html(self) -> str:
        """The frontier chart, right after the verdict."""
        if self.budget.bytes is None or not self.points:
            return ""
        return frontier_svg(
            self.points,
            self.budget.bytes,
            self.searched,
            self.value,
            self.frontier,
            page=True,
        )

    def json_data(self) -> dict[str, Any]:
        """The answer, the budget, every point and the frontier as JSON data."""
        frontier = self.frontier
        return {
            "searched": self.searched,
            "value": self.value,
            "step": self.step,
            "points": [list(p) for p in self.points],
            "budget_bytes": self.budget.bytes,
            "budget_basis": self.budget.basis,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "data_parallel": self.data_parallel,
            "limits": list(self.limits),
            "cached": list(self.cached),
            "frontier": None
            if frontier is None
            else {
                "sequences_x_context": frontier.product,
                "bytes_per_position": frontier.bytes_per_position,
                "fixed_bytes": frontier.fixed_bytes,
            },
            "verdict": self.verdict,
        }

    def table(self) -> Table:
        """Every value tried, the answer first."""
        limits = self.limits or ("",) * len(self.points)
        cached = self.cached or (False,) * len(self.points)
        rows = []
        for (s, t, p, ok), limit, hit in zip(self.points, limits, cached, strict=True):
            peak = format_bytes(p) + (f" ({limit})" if limit else "")
            rows.append(
                (str(s), str(t), peak, "yes" if ok else "no", "yes" if hit else "")
            )
        return Table(
            title=f"Prefill and decode compiled for the most {self.searched} that fit",
            columns=("sequences", "context", "peak (program)", "fits", "from cache"),
            rows=tuple(rows),
            lead=(self.verdict,),
            notes=(
                "Each row is serve_memory_report at that value with the same "
                "prompt and prefill_sequences: both programs compiled, fitting "
                "when both fit.",
            ),
        )


@dataclasses.dataclass(frozen=True)
class _Point:
    """One value tried: the larger peak, whether both fit, which program, cached."""

    peak: int
    fits: bool
    limit: str
    per_token: int
    cached: bool


def _peak(spec: ServeSpec, cache: bool) -> _Point:
    """Both programs of ``spec``: the larger peak and whether both fit.

    Compiled where the spec's devices are (a topology's in a child process),
    through the cache of compile results.
    """
    readings = serve_readings(spec, PROGRAMS, cache=cache).readings
    planned = readings.weights_bytes + readings.kv_cache_bytes
    budget = spec.budget.bytes or 0
    peaks, fit, hit = {}, True, True
    for name in PROGRAMS:
        numbers = readings.program(name)
        memory = memory_from_readings(numbers, spec.budget, planned, trust_tpu=False)
        peaks[name] = memory.peak_bytes
        fit = fit and not memory.out_of_memory and memory.peak_bytes <= budget
        hit = hit and numbers.cached is not None
    limit = max(peaks, key=lambda name: peaks[name])
    return _Point(peaks[limit], fit, limit, readings.kv_bytes_per_token, hit)


def _predict(near: list[tuple[int, int]], budget: int, step: int) -> int:
    """Where the curve through the ``(value, peak)`` points nearest the budget meets it.

    Two points: their line (each program grows linearly with the cache). Three: the
    parabola through them, whose root past the smallest is taken when it has
    one (a prefill of the whole context grows with its square: attention's
    scores), else the line through the two nearest.
    """
    if len(near) >= 3:
        xs, ys = zip(*near[:3], strict=True)
        if len(set(xs)) == 3:
            a, b, c = np.polyfit(xs, ys, 2)
            roots = [r.real for r in np.roots([a, b, c - budget]) if abs(r.imag) < 1e-9]
            ahead = [r for r in roots if r >= min(xs) - 1e-9]
            if ahead and all(np.isfinite(ahead)):
                return max(step, int(min(ahead)) // step * step)
    (x1, y1), (x2, y2) = near[:2]
    if x1 == x2 or y1 == y2:
        return max(x1, x2)
    at = x1 + (budget - y1) * (x2 - x1) / (y2 - y1)
    return max(step, int(at) // step * step)


_MOST = 2**40
"""Past this many sequences or positions the search stops looking for a limit."""


def search_serve(spec: ServeSpec, searched: str, cache: bool = True) -> ServeSearch:
    """The largest ``searched`` value of ``spec`` whose programs fit its budget."""
    budget = spec.budget.bytes
    if budget is None:  # the search needs one
        raise ArgumentError(
            "max_device_bytes",
            "the search needs a budget: pass a `topology` (its device's memory) "
            "or `max_device_bytes`.",
        )
    step = spec.data_parallel if searched == "sequences" else 1
    points: dict[int, tuple[int, bool]] = {}
    order: list[tuple[int, int, int, bool]] = []
    limits: list[str] = []
    hits: list[bool] = []
    per_token = [0]

    def fits(n: int) -> bool:
        if n not in points:
            trial = spec.replace(**{searched: n, **_within(spec, searched, n)})
            found = _peak(trial, cache)
            per_token[0] = found.per_token
            points[n] = (found.peak, found.fits)
            order.append((trial.sequences, trial.context, *points[n]))
            limits.append(found.limit)
            hits.append(found.cached)
        return points[n][1]

    fits(step)
    # the second point where the cache alone would meet the budget: one more
    # step adds a sequence's positions (or a position of each sequence) a device
    fixed = (
        spec.context
        if searched == "sequences"
        else max(1, spec.sequences // spec.data_parallel)
    )
    grows = max(1, per_token[0] * fixed)
    fits(max(2 * step, (step + (budget - points[step][0]) // grows) // step * step))
    while True:
        good = max((n for n, (_, ok) in points.items() if ok), default=0)
        bad = min(
            (n for n, (_, ok) in points.items() if n > good and not ok), default=None
        )
        if bad is not None and bad - good <= step:
            break
        if good > _MOST:
            raise RuntimeError(
                f"both programs fit with {good} {searched}: no limit found."
            )
        # the line through the two points nearest the budget, on each side
        near = sorted(points, key=lambda n: abs(points[n][0] - budget))[:3]
        guess = _predict([(n, points[n][0]) for n in near], budget, step)
        if bad is None:  # no failure yet: beyond the best fit
            guess = guess if guess > good else good + step  # confirm above
        else:  # inside the bracket, at least a quarter in from either side
            quarter = max(step, (bad - good) // 4 // step * step)
            guess = min(max(guess, good + quarter), bad - quarter)
            guess = min(max(guess, good + step), bad - step)
        fits(guess)  # the next line, through it, confirms the other side
    return ServeSearch(
        searched,
        good,
        step,
        tuple(order),
        spec.budget,
        per_token[0] or None,
        spec.data_parallel,
        tuple(limits),
        tuple(hits),
    )


def _within(spec: ServeSpec, searched: str, n: int) -> dict[str, Any]:
    """The request's other sizes at ``searched = n``, as the report would take them.

    A ``prefill_sequences`` or ``prompt`` given stays (capped at ``n``, where
    it cannot exceed it); one not given follows ``n``, as the report's default
    does (every sequence prefilled at once; a prompt of the whole context).
    """
    given = (
        spec.given_prefill_sequences if searched == "sequences" else spec.given_prompt
    )
    name = "prefill_sequences" if searched == "sequences" else "prompt"
    return {name: None if given is None else min(given, n)}


@typechecked
def max_sequences(
    target: Any, mesh: Any, /, *, context: Any, **options: Any
) -> ServeSearch:
    """The most sequences whose prefill and decode fit at ``context`` positions.

    Takes :func:`~nnx_introspect.serve_memory_report`'s keyword arguments
    (``prompt``, ``prefill_sequences``, ``topology``, ``max_device_bytes``,
    ``weights``, ``kv_cache``, ...); a budget is needed. Each value tried is
    that report's request at the value: prefill and decode both compiled,
    the value fitting when both fit, so the answer passed to the report with
    the same arguments fits. Two compiles give the line of memory against
    sequences; each next compile is where the line through the two points
    nearest the budget meets it, until a compile that fits and one a step
    above that does not are found (four compiles on an exact line; five on
    XLA:CPU's tiny Llama, whose small programs are not quite affine). The
    answer is always a compiled one.

    Example:
        >>> from nnx_introspect import max_sequences
        >>> from nnx_introspect.examples import LlamaConfig, llama
        >>> small = llama(LlamaConfig(vocab=64, d_model=32, n_layers=2,
        ...                           n_heads=2, d_ff=64))
        >>> found = max_sequences(small, "tp=2", context=64, prompt=16,
        ...                       prefill_sequences=2, max_device_bytes=2_000_000)
        >>> fit = {s: ok for s, _, _, ok in found.points}
        >>> fit[found.value], fit[found.value + 1], found.compiles <= 8
        (True, False, True)
    """
    start_backends_quietly()
    first = options.get("prefill_sequences") or 1  # a smaller request is refused
    return search_serve(_spec(target, mesh, first, context, options), "sequences")


@typechecked
def max_context(
    target: Any, mesh: Any, /, *, sequences: Any, **options: Any
) -> ServeSearch:
    """The longest context whose prefill and decode fit for ``sequences``.

    As :func:`max_sequences`, over the cache's positions.

    Example:
        >>> from nnx_introspect import max_context
        >>> from nnx_introspect.examples import LlamaConfig, llama
        >>> small = llama(LlamaConfig(vocab=64, d_model=32, n_layers=2,
        ...                           n_heads=2, d_ff=64))
        >>> found = max_context(small, "tp=2", sequences=4, prompt=16,
        ...                     max_device_bytes=2_000_000)
        >>> fit = {t: ok for _, t, _, ok in found.points}
        >>> fit[found.value], fit.get(found.value + 1, False)
        (True, False)
    """
    start_backends_quietly()
    first = options.get("prompt") or 1  # the cache holds the prompt
    return search_serve(_spec(target, mesh, sequences, first, options), "context")


_SPEC_ARGS = ("prompt", "prefill_sequences", "topology", "max_device_bytes")
_OPTION_ARGS = ("weights", "kv_cache", "init_cache", "decode")


def _spec(
    target: Any, mesh: Any, sequences: Any, context: Any, given: dict[str, Any]
) -> ServeSpec:
    unknown = sorted(set(given) - set(_SPEC_ARGS) - set(_OPTION_ARGS))
    if unknown:
        raise ArgumentError(
            unknown[0],
            f"`{unknown[0]}` is not an argument of the search; it takes "
            f"{', '.join(_SPEC_ARGS + _OPTION_ARGS)}.",
        )
    options = ServeOptions(**{k: given[k] for k in _OPTION_ARGS if k in given})
    spec_args = {k: given[k] for k in _SPEC_ARGS if k in given}
    return ServeSpec(target, mesh, sequences, context, options=options, **spec_args)

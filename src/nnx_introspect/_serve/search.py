"""The most sequences and the longest context whose decode program fits.

Decode memory is affine in ``sequences x context`` (the KV cache and the
attention over it grow with both, the weights with neither): two compiles give
the line, the prediction is confirmed by a compile on each side, and the answer
is always a compiled one — the largest value reported fits, one step more does
not. A prediction the compiles disagree with is bisected, never trusted.
"""

import dataclasses
from typing import Any

from nnx_introspect._accelerators.budget import Budget
from nnx_introspect._render.table import Report, Table, format_bytes
from nnx_introspect._serve.api import program_memory
from nnx_introspect._serve.child import serve_readings
from nnx_introspect._serve.frontier import Frontier, frontier_svg, predict_frontier
from nnx_introspect._serve.spec import ServeOptions, ServeSpec
from nnx_introspect._typing import ArgumentError, typechecked
from nnx_introspect._xla.native_log import start_backends_quietly

__all__ = ["ServeSearch", "max_context", "max_sequences", "search_serve"]


@dataclasses.dataclass(frozen=True)
class ServeSearch(Report):
    """The largest ``sequences`` or ``context`` whose decode program fits.

    Attributes:
        searched: ``"sequences"`` or ``"context"``.
        value: The largest value that compiled within the budget (0: none).
        step: The granularity: the data-parallel size for sequences, 1 for
            context.
        points: Every compile, in order: ``(sequences, context, peak_bytes,
            fits)``.
        budget: The budget of one device.
        kv_bytes_per_token: The KV cache's bytes of one position of one
            sequence on a device (``None``: not known).
        data_parallel: The replicas the sequences are split over.

    Example:
        >>> from nnx_introspect._accelerators.budget import Budget
        >>> points = ((1, 64, 50, True), (16, 64, 80, False),
        ...           (7, 64, 62, True), (8, 64, 64, False))
        >>> found = ServeSearch("sequences", 7, 1, points, Budget(63, None))
        >>> found.compiles, found.verdict
        (4, 'Most sequences that fit: 7 (the budget given: 63 B)')
        >>> found.table().rows[-1]
        ('8', '64', '64 B', 'no')
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
        return (
            f"Most {self.searched} that fit: {self.value} "
            f"({self.budget.basis or 'the budget given'}: "
            f"{format_bytes(self.budget.bytes or 0)})"
        )

    @property
    def frontier(self) -> Frontier | None:
        """Where decode's predicted peak per device meets the budget.

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
        """Every compile of the search, the answer first."""
        return Table(
            title=f"Decode compiled for the most {self.searched} that fit",
            columns=("sequences", "context", "decode peak", "fits"),
            rows=tuple(
                (str(s), str(t), format_bytes(p), "yes" if ok else "no")
                for s, t, p, ok in self.points
            ),
            lead=(self.verdict,),
        )


def _decode_peak(spec: ServeSpec) -> tuple[int, bool, int]:
    """The decode peak, whether it fits, and the cache's bytes per position.

    Compiled where the spec's devices are (a topology's in a child process),
    through the cache of compile results.
    """
    readings, _ = serve_readings(spec, ("decode",), cache=True)
    numbers = readings.program("decode")
    planned = readings.weights_bytes + readings.kv_cache_bytes
    memory = program_memory(numbers, spec.budget, planned)
    budget = spec.budget.bytes or 0
    fit = not memory.out_of_memory and memory.peak_bytes <= budget
    return memory.peak_bytes, fit, readings.kv_bytes_per_token


def _predict(line: list[tuple[int, int]], budget: int, step: int) -> int:
    """Where the line through two ``(value, peak)`` points meets the budget."""
    (x1, y1), (x2, y2) = line
    if x1 == x2 or y1 == y2:
        return max(x1, x2)
    at = x1 + (budget - y1) * (x2 - x1) / (y2 - y1)
    return max(step, int(at) // step * step)


_MOST = 2**40
"""Past this many sequences or positions the search stops looking for a limit."""


def search_serve(spec: ServeSpec, searched: str) -> ServeSearch:
    """The largest ``searched`` value of ``spec`` whose decode fits its budget."""
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
    per_token = [0]

    def fits(n: int) -> bool:
        if n not in points:
            extra = "prefill_sequences" if searched == "sequences" else "prompt"
            trial = spec.replace(**{searched: n, extra: None})
            peak, ok, per_token[0] = _decode_peak(trial)
            points[n] = (peak, ok)
            order.append((trial.sequences, trial.context, *points[n]))
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
            raise RuntimeError(f"decode fits with {good} {searched}: no limit found.")
        # the line through the two points nearest the budget, on each side
        near = sorted(points, key=lambda n: abs(points[n][0] - budget))[:2]
        guess = _predict([(n, points[n][0]) for n in near], budget, step)
        if bad is None:  # no failure yet: beyond the best fit
            guess = guess if guess > good else good + step  # confirm above
        else:
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
    )


@typechecked
def max_sequences(
    target: Any, mesh: Any, /, *, context: Any, **options: Any
) -> ServeSearch:
    """The most sequences whose decode program fits at ``context`` positions.

    Takes :func:`~nnx_introspect.serve_memory_report`'s keyword arguments
    (``topology``, ``max_device_bytes``, ``weights``, ``kv_cache``, ...); a
    budget is needed. Two compiles give the line of decode memory against
    sequences; each next compile is where the line through the two points
    nearest the budget meets it, until a compile that fits and one a step
    above that does not are found (four compiles on an exact line; five on
    XLA:CPU's tiny Llama, whose small programs are not quite affine). The
    answer is always a compiled one.

    Example:
        >>> from nnx_introspect import max_sequences
        >>> from nnx_introspect.examples import llama_tiny
        >>> found = max_sequences(llama_tiny, "tp=2", context=64,
        ...                       max_device_bytes=80_000_000)
        >>> fit = {s: ok for s, _, _, ok in found.points}
        >>> fit[found.value], fit[found.value + 1], found.compiles <= 6
        (True, False, True)
    """
    start_backends_quietly()
    return search_serve(_spec(target, mesh, 1, context, options), "sequences")


@typechecked
def max_context(
    target: Any, mesh: Any, /, *, sequences: Any, **options: Any
) -> ServeSearch:
    """The longest context whose decode program fits for ``sequences``.

    As :func:`max_sequences`, over the cache's positions.

    Example:
        >>> from nnx_introspect import max_context
        >>> from nnx_introspect.examples import llama_tiny
        >>> found = max_context(llama_tiny, "tp=2", sequences=4,
        ...                     max_device_bytes=60_000_000)
        >>> fit = {t: ok for _, t, _, ok in found.points}
        >>> fit[found.value], fit.get(found.value + 1, False)
        (True, False)
    """
    start_backends_quietly()
    return search_serve(_spec(target, mesh, sequences, 1, options), "context")


_SPEC_ARGS = ("prompt", "topology", "max_device_bytes")
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

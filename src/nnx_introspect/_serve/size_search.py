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

Memory is not monotone, though: XLA compiles a different program at a
different size (an H100's decode of 1,383 sequences held 5.2 GB fewer
temporaries than that of 1,258). So the answer is the largest value compiled
below the smallest that does not fit, a few values past that edge are compiled
too, and any that fits is named (:mod:`nnx_introspect._size_search`).

The prefill is the report's: a ``prompt`` or ``prefill_sequences`` not given
takes the report's default at each value, so the answer passed to the report
with the same arguments is what was compiled. That default (every sequence's
whole context prefilled at once) can set the answer: 52 sequences of
Llama-3.2-1B at 8,192 positions on eight H100s, against 1,258 with one
512-token prompt prefilled at a time, as serving engines admit prompts. So the
verdict names the program over the budget one step above the answer, and what
lifts it (a smaller ``prefill_sequences`` or ``prompt`` for the prefill).
"""

import dataclasses
from typing import Any

import numpy as np

from nnx_introspect._breakdown import Breakdown
from nnx_introspect._serve.child import serve_readings
from nnx_introspect._serve.compile import PROGRAMS
from nnx_introspect._serve.size_answer import ServeSearch
from nnx_introspect._serve.spec import ServeOptions, ServeSpec
from nnx_introspect._size_search import (
    PROBES,
    PeakAt,
    SearchPoint,
    edge_of,
    explain_jumps,
    find_jumps,
    peak_at,
    probe_sizes,
)
from nnx_introspect._step import memory_from_readings
from nnx_introspect._typing import ArgumentError, as_int, typechecked
from nnx_introspect._xla import start_backends_quietly

__all__ = ["ServeSearch", "max_context", "max_sequences", "search_serve"]


@dataclasses.dataclass(frozen=True)
class _Point:
    """One value tried: the larger peak, whether both fit, which program, cached."""

    peak: int
    fits: bool
    limit: str
    per_token: int
    cached: bool
    temp: int | None


def _peak(spec: ServeSpec, cache: bool) -> _Point:
    """Both programs of ``spec``: the larger peak and whether both fit.

    Compiled where the spec's devices are (a topology's in a child process),
    through the cache of compile results.
    """
    readings = serve_readings(spec, PROGRAMS, cache=cache).readings
    planned = readings.weights_bytes + readings.kv_cache_bytes
    budget = spec.budget.bytes or 0
    peaks, temps, fit, hit = {}, {}, True, True
    for name in PROGRAMS:
        numbers = readings.program(name)
        memory = memory_from_readings(numbers, spec.budget, planned, trust_tpu=False)
        peaks[name], temps[name] = memory.peak_bytes, memory.temp_bytes
        fit = fit and not memory.out_of_memory and memory.peak_bytes <= budget
        hit = hit and numbers.cached is not None
    limit = max(peaks, key=lambda name: peaks[name])
    return _Point(
        peaks[limit], fit, limit, readings.kv_bytes_per_token, hit, temps[limit]
    )


def _peak_at(spec: ServeSpec, program: str, cache: bool) -> PeakAt | None:
    """Where ``program`` of ``spec`` peaks: compiled again, its peak broken down."""
    readings = serve_readings(spec, PROGRAMS, breakdown=True, cache=cache).readings
    found = readings.program(program or "decode").breakdown
    return None if found is None else peak_at(Breakdown.from_json_data(found))


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


def search_serve(
    spec: ServeSpec, searched: str, cache: bool = True, probes: int = PROBES
) -> ServeSearch:
    """The largest ``searched`` value of ``spec`` whose programs fit its budget.

    The answer is the largest value compiled below the smallest that does not
    fit; ``probes`` values past that edge are compiled too.
    """
    budget = spec.budget.bytes
    if budget is None:  # the search needs one
        raise ArgumentError(
            "max_device_bytes",
            "the search needs a budget: pass a `topology` (its device's memory) "
            "or `max_device_bytes`.",
        )
    step = spec.data_parallel if searched == "sequences" else 1
    trials = _Trials(spec, searched, cache)
    good, bad = _find_edge(trials, budget, step)
    for size in probe_sizes(bad, step, None, probes if good else 0):
        trials.fits(size, probe=True)  # past the edge, where the peak may fall
    return _result(trials, good, step)


@dataclasses.dataclass
class _Trials:
    """The values of one search compiled so far, each as the report's request."""

    spec: ServeSpec
    searched: str
    cache: bool
    points: dict[int, SearchPoint] = dataclasses.field(default_factory=dict)
    order: list[tuple[int, int, int, bool]] = dataclasses.field(default_factory=list)
    prefills: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    limits: list[str] = dataclasses.field(default_factory=list)
    hits: list[bool] = dataclasses.field(default_factory=list)
    per_token: int = 0

    def at(self, n: int) -> ServeSpec:
        """The request at ``searched = n``, the other sizes as the report takes them."""
        return self.spec.replace(
            **{self.searched: n, **_within(self.spec, self.searched, n)}
        )

    def fits(self, n: int, probe: bool = False) -> bool:
        """Whether both programs fit at ``n``: compiled once, then remembered."""
        if n not in self.points:
            at = self.at(n)
            found = _peak(at, self.cache)
            self.per_token = found.per_token
            self.points[n] = SearchPoint(
                n, found.peak, found.fits, found.limit, found.temp, found.cached, probe
            )
            self.order.append((at.sequences, at.context, found.peak, found.fits))
            self.prefills.append((at.prefill_sequences, at.prompt))
            self.limits.append(found.limit)
            self.hits.append(found.cached)
        return self.points[n].fits

    def explain(self, n: int) -> PeakAt | None:
        """Where the program that sets ``n``'s peak peaks, compiled again."""
        return _peak_at(self.at(n), self.points[n].program, self.cache)


def _find_edge(trials: _Trials, budget: int, step: int) -> tuple[int, int]:
    """``(answer, edge)``: compiled until a value fits and one a step above does not.

    Two compiles give the line of memory against the value; each next compile
    is where the curve through the points nearest the budget meets it.
    """
    trials.fits(step)
    # the second point where the cache alone would meet the budget: one more
    # step adds a sequence's positions (or a position of each sequence) a device
    spec = trials.spec
    fixed = (
        spec.context
        if trials.searched == "sequences"
        else max(1, spec.sequences // spec.data_parallel)
    )
    grows = max(1, trials.per_token * fixed)
    first = trials.points[step].peak_bytes
    trials.fits(max(2 * step, (step + (budget - first) // grows) // step * step))
    points = trials.points
    while True:
        # the edge: the smallest value that does not fit, the largest fit below
        good, bad = edge_of(points.values())
        if bad is not None and bad - good <= step:
            return good, bad
        if good > _MOST:
            raise RuntimeError(
                f"both programs fit with {good} {trials.searched}: no limit found."
            )
        # the line through the two points nearest the budget, on each side
        near = sorted(points, key=lambda n: abs(points[n].peak_bytes - budget))[:3]
        guess = _predict([(n, points[n].peak_bytes) for n in near], budget, step)
        if bad is None:  # no failure yet: beyond the best fit
            guess = guess if guess > good else good + step  # confirm above
        else:  # inside the bracket, at least a quarter in from either side
            quarter = max(step, (bad - good) // 4 // step * step)
            guess = min(max(guess, good + quarter), bad - quarter)
            guess = min(max(guess, good + step), bad - step)
        trials.fits(guess)  # the next line, through it, confirms the other side


def _result(trials: _Trials, good: int, step: int) -> ServeSearch:
    """The search's record: every compile, the answer and the jumps explained."""
    spec, points = trials.spec, trials.points
    return ServeSearch(
        trials.searched,
        good,
        step,
        tuple(trials.order),
        spec.budget,
        trials.per_token or None,
        spec.data_parallel,
        tuple(trials.limits),
        tuple(trials.hits),
        tried=tuple(points[n] for n in sorted(points)),
        jumps=explain_jumps(find_jumps(points.values()), trials.explain),
        prefills=tuple(trials.prefills),
        prefill_given=spec.given_prefill_sequences is not None,
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
    target: Any, mesh: Any, /, *, context: Any, probes: Any = PROBES, **options: Any
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
    answer is always a compiled one: the largest value compiled below the
    smallest that does not fit (the edge).

    The peak is not monotone in the sequences (XLA compiles a different
    program at a different size), so ``probes`` values past the edge are
    compiled too (about 5%, 10% and 25% above the answer; 0: none), and any
    that fits is named (``also_fits``; the verdict then reads "every size
    tried up to 1,258 sequences fits, 1,259 does not; 1,383 also fits");
    when even the smallest value does not fit, none is.
    For the first value past the edge that fits, both it and the edge are
    compiled again with a breakdown, to name the instruction at each peak
    (``jumps``).

    Left to the report's default, every sequence's whole context is
    prefilled at once, which can set the answer (52 sequences of
    Llama-3.2-1B at 8,192 positions on eight H100s, against 1,258 with one
    512-token prompt prefilled at a time, as serving engines admit prompts):
    pass the ``prompt`` and ``prefill_sequences`` the server uses. The
    verdict names the program over the budget one step above the answer,
    and what lifts it: a smaller ``prefill_sequences`` or ``prompt`` for the
    prefill, a smaller ``kv_cache`` or more devices for the decode.

    Example:
        >>> from nnx_introspect import max_sequences
        >>> from nnx_introspect.examples import LlamaConfig, llama
        >>> small = llama(LlamaConfig(vocab=64, d_model=32, n_layers=2,
        ...                           n_heads=2, d_ff=64))
        >>> found = max_sequences(small, "tp=2", context=64, prompt=16,
        ...                       prefill_sequences=2, max_device_bytes=2_000_000)
        >>> fit = {s: ok for s, _, _, ok in found.points}
        >>> fit[found.most], fit[found.most + 1], found.compiles <= 11
        (True, False, True)
    """
    count = _probes(probes)
    start_backends_quietly()
    first = options.get("prefill_sequences") or 1  # a smaller request is refused
    spec = _spec(target, mesh, first, context, options)
    return search_serve(spec, "sequences", probes=count)


@typechecked
def max_context(
    target: Any, mesh: Any, /, *, sequences: Any, probes: Any = PROBES, **options: Any
) -> ServeSearch:
    """The longest context whose prefill and decode fit for ``sequences``.

    As :func:`max_sequences`, over the cache's positions: ``probes`` contexts
    past the edge compiled too, each prompt the whole context unless
    ``prompt`` is given.

    Example:
        >>> from nnx_introspect import max_context
        >>> from nnx_introspect.examples import LlamaConfig, llama
        >>> small = llama(LlamaConfig(vocab=64, d_model=32, n_layers=2,
        ...                           n_heads=2, d_ff=64))
        >>> found = max_context(small, "tp=2", sequences=4, prompt=16,
        ...                     max_device_bytes=2_000_000)
        >>> fit = {t: ok for _, t, _, ok in found.points}
        >>> fit[found.most], fit.get(found.most + 1, False)
        (True, False)
    """
    count = _probes(probes)
    start_backends_quietly()
    first = options.get("prompt") or 1  # the cache holds the prompt
    spec = _spec(target, mesh, sequences, first, options)
    return search_serve(spec, "context", probes=count)


def _probes(value: Any) -> int:
    """``probes`` checked: a count of at least 0."""
    try:
        return as_int(value, "probes", minimum=0)
    except TypeError as error:
        raise ArgumentError("probes", str(error)) from None


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

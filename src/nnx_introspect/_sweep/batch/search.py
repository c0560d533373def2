"""The largest global batch whose compiled step fits a per-device budget.

:func:`max_batch` asks :func:`step_memory_report` about one batch size at a time
(doubling from the given batch until a step does not fit, then bisecting on
multiples of the data-parallel size), compiles a few sizes past the edge it
finds (the peak is not monotone in the batch:
:mod:`nnx_introspect._size_search`) and returns a :class:`BatchSearch`
(:mod:`~nnx_introspect._sweep.batch.answer`).
"""

import dataclasses
import time
from collections.abc import Callable
from typing import Any, Unpack

from flax import nnx

from nnx_introspect._mesh import MeshLike
from nnx_introspect._render import Point
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
from nnx_introspect._step import (
    BatchLike,
    StepMemoryReport,
    StepOptions,
    StepSpec,
    as_step_spec,
    measure_step,
    plan_step,
)
from nnx_introspect._sweep.batch.answer import BatchSearch as BatchSearch
from nnx_introspect._sweep.batch.sizes import (
    MAX_COMPILES,
    batch_range,
    bisect_sizes,
    largest_by_arguments,
    leading_size,
    leaf_with_b,
    search_budget,
    with_batch_size,
)
from nnx_introspect._typing import IntLike, as_int, typechecked

__all__ = [
    "MAX_COMPILES",
    "BatchSearch",
    "max_batch",
]


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
    probes: IntLike = PROBES,
    **options: Unpack[StepOptions],
) -> BatchSearch:
    """The largest global batch whose compiled step fits ``max_device_bytes``.

    Compiles the step (a :class:`~nnx_introspect.StepSpec` of the arguments,
    its batch varied) at one global batch size at a time, every batch leaf's
    leading dimension set to that size: first the given batch's size (rounded
    up to a multiple of the data-parallel size), doubling while the step fits,
    halving while it does not, then bisecting between the largest size that
    fits and the smallest that does not (the edge). A step fits when its peak
    per device is at most the budget and the compiler did not refuse it for
    memory. The search makes at most :data:`MAX_COMPILES` compiles to find the
    edge, about ``2 * log2(hi / data_parallel)``.

    The peak is not monotone in the batch: XLA compiles a different program
    at a different size, and a larger batch can need less. So ``probes``
    sizes past the edge are compiled too (about 5%, 10% and 25% above the
    answer), and any that fits is named (``also_fits``; the verdict then
    reads "every global batch tried up to 24 fits, 32 does not; 40 also
    fits"); when even the smallest batch does not fit, none is. Every batch
    whose peak is below a smaller one's is a jump (``jumps``), with both
    programs' temporaries; for the first that crosses the budget both sizes
    are compiled again with a breakdown of the peak, to name the instruction
    at each.

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
        probes: How many sizes past the edge to compile (0: none, the answer
            then assumes the peak grows with the batch).
        **options: The step's options (:class:`~nnx_introspect.StepOptions`),
            as :func:`~nnx_introspect.step_memory_report` takes them:
            ``max_device_bytes`` judges every point (without it and without a
            ``topology``, the present devices' memory on a TPU or GPU;
            required on a CPU); ``batch_spec``'s first entry per leaf gives
            the data-parallel axes; with ``breakdown``, the search keeps those
            of the answer (``report``) and the edge (``failing_report``), and
            every jump names its instructions; with ``microbatches``, every
            size tried is a multiple of ``microbatches`` times the
            data-parallel size.

    Returns:
        A frozen :class:`BatchSearch`.

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: An ``ArgumentError`` naming the argument, if
            :class:`~nnx_introspect.StepSpec` or :func:`step_memory_report`
            rejects it, ``max_device_bytes`` is missing with no ``topology``
            on a CPU, a batch leaf has no leading dimension or the leaves'
            leading dimensions differ, ``lo`` or ``hi`` is not a multiple of
            the data-parallel size, ``lo > hi``, or ``probes`` is negative.
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
    count = as_int(probes, "probes", minimum=0)
    spec = as_step_spec(target, mesh, batch, options, caller="max_batch")
    limit, basis = search_budget(spec)
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
        "hi_given": top is not None,
        "plan_bytes": state,
        "num_devices": spec.num_devices,
        "batch": tuple(leaf_with_b(leaf) for leaf in spec.batch),
    }
    if bound < low:  # the arguments of batch `lo` alone exceed the budget
        return BatchSearch(
            most=0,
            points=(),
            converged=True,
            compiles=0,
            seconds=time.perf_counter() - began,
            report=None,
            compiler=None,
            **common,
        )
    return _searched(spec, start, common, (progress, compiling), began, cache, count)


def _searched(
    spec: StepSpec,
    start: int,
    common: dict[str, Any],
    callbacks: tuple[Any, Any],
    began: float,
    cache: bool = True,
    probes: int = PROBES,
) -> BatchSearch:
    """The search itself: ``spec`` compiled at each batch size tried."""
    progress, compiling = callbacks
    limit, dp = common["max_device_bytes"], common["data_parallel"]
    low, high = common["lo"], common["hi"]
    reports: dict[int, StepMemoryReport] = {}
    points: dict[int, SearchPoint] = {}

    def measure(size: int, probe: bool = False) -> bool:
        if compiling is not None:
            compiling(size, len(points) + 1)
        report = measure_step(with_batch_size(spec, size), cache=cache)
        point = SearchPoint(
            size,
            report.peak_bytes,
            report.fits(limit),
            "step",
            report.memory.temp_bytes,
            report.compilation.cached is not None,
            probe,
        )
        reports[size], points[size] = report, point
        if progress is not None:
            progress((size, point.peak_bytes, point.fits))
        return point.fits

    first = min(max(-(-start // dp) * dp, low), high)
    good, bad = bisect_sizes(measure, first, low, high, dp)
    converged = (
        (good is None and bad == low)
        or good == high
        or (good is not None and bad is not None and bad - good == dp)
    )
    if converged and good is not None and bad is not None:  # the peak may fall
        for size in probe_sizes(bad, dp, high, probes):
            if size not in points:
                measure(size, probe=True)
    most, edge = edge_of(points.values())  # bisection's (good, bad): below, all fit

    def explain(size: int) -> PeakAt | None:
        found = reports[size].breakdown
        if found is None:  # compiled again, its peak broken down
            again = dataclasses.replace(with_batch_size(spec, size), breakdown=True)
            found = measure_step(again, cache=cache).breakdown
        return peak_at(found)

    jumps = explain_jumps(find_jumps(points.values()), explain, every=spec.breakdown)
    return BatchSearch(
        most=most,
        points=tuple((b, p.peak_bytes, p.fits) for b, p in sorted(points.items())),
        converged=converged,
        compiles=len(points),
        seconds=time.perf_counter() - began,
        report=reports.get(most),
        compiler=reports[max(reports)].compiler,
        failing_report=None if edge is None else reports.get(edge),
        tried=tuple(points[b] for b in sorted(points)),
        jumps=jumps,
        **common,
    )

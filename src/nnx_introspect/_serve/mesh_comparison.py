"""Serving meshes compared: each compiled on any executor, ranked by tokens/s.

:func:`compare_serving_meshes` compiles the same serving request on each mesh
(``tp=8``, two replicas of ``tp=4``, four of ``tp=2``...), one
:func:`~nnx_introspect.serve_memory_report` each, submitted to any
``concurrent.futures.Executor``, and ranks the meshes that fit by their
estimated decode throughput per device (at the decode step's point estimate,
:attr:`~nnx_introspect._serve.timing.ServeTime.tokens_per_second_estimate`);
each row shows the decode latency (time per token) it comes at. Two meshes
whose estimates lie within the calibrated error of each other are a tie, and
the table says so. The roofline's ranges (every term overlapped to none) are
shown beside them, said to be no bound; they rank (overlapping ranges tied)
only meshes with no point estimate.

``meshes="auto"`` takes the topology's ``N`` devices as ``tp=t`` with the rest
data-parallel (``data=N/t,tp=t``, ``tp=1`` kept) for each divisor ``t`` of ``N``
(:func:`serving_meshes`); a candidate the request cannot split over (its
``tp`` does not divide the KV heads, or its replicas the sequences) is
rejected with the reason before any compile, and listed so.
"""

import concurrent.futures
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from nnx_introspect._accelerators import resolve_topology
from nnx_introspect._ranking import error_words, tied, tied_with
from nnx_introspect._render import Report, Table, format_bytes
from nnx_introspect._roofline import RANGE_WORDS
from nnx_introspect._serve.api import measure_serve
from nnx_introspect._serve.programs import _abstract_cache, cache_problems
from nnx_introspect._serve.report import ServeMemoryReport
from nnx_introspect._serve.spec import ServeOptions, ServeSpec
from nnx_introspect._serve.timing import duration
from nnx_introspect._text import plural
from nnx_introspect._typing import ArgumentError, typechecked
from nnx_introspect._xla import start_backends_quietly

__all__ = [
    "ServeMeshComparison",
    "compare_serving_meshes",
    "fan_out",
    "serving_meshes",
]


def _rate(report: ServeMemoryReport) -> tuple[float, float] | None:
    """The roofline's range of tokens/s per device, or ``None`` (not ranked)."""
    if report.time is None or not report.ok:
        return None
    return report.time.tokens_per_second_per_device


def _point(report: ServeMemoryReport) -> float | None:
    """Tokens/s per device at the decode step's point estimate, or ``None``.

    ``None`` when the mesh does not fit, has no estimate, or its decode step
    has only the roofline's range.
    """
    time = report.time
    if time is None or not report.ok or time.decode.time is None:
        return None
    return time.tokens_per_second_estimate / time.decode.devices


def _error(report: ServeMemoryReport) -> float | None:
    """The decode step's calibrated error bar, or ``None``."""
    return None if report.time is None else report.time.decode.error


def _same(a: ServeMemoryReport, b: ServeMemoryReport) -> bool:
    """Whether the estimates cannot rank ``a`` and ``b`` (see :func:`_ties`)."""
    pa, pb = _point(a), _point(b)
    if pa is not None and pb is not None:
        return tied(pa, pb, _error(a), _error(b))
    ra, rb = _rate(a), _rate(b)
    if pa is None and pb is None and ra is not None and rb is not None:
        return ra[0] <= rb[1] and rb[0] <= ra[1]
    return False


@dataclasses.dataclass(frozen=True)
class ServeMeshComparison(Report):
    """Serving meshes ranked by estimated tokens/s per device, ties called.

    Attributes:
        reports: One :class:`ServeMemoryReport` per mesh, best first: those
            that fit by their tokens/s per device at the decode step's point
            estimate, highest first (a mesh with only the roofline's range: by
            its middle), then those that do not fit.
        ties: ``(i, j)`` index pairs of :attr:`reports` the estimate cannot
            order: both fit and their point estimates lie within the
            calibrated error of each other (the larger of their decode steps'
            error bars; uncalibrated, only the same estimate), or, with no
            point estimates, their tokens/s ranges overlap.
        executor: The executor the compiles ran on, in words.
        rejected: With ``meshes="auto"``, ``(mesh, reason)`` for each
            candidate refused before any compile.

    Example:
        >>> from concurrent.futures import ThreadPoolExecutor
        >>> from nnx_introspect.examples import LlamaConfig, llama
        >>> one_layer = llama(LlamaConfig(256, 64, n_layers=1, n_heads=4, d_ff=128))
        >>> with ThreadPoolExecutor(1) as pool:
        ...     found = compare_serving_meshes(
        ...         one_layer, ["tp=4", "data=2,tp=2"], sequences=8, context=64,
        ...         topology="h100-4", executor=pool)
        >>> len(found.reports), found.table().columns[0]
        (2, 'mesh')
    """

    SCHEMA = "nnx-introspect/serve-mesh-comparison"
    SCHEMA_VERSION = 1

    reports: tuple[ServeMemoryReport, ...]
    ties: tuple[tuple[int, int], ...]
    executor: str
    rejected: tuple[tuple[str, str], ...] = ()

    @property
    def ok(self) -> bool:
        """Whether any mesh fits."""
        return any(r.ok for r in self.reports)

    @property
    def max_device_bytes(self) -> int | None:
        """The budget of one device."""
        return self.reports[0].budget.bytes if self.reports else None

    @property
    def verdict(self) -> str:
        """The best mesh, its throughput and latency, or that none fits."""
        if not self.ok:
            return "No serving mesh fits"
        best = self.reports[0]
        rate, point = _rate(best), _point(best)
        with_best = [j for i, j in self.ties if i == 0]
        words = f"best: {_mesh(best)}"
        words += tied_with(
            [_mesh(self.reports[j]) for j in with_best],
            [_error(best), *(_error(self.reports[j]) for j in with_best)],
            point=point is not None,
        )
        if point is not None and rate is not None and best.time is not None:
            low, high = best.time.seconds_per_token
            decode = best.time.decode.time
            calibrated = decode is not None and decode.constants.calibrated
            words += (
                f", {point:,.0f} tokens/s per device at "
                f"{duration(best.time.seconds_per_token_estimate)} per token "
                f"(estimate, {error_words(_error(best), calibrated=calibrated)}; "
                "roofline range "
                f"{rate[0]:,.0f}-{rate[1]:,.0f} tokens/s at "
                f"{duration(low)}-{duration(high)})"
            )
        elif rate is not None and best.time is not None:
            low, high = best.time.seconds_per_token
            words += (
                f", {rate[0]:,.0f}-{rate[1]:,.0f} tokens/s per device at "
                f"{duration(low)}-{duration(high)} per token (estimate)"
            )
        return f"{words}; peak {format_bytes(best.peak_bytes)} per device"

    def json_data(self) -> dict[str, Any]:
        """Every mesh's report, best first, and the ties."""
        return {
            "verdict": self.verdict,
            "executor": self.executor,
            "ties": [list(t) for t in self.ties],
            "reports": [r.json_data() for r in self.reports],
            "rejected": [{"mesh": m, "reason": r} for m, r in self.rejected],
        }

    def table(self) -> Table:
        """One row per mesh, best first."""
        points = any(_point(r) is not None for r in self.reports)
        rows = [
            _row(report, i, self.ties, points) for i, report in enumerate(self.reports)
        ]
        how = (
            "Estimates, not measurements: each program's instructions at the "
            "device's rates ("
            + "; ".join(
                dict.fromkeys(
                    r.time.decode.time.basis
                    for r in self.reports
                    if r.time is not None and r.time.decode.time is not None
                )
            )
            + "). Meshes are ranked by tokens/s per device at the decode step's "
            "estimate; two within the error bar of each other are ties. 'roofline "
            f"range': every term overlapped to none, {RANGE_WORDS}."
            if points
            else "Ranges: every term overlapped to none (a roofline estimate, "
            "not a measurement); overlapping ranges are ties."
        )
        return Table(
            title="Serving meshes, ranked by estimated tokens/s per device",
            columns=(
                "mesh",
                "rank",
                "tokens/s per device (est.)",
                "per token (est.)",
                "first token (est.)",
                *(("roofline range",) if points else ()),
                "peak",
                "fits",
            ),
            rows=tuple(rows),
            lead=(self.verdict,),
            optional=("roofline range",) if points else (),
            notes=(
                how,
                f"Compiled {self.executor}."
                if self.executor.startswith("one mesh after another")
                else f"Compiled on a {self.executor}.",
                *(
                    [f"From the cache (compiled before): {', '.join(cached)}."]
                    if (cached := [_mesh(r) for r in self.reports if _cached(r)])
                    else []
                ),
                *(f"Not compiled: {m}: {r}" for m, r in self.rejected),
            ),
        )


def _row(
    report: ServeMemoryReport,
    i: int,
    ties: tuple[tuple[int, int], ...],
    points: bool,
) -> tuple[str, ...]:
    """The table's row of the ``i``-th mesh: rank, estimates, range, peak."""
    rate, point, time = _rate(report), _point(report), report.time
    tie = [j for a, b in ties for j in (a, b) if i in (a, b) and j != i]
    rank = "-" if rate is None else str(i + 1)
    bounds = (
        "-"
        if time is None
        else (
            ("" if rate is None else f"{rate[0]:,.0f}-{rate[1]:,.0f} tok/s; ")
            + "-".join(duration(s) for s in time.seconds_per_token)
            + " per token; "
            + "-".join(duration(s) for s in time.time_to_first_token)
            + " first"
        )
    )
    if time is not None and time.decode.time is not None:
        error = _error(report)
        cells = (
            "-"
            if point is None
            else f"{point:,.0f}" + ("" if error is None else f" ±{error:.0%}"),
            duration(time.seconds_per_token_estimate),
            duration(time.time_to_first_token_estimate),
        )
    else:
        cells = (
            "-" if rate is None else f"{rate[0]:,.0f}-{rate[1]:,.0f}",
            "-"
            if time is None
            else "-".join(duration(s) for s in time.seconds_per_token),
            "-"
            if time is None
            else "-".join(duration(s) for s in time.time_to_first_token),
        )
    return (
        _mesh(report),
        rank + (" (tie)" if tie else ""),
        *cells,
        *((bounds,) if points else ()),
        format_bytes(report.peak_bytes),
        "yes" if report.ok else "no",
    )


def _cached(report: ServeMemoryReport) -> bool:
    """Whether both of ``report``'s programs were read from the cache."""
    return all(p.cached is not None for p in (report.prefill, report.decode))


def _mesh(report: ServeMemoryReport) -> str:
    return ",".join(f"{a}={s}" for a, s in report.mesh_axes)


def _measure(kwargs: dict[str, Any]) -> ServeMemoryReport:
    """One mesh's report (top-level: submitted to any executor)."""
    start_backends_quietly()
    options = ServeOptions(**kwargs.pop("options"))
    return measure_serve(ServeSpec(options=options, **kwargs))


def _ties(reports: list[ServeMemoryReport]) -> tuple[tuple[int, int], ...]:
    """``(i, j)``, ``i < j``, of every two fitting meshes the estimate cannot order.

    Both with point estimates: tokens/s per device within the calibrated
    error of each other (:func:`~nnx_introspect._ranking.tied`; the same as
    their times per token being so); both without: overlapping ranges.
    """
    return tuple(
        (i, j)
        for i in range(len(reports))
        for j in range(i + 1, len(reports))
        if _rate(reports[i]) is not None
        and _rate(reports[j]) is not None
        and _same(reports[i], reports[j])
    )


def _order(report: ServeMemoryReport) -> tuple[int, float]:
    """Fitting meshes by tokens/s at the point estimate (else the range's middle)."""
    rate, point = _rate(report), _point(report)
    if point is not None:
        return (0, -point)
    return (0, -(rate[0] + rate[1]) / 2) if rate is not None else (1, 0.0)


def fan_out(
    measure: Callable[[dict[str, Any]], Any],
    requests: Sequence[dict[str, Any]],
    executor: concurrent.futures.Executor | None,
) -> list[Any]:
    """``measure(request)`` of each request, or the exception it raised.

    Submitted to ``executor`` (each request a copy), or one after another in
    this process, where only an :class:`ArgumentError` (a request refused) is
    kept and anything else raises at once. The caller decides what each kept
    exception means.
    """
    if executor is None:
        results: list[Any] = []
        for request in requests:
            try:
                results.append(measure(dict(request)))
            except ArgumentError as error:
                results.append(error)
        return results
    futures = [executor.submit(measure, dict(r)) for r in requests]
    return [f.exception() or f.result() for f in futures]


def _run(
    executor: concurrent.futures.Executor | None,
    requests: list[dict[str, Any]],
    meshes: Any,
) -> tuple[list[ServeMemoryReport], str]:
    """Every request's report, and where they were compiled, in words.

    A mesh refused inside a compile (its ``tp`` does not divide the KV heads)
    is named as ``meshes[i]``.
    """
    results = fan_out(_measure, requests, executor)
    described = (
        "one mesh after another, from this process"
        if executor is None
        else type(executor).__name__
    )
    for i, result in enumerate(results):
        if isinstance(result, ArgumentError) and result.argument == "mesh":
            raise ArgumentError(
                "meshes", f"`meshes[{i}]` {meshes[i]!r}: {result}"
            ) from None
        if isinstance(result, BaseException):
            raise result
    places = sorted({r.decode.compiled_in for r in results})
    if executor is None:
        # a topology's programs compile in child processes (serve_readings)
        described = f"{described}: each program in {', '.join(places)}"
    return results, described


def _requests(
    meshes: Any, common: dict[str, Any], given: dict[str, Any]
) -> list[dict[str, Any]]:
    """Each mesh's request, checked before any compile.

    Each mesh alone first (a bad one named ``meshes[i]``), then their sizes
    against each other, then the request with the topology.
    """
    options = ServeOptions(**given)
    sizes = []
    for i, mesh in enumerate(meshes):
        try:
            spec = ServeSpec(
                options=options, **(common | {"mesh": mesh, "topology": None})
            )
        except ArgumentError as error:
            if error.argument != "mesh":
                raise
            raise ArgumentError("meshes", f"`meshes[{i}]` {mesh!r}: {error}") from None
        sizes.append(spec.num_devices)
    if len(set(sizes)) > 1:
        raise ArgumentError(
            "meshes",
            f"`meshes` have {sorted(set(sizes))} devices: compare meshes of one "
            "size (the topology's), e.g. tp=8, data=2,tp=4, data=4,tp=2.",
        )
    ServeSpec(options=options, **(common | {"mesh": meshes[0]}))  # the topology
    return [common | {"mesh": mesh, "options": given} for mesh in meshes]


def serving_meshes(devices: int) -> list[str]:
    """The serving meshes of ``devices``: ``tp=t``, the rest data-parallel.

    One per divisor ``t`` of ``devices``, the most tensor-parallel first:
    ``tp=N``, ``data=N/t,tp=t``..., ``data=N,tp=1`` (the ``tp`` axis kept at
    size 1: a model whose weights name ``tp`` needs the axis on the mesh).

    Example:
        >>> serving_meshes(8)
        ['tp=8', 'data=2,tp=4', 'data=4,tp=2', 'data=8,tp=1']
    """
    out = []
    for tp in (t for t in range(devices, 0, -1) if devices % t == 0):
        data = devices // tp
        out.append(f"tp={tp}" if data == 1 else f"data={data},tp={tp}")
    return out


def _auto(
    common: dict[str, Any], given: dict[str, Any]
) -> tuple[list[str], tuple[tuple[str, str], ...]]:
    """``meshes="auto"``: the candidates kept, and those rejected with why.

    Each candidate's KV cache split checked before any compile (the cache's
    shapes once, abstractly): a ``tp`` that does not divide the KV heads, or
    replicas that do not divide the sequences, is a reason.
    """
    topology = common["topology"]
    devices = resolve_topology(topology).devices
    options = ServeOptions(**given)
    kept, rejected = [], []
    request, cache = common | {"topology": None}, None
    for mesh in serving_meshes(devices):
        spec = ServeSpec(options=options, **(request | {"mesh": mesh}))
        if cache is None:
            cache = _abstract_cache(spec, spec.model)
            request["target"] = spec.model  # built once for the checks
        problems = cache_problems(cache, spec)
        if problems:
            rejected.append((mesh, " ".join(str(p) for p in problems)))
        else:
            kept.append(mesh)
    if not kept:
        reasons = "; ".join(f"{m}: {r}" for m, r in rejected)
        raise ArgumentError(
            "meshes",
            f"`meshes='auto'`: no serving mesh of the {plural(devices, 'device')} of "
            f"{topology!r} splits this request ({reasons}). Pass `sequences` "
            "that the replicas divide, or another topology.",
        )
    return kept, tuple(rejected)


@typechecked
def compare_serving_meshes(
    target: Any,
    meshes: Any,
    /,
    *,
    sequences: Any,
    context: Any,
    prompt: Any = None,
    prefill_sequences: Any = None,
    topology: Any = None,
    max_device_bytes: Any = None,
    weights: Any = "bfloat16",
    kv_cache: Any = "bfloat16",
    init_cache: Any = None,
    decode: Any = None,
    executor: Any = None,
) -> ServeMeshComparison:
    """Serving meshes compiled and ranked by estimated decode tokens/s per device.

    Each mesh gets the :func:`~nnx_introspect.serve_memory_report` of the same
    request; the meshes that fit are ranked by their estimated tokens/s per
    device at the decode step's point estimate (each row with its time per
    token: the latency the throughput comes at), the others listed after.
    Estimates within the calibrated error of each other are ties (with no
    point estimate: overlapping ranges).

    Args:
        target: The model, as :func:`~nnx_introspect.serve_memory_report`
            takes it (a ``"package.module:factory"`` string for a process
            pool).
        meshes: Two or more meshes with the same device count (``["tp=8",
            "data=2,tp=4", "data=4,tp=2"]``), or ``"auto"``: the topology's
            ``N`` devices as ``tp=t`` with the rest data-parallel for each
            divisor ``t`` of ``N`` (:func:`serving_meshes`), those the
            request cannot split over (``tp`` not dividing the KV heads,
            replicas not dividing the sequences) rejected before any compile
            (:attr:`ServeMeshComparison.rejected`).
        sequences: Sequences decoded at once.
        context: Positions of the KV cache per sequence.
        prompt: Tokens prefilled per sequence; ``context`` by default.
        prefill_sequences: Sequences prefilled at once; all by default.
        topology: The target (``"h100-8"``): needed, the ranking is its
            roofline estimate.
        max_device_bytes: A budget per device, overriding the target's.
        weights: The served weights' dtype, as for the report.
        kv_cache: The KV cache's dtype, as for the report.
        init_cache: As for :func:`~nnx_introspect.serve_memory_report`.
        decode: As for :func:`~nnx_introspect.serve_memory_report`.
        executor: A ``concurrent.futures.Executor`` to compile on (a
            ``ProcessPoolExecutor``, dask's ``Client().get_executor()``...),
            used as it is and left running; ``None`` compiles one mesh after
            another in this process.

    Returns:
        The :class:`ServeMeshComparison`.

    Raises:
        ArgumentError: No ``topology``, fewer than two meshes, meshes of
            different sizes, a bad mesh (``meshes[i]`` named), ``"auto"``
            with every candidate rejected, or any bad value
            :func:`~nnx_introspect.serve_memory_report` refuses.

    Example:
        >>> from nnx_introspect.examples import LlamaConfig, llama
        >>> one_layer = llama(LlamaConfig(256, 64, n_layers=1, n_heads=4, d_ff=128))
        >>> found = compare_serving_meshes(
        ...     one_layer, ["tp=4", "data=2,tp=2"], sequences=8, context=64,
        ...     topology="h100-4")
        >>> sorted(r.mesh_axes for r in found.reports)
        [(('data', 2), ('tp', 2)), (('tp', 4),)]

        Every ``tp`` of two devices, the rest data-parallel:

        >>> found = compare_serving_meshes(
        ...     one_layer, "auto", sequences=2, context=32, topology="h100-2")
        >>> sorted(",".join(f"{a}={n}" for a, n in r.mesh_axes)
        ...        for r in found.reports), found.rejected
        (['data=2,tp=1', 'tp=2'], ())
    """
    start_backends_quietly()
    auto = isinstance(meshes, str) and meshes.strip().lower() == "auto"
    if topology is None:
        raise ArgumentError(
            "topology",
            "`topology` is None: `meshes='auto'` takes its device count. Pass "
            "e.g. topology='h100-8'."
            if auto
            else "`topology` is None: serving meshes are ranked by the tokens/s "
            "estimated on a target's data sheet. Pass e.g. topology='h100-8'.",
        )
    if executor is not None and not isinstance(executor, concurrent.futures.Executor):
        raise ArgumentError(
            "executor",
            f"`executor` must be a concurrent.futures.Executor or None, got "
            f"{executor!r}.",
        )
    listed = isinstance(meshes, list | tuple)
    if not auto and not listed:
        raise ArgumentError(
            "meshes",
            f"`meshes` must be a list of two or more meshes or 'auto', got {meshes!r}.",
        )
    if not auto and len(meshes) < 2:
        raise ArgumentError(
            "meshes", f"`meshes` must hold two or more meshes, got {len(meshes)}."
        )
    given = {"weights": weights, "kv_cache": kv_cache}
    given |= {"init_cache": init_cache, "decode": decode}
    common = {
        "target": target,
        "sequences": sequences,
        "context": context,
        "prompt": prompt,
        "prefill_sequences": prefill_sequences,
        "topology": topology,
        "max_device_bytes": max_device_bytes,
    }
    rejected: tuple[tuple[str, str], ...] = ()
    if auto:
        meshes, rejected = _auto(common, given)
    requests = _requests(meshes, common, given)
    reports, described = _run(executor, requests, meshes)
    ranked = sorted(reports, key=_order)
    return ServeMeshComparison(tuple(ranked), _ties(ranked), described, rejected)

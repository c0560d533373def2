"""Which layout of a GRPO step's roles: :func:`compare_rl_layouts`.

Each candidate layout (every role on one mesh, or the rollout, the actor and
the reference on slices of their own) is one
:func:`~nnx_introspect.rl_memory_report`, submitted to any
``concurrent.futures.Executor`` as the mesh comparisons are; the layouts that
fit are ranked by the point estimate of their step time
(:attr:`~nnx_introspect.RLMemoryReport.step_estimate`): two whose estimates lie
within the calibrated error of each other are a tie (the table says so). The
roofline's ``(low, high)`` range is shown beside it, said to be no bound; it ranks
(overlapping ranges tied) only layouts with no point estimate.

``layouts="auto"`` takes the topology's ``N`` devices as: every role on
``fsdp=N``; every role on ``tp=N``; the rollout on ``tp=N/2`` and the actor
and the reference on ``fsdp=N/2``; the rollout on ``tp=N/2``, the actor on
``fsdp=N/4`` and the reference on ``fsdp=N/4`` (as many as ``N`` has). A
candidate the request cannot run on (a ``tp`` that does not divide the
heads, sequences that do not split) is rejected with the reason, and listed.
"""

import concurrent.futures
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from nnx_introspect._accelerators import resolve_topology
from nnx_introspect._ranking import error_words, tie_error, tied, tied_with
from nnx_introspect._render import Report, Table, format_bytes
from nnx_introspect._rl.api import rl_memory_report
from nnx_introspect._rl.report import RLMemoryReport
from nnx_introspect._roofline import RANGE_WORDS
from nnx_introspect._serve import fan_out
from nnx_introspect._step import duration
from nnx_introspect._typing import ArgumentError, as_int, typechecked
from nnx_introspect._xla import start_backends_quietly

__all__ = ["RLLayoutComparison", "compare_rl_layouts", "rl_layouts"]

Candidate = tuple[str, Mapping[str, str] | None]
"""``(mesh, role_meshes)``: one layout."""


def rl_layouts(devices: int) -> tuple[Candidate, ...]:
    """The layouts ``"auto"`` compares on ``devices`` devices.

    Example:
        >>> for mesh, roles in rl_layouts(8):
        ...     print(mesh, roles)
        fsdp=8 None
        tp=8 None
        fsdp=4 {'rollout': 'tp=4'}
        fsdp=2 {'rollout': 'tp=4', 'reference': 'fsdp=2'}
        >>> rl_layouts(1)
        (('fsdp=1', None),)
    """
    out: list[Candidate] = [(f"fsdp={devices}", None)]
    if devices >= 2:
        out.append((f"tp={devices}", None))
        half = devices // 2
        if devices % 2 == 0:
            out.append((f"fsdp={half}", {"rollout": f"tp={half}"}))
        if devices % 4 == 0:
            quarter = devices // 4
            out.append(
                (
                    f"fsdp={quarter}",
                    {"rollout": f"tp={half}", "reference": f"fsdp={quarter}"},
                )
            )
    return tuple(out)


def _seconds(report: RLMemoryReport) -> tuple[float, float] | None:
    """The roofline's range of the step, ``(low, high)``, or ``None``."""
    return report.step_seconds


def _error(report: RLMemoryReport) -> float | None:
    """The step estimate's error bar: its phases' largest (``None``: uncalibrated)."""
    return tie_error(*(p.error for p in report.phases))


def _same(a: RLMemoryReport, b: RLMemoryReport) -> bool:
    """Whether the estimates cannot rank ``a`` and ``b`` (see :func:`_ties`)."""
    pa, pb = a.step_estimate, b.step_estimate
    if pa is not None and pb is not None:
        return tied(pa, pb, _error(a), _error(b))
    sa, sb = _seconds(a), _seconds(b)
    if pa is None and pb is None and sa is not None and sb is not None:
        return sa[0] <= sb[1] and sb[0] <= sa[1]
    return False


def _point_words(report: RLMemoryReport) -> str:
    """``"1.2 s ±9%"``: the step's point estimate with its error bar."""
    point = report.step_estimate
    if point is None:
        return "-"
    error = _error(report)
    return duration(point) + ("" if error is None else f" ±{error:.0%}")


@dataclasses.dataclass(frozen=True)
class RLLayoutComparison(Report):
    """GRPO step layouts, the fastest that fits first.

    Attributes:
        reports: One :class:`~nnx_introspect.RLMemoryReport` per layout: those
            that fit by the point estimate of their step time (where a layout
            has none, the roofline range's low end, then its high), then those
            that do not.
        ties: Index pairs of :attr:`reports` the estimates cannot rank: both
            fit, and their point estimates lie within the calibrated error of
            each other (the larger of their error bars, the phases' largest;
            uncalibrated, only the same estimate); layouts with no point
            estimate, whose step-time ranges overlap.
        executor: The executor the layouts were compiled on, in words.
        rejected: ``(layout, reason)`` of each candidate refused before any
            compile.

    Example:
        >>> RLLayoutComparison((), (), "in order").verdict
        'No layout fits'
    """

    SCHEMA = "nnx-introspect/rl-layout-comparison"
    SCHEMA_VERSION = 1

    reports: tuple[RLMemoryReport, ...]
    ties: tuple[tuple[int, int], ...]
    executor: str
    rejected: tuple[tuple[str, str], ...] = ()

    @property
    def ok(self) -> bool:
        """Whether any layout fits."""
        return any(r.fits() is not False for r in self.reports)

    @property
    def verdict(self) -> str:
        """The fastest layout that fits, its ties, its step time and peak."""
        if not self.ok:
            return "No layout fits"
        best = self.reports[0]
        words = f"fastest that fits: {_name(best)}"
        with_best = [j for i, j in self.ties if i == 0]
        point = best.step_estimate
        words += tied_with(
            [_name(self.reports[j]) for j in with_best],
            [_error(best), *(_error(self.reports[j]) for j in with_best)],
            point=point is not None,
            sep="; ",
        )
        span = _seconds(best)
        if point is not None:
            rollout = best.programs.get("rollout")
            time = None if rollout is None else rollout.time
            decode = None if time is None else time.decode.time
            calibrated = decode is not None and decode.constants.calibrated
            error = error_words(_error(best), calibrated=calibrated)
            words += f", {duration(point)} per step (estimate, {error}"
            if span is not None:
                words += f"; roofline range {duration(span[0])}-{duration(span[1])}"
            words += ")"
        elif span is not None:
            words += f", {duration(span[0])}-{duration(span[1])} per step (estimate)"
        return f"{words}; peak {format_bytes(best.peak_bytes)} per device"

    def table(self) -> Table:
        """One row per layout, fastest first."""
        points = any(r.step_estimate is not None for r in self.reports)
        rows = []
        for i, report in enumerate(self.reports):
            span = _seconds(report)
            bounds = "-" if span is None else "-".join(duration(s) for s in span)
            tie = any(i in pair for pair in self.ties)
            fits = report.fits() is not False
            rank = str(i + 1) + (" (tie)" if tie else "") if fits else "-"
            step = _point_words(report) if report.step_estimate is not None else bounds
            rows.append(
                (
                    _name(report),
                    rank,
                    step,
                    *((bounds,) if points else ()),
                    f"{format_bytes(report.peak_bytes)} ({report.peak_phase.name})",
                    format_bytes(report.reshard_bytes) if report.reshard_bytes else "-",
                    "yes" if fits else "no",
                )
            )
        if points:
            bases = dict.fromkeys(
                p.basis for r in self.reports for p in r.phases if p.basis
            )
            how = (
                "Step time: each phase's point estimate (its program's "
                "instructions at the device's rates: "
                + "; ".join(bases or ["no basis given"])
                + "), one after another, and the transfers' (an estimate, not a "
                "measurement). Layouts are ranked by it; two within the error bar "
                "of each other are ties. 'roofline range': the phases' roofline "
                f"ranges summed, {RANGE_WORDS}."
            )
        else:
            how = (
                "Step time: each phase's roofline range and the reshard's, summed "
                "(an estimate, not a measurement); overlapping ranges are ties."
            )
        return Table(
            title="GRPO step layouts, ranked by estimated step time",
            columns=(
                "layout",
                "rank",
                "step (est.)",
                *(("roofline range",) if points else ()),
                "peak",
                "reshard",
                "fits",
            ),
            rows=tuple(rows),
            lead=(self.verdict,),
            notes=(
                how,
                f"Compiled {self.executor}.",
                *(f"Not compiled: {m}: {r}" for m, r in self.rejected),
            ),
            optional=("roofline range",) if points else (),
        )

    def json_data(self) -> dict[str, Any]:
        """Every layout's report, fastest first, and the ties."""
        return {
            "verdict": self.verdict,
            "ok": self.ok,
            "executor": self.executor,
            "ties": [list(t) for t in self.ties],
            "reports": [r.json_data() for r in self.reports],
            "rejected": [{"layout": m, "reason": r} for m, r in self.rejected],
        }


def _name(report: RLMemoryReport) -> str:
    if report.layout == "colocated":
        return "colocated on " + ",".join(f"{a}={n}" for a, n in report.mesh_axes)
    return report.layout.removeprefix("disaggregated: ")


def _words(candidate: Candidate) -> str:
    mesh, roles = candidate
    if not roles:
        return f"colocated on {mesh}"
    return f"{mesh}, " + ", ".join(f"{r} on {m}" for r, m in roles.items())


def _measure(kwargs: dict[str, Any]) -> RLMemoryReport:
    """One layout's report (top-level: submitted to any executor)."""
    start_backends_quietly()
    actor, mesh = kwargs.pop("actor"), kwargs.pop("mesh")
    return rl_memory_report(actor, mesh, **kwargs)


def _ties(reports: Sequence[RLMemoryReport]) -> tuple[tuple[int, int], ...]:
    """``(i, j)``, ``i < j``, of every two layouts that fit and cannot be ranked.

    Both with point estimates: within the calibrated error of each other
    (:func:`~nnx_introspect._ranking.tied`); both without: roofline ranges
    that overlap; one of each: never.
    """
    fitting = [r.fits() is not False for r in reports]
    return tuple(
        (i, j)
        for i in range(len(reports))
        for j in range(i + 1, len(reports))
        if fitting[i] and fitting[j] and _same(reports[i], reports[j])
    )


def _order(report: RLMemoryReport) -> tuple[int, float, float]:
    """Fitting layouts by point estimate (else their ranges), then by peak."""
    point, span = report.step_estimate, _seconds(report)
    if report.fits() is False:
        return (2, 0.0, float(report.peak_bytes))
    if point is not None:
        return (0, point, 0.0)
    if span is None:
        return (1, 0.0, float(report.peak_bytes))
    return (0, span[0], span[1])


def _candidates(layouts: Any, topology: str | None) -> tuple[Candidate, ...]:
    if isinstance(layouts, str):
        if layouts.strip().lower() != "auto":
            raise ArgumentError(
                "layouts",
                f"`layouts` must be 'auto' or a list of (mesh, role_meshes) "
                f"pairs, got {layouts!r}.",
            )
        if topology is None:
            raise ArgumentError(
                "layouts",
                "`layouts='auto'` splits a topology's devices: pass `topology` "
                "(such as 'v5e-8'), or the layouts themselves.",
            )
        return rl_layouts(resolve_topology(topology).devices)
    if not isinstance(layouts, Sequence) or not layouts:
        raise ArgumentError(
            "layouts",
            "`layouts` must be 'auto' or a non-empty list of (mesh, role_meshes) "
            f"pairs, got {layouts!r}.",
        )
    out = []
    for i, item in enumerate(layouts):
        if not (isinstance(item, tuple | list) and len(item) == 2):
            raise ArgumentError(
                "layouts",
                f"`layouts[{i}]` must be a (mesh, role_meshes) pair such as "
                f"('fsdp=4', {{'rollout': 'tp=4'}}), got {item!r}.",
            )
        out.append((item[0], item[1]))
    return tuple(out)


@typechecked
def compare_rl_layouts(
    actor: Any,
    layouts: Any = "auto",
    /,
    *,
    executor: concurrent.futures.Executor | None = None,
    **options: Any,
) -> RLLayoutComparison:
    """GRPO step layouts compiled and ranked: which split of the devices is fastest.

    Each layout is a ``(mesh, role_meshes)`` pair, one
    :func:`~nnx_introspect.rl_memory_report` with the other keyword arguments
    (``batch``, ``generations``, ``prompt``, ``completion``, ``topology``,
    ``lora``, ...), submitted to ``executor`` (``None``: one after another in
    this process; a named topology compiles each program in a child process
    anyway). ``"auto"`` compares :func:`rl_layouts` of the topology's devices.
    A layout refused before its compile (an :class:`ArgumentError` naming
    its mesh or a role's) is listed as rejected; any other failure raises.

    Example:
        >>> from nnx_introspect import compare_rl_layouts
        >>> from nnx_introspect.examples import LlamaConfig, llama
        >>> small = llama(LlamaConfig(vocab=64, d_model=32, n_layers=2,
        ...                           n_heads=2, d_ff=64))
        >>> found = compare_rl_layouts(
        ...     small, [("data=2", None), ("tp=4", None)],
        ...     batch=1, generations=2, prompt=8, completion=8,
        ...     max_device_bytes="64MiB")
        >>> [r.layout for r in found.reports], found.rejected[0][0]
        (['colocated'], 'colocated on tp=4')
    """
    if executor is not None and not isinstance(executor, concurrent.futures.Executor):
        raise TypeError("`executor` must be a concurrent.futures.Executor or None.")
    candidates = _candidates(layouts, options.get("topology"))
    for name in ("batch", "generations", "prompt", "completion"):
        if name in options:  # the request's own mistakes are not a layout's
            try:
                as_int(options[name], name, minimum=1)
            except TypeError as error:
                raise ArgumentError(name, str(error)) from None
    requests = [
        {"actor": actor, "mesh": mesh, "role_meshes": roles, **options}
        for mesh, roles in candidates
    ]
    results = fan_out(_measure, requests, executor)
    described = (
        "one layout after another, from this process"
        if executor is None
        else f"on a {type(executor).__name__}"
    )
    reports, rejected = [], []
    for candidate, result in zip(candidates, results, strict=True):
        if isinstance(result, ArgumentError) and result.argument in _LAYOUT_ARGS:
            rejected.append((_words(candidate), str(result)))
        elif isinstance(result, BaseException):
            raise result
        else:
            reports.append(result)
    if not reports:
        raise ArgumentError(
            "layouts",
            "`layouts`: every candidate was rejected: "
            + "; ".join(f"{m}: {r}" for m, r in rejected),
        )
    reports.sort(key=_order)
    return RLLayoutComparison(
        tuple(reports), _ties(reports), described, tuple(rejected)
    )


_LAYOUT_ARGS = ("mesh", "role_meshes", "batch", "kv_cache", "batch_spec")
"""The arguments whose error is the layout's: the candidate is rejected."""

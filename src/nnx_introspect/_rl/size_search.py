"""The most prompts per GRPO step that fit: :func:`rl_max_batch`.

A search over ``batch`` (prompts per step) with everything else fixed, each
value tried being :func:`~nnx_introspect.rl_memory_report`'s whole step at it
(every phase compiled; the value fits when every phase fits). Values are
multiples of the smallest batch whose ``batch x generations`` sequences split
evenly over the mesh's data-parallel axes; the search doubles, then bisects
(:func:`~nnx_introspect._sweep.batch.sizes.bisect_sizes`, the batch search's), until a
compiled value that fits and the next one, compiled, that does not. The peak is
not monotone in the batch (XLA compiles a different program at a different
size), so a few batches past that edge are compiled too, and any that fits is
named (:mod:`nnx_introspect._size_search`).
"""

import dataclasses
import math
from typing import Any

from nnx_introspect._accelerators import Budget
from nnx_introspect._render import Report, Table, format_bytes
from nnx_introspect._rl.api import measure_rl
from nnx_introspect._rl.report import RLMemoryReport
from nnx_introspect._rl.spec import RLSpec
from nnx_introspect._serve import TENSOR_PARALLEL_AXES
from nnx_introspect._size_search import (
    PROBES,
    Jump,
    PeakAt,
    SearchPoint,
    SizeSearch,
    edge_of,
    explain_jumps,
    find_jumps,
    jump_notes,
    peak_at,
    probe_sizes,
    sizes_words,
)
from nnx_introspect._sweep import MAX_COMPILES, bisect_sizes
from nnx_introspect._typing import ArgumentError, as_int, typechecked

__all__ = ["RLBatchSearch", "rl_max_batch"]

_LARGEST = 1 << 20
"""The largest batch a search doubles towards."""


@dataclasses.dataclass(frozen=True)
class RLBatchSearch(Report, SizeSearch):
    """The most prompts per GRPO step that fit, with the compiled edge.

    Attributes:
        target: The actor's name.
        mesh_axes: The mesh every role runs on.
        topology: The compile target, or ``None``.
        generations: Completions per prompt.
        prompt: Tokens of each prompt.
        completion: Tokens of each completion.
        unit: The batch step: the smallest batch whose sequences split over
            the mesh's data-parallel axes; every value tried is a multiple.
        most: The answer: the largest batch tried below the smallest that does
            not fit, so every batch tried up to it fits (0: none does). The
            same name and meaning in every search (``BatchSearch.most``,
            ``ServeSearch.most``); ``batch`` is its older name.
        points: ``(batch, peak bytes, the phase that sets it, fits)`` of every
            value compiled, by batch (``tried`` holds the same compiles as
            :class:`SearchPoint` records, the form every search shares).
        budget: The budget of one device.
        answer: The report at :attr:`most` (``None`` when none fits).
        edge: The report at the edge, the smallest batch tried above the
            answer that does not fit (``None`` when the search stopped at its
            largest batch).
        tried: Every compile as a :class:`SearchPoint`, by batch: the phase
            whose peak it is, that program's temporaries, whether it was a
            probe past the edge.
        jumps: Every batch tried whose peak is below a smaller batch's
            (:class:`Jump`); the first that crosses the budget names the
            instruction at each peak.

    Example:
        >>> from nnx_introspect._accelerators.budget import Budget
        >>> found = RLBatchSearch("m", (("data", 2),), None, 4, 8, 8, 1, 3,
        ...                       ((3, 90, "train", True), (4, 120, "train", False)),
        ...                       Budget(100, "the budget given"))
        >>> found.ok, found.verdict
        (True, 'Most prompts per step that fit: 3 (x 4 generations = 12 \
completions): peak 90 B per device of a 100 B budget, set by train; 4 does not \
fit (120 B, set by train)')
        >>> found.batch == found.most, found.edge_size, found.also_fits
        (True, 4, ())
    """

    SCHEMA = "nnx-introspect/rl-batch-search"
    SCHEMA_VERSION = 1

    target: str
    mesh_axes: tuple[tuple[str, int], ...]
    topology: str | None
    generations: int
    prompt: int
    completion: int
    unit: int
    most: int
    points: tuple[tuple[int, int, str, bool], ...]
    budget: Budget
    answer: RLMemoryReport | None = dataclasses.field(default=None, compare=False)
    edge: RLMemoryReport | None = dataclasses.field(default=None, compare=False)
    tried: tuple[SearchPoint, ...] = ()
    jumps: tuple[Jump, ...] = ()

    def __post_init__(self) -> None:
        """A search built from ``points`` alone gets its ``tried`` from them."""
        if not self.tried and self.points:
            tried = tuple(SearchPoint(b, p, f, ph) for b, p, ph, f in self.points)
            object.__setattr__(self, "tried", tried)

    @property
    def batch(self) -> int:
        """The answer, :attr:`most`, by its older name (0: none fits)."""
        return self.most

    @property
    def ok(self) -> bool:
        """Whether the answer is a batch that fits (``most > 0``)."""
        return self.most > 0

    @property
    def compiles(self) -> int:
        """How many steps were compiled (each: every phase's program)."""
        return len(self.points)

    @property
    def verdict(self) -> str:
        """The answer in one line, with the edge and any batch above that fits."""
        budget = format_bytes(self.budget.bytes or 0)
        by = {p.size: p for p in self.tried}
        above, also = self.edge_size, self.also_fits
        edge = ""
        if above is not None:
            peak, phase = format_bytes(by[above].peak_bytes), by[above].program
            edge = f"; {above} does not fit ({peak}, set by {phase})"
        if also:
            verb = "fit" if len(also) > 1 else "fits"
            edge += f"; {sizes_words(also)} {verb}, above it: the peak is not "
            edge += "monotone in the batch"
        if not self.ok:
            return (
                f"No batch fits: even {self.unit} prompts x {self.generations} "
                f"generations exceed the {budget} budget per device{edge}"
            )
        point = by[self.most]
        head = f"Most prompts per step that fit: {self.most}"
        if also:
            head = f"Every batch tried up to {self.most} prompts per step fits"
        return (
            f"{head} (x {self.generations} generations = "
            f"{self.most * self.generations} completions): peak "
            f"{format_bytes(point.peak_bytes)} per device of a {budget} budget, set "
            f"by {point.program}{edge}"
        )

    def _gap(self) -> tuple[str, ...]:
        """Why the edge is more than one step above the answer, if it is."""
        above = self.edge_size
        if above is None or above - self.most <= self.unit:
            return ()
        return (
            f"The search stopped after {MAX_COMPILES} compiles: the batches "
            f"between {self.most} and {above} were not compiled.",
        )

    def table(self) -> Table:
        """Every batch compiled: its completions, peak, phase and verdict."""
        mesh = ",".join(f"{a}={s}" for a, s in self.mesh_axes)
        rows = tuple(
            (
                str(p.size),
                str(p.size * self.generations),
                format_bytes(p.peak_bytes),
                p.program,
                "fits" if p.fits else "does NOT fit",
                self.role(p),
            )
            for p in self.tried
        )
        notes = (
            "Each row is one GRPO step compiled at that batch: every phase's "
            "program, the roles resident beside it (rl_memory_report); it fits "
            "when every phase does.",
            f"Batches tried are multiples of {self.unit}: the sequences split "
            "over the mesh's data-parallel axes.",
            *([f"Budget: {self.budget.basis}."] if self.budget.basis else []),
            *self._gap(),
            *[n for n in [self.above_note("batch", "batches")] if n],
            *jump_notes(self.jumps, "batch"),
        )
        where = self.topology or "this process's devices"
        return Table(
            title=(
                f"Most prompts per GRPO step of {self.target} on {mesh} "
                f"({where}): {self.generations} generations, prompt "
                f"{self.prompt}, completion {self.completion}"
            ),
            columns=(
                "batch",
                "completions",
                "peak per device",
                "set by",
                "",
                "tried as",
            ),
            rows=rows,
            notes=notes,
            lead=(self.verdict,),
            emphasis=(str(self.most),),
        )

    def json_data(self) -> dict[str, Any]:
        """The search as JSON data."""
        return {
            "target": self.target,
            "mesh": [list(a) for a in self.mesh_axes],
            "topology": self.topology,
            "generations": self.generations,
            "prompt": self.prompt,
            "completion": self.completion,
            "unit": self.unit,
            "batch": self.most,
            "ok": self.ok,
            "verdict": self.verdict,
            "budget_bytes": self.budget.bytes,
            "budget_basis": self.budget.basis,
            "points": [
                {"batch": b, "peak_bytes": p, "peak_phase": ph, "fits": f}
                for b, p, ph, f in self.points
            ],
            "answer": None if self.answer is None else self.answer.json_data(),
            "edge": None if self.edge is None else self.edge.json_data(),
            "most": self.most,
            "edge_size": self.edge_size,
            "also_fits": list(self.also_fits),
            "tried": [p.json_data() for p in self.tried],
            "jumps": [j.json_data() for j in self.jumps],
        }


def _unit(mesh: Any, generations: int) -> int:
    """The smallest batch whose ``batch x generations`` split over the data axes."""
    from nnx_introspect._mesh import as_abstract_mesh

    try:
        abstract = as_abstract_mesh(mesh)
    except ValueError as error:
        raise ArgumentError("mesh", str(error)) from None
    data = math.prod(
        int(n)
        for a, n in zip(abstract.axis_names, abstract.axis_sizes, strict=True)
        if a not in TENSOR_PARALLEL_AXES
    )
    return data // math.gcd(data, generations)


@typechecked
def rl_max_batch(
    actor: Any,
    mesh: Any,
    /,
    *,
    generations: Any,
    prompt: Any,
    completion: Any,
    probes: Any = PROBES,
    **options: Any,
) -> RLBatchSearch:
    """The most prompts per GRPO step that fit, and the compiled edge above.

    Takes :func:`~nnx_introspect.rl_memory_report`'s keyword arguments but
    ``batch`` (``reference``, ``lora``, ``optimizer``, ``rollout_weights``,
    ``kv_cache``, ``topology``, ``max_device_bytes``, ...); a budget is
    needed. Every batch tried is that report's whole step; the answer is the
    largest compiled batch below the smallest that does not fit, and that
    next batch the mesh can split, compiled too, does not (unless the search
    reached its largest batch, 2**20).

    The peak is not monotone in the batch (XLA compiles a different program
    at a different size), so ``probes`` batches past the edge are compiled
    too (about 5%, 10% and 25% above the answer; 0: none), and any that fits
    is named (``also_fits``, and in the verdict); when even the smallest
    batch does not fit, none is. For the first one that
    fits, it and the edge are compiled again with a breakdown, to name the
    instruction at each phase's peak (``jumps``).

    Example:
        >>> from nnx_introspect import rl_max_batch
        >>> from nnx_introspect.examples import LlamaConfig, llama
        >>> small = llama(LlamaConfig(vocab=64, d_model=32, n_layers=2,
        ...                           n_heads=2, d_ff=64))
        >>> found = rl_max_batch(small, "data=2", generations=2, prompt=8,
        ...                      completion=8, max_device_bytes=650_000, probes=0)
        >>> fits = {b: ok for b, _, _, ok in found.points}
        >>> fits[found.most], fits[found.most + found.unit]
        (True, False)
        >>> found.answer.peak_bytes <= 650_000 < found.edge.peak_bytes
        True
    """
    g, count = _checked(generations, probes, options)
    unit = _unit(mesh, g)
    spec = _spec(actor, mesh, unit, (g, prompt, completion), options)
    trials = _Trials(spec)
    highest = _LARGEST // unit * unit
    good, bad = bisect_sizes(trials.fits, unit, unit, highest, unit)
    if good is not None and good + unit == bad:  # the edge found
        for size in probe_sizes(bad, unit, highest, count):
            if size not in trials.points:
                trials.fits(size, probe=True)
    return _result(trials, unit)


def _spec(
    actor: Any,
    mesh: Any,
    batch: int,
    sizes: tuple[int, Any, Any],
    options: dict[str, Any],
) -> RLSpec:
    """The request at the search's first batch: the one it varies.

    Its checks are the first batch's report's, with its messages; an option
    that is not :func:`~nnx_introspect.rl_memory_report`'s is refused as
    that function refuses it.
    """
    fields = {f.name for f in dataclasses.fields(RLSpec) if f.init}
    unknown = sorted(set(options) - (fields - {"actor", "mesh", "_built"}))
    if unknown:
        raise TypeError(f"got an unexpected keyword argument {unknown[0]!r}")
    g, prompt, completion = sizes
    return RLSpec(
        actor,
        mesh,
        batch=batch,
        generations=g,
        prompt=prompt,
        completion=completion,
        **options,
    )


def _checked(generations: Any, probes: Any, options: dict[str, Any]) -> tuple[int, int]:
    """``(generations, probes)`` checked, and the options a search can take."""
    if "batch" in options:
        raise ArgumentError(
            "batch",
            "`batch` is what rl_max_batch searches for; pass the others only.",
        )
    g = _positive(generations, "generations")
    count = _positive(probes, "probes", minimum=0)
    if options.get("topology") is None and options.get("max_device_bytes") is None:
        raise ArgumentError(
            "max_device_bytes",
            "`max_device_bytes` is required: the per-device budget the step must "
            "fit, such as '16GiB' (a `topology` such as 'v5e-8' gives its "
            "device's memory instead).",
        )
    return g, count


@dataclasses.dataclass
class _Trials:
    """The batches of one search compiled so far, each the report's whole step."""

    spec: RLSpec
    reports: dict[int, RLMemoryReport] = dataclasses.field(default_factory=dict)
    points: dict[int, SearchPoint] = dataclasses.field(default_factory=dict)

    @property
    def generations(self) -> int:
        """Completions per prompt, as the search was given them."""
        return int(self.spec.generations)

    def report_at(self, batch: int, **more: Any) -> RLMemoryReport:
        """The whole step at ``batch`` (:func:`~nnx_introspect.measure_rl`)."""
        return measure_rl(dataclasses.replace(self.spec, batch=batch, **more))

    def fits(self, batch: int, probe: bool = False) -> bool:
        """Whether every phase fits at ``batch``, its report and point kept."""
        report = self.reports[batch] = self.report_at(batch)
        phase = report.peak_phase.name
        self.points[batch] = SearchPoint(
            batch,
            report.peak_bytes,
            bool(report.fits()),
            phase,
            _temporaries(report, phase),
            _cached(report),
            probe,
        )
        return self.points[batch].fits

    def explain(self, batch: int) -> PeakAt | None:
        """Where the phase that sets ``batch``'s peak peaks."""
        if self.spec.breakdown:
            found = self.reports[batch].breakdowns
        else:  # compiled again, each phase's peak broken down
            found = self.report_at(batch, breakdown=True).breakdowns
        return peak_at(found.get(self.points[batch].program))


def _result(trials: _Trials, unit: int) -> RLBatchSearch:
    """The search's record: every compile, the answer, the edge, the jumps."""
    points, reports = trials.points, trials.reports
    most, edge = edge_of(points.values())
    first = next(iter(reports.values()))
    every = bool(trials.spec.breakdown)
    return RLBatchSearch(
        target=first.target,
        mesh_axes=first.mesh_axes,
        topology=first.topology,
        generations=trials.generations,
        prompt=first.prompt,
        completion=first.completion,
        unit=unit,
        most=most,
        points=tuple(
            (b, p.peak_bytes, p.program, p.fits) for b, p in sorted(points.items())
        ),
        budget=first.budget,
        answer=reports.get(most),
        edge=None if edge is None else reports[edge],
        tried=tuple(points[b] for b in sorted(points)),
        jumps=explain_jumps(find_jumps(points.values()), trials.explain, every=every),
    )


def _temporaries(report: RLMemoryReport, phase: str) -> int | None:
    """The temporaries of ``phase``'s program (XLA's), or ``None`` where not read."""
    if phase in ("prefill", "decode"):
        program = getattr(report.programs.get("rollout"), phase, None)
    else:
        program = report.programs.get(phase)
    memory = getattr(program, "memory", None)
    temp = getattr(memory, "temp_bytes", None)
    return temp if isinstance(temp, int) else None


def _cached(report: RLMemoryReport) -> bool | None:
    """Whether every phase's program came from the cache (``None``: not known)."""
    found: list[Any] = []
    for name, program in report.programs.items():
        if name == "rollout":
            found += [getattr(program, p, None) for p in ("prefill", "decode")]
        else:
            found.append(getattr(program, "compilation", None))
    if not found or any(p is None or not hasattr(p, "cached") for p in found):
        return None
    return all(p.cached is not None for p in found)


def _positive(value: Any, name: str, minimum: int = 1) -> int:
    try:
        return as_int(value, name, minimum=minimum)
    except TypeError as error:
        raise ArgumentError(name, str(error)) from None

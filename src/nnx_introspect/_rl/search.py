"""The most prompts per GRPO step that fit: :func:`rl_max_batch`.

A search over ``batch`` (prompts per step) with everything else fixed, each
value tried being :func:`~nnx_introspect.rl_memory_report`'s whole step at it
(every phase compiled; the value fits when every phase fits). Values are
multiples of the smallest batch whose ``batch x generations`` sequences split
evenly over the mesh's data-parallel axes; the search doubles, then bisects
(:func:`~nnx_introspect._search.sizes.bisect_sizes`, the batch search's), until a
compiled value that fits and the next one, compiled, that does not.
"""

import dataclasses
import math
from typing import Any

from nnx_introspect._accelerators import Budget
from nnx_introspect._render import Report, Table, format_bytes
from nnx_introspect._rl.api import rl_memory_report
from nnx_introspect._rl.report import RLMemoryReport
from nnx_introspect._search import MAX_COMPILES, bisect_sizes
from nnx_introspect._serve import TENSOR_PARALLEL_AXES
from nnx_introspect._typing import ArgumentError, as_int, typechecked

__all__ = ["RLBatchSearch", "rl_max_batch"]

_LARGEST = 1 << 20
"""The largest batch a search doubles towards."""


@dataclasses.dataclass(frozen=True)
class RLBatchSearch(Report):
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
        batch: The answer: the largest batch tried that fits (0: none does).
        points: ``(batch, peak bytes, the phase that sets it, fits)`` of every
            value compiled, by batch.
        budget: The budget of one device.
        answer: The report at :attr:`batch` (``None`` when none fits).
        edge: The report one step above (``None`` when the search stopped at
            its largest batch).

    Example:
        >>> from nnx_introspect._accelerators.budget import Budget
        >>> found = RLBatchSearch("m", (("data", 2),), None, 4, 8, 8, 1, 3,
        ...                       ((3, 90, "train", True), (4, 120, "train", False)),
        ...                       Budget(100, "the budget given"))
        >>> found.ok, found.verdict
        (True, 'Most prompts per step that fit: 3 (x 4 generations = 12 \
completions): peak 90 B per device of a 100 B budget, set by train; 4 does not \
fit (120 B, set by train)')
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
    batch: int
    points: tuple[tuple[int, int, str, bool], ...]
    budget: Budget
    answer: RLMemoryReport | None = dataclasses.field(default=None, compare=False)
    edge: RLMemoryReport | None = dataclasses.field(default=None, compare=False)

    @property
    def ok(self) -> bool:
        """Whether any batch fits."""
        return self.batch > 0

    @property
    def compiles(self) -> int:
        """How many steps were compiled (each: every phase's program)."""
        return len(self.points)

    @property
    def verdict(self) -> str:
        """The answer in one line, with the edge."""
        budget = format_bytes(self.budget.bytes or 0)
        by = {b: (peak, phase, fits) for b, peak, phase, fits in self.points}
        above = min((b for b in by if b > self.batch and not by[b][2]), default=None)
        edge = ""
        if above is not None:
            peak, phase, _ = by[above]
            edge = f"; {above} does not fit ({format_bytes(peak)}, set by {phase})"
        if not self.ok:
            return (
                f"No batch fits: even {self.unit} prompts x {self.generations} "
                f"generations exceed the {budget} budget per device{edge}"
            )
        peak, phase, _ = by[self.batch]
        return (
            f"Most prompts per step that fit: {self.batch} (x {self.generations} "
            f"generations = {self.batch * self.generations} completions): peak "
            f"{format_bytes(peak)} per device of a {budget} budget, set by "
            f"{phase}{edge}"
        )

    def _gap(self) -> tuple[str, ...]:
        """Why the edge is more than one step above the answer, if it is."""
        above = [b for b, _, _, fits in self.points if b > self.batch and not fits]
        if not above or min(above) - self.batch <= self.unit:
            return ()
        return (
            f"The search stopped after {MAX_COMPILES} compiles: the batches "
            f"between {self.batch} and {min(above)} were not compiled.",
        )

    def table(self) -> Table:
        """Every batch compiled: its completions, peak, phase and verdict."""
        mesh = ",".join(f"{a}={s}" for a, s in self.mesh_axes)
        rows = tuple(
            (
                str(b),
                str(b * self.generations),
                format_bytes(peak),
                phase,
                "fits" if fits else "does NOT fit",
            )
            for b, peak, phase, fits in self.points
        )
        notes = (
            "Each row is one GRPO step compiled at that batch: every phase's "
            "program, the roles resident beside it (rl_memory_report); it fits "
            "when every phase does.",
            f"Batches tried are multiples of {self.unit}: the sequences split "
            "over the mesh's data-parallel axes.",
            *([f"Budget: {self.budget.basis}."] if self.budget.basis else []),
            *self._gap(),
        )
        where = self.topology or "this process's devices"
        return Table(
            title=(
                f"Most prompts per GRPO step of {self.target} on {mesh} "
                f"({where}): {self.generations} generations, prompt "
                f"{self.prompt}, completion {self.completion}"
            ),
            columns=("batch", "completions", "peak per device", "set by", ""),
            rows=rows,
            notes=notes,
            lead=(self.verdict,),
            emphasis=(str(self.batch),),
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
            "batch": self.batch,
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
    **options: Any,
) -> RLBatchSearch:
    """The most prompts per GRPO step that fit, and the compiled edge above.

    Takes :func:`~nnx_introspect.rl_memory_report`'s keyword arguments but
    ``batch`` (``reference``, ``lora``, ``optimizer``, ``rollout_weights``,
    ``kv_cache``, ``topology``, ``max_device_bytes``, ...); a budget is
    needed. Every batch tried is that report's whole step; the answer is a
    compiled batch that fits, and the next batch the mesh can split, compiled
    too, does not (unless the search reached its largest batch, 2**20).

    Example:
        >>> from nnx_introspect import rl_max_batch
        >>> from nnx_introspect.examples import LlamaConfig, llama
        >>> small = llama(LlamaConfig(vocab=64, d_model=32, n_layers=2,
        ...                           n_heads=2, d_ff=64))
        >>> found = rl_max_batch(small, "data=2", generations=2, prompt=8,
        ...                      completion=8, max_device_bytes=650_000)
        >>> fits = {b: ok for b, _, _, ok in found.points}
        >>> fits[found.batch], fits[found.batch + found.unit]
        (True, False)
        >>> found.answer.peak_bytes <= 650_000 < found.edge.peak_bytes
        True
    """
    if "batch" in options:
        raise ArgumentError(
            "batch",
            "`batch` is what rl_max_batch searches for; pass the others only.",
        )
    g = _positive(generations, "generations")
    if options.get("topology") is None and options.get("max_device_bytes") is None:
        raise ArgumentError(
            "max_device_bytes",
            "`max_device_bytes` is required: the per-device budget the step must "
            "fit, such as '16GiB' (a `topology` such as 'v5e-8' gives its "
            "device's memory instead).",
        )
    unit = _unit(mesh, g)
    reports: dict[int, RLMemoryReport] = {}

    def fits(batch: int) -> bool:
        report = rl_memory_report(
            actor,
            mesh,
            batch=batch,
            generations=g,
            prompt=prompt,
            completion=completion,
            **options,
        )
        reports[batch] = report
        return bool(report.fits())

    good, bad = bisect_sizes(fits, unit, unit, _LARGEST // unit * unit, unit)
    first = next(iter(reports.values()))
    points = tuple(
        (b, r.peak_bytes, r.peak_phase.name, bool(r.fits()))
        for b, r in sorted(reports.items())
    )
    return RLBatchSearch(
        target=first.target,
        mesh_axes=first.mesh_axes,
        topology=first.topology,
        generations=g,
        prompt=first.prompt,
        completion=first.completion,
        unit=unit,
        batch=good or 0,
        points=points,
        budget=first.budget,
        answer=None if good is None else reports[good],
        edge=None if bad is None else reports[bad],
    )


def _positive(value: Any, name: str) -> int:
    try:
        return as_int(value, name, minimum=1)
    except TypeError as error:
        raise ArgumentError(name, str(error)) from None

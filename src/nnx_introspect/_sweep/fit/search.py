""":func:`fit_step`: the fastest configuration of the user's step that fits.

A configuration is a mesh and one rung of each ladder
(:mod:`~nnx_introspect._sweep.fit.ladders`), compiled in rounds on an
executor, each round chosen from what the last one showed:

1. every mesh as given (no remat, one microbatch), with a breakdown: a mesh
   that fits here needs nothing (every rung only adds time), and the
   breakdown of the first that does not names the remat candidates (the
   repeated module classes holding the kept activations, outermost first);
2. the remat ladder: each candidate under each policy, most saved first
   (``dots_saveable``, ``dots_with_no_batch_dims_saveable``,
   ``nothing_saveable``; the host offload policy for a named topology);
3. the microbatch ladder: for each configuration that does not fit, the
   fewest microbatches predicted to fit (the kept activations fall as 1/k),
   doubled while it does not.

Memory falls and time rises along every ladder, so a configuration is not
compiled when one of the same mesh no further along any ladder already fits,
or when its start on the ladder is already estimated slower than a fitting
configuration (its point estimate above the fit's by more than the calibrated
error; the roofline's ranges apart where there is no point estimate); its row
says why. A search whose executor breaks (a worker
process died) stops, and its report is a failure naming the cause.
"""

import concurrent.futures
import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any, Unpack

from flax import nnx

from nnx_introspect._accelerators import resolve_topology
from nnx_introspect._mesh import MeshLike
from nnx_introspect._render import batch_str
from nnx_introspect._step import (
    BatchLike,
    StepMemoryReport,
    StepOptions,
    StepSpec,
    as_remat,
    measure_step,
)
from nnx_introspect._sweep.batch.search import max_batch
from nnx_introspect._sweep.fit.crash import crash_cause
from nnx_introspect._sweep.fit.ladders import (
    POLICY_LADDER,
    Config,
    Ladder,
    MicrobatchLadder,
    Remat,
    RematCandidate,
    RematLadder,
    candidates_from,
    dominates,
)
from nnx_introspect._sweep.fit.report import (
    FitRow,
    FitSearch,
    speed_key,
    surely_slower,
)
from nnx_introspect._sweep.mesh_comparison.api import checked_candidates, search_probe
from nnx_introspect._sweep.mesh_comparison.arguments import (
    check_executor,
)
from nnx_introspect._sweep.mesh_comparison.candidates import plan_check
from nnx_introspect._sweep.mesh_comparison.pool import cpus, default_pool, stop_pool
from nnx_introspect._sweep.mesh_comparison.rows import MeshAxes, plural
from nnx_introspect._text import error_line
from nnx_introspect._typing import ArgumentError, IntLike, typechecked
from nnx_introspect._xla import start_backends_quietly

__all__ = ["POLICY_LADDER", "fit_step"]

MAX_REMAT_CANDIDATES = 3
"""The most module classes the search rematerialises, each under every policy."""


@typechecked
def fit_step(
    target: StepSpec | nnx.Module | Callable[..., Any] | str,
    meshes: str | Sequence[MeshLike],
    batch: BatchLike | None = None,
    /,
    *,
    executor: object = None,
    max_workers: IntLike | None = None,
    progress: Callable[[int, int, FitRow], object] | None = None,
    cache: bool = True,
    **options: Unpack[StepOptions],
) -> FitSearch:
    """The fastest configuration of one training step that fits the budget.

    Compiles the step (as :func:`~nnx_introspect.step_memory_report`) for
    meshes x remat choices x microbatch counts, in stages that each decide
    the next (see the module's description): the given step on every mesh
    first, then the layer to rematerialise under each
    ``jax.checkpoint_policies`` policy, then the fewest microbatches
    predicted to fit. A configuration that cannot beat one already found is
    not compiled, and its row says why. Every compile runs on ``executor``
    (default: a local process pool), as in
    :func:`~nnx_introspect.compare_meshes`.

    Args:
        target: The step's :class:`~nnx_introspect.StepSpec` alone (then
            ``batch`` is left out; its mesh is replaced by each candidate's,
            its ``remat`` is the class to rematerialise, and ``options``
            given replace its fields), or the model by name
            (``"package.module:factory"``): each compile runs in a worker
            that rebuilds it.
        meshes: ``"auto"`` (every factorisation of the devices over the axes
            the model names), one mesh (``"fsdp=2,tp=4"``, a mapping) or a
            sequence of them.
        batch: See :class:`~nnx_introspect.StepSpec` (with a target only).
        executor: A ``concurrent.futures.Executor``; default: a local pool.
        max_workers: The default pool's size (default: the CPUs).
        progress: Called with ``(done, submitted, row)`` after each compile.
        cache: Read each program compiled before from the cache of compile
            results (see :func:`~nnx_introspect.step_memory_report`).
        **options: The step's options (:class:`~nnx_introspect.StepOptions`),
            each the :class:`~nnx_introspect.StepSpec` field of its name, but
            for what the search chooses: ``microbatches`` must be 1 and
            ``breakdown`` is ignored (the search takes the breakdowns it
            needs). ``loss`` is not
            ``None`` (the options change the backward pass); ``topology``
            ranks the rows by the estimated step time (the point estimate,
            ties within its calibrated error; without a topology, by FLOPs)
            and gives a budget by default (else ``max_device_bytes``);
            ``remat`` names the module class to rematerialise (its policy is
            the search's; default: the one whose ``__call__`` holds the most
            activations kept for the backward pass in the breakdown of the
            first mesh that does not fit).

    Returns:
        A frozen :class:`FitSearch`: every row, the chosen configuration and
        the change to make, written as code.

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: An :class:`~nnx_introspect.ArgumentError` naming the
            argument: no budget, ``loss=None``, a ``remat`` class the model
            does not have, a target that cannot be sent by name...

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from concurrent.futures import ThreadPoolExecutor
        >>> x = jax.ShapeDtypeStruct((8, 3), jnp.float32)
        >>> with ThreadPoolExecutor(1) as pool:
        ...     search = fit_step("nnx_introspect.examples:two_layer", "data=8", x,
        ...                       max_device_bytes="1MiB", executor=pool)
        >>> search.ok, search.change, search.compiles
        (True, 'nothing: the step fits as it is (on mesh data=8)', 1)
    """
    began = time.perf_counter()
    pool_size = check_executor(executor, max_workers)
    start_backends_quietly()  # "auto" and the checks count this process's devices
    probe, topology, network = search_probe(target, batch, options, caller="fit_step")
    if probe.microbatches != 1:
        raise ArgumentError(
            "microbatches",
            f"`microbatches` is {probe.microbatches}: `fit_step` chooses the "
            "microbatches itself. Leave it at 1.",
        )
    remat, probe = probe.remat, dataclasses.replace(probe, remat=None, breakdown=False)
    spec, candidates, target_name = _checked(probe, meshes, topology, network)
    layer = as_remat(remat, spec.model)[0][0] if remat else None
    budget = spec.budget.bytes
    assert budget is not None  # checked
    own = None
    if isinstance(executor, concurrent.futures.Executor):
        pool: concurrent.futures.Executor = executor
        described = type(executor).__name__
    else:
        workers = pool_size or cpus()
        pool = own = default_pool(workers, None if topology else spec.num_devices)
        described = f"a spawn process pool of {plural(workers, 'worker')}"
    search = _Search(spec, budget, pool, progress, cache)
    search.own_pool = own is not None
    try:
        search.run(candidates, layer)
    except BaseException:
        if own is not None:
            stop_pool(own)
        raise
    if own is not None:
        if search.crash is None:
            own.shutdown(wait=True)
        else:
            stop_pool(own)
    found = search.result(target_name, described, time.perf_counter() - began)
    return _with_smallest_batch(found, spec, began)


def _checked(
    probe: StepSpec,
    meshes: Any,
    topology: str | None,
    network: Any,
) -> tuple[StepSpec, list[MeshAxes], str]:
    """``(the spec on the first mesh, the candidate meshes, the target's name)``.

    Every check before a compile: a loss, names a worker can rebuild, what
    pickles, the meshes, a budget.
    """
    if probe.loss is None:
        raise ArgumentError(
            "loss",
            "`loss` is None, which compiles the forward only, and `fit_step` "
            "changes the backward pass (remat, microbatches). Pass a loss.",
        )
    if isinstance(meshes, str) and meshes.strip().lower() != "auto":
        meshes = [meshes]
    devices = None if topology is None else resolve_topology(topology).devices
    spec, _, candidates, target_name = checked_candidates(
        probe, meshes, topology, devices, network
    )
    if spec.budget.bytes is None:
        raise ArgumentError(
            "max_device_bytes",
            "`max_device_bytes` is None and there is no `topology`: `fit_step` "
            "needs a budget to fit. Pass `max_device_bytes` (such as '80GiB') or "
            "a TPU or GPU `topology`.",
        )
    return spec, candidates, target_name


def _with_smallest_batch(found: FitSearch, spec: StepSpec, began: float) -> FitSearch:
    """Nothing fits: the largest batch that fits with the smallest peak's options."""
    small = found.smallest
    if small is None or found.failure is not None:
        return found
    bigger = max_batch(
        spec.target,
        dict(small.mesh),
        spec.batch,
        loss=spec.loss,
        optimizer=spec.optimizer,
        rules=spec.rules,
        logical_rules=spec.logical_rules,
        batch_spec=spec.batch_spec,
        topology=spec.topology,
        max_device_bytes=found.max_device_bytes,
        trace_as_target=spec.trace_as_target,
        remat=small.remat or None,
        microbatches=small.microbatches,
    )
    return dataclasses.replace(
        found,
        smallest_batch=bigger.best,
        compiles=found.compiles + bigger.compiles,
        seconds=time.perf_counter() - began,
    )


class _CrashedError(Exception):
    """The executor broke: no further compile can run."""


class _Search:
    """The search's state: its rows, its reports, its compiles, its ladders."""

    def __init__(
        self,
        spec: StepSpec,
        budget: int,
        pool: concurrent.futures.Executor,
        progress: Callable[[int, int, FitRow], object] | None,
        cache: bool = True,
    ) -> None:
        self.spec, self.budget, self.pool, self.progress = spec, budget, pool, progress
        self.cache = cache
        self.rows: list[FitRow] = []
        self.found: dict[Config, tuple[FitRow, StepMemoryReport | None]] = {}
        self.specs: dict[MeshAxes, StepSpec] = {}
        self.compiles = self.submitted = 0
        self.ladders: tuple[Ladder, ...] = (RematLadder([], ()), MicrobatchLadder())
        self.candidates: list[RematCandidate] = []
        self.crash: str | None = None
        self.own_pool = False

    # -- compiling -------------------------------------------------------

    def compile(self, configs: list[Config], breakdown: bool = False) -> None:
        """Compile ``configs`` on the pool (all at once), their rows added.

        Raises :class:`_CrashedError` (after adding every row) when the pool broke.
        """
        futures: list[concurrent.futures.Future[StepMemoryReport] | None] = []
        for config in configs:
            spec = dataclasses.replace(
                self.specs[config.mesh],
                remat=config.remat,
                microbatches=config.microbatches,
                breakdown=breakdown,
            )
            try:
                futures.append(self.pool.submit(measure_step, spec, cache=self.cache))
            except concurrent.futures.BrokenExecutor as error:
                self._broke(error)
                futures.append(None)
        self.submitted += sum(f is not None for f in futures)
        for config, future in zip(configs, futures, strict=True):
            report: StepMemoryReport | None = None
            try:
                if future is None:
                    raise _CrashedError(self.crash)
                report = future.result()
            except concurrent.futures.BrokenExecutor as error:
                self._broke(error)
                row = FitRow(*_fields(config), "failed", why=self.crash)
            except Exception as error:
                row = FitRow(*_fields(config), "failed", why=error_line(error))
            else:
                row = _row(config, report, self.budget)
            self.compiles += future is not None
            self._add(config, row, report)
            if self.progress is not None and future is not None:
                self.progress(self.compiles, self.submitted, row)
        if self.crash is not None:
            raise _CrashedError(self.crash)

    def _broke(self, error: BaseException) -> None:
        if self.crash is None:
            self.crash = crash_cause(error, self.own_pool)

    def _add(
        self, config: Config, row: FitRow, report: StepMemoryReport | None = None
    ) -> None:
        if config in self.found:
            return
        self.rows.append(row)
        self.found[config] = (row, report)

    def skip(self, config: Config, why: str) -> None:
        """A row for a configuration not compiled, and why."""
        self._add(config, FitRow(*_fields(config), "not compiled", why))

    # -- the stages ------------------------------------------------------

    def run(self, candidates: Sequence[MeshAxes], layer: str | None) -> None:
        """The given step on every mesh, then each ladder in turn."""
        try:
            frontier = [Config(m) for m in self._planned(candidates)]
            self.compile(frontier, breakdown=True)
            self.candidates = self._candidates(frontier, layer)
            offload = (
                "host offload is tried for a named GPU or TPU topology only"
                if self.spec.topology is None
                else None
            )
            policies = tuple(p for p in POLICY_LADDER if p is not None)
            self.ladders = (
                RematLadder(self.candidates, policies, offload),
                MicrobatchLadder(),
            )
            for ladder in self.ladders:
                frontier = self.climb(ladder, frontier)
        except _CrashedError:
            return

    def climb(self, ladder: Ladder, frontier: list[Config]) -> list[Config]:
        """Climb ``ladder`` from each configuration of ``frontier`` that does not fit.

        Each round proposes the next rungs; a proposal is not compiled (its
        row says why) when a configuration no further along any ladder fits
        already, or when its start on this ladder is estimated slower than the
        best fit; unless the ladder's rungs compile side by side, it waits a
        round when another proposal of this round is no further along any
        ladder (if that one fits, it is not needed). Returns
        ``frontier`` and every configuration compiled.
        """
        leaves = list(frontier)
        for round_ in range(ladder.rounds):
            proposals: list[tuple[Config, Config]] = []
            for config in frontier:
                proposals += self._proposals(ladder, config, first_round=round_ == 0)
            news = [new for _, new in proposals]
            waiting = [
                (origin, new)
                for origin, new in proposals
                if not ladder.side_by_side
                and any(dominates(self.ladders, other, new) for other in news)
            ]
            run = [new for origin, new in proposals if (origin, new) not in waiting]
            if not run:
                break
            self.compile(run)
            leaves += run
            frontier = run + [origin for origin, _ in waiting]
        return leaves

    def _proposals(
        self, ladder: Ladder, config: Config, first_round: bool
    ) -> list[tuple[Config, Config]]:
        """``(config, next)`` for each rung after ``config``'s worth compiling."""
        row = self.found[config][0]
        if row.status not in ("fits", "does not fit"):
            return []
        rungs = ladder.after(self, config)
        first = dataclasses.replace(config, **{ladder.field: ladder.first})
        start = self.found.get(first)
        best = self._best()
        out = []
        for rung, why in rungs:
            new = dataclasses.replace(config, **{ladder.field: rung})
            if new in self.found:
                continue
            if why is None and row.status == "fits":
                if not first_round:
                    continue
                why = f"{row.options} fits: each rung further along only adds time"
            if why is None:
                why = self._pruned(new, start[0] if start else row, best)
            if why is None:
                out.append((config, new))
            else:
                self.skip(new, why)
        return out

    def _pruned(self, new: Config, start: FitRow, best: FitRow | None) -> str | None:
        """Why ``new`` cannot beat a fit found, or ``None``."""
        for other, (row, _) in self.found.items():
            if row.status == "fits" and dominates(self.ladders, other, new):
                return (
                    f"{row.options} already fits: memory falls and time rises "
                    "along every ladder"
                )
        if surely_slower(start, best):
            assert best is not None
            return (
                f"{start.options} is estimated slower than {best.name} with "
                f"{best.options}, which fits; climbing further only adds time"
            )
        return None

    def _planned(self, candidates: Sequence[MeshAxes]) -> list[MeshAxes]:
        """The meshes the planner accepts; a row for each it rejects."""
        alive = []
        for mesh in candidates:
            try:
                spec = dataclasses.replace(self.spec, mesh=dict(mesh))
            except ArgumentError as error:
                self.skip(Config(mesh), str(error))
                continue
            reason, _ = plan_check(spec, self.budget)
            if reason is not None:
                self.skip(Config(mesh), f"rejected by the planner: {reason}")
                continue
            self.specs[mesh] = spec
            alive.append(mesh)
        return alive

    def _candidates(
        self, given: list[Config], layer: str | None
    ) -> list[RematCandidate]:
        """The classes to rematerialise: the one given, else the breakdown's."""
        if layer is not None:
            modules = nnx.iter_modules(self.spec.model)
            count = sum(1 for _, m in modules if type(m).__name__ == layer)
            return [RematCandidate(layer, 0, count, "the layer was given (`remat`)")]
        for config in given:
            row, report = self.found[config]
            if row.status == "does not fit" and _has_breakdown(report):
                assert report is not None
                found = candidates_from(report.breakdown, self.spec.model)
                return found[:MAX_REMAT_CANDIDATES]
        return candidates_from(None, self.spec.model)[:MAX_REMAT_CANDIDATES]

    def _best(self) -> FitRow | None:
        fitting = [r for r in self.rows if r.status == "fits"]
        return min(fitting, key=speed_key) if fitting else None

    def result(self, target: str, executor: str, seconds: float) -> FitSearch:
        """The search's report."""
        best = self._best()
        compiled = [r for r in self.rows if r.peak_bytes is not None]
        smallest = (
            None
            if best is not None or not compiled
            else min(compiled, key=lambda r: r.peak_bytes or 0)
        )
        failed = [r for r in self.rows if r.status == "failed"]
        failure = self.crash
        if failure is None and failed and not compiled:
            failure = f"every compile failed; the first: {failed[0].why}"
        chosen_layer = best.remat[0][0] if best is not None and best.remat else None
        basis = {c.name: c.basis for c in self.candidates}
        layer = chosen_layer or (self.candidates[0].name if self.candidates else None)
        return FitSearch(
            target=target,
            batch=tuple(batch_str(b) for b in self.spec.batch),
            topology=self.spec.topology,
            max_device_bytes=self.budget,
            budget_basis=self.spec.budget.basis or "the budget given",
            rows=tuple(self.rows),
            chosen=best,
            layer=layer,
            layer_basis=basis.get(layer or "", "no module class repeats"),
            compiles=self.compiles,
            seconds=seconds,
            executor=executor,
            smallest=smallest,
            candidates=tuple((c.name, c.basis) for c in self.candidates),
            failure=failure,
        )


def _fields(config: Config) -> tuple[MeshAxes, Remat, int]:
    """A row's first three fields."""
    return config.mesh, config.remat, config.microbatches


def _row(config: Config, report: StepMemoryReport, budget: int) -> FitRow:
    estimate = report.roofline
    return FitRow(
        *_fields(config),
        "fits" if report.fits(budget) else "does not fit",
        peak_bytes=report.peak_bytes,
        seconds=None
        if estimate is None
        else (estimate.low_seconds, estimate.high_seconds),
        mfu_ceiling=None if estimate is None else estimate.mfu_ceiling,
        flops=report.flops,
        estimate=None if estimate is None else estimate.seconds,
        error=None if estimate is None else estimate.error,
        mfu=None if estimate is None else estimate.mfu,
    )


def _has_breakdown(report: StepMemoryReport | None) -> bool:
    return report is not None and report.breakdown is not None

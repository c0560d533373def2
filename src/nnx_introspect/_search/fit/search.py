""":func:`fit_step`: the fastest configuration of the user's step that fits.

Candidates are meshes x remat choices x microbatch counts, compiled in stages
on an executor, each stage chosen from what the last one showed:

1. every mesh as given (no remat, one microbatch), with a breakdown: a mesh
   that fits here needs nothing (every option only adds time), and the
   breakdown of the first that does not names the layer to rematerialise;
2. that layer under each policy, most saved first (``dots_saveable``,
   ``dots_with_no_batch_dims_saveable``, ``nothing_saveable``; the host
   offload policy for a named topology);
3. for each policy that does not fit, the fewest microbatches predicted to fit
   (the kept activations fall as 1/k), doubled while it does not.

Memory falls and time rises along both ladders, so a configuration is not
compiled when one of the same mesh with no more recompute and no more
microbatches already fits, or when its mesh and policy are already estimated
slower than a fitting configuration; its row says why.
"""

import concurrent.futures
import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

import optax
from flax import nnx

from nnx_introspect._accelerators.topology import resolve_topology
from nnx_introspect._mesh import LogicalRulesLike, MeshLike, RulesLike
from nnx_introspect._render.formats import batch_str, error_line
from nnx_introspect._search.batch import max_batch
from nnx_introspect._search.fit.layers import KEPT, layer_to_remat
from nnx_introspect._search.fit.report import FitRow, FitSearch, _speed
from nnx_introspect._search.meshes.api import checked_candidates
from nnx_introspect._search.meshes.arguments import (
    _check_executor,
)
from nnx_introspect._search.meshes.candidates import _PROBE_AXIS, _plan
from nnx_introspect._search.meshes.pool import _cpus, _default_pool, _stop_pool
from nnx_introspect._search.meshes.report import MeshAxes, _plural
from nnx_introspect._step.inputs import BatchLike, LossLike, SpecsLike
from nnx_introspect._step.measure import measure_step
from nnx_introspect._step.options import as_remat
from nnx_introspect._step.report import StepMemoryReport
from nnx_introspect._step.spec import StepSpec
from nnx_introspect._typing import ArgumentError, IntLike, typechecked
from nnx_introspect._xla.native_log import start_backends_quietly

__all__ = ["POLICY_LADDER", "fit_step"]

POLICY_LADDER: tuple[str | None, ...] = (
    None,
    "dots_saveable",
    "dots_with_no_batch_dims_saveable",
    "nothing_saveable",
)
"""Remat policies fastest first (most saved): memory falls along it."""

_OFFLOAD = "offload_dot_with_no_batch_dims"

_Config = tuple[MeshAxes, str | None, int]
"""``(mesh, policy or None for no remat, microbatches)``."""


@typechecked
def fit_step(
    target: nnx.Module | Callable[..., Any] | str,
    meshes: str | Sequence[MeshLike],
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
    remat: str | None = None,
    executor: object = None,
    max_workers: IntLike | None = None,
    trace_as_target: bool = True,
    network_bytes_per_second: IntLike | str | None = None,
    progress: Callable[[int, int, FitRow], object] | None = None,
    tokens_per_step: IntLike | None = None,
    cache: bool = True,
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
        target: The model by name (``"package.module:factory"``): each
            compile runs in a worker that rebuilds it.
        meshes: ``"auto"`` (every factorisation of the devices over the axes
            the model names), one mesh (``"fsdp=2,tp=4"``, a mapping) or a
            sequence of them.
        batch: See :class:`~nnx_introspect.StepSpec`.
        loss: A loss (not ``None``: the options change the backward pass).
        optimizer: See :class:`~nnx_introspect.StepSpec`.
        rules: See :class:`~nnx_introspect.StepSpec`.
        logical_rules: See :class:`~nnx_introspect.StepSpec`.
        batch_spec: See :class:`~nnx_introspect.StepSpec`.
        topology: See :class:`~nnx_introspect.StepSpec`; with it the rows are
            ranked by the estimated step time, without it by FLOPs.
        max_device_bytes: The budget (a topology gives one by default).
        remat: The module class to rematerialise; default: the one whose
            ``__call__`` holds the most activations kept for the backward pass
            in the breakdown of the first mesh that does not fit.
        executor: A ``concurrent.futures.Executor``; default: a local pool.
        max_workers: The default pool's size (default: the CPUs).
        trace_as_target: See :class:`~nnx_introspect.StepSpec`.
        network_bytes_per_second: See :class:`~nnx_introspect.StepSpec`.
        progress: Called with ``(done, submitted, row)`` after each compile.
        tokens_per_step: See :class:`~nnx_introspect.StepSpec`.
        cache: Read each program compiled before from the cache of compile
            results (see :func:`~nnx_introspect.step_memory_report`).

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
    pool_size = _check_executor(executor, max_workers)
    start_backends_quietly()  # "auto" and the checks count this process's devices
    spec = StepSpec(
        target,
        {_PROBE_AXIS: 1},
        batch,
        loss=loss,
        optimizer=optimizer,
        rules=rules,
        logical_rules=logical_rules,
        batch_spec=batch_spec,
        max_device_bytes=max_device_bytes,
        trace_as_target=trace_as_target,
        tokens_per_step=tokens_per_step,
    )
    spec, candidates, target_name = _checked(
        spec, meshes, topology, network_bytes_per_second
    )
    layer = None if remat is None else as_remat(remat, spec.model)[0][0]
    budget = spec.budget.bytes
    assert budget is not None  # checked
    own = None
    if isinstance(executor, concurrent.futures.Executor):
        pool: concurrent.futures.Executor = executor
        described = type(executor).__name__
    else:
        workers = pool_size or _cpus()
        pool = own = _default_pool(workers, None if topology else spec.num_devices)
        described = f"a spawn process pool of {_plural(workers, 'worker')}"
    search = _Search(spec, budget, pool, progress, cache)
    try:
        search.run(candidates, layer)
    except BaseException:
        if own is not None:
            _stop_pool(own)
        raise
    if own is not None:
        own.shutdown(wait=True)
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
    if small is None:
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


class _Search:
    """The staged search's state: its rows, its reports, its compiles."""

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
        self.found: dict[_Config, tuple[FitRow, StepMemoryReport | None]] = {}
        self.specs: dict[MeshAxes, StepSpec] = {}
        self.compiles = self.submitted = 0
        self.layer: str | None = None
        self.layer_basis = "the layer was given (`remat`)"

    # -- compiling -------------------------------------------------------

    def _remat(self, policy: str | None) -> tuple[tuple[str, str], ...]:
        if policy is None or self.layer is None:
            return ()
        return ((self.layer, policy),)

    def compile(self, configs: list[_Config], breakdown: bool = False) -> None:
        """Compile ``configs`` on the pool (all at once), their rows added."""
        futures = []
        for mesh, policy, k in configs:
            spec = dataclasses.replace(
                self.specs[mesh],
                remat=self._remat(policy),
                microbatches=k,
                breakdown=breakdown,
            )
            futures.append(self.pool.submit(measure_step, spec, cache=self.cache))
        self.submitted += len(futures)
        for config, future in zip(configs, futures, strict=True):
            mesh, policy, k = config
            report: StepMemoryReport | None = None
            try:
                report = future.result()
            except Exception as error:
                row = FitRow(
                    mesh, self._remat(policy), k, "failed", why=error_line(error)
                )
            else:
                row = _row(mesh, self._remat(policy), k, report, self.budget)
            self.compiles += 1
            self._add(config, row, report)
            if self.progress is not None:
                self.progress(self.compiles, self.submitted, row)

    def _add(
        self, config: _Config, row: FitRow, report: StepMemoryReport | None = None
    ) -> None:
        self.rows.append(row)
        self.found[config] = (row, report)

    def skip(self, config: _Config, why: str) -> None:
        """A row for a configuration not compiled, and why."""
        mesh, policy, k = config
        self._add(config, FitRow(mesh, self._remat(policy), k, "not compiled", why))

    # -- the stages ------------------------------------------------------

    def run(self, candidates: Sequence[MeshAxes], layer: str | None) -> None:
        """Every stage, in order."""
        alive = self._planned(candidates)
        self.compile([(m, None, 1) for m in alive], breakdown=True)
        failing = [  # a compile that failed is not a step that is too big
            m for m in alive if self.found[(m, None, 1)][0].status == "does not fit"
        ]
        self.layer = layer
        if layer is None:
            self.layer, self.layer_basis = self._choose_layer(failing)
        for mesh in alive:
            if self.found[(mesh, None, 1)][0].status == "fits":
                self._skip_all(
                    mesh, "the mesh fits without options, each of which only adds time"
                )
        failing = self._slower_pruned(failing, None)
        self._policies(failing)
        for _ in range(8):  # each round doubles k: 2**8 microbatches at most
            configs = self._microbatch_round(failing)
            if not configs:
                break
            self.compile(configs)

    def _planned(self, candidates: Sequence[MeshAxes]) -> list[MeshAxes]:
        """The meshes the planner accepts; a row for each it rejects."""
        alive = []
        for mesh in candidates:
            try:
                spec = dataclasses.replace(self.spec, mesh=dict(mesh))
            except ArgumentError as error:
                self.skip((mesh, None, 1), str(error))
                continue
            reason, _ = _plan(spec, self.budget)
            if reason is not None:
                self.skip((mesh, None, 1), f"rejected by the planner: {reason}")
                continue
            self.specs[mesh] = spec
            alive.append(mesh)
        return alive

    def _choose_layer(self, failing: list[MeshAxes]) -> tuple[str | None, str]:
        for mesh in failing:
            report = self.found[(mesh, None, 1)][1]
            if report is not None and report.breakdown is not None:
                return layer_to_remat(self.spec.model, report.breakdown)
        return layer_to_remat(self.spec.model, None)

    def _policies(self, failing: list[MeshAxes]) -> None:
        """Stage 2: the layer under each policy, one microbatch."""
        if self.layer is None:
            return
        configs: list[_Config] = []
        for mesh in failing:
            configs += [(mesh, p, 1) for p in POLICY_LADDER[1:]]
            if self.spec.topology is None:
                self.skip(
                    (mesh, _OFFLOAD, 1),
                    "host offload is tried for a named GPU or TPU topology only",
                )
            else:
                configs.append((mesh, _OFFLOAD, 1))
        self.compile(configs)

    def _best(self) -> FitRow | None:
        fitting = [r for r in self.rows if r.status == "fits"]
        return min(fitting, key=_speed) if fitting else None

    def _slower_pruned(
        self, meshes: list[MeshAxes], policy: str | None
    ) -> list[MeshAxes]:
        """``meshes`` whose given step could still beat the best fit found."""
        best, out = self._best(), []
        for mesh in meshes:
            row = self.found[(mesh, policy, 1)][0]
            if _slower(row, best):
                assert best is not None
                self._skip_all(
                    mesh,
                    f"its fastest configuration is estimated slower than {best.name} "
                    f"with {best.options}, which fits",
                )
            else:
                out.append(mesh)
        return out

    def _skip_all(self, mesh: MeshAxes, why: str) -> None:
        """Rows for the policies of ``mesh`` that stage 2 would compile."""
        if self.layer is None:
            return
        for policy in POLICY_LADDER[1:]:
            if (mesh, policy, 1) not in self.found:
                self.skip((mesh, policy, 1), why)

    def _microbatch_round(self, failing: list[MeshAxes]) -> list[_Config]:
        """Stage 3: for each policy short of the budget, the next k to try.

        Along the policy ladder (fastest first), a policy is tried this round
        only with fewer microbatches than a faster one tried this round: with
        as many or more it would be slower and fit no better. (If the faster
        one does not fit, the next round comes back to it.)
        """
        configs: list[_Config] = []
        best = self._best()
        for mesh in failing:
            ladder = POLICY_LADDER if self.layer is not None else (None,)
            bound = None
            for i, policy in enumerate(ladder):
                config = self._next_k(mesh, policy, ladder[: i + 1], best)
                if config is None or (bound is not None and config[2] >= bound):
                    continue
                configs.append(config)
                bound = config[2]
        return configs

    def _next_k(
        self,
        mesh: MeshAxes,
        policy: str | None,
        cheaper: tuple[str | None, ...],
        best: FitRow | None,
    ) -> _Config | None:
        """The next microbatch count for ``policy`` on ``mesh``, or None."""
        tried = sorted(k for (m, p, k) in self.found if m == mesh and p == policy)
        if not tried:
            return None
        last_row = self.found[(mesh, policy, tried[-1])][0]
        if last_row.status != "does not fit":
            return None
        one = self.found[(mesh, policy, 1)][0]
        k = self._predicted_k(mesh, one, tried[-1])
        if k is None:
            return None
        config = (mesh, policy, k)
        faster = [
            (p, j)
            for (m, p, j), (row, _) in self.found.items()
            if m == mesh and p in cheaper and j <= k and row.status == "fits"
        ]
        if faster:
            p, j = faster[0]
            self.skip(
                config,
                f"{'no remat' if p is None else p} with {j} microbatch"
                f"{'es' if j > 1 else ''} already fits: memory falls and time "
                "rises along both ladders",
            )
            return None
        if _slower(one, best):
            assert best is not None
            self.skip(
                config,
                f"with one microbatch it is estimated slower than {best.name} with "
                f"{best.options}, which fits; more microbatches only add time",
            )
            return None
        return config

    def _predicted_k(self, mesh: MeshAxes, one: FitRow, last: int) -> int | None:
        """The fewest microbatches (> ``last``) predicted to fit, the batch allowing.

        The kept activations fall as 1/k; the rest of the peak stays. A
        policy's kept bytes are its peak minus what the given step's peak
        holds besides its kept activations.
        """
        spec = self.specs[mesh]
        allowed = []
        k = last * 2
        while k <= 1 << 12:
            try:
                dataclasses.replace(spec, microbatches=k)
            except ArgumentError:
                break
            allowed.append(k)
            k *= 2
        if not allowed:
            return None
        base_row, report = self.found[(mesh, None, 1)]
        kept = _kept(report)
        if one.peak_bytes is None or base_row.peak_bytes is None or kept is None:
            return allowed[0]
        rest = base_row.peak_bytes - kept
        kept_here = max(one.peak_bytes - rest, 0)
        for k in allowed:
            if rest + kept_here / k <= self.budget:
                return k
        return allowed[-1]

    def result(self, target: str, executor: str, seconds: float) -> FitSearch:
        """The search's report."""
        best = self._best()
        compiled = [r for r in self.rows if r.peak_bytes is not None]
        smallest = (
            None
            if best is not None or not compiled
            else min(compiled, key=lambda r: r.peak_bytes or 0)
        )
        return FitSearch(
            target=target,
            batch=tuple(batch_str(b) for b in self.spec.batch),
            topology=self.spec.topology,
            max_device_bytes=self.budget,
            budget_basis=self.spec.budget.basis or "the budget given",
            rows=tuple(self.rows),
            chosen=best,
            layer=self.layer,
            layer_basis=self.layer_basis,
            compiles=self.compiles,
            seconds=seconds,
            executor=executor,
            smallest=smallest,
        )


def _row(
    mesh: MeshAxes,
    remat: tuple[tuple[str, str], ...],
    k: int,
    report: StepMemoryReport,
    budget: int,
) -> FitRow:
    estimate = report.roofline
    return FitRow(
        mesh,
        remat,
        k,
        "fits" if report.fits(budget) else "does not fit",
        peak_bytes=report.peak_bytes,
        seconds=None
        if estimate is None
        else (estimate.low_seconds, estimate.high_seconds),
        mfu_ceiling=None if estimate is None else estimate.mfu_ceiling,
        flops=report.flops,
    )


def _kept(report: StepMemoryReport | None) -> int | None:
    if report is None or report.breakdown is None:
        return None
    return sum(r.nbytes for r in report.breakdown.rows if r.kind == KEPT)


def _slower(row: FitRow, best: FitRow | None) -> bool:
    """Whether ``row`` is surely slower than ``best`` (its range above best's)."""
    if best is None or row.seconds is None or best.seconds is None:
        return False
    return row.seconds[0] > best.seconds[1]

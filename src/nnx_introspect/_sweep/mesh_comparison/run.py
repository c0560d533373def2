"""The compiles run: submitted to an executor, collected in order as rows.

One compile of the step's :class:`~nnx_introspect.StepSpec`, varied to the
candidate's mesh, per candidate; its report, its error or
its timeout becomes that candidate's row. An interrupt cancels the compiles
not yet started (and stops the default pool); the same bad-input error from
every compile is raised. While the rows are collected, an optional
``compiling`` callback hears which meshes compile now and how long each
finished compile took (:data:`Compiling`), for a progress line's ETA.
"""

import concurrent.futures
import dataclasses
import time
from collections.abc import Callable
from typing import Any, TypeAlias

from nnx_introspect._step import StepMemoryReport, StepSpec, measure_step
from nnx_introspect._sweep.mesh_comparison.pool import stop_pool
from nnx_introspect._sweep.mesh_comparison.rows import (
    MeshAxes,
    MeshCandidate,
    Outcome,
    error_text,
    mesh_name,
)

Compiling: TypeAlias = Callable[[tuple[str, ...], tuple[float, ...]], object]
"""``compiling(names, seconds)``: the meshes compiling now (``"fsdp=8"``, in the
order given) and the seconds each finished compile took, in the order they
finished. Called once the compiles are submitted and whenever either changes,
from the thread that collects the rows. On a ``ThreadPoolExecutor`` or
``ProcessPoolExecutor`` of ``n`` workers the first ``n`` compiles not finished
are the ones running (each pool takes its calls in order), and a compile's
seconds run from when a worker was free for it; on another executor, the
compiles whose futures say they run, their seconds from submission at worst."""


def _measure_on(
    spec: StepSpec, mesh: dict[str, int], cache: bool = True
) -> StepMemoryReport:
    """``spec`` measured on ``mesh`` (a worker's call; the spec varied there)."""
    return measure_step(dataclasses.replace(spec, mesh=mesh), cache=cache)


class Run:
    """Submitting the compiles and collecting their rows, stopping on interrupt."""

    def __init__(
        self,
        executor: concurrent.futures.Executor,
        own: concurrent.futures.ProcessPoolExecutor | None,
        wait: float | None,
        progress: Callable[[int, int, MeshCandidate | None], object] | None,
        budget: int | None,
        compiling: Compiling | None = None,
    ) -> None:
        self.executor = executor
        self.own = own
        self.wait = wait
        self.progress = progress
        self.budget = budget
        self.compiling = compiling
        self.futures: list[concurrent.futures.Future[Any] | None] = []
        self.errors: list[BaseException | None] = []
        self.names: list[str] = []
        workers = getattr(executor, "_max_workers", None)  # a stdlib pool's size
        standard = (
            concurrent.futures.ThreadPoolExecutor,
            concurrent.futures.ProcessPoolExecutor,
        )
        self.jobs = workers if isinstance(executor, standard) else None
        self.began = time.perf_counter()
        self.started: dict[int, float] = {}
        self.finished: dict[int, float | None] = {}  # None: cancelled
        self.told: tuple[tuple[str, ...], int] | None = None

    def all(
        self,
        spec: StepSpec,
        to_compile: list[tuple[int, MeshAxes, int]],
        cache: bool = True,
    ) -> dict[int, MeshCandidate]:
        """Submit every compile, then wait for each in order: ``{index: row}``.

        Each is ``spec`` on the candidate's mesh (the worker varies it), read
        from the cache of compile results with ``cache``.
        """
        rows: dict[int, MeshCandidate] = {}
        timed_out = False
        try:
            refused: dict[int, str] = {}
            self.names = [mesh_name(mesh) for _, mesh, _ in to_compile]
            self.began = time.perf_counter()
            for k, (_, mesh, _) in enumerate(to_compile):
                try:
                    self.futures.append(
                        self.executor.submit(_measure_on, spec, dict(mesh), cache)
                    )
                except Exception as error:  # a shut-down executor, say
                    self.futures.append(None)
                    refused[k] = error_text(error)
            total = len(to_compile)
            if self.progress is not None:
                self.progress(0, total, None)
            self._tell()
            for k, ((index, mesh, state), future) in enumerate(
                zip(to_compile, self.futures, strict=True), start=1
            ):
                if future is None:
                    self.errors.append(None)
                    row = MeshCandidate(mesh, "failed", refused[k - 1], None, state)
                else:
                    row = self._row(mesh, state, future)
                timed_out |= row.outcome == "timed out"
                rows[index] = row
                if self.progress is not None:
                    self.progress(k, total, row)
        except BaseException:  # KeyboardInterrupt above all: leave nothing running
            self._cancel()
            raise
        if self.own is not None:
            if timed_out:  # a hung compile would hold shutdown(wait=True) forever
                stop_pool(self.own)
            else:
                self.own.shutdown(wait=True)
        _raise_bad_input(self.errors)
        return rows

    def _row(
        self, mesh: MeshAxes, state: int, future: concurrent.futures.Future[Any]
    ) -> MeshCandidate:
        self.errors.append(None)
        try:
            report = self._result(future)
        except TimeoutError as error:  # concurrent.futures.TimeoutError since 3.11
            if future.done():  # the compile itself raised a TimeoutError
                return MeshCandidate(mesh, "failed", error_text(error), None, state)
            future.cancel()
            return MeshCandidate(
                mesh, "timed out", f"after {self.wait:g} s", plan_bytes=state
            )
        except concurrent.futures.CancelledError:
            return MeshCandidate(mesh, "failed", "cancelled", plan_bytes=state)
        except Exception as error:
            self.errors[-1] = error
            return MeshCandidate(mesh, "failed", error_text(error), None, state)
        if not isinstance(report, StepMemoryReport):
            what = f"returned a {type(report).__name__}, not a StepMemoryReport"
            return MeshCandidate(mesh, "failed", what, plan_bytes=state)
        if self.budget is None:
            outcome: Outcome = "compiled"
        else:
            outcome = "fits" if report.fits(self.budget) else "does not fit"
        estimate = report.roofline
        wire = report.collective_wire_bytes
        return MeshCandidate(
            mesh,
            outcome,
            None,
            report,
            state,
            None if estimate is None else (estimate.low_seconds, estimate.high_seconds),
            None
            if wire is None
            else {",".join(axes) or "one device": w for axes, _, w in wire if w},
            estimate=None if estimate is None else estimate.seconds,
            error=None if estimate is None else estimate.error,
        )

    def _result(self, future: concurrent.futures.Future[Any]) -> Any:
        """``future.result(timeout=self.wait)``, telling ``compiling`` meanwhile.

        With a ``compiling`` callback, waits for whichever compile finishes
        first, in slices, until ``future`` is done or its ``wait`` has passed;
        raises as :meth:`concurrent.futures.Future.result` does.
        """
        futures = [f for f in self.futures if f is not None]
        standard = all(isinstance(f, concurrent.futures.Future) for f in futures)
        if self.compiling is None or not standard:
            return future.result(timeout=self.wait)
        deadline = None if self.wait is None else time.monotonic() + self.wait
        while not future.done():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            pending = [f for f in futures if not f.done()]
            concurrent.futures.wait(
                pending, timeout=left, return_when=concurrent.futures.FIRST_COMPLETED
            )
            self._tell()
        return future.result(timeout=0)

    def _tell(self) -> None:
        """Call ``compiling`` with the meshes compiling now, if anything changed."""
        if self.compiling is None:
            return
        now = time.perf_counter()
        running: list[int] = []
        for k, future in enumerate(self.futures):
            if future is None or k in self.finished:
                continue
            if future.done():
                took = now - self.started.get(k, self.began)
                self.finished[k] = None if future.cancelled() else took
            elif self.jobs is not None or future.running():
                running.append(k)
        if self.jobs is not None:  # the pool takes its calls in order
            running = running[: self.jobs]
        for k in running:
            self.started.setdefault(k, now)
        names = tuple(self.names[k] for k in running)
        if self.told != (names, len(self.finished)):
            self.told = (names, len(self.finished))
            seconds = tuple(s for s in self.finished.values() if s is not None)
            self.compiling(names, seconds)

    def _cancel(self) -> None:
        """Cancel every compile not started; stop the default pool's workers."""
        for future in self.futures:
            if future is not None:
                future.cancel()
        if self.own is not None:
            stop_pool(self.own)


def _raise_bad_input(errors: list[BaseException | None]) -> None:
    """Raise the error every compile raised, when it is bad input, else nothing.

    The same ``TypeError``, ``ValueError`` or ``ImportError`` (type and
    message) from every candidate is the inputs' fault, not a mesh's: a batch
    the model cannot take, a loss that fails. It is raised as
    :func:`step_memory_report` raises it.
    """
    first = errors[0] if errors else None
    if not isinstance(first, TypeError | ValueError | ImportError):
        return
    if all(type(e) is type(first) and str(e) == str(first) for e in errors):
        raise first

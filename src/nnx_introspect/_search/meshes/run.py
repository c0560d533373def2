"""The compiles run: submitted to an executor, collected in order as rows.

One compile of the step's :class:`~nnx_introspect.StepSpec`, varied to the
candidate's mesh, per candidate; its report, its error or
its timeout becomes that candidate's row. An interrupt cancels the compiles
not yet started (and stops the default pool); the same bad-input error from
every compile is raised.
"""

import concurrent.futures
import dataclasses
from collections.abc import Callable
from typing import Any

from nnx_introspect._search.meshes.pool import _stop_pool
from nnx_introspect._search.meshes.report import (
    MeshAxes,
    MeshCandidate,
    Outcome,
    _error_text,
)
from nnx_introspect._step.measure import measure_step
from nnx_introspect._step.report import StepMemoryReport
from nnx_introspect._step.spec import StepSpec


def _measure_on(spec: StepSpec, mesh: dict[str, int]) -> StepMemoryReport:
    """``spec`` measured on ``mesh`` (a worker's call; the spec varied there)."""
    return measure_step(dataclasses.replace(spec, mesh=mesh))


class _Run:
    """Submitting the compiles and collecting their rows, stopping on interrupt."""

    def __init__(
        self,
        executor: concurrent.futures.Executor,
        own: concurrent.futures.ProcessPoolExecutor | None,
        wait: float | None,
        progress: Callable[[int, int, MeshCandidate | None], object] | None,
        budget: int | None,
    ) -> None:
        self.executor = executor
        self.own = own
        self.wait = wait
        self.progress = progress
        self.budget = budget
        self.futures: list[concurrent.futures.Future[Any] | None] = []
        self.errors: list[BaseException | None] = []

    def all(
        self, spec: StepSpec, to_compile: list[tuple[int, MeshAxes, int]]
    ) -> dict[int, MeshCandidate]:
        """Submit every compile, then wait for each in order: ``{index: row}``.

        Each is ``spec`` on the candidate's mesh (the worker varies it).
        """
        rows: dict[int, MeshCandidate] = {}
        timed_out = False
        try:
            refused: dict[int, str] = {}
            for k, (_, mesh, _) in enumerate(to_compile):
                try:
                    self.futures.append(
                        self.executor.submit(_measure_on, spec, dict(mesh))
                    )
                except Exception as error:  # a shut-down executor, say
                    self.futures.append(None)
                    refused[k] = _error_text(error)
            total = len(to_compile)
            if self.progress is not None:
                self.progress(0, total, None)
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
                _stop_pool(self.own)
            else:
                self.own.shutdown(wait=True)
        _raise_bad_input(self.errors)
        return rows

    def _row(
        self, mesh: MeshAxes, state: int, future: concurrent.futures.Future[Any]
    ) -> MeshCandidate:
        self.errors.append(None)
        try:
            report = future.result(timeout=self.wait)
        except TimeoutError as error:  # concurrent.futures.TimeoutError since 3.11
            if future.done():  # the compile itself raised a TimeoutError
                return MeshCandidate(mesh, "failed", _error_text(error), None, state)
            future.cancel()
            return MeshCandidate(
                mesh, "timed out", f"after {self.wait:g} s", plan_bytes=state
            )
        except concurrent.futures.CancelledError:
            return MeshCandidate(mesh, "failed", "cancelled", plan_bytes=state)
        except Exception as error:
            self.errors[-1] = error
            return MeshCandidate(mesh, "failed", _error_text(error), None, state)
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
        )

    def _cancel(self) -> None:
        """Cancel every compile not started; stop the default pool's workers."""
        for future in self.futures:
            if future is not None:
                future.cancel()
        if self.own is not None:
            _stop_pool(self.own)


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

"""Meshes compared: one compiled step per candidate, fanned out over an executor.

:func:`compare_meshes` checks every candidate mesh before anything compiles,
plans each one in this process (:func:`~nnx_introspect.mesh_config_report`: a
mesh the plan cannot apply, or whose state alone exceeds the budget, is
rejected with no compile), submits one :func:`step_memory_report` call per
remaining candidate to a ``concurrent.futures.Executor`` (a local process pool
by default, or any executor given: Dask's ``Client.get_executor()``...) and
returns a :class:`MeshComparison`, best mesh first.
"""

import concurrent.futures
import dataclasses
import html
import math
import multiprocessing
import os
import pickle
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal, TypeAlias

import jax
import optax
from flax import nnx
from jax.sharding import PartitionSpec

from nnx_introspect._mesh import (
    OPTIMIZER_NAMES,
    LogicalRulesLike,
    MeshLike,
    RulesLike,
    as_abstract_mesh,
    mesh_config_report,
    optimizer_from_name,
    parse_bytes,
)
from nnx_introspect._mesh.parse import _as_logical_rules
from nnx_introspect._mesh.specs import _entry_axes
from nnx_introspect._native_log import native_stderr_filtered
from nnx_introspect._render import (
    Report,
    Table,
    format_bytes,
    page_html,
    table_html,
    verdict_html,
)
from nnx_introspect._step.budget import step_budget
from nnx_introspect._step.chart import _byte_ticks
from nnx_introspect._step.child import MAX_CHILD_DEVICES
from nnx_introspect._step.formats import _batch_str
from nnx_introspect._step.inputs import (
    BatchLike,
    LossLike,
    SpecsLike,
    _as_batch,
    _as_batch_specs,
    _as_loss,
    _as_model,
    _importable_name,
    _spec_problems,
)
from nnx_introspect._step.measure import (
    _check_optimizer_has_a_loss,
    step_memory_report,
)
from nnx_introspect._step.report import StepMemoryReport
from nnx_introspect._step.topology import _topology, check_compiler
from nnx_introspect._typing import IntLike, as_int, typechecked

MAX_AUTO_MESHES = 512
"""The most candidates ``meshes="auto"`` may enumerate (before planning)."""

Outcome: TypeAlias = Literal[
    "fits", "does not fit", "compiled", "rejected", "failed", "timed out"
]
"""What became of one candidate: compiled and judged against the budget
(``"compiled"``: no budget to judge by), rejected by the planner before any
compile, or a compile that raised or gave no result in time."""

MeshAxes: TypeAlias = tuple[tuple[str, int], ...]
"""A mesh as ``((axis name, size), ...)``, in the mesh's order."""

_GROUP: dict[str, int] = {
    "fits": 0,
    "compiled": 0,
    "does not fit": 1,
    "rejected": 2,
    "failed": 3,
    "timed out": 3,
}
"""Where each outcome sorts: answers first, then what did not fit, then the rest."""

_PROBE_AXIS = "__nnx_introspect_probe__"
"""The one axis of the mesh ``meshes="auto"`` plans on to read the model's axes."""

_WORKER_START = (
    "from nnx_introspect._native_log import native_stderr_filtered\n"
    "with native_stderr_filtered():\n"
    "    from nnx_introspect._step.compare import _start_worker\n"
    "_start_worker({devices!r})\n"
)
"""The default pool's initializer, run by ``exec`` in each new worker.

Code, not a function: unpickling a function of this package would import JAX
before the filter is in place, and the CUDA plugin writes its ``Could not find
cuda drivers`` lines to the user's stderr from every worker."""


@dataclasses.dataclass(frozen=True)
class MeshCandidate:
    """One candidate mesh of a :class:`MeshComparison` and what became of it.

    Attributes:
        mesh: The mesh as ``((axis name, size), ...)``, in its order.
        outcome: ``"fits"``, ``"does not fit"``, ``"compiled"`` (no budget to
            judge by), ``"rejected"`` (by the planner, nothing compiled),
            ``"failed"`` (the compile raised) or ``"timed out"``.
        reason: Why a candidate was rejected, failed or timed out, in words;
            ``None`` otherwise.
        report: The full :class:`StepMemoryReport` of a compiled candidate,
            else ``None``.
        plan_bytes: Bytes per device of the parameters, other state and
            optimizer state as the plan shards them (``None`` when the plan
            could not be applied).
        estimated_seconds: A ``(low, high)`` roofline estimate of one step's
            time (perfect overlap, none) from the report's
            :attr:`~StepMemoryReport.roofline`, for a named ``topology``
            (fitting candidates sort by its low end); else ``None``.
        collective_bytes_by_axis: Bytes on the wire per device and step over
            each mesh-axis combination (``"fsdp"``, ``"fsdp,tp"``, ``"?"``),
            from the compiled program's collectives; ``None`` when not read.

    Example:
        >>> row = MeshCandidate((("fsdp", 4), ("tp", 2)), "rejected", "indivisible")
        >>> row.name, row.status
        ('fsdp=4,tp=2', 'rejected by the planner: indivisible')
    """

    mesh: MeshAxes
    outcome: Outcome
    reason: str | None = None
    report: StepMemoryReport | None = None
    plan_bytes: int | None = None
    estimated_seconds: tuple[float, float] | None = None
    collective_bytes_by_axis: dict[str, int] | None = None

    @property
    def name(self) -> str:
        """The mesh as ``"fsdp=2,tp=4"``."""
        return _mesh_name(self.mesh)

    @property
    def peak_bytes(self) -> int | None:
        """The compiled step's peak per device, or ``None`` with no compile."""
        return None if self.report is None else self.report.peak_bytes

    @property
    def fits(self) -> bool | None:
        """Whether the step fits the budget; ``None`` with no budget or compile."""
        if self.outcome in ("fits", "does not fit"):
            return self.outcome == "fits"
        return None

    @property
    def status(self) -> str:
        """The outcome in words, its reason included.

        ``"fits"``, ``"does not fit"``, ``"compiled (no budget)"``,
        ``"rejected by the planner: ..."``, ``"failed: ValueError: ..."`` or
        ``"timed out after 600 s"``.
        """
        if self.outcome == "rejected":
            return f"rejected by the planner: {self.reason}"
        if self.outcome == "failed":
            return f"failed: {self.reason}"
        if self.outcome == "timed out":
            return f"timed out {self.reason}" if self.reason else "timed out"
        return self._short_status()

    def _short_status(self) -> str:
        """The status without its reason: one table cell."""
        if self.outcome == "compiled":
            return "compiled (no budget)"
        refused = self.report is not None and self.report.compiler_message is not None
        if self.outcome == "does not fit" and refused:
            return "out of memory (refused by the compiler)"
        if self.outcome == "rejected":
            return "rejected by the planner"
        return self.outcome

    def json_data(self) -> dict[str, Any]:
        """Exact figures for JSON output; ``report`` is the step's whole payload."""
        estimate = self.estimated_seconds
        return {
            "mesh": self.name,
            "axis_names": [a for a, _ in self.mesh],
            "axis_sizes": [s for _, s in self.mesh],
            "outcome": self.outcome,
            "status": self.status,
            "fits": self.fits,
            "peak_bytes": self.peak_bytes,
            "plan_bytes": self.plan_bytes,
            "estimated_seconds": None if estimate is None else list(estimate),
            "collective_bytes_by_axis": self.collective_bytes_by_axis,
            "report": None if self.report is None else self.report.json_data(),
        }


@dataclasses.dataclass(frozen=True)
class MeshComparison(Report):
    """Candidate meshes for one step, each compiled by XLA, the best first.

    Each compiled candidate is one :func:`step_memory_report` call (its full
    report kept on the row); candidates the planner rejects are rows that say
    why, with no compile spent; a compile that raised or timed out is a row
    too. Order: the meshes that fit (by ``estimated_seconds`` where rows have
    one, then by peak bytes, lowest first), then those that do not fit (lowest
    peak first), then those rejected by the planner, then those that failed or
    timed out; ties keep the candidates' order.

    Attributes:
        target: The model's ``"package.module:factory"`` name.
        candidates: One :class:`MeshCandidate` per mesh, best first.
        num_devices: Devices in every candidate mesh.
        max_device_bytes: The per-device budget every row is judged against
            (``None``: none given and none known, on XLA:CPU).
        budget_basis: How the budget was found, in words, or ``None``.
        topology: The named target compiled for, or ``None`` (XLA:CPU).
        auto_axes: With ``meshes="auto"``, the axes whose factorisations were
            enumerated, in mesh order; ``None`` when the meshes were listed.
        batch: Each batch leaf as ``"float32[8,256]"``.
        step: What each candidate compiled: ``"forward"``, ``"forward +
            backward"`` or ``"forward + backward + optimizer update"``.
        compiles: Compiles submitted (candidates not rejected by the planner).
        seconds: Wall time of the whole comparison.
        executor: What ran the compiles, e.g. ``"a spawn process pool of 2
            workers"`` or the executor's class name.

    Example:
        >>> from concurrent.futures import ThreadPoolExecutor
        >>> import jax, jax.numpy as jnp
        >>> from jax.sharding import PartitionSpec as P
        >>> x = jax.ShapeDtypeStruct((8, 3), jnp.float32)
        >>> with ThreadPoolExecutor(max_workers=1) as pool:
        ...     comparison = compare_meshes(
        ...         "nnx_introspect.examples:two_layer", ["data=8", "data=2,model=4"],
        ...         x, rules=[("kernel", P(None, "model"))],
        ...         max_device_bytes="1MiB", executor=pool,
        ...     )
        >>> [(c.name, c.outcome) for c in comparison.candidates]
        [('data=2,model=4', 'fits'), ('data=8', 'rejected')]
        >>> comparison.ok, comparison.best.report.num_devices
        (True, 8)
    """

    SCHEMA = "nnx-introspect/mesh-comparison"
    SCHEMA_VERSION = 1

    target: str
    candidates: tuple[MeshCandidate, ...]
    num_devices: int
    max_device_bytes: int | None
    budget_basis: str | None
    topology: str | None
    auto_axes: tuple[str, ...] | None
    batch: tuple[str, ...]
    step: str
    compiles: int
    seconds: float
    executor: str

    @property
    def best(self) -> MeshCandidate | None:
        """The first candidate when it fits (or, with no budget, compiled)."""
        first = self.candidates[0] if self.candidates else None
        if first is None or _GROUP[first.outcome] != 0:
            return None
        return first

    @property
    def ok(self) -> bool:
        """Whether some mesh fits (with no budget: whether some mesh compiled)."""
        return self.best is not None

    def fits(self) -> bool:
        """Whether a mesh was found whose step fits the budget: :attr:`ok`.

        Example:
            >>> from concurrent.futures import ThreadPoolExecutor
            >>> import jax, jax.numpy as jnp
            >>> x = jax.ShapeDtypeStruct((8, 3), jnp.float32)
            >>> with ThreadPoolExecutor(max_workers=1) as pool:
            ...     tight = compare_meshes(
            ...         "nnx_introspect.examples:two_layer", ["data=8", "data=4,x=2"],
            ...         x, max_device_bytes="200B", executor=pool,
            ...     )
            >>> tight.fits(), [c.outcome for c in tight.candidates]
            (False, ['does not fit', 'does not fit'])
        """
        return self.ok

    @property
    def compiler(self) -> str | None:
        """The compiler of the steps, as the reports name it, or ``None``."""
        return next(
            (c.report.compiler for c in self.candidates if c.report is not None),
            None,
        )

    def _counts(self) -> str:
        """``"2 of 4 fit, 1 rejected by the planner, 1 failed"``."""
        n = len(self.candidates)
        outcomes: list[str] = [c.outcome for c in self.candidates]
        parts = (
            [f"{outcomes.count('compiled')} of {n} compiled"]
            if self.max_device_bytes is None
            else [f"{outcomes.count('fits')} of {n} fit"]
        )
        for outcome, words in (
            ("rejected", "rejected by the planner"),
            ("failed", "failed"),
            ("timed out", "timed out"),
        ):
            if outcomes.count(outcome):
                parts.append(f"{outcomes.count(outcome)} {words}")
        return ", ".join(parts)

    @property
    def verdict(self) -> str:
        """One line: the best mesh and its peak, or why none fits."""
        best = self.best
        by = f", by {self.compiler}" if self.compiler else ""
        basis = (
            ""
            if self.budget_basis in (None, "the budget given")
            else f"; the budget is {self.budget_basis}"
        )
        counts = self._counts()
        if best is not None and best.report is not None:
            peak = format_bytes(best.report.peak_bytes)
            if self.max_device_bytes is None:
                return (
                    f"Lowest peak: {best.name}, {peak} per device (no budget to "
                    f"judge against; {counts}){by}"
                )
            budget = format_bytes(self.max_device_bytes)
            return (
                f"Best mesh: {best.name}, peak {peak} of {budget} per device "
                f"({counts}){by}{basis}"
            )
        lowest = next((c for c in self.candidates if c.report is not None), None)
        if lowest is not None and lowest.report is not None:
            budget = format_bytes(self.max_device_bytes or 0)
            return (
                f"No mesh fits: the lowest peak, {lowest.name}, needs "
                f"{format_bytes(lowest.report.peak_bytes)} per device, over the "
                f"budget of {budget} ({counts}){by}{basis}"
            )
        return f"No mesh fits: none compiled ({counts})"

    def table(self) -> Table:
        """The comparison as a :class:`~nnx_introspect.Table`: a row per mesh."""
        budget = self.max_device_bytes
        estimates = any(c.estimated_seconds is not None for c in self.candidates)
        columns = ["mesh", "status"]
        if estimates:
            columns += ["step seconds (est.)", "MFU ceiling (est.)"]
        columns += ["peak per device", "peak bytes", "of budget", "state per device"]
        wired = any(c.collective_bytes_by_axis for c in self.candidates)
        if wired:
            columns.append("collectives on the wire per device")
        rows = []
        for c in self.candidates:
            peak = c.peak_bytes
            row = [c.name, c._short_status()]
            if estimates:
                low_high = c.estimated_seconds
                row.append(
                    "-" if low_high is None else f"{low_high[0]:.3g}-{low_high[1]:.3g}"
                )
                estimate = None if c.report is None else c.report.roofline
                row.append("-" if estimate is None else f"{estimate.mfu_ceiling:.0%}")
            row += [
                "-" if peak is None else format_bytes(peak),
                "-" if peak is None else f"{peak:,}",
                "-" if peak is None or not budget else _share(peak, budget),
                "-" if c.plan_bytes is None else format_bytes(c.plan_bytes),
            ]
            if wired:
                row.append(
                    "; ".join(
                        f"{axes}: {format_bytes(n)}"
                        for axes, n in (c.collective_bytes_by_axis or {}).items()
                    )
                    or "-"
                )
            rows.append(tuple(row))
        return Table(
            title=self.verdict,
            columns=tuple(columns),
            rows=tuple(rows),
            notes=tuple(self._notes()),
        )

    def _notes(self) -> Iterator[str]:
        budget = self.max_device_bytes
        if budget is None:
            yield (
                "No budget: every compiled mesh is ranked by its peak alone. Pass "
                "`max_device_bytes` (--max-device-bytes) or a `topology`."
            )
        else:
            yield (
                f"Budget: {format_bytes(budget)} ({budget:,} bytes) per device: "
                f"{self.budget_basis}."
            )
        if self.auto_axes is not None:
            first = self.auto_axes[0]
            devices = _plural(self.num_devices, "device")
            yield (
                f"'auto': every factorisation of {devices} over "
                f"the axes {', '.join(self.auto_axes)} (in the order they appear "
                "in `batch_spec`, the logical rules and the plan's specs); the "
                f"batch splits over each mesh's first axis ({first}) unless "
                "`batch_spec` says otherwise."
            )
        for c in self.candidates:
            if c.reason is not None:
                yield f"{c.name}: {c.status}"
        yield (
            "Order: the meshes that fit first, lowest peak first (by estimated "
            "step time where known); then those that do not fit, lowest peak "
            "first; then those rejected by the planner (nothing compiled), failed "
            "or timed out. 'state per device': the plan's parameters, other "
            "state and optimizer state."
        )
        if any(c.estimated_seconds is not None for c in self.candidates):
            yield (
                "Step seconds and MFU ceiling are estimates, not measurements: a "
                "roofline of each compiled program's FLOPs, bytes accessed and "
                "collective bytes on the target's data-sheet figures, from perfect "
                "overlap to none (each row's report lists the assumptions)."
            )
        if any(c.collective_bytes_by_axis for c in self.candidates):
            yield (
                "Collectives on the wire: bytes each device sends per step over "
                "each mesh axis, by the ring algorithm's factors (all-gather and "
                "reduce-scatter (n-1)/n, all-reduce 2(n-1)/n); '?' marks device "
                "groups that are not whole mesh axes."
            )
        yield (
            f"{self.compiles} compile(s) of the step ({self.step}; batch "
            f"{', '.join(self.batch)}) in {self.seconds:.1f} s on {self.executor}."
        )
        if any(
            c.report is not None and c.report.backend == "cpu" for c in self.candidates
        ):
            yield (
                "XLA:CPU compiled these steps: its temporaries can differ from an "
                "accelerator's many times over (arguments are exact). Pass a TPU "
                "or GPU `topology` for that compiler's numbers."
            )

    def json_data(self) -> dict[str, Any]:
        """Exact figures for JSON output; each compiled row has its full report."""
        best = self.best
        return {
            "ok": self.ok,
            "verdict": self.verdict,
            "best": None if best is None else best.name,
            "target": self.target,
            "num_devices": self.num_devices,
            "max_device_bytes": self.max_device_bytes,
            "budget_basis": self.budget_basis,
            "topology": self.topology,
            "compiler": self.compiler,
            "auto_axes": None if self.auto_axes is None else list(self.auto_axes),
            "batch": list(self.batch),
            "step": self.step,
            "compiles": self.compiles,
            "seconds": self.seconds,
            "executor": self.executor,
            "candidates": [c.json_data() for c in self.candidates],
        }

    def to_html(self) -> str:
        """A self-contained page: the verdict, peak against mesh, the table.

        The chart is an inline SVG: one bar per compiled mesh (green fits, red
        does not, blue with no budget), the budget as a dashed line; the best
        mesh's own step report follows the table.

        Example:
            >>> from concurrent.futures import ThreadPoolExecutor
            >>> import jax, jax.numpy as jnp
            >>> x = jax.ShapeDtypeStruct((8, 3), jnp.float32)
            >>> with ThreadPoolExecutor(max_workers=1) as pool:
            ...     page = compare_meshes(
            ...         "nnx_introspect.examples:two_layer", ["data=8"], x,
            ...         max_device_bytes="1MiB", executor=pool,
            ...     ).to_html()
            >>> page.index('class="verdict ok"') < page.index("<svg")
            True
        """
        parts = [
            f"<h1>Meshes compared: {html.escape(self.target)} on "
            f"{self.num_devices} devices</h1>",
            verdict_html(self.verdict, self._verdict_tone() or "neutral"),
        ]
        if self.candidates:
            parts.append(_peaks_svg(self.candidates, self.max_device_bytes))
        parts.append(table_html(self.table(), caption=False))
        best = self.best
        if best is not None and best.report is not None:
            parts.append(f"<h2>The step on {html.escape(best.name)}</h2>")
            parts.append(table_html(best.report.table()))
        return page_html(self.verdict, "".join(parts))


@typechecked
def compare_meshes(
    target: nnx.Module | nnx.State[Any, Any] | Callable[..., Any] | str,
    meshes: str | Sequence[MeshLike],
    batch: BatchLike,
    /,
    *,
    loss: LossLike = "mean",
    optimizer: optax.GradientTransformation | str | None = None,
    topology: str | None = None,
    rules: RulesLike | None = None,
    logical_rules: LogicalRulesLike | None = None,
    batch_spec: SpecsLike = None,
    max_device_bytes: IntLike | str | None = None,
    executor: object = None,
    timeout: float | int | None = None,
    max_workers: IntLike | None = None,
    trace_as_target: bool = True,
    progress: Callable[[int, int, MeshCandidate | None], object] | None = None,
    network_bytes_per_second: IntLike | str | None = None,
) -> MeshComparison:
    """Compile one step of ``target`` on each of ``meshes`` and rank them.

    Every candidate is checked before anything compiles, then planned here
    with :func:`~nnx_introspect.mesh_config_report` (same rules, logical rules
    and optimizer): a candidate whose plan has problems (a dimension that does
    not divide, an axis the mesh lacks, a batch that does not split) or whose
    parameters, other state and optimizer state alone exceed the budget is
    rejected, with no compile spent. Each other candidate is one independent
    :func:`step_memory_report` call submitted to ``executor``; its result is
    judged against the one budget. A compile that raises, or gives no result
    within ``timeout``, becomes a row that says so: one candidate never loses
    the sweep (only the same ``TypeError``, ``ValueError`` or ``ImportError``
    from every compile, which is the inputs' fault, is raised).

    The calls travel to the workers by pickle, so the model is named
    (``"package.module:factory"``), the loss is a name or an importable
    function and the optimizer a name.

    With ``meshes="auto"``, the candidates are every factorisation of the
    device count (``topology``'s, else this process's ``jax.device_count()``)
    over the mesh axes the step's sharding names, each size at least 1: the
    axes of ``batch_spec``, then the mesh axes of ``logical_rules``, then
    those of the plan's specs (``rules`` and the model's metadata), each in
    the order it first appears. With ``batch_spec=None`` the batch splits over
    each mesh's first axis, so name the data-parallel axis first (in
    ``batch_spec`` or the logical rules) when the model's specs name another
    one first.

    Args:
        target: The model's ``"package.module:factory"`` name, or a factory
            importable by that name.
        meshes: The candidates, each as :func:`step_memory_report` takes a
            mesh (a mapping, ``"fsdp=2,tp=4"``, an ``AbstractMesh``; of a
            ``Mesh`` only the axes are used), all with the same number of
            devices (``topology``'s when given); or ``"auto"``. Two candidates
            are the same when their axes, sizes and order are:
            ``"fsdp=8,tp=1"`` and ``"fsdp=8"`` are different meshes (the
            second has no ``tp`` for a spec to name), and so are
            ``"fsdp=2,tp=4"`` and ``"tp=4,fsdp=2"`` (another device order, and
            the batch splits over the first axis).
        batch: As in :func:`step_memory_report`.
        loss: ``None``, ``"mean"``, ``"lm"``, a ``"package.module:function"``
            name or a function importable by that name.
        optimizer: An optimizer's name (``"adamw"``...), or ``None``.
        topology: As in :func:`step_memory_report`: a TPU slice or NVIDIA
            GPUs to compile for; every mesh must have its device count.
        rules: As there (picklable).
        logical_rules: As there (picklable).
        batch_spec: As there (picklable).
        max_device_bytes: The per-device budget every candidate is judged
            against; default: what one device of ``topology`` gives a step
            (see :func:`step_memory_report`); none on XLA:CPU (the meshes are
            then ranked by peak alone).
        executor: A ``concurrent.futures.Executor`` to submit the compiles to,
            used as it is and left running: a ``ProcessPoolExecutor``, Dask's
            ``distributed.Client(...).get_executor()``, or one worker of a
            ``ThreadPoolExecutor`` (a compile redirects the process's file
            descriptor 2 while it runs, so threads must not compile side by
            side). Default: a pool of processes started with ``"spawn"`` (JAX
            is not fork-safe), one per CPU this process may use, at most one
            per compile, shut down before returning. Its workers compile on
            the CPU platform with the mesh's device count (a named
            ``topology`` compiles in a child process as always). As with any
            ``"spawn"`` pool, a script that calls this at its top level needs
            the ``if __name__ == "__main__":`` guard: each worker imports the
            script's main module.
        timeout: Seconds to wait for each candidate's result, counted from
            when the candidates before it (in the given order) were resolved;
            a candidate still without a result is a ``"timed out"`` row (a
            candidate queued behind others that hang may time out unstarted).
            Default: no limit (a child compile stops itself after
            ``CHILD_TIMEOUT_SECONDS``, 900 s).
        max_workers: The default pool's size (``--jobs``); only without an
            ``executor``.
        trace_as_target: As in :func:`step_memory_report`.
        network_bytes_per_second: As in :func:`step_memory_report`: the
            network per GPU between hosts the step-time estimates use.
        progress: Called with ``(done, total, row)``: ``(0, total, None)``
            once the compiles are submitted, then after each candidate's
            compile is resolved (in the order given).

    Returns:
        A frozen :class:`MeshComparison`.

    Raises:
        TypeError: If an argument has the wrong type: ``executor`` not a
            ``concurrent.futures.Executor``, a mesh that is not one...
        ValueError: If ``meshes`` is empty, repeats a mesh, mixes device
            counts or does not match ``topology``; ``"auto"`` finds no axes or
            too many candidates (:data:`MAX_AUTO_MESHES`); ``target``,
            ``loss`` or ``optimizer`` cannot be sent to a worker by name;
            ``rules``, ``logical_rules`` or ``batch_spec`` cannot be pickled;
            ``timeout`` or ``max_workers`` is not positive, or
            ``max_workers`` comes with an ``executor``; or
            :func:`step_memory_report` rejects the inputs of every candidate
            (a bad loss, an optimizer without a loss...; checked here first,
            or the same error raised by every compile: a batch the model
            cannot take...).
        ImportError: If ``topology``'s compiler is not installed.
        KeyboardInterrupt: Re-raised after cancelling the compiles not yet
            started (and stopping the default pool's workers and their child
            compiles).

    Example:
        >>> from concurrent.futures import ThreadPoolExecutor
        >>> import jax, jax.numpy as jnp
        >>> from jax.sharding import PartitionSpec as P
        >>> x = jax.ShapeDtypeStruct((8, 3), jnp.float32)
        >>> with ThreadPoolExecutor(max_workers=1) as pool:
        ...     comparison = compare_meshes(
        ...         "nnx_introspect.examples:two_layer", "auto", x,
        ...         rules=[("kernel", P(None, "model"))], batch_spec=P("data"),
        ...         max_device_bytes="1MiB", executor=pool,
        ...     )
        >>> comparison.auto_axes, comparison.best.name
        (('data', 'model'), 'data=8,model=1')
        >>> [(c.name, c.outcome) for c in comparison.candidates]  # best first
        [('data=8,model=1', 'fits'), ('data=4,model=2', 'fits'), \
('data=2,model=4', 'fits'), ('data=1,model=8', 'rejected')]
        >>> print(comparison.candidates[-1].status)  # 4 hidden units over 8
        rejected by the planner: `l1/kernel` with shape (3, 4): dimension 1 (size
        4) does not divide over model (product 8). ... (and 1 more)
    """
    began = time.perf_counter()
    pool_size = _check_executor(executor, max_workers)
    wait = _check_timeout(timeout)
    given = None if max_device_bytes is None else parse_bytes(max_device_bytes)
    devices = None if topology is None else _topology(topology).devices
    budget = step_budget(given, topology)
    target_name = _target_name(target)
    model = _as_model(target_name)
    leaves = _as_batch(batch)
    _as_batch_specs(batch_spec, leaves, _PROBE_AXIS)  # its types, before any mesh
    checked_loss = _as_loss(loss, leaves)
    loss_name = _loss_by_name(loss)
    optimizer_name, tx = _optimizer_by_name(optimizer)
    _check_optimizer_has_a_loss(optimizer, tx, checked_loss)
    for name, value in (
        ("rules", rules),
        ("logical_rules", logical_rules),
        ("batch_spec", batch_spec),
    ):
        _check_picklable(value, name)
    auto_axes: tuple[str, ...] | None = None
    if isinstance(meshes, str) and meshes.strip().lower() == "auto":
        auto_axes = _auto_axes(model, rules, logical_rules, batch_spec)
        count = devices if devices is not None else jax.device_count()
        candidates = _auto_meshes(auto_axes, count)
    else:
        candidates = _listed_meshes(meshes, topology, devices)
    num_devices = math.prod(s for _, s in candidates[0])
    if topology is not None:
        check_compiler(topology, candidates[0])  # the compiler's package, first
    elif num_devices > max(MAX_CHILD_DEVICES, jax.device_count()):
        raise ValueError(
            f"`meshes` have {num_devices} devices: more than the "
            f"{MAX_CHILD_DEVICES} virtual CPU devices a compile may use. Compare "
            "smaller meshes, or name a TPU or GPU `topology`."
        )
    rows: dict[int, MeshCandidate] = {}
    to_compile: list[tuple[int, MeshAxes, int]] = []
    for index, mesh in enumerate(candidates):
        reason, state = _plan(
            model, mesh, leaves, (batch_spec, rules, logical_rules, tx), budget.bytes
        )
        if reason is not None:
            rows[index] = MeshCandidate(mesh, "rejected", reason, plan_bytes=state)
        else:
            to_compile.append((index, mesh, state))
    options: dict[str, Any] = {
        "loss": loss_name,
        "optimizer": optimizer_name,
        "rules": rules,
        "logical_rules": logical_rules,
        "batch_spec": batch_spec,
        "topology": topology,
        "max_device_bytes": given,  # none given: each report finds the same one
        "trace_as_target": trace_as_target,
        "network_bytes_per_second": network_bytes_per_second,
    }
    described = "nothing (every mesh was rejected by the planner)"
    if to_compile:
        own: concurrent.futures.ProcessPoolExecutor | None = None
        if isinstance(executor, concurrent.futures.Executor):
            pool: concurrent.futures.Executor = executor
            described = type(executor).__name__
        else:
            workers = min(pool_size or _cpus(), len(to_compile))
            pool = own = _default_pool(
                workers, num_devices if topology is None else None
            )
            described = f"a spawn process pool of {_plural(workers, 'worker')}"
        run = _Run(pool, own, wait, progress, budget.bytes)
        rows |= run.all(target_name, leaves, options, to_compile)
    ordered = sorted(rows.items(), key=lambda item: _sort_key(item[0], item[1]))
    return MeshComparison(
        target=target_name,
        candidates=tuple(row for _, row in ordered),
        num_devices=num_devices,
        max_device_bytes=budget.bytes,
        budget_basis=budget.basis,
        topology=topology,
        auto_axes=auto_axes,
        batch=tuple(_batch_str(leaf) for leaf in leaves),
        step=_step_name(loss, optimizer_name),
        compiles=len(to_compile),
        seconds=time.perf_counter() - began,
        executor=described,
    )


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
        self,
        target: str,
        leaves: tuple[jax.ShapeDtypeStruct, ...],
        options: dict[str, Any],
        to_compile: list[tuple[int, MeshAxes, int]],
    ) -> dict[int, MeshCandidate]:
        """Submit every compile, then wait for each in order: ``{index: row}``."""
        rows: dict[int, MeshCandidate] = {}
        timed_out = False
        try:
            refused: dict[int, str] = {}
            for k, (_, mesh, _) in enumerate(to_compile):
                try:
                    self.futures.append(
                        self.executor.submit(
                            step_memory_report, target, dict(mesh), leaves, **options
                        )
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


def _default_pool(
    workers: int, devices: int | None
) -> concurrent.futures.ProcessPoolExecutor:
    """A pool of ``workers`` processes started with ``"spawn"``.

    Each worker runs :func:`_start_worker` first (through :data:`_WORKER_START`,
    so JAX's first import there is filtered): the CPU platform with
    ``devices`` virtual devices, so a CPU mesh compiles in the worker itself.
    """
    return concurrent.futures.ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=exec,
        initargs=(_WORKER_START.format(devices=devices), {}),
    )


def _start_worker(devices: int | None) -> None:
    """Set up a worker of the default pool, before its first compile.

    Its own process group (POSIX), so stopping the pool stops the child
    compiles it started too (and Ctrl-C reaches only the parent, which stops
    the pool); the CPU platform (a worker needs no accelerator: a named
    topology compiles in a child process), with ``devices`` virtual devices.
    The plugins' start-up noise stays off stderr.
    """
    if hasattr(os, "setpgrp"):
        os.setpgrp()
    with native_stderr_filtered():
        jax.config.update("jax_platforms", "cpu")
        if devices is not None:
            jax.config.update("jax_num_cpu_devices", devices)
        jax.devices()


def _stop_pool(pool: concurrent.futures.ProcessPoolExecutor) -> None:
    """Shut ``pool`` down now: pending calls cancelled, every worker stopped.

    A worker leads its own process group (:func:`_start_worker`): the group is
    sent SIGTERM, which stops the child compile it may be waiting on too; a
    worker still starting is terminated alone.
    """
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        pid = process.pid
        try:
            if pid is not None and hasattr(os, "killpg") and os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGTERM)
                continue
        except OSError:  # gone already, or never started
            continue
        process.terminate()
    for process in processes:
        process.join(timeout=5)
        if process.is_alive():
            process.kill()
            process.join(timeout=5)


def _check_executor(executor: object, max_workers: Any) -> int | None:
    """``max_workers`` checked (``None`` unless given); TypeError for ``executor``."""
    if executor is not None and not isinstance(executor, concurrent.futures.Executor):
        raise TypeError(
            "`executor` must be a concurrent.futures.Executor (a "
            "ProcessPoolExecutor, dask's Client(...).get_executor(), ...) or None "
            f"for a local process pool, got a {type(executor).__name__}."
        )
    if max_workers is None:
        return None
    size = as_int(max_workers, "max_workers", minimum=1)
    if executor is not None:
        raise ValueError(
            f"`max_workers` ({size}) sizes the default process pool, but an "
            "`executor` was given: it brings its own workers. Pass one or the "
            "other."
        )
    return size


def _check_timeout(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool):
        raise TypeError(
            f"`timeout` must be a number of seconds (per candidate) or None for no "
            f"limit, got the bool {timeout!r}."
        )
    value = float(timeout)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(
            f"`timeout` must be a positive number of seconds (per candidate) or "
            f"None for no limit, got {timeout!r}."
        )
    return value


_BY_NAME = "each candidate's step compiles in a worker (`executor`), which rebuilds "
_BY_NAME += "everything from names"


def _target_name(target: Any) -> str:
    """The ``"package.module:factory"`` a worker rebuilds the model from."""
    if isinstance(target, nnx.State):
        _as_model(target)  # its TypeError: a step needs the module
    name = None if isinstance(target, nnx.Module) else _importable_name(target)
    if name is None:
        raise ValueError(
            "`target` must be passed as 'package.module:factory' (or a factory "
            f"importable by that name), not a module object or a lambda: {_BY_NAME}."
        )
    return name


def _loss_by_name(loss: Any) -> str | None:
    if loss is None or isinstance(loss, str):
        return loss
    name = _importable_name(loss)
    if name is None:
        raise ValueError(
            "`loss` must be 'mean', 'lm', None or a function importable as "
            f"'package.module:function' (not a lambda or closure): {_BY_NAME}."
        )
    return name


def _optimizer_by_name(
    optimizer: Any,
) -> tuple[str | None, optax.GradientTransformation | None]:
    if optimizer is None:
        return None, None
    if not isinstance(optimizer, str):
        raise ValueError(
            f"`optimizer` must be a name, one of {list(OPTIMIZER_NAMES)}, not an "
            f"optax object: {_BY_NAME}."
        )
    return optimizer.lower(), optimizer_from_name(optimizer)


def _check_picklable(value: Any, name: str) -> None:
    try:
        pickle.dumps(value)
    except Exception as error:
        raise ValueError(
            f"`{name}` must be picklable: {_BY_NAME}, and pickle refuses it "
            f"({_error_text(error)}). Use strings, tuples and PartitionSpecs."
        ) from None


def _listed_meshes(
    meshes: Any, topology: str | None, devices: int | None
) -> list[MeshAxes]:
    """The listed candidates as axes, every problem of the list in one error."""
    if isinstance(meshes, str):
        raise ValueError(
            f"`meshes` must be a list of meshes or 'auto', got the string "
            f"{meshes!r}. Wrap one mesh in a list: [{meshes!r}]."
        )
    items = list(meshes)
    if not items:
        raise ValueError(
            "`meshes` must list at least one mesh, got an empty list. Pass e.g. "
            "['fsdp=8', 'fsdp=4,tp=2'], or 'auto'."
        )
    out: list[MeshAxes] = []
    for i, mesh in enumerate(items):
        abstract = as_abstract_mesh(mesh, f"meshes[{i}]")
        out.append(
            tuple(
                (str(a), int(s))
                for a, s in zip(abstract.axis_names, abstract.axis_sizes, strict=True)
            )
        )
    problems: list[str] = []
    counts = [math.prod(s for _, s in axes) for axes in out]
    if devices is not None:
        problems += [
            f"`meshes[{i}]` ({_mesh_name(axes)}) has {n} devices, but `topology` "
            f"{topology!r} has {devices}"
            for i, (axes, n) in enumerate(zip(out, counts, strict=True))
            if n != devices
        ]
    elif len(set(counts)) > 1:
        groups = {n: [i for i, m in enumerate(counts) if m == n] for n in counts}
        shown = "; ".join(
            f"{n} ({', '.join(f'meshes[{i}]' for i in where)})"
            for n, where in groups.items()
        )
        problems.append(
            "`meshes` must all have the same number of devices (candidates for "
            f"one machine), got {shown}"
        )
    first: dict[MeshAxes, int] = {}
    for i, axes in enumerate(out):
        if axes in first:
            problems.append(
                f"`meshes[{i}]` ({_mesh_name(axes)}) repeats `meshes[{first[axes]}]`"
            )
        first.setdefault(axes, i)
    if problems:
        raise ValueError(
            "; ".join(problems)
            + ". Give each candidate once, with the same device count"
            + (f" as `topology` {topology!r}" if devices is not None else "")
            + "."
        )
    return out


def _auto_axes(
    model: Any, rules: Any, logical_rules: Any, batch_spec: Any
) -> tuple[str, ...]:
    """The mesh axes the step's sharding names, in the order they appear.

    ``batch_spec``'s, then the mesh axes ``logical_rules`` map names to, then
    the axes of the plan's specs (rules first, then metadata translated by the
    logical rules), planned on a one-axis probe mesh.
    """
    seen: dict[str, None] = {}
    specs: list[Any] = []
    if isinstance(batch_spec, PartitionSpec):
        specs.append(batch_spec)
    elif batch_spec is not None:
        specs += [s for s in batch_spec if s is not None]
    entries = [entry for spec in specs for entry in spec]
    entries += [axes for _, axes in _as_logical_rules(logical_rules) or ()]
    plan = mesh_config_report(
        model, {_PROBE_AXIS: 1}, rules=rules, logical_rules=logical_rules
    )
    entries += [entry for leaf in plan.leaves for entry in leaf.spec]
    for entry in entries:
        for axis in _entry_axes(entry):
            seen.setdefault(axis, None)
    seen.pop(_PROBE_AXIS, None)
    if not seen:
        raise ValueError(
            "`meshes='auto'` found no mesh axis: the model's variables carry no "
            "sharding metadata, and neither `rules`, `logical_rules` nor "
            "`batch_spec` names one. List the meshes, or pass `rules` that shard "
            "the parameters."
        )
    return tuple(seen)


def _auto_meshes(axes: tuple[str, ...], devices: int) -> list[MeshAxes]:
    """Every factorisation of ``devices`` over ``axes`` (sizes >= 1), in order.

    Sizes in lexicographic order: ``(1, 8), (2, 4), (4, 2), (8, 1)``.
    """
    sizes = list(_factorisations(devices, len(axes)))
    if len(sizes) > MAX_AUTO_MESHES:
        raise ValueError(
            f"`meshes='auto'` gives {len(sizes)} candidates ({devices} devices over "
            f"the axes {', '.join(axes)}), more than {MAX_AUTO_MESHES}. List the "
            "meshes to compare, or name fewer axes."
        )
    return [tuple(zip(axes, s, strict=True)) for s in sizes]


def _factorisations(n: int, k: int) -> Iterator[tuple[int, ...]]:
    """Every ``k``-tuple of positive integers whose product is ``n``.

    Example:
        >>> list(_factorisations(8, 2))
        [(1, 8), (2, 4), (4, 2), (8, 1)]
        >>> len(list(_factorisations(256, 3))), list(_factorisations(6, 1))
        (45, [(6,)])
    """
    divisors = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    divisors = sorted({*divisors, *(n // d for d in divisors)})

    def split(m: int, parts: int) -> Iterator[tuple[int, ...]]:
        if parts == 1:
            yield (m,)
            return
        for d in divisors:
            if d > m:
                break
            if m % d == 0:
                for rest in split(m // d, parts - 1):
                    yield (d, *rest)

    return split(n, k)


def _plan(
    model: Any,
    mesh: MeshAxes,
    leaves: tuple[jax.ShapeDtypeStruct, ...],
    sharding: tuple[Any, Any, Any, optax.GradientTransformation | None],
    budget: int | None,
) -> tuple[str | None, int]:
    """``(why the planner rejects the mesh or None, the plan's bytes per device)``.

    Rejected: the plan has errors, the batch does not split over the mesh, or
    the parameters, other state and optimizer state alone exceed ``budget``.
    """
    batch_spec, rules, logical_rules, tx = sharding
    sizes = dict(mesh)
    specs, spec_name = _as_batch_specs(batch_spec, leaves, mesh[0][0])
    plan = mesh_config_report(
        model, sizes, rules=rules, logical_rules=logical_rules, optimizer=tx
    )
    state = sum(leaf.bytes_per_device for leaf in plan.leaves + plan.optimizer_leaves)
    problems = [p.message for p in plan.errors]
    problems += _spec_problems(spec_name, leaves, specs, sizes)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return f"{problems[0]}{more}", state
    if budget is not None and state > budget:
        return (
            f"the parameters, other state and optimizer state alone need "
            f"{format_bytes(state)} per device, over the budget of "
            f"{format_bytes(budget)}"
        ), state
    return None, state


def _sort_key(index: int, row: MeshCandidate) -> tuple[Any, ...]:
    group = _GROUP[row.outcome]
    peak = row.peak_bytes or 0
    if group == 0:
        estimate = row.estimated_seconds
        return (group, estimate is None, estimate or (0.0, 0.0), peak, index)
    return (group, False, (0.0, 0.0), peak if group == 1 else 0, index)


def _step_name(loss: Any, optimizer: str | None) -> str:
    if loss is None:
        return "forward"
    if optimizer is None:
        return "forward + backward"
    return "forward + backward + optimizer update"


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _share(peak: int, budget: int) -> str:
    """``peak`` as a share of ``budget``: ``"37%"``, ``"0.11%"`` below 1%."""
    share = peak / budget
    return f"{share:.0%}" if share >= 0.01 or share == 0 else f"{share:.2%}"


def _mesh_name(mesh: MeshAxes) -> str:
    return ",".join(f"{a}={s}" for a, s in mesh)


def _error_text(error: BaseException) -> str:
    """``"ValueError: ..."`` on one line, at most 500 characters."""
    text = " ".join(str(error).split())
    if len(text) > 500:
        text = text[:497] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _cpus() -> int:
    """The CPUs this process may use (its affinity where the OS tells it)."""
    count = getattr(os, "process_cpu_count", None)
    if count is not None:
        return int(count() or 1)
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


_BAR, _GAP, _CHART_WIDTH = 18, 8, 720


def _peaks_svg(rows: tuple[MeshCandidate, ...], budget: int | None) -> str:
    """Peak bytes per device of each mesh as horizontal bars, the budget dashed.

    Green fits, red does not, blue with no budget; a mesh with no compile has
    its outcome written where its bar would be.
    """
    esc = html.escape
    left = max(90, 7 * max(len(r.name) for r in rows) + 16)
    right, top, bottom = 24, 30, 40
    plot = _CHART_WIDTH - left - right
    height = top + len(rows) * (_BAR + _GAP) + bottom
    peaks = [r.peak_bytes for r in rows if r.peak_bytes is not None]
    unit, unit_bytes, ticks = _byte_ticks(max([budget or 0, *peaks, 1]))
    x_max = ticks[-1] * unit_bytes or 1
    axis_y = height - bottom + 4

    def x(v: float) -> float:
        return left + plot * v / x_max

    parts = [
        '<figure class="bars"><svg xmlns="http://www.w3.org/2000/svg" '
        f'width="{_CHART_WIDTH}" height="{height}" role="img" '
        'aria-label="peak bytes per device of each mesh">'
    ]
    for tick in ticks:
        at = x(tick * unit_bytes)
        parts.append(
            f'<line x1="{at:.1f}" y1="{top - 4}" x2="{at:.1f}" y2="{axis_y}" '
            f'stroke="#d0d7de"/><text x="{at:.1f}" y="{axis_y + 14}" '
            f'font-size="11" text-anchor="middle">{tick:g} {unit}</text>'
        )
    for i, row in enumerate(rows):
        y = top + i * (_BAR + _GAP)
        parts.append(
            f'<text x="{left - 8}" y="{y + _BAR - 5}" font-size="12" '
            f'text-anchor="end" font-family="ui-monospace,monospace">'
            f"{esc(row.name)}</text>"
        )
        peak = row.peak_bytes
        if peak is None:
            parts.append(
                f'<text x="{left + 6}" y="{y + _BAR - 5}" font-size="12" '
                f'fill="#57606a" font-style="italic">{esc(row._short_status())}'
                "</text>"
            )
            continue
        colour = {"fits": "#1a7f37", "compiled": "#0969da"}.get(row.outcome, "#cf222e")
        parts.append(
            f'<rect x="{left}" y="{y}" width="{max(x(peak) - left, 1):.1f}" '
            f'height="{_BAR}" fill="{colour}"><title>{esc(row.name)}: '
            f"{esc(format_bytes(peak))} per device ({esc(row._short_status())})"
            "</title></rect>"
        )
    parts.append(
        f'<line x1="{left}" y1="{top - 4}" x2="{left}" y2="{axis_y}" stroke="#57606a"/>'
    )
    if budget is not None:
        at = x(budget)
        parts.append(
            f'<line x1="{at:.1f}" y1="{top - 12}" x2="{at:.1f}" y2="{axis_y}" '
            'stroke="#cf222e" stroke-width="2" stroke-dasharray="6 4"/>'
            f'<text x="{at:.1f}" y="{top - 16}" font-size="11" text-anchor="middle" '
            f'fill="#cf222e">budget {esc(format_bytes(budget))}</text>'
        )
    parts.append(
        "</svg><figcaption>Peak bytes per device of each mesh, best first: green "
        "fits, red does not"
        + ("" if budget is not None else ", blue: no budget to judge by")
        + "; the dashed line is the budget.</figcaption></figure>"
    )
    return "".join(parts)

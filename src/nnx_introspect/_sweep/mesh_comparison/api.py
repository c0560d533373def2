"""The comparison itself: :func:`compare_meshes`, composing the steps.

The arguments checked (``arguments``), the candidates listed or enumerated and
planned (``candidates``), the others compiled on an executor (``run``; by
default the local ``pool``) and ranked into a :class:`MeshComparison`
(``report``).
"""

import concurrent.futures
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Unpack

import jax
from flax import nnx

from nnx_introspect._accelerators import resolve_topology
from nnx_introspect._mesh import MeshLike
from nnx_introspect._render import batch_str
from nnx_introspect._step import (
    MAX_CHILD_DEVICES,
    BatchLike,
    StepOptions,
    StepSpec,
    as_step_spec,
    blame,
    step_kind,
    step_names,
)
from nnx_introspect._sweep.mesh_comparison.arguments import (
    BY_NAME,
    check_executor,
    check_picklable,
    check_timeout,
)
from nnx_introspect._sweep.mesh_comparison.candidates import (
    PROBE_AXIS,
    auto_meshes,
    listed_meshes,
    pick_auto_axes,
    plan_check,
)
from nnx_introspect._sweep.mesh_comparison.pool import cpus, default_pool
from nnx_introspect._sweep.mesh_comparison.report import MeshComparison
from nnx_introspect._sweep.mesh_comparison.rows import (
    MeshAxes,
    MeshCandidate,
    plural,
    sort_key,
)
from nnx_introspect._sweep.mesh_comparison.run import Run
from nnx_introspect._typing import ArgumentError, IntLike, typechecked
from nnx_introspect._xla import start_backends_quietly


@typechecked
def compare_meshes(
    target: StepSpec | nnx.Module | nnx.State[Any, Any] | Callable[..., Any] | str,
    meshes: str | Sequence[MeshLike],
    batch: BatchLike | None = None,
    /,
    *,
    executor: object = None,
    timeout: float | int | None = None,
    max_workers: IntLike | None = None,
    progress: Callable[[int, int, MeshCandidate | None], object] | None = None,
    compiling: Callable[[tuple[str, ...], tuple[float, ...]], object] | None = None,
    cache: bool = True,
    **options: Unpack[StepOptions],
) -> MeshComparison:
    """Compile one step of ``target`` on each of ``meshes`` and rank them.

    Every candidate is checked before anything compiles, then planned here
    with :func:`~nnx_introspect.mesh_config_report` (same rules, logical rules
    and optimizer): a candidate whose plan has problems (a dimension that does
    not divide, an axis the mesh lacks, a batch that does not split) or whose
    parameters, other state and optimizer state alone exceed the budget is
    rejected, with no compile spent. Each other candidate is one independent
    compile of the step's :class:`~nnx_introspect.StepSpec` (varied to its
    mesh with ``dataclasses.replace``) submitted to ``executor``; its result is
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
    the order it first appears. A mixture of experts whose expert weights
    carry the logical axis ``"expert"`` adds an expert-parallel axis ``ep``
    after the data-parallel ones (``fsdp, ep, tp``): its experts split over
    it, and a candidate whose ``ep`` does not divide them is rejected by the
    planner, with the sizes that do. With ``batch_spec=None`` the batch splits over
    each mesh's first axis, so name the data-parallel axis first (in
    ``batch_spec`` or the logical rules) when the model's specs name another
    one first.

    Args:
        target: The step's :class:`~nnx_introspect.StepSpec` alone (then
            ``batch`` is left out; its mesh is replaced by each candidate's,
            and ``options`` given replace its fields), or the model as the
            spec takes it: here by name, a ``"package.module:factory"`` or a
            factory importable by that name.
        meshes: The candidates, each as :class:`~nnx_introspect.StepSpec` takes a
            mesh (a mapping, ``"fsdp=2,tp=4"``, an ``AbstractMesh``; of a
            ``Mesh`` only the axes are used), all with the same number of
            devices (``topology``'s when given); or ``"auto"``. Two candidates
            are the same when their axes, sizes and order are:
            ``"fsdp=8,tp=1"`` and ``"fsdp=8"`` are different meshes (the
            second has no ``tp`` for a spec to name), and so are
            ``"fsdp=2,tp=4"`` and ``"tp=4,fsdp=2"`` (another device order, and
            the batch splits over the first axis).
        batch: See :class:`~nnx_introspect.StepSpec` (with a target only).
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
            ``CHILD_TIMEOUT_SECONDS``, 900 s, or the seconds the environment's
            ``NNX_INTROSPECT_CHILD_TIMEOUT`` gives).
        max_workers: The default pool's size (``--jobs``); only without an
            ``executor``.
        progress: Called with ``(done, total, row)``: ``(0, total, None)``
            once the compiles are submitted, then after each candidate's
            compile is resolved (in the order given).
        compiling: Called with ``(names, seconds)``: the meshes compiling
            now and the seconds each finished compile took; once the
            compiles are submitted and whenever either changes.
        cache: Read each program compiled before from the cache of compile
            results (see :func:`~nnx_introspect.step_memory_report`).
        **options: The step's options (:class:`~nnx_introspect.StepOptions`),
            each the :class:`~nnx_introspect.StepSpec` field of its name, as
            :func:`~nnx_introspect.step_memory_report` takes them. Here the
            calls travel to workers by pickle: ``loss`` is ``None``,
            ``"mean"``, ``"lm"``, a ``"package.module:function"`` name or a
            function importable by that name; ``optimizer`` a name
            (``"adamw"``...) or ``None``; ``rules``, ``logical_rules`` and
            ``batch_spec`` picklable. Every mesh must have ``topology``'s
            device count; every candidate is judged against
            ``max_device_bytes`` (none on XLA:CPU: the meshes are then ranked
            by peak alone) and compiles with ``remat``; a mesh whose
            data-parallel axes a microbatch's rows (``microbatches``) do not
            divide over is rejected.

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
        4) does not divide over model (product 8). ... (and 1 more problem)
        >>> from nnx_introspect import StepSpec
        >>> spec = StepSpec(  # the step as a spec; its mesh is each candidate's
        ...     "nnx_introspect.examples:two_layer", "data=8", x,
        ...     rules=[("kernel", P(None, "model"))], batch_spec=P("data"),
        ...     max_device_bytes="1MiB",
        ... )
        >>> with ThreadPoolExecutor(max_workers=1) as pool:
        ...     again = compare_meshes(spec, ["data=8,model=1"], executor=pool)
        >>> again.best.peak_bytes == comparison.best.peak_bytes
        True
    """
    began = time.perf_counter()
    pool_size = check_executor(executor, max_workers)
    wait = check_timeout(timeout)
    start_backends_quietly()  # "auto" and the checks count this process's devices
    probe, topology, network = search_probe(
        target, batch, options, caller="compare_meshes"
    )
    with blame("topology"):
        devices = None if topology is None else resolve_topology(topology).devices
    spec, auto_axes, candidates, target_name = checked_candidates(
        probe, meshes, topology, devices, network
    )
    budget = spec.budget
    rows, to_compile = _planned(spec, candidates, budget.bytes)
    described = "nothing (every mesh was rejected by the planner)"
    if to_compile:
        run = (executor, pool_size, wait, progress, compiling)
        compiled, described = _compile_all(spec, run, to_compile, cache)
        rows |= compiled
    ordered = sorted(rows.items(), key=lambda item: sort_key(item[0], item[1]))
    return MeshComparison(
        target=target_name,
        candidates=tuple(row for _, row in ordered),
        num_devices=spec.num_devices,
        max_device_bytes=budget.bytes,
        budget_basis=budget.basis,
        topology=topology,
        auto_axes=auto_axes,
        batch=tuple(batch_str(leaf) for leaf in spec.batch),
        step=step_kind(spec.loss, spec.optimizer_name),
        compiles=len(to_compile),
        seconds=time.perf_counter() - began,
        executor=described,
    )


def search_probe(
    target: Any, batch: Any, options: Mapping[str, Any], *, caller: str
) -> tuple[StepSpec, str | None, Any]:
    """The step a search over meshes varies, on a one-axis probe mesh.

    ``target`` is a :class:`StepSpec` alone (its mesh is replaced by each
    candidate's; ``options`` given replace its fields) or a target with its
    ``batch`` and options. The topology and the network bandwidth are kept
    apart, to be checked against the candidates: returns
    ``(probe, topology, network_bytes_per_second)``.

    Raises:
        TypeError: For an unknown option, a spec with a ``batch`` beside it or
            a target without one.
    """
    rest = dict(options)
    if isinstance(target, StepSpec):
        if batch is not None:
            raise TypeError(
                f"{caller}() was given a StepSpec and a `batch` beside it: the "
                "spec holds it. Pass the spec alone, or "
                "`dataclasses.replace(spec, batch=...)`."
            )
        topology, network = _kept_apart(
            rest.pop("topology", target.topology),
            rest.pop("network_bytes_per_second", target.network_bytes_per_second),
        )
        target = dataclasses.replace(
            target,
            mesh={PROBE_AXIS: 1},
            topology=None,
            network_bytes_per_second=None,
        )
        return as_step_spec(target, None, None, rest, caller=caller), topology, network
    if batch is None:
        raise TypeError(
            f"{caller}() needs `target`, `meshes` and `batch` (or a StepSpec and "
            "`meshes`), got no `batch`."
        )
    topology, network = _kept_apart(
        **{
            k: rest.pop(k)
            for k in ("topology", "network_bytes_per_second")
            if k in rest
        }
    )
    probe = as_step_spec(target, {PROBE_AXIS: 1}, batch, rest, caller=caller)
    return probe, topology, network


@typechecked
def _kept_apart(
    topology: str | None = None, network_bytes_per_second: IntLike | str | None = None
) -> tuple[str | None, IntLike | str | None]:
    """The options a search checks against its candidates, type-checked."""
    return topology, network_bytes_per_second


def checked_candidates(
    probe: StepSpec,
    meshes: Any,
    topology: str | None,
    devices: int | None,
    network: Any,
) -> tuple[StepSpec, tuple[str, ...] | None, list[MeshAxes], str]:
    """What a search over meshes checks before any compile, in order.

    ``probe`` (the step on a one-axis probe mesh) must name what a worker
    rebuilds and pickle its rules; the meshes are listed or enumerated; the
    spec on the first of them checks the topology's compiler and the device
    count. Returns ``(that spec, the axes of "auto" or None, the candidate
    meshes, the target's name)``.
    """
    target_name, _, _ = step_names(probe, BY_NAME)
    for name in ("rules", "logical_rules", "batch_spec"):
        check_picklable(getattr(probe, name), name)
    auto_axes, candidates = _candidates(probe, meshes, topology, devices)
    spec = dataclasses.replace(  # the compiler's package checked first
        probe,
        mesh=dict(candidates[0]),
        topology=topology,
        network_bytes_per_second=network,
    )
    _check_device_count(spec)
    return spec, auto_axes, candidates, target_name


def _planned(
    spec: StepSpec, candidates: Sequence[MeshAxes], budget: int | None
) -> tuple[dict[int, MeshCandidate], list[tuple[int, MeshAxes, int]]]:
    """The rows the planner rejects, and ``(index, mesh, state bytes)`` to compile."""
    rows: dict[int, MeshCandidate] = {}
    to_compile: list[tuple[int, MeshAxes, int]] = []
    for index, mesh in enumerate(candidates):
        try:
            candidate = dataclasses.replace(spec, mesh=dict(mesh))
        except ArgumentError as error:  # k microbatches do not split on it
            if error.argument != "microbatches":
                raise
            rows[index] = MeshCandidate(mesh, "rejected", str(error))
            continue
        reason, state = plan_check(candidate, budget)
        if reason is not None or state is None:
            rows[index] = MeshCandidate(mesh, "rejected", reason, plan_bytes=state)
        else:
            to_compile.append((index, mesh, state))
    return rows, to_compile


def _compile_all(
    spec: StepSpec,
    run: tuple[Any, int | None, float | None, Any, Any],
    to_compile: list[tuple[int, MeshAxes, int]],
    cache: bool = True,
) -> tuple[dict[int, MeshCandidate], str]:
    """Every candidate's row, compiled on the executor, and the executor described.

    ``run`` is ``(executor, default pool size, timeout, progress, compiling)``.
    """
    executor, pool_size, wait, progress, compiling = run
    own: concurrent.futures.ProcessPoolExecutor | None = None
    if isinstance(executor, concurrent.futures.Executor):
        pool: concurrent.futures.Executor = executor
        described = type(executor).__name__
    else:
        workers = min(pool_size or cpus(), len(to_compile))
        devices = spec.num_devices if spec.topology is None else None
        pool = own = default_pool(workers, devices)
        described = f"a spawn process pool of {plural(workers, 'worker')}"
    rows = Run(pool, own, wait, progress, spec.budget.bytes, compiling).all(
        spec, to_compile, cache
    )
    return rows, described


def _check_device_count(spec: StepSpec) -> None:
    """A CPU compile of the meshes has at most :data:`MAX_CHILD_DEVICES` devices."""
    if spec.topology is None and spec.num_devices > max(
        MAX_CHILD_DEVICES, jax.device_count()
    ):
        raise ArgumentError(
            "meshes",
            f"`meshes` have {spec.num_devices} devices: more than the "
            f"{MAX_CHILD_DEVICES} virtual CPU devices a compile may use. Compare "
            "smaller meshes, or name a TPU or GPU `topology`.",
        )


def _candidates(
    probe: StepSpec, meshes: Any, topology: str | None, devices: int | None
) -> tuple[tuple[str, ...] | None, list[MeshAxes]]:
    """``(the axes of "auto" or None, the candidate meshes)``."""
    if isinstance(meshes, str) and meshes.strip().lower() == "auto":
        auto_axes = pick_auto_axes(
            probe.model, probe.rules, probe.logical_rules, probe.batch_spec
        )
        count = devices if devices is not None else jax.device_count()
        return auto_axes, auto_meshes(auto_axes, count)
    return None, listed_meshes(meshes, topology, devices)

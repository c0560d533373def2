"""The public :func:`step_memory_report`: a :class:`StepSpec`, planned, compiled.

:func:`measure_step` measures a spec (the searches call it with each spec they
try), one stage after another: the spec's request and plan
(:mod:`~nnx_introspect._step.spec`), the program compiled where its devices
are (:mod:`~nnx_introspect._step.child`, which hands a compile here to
:mod:`~nnx_introspect._step.compile`), the report assembled from XLA's
readings (:mod:`~nnx_introspect._step.assemble`).
"""

import dataclasses
from collections.abc import Callable
from typing import Any, Unpack, cast

from flax import nnx

from nnx_introspect._mesh import MeshLike
from nnx_introspect._step.assemble import assemble_report
from nnx_introspect._step.child import compiled_where
from nnx_introspect._step.inputs import BatchLike
from nnx_introspect._step.measured import as_measure, measured_topology
from nnx_introspect._step.program import ProgramKind
from nnx_introspect._step.report import StepMemoryReport
from nnx_introspect._step.spec import StepOptions, StepSpec, as_step_spec, plan_step
from nnx_introspect._step.train import TRAIN
from nnx_introspect._typing import IntLike, typechecked
from nnx_introspect._xla import start_backends_quietly

__all__ = [
    "measure_step",
    "step_memory_report",
]


@typechecked
def step_memory_report(
    target: StepSpec | nnx.Module | nnx.State[Any, Any] | Callable[..., Any] | str,
    mesh: MeshLike | None = None,
    batch: BatchLike | None = None,
    /,
    *,
    debug: bool = False,
    cache: bool = True,
    measure: IntLike | bool | None = None,
    **options: Unpack[StepOptions],
) -> StepMemoryReport:
    """Compile one step of ``target`` on ``mesh`` and report XLA's bytes per device.

    The step is compiled, never run: parameters, state, optimizer state and the
    batch are ``jax.ShapeDtypeStruct`` s with ``NamedSharding`` s whose specs
    come from :func:`~nnx_introspect.mesh_config_report` (same ``rules``,
    ``logical_rules`` and metadata, so the two never disagree). The model runs
    inside the step as ``nnx.merge(graphdef, params, other_state)``. What is
    compiled:

    * ``loss=None``: the forward pass ``model(*batch)``;
    * a loss and ``optimizer=None``: forward and backward, returning the loss,
      the gradients (sharded like the parameters) and the updated other state;
    * a loss and an ``optimizer``: the full step: gradients, the
      ``nnx.Optimizer`` update, new parameters, other state and optimizer
      state, with the old ones donated as a training loop does.

    Every argument counts, used or not (``keep_unused=True``): a batch leaf the
    step ignores still sits on the device.

    The numbers come from the compiler: XLA:CPU on this process's devices, or
    in a child process with ``prod(mesh)`` virtual CPU devices (at most
    :data:`MAX_CHILD_DEVICES`) when this process has fewer; XLA:TPU for a named
    TPU ``topology`` (``pip install "nnx-introspect[tpu]"``) and XLA:GPU for a
    named NVIDIA one (``pip install "nnx-introspect[gpu]"``), with no TPU or
    GPU present. A named topology compiles in a child process with a
    controlled environment (it needs ``target`` and a callable ``loss`` by
    name; a TPU compile of an unnamed target runs in this process instead).
    Argument bytes are exact anywhere; temporaries depend on the compiler, and
    XLA:CPU's can differ from an accelerator's many times over.

    The budget is ``max_device_bytes``, else the topology's device memory.
    A step the compiler refuses for memory is an answer, not an error: the
    report has ``out_of_memory=True``, ``fits()`` False and the compiler's own
    words and figures.

    Args:
        target: The model (see :class:`~nnx_introspect.StepSpec`, which
            documents every argument but ``debug`` and ``cache``), or a
            :class:`~nnx_introspect.StepSpec` alone: then ``mesh`` and
            ``batch`` are left out, and ``options`` given replace its own.
        mesh: The mesh (see :class:`~nnx_introspect.StepSpec`).
        batch: The model's positional arguments (see
            :class:`~nnx_introspect.StepSpec`).
        debug: Keep what the compiler and the child process wrote to stderr
            on the report (``compiler_log``); it never reaches this process's
            stderr.
        cache: Read a program compiled before from the cache of compile
            results, and keep this one's there
            (``$XDG_CACHE_HOME/nnx-introspect``; ``NNX_INTROSPECT_CACHE=off``
            turns it off too). A report from the cache is the first one's,
            but for ``compilation.seconds`` (the time spent now) and
            ``compilation.cached`` (when it was compiled).
        measure: Run the compiled step on this process's devices, one
            warm-up and ``measure`` timed runs (``True``: 5), the state fed
            back as a training loop feeds it: ``report.measured`` holds the
            times, tokens per second, the MFU and the allocator's figures, and
            every rendering the estimate against the measurement. The devices
            must be this process's: no ``topology`` (an accelerator present
            is named for the estimate, ``"v5e-1"`` for one v5e chip), or one
            whose kind and count the present devices are; the step is then
            compiled here, on them, never read from the cache.
        **options: The step's options (:class:`~nnx_introspect.StepOptions`:
            ``loss``, ``optimizer``, ``rules``, ``logical_rules``,
            ``batch_spec``, ``topology``, ``max_device_bytes``,
            ``trace_as_target``, ``breakdown``, ``network_bytes_per_second``,
            ``remat``, ``microbatches``, ``tokens_per_step``, ``lora``,
            ``compiler_flags``), each the :class:`~nnx_introspect.StepSpec`
            field of its name. ``compiler_flags`` (XLA or libtpu flags, as a
            training run's ``LIBTPU_INIT_ARGS`` sets them) reach the compile
            beside those of ``XLA_FLAGS`` and ``LIBTPU_INIT_ARGS`` in the
            environment; ``report.compilation.compiler_flags`` lists every
            flag it compiled with and where it came from (the library's own
            ``--xla_force_host_platform_device_count`` left out).

    Returns:
        A frozen :class:`StepMemoryReport`.

    Raises:
        TypeError: If an argument has the wrong type (``target`` an
            ``nnx.State``, a batch leaf without shape and dtype...).
        ValueError: An :class:`~nnx_introspect._typing.ArgumentError`
            naming the argument to blame: the arguments' checks (see
            :class:`~nnx_introspect.StepSpec`), or the plan has problems
            (every one is listed; nothing is compiled), the batch does not
            divide over the mesh, the model cannot take the batch, the loss
            fails, or a child compile cannot rebuild a target by name.
        ImportError: If ``topology`` names a TPU and ``libtpu`` is not
            installed, or a GPU and the ``gpu`` extra is not.
        RuntimeError: If a child compile crashes or times out.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from flax import nnx
        >>> def mlp(rngs):
        ...     return nnx.Sequential(
        ...         nnx.Linear(16, 64, rngs=rngs), nnx.relu,
        ...         nnx.Linear(64, 16, rngs=rngs),
        ...     )
        >>> x = jax.ShapeDtypeStruct((32, 16), jnp.float32)
        >>> report = step_memory_report(mlp, {"data": 4}, x, optimizer="adamw")
        >>> report.num_devices, report.step
        (4, 'forward + backward + optimizer update')
        >>> params = (16 * 64 + 64 + 64 * 16 + 16) * 4  # replicated float32
        >>> report.argument_bytes == 3 * params + 8 * 16 * 4 + 8  # + 2 counters
        True
        >>> report.plan.bytes_by_category["optimizer state"] == 2 * params + 8
        True

        The compiler's flags, as a training run sets them, and where each
        came from:

        >>> fast = step_memory_report(
        ...     mlp, {"data": 4}, x, compiler_flags="--xla_cpu_enable_fast_math=true"
        ... )
        >>> for flag in fast.compilation.compiler_flags:
        ...     print(*flag)  # name, value, source
        xla_cpu_enable_fast_math true compiler_flags
    """
    spec = as_step_spec(target, mesh, batch, options)
    runs = as_measure(measure)
    if runs is not None:
        start_backends_quietly()
        spec = devices_measured(spec, runs)
    return measure_step(spec, debug=debug, cache=cache, runs=runs)


def devices_measured(spec: StepSpec, runs: int) -> StepSpec:
    """``spec`` to run on this process's devices, its topology named for them.

    Raises:
        ArgumentError: naming ``measure`` when the spec's devices are not
            this process's (:func:`~nnx_introspect._step.measured.measured_topology`).
    """
    here = measured_topology(spec.num_devices, spec.mesh_axes, spec.topology, runs)
    if spec.topology is None and here is not None:  # the estimate's hardware
        return dataclasses.replace(spec, topology=here)
    return spec


def measure_step(
    spec: StepSpec,
    *,
    debug: bool = False,
    cache: bool = True,
    runs: int | None = None,
    program: ProgramKind = TRAIN,
) -> StepMemoryReport:
    """Plan, compile and report the step ``spec`` describes.

    What :func:`step_memory_report` does once its arguments are a spec; the
    searches call it with each spec they try. With ``cache``, a program
    compiled before is read from the cache of compile results
    (:mod:`~nnx_introspect._xla.cache`) instead of compiled again. With
    ``runs`` (:func:`devices_measured`'s spec), the program is compiled on this
    process's devices and run there. ``program`` is the kind of program
    compiled from the spec (:mod:`~nnx_introspect._step.registry`): the
    training step, or another kind of the same request (``LOGPROBS``).
    """
    start_backends_quietly()  # before this process's devices are counted
    request = spec.request()
    plan = plan_step(spec)
    readings, compiled_in = compiled_where(spec, request, plan, cache, runs, program)
    return assemble_report(
        request,
        plan,
        readings,
        spec.topology,
        compiled_in,
        spec.budget,
        debug,
        cast("int | None", spec.network_bytes_per_second),  # parsed by the spec
    )

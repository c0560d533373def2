"""The public :func:`serve_memory_report`: a :class:`ServeSpec`, compiled, read."""

import dataclasses
from typing import Any

from jax.sharding import Mesh

from nnx_introspect._accelerators import Budget
from nnx_introspect._breakdown import Breakdown
from nnx_introspect._serve.child import completed, serve_readings
from nnx_introspect._serve.compile import PROGRAMS, ServeReadings, compile_serving
from nnx_introspect._serve.programs import check_cache_path
from nnx_introspect._serve.report import ServeMemoryReport, ServeProgram
from nnx_introspect._serve.spec import ServeOptions, ServeSpec
from nnx_introspect._serve.timing import serve_time
from nnx_introspect._serve.windows import sliding_window_notes
from nnx_introspect._step import (
    Measured,
    StepMemory,
    as_measure,
    importable_name,
    measured_topology,
    present_mesh,
)
from nnx_introspect._typing import ArgumentError, typechecked
from nnx_introspect._xla import XlaReadings, compiler_name, start_backends_quietly

__all__ = [
    "measure_serve",
    "program_memory",
    "serve_memory_report",
    "serve_program",
]


def program_memory(numbers: XlaReadings, budget: Budget, planned: int) -> StepMemory:
    """XLA's figures as a step's memory.

    Refused for memory: the planned arguments (weights and cache) and the
    compiler's required bytes.
    """
    oom = bool(numbers.out_of_memory)
    arguments = numbers.argument_bytes
    if arguments is None:
        arguments = planned
    temp = numbers.temp_bytes
    if temp is None:
        temp = max(0, (numbers.compiler_required_bytes or 0) - arguments)
    memory = StepMemory(
        argument_bytes=arguments,
        output_bytes=numbers.output_bytes or 0,
        temp_bytes=temp,
        alias_bytes=numbers.alias_bytes or 0,
        xla_peak_bytes=numbers.xla_peak_bytes,
        xla_peak_complete=numbers.backend != "cpu",
        xla_peak_lowers=numbers.backend == "tpu",
        out_of_memory=oom,
        compiler_message=numbers.compiler_message,
        compiler_required_bytes=numbers.compiler_required_bytes,
        compiler_available_bytes=numbers.compiler_available_bytes,
    )
    device = budget.device_memory_bytes
    if device is not None and memory.peak_bytes > device and not oom:
        # XLA:GPU compiles a program over the device's memory, which cannot run
        return dataclasses.replace(memory, out_of_memory=True)
    return memory


def _wire(
    figures: Any,
) -> tuple[tuple[tuple[str, ...], int], ...] | None:
    """``collective_wire_bytes`` (``(axes, bytes, wire)``) as ``(axes, wire)``."""
    if figures is None:
        return None
    return tuple((tuple(axes), int(wire)) for axes, _, wire in figures)


def serve_program(
    name: str,
    spec: ServeSpec,
    readings: ServeReadings,
    where: str = "this process",
) -> ServeProgram:
    """Program ``name``'s figures, from its readings."""
    numbers = readings.program(name)
    run = numbers.measured
    measured = None
    if run is not None:
        decoding = name == "decode"
        measured = Measured.from_run(
            run,
            "decode step" if decoding else "prefill",
            tokens=spec.sequences if decoding else spec.prefill_sequences * spec.prompt,
        )
    planned = readings.weights_bytes + readings.kv_cache_bytes
    found = numbers.breakdown
    return ServeProgram(
        name=name,
        sequences=spec.sequences if name == "decode" else spec.prefill_sequences,
        tokens=1 if name == "decode" else spec.prompt,
        weights_bytes=readings.weights_bytes,
        kv_cache_bytes=readings.kv_cache_bytes,
        memory=program_memory(numbers, spec.budget, planned),
        flops=numbers.flops,
        warnings=tuple(numbers.warnings),
        compile_seconds=float(numbers.compile_seconds),
        bytes_accessed=numbers.bytes_accessed,
        wire_bytes=_wire(numbers.collective_wire_bytes),
        matmul_dtype=numbers.matmul_dtype,
        breakdown=None if found is None else Breakdown.from_json_data(found),
        breakdown_error=numbers.breakdown_error,
        cached=numbers.cached,
        compiled_in=where,
        traffic=numbers.traffic,
        measured=measured,
    )


def measure_serve(
    spec: ServeSpec,
    *,
    breakdown: bool = False,
    cache: bool = True,
    runs: int | None = None,
) -> ServeMemoryReport:
    """Build, compile and read both serving programs of ``spec``.

    Every problem of the cache's split (sequences over the data-parallel axes,
    KV heads over ``tp``) is raised before anything is compiled. With
    ``breakdown``, each program's buffers at its peak are classified too.
    With ``cache``, a program compiled before is read from the cache of
    compile results. A named topology compiles in a child process
    (:func:`~nnx_introspect._serve.child.serve_readings`). With ``runs``, both
    programs compile on this process's devices and run there (the spec's
    topology, if any, must be those devices).
    """
    start_backends_quietly()
    if runs is not None:
        here = measured_topology(
            spec.num_devices, spec.mesh_axes, spec.topology, runs, "the programs"
        )
        spec = spec.replace(topology=here)
        mesh = (
            spec.mesh if isinstance(spec.mesh, Mesh) else present_mesh(spec.mesh_axes)
        )
        check_cache_path(spec)
        readings = compile_serving(
            spec, breakdown=breakdown, cache=cache, mesh=(mesh, None), runs=runs
        )
        where = "this process"
    else:
        readings, where = serve_readings(spec, breakdown=breakdown, cache=cache)
    notes: tuple[str, ...] = ()
    if readings.added_axes:
        given = ",".join(f"{a}={s}" for a, s in spec.mesh_axes)
        spec = completed(spec, readings.added_axes)
        names = ", ".join(readings.added_axes)
        notes = (
            f"`mesh` {given} leaves out {names}, which the model's own "
            f"activation constraints name: compiled on "
            f"{','.join(f'{a}={s}' for a, s in spec.mesh_axes)} (an axis of size "
            "1 shards nothing).",
        )
    found = {name: serve_program(name, spec, readings, where) for name in PROGRAMS}
    target = importable_name(spec.target) or type(spec.model).__name__
    return ServeMemoryReport(
        target=target,
        mesh_axes=spec.mesh_axes,
        topology=spec.topology,
        sequences=spec.sequences,
        context=spec.context,
        prompt=spec.prompt,
        weights=spec.options.weights,
        kv_cache=spec.options.kv_cache,
        kv_bytes_per_token=readings.kv_bytes_per_token,
        prefill=found["prefill"],
        decode=found["decode"],
        budget=spec.budget,
        backend=readings.program("decode").backend,
        compiler=compiler_name(
            readings.program("decode").backend,
            readings.program("decode").device_kind,
        ),
        time=serve_time(
            spec.topology,
            spec.mesh_axes,
            found["prefill"],
            found["decode"],
            spec.data_parallel,
        ),
        notes=notes + sliding_window_notes(spec, readings),
    )


@typechecked
def serve_memory_report(
    target: Any,
    mesh: Any,
    /,
    *,
    sequences: Any,
    context: Any,
    prompt: Any = None,
    prefill_sequences: Any = None,
    topology: str | None = None,
    max_device_bytes: Any = None,
    weights: Any = "bfloat16",
    kv_cache: Any = "bfloat16",
    init_cache: Any = None,
    decode: Any = None,
    breakdown: Any = False,
    cache: Any = True,
    measure: Any = None,
) -> ServeMemoryReport:
    """Prefill and decode memory per device, compiled for the target without it.

    Compiles the two programs a server runs, each with the KV cache donated:
    **prefill** of ``prompt`` tokens for ``prefill_sequences`` sequences,
    written into a cache of ``sequences`` x ``context`` positions, and
    **decode** of one token for each of ``sequences``, reading the whole
    cache. The served weights are a copy in ``weights`` dtype, sharded as the
    model's annotations say; the cache splits sequences over the data-parallel
    axes and KV heads over ``tp``. Out of memory is a verdict
    (:meth:`ServeMemoryReport.fits`), never an error.

    Args:
        target: An ``nnx.Module``, a factory ``(rngs) -> Module`` or
            ``"package.module:factory"``; built abstractly.
        mesh: The serving mesh: ``"tp=8"``, ``{"data": 2, "tp": 4}``, a ``Mesh``.
        sequences: Sequences decoded at once.
        context: Positions of the KV cache per sequence.
        prompt: Tokens prefilled per sequence; ``context`` by default.
        prefill_sequences: Sequences prefilled at once; all by default.
        topology: A target such as ``"h100-8"`` or ``"v5e-8"``, compiled for
            with no accelerator present; ``None`` compiles for this process's
            devices.
        max_device_bytes: A budget per device (``"70GiB"`` or bytes).
        weights: ``"bfloat16"`` (default), ``"float32"`` or ``None`` (the
            model's own dtype).
        kv_cache: ``"bfloat16"``, ``"float8_e4m3fn"``, ``"int8"``, ``"float32"``.
        init_cache: ``"pkg.mod:fn"`` making the cache as
            ``fn(model, sequences, context, dtype)``; default the model's
            ``init_cache(sequences, context, dtype)``.
        decode: ``"pkg.mod:fn"`` called as
            ``fn(model, tokens, positions, cache) -> (logits, cache)``; default
            ``model(tokens, positions, cache, attention_mask)``.
        breakdown: Also classify every buffer live at each program's peak
            (``report.prefill.breakdown``, ``report.decode.breakdown``): the
            ``weights``, the ``KV cache``, the tokens, the ``logits`` output,
            activations (``temporary``) and collective buffers, by source
            line, as a training step's breakdown.
        cache: Read a program compiled before for the same target, mesh,
            shapes, dtypes and versions from the cache of compile results
            (``~/.cache/nnx-introspect``; ``NNX_INTROSPECT_CACHE=off`` turns
            it off too): the report says "from the cache (compiled on DATE)".
        measure: Run both compiled programs on this process's devices, one
            warm-up and ``measure`` timed runs each (``True``: 5), the cache
            fed back: each program's ``measured`` (a decode step's time per
            token, the prefill's time to the first token, tokens per second,
            the allocator's figures) beside the estimate. The devices must
            be this process's (no ``topology``, or the one they are).

    Returns:
        The :class:`ServeMemoryReport`.

    Raises:
        ArgumentError: For a bad value (naming the argument): ``sequences``
            not a positive integer, ``prompt`` longer than ``context``, an
            unknown dtype, a ``tp`` that does not divide the KV heads, a model
            with no cache path, a cache of the wrong layout.

    Example:
        >>> from nnx_introspect import serve_memory_report
        >>> from nnx_introspect.examples import llama_tiny_sharded
        >>> report = serve_memory_report(
        ...     llama_tiny_sharded, "fsdp=2,tp=4", sequences=4, context=64,
        ...     prompt=16, max_device_bytes="1GiB")
        >>> report.kv_bytes_per_token  # 2 x 8 layers x 1 KV head x 64 x 2 B
        2048
        >>> # 2 sequences a device, and the cache's int32 write index
        >>> report.decode.kv_cache_bytes == 2048 * 2 * 64 + 4
        True
        >>> report.fits()
        True
    """
    start_backends_quietly()  # before the model is built: no plugin lines
    options = ServeOptions(weights, kv_cache, init_cache, decode)
    spec = ServeSpec(
        target,
        mesh,
        sequences,
        context,
        prompt,
        prefill_sequences,
        topology,
        max_device_bytes,
        options,
    )
    for name, value in (("breakdown", breakdown), ("cache", cache)):
        if not isinstance(value, bool):
            raise ArgumentError(name, f"`{name}` must be True or False, got {value!r}.")
    return measure_serve(
        spec, breakdown=breakdown, cache=cache, runs=as_measure(measure)
    )

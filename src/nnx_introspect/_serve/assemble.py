"""The serving report from XLA's readings: :func:`assemble_serve`.

Each program's figures (:class:`~nnx_introspect._serve.report.ServeProgram`)
from its readings, the notes on the mesh the programs compiled on and on
sliding-window layers, and the time estimate
(:mod:`~nnx_introspect._serve.timing`): the last stage of
:func:`~nnx_introspect._serve.api.measure_serve`, as
:mod:`~nnx_introspect._step.assemble` is a step's.
"""

import dataclasses
from typing import Any

from nnx_introspect._accelerators import Budget
from nnx_introspect._breakdown import Breakdown
from nnx_introspect._serve.child import Served
from nnx_introspect._serve.compile import PROGRAMS, ServeReadings
from nnx_introspect._serve.report import ServeMemoryReport, ServeProgram
from nnx_introspect._serve.spec import ServeSpec
from nnx_introspect._serve.timing import serve_time
from nnx_introspect._serve.windows import sliding_window_notes
from nnx_introspect._step import Measured, StepMemory, importable_name
from nnx_introspect._xla import XlaReadings, compiler_name

__all__ = ["assemble_serve", "program_memory", "serve_program"]


def assemble_serve(given: ServeSpec, served: Served) -> ServeMemoryReport:
    """The report of ``served``: ``given``'s programs as compiled.

    ``served.spec`` is the spec compiled: ``given``'s, its mesh completed
    with the axes the model's own constraints name (a note says so).
    """
    spec, readings, where = served.spec, served.readings, served.where
    found = {name: serve_program(name, spec, readings, where) for name in PROGRAMS}
    notes: tuple[str, ...] = ()
    if readings.added_axes:
        before = ",".join(f"{a}={s}" for a, s in given.mesh_axes)
        after = ",".join(f"{a}={s}" for a, s in spec.mesh_axes)
        names = ", ".join(readings.added_axes)
        notes = (
            f"`mesh` {before} leaves out {names}, which the model's own "
            f"activation constraints name: compiled on {after} (an axis of size "
            "1 shards nothing).",
        )
    decode = readings.program("decode")
    return ServeMemoryReport(
        target=importable_name(spec.target) or type(spec.model).__name__,
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
        backend=decode.backend,
        compiler=compiler_name(decode.backend, decode.device_kind),
        time=serve_time(
            spec.topology,
            spec.mesh_axes,
            found["prefill"],
            found["decode"],
            spec.data_parallel,
        ),
        notes=notes + sliding_window_notes(spec, readings),
    )


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

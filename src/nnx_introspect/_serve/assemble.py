"""The serving report from XLA's readings: :func:`assemble_serve`.

Each program's figures (:class:`~nnx_introspect._serve.report.ServeProgram`)
from its readings, the notes on the mesh the programs compiled on and on
sliding-window layers, and the time estimate
(:mod:`~nnx_introspect._serve.timing`): the last stage of
:func:`~nnx_introspect._serve.api.measure_serve`, as
:mod:`~nnx_introspect._step.assemble` is a step's.
"""

from typing import Any

from nnx_introspect._breakdown import Breakdown
from nnx_introspect._serve.child import Served
from nnx_introspect._serve.compile import PROGRAMS, ServeReadings
from nnx_introspect._serve.report import ServeMemoryReport, ServeProgram
from nnx_introspect._serve.spec import ServeSpec
from nnx_introspect._serve.timing import serve_time
from nnx_introspect._serve.windows import sliding_window_notes
from nnx_introspect._step import Measured, importable_name, memory_from_readings
from nnx_introspect._xla import CompilerFlag, compiler_name

__all__ = ["assemble_serve", "serve_program"]


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
        memory=memory_from_readings(numbers, spec.budget, planned, trust_tpu=False),
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
        work=numbers.work,
        compiler_flags=tuple(CompilerFlag(*f) for f in numbers.compiler_flags),
    )

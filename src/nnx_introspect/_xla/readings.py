"""What one compile of a program said, as one typed record: :class:`XlaReadings`.

The record travels from the compile
(:func:`~nnx_introspect._xla.analysis.compile_lowered`, in this process or a
child's) to the report that is assembled from it, and is
kept by the cache of compile results; :meth:`XlaReadings.json_data` and
:meth:`XlaReadings.from_json_data` are its one JSON form for both.
"""

import dataclasses
from collections.abc import Mapping
from typing import Any, NamedTuple

__all__ = ["RematStatement", "XlaReadings"]


class RematStatement(NamedTuple):
    """One of XLA's rematerialization warnings, quoted and read.

    ``limit`` is the memory XLA tried to bring the program under,
    ``reduced_to`` what it reached and ``original`` what the program needed
    before (``None`` where the line does not say); ``quote`` is XLA's line.
    """

    quote: str
    limit: int
    reduced_to: int | None = None
    original: int | None = None


@dataclasses.dataclass(frozen=True)
class XlaReadings:
    """The figures and words of one compile, each a plain value.

    Byte counts are ``None`` when the compiler refused the program for memory
    (``out_of_memory``), with its words and figures; ``collectives`` and
    ``breakdown`` are the JSON data of their records, or ``None`` with
    ``collectives_error`` / ``breakdown_error`` saying why.

    Attributes:
        backend: The platform that compiled (``"cpu"``, ``"gpu"``, ``"tpu"``).
        device_kind: The devices' kind.
        compile_seconds: Lowering and compiling (or, from the cache, tracing,
            lowering and looking up), in seconds.
        argument_bytes: XLA's ``argument_size_in_bytes``.
        output_bytes: XLA's ``output_size_in_bytes``.
        temp_bytes: XLA's ``temp_size_in_bytes`` (or, refused, the required
            figure for temporaries the compiler gave).
        alias_bytes: XLA's ``alias_size_in_bytes``.
        xla_peak_bytes: XLA's ``peak_memory_in_bytes``, where given.
        flops: One device's FLOPs, each loop trip counted, or ``None``.
        bytes_accessed: One device's bytes accessed, or ``None``.
        loop_trips: ``(loop name, trips)`` of the program's while loops.
        out_of_memory: Whether the compiler refused the program for memory.
        compiler_message: The compiler's words when it refused it.
        compiler_required_bytes: The bytes it said it needed.
        compiler_available_bytes: The bytes it said the device has.
        warnings: Caveats of this compile, in words.
        compiler_log: What the compiler wrote to stderr.
        remat: XLA's rematerialization warnings, read.
        collectives: The program's collectives as JSON data.
        collective_wire_bytes: ``[axes, bytes, wire bytes]`` per mesh-axis
            combination.
        collectives_error: Why the collectives were not read.
        matmul_dtype: The operand type of most matmul FLOPs.
        breakdown: The breakdown of the peak as JSON data.
        breakdown_error: Why there is no breakdown.
        sharding_constraints: Sharding constraints in the lowered program.
        traced_platform: The platform the model's code saw while traced.
        explicit_axes_fallback: Why the program was compiled with Auto axes.
        device_order: How the mesh's devices were laid out (``"plain"``,
            ``"the mesh's"``, or a topology's words).
        traffic: The bytes the program moves by instruction
            (:func:`~nnx_introspect._xla.hlo.traffic.traffic_json`: read and
            written bytes, the instructions that move the most, with source
            lines), or ``None`` when its text could not be read.
        work: The program's work by instruction
            (:meth:`~nnx_introspect._xla.hlo.work.Work.json_data`: matmul and
            vector FLOPs, HBM bytes and XLA:TPU's cycles per kind of
            instruction, with counts), what the step-time model reads; ``None``
            when its text could not be read.
        measured: The program run on this process's devices
            (:func:`~nnx_introspect._xla.run.run_compiled`'s JSON data), when
            a report asked for it.
        cached: When the program was compiled, if these readings came from
            the cache of compile results (ISO 8601); else ``None``.
        compiler_flags: ``(name, value, source)`` of every compiler flag the
            program was compiled with
            (:class:`~nnx_introspect._xla.flags.CompilerFlag`: given as
            ``compiler_flags``, or from ``XLA_FLAGS`` / ``LIBTPU_INIT_ARGS``).

    Example:
        >>> r = XlaReadings("cpu", "cpu", 0.5, argument_bytes=136, temp_bytes=0)
        >>> XlaReadings.from_json_data(r.json_data()) == r
        True
    """

    backend: str
    device_kind: str
    compile_seconds: float
    argument_bytes: int | None = None
    output_bytes: int | None = None
    temp_bytes: int | None = None
    alias_bytes: int | None = None
    xla_peak_bytes: int | None = None
    flops: float | None = None
    bytes_accessed: float | None = None
    loop_trips: tuple[tuple[str, int | None], ...] = ()
    out_of_memory: bool = False
    compiler_message: str | None = None
    compiler_required_bytes: int | None = None
    compiler_available_bytes: int | None = None
    warnings: tuple[str, ...] = ()
    compiler_log: str = ""
    remat: tuple[RematStatement, ...] = ()
    collectives: dict[str, Any] | None = None
    collective_wire_bytes: tuple[tuple[tuple[str, ...], int, int], ...] | None = None
    collectives_error: str | None = None
    matmul_dtype: str | None = None
    breakdown: dict[str, Any] | None = None
    breakdown_error: str | None = None
    sharding_constraints: int | None = None
    traced_platform: str | None = None
    explicit_axes_fallback: str | None = None
    device_order: str = "plain"
    traffic: dict[str, Any] | None = None
    work: dict[str, Any] | None = None
    measured: dict[str, Any] | None = None
    cached: str | None = None
    compiler_flags: tuple[tuple[str, str, str], ...] = ()

    def json_data(self) -> dict[str, Any]:
        """Every field as JSON data (tuples as lists)."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["loop_trips"] = [list(loop) for loop in self.loop_trips]
        data["warnings"] = list(self.warnings)
        data["remat"] = [s._asdict() for s in self.remat]
        data["compiler_flags"] = [list(flag) for flag in self.compiler_flags]
        wire = self.collective_wire_bytes
        data["collective_wire_bytes"] = (
            None if wire is None else [[list(a), n, w] for a, n, w in wire]
        )
        return data

    @classmethod
    def from_json_data(cls, data: Mapping[str, Any]) -> "XlaReadings":
        """The record of :meth:`json_data`'s data.

        Raises:
            ValueError: If ``data`` is not such data (a field unknown, one
                missing, one of the wrong form).
        """
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"not XLA readings: unknown fields {sorted(unknown)}")
        fields = dict(data)
        try:
            fields["loop_trips"] = tuple(
                (str(name), None if trips is None else int(trips))
                for name, trips in fields.get("loop_trips", ())
            )
            fields["warnings"] = tuple(str(w) for w in fields.get("warnings", ()))
            fields["remat"] = tuple(
                RematStatement(**s) for s in fields.get("remat", ())
            )
            fields["compiler_flags"] = tuple(
                (str(name), str(value), str(source))
                for name, value, source in fields.get("compiler_flags", ())
            )
            wire = fields.get("collective_wire_bytes")
            fields["collective_wire_bytes"] = (
                None
                if wire is None
                else tuple((tuple(a), int(n), int(w)) for a, n, w in wire)
            )
            return cls(**fields)
        except (TypeError, ValueError) as error:
            raise ValueError(f"not XLA readings: {error}") from None

"""The serving report: prefill and decode per device, the KV cache, the verdict."""

import dataclasses
from typing import Any

from nnx_introspect._accelerators import Budget
from nnx_introspect._breakdown import Breakdown
from nnx_introspect._render import PhaseBar, PhaseBars, Report, Table, format_bytes
from nnx_introspect._serve.timing import ServeTime, duration
from nnx_introspect._step import Measured, StepMemory, compiled_words
from nnx_introspect._xla import CompilerFlag, flags_text

__all__ = ["ServeMemoryReport", "ServeProgram"]


@dataclasses.dataclass(frozen=True)
class ServeProgram:
    """One compiled serving program's figures, per device.

    Attributes:
        name: ``"prefill"`` or ``"decode"``.
        sequences: Sequences the program handles at once.
        tokens: Tokens per sequence it takes (the prompt, or 1).
        weights_bytes: One device's share of the served weights.
        kv_cache_bytes: One device's share of the KV cache (donated).
        memory: XLA's memory analysis, with the training step's peak rule.
        flops: XLA's FLOPs per device, or ``None`` when it gave none.
        warnings: XLA's and this tool's caveats.
        compile_seconds: Lowering and compiling (from the cache: the seconds
            this run took to find it).
        bytes_accessed: XLA's bytes accessed per device, or ``None``.
        wire_bytes: ``(mesh axes, bytes on the wire)`` per device of the
            program's collectives, or ``None`` when they could not be read.
        matmul_dtype: The program's matmul operand type (``"bf16"``), or
            ``None``.
        breakdown: The buffers live at the program's peak, classified
            (``breakdown=True``), or ``None``.
        breakdown_error: Why a breakdown asked for could not be made.
        cached: When the program was compiled and how long that took (an ISO
            8601 interval, ``PT31.3S/2026-12-05T07:30:12+00:00``), if its
            readings came from the cache of compile results, else ``None``.
        compiled_in: Where it was compiled, in words (``"this process"``,
            ``"a child process (h100-8)"``).
        traffic: What the program moves through HBM (read and written
            bytes, the instructions that move the most, by source line), as
            :func:`~nnx_introspect._xla.hlo.traffic.traffic_json` gives it, or
            ``None`` when its text could not be read.
        measured: The program run on this process's devices
            (``measure=``), or ``None``.
        work: Its work by instruction, as JSON data
            (:meth:`~nnx_introspect._xla.Work.json_data`), what the point
            estimate of its time reads; ``None`` when not read.
        compiler_flags: Every compiler flag it was compiled with, and where
            it came from (``compiler_flags``, ``XLA_FLAGS`` or
            ``LIBTPU_INIT_ARGS``).

    Example:
        >>> from nnx_introspect._step import StepMemory
        >>> memory = StepMemory(150, 60, 20, 40)
        >>> program = ServeProgram("decode", 8, 1, 100, 40, memory, 1e6)
        >>> program.peak_bytes  # 150 + 60 + 20 - 40 aliased
        190
    """

    name: str
    sequences: int
    tokens: int
    weights_bytes: int
    kv_cache_bytes: int
    memory: StepMemory
    flops: float | None
    warnings: tuple[str, ...] = ()
    compile_seconds: float = 0.0
    bytes_accessed: float | None = None
    wire_bytes: tuple[tuple[tuple[str, ...], int], ...] | None = None
    matmul_dtype: str | None = None
    breakdown: Breakdown | None = None
    breakdown_error: str | None = None
    cached: str | None = None
    compiled_in: str = "this process"
    traffic: dict[str, Any] | None = None
    measured: Measured | None = None
    work: dict[str, Any] | None = dataclasses.field(
        default=None, compare=False, repr=False
    )
    compiler_flags: tuple[CompilerFlag, ...] = ()

    @property
    def argument_bytes(self) -> int:
        """XLA's argument bytes: weights, cache, tokens, positions."""
        return self.memory.argument_bytes

    @property
    def output_bytes(self) -> int:
        """XLA's output bytes: the logits and the new cache."""
        return self.memory.output_bytes

    @property
    def temp_bytes(self) -> int:
        """XLA's temporaries."""
        return self.memory.temp_bytes

    @property
    def alias_bytes(self) -> int:
        """Output bytes in a donated argument's buffers (the cache)."""
        return self.memory.alias_bytes

    @property
    def peak_bytes(self) -> int:
        """The peak, as a training step's (:attr:`StepMemory.peak_bytes`)."""
        return self.memory.peak_bytes

    def json_data(self) -> dict[str, Any]:
        """The figures as JSON data.

        ``"cached"`` (when it was compiled) and ``"cached_compile_seconds"``
        (how long that took) only on a program from the cache of compile
        results: a fresh one's JSON and a cached one's are equal but for them
        and the timings.
        """
        cached = {}
        if self.cached is not None:
            took, _, when = self.cached.rpartition("/")  # PT31.3S/<when>
            seconds = float(took[2:-1]) if took.startswith("PT") else None
            cached = {"cached": when, "cached_compile_seconds": seconds}
        return cached | {
            "name": self.name,
            "sequences": self.sequences,
            "tokens": self.tokens,
            "weights_bytes": self.weights_bytes,
            "kv_cache_bytes": self.kv_cache_bytes,
            "argument_bytes": self.argument_bytes,
            "output_bytes": self.output_bytes,
            "temp_bytes": self.temp_bytes,
            "alias_bytes": self.alias_bytes,
            "peak_bytes": self.peak_bytes,
            "out_of_memory": self.memory.out_of_memory,
            "flops": self.flops,
            "warnings": list(self.warnings),
            "compile_seconds": round(self.compile_seconds, 3),
            "bytes_accessed": self.bytes_accessed,
            "wire_bytes": None
            if self.wire_bytes is None
            else [[list(axes), wire] for axes, wire in self.wire_bytes],
            "matmul_dtype": self.matmul_dtype,
            "breakdown": None if self.breakdown is None else self.breakdown.json_data(),
            "breakdown_error": self.breakdown_error,
            "compiled_in": self.compiled_in,
            "traffic": self.traffic,
            "measured": None if self.measured is None else self.measured.json_data(),
            "compiler_flags": [f._asdict() for f in self.compiler_flags],
        }

    def compiled_text(self) -> str:
        """Where and when it was compiled, in words.

        Example:
            >>> from nnx_introspect._step import StepMemory
            >>> program = ServeProgram("decode", 8, 1, 100, 40, StepMemory(1, 0, 0, 0),
            ...                        None, compile_seconds=2.5)
            >>> program.compiled_text()
            'decode 2.5 s'
        """
        return compiled_words(self.compile_seconds, self.cached, self.name)


@dataclasses.dataclass(frozen=True)
class ServeMemoryReport(Report):
    """Prefill and decode memory per device for a model served on a mesh.

    Every output format comes from :meth:`table` (``print(report)``, rich,
    markdown, HTML with the verdict boxed, JSON from :meth:`json_data`).

    Attributes:
        target: The target's name, or its type's.
        mesh_axes: The mesh's ``(axis, size)`` pairs.
        topology: The compile target, or ``None`` (this process's devices).
        sequences: Sequences decoded at once.
        context: Positions of the cache.
        prompt: Tokens prefilled per sequence.
        weights: The weights' dtype (``None``: the model's own).
        kv_cache: The KV cache's dtype.
        kv_bytes_per_token: One position of one sequence on one device, all
            layers: the cache's shapes, dtype and sharding.
        prefill: The prefill program.
        decode: The decode program.
        budget: One device's budget, as a training step's.
        backend: The compiler's platform (``"cpu"``, ``"gpu"``, ``"tpu"``).
        time: Time per token, tokens per second and time to the first token,
            an estimate on the topology's data sheet; ``None`` without a
            ``topology``.
        compiler: The compiler and its version (``"XLA:TPU (libtpu 0.0.52,
            TPU v5 lite)"``), or ``None``.
        notes: What the request was completed with, and what the cache could
            save (a mesh axis added, sliding-window layers), one sentence each.

    Example:
        >>> from nnx_introspect import serve_memory_report
        >>> from nnx_introspect.examples import llama_tiny
        >>> report = serve_memory_report(llama_tiny, "tp=2", sequences=2,
        ...                              context=32, max_device_bytes=10**6)
        >>> report.fits(), report.decode.peak_bytes > 10**6
        (False, True)
        >>> print(report.verdict.split(":")[0])
        does NOT fit
        >>> report.ok, report.table().columns
        (False, ('per device', 'prefill', 'decode'))
    """

    SCHEMA = "nnx-introspect/serve-memory-report"
    SCHEMA_VERSION = 1

    target: str
    mesh_axes: tuple[tuple[str, int], ...]
    topology: str | None
    sequences: int
    context: int
    prompt: int
    weights: str | None
    kv_cache: str
    kv_bytes_per_token: int
    prefill: ServeProgram
    decode: ServeProgram
    budget: Budget
    backend: str
    time: ServeTime | None = None
    compiler: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def peak_bytes(self) -> int:
        """The larger of the two programs' peaks."""
        return max(self.prefill.peak_bytes, self.decode.peak_bytes)

    @property
    def max_device_bytes(self) -> int | None:
        """The budget of one device in bytes (``None``: no budget)."""
        return self.budget.bytes

    def fits(self) -> bool | None:
        """Whether both programs fit the budget; ``None`` without one.

        A program the compiler refused for memory does not fit.
        """
        if any(p.memory.out_of_memory for p in (self.prefill, self.decode)):
            return False
        if self.budget.bytes is None:
            return None
        return self.peak_bytes <= self.budget.bytes

    @property
    def ok(self) -> bool:
        """``False`` when a program does not fit (out of memory or over budget).

        ``True`` also when there is no budget to hold the programs to.
        """
        return self.fits() is not False

    @property
    def verdict(self) -> str:
        """The verdict in one line."""
        fits = self.fits()
        peak = format_bytes(self.peak_bytes)
        if fits is None:
            return f"peak {peak} per device; no budget to hold it to"
        budget = format_bytes(self.budget.bytes or 0)
        word = "fits" if fits else "does NOT fit"
        return f"{word}: peak {peak} per device of a {budget} budget"

    def json_data(self) -> dict[str, Any]:
        """The report as JSON data."""
        return {
            "target": self.target,
            "mesh": [list(a) for a in self.mesh_axes],
            "topology": self.topology,
            "sequences": self.sequences,
            "context": self.context,
            "prompt": self.prompt,
            "weights": self.weights,
            "kv_cache": self.kv_cache,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "backend": self.backend,
            "compiler": self.compiler,
            "notes": list(self.notes),
            "budget_bytes": self.budget.bytes,
            "budget_basis": self.budget.basis,
            "fits": self.fits(),
            "verdict": self.verdict,
            "prefill": self.prefill.json_data(),
            "decode": self.decode.json_data(),
            "time": None if self.time is None else self.time.json_data(),
        }

    def _rows(self) -> list[tuple[str, str, str]]:
        p, d = self.prefill, self.decode

        def both(f: Any) -> tuple[str, str]:
            return format_bytes(f(p)), format_bytes(f(d))

        rows: list[tuple[str, str, str]] = [
            ("sequences x tokens", f"{p.sequences} x {p.tokens}", f"{d.sequences} x 1")
        ]
        for label, field in (
            ("weights", "weights_bytes"),
            ("KV cache", "kv_cache_bytes"),
            ("arguments", "argument_bytes"),
            ("outputs", "output_bytes"),
            ("temporaries", "temp_bytes"),
            ("aliased (donated cache)", "alias_bytes"),
        ):
            rows.append((label, *both(lambda x, f=field: getattr(x, f))))
        flops = [f"{x.flops:.3g}" if x.flops is not None else "-" for x in (p, d)]
        rows.append(("FLOPs", flops[0], flops[1]))
        return rows + self._time_rows() + self._measured_rows()

    def _measured_rows(self) -> list[tuple[str, str, str]]:
        """Each program's measured time and how it stands against the estimate."""
        p, d = self.prefill, self.decode
        if p.measured is None and d.measured is None:
            return []
        t = self.time
        estimates = (
            (None, None) if t is None else (t.time_to_first_token, t.seconds_per_token)
        )

        def shown(x: ServeProgram) -> str:
            if x.measured is None:
                return ""
            if x.measured.error is not None:
                return "failed"
            return duration(x.measured.median)

        def versus(x: ServeProgram, estimate: tuple[float, float] | None) -> str:
            if x.measured is None:
                return ""
            point = None
            if t is not None:
                timed = t.prefill if x is p else t.decode
                point = timed.seconds
            if point and x.measured.error is None and x.measured.seconds:
                return f"{x.measured.median / point:.2f}x the estimate"
            return x.measured.versus(estimate)

        rows = [("time (measured, median)", shown(p), shown(d))]
        rows.append(
            (
                "estimate vs measured",
                versus(p, estimates[0]),
                versus(d, estimates[1]),
            )
        )
        if d.measured is not None and d.measured.tokens_per_second is not None:
            rate = d.measured.tokens_per_second
            rows.append(
                ("tokens/s (measured)", "", f"{rate:,.0f} ({d.measured.devices} dev.)")
            )
        return rows

    def _time_rows(self) -> list[tuple[str, str, str]]:
        """The estimate's rows: time to the first token, per token, tokens/s."""
        if self.time is None:
            return []
        t = self.time

        def span(pair: tuple[float, float], rate: bool = False) -> str:
            if rate:
                return f"{pair[0]:,.0f}-{pair[1]:,.0f}"
            return f"{duration(pair[0])}-{duration(pair[1])}"

        point: list[tuple[str, str, str]] = []
        if t.decode.time is not None and t.prefill.time is not None:
            point = [
                (
                    "time (estimate)",
                    duration(t.time_to_first_token_estimate),
                    duration(t.seconds_per_token_estimate),
                ),
                ("", "", t.decode.time.basis),
                (
                    "tokens/s (estimate)",
                    "",
                    f"{t.tokens_per_second_estimate:,.0f}",
                ),
            ]
        bounds = "time (roofline range)" if point else "time (estimate)"
        return [
            *point,
            (bounds, span(t.time_to_first_token), span(t.seconds_per_token)),
            (
                "tokens/s per device (est.)",
                "",
                span(t.tokens_per_second_per_device, True),
            ),
            (
                "tokens/s per replica (est.)",
                "",
                span(t.tokens_per_second_per_replica, True),
            ),
        ]

    def phase_bars(self) -> PhaseBars:
        """Prefill and decode for the HTML page's chart: each one's peak per device.

        The weights and KV cache are what stays resident; the rest of each
        peak is the program's own. Each carries its estimated time (the
        prefill's to the first token, the decode's per token) and its
        measured run, when the report has them.

        Returns:
            The chart's :class:`~nnx_introspect._render.PhaseBars`.
        """
        bars = []
        for program in (self.prefill, self.decode):
            timed = None
            if self.time is not None:
                timed = (
                    self.time.prefill if program is self.prefill else self.time.decode
                )
            resident = min(
                program.weights_bytes + program.kv_cache_bytes, program.peak_bytes
            )
            measured = program.measured
            bars.append(
                PhaseBar(
                    "prefill" if program is self.prefill else "decode (one token)",
                    program.peak_bytes - resident,
                    resident,
                    seconds=None if timed is None else timed.planned_seconds,
                    error=None
                    if timed is None or timed.time is None
                    else timed.time.error,
                    refused=program.memory.out_of_memory,
                    measured=None
                    if measured is None
                    or measured.error is not None
                    or not measured.seconds
                    else float(measured.median),
                )
            )
        return PhaseBars(
            tuple(bars),
            self.budget.bytes,
            self.topology or self.backend,
            resident="weights and KV cache",
        )

    def _title(self) -> str:
        mesh = ",".join(f"{a}={s}" for a, s in self.mesh_axes)
        where = self.topology or self.backend
        return (
            f"Serving {self.target} on {mesh} ({where}): {self.sequences} "
            f"sequences x {self.context} positions, prompt {self.prompt}, "
            f"weights {self.weights or 'as built'}, KV cache {self.kv_cache}"
        )

    def table(self) -> Table:
        """The report as a :class:`~nnx_introspect.Table`, the verdict first."""
        p, d = self.prefill, self.decode
        basis = f"The budget: {self.budget.basis}." if self.budget.basis else ""
        flags = flags_text(d.compiler_flags)
        notes = [
            f"KV cache per position of a sequence: "
            f"{format_bytes(self.kv_bytes_per_token)} "
            f"({self.kv_bytes_per_token:,} B) per device, all layers.",
            *([basis] if basis else []),
            *self.notes,
            *(
                []
                if self.time is None
                else [
                    "Time: the prefill's is the time to the first token, the "
                    "decode's the time per token (one token for every sequence).",
                    *self.time.basis,
                ]
            ),
            f"Compiled in {d.compiled_in}"
            + ("" if self.compiler is None else f" by {self.compiler}")
            + f": {p.compiled_text()}, {d.compiled_text()}.",
            *([] if flags is None else [flags]),
            *(
                f"{x.name.capitalize()}: {x.measured.sentence()}"
                for x in (p, d)
                if x.measured is not None
            ),
            *sorted({w for x in (p, d) for w in x.warnings}),
        ]
        return Table(
            title=self._title(),
            columns=("per device", "prefill", "decode"),
            rows=tuple(self._rows()),
            totals=(("peak", format_bytes(p.peak_bytes), format_bytes(d.peak_bytes)),),
            notes=tuple(notes),
            lead=(self.verdict,),
        )

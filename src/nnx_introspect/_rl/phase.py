"""One phase of an RL step: its program's peak, what else is resident, its time.

:class:`RLPhase` is what :class:`~nnx_introspect._rl.report.RLMemoryReport`
adds up: the phases of :data:`PHASES`, in the order a step runs them.
"""

import dataclasses
from typing import Any

from nnx_introspect._step import compiled_words

__all__ = ["PHASES", "RLPhase"]

PHASES = ("prefill", "decode", "reference", "values", "train", "critic train")
"""The phases of one step, in the order they run (``values`` and ``critic
train``: a PPO step's critic)."""


@dataclasses.dataclass(frozen=True)
class RLPhase:
    """One phase of the step: its program's peak and what else is resident.

    Attributes:
        name: One of :data:`PHASES`.
        program_peak_bytes: The compiled program's own peak per device (its
            arguments, outputs and temporaries).
        resident: ``(role, bytes)`` per device of each role kept resident
            while the phase runs and not among its program's arguments.
        out_of_memory: Whether the compiler refused the program for memory.
        seconds: The estimated time of the phase, ``(low, high)``, or
            ``None`` without a topology (for decode, every step of the
            completion).
        mesh: The mesh of the devices it runs on when the roles have
            devices of their own (``role_meshes``); ``""`` when colocated.
        host: ``(role, bytes)`` per device of each role waiting in host
            memory while the phase runs (``offload=True``).
        measured: The phase's program run on this process's devices
            (``measure=``): a :class:`~nnx_introspect._step.measured.Measured`,
            or ``None``.
        steps: How many runs of the program the phase is (the decode: one per
            completion token; else 1).
        estimate: The point estimate of the phase (every run: for the decode,
            one step's times :attr:`steps`), from its program's instructions,
            or ``None``.
        error: That estimate's calibrated error bar (``0.09``: ±9%), or
            ``None`` (uncalibrated, or no estimate).
        basis: The estimate's basis in words (``""`` without one).
        compile_seconds: The time its program took to lower and compile (or,
            from the cache, to be traced and found) in this report.
        cached: When its program was compiled, and in how long, if its
            readings came from the cache of compile results (an ISO 8601
            interval, ``"PT31.25S/2026-12-05T07:30:12+00:00"``, as the cache
            writes it), else ``None``.
        compiled_in: Where its program compiled, in words (``"this
            process"``, ``"a child process (h100-8)"``; ``""``: not known).

    Example:
        >>> phase = RLPhase("train", 100, (("reference parameters", 40),))
        >>> phase.peak_bytes
        140
        >>> RLPhase("train", 100, compile_seconds=2.5).compiled_text()
        'train 2.5 s'
    """

    name: str
    program_peak_bytes: int
    resident: tuple[tuple[str, int], ...] = ()
    out_of_memory: bool = False
    seconds: tuple[float, float] | None = None
    mesh: str = ""
    host: tuple[tuple[str, int], ...] = ()
    measured: Any = None
    steps: int = 1
    estimate: float | None = None
    error: float | None = None
    basis: str = ""
    compile_seconds: float = 0.0
    cached: str | None = None
    compiled_in: str = ""

    def compiled_text(self) -> str:
        """How its program compiled, in words, as a serving program's says it."""
        return compiled_words(self.compile_seconds, self.cached, self.name)

    @property
    def estimate_per_run(self) -> float | None:
        """The point estimate of one run of the program (a decode: one token's step)."""
        return None if self.estimate is None else self.estimate / self.steps

    @property
    def measured_seconds(self) -> float | None:
        """The measured time of the phase: the median run, times :attr:`steps`.

        ``None`` when not measured or the run failed.
        """
        m = self.measured
        if m is None or m.error is not None or not m.seconds:
            return None
        return float(m.median) * self.steps

    def versus(self) -> str:
        """The measured run against the phase's estimate, in words."""
        if self.measured is None:
            return ""
        each = None
        if self.seconds is not None:  # the estimate of one run of the program
            each = (self.seconds[0] / self.steps, self.seconds[1] / self.steps)
        point = self.estimate_per_run
        m = self.measured
        if point and m.error is None and m.seconds:
            return f"{m.median / point:.2f}x the estimate"
        return str(self.measured.versus(each))

    @property
    def resident_bytes(self) -> int:
        """What the other roles keep resident during the phase."""
        return sum(n for _, n in self.resident)

    @property
    def peak_bytes(self) -> int:
        """The phase's peak per device: its program's and the others' resident."""
        return self.program_peak_bytes + self.resident_bytes

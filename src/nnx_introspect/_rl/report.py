"""One RL step's programs on the devices they share: :class:`RLMemoryReport`.

A GRPO step runs four programs one after another on the same devices: the
rollout's **prefill** and **decode** (``batch x generations`` completions
written into a KV cache), the **reference** model's per-token
log-probabilities, and the actor's **training** step. Each is compiled for
the target through the step's and serving's own pipelines; this module only
adds them up. Each role keeps bytes resident across the step (the actor's
parameters and optimizer state, the reference's parameters, a rollout copy of
the weights when one was asked for; colocated, tunix's rollout is the actor
itself); a phase's peak is its program's own peak
(which counts the program's arguments: the roles it runs on) plus what the
other roles keep resident meanwhile. The step's peak is the largest phase's.
A PPO step (a critic) adds two: the critic's **values** and its **critic
train** step.
"""

import dataclasses
from typing import Any

from nnx_introspect._accelerators import Budget
from nnx_introspect._render import PhaseBar, PhaseBars, Report, Table, format_bytes
from nnx_introspect._rl.phase import PHASES, RLPhase
from nnx_introspect._roofline import RANGE_WORDS
from nnx_introspect._step import duration
from nnx_introspect._xla import CompilerFlag, flags_text

__all__ = ["PHASES", "RLMemoryReport", "RLPhase"]


@dataclasses.dataclass(frozen=True)
class RLMemoryReport(Report):
    """Whether one GRPO (or, with a critic, PPO) step fits the devices it shares.

    Attributes:
        target: The actor's name.
        mesh_axes: The mesh every role runs on (colocated).
        topology: The compile target, or ``None`` (this process's devices).
        batch: Prompts per step.
        generations: Completions per prompt (GRPO's group size).
        prompt: Tokens of each prompt.
        completion: Tokens of each completion.
        reference: Whether a reference model's log-probabilities (the KL
            term) are computed.
        roles: ``(role, bytes)`` per device of each role's resident state:
            the actor's parameters and optimizer state, the reference's
            parameters, the rollout's copy of the weights (only when it has
            one: another dtype, or devices of its own), the KV cache.
        phases: One :class:`RLPhase` per phase, in order.
        budget: The budget of one device, as a training step's.
        notes: What the request was completed with (a mesh axis the model
            names added at size 1), the rollout's own notes.
        lora: The LoRA rank the actor trained adapters of, ``"model"`` (its
            own ``nnx.LoRAParam`` leaves) or ``None`` (full fine-tuning).
        layout: Where the roles run, in words: ``"colocated"`` or
            ``"disaggregated: ..."`` with each slice's roles and mesh.
        reshard_bytes: Bytes sent to the rollout's devices every step: the
            actor's weights in the rollout's dtype, on every rollout device
            (0 when colocated).
        reshard_seconds: Its estimated time, ``(low, high)``, part of
            :attr:`step_seconds` (``None``: colocated, or no topology).
        offload_bytes: With ``offload=True``: bytes per device moved to and
            from host memory per step.
        offload_seconds: Their time over the host link, part of
            :attr:`step_seconds` (``None``: no offload, or no host-link figure).
        programs: The reports each phase's program came from, by name
            (``"rollout"``: the serving report; ``"reference"``,
            ``"train"``, and with a critic ``"values"`` and ``"critic
            train"``: step reports).
        critic: The critic's name in a PPO step (``None``: GRPO).
        compiler: The compiler and its version that compiled the programs
            (``"XLA:GPU (jaxlib 0.10.2, ...)"``), or ``None``.
        backend: The compiler's platform (``"cpu"``, ``"gpu"``, ``"tpu"``), or
            ``None``.
        warnings: The programs' warnings, each once (XLA:GPU compiled
            without a GPU, so without autotuning...).

    Example:
        >>> from nnx_introspect._accelerators.budget import Budget
        >>> phases = (RLPhase("decode", 50, (("actor optimizer state", 20),)),
        ...           RLPhase("train", 90, (("reference parameters", 10),)))
        >>> report = RLMemoryReport("m", (("tp", 1),), None, 2, 4, 8, 8, True,
        ...                         (), phases, Budget(120, "the budget given"))
        >>> report.peak_phase.name, report.peak_bytes, report.fits()
        ('train', 100, True)
    """

    SCHEMA = "nnx-introspect/rl-memory-report"
    SCHEMA_VERSION = 1

    target: str
    mesh_axes: tuple[tuple[str, int], ...]
    topology: str | None
    batch: int
    generations: int
    prompt: int
    completion: int
    reference: bool
    roles: tuple[tuple[str, int], ...]
    phases: tuple[RLPhase, ...]
    budget: Budget
    notes: tuple[str, ...] = ()
    programs: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False)
    lora: int | str | None = None
    layout: str = "colocated"
    reshard_bytes: int = 0
    reshard_seconds: tuple[float, float] | None = None
    offload_bytes: int = 0
    offload_seconds: tuple[float, float] | None = None
    critic: str | None = None
    compiler: str | None = None
    backend: str | None = None
    warnings: tuple[str, ...] = ()

    @property
    def compiler_flags(self) -> tuple[CompilerFlag, ...]:
        """Every compiler flag the programs were compiled with, and its source.

        The rollout's (every program of the step is compiled with the same
        flags: ``compiler_flags`` and the environment's); ``()`` for none.
        """
        rollout = self.programs.get("rollout")
        return () if rollout is None else tuple(rollout.decode.compiler_flags)

    @property
    def algorithm(self) -> str:
        """``"PPO"`` with a critic, else ``"GRPO"``."""
        return "GRPO" if self.critic is None else "PPO"

    @property
    def breakdowns(self) -> dict[str, Any]:
        """Each phase's buffers at its peak (``breakdown=True``), by phase name.

        The programs' own breakdowns, their kinds named by role: the
        reference's parameters ``reference``, the rollout's served weights
        ``rollout weights`` when they are a copy of their own, else the
        actor's ``parameter``. Phases without one (not asked for, or the
        compiler refused the program) are left out.
        """
        rollout = self.programs.get("rollout")
        found = {
            "prefill": None if rollout is None else rollout.prefill.breakdown,
            "decode": None if rollout is None else rollout.decode.breakdown,
            "reference": getattr(self.programs.get("reference"), "breakdown", None),
            "values": getattr(self.programs.get("values"), "breakdown", None),
            "train": getattr(self.programs.get("train"), "breakdown", None),
            "critic train": getattr(
                self.programs.get("critic train"), "breakdown", None
            ),
        }
        renamed = {"reference": {"parameter": "reference"}}
        # the served weights: a rollout copy, or the actor's own parameters
        copy = any(role == "rollout weights" for role, _ in self.roles)
        served = "rollout weights" if copy else "parameter"
        renamed |= {p: {"weights": served} for p in ("prefill", "decode")}
        return {
            name: _relabelled(b, renamed.get(name, {}))
            for name, b in found.items()
            if b is not None
        }

    def _breakdown_notes(self) -> list[str]:
        """Each phase's peak by kind, the largest four, when broken down."""
        out = []
        for name, found in self.breakdowns.items():
            kinds = sorted(found.by_kind(), key=lambda g: -g.nbytes)[:4]
            parts = ", ".join(f"{g.label} {format_bytes(g.nbytes)}" for g in kinds)
            out.append(f"At {name}'s peak (its program's buffers, by kind): {parts}.")
        return out

    @property
    def sequences(self) -> int:
        """Completions per step: ``batch x generations``."""
        return self.batch * self.generations

    @property
    def peak_phase(self) -> RLPhase:
        """The phase whose peak is the step's."""
        return max(self.phases, key=lambda p: p.peak_bytes)

    @property
    def peak_bytes(self) -> int:
        """The step's peak per device: the largest phase's."""
        return self.peak_phase.peak_bytes

    @property
    def max_device_bytes(self) -> int | None:
        """The budget of one device in bytes (``None``: no budget)."""
        return self.budget.bytes

    def fits(self) -> bool | None:
        """Whether every phase fits the budget; ``None`` without one.

        A phase whose program the compiler refused does not fit.
        """
        if any(p.out_of_memory for p in self.phases):
            return False
        if self.budget.bytes is None:
            return None
        return self.peak_bytes <= self.budget.bytes

    @property
    def ok(self) -> bool:
        """``False`` when the step does not fit."""
        return self.fits() is not False

    @property
    def step_seconds(self) -> tuple[float, float] | None:
        """The estimated step time, ``(low, high)``: the phases' sum."""
        if any(p.seconds is None for p in self.phases):
            return None
        low = sum(p.seconds[0] for p in self.phases if p.seconds is not None)
        high = sum(p.seconds[1] for p in self.phases if p.seconds is not None)
        for extra in (self.reshard_seconds, self.offload_seconds):
            if extra is not None:
                low, high = low + extra[0], high + extra[1]
        return low, high

    @property
    def step_estimate(self) -> float | None:
        """The step's point estimate: its phases' one after another, and transfers.

        Transfers (reshard, offload) add their data-sheet time (the reshard's
        fastest). ``None`` unless every phase has a point estimate.
        """
        if any(p.estimate is None for p in self.phases):
            return None
        total = sum(p.estimate for p in self.phases if p.estimate is not None)
        for extra in (self.reshard_seconds, self.offload_seconds):
            if extra is not None:
                total += extra[0]
        return total

    @property
    def measured_step_seconds(self) -> float | None:
        """The step's measured time (``measure=``): its phases' one after another.

        Each phase's program was run on this process's devices (the decode's
        one step times ``completion``); no transfer was run. ``None`` unless
        every phase ran.
        """
        found = [p.measured_seconds for p in self.phases]
        if not found or any(t is None for t in found):
            return None
        return sum(t for t in found if t is not None)

    @property
    def verdict(self) -> str:
        """The verdict in one line: fits or not, the peak, its phase."""
        peak, phase = format_bytes(self.peak_bytes), _named(self.peak_phase)
        fits = self.fits()
        refused = [p.name for p in self.phases if p.out_of_memory]
        if refused:
            return (
                f"does NOT fit: the compiler refused {', '.join(refused)} for "
                f"memory; peak {peak} per device ({phase})"
            )
        if fits is None:
            return f"peak {peak} per device ({phase}); no budget to hold it to"
        word = "fits" if fits else "does NOT fit"
        budget = format_bytes(self.budget.bytes or 0)
        return f"{word}: peak {peak} per device of a {budget} budget, set by {phase}"

    def phase_bars(self) -> PhaseBars:
        """Every phase for the HTML page's chart: its peak per device and time.

        What the other roles keep resident while a phase runs, then its
        program's own peak; its estimate (every run: the decode's whole
        completion, its row labelled with the tokens, ``"decode (512
        tokens)"``, where the serving page's is ``"decode (one token)"``) and
        its measured run, when the report has them.

        Returns:
            The chart's :class:`~nnx_introspect._render.PhaseBars`.
        """
        bars = tuple(
            PhaseBar(
                _charted(p),
                p.program_peak_bytes,
                p.resident_bytes,
                seconds=p.estimate,
                error=p.error,
                refused=p.out_of_memory,
                measured=p.measured_seconds,
            )
            for p in self.phases
        )
        return PhaseBars(
            bars,
            self.budget.bytes,
            self.topology or self.backend or "this process's devices",
            resident="the other roles, resident",
        )

    def _title(self) -> str:
        mesh = ",".join(f"{a}={s}" for a, s in self.mesh_axes)
        where = self.topology or self.backend or "this process's devices"
        on = f" on {mesh}" if self.layout == "colocated" else ""
        critic = "" if self.critic is None else f" with the critic {self.critic}"
        return (
            f"One {self.algorithm} step of {self.target}{critic}{on} ({where}), "
            f"{self.layout}: {self.batch} prompts x {self.generations} "
            f"generations, prompt {self.prompt}, completion "
            f"{self.completion}{self._tuning()}"
        )

    def _tuning(self) -> str:
        if self.lora is None:
            return ""
        if self.lora == "model":
            return ", LoRA (the model's own adapters)"
        return f", LoRA rank {self.lora}"

    def _rows(self) -> list[tuple[str, str, str]]:
        """The roles resident, then each phase's program and what is beside it."""
        rows = [
            (f"resident: {role}", format_bytes(n), f"{n:,}") for role, n in self.roles
        ]
        for phase in self.phases:
            program = (
                "refused"
                if phase.out_of_memory
                else format_bytes(phase.program_peak_bytes)
            )
            rows.append(
                (f"{_named(phase)}: program", program, f"{phase.program_peak_bytes:,}")
            )
            rows.append(
                (
                    f"{_named(phase)}: + others resident",
                    format_bytes(phase.resident_bytes),
                    ", ".join(r for r, _ in phase.resident) or "-",
                )
            )
            if phase.measured is not None:
                took = phase.measured_seconds
                rows.append(
                    (
                        f"{_named(phase)}: measured",
                        "run failed" if took is None else duration(took),
                        phase.versus(),
                    )
                )
            if phase.host:
                rows.append(
                    (
                        f"{_named(phase)}: in host memory",
                        format_bytes(sum(n for _, n in phase.host)),
                        ", ".join(r for r, _ in phase.host),
                    )
                )
        return rows

    def _totals(self) -> list[tuple[str, str, str]]:
        """The budget, each phase's peak, the bytes moved per step."""
        totals = [
            (f"peak ({_named(p)})", format_bytes(p.peak_bytes), f"{p.peak_bytes:,}")
            for p in self.phases
        ]
        if self.budget.bytes is not None:
            n = self.budget.bytes
            totals.insert(0, ("budget per device", format_bytes(n), f"{n:,}"))
        for words, n in (
            ("to and from the host per step (offloaded)", self.offload_bytes),
            ("reshard per step (to the rollout's devices)", self.reshard_bytes),
        ):
            if n:
                totals.append((words, format_bytes(n), f"{n:,}"))
        return totals

    def table(self) -> Table:
        """The roles resident, then each phase's program, resident and peak."""
        rows, totals = self._rows(), self._totals()
        notes = [
            "A phase's peak is its compiled program's own (its arguments, outputs "
            "and temporaries) plus what the other roles keep resident while it "
            "runs; the step's is the largest.",
            *([f"Budget: {self.budget.basis}."] if self.budget.basis else []),
            *self.notes,
            *self._breakdown_notes(),
            *self._compiled_notes(),
        ]
        point = self.step_estimate
        if point is not None:
            parts = "; ".join(
                f"{p.name} {duration(p.estimate or 0.0)}"
                + (
                    f" ({duration(p.estimate_per_run or 0.0)} a token's step x "
                    f"{p.steps})"
                    if p.steps > 1
                    else ""
                )
                for p in self.phases
            )
            basis = next((p.basis for p in self.phases if p.basis), "")
            notes.append(
                f"Step time, estimated from each program's instructions (not a "
                f"measurement): {duration(point)} ({parts}); {basis}; "
                f"{self.sequences * self.completion / point:,.0f} completion "
                "tokens/s over the whole step."
            )
        span = self.step_seconds
        if span is not None:
            spans = [(p.name, p.seconds) for p in self.phases if p.seconds is not None]
            if self.reshard_seconds is not None:
                spans.append(("reshard", self.reshard_seconds))
            if self.offload_seconds is not None:
                spans.append(("offload", self.offload_seconds))
            parts = "; ".join(
                f"{name} {duration(low)}-{duration(high)}"
                for name, (low, high) in spans
            )
            notes.append(
                f"Step time, the roofline's range ({RANGE_WORDS}; not a "
                f"measurement): {duration(span[0])}-{duration(span[1])} "
                f"({parts}; decode: every one of the {self.completion} steps of "
                f"a completion); "
                f"{self.sequences * self.completion / span[1]:,.0f}-"
                f"{self.sequences * self.completion / span[0]:,.0f} completion "
                "tokens/s over the whole step."
            )
        notes.extend(self._measured_notes())
        return Table(
            title=self._title(),
            columns=("", "per device", "bytes, or the roles resident"),
            rows=tuple(rows),
            totals=tuple(totals),
            notes=tuple(notes),
            lead=(self.verdict,),
            emphasis=(f"peak ({_named(self.peak_phase)})", "budget per device"),
        )

    def _compiled_notes(self) -> list[str]:
        """By what, where and in how long each program compiled; the warnings."""
        places: dict[str, list[str]] = {}
        for p in self.phases:
            places.setdefault(p.compiled_in, []).append(p.compiled_text())
        by = "" if self.compiler is None else f" by {self.compiler}"
        if len(places) == 1:
            place, texts = next(iter(places.items()))
            where = f" in {place}" if place else ""
            line = f"Compiled{where}{by}: {', '.join(texts)}."
        else:
            parts = "; ".join(
                f"{', '.join(texts)} in {place or 'an unknown place'}"
                for place, texts in places.items()
            )
            line = f"Compiled{by}: {parts}."
        flags = flags_text(self.compiler_flags)
        return [
            line,
            *([flags] if flags else []),
            *(f"Warning: {w}" for w in self.warnings),
        ]

    def _measured_notes(self) -> list[str]:
        """The measured step against the estimate, and each program's runs."""
        ran = [p for p in self.phases if p.measured is not None]
        if not ran:
            return []
        notes = []
        took, span = self.measured_step_seconds, self.step_seconds
        point = self.step_estimate
        if took is not None:
            against = ""
            if point is not None:
                against = f"; {took / point:.2f}x the estimate ({duration(point)})"
            elif span is not None:
                against = (
                    f"; {took / span[0]:.2f}x the estimate's low, "
                    f"{took / span[1]:.2f}x its high"
                )
            notes.append(
                f"Step time, measured: {duration(took)}, each phase's program run "
                f"on this process's devices one after another (the decode: one "
                f"step's median times {self.completion}; no transfer run)"
                f"{against}."
            )
        for p in ran:
            notes.append(f"{p.name.capitalize()}: {p.measured.sentence()}")
        return notes

    def json_data(self) -> dict[str, Any]:
        """The report as JSON data."""
        return {
            "target": self.target,
            "mesh": [list(a) for a in self.mesh_axes],
            "topology": self.topology,
            "batch": self.batch,
            "generations": self.generations,
            "prompt": self.prompt,
            "completion": self.completion,
            "reference": self.reference,
            "lora": self.lora,
            "algorithm": self.algorithm,
            "critic": self.critic,
            "layout": self.layout,
            "reshard_bytes": self.reshard_bytes,
            "reshard_seconds": None
            if self.reshard_seconds is None
            else list(self.reshard_seconds),
            "offload_bytes": self.offload_bytes,
            "offload_seconds": None
            if self.offload_seconds is None
            else list(self.offload_seconds),
            "roles": [{"role": r, "bytes": n} for r, n in self.roles],
            "phases": [
                {
                    "name": p.name,
                    "program_peak_bytes": p.program_peak_bytes,
                    "resident": [{"role": r, "bytes": n} for r, n in p.resident],
                    "peak_bytes": p.peak_bytes,
                    "out_of_memory": p.out_of_memory,
                    "seconds": None if p.seconds is None else list(p.seconds),
                    "estimate_seconds": p.estimate,
                    "estimate_per_run_seconds": p.estimate_per_run,
                    "steps": p.steps,
                    "error": p.error,
                    "mesh": p.mesh or None,
                    "host": [{"role": r, "bytes": n} for r, n in p.host],
                    "measured": None
                    if p.measured is None
                    else p.measured.json_data() | {"versus_estimate": p.versus()},
                    "measured_seconds": p.measured_seconds,
                    "compile_seconds": round(p.compile_seconds, 3),
                    "compiled_in": p.compiled_in or None,
                    **({} if p.cached is None else {"cached": p.cached}),
                }
                for p in self.phases
            ],
            "peak_bytes": self.peak_bytes,
            "peak_phase": self.peak_phase.name,
            "budget_bytes": self.budget.bytes,
            "budget_basis": self.budget.basis,
            "fits": self.fits(),
            "verdict": self.verdict,
            "compiler": self.compiler,
            **(
                {"compiler_flags": [f._asdict() for f in self.compiler_flags]}
                if self.compiler_flags
                else {}
            ),
            "backend": self.backend,
            "compile_seconds": round(sum(p.compile_seconds for p in self.phases), 3),
            "warnings": list(self.warnings),
            "notes": list(self.notes),
            "step_seconds": None
            if self.step_seconds is None
            else list(self.step_seconds),
            "step_estimate_seconds": self.step_estimate,
            "measured_step_seconds": self.measured_step_seconds,
        }


def _named(phase: RLPhase) -> str:
    """A phase's name, with its devices' mesh when the roles have their own."""
    return f"{phase.name} on {phase.mesh}" if phase.mesh else phase.name


def _charted(phase: RLPhase) -> str:
    """A phase's row in the chart: a decode's says how many tokens its time is.

    Example:
        >>> _charted(RLPhase("decode", 1, steps=512)), _charted(RLPhase("train", 1))
        ('decode (512 tokens)', 'train')
    """
    name = _named(phase)
    return f"{name} ({phase.steps} tokens)" if phase.steps > 1 else name


def _relabelled(breakdown: Any, kinds: dict[str, str]) -> Any:
    """``breakdown`` with its rows' kinds renamed as ``kinds`` says."""
    if not kinds:
        return breakdown
    rows = tuple(
        dataclasses.replace(r, kind=kinds.get(r.kind, r.kind)) if r.kind else r
        for r in breakdown.rows
    )
    return dataclasses.replace(breakdown, rows=rows)

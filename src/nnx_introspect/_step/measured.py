"""The compiled program run on this process's devices: :class:`Measured`.

A report asked for ``measure=N`` runs the program it compiled where its
devices are (:func:`~nnx_introspect._xla.run.run_compiled`) and holds the
wall-clock times, what they give (tokens per second, the MFU on the device's
data-sheet peak) and the allocator's figures, each with what it covers, beside
the estimate (:meth:`Measured.versus`). A training step and the serving
programs share this record: only the unit of a run differs (a step, a decode
step giving one token to each sequence, a prefill ending at the first token).
"""

import dataclasses
import statistics
from collections.abc import Mapping
from typing import Any

import jax

from nnx_introspect._accelerators import topology_of_devices
from nnx_introspect._render import format_bytes
from nnx_introspect._text import plural
from nnx_introspect._typing import ArgumentError, IntLike, as_int

__all__ = [
    "MAX_RUNS",
    "Measured",
    "as_measure",
    "duration",
    "measured_rows",
    "measured_topology",
    "measured_with",
    "versus_json",
]

MAX_RUNS = 1000
"""The most timed runs ``measure`` takes."""


def as_measure(value: IntLike | bool | None) -> int | None:
    """``measure`` checked: ``None`` (no run), or the timed runs, 1 to :data:`MAX_RUNS`.

    ``True`` is 5 runs (the CLI's ``--measure`` alone), ``False`` none.

    Example:
        >>> as_measure(None), as_measure(True), as_measure(3)
        (None, 5, 3)
        >>> as_measure(0)
        Traceback (most recent call last):
        ...
        nnx_introspect._typing.ArgumentError: `measure` must be a positive integer, \
got 0. Pass the number of timed runs (5 is a good start) or None for none.
    """
    if value is None or value is False:
        return None
    if value is True:
        return 5
    fix = "Pass the number of timed runs (5 is a good start) or None for none."
    try:
        runs = as_int(value, "measure", minimum=1)
    except ArgumentError as error:
        raise ArgumentError("measure", f"{str(error).rstrip('.')}. {fix}") from None
    if runs > MAX_RUNS:
        raise ArgumentError(
            "measure", f"`measure` must be at most {MAX_RUNS}, got {runs}. {fix}"
        )
    return runs


def duration(seconds: float) -> str:
    """``0.0125`` -> ``"12.5 ms"``: three significant figures.

    Example:
        >>> duration(0.0125), duration(2.0), duration(3e-6)
        ('12.5 ms', '2 s', '3 us')
    """
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


_COVERS = {
    "tpu": (
        "the TPU allocator's peak in this process: the arguments and outputs it "
        "allocated, not the program's temporaries (XLA:TPU reserves those "
        "itself), so it is no check of the compiled peak"
    ),
    "gpu": (
        "the GPU allocator's (BFC) peak in this process: arguments, outputs and "
        "the program's temporaries, as allocated"
    ),
}


@dataclasses.dataclass(frozen=True)
class Measured:
    """One compiled program, run: each timed run's seconds and the allocator.

    Attributes:
        unit: What one run is: ``"step"``, ``"decode step"`` (one token for
            each sequence) or ``"prefill"`` (to the first token).
        seconds: Each timed run's wall clock, in order (the warm-up left out).
        warmup_seconds: The warm-up run's.
        platform: ``"cpu"``, ``"gpu"`` or ``"tpu"``.
        device_kind: The devices' kind (``"TPU v5 lite"``).
        devices: How many devices the program ran on.
        tokens: Tokens one run gives (decode: the sequences; prefill and a
            step: every token of the batch), for tokens per second.
        model_flops: The FLOPs one run's MFU counts per device (``None``: no
            MFU), and ``basis`` how they were counted.
        peak_flops_per_second: One device's data-sheet peak at the program's
            matmul dtype (``None`` on a CPU or a device no family lists).
        allocator: The allocators' ``peak_bytes_in_use``, ``bytes_in_use``
            and ``bytes_limit`` over the devices; ``None`` where the backend
            keeps none (XLA:CPU).
        error: The runtime's words when a run failed on the device (a program
            that compiled but could not allocate its buffers); then there are
            no times.

    Example:
        >>> run = Measured("step", (0.2, 0.25, 0.21), 1.0, "tpu", "TPU v5 lite", 1,
        ...                tokens=8192, model_flops=3.3e13, basis="6·N·tokens",
        ...                peak_flops_per_second=1.97e14)
        >>> run.median, run.tokens_per_second, round(run.mfu, 3)
        (0.21, 39009.52380952381, 0.798)
        >>> print(run.versus((0.198, 0.279)))
        inside the estimate 198 ms-279 ms (210 ms / low 1.06x)
        >>> print(run.versus((0.05, 0.1)))
        2.1x the estimate's high (50 ms-100 ms)
    """

    unit: str
    seconds: tuple[float, ...]
    warmup_seconds: float
    platform: str
    device_kind: str
    devices: int
    tokens: int | None = None
    model_flops: float | None = None
    basis: str | None = None
    peak_flops_per_second: float | None = None
    allocator: Mapping[str, int] | None = None
    error: str | None = None

    @property
    def runs(self) -> int:
        """Timed runs."""
        return len(self.seconds)

    @property
    def median(self) -> float:
        """The median run's seconds (``nan`` without runs)."""
        return statistics.median(self.seconds) if self.seconds else float("nan")

    @property
    def fastest(self) -> float:
        """The fastest run's seconds."""
        return min(self.seconds, default=float("nan"))

    @property
    def slowest(self) -> float:
        """The slowest run's seconds."""
        return max(self.seconds, default=float("nan"))

    @property
    def tokens_per_second(self) -> float | None:
        """Tokens of one run over the median run."""
        if self.tokens is None or not self.seconds:
            return None
        return self.tokens / self.median

    @property
    def mfu(self) -> float | None:
        """Model FLOPs per device over the median run, over the device's peak."""
        if (
            self.model_flops is None
            or self.peak_flops_per_second is None
            or not self.seconds
        ):
            return None
        return self.model_flops / self.median / self.peak_flops_per_second

    @property
    def allocator_covers(self) -> str:
        """What the allocator's figures cover on this backend, in words."""
        if self.allocator is None:
            return (
                f"XLA:{self.platform.upper()} keeps no allocator statistics"
                if self.platform == "cpu"
                else "the backend gave no allocator statistics"
            )
        return _COVERS.get(self.platform, "the allocator's peak in this process")

    def versus(self, estimate: tuple[float, float] | None) -> str:
        """The median against an estimate's ``(low, high)`` seconds, in words.

        Inside the range: which bound it is nearer, as a ratio; outside: how
        many times the nearer bound, or how far under it.
        """
        if self.error is not None or not self.seconds:
            return "not measured: the run failed"
        if estimate is None:
            return "no estimate to hold it against (no topology's data sheet)"
        low, high = estimate
        m = self.median
        shown = f"{duration(low)}-{duration(high)}"
        if low <= m <= high:
            return f"inside the estimate {shown} ({duration(m)} / low {m / low:.2f}x)"
        if m > high:
            return f"{m / high:.2g}x the estimate's high ({shown})"
        return f"{1 - m / low:.0%} under the estimate's low ({shown})"

    def sentence(self) -> str:
        """The runs in one sentence: median, range, tokens/s, MFU, allocator."""
        if self.error is not None:
            return (
                f"Run on this process's "
                f"{plural(self.devices, f'{self.device_kind} device')}: "
                f"it failed: {self.error}"
            )
        parts = [
            f"Measured on this process's "
            f"{plural(self.devices, f'{self.device_kind} device')}, "
            f"{plural(self.runs, 'timed run')} after one warm-up "
            f"({duration(self.warmup_seconds)}): {duration(self.median)} per "
            f"{self.unit} (median; {duration(self.fastest)}-"
            f"{duration(self.slowest)})"
        ]
        if self.tokens_per_second is not None:
            parts.append(f"{self.tokens_per_second:,.0f} tokens/s")
        if self.mfu is not None:
            parts.append(f"MFU {self.mfu:.1%} ({self.basis})")
        text = "; ".join(parts) + "."
        if self.allocator is not None and "peak_bytes_in_use" in self.allocator:
            peak = self.allocator["peak_bytes_in_use"]
            text += f" Allocator peak {format_bytes(peak)} ({peak:,} B): "
            text += f"{self.allocator_covers}."
        else:
            text += f" {self.allocator_covers[0].upper()}{self.allocator_covers[1:]}."
        return text

    def json_data(self) -> dict[str, Any]:
        """The runs and what they give, as JSON data."""
        return {
            "unit": self.unit,
            "seconds": list(self.seconds),
            "median_seconds": None if not self.seconds else self.median,
            "min_seconds": None if not self.seconds else self.fastest,
            "max_seconds": None if not self.seconds else self.slowest,
            "warmup_seconds": self.warmup_seconds,
            "platform": self.platform,
            "device_kind": self.device_kind,
            "devices": self.devices,
            "tokens": self.tokens,
            "tokens_per_second": self.tokens_per_second,
            "mfu": self.mfu,
            "mfu_basis": self.basis,
            "allocator": None if self.allocator is None else dict(self.allocator),
            "allocator_covers": self.allocator_covers,
            "error": self.error,
        }

    @classmethod
    def from_run(
        cls,
        data: Mapping[str, Any],
        unit: str,
        *,
        tokens: int | None = None,
        model_flops: float | None = None,
        basis: str | None = None,
        peak_flops_per_second: float | None = None,
    ) -> "Measured":
        """The record of :func:`~nnx_introspect._xla.run.run_compiled`'s data."""
        return cls(
            unit=unit,
            seconds=tuple(float(s) for s in data.get("seconds", ())),
            warmup_seconds=float(data.get("warmup_seconds", float("nan"))),
            platform=str(data["platform"]),
            device_kind=str(data["device_kind"]),
            devices=int(data["devices"]),
            tokens=tokens,
            model_flops=model_flops,
            basis=basis,
            peak_flops_per_second=peak_flops_per_second,
            allocator=data.get("allocator"),
            error=data.get("error"),
        )


def measured_with(measured: Measured, estimate: Any) -> Measured:
    """``measured`` with the estimate's tokens, model FLOPs and peak, for its MFU.

    ``estimate`` is a :class:`~nnx_introspect._roofline.estimate.Roofline` of
    the same program (its ``model_flops`` count every device).
    """
    return dataclasses.replace(
        measured,
        tokens=measured.tokens if estimate.tokens is None else estimate.tokens,
        model_flops=estimate.model_flops / estimate.devices,
        basis=estimate.mfu_basis,
        peak_flops_per_second=estimate.peak_flops_per_second,
    )


def versus_json(
    measured: Measured,
    estimate: tuple[float, float] | None,
    point: float | None = None,
) -> dict[str, Any]:
    """The median against an estimate's ``(low, high)`` and its ``point``, as JSON."""
    median = measured.median if measured.seconds else None
    low, high = estimate if estimate is not None else (None, None)
    return {
        "estimate_seconds": point,
        "measured_over_estimate": None
        if median is None or not point
        else median / point,
        "estimate_low_seconds": low,
        "estimate_high_seconds": high,
        "measured_seconds": median,
        "measured_over_low": None if median is None or not low else median / low,
        "measured_over_high": None if median is None or not high else median / high,
        "inside": None
        if median is None or low is None or high is None
        else low <= median <= high,
        "words": measured.versus(estimate),
    }


def measured_rows(
    measured: Measured | None,
    estimate: tuple[float, float] | None,
    what: str,
    point: tuple[float, str] | None = None,
) -> tuple[tuple[str, str, str], ...]:
    """A report table's rows: time per ``what`` estimated and measured, compared.

    ``point`` is the point estimate and its basis (``(0.111, "±9%, ...")``):
    given, it is the estimate the measured time is held to, the roofline's
    range a row of its own, said to be no bound (runs land outside it).

    Example:
        >>> run = Measured("step", (0.2, 0.3), 0.5, "cpu", "cpu", 1)
        >>> for row in measured_rows(run, (0.1, 0.2), "step"):
        ...     print(row)  # doctest: +NORMALIZE_WHITESPACE
        ('time per step: estimate', '100 ms-200 ms', 'roofline')
        ('time per step: measured', '250 ms',
         "1.2x the estimate's high (100 ms-200 ms)")
        >>> for row in measured_rows(run, (0.1, 0.2), "step", (0.125, "±10%")):
        ...     print(row)  # doctest: +NORMALIZE_WHITESPACE
        ('time per step: estimate', '125 ms', '±10%')
        ('time per step: roofline range', '100 ms-200 ms', 'roofline, not a bound')
        ('time per step: measured', '250 ms', '2.00x the estimate')
    """
    if measured is None:
        return ()
    rows: tuple[tuple[str, str, str], ...] = ()
    if point is not None:
        rows += ((f"time per {what}: estimate", duration(point[0]), point[1]),)
    if estimate is not None:
        low, high = estimate
        rows += (
            (
                f"time per {what}: {'roofline range' if point else 'estimate'}",
                f"{duration(low)}-{duration(high)}",
                "roofline, not a bound" if point else "roofline",
            ),
        )
    shown = "failed" if measured.error is not None else duration(measured.median)
    versus = measured.versus(estimate)
    if point is not None and measured.error is None and measured.seconds:
        versus = f"{measured.median / point[0]:.2f}x the estimate"
    return (*rows, (f"time per {what}: measured", shown, versus))


def measured_topology(
    num_devices: int,
    mesh_axes: tuple[tuple[str, int], ...],
    topology: str | None,
    runs: int,
    what: str = "the step",
) -> str | None:
    """The topology a measured report estimates for: this process's devices'.

    The given ``topology`` when the present devices are it; the present
    accelerator's name (``"v5e-1"``) when none is given; ``None`` on a CPU.

    Raises:
        ArgumentError: naming ``measure`` when the devices are not this
            process's (a topology of another kind or size, a mesh larger
            than the process has).
    """
    present = jax.devices()
    kind = present[0].device_kind
    here = topology_of_devices(kind, num_devices)
    if num_devices > len(present):
        raise ArgumentError(
            "measure",
            f"`measure` {runs} runs {what} on this process's devices, but "
            f"`mesh` {dict(mesh_axes)} needs {num_devices} and this process has "
            f"{len(present)} ({kind}). Measure on a machine with the mesh's "
            "devices, or leave `measure` out.",
        )
    if topology is not None and topology != here:
        raise ArgumentError(
            "measure",
            f"`measure` {runs} runs {what} on this process's devices, "
            f"{len(present)} x {kind!r}, which are not `topology` {topology!r}. "
            "Run it where the topology's devices are, pass no topology to "
            "measure on these, or leave `measure` out.",
        )
    return here

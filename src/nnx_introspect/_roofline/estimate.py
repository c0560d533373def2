"""A roofline estimate of one step's time, from the compiled program's figures.

:func:`roofline` turns one device's program figures (XLA's ``cost_analysis()``:
FLOPs and bytes accessed), the bytes each device puts on the wire per mesh-axis
combination, and a target's :class:`~nnx_introspect._accelerators.hardware.Hardware`
into times: compute (FLOPs / the dtype's peak), memory (bytes / HBM
bandwidth) and one communication term per axis combination (wire bytes / the
bandwidth of the links the combination spans). The step's time is a range:
perfect overlap (the largest term) to no overlap (their sum). It is an
estimate from the compiled program and data-sheet peaks, never a measurement;
every :class:`Roofline` says so in its :attr:`~Roofline.label` and lists its
assumptions.

The utilisation it gives always names its basis (:attr:`Roofline.mfu_basis`):
an MFU when the model's FLOPs are given (``6·N·tokens`` for a training step),
else a *hardware FLOPs utilisation* counting the program's FLOPs, recompute
included. It is given at the peak that bounds compute (``TF32`` for f32
matmuls on a GPU: :meth:`~nnx_introspect._accelerators.hardware.Hardware.peak_name`)
and at the bf16 dense peak, the one MFUs are usually quoted against.

Which links an axis spans:

* GPUs: devices are numbered host-major (8 GPUs per host, or one host of up
  to 8) and the mesh's axes are row-major over that flat list, as
  ``topologies.make_mesh`` lays out GPUs; an axis combination all of whose
  groups stay in one host talks over NVLink, any other over the network.
* TPUs: the mesh's axes are laid on whole torus dimensions by the greedy rule
  of JAX's ``mesh_utils`` (the last axis first, on the most dimensions whose
  sizes multiply to the axis's size); a ring along a dimension gets 2 links'
  worth of bandwidth when the dimension wraps around (and has more than 2
  chips), 1 otherwise, and a combination spanning several dimensions gets the
  links of all of them.
* Several TPU slices (``2xv5e-256``): the leading axes take the slices
  (:func:`~nnx_introspect._accelerators.dcn_split`) and the rest of each axis
  lies on one slice's torus as above; the bytes across slices
  (``dcn_bytes_by_axis``) are ``"dcn"`` terms at the chip's share of the
  data-center network from the data sheet
  (:attr:`~nnx_introspect._accelerators.hardware.Hardware.dcn_bytes_per_second`),
  uncalibrated, or, for a family without that figure, named as not costed.

Every collective's wire bytes are timed alike, whatever its kind
(:func:`~nnx_introspect._xla.collectives.wire_factor`). An all-to-all, ragged
or not, counts what each device sends: ``(n-1)/n`` of its buffer (a ragged
one's payload, the rows taken as spread evenly), one block to each other
device, at the bandwidth of the links the axes span, as a ring's bytes are. A
block bound for a device several hops away on a ring or torus also loads the
links in between, which this leaves out, so an all-to-all's time is a lower
bound: counting the hops, one over a wrapped ring of ``n`` devices takes
``n^2 / (4 (n-1))`` times as long (2.3 times on a ring of 8), one over a 2x2x2
cube 12/7 times (1.7).
"""

import dataclasses
from collections.abc import Mapping
from typing import Any

from nnx_introspect._accelerators import DTYPE_ALIASES, Hardware
from nnx_introspect._roofline.assumptions import (
    F32_PRECISION,
    PROGRAM_BASIS,
    assumptions,
    dcn_assumptions,
)
from nnx_introspect._roofline.checks import checked_peak
from nnx_introspect._roofline.links import (
    CommTerm,
    comm_term,
    dcn_terms,
    slice_axes,
    term_name,
    torus_assignment,
)
from nnx_introspect._roofline.timing import ProgramTime
from nnx_introspect._typing import ArgumentError, typechecked

__all__ = [
    "LABEL",
    "PROGRAM_BASIS",
    "CommTerm",
    "Roofline",
    "duration",
    "roofline",
    "term_name",
]

LABEL = (
    "Estimate from the compiled program's cost analysis and data-sheet peaks "
    "(a roofline), not a measurement"
)
"""The words a :class:`Roofline`'s label without a point estimate starts with."""


@dataclasses.dataclass(frozen=True)
class Roofline:
    """A step-time estimate: its terms, its range and what it assumes.

    Attributes:
        label: What this is, always: an estimate from the compiled program,
            not a measurement, with the range.
        topology: The target's name.
        devices: Its devices.
        dtype: The dtype whose peak bounds compute (canonical spelling).
        peak_name: What that peak is called: ``"TF32"`` for ``"f32"`` on a
            GPU, the dtype where it says all (``"bf16"``).
        peak_flops_per_second: That peak, one device.
        bf16_peak_flops_per_second: The bf16 dense peak, one device.
        hbm_bytes_per_second: One device's HBM bandwidth.
        flops: One device's program FLOPs, as given.
        bytes_accessed: One device's program bytes accessed, as given.
        compute_seconds: ``flops / peak_flops_per_second``.
        memory_seconds: ``bytes_accessed / hbm_bytes_per_second``.
        comm: One :class:`CommTerm` per axis combination, in the given order.
        low_seconds: Perfect overlap: the largest term.
        high_seconds: No overlap: the sum of the terms.
        bound: The largest term's name: ``"compute"``, ``"memory"`` or
            ``"communication over ('fsdp',)"``.
        model_flops: The FLOPs the MFU counts (all devices, one step).
        model_flops_basis: ``"given"`` or ``"the program's flops x devices"``.
        utilisation: What :attr:`mfu_ceiling` is: ``"MFU"`` (model FLOPs
            given) or ``"hardware FLOPs utilisation"`` (the program's FLOPs).
        mfu_basis: The FLOPs it counts, in words: ``"6·N·tokens, attention
            not counted"``, ``"the program's FLOPs x devices, recompute
            included"``...
        mfu_ceiling: ``model_flops / (low_seconds x peak x devices)``: the MFU
            the estimate allows at best.
        mfu_no_overlap: The same at ``high_seconds``.
        mfu_bf16_ceiling: :attr:`mfu_ceiling` against the bf16 dense peak.
        mfu_bf16_no_overlap: :attr:`mfu_no_overlap` against the bf16 dense peak.
        tokens: Tokens per step, if given.
        tokens_per_second_low: ``tokens / high_seconds``, or ``None``.
        tokens_per_second_high: ``tokens / low_seconds``, or ``None``.
        assumptions: The assumptions, one sentence each, with the figures used.
        time: The point estimate from the program's instructions
            (:func:`~nnx_introspect._roofline.timing.program_time`), what
            rankings, MFU and tokens/s use; ``None`` when the program's work
            was not read (the low and high bounds are then all there is).

    Example:
        >>> from nnx_introspect._accelerators.hardware import hardware_for
        >>> est = roofline(
        ...     flops=197e12, bytes_accessed=0.0, comm_bytes_by_axis={},
        ...     mesh_axes=(("data", 4),), hardware=hardware_for("v5e-4"),
        ... )
        >>> est.low_seconds, est.high_seconds, est.bound, est.mfu_ceiling
        (1.0, 1.0, 'compute', 1.0)
        >>> est.label.startswith("Estimate from the compiled program")
        True
    """

    label: str
    topology: str
    devices: int
    dtype: str
    peak_name: str
    peak_flops_per_second: float
    bf16_peak_flops_per_second: float
    hbm_bytes_per_second: int
    flops: float
    bytes_accessed: float
    compute_seconds: float
    memory_seconds: float
    comm: tuple[CommTerm, ...]
    low_seconds: float
    high_seconds: float
    bound: str
    model_flops: float
    model_flops_basis: str
    utilisation: str
    mfu_basis: str
    mfu_ceiling: float
    mfu_no_overlap: float
    mfu_bf16_ceiling: float
    mfu_bf16_no_overlap: float
    tokens: int | None
    tokens_per_second_low: float | None
    tokens_per_second_high: float | None
    assumptions: tuple[str, ...]
    time: ProgramTime | None = None

    @property
    def seconds(self) -> float | None:
        """The point estimate of one step (:attr:`time`'s), or ``None``."""
        return None if self.time is None else self.time.seconds

    @property
    def error(self) -> float | None:
        """The point estimate's calibrated error bar (``0.09``: ±9%), or ``None``."""
        return None if self.time is None else self.time.error

    @property
    def planned_seconds(self) -> float:
        """The time to plan and rank on: the point estimate, else the low bound."""
        return self.low_seconds if self.time is None else self.time.seconds

    @property
    def mfu(self) -> float | None:
        """The utilisation (:attr:`utilisation`) at the point estimate, or ``None``."""
        if self.time is None or self.time.seconds <= 0:
            return None
        return self.model_flops / (
            self.time.seconds * self.peak_flops_per_second * self.devices
        )

    @property
    def mfu_bf16(self) -> float | None:
        """:attr:`mfu` against the bf16 dense peak, or ``None``."""
        if self.time is None or self.time.seconds <= 0:
            return None
        return self.model_flops / (
            self.time.seconds * self.bf16_peak_flops_per_second * self.devices
        )

    @property
    def tokens_per_second(self) -> float | None:
        """Tokens per second at the point estimate, or ``None``."""
        if self.time is None or self.tokens is None or self.time.seconds <= 0:
            return None
        return self.tokens / self.time.seconds

    @property
    def peak_words(self) -> str:
        """The peak's name, and for an f32 step why it is that peak.

        Example:
            >>> from nnx_introspect._accelerators.hardware import hardware_for
            >>> est = roofline(
            ...     flops=1e12, bytes_accessed=0.0, comm_bytes_by_axis={},
            ...     mesh_axes=(("data", 8),), hardware=hardware_for("h100-8"),
            ...     dtype="float32",
            ... )
            >>> est.peak_words
            "TF32, the rate of f32 matmuls at JAX's default precision"
        """
        if self.peak_name == self.dtype:
            return self.peak_name
        return f"{self.peak_name}, {F32_PRECISION[self.dtype]}"

    @property
    def comm_seconds(self) -> float:
        """The communication terms' sum (the no-overlap share of communication).

        Example:
            >>> from nnx_introspect._accelerators.hardware import hardware_for
            >>> est = roofline(
            ...     flops=1e12, bytes_accessed=1e9,
            ...     comm_bytes_by_axis={("data",): 25 * 10**9, ("tp",): 45 * 10**10},
            ...     mesh_axes=(("data", 2), ("tp", 8)),
            ...     hardware=hardware_for("h100-16"),
            ... )
            >>> est.comm_seconds  # 0.5 s over the network + 1 s over NVLink
            1.5
        """
        return sum((term.seconds for term in self.comm), 0.0)

    def json_data(self) -> dict[str, Any]:
        """Every term, the range and the assumptions, as JSON-ready values.

        Example:
            >>> import json
            >>> from nnx_introspect._accelerators.hardware import hardware_for
            >>> est = roofline(
            ...     flops=1e12, bytes_accessed=1e9, comm_bytes_by_axis={},
            ...     mesh_axes=(("data", 8),), hardware=hardware_for("h100-8"),
            ... )
            >>> data = json.loads(json.dumps(est.json_data()))
            >>> data["estimate"], data["bound"]
            (True, 'compute')
        """
        return {
            "label": self.label,
            "estimate": True,
            "measured": False,
            "topology": self.topology,
            "devices": self.devices,
            "dtype": self.dtype,
            "peak_name": self.peak_name,
            "peak_flops_per_second": self.peak_flops_per_second,
            "bf16_peak_flops_per_second": self.bf16_peak_flops_per_second,
            "hbm_bytes_per_second": self.hbm_bytes_per_second,
            "flops": self.flops,
            "bytes_accessed": self.bytes_accessed,
            "compute_seconds": self.compute_seconds,
            "memory_seconds": self.memory_seconds,
            "comm": [term.json_data() for term in self.comm],
            "low_seconds": self.low_seconds,
            "high_seconds": self.high_seconds,
            "bound": self.bound,
            "model_flops": self.model_flops,
            "model_flops_basis": self.model_flops_basis,
            "utilisation": self.utilisation,
            "mfu_basis": self.mfu_basis,
            "mfu_ceiling": self.mfu_ceiling,
            "mfu_no_overlap": self.mfu_no_overlap,
            "mfu_bf16_ceiling": self.mfu_bf16_ceiling,
            "mfu_bf16_no_overlap": self.mfu_bf16_no_overlap,
            "tokens": self.tokens,
            "tokens_per_second_low": self.tokens_per_second_low,
            "tokens_per_second_high": self.tokens_per_second_high,
            "assumptions": list(self.assumptions),
            "seconds": self.seconds,
            "error": self.error,
            "mfu": self.mfu,
            "mfu_bf16": self.mfu_bf16,
            "tokens_per_second": self.tokens_per_second,
            "time": None if self.time is None else self.time.json_data(),
        }

    def _utilisation_line(self) -> str:
        """:meth:`to_text`'s one utilisation: at the point estimate, else the range."""
        bf16 = self.bf16_peak_flops_per_second != self.peak_flops_per_second
        if self.time is not None and self.mfu is not None:
            at_bf16 = f"; at the bf16 peak {self.mfu_bf16 or 0.0:.1%}" if bf16 else ""
            return (
                f"{self.utilisation} {self.mfu:.1%} at the point estimate, at the "
                f"{self.peak_name} peak{at_bf16}; counting {self.mfu_basis}; "
                f"bound by {self.bound}"
            )
        at_bf16 = ""
        if bf16:
            at_bf16 = (
                f"; at the bf16 peak {self.mfu_bf16_ceiling:.1%} (no overlap: "
                f"{self.mfu_bf16_no_overlap:.1%})"
            )
        return (
            f"{self.utilisation} ceiling {self.mfu_ceiling:.1%} (no overlap: "
            f"{self.mfu_no_overlap:.1%}) at the {self.peak_name} peak{at_bf16}; "
            f"counting {self.mfu_basis}; bound by {self.bound}"
        )

    def to_text(self) -> str:
        """The estimate as plain text: label, terms, range, assumptions.

        Example:
            >>> from nnx_introspect._accelerators.hardware import hardware_for
            >>> est = roofline(
            ...     flops=197e12, bytes_accessed=0.0, comm_bytes_by_axis={},
            ...     mesh_axes=(("data", 4),), hardware=hardware_for("v5e-4"),
            ... )
            >>> print(est.to_text())  # doctest: +ELLIPSIS
            Estimate from the compiled program's ... measurement: 1.00 s to 1.00 s ...
            compute 1.00 s
            ...
            hardware FLOPs utilisation ceiling 100.0% (no overlap: 100.0%) at the
            bf16 peak; counting the program's FLOPs x devices, recompute included;
            bound by compute
            ...
        """
        lines = [self.label]
        if self.time is not None:
            lines.append(f"estimate {self.time.words}")
        lines.append(f"compute {duration(self.compute_seconds)}")
        lines.append(f"memory {duration(self.memory_seconds)}")
        for term in self.comm:
            lines.append(
                f"{term_name(term)} ({term.link}, {term.links} "
                f"link(s)) {duration(term.seconds)}"
            )
        lines.append(self._utilisation_line())
        if self.tokens_per_second_low is not None:
            lines.append(
                f"tokens/s {self.tokens_per_second_low:,.0f} to "
                f"{self.tokens_per_second_high:,.0f}"
            )
        lines.append("Assumptions:")
        lines.extend(f"- {text}" for text in self.assumptions)
        return "\n".join(lines)


def duration(seconds: float) -> str:
    """A time in its unit, three figures.

    Example:
        >>> duration(1.5e-3), duration(2.0), duration(4e-8)
        ('1.50 ms', '2.00 s', '40.00 ns')
    """
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.2f} {unit}"
    return f"{seconds / 1e-9:.2f} ns"


# --- The estimate ----------------------------------------------------------------


def _utilisation(
    hardware: Hardware,
    peak: float,
    times: tuple[float, float],
    model: float,
    basis: str,
) -> dict[str, Any]:
    """The :class:`Roofline` fields of its utilisation, at its peak and at bf16's."""
    low, high = times
    bf16 = hardware.peak_flops_per_second("bf16")
    devices = hardware.devices
    program = basis == PROGRAM_BASIS
    return {
        "bf16_peak_flops_per_second": bf16,
        "model_flops": model,
        "model_flops_basis": "the program's flops x devices" if program else "given",
        "utilisation": "hardware FLOPs utilisation" if program else "MFU",
        "mfu_basis": basis,
        "mfu_ceiling": model / (low * peak * devices),
        "mfu_no_overlap": model / (high * peak * devices),
        "mfu_bf16_ceiling": model / (low * bf16 * devices),
        "mfu_bf16_no_overlap": model / (high * bf16 * devices),
    }


@typechecked
def roofline(
    *,
    flops: float | int,
    bytes_accessed: float | int,
    comm_bytes_by_axis: Mapping[tuple[str, ...], int],
    mesh_axes: tuple[tuple[str, int], ...],
    hardware: Hardware,
    dtype: str = "bf16",
    tokens: int | None = None,
    model_flops: float | int | None = None,
    model_flops_basis: str | None = None,
    dcn_bytes_by_axis: Mapping[tuple[str, ...], int] | None = None,
) -> Roofline:
    """Estimate one step's time on ``hardware`` from its compiled program.

    Compute time is ``flops`` over the dtype's dense peak, memory time
    ``bytes_accessed`` over HBM bandwidth, and each communication term a mesh
    axis combination's wire bytes over the bandwidth of the links it spans
    (NVLink or the network on GPUs, ICI links on TPUs; see the module's text).
    The step takes between ``low_seconds`` (every term overlapped: the largest)
    and ``high_seconds`` (none overlapped: the sum). An estimate, not a
    measurement: what is left out is in the result's ``assumptions``.

    Args:
        flops: FLOPs of one device's program (``cost_analysis()["flops"]``).
        bytes_accessed: Bytes one device's program reads and writes
            (``cost_analysis()["bytes accessed"]``).
        comm_bytes_by_axis: Bytes one device puts on the wire per mesh-axis
            combination, e.g. ``{("fsdp",): 2**30, ("tp",): 2**28}``.
        mesh_axes: The mesh, ``(("fsdp", 32), ("tp", 8))``, in its order; its
            sizes multiply to the hardware's devices.
        hardware: The target, from :func:`hardware_for`.
        dtype: Whose peak bounds compute: ``"bf16"`` (default), ``"fp8"``,
            ``"int8"``, ``"f32"`` (default precision) or ``"f32_highest"``.
        tokens: Tokens one step processes (all devices), for tokens/s.
        model_flops: The model's FLOPs per step over all devices (e.g.
            ``6 x parameters x tokens``) for the MFU; by default
            ``flops x devices``, and the figure is a hardware FLOPs
            utilisation.
        model_flops_basis: How ``model_flops`` was counted, in words
            (``"6·N·tokens, attention not counted"``), for
            :attr:`Roofline.mfu_basis`; ``None``: ``"the given model FLOPs"``.
        dcn_bytes_by_axis: On several TPU slices: bytes one device sends
            across slices per mesh-axis combination (the collectives over the
            data-center network); each a ``"dcn"`` term at the chip's DCN
            bandwidth (:attr:`Hardware.dcn_bytes_per_second`), or, for a
            family without that figure, left out and named so in the
            assumptions. ``comm_bytes_by_axis`` then holds the bytes within a
            slice, whose axes lie on one slice's torus by their shares of it
            (:func:`~nnx_introspect._accelerators.dcn_split`).

    Returns:
        The :class:`Roofline`.

    Raises:
        ValueError: On a negative, NaN or infinite figure, a mesh that is not
            the hardware's size, a key naming no mesh axis, a dtype the chip
            has no peak for, or figures that are all zero (every problem of
            the figures is listed).
        TypeError: On a bool or a malformed ``mesh_axes`` item or key.

    Example:
        >>> from nnx_introspect._accelerators.hardware import hardware_for
        >>> est = roofline(
        ...     flops=989.5e12, bytes_accessed=3.35e12,
        ...     comm_bytes_by_axis={("fsdp",): 25 * 10**9, ("tp",): 450 * 10**9},
        ...     mesh_axes=(("fsdp", 2), ("tp", 8)), hardware=hardware_for("h100-16"),
        ...     tokens=16 * 4096,
        ... )
        >>> [(t.axes, t.link, t.seconds) for t in est.comm]
        [(('fsdp',), 'network', 0.5), (('tp',), 'nvlink', 1.0)]
        >>> est.low_seconds, est.high_seconds, est.tokens_per_second_high
        (1.0, 3.5, 65536.0)
    """
    peak = checked_peak(
        flops=flops,
        bytes_accessed=bytes_accessed,
        comm_bytes_by_axis=dict(dcn_bytes_by_axis or {}) | dict(comm_bytes_by_axis),
        mesh_axes=mesh_axes,
        hardware=hardware,
        dtype=dtype,
        tokens=tokens,
        model_flops=model_flops,
    )
    canonical = DTYPE_ALIASES[dtype.strip().lower()]
    ici_axes, dcn_axes = slice_axes(hardware, mesh_axes)
    names_sizes = tuple(size for _, size in ici_axes)
    assignment = None
    if hardware.platform == "tpu":
        assignment = torus_assignment(hardware.torus_dims, names_sizes)
    comm = tuple(
        comm_term(hardware, ici_axes, assignment, axes, wire)
        for axes, wire in comm_bytes_by_axis.items()
    )
    dcn = dict(dcn_bytes_by_axis or {})
    comm += dcn_terms(hardware, dcn_axes, dcn)
    compute = float(flops) / peak
    memory = float(bytes_accessed) / hardware.hbm_bytes_per_second
    terms = [("compute", compute), ("memory", memory)]
    terms += [(term_name(t), t.seconds) for t in comm]
    bound, low = max(terms, key=lambda term: term[1])
    high = sum(seconds for _, seconds in terms)
    if low == 0:
        raise ArgumentError(
            "flops",
            "`flops`, `bytes_accessed` and `comm_bytes_by_axis` are all zero: "
            "there is no step to estimate. Pass the compiled program's figures "
            "(cost_analysis()['flops'] and ['bytes accessed']).",
        )
    devices = hardware.devices
    model = float(model_flops) if model_flops is not None else float(flops) * devices
    basis = PROGRAM_BASIS
    if model_flops is not None:
        basis = model_flops_basis or "the given model FLOPs"
    label = (
        f"{LABEL}: {duration(low)} to {duration(high)} per step on "
        f"{hardware.topology} ({bound}-bound at best)"
    )
    return Roofline(
        label=label,
        topology=hardware.topology,
        devices=devices,
        dtype=canonical,
        peak_name=hardware.peak_name(canonical),
        peak_flops_per_second=peak,
        hbm_bytes_per_second=hardware.hbm_bytes_per_second,
        flops=float(flops),
        bytes_accessed=float(bytes_accessed),
        compute_seconds=compute,
        memory_seconds=memory,
        comm=comm,
        low_seconds=low,
        high_seconds=high,
        bound=bound,
        **_utilisation(hardware, peak, (low, high), model, basis),
        tokens=tokens,
        tokens_per_second_low=None if tokens is None else tokens / high,
        tokens_per_second_high=None if tokens is None else tokens / low,
        assumptions=assumptions(hardware, canonical, peak, ici_axes, assignment, basis)
        + dcn_assumptions(hardware, dcn_axes, dcn),
    )

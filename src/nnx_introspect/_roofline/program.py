"""The roofline of one compiled program on a named topology, from its figures.

:func:`program_roofline` is what a step report estimates with: the program's
FLOPs and bytes accessed, its collectives' wire bytes per mesh-axis
combination (those over device groups that are not whole mesh axes counted
over the axes each group lies inside, when the caller says which, else left
out; an assumption says either), on the named topology's data-sheet figures at the
peak of the program's matmul dtype (``f32`` when the chip has no peak for it).
"""

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from nnx_introspect._accelerators import hardware_for
from nnx_introspect._render import format_bytes
from nnx_introspect._roofline.estimate import Roofline, duration, roofline
from nnx_introspect._roofline.overlap import hidden_comm_seconds
from nnx_introspect._roofline.timing import ProgramTime, constants_for, program_time
from nnx_introspect._typing import ArgumentError
from nnx_introspect._xla import DCN_MARK, Work, libtpu_version, work_from_json

__all__ = ["POINT_LABEL", "RANGE_WORDS", "program_roofline", "with_time"]

POINT_LABEL = (
    "Estimate from the compiled program's instructions at the device's rates, "
    "not a measurement"
)
"""The words the label of an estimate with a point time starts with; its basis
(the calibration, or none) follows."""

RANGE_WORDS = (
    "XLA's cost analysis at data-sheet peaks; a range, not a bound: the "
    "program's bytes accessed overcount HBM traffic"
)
"""What the roofline's ``(low, high)`` range is, beside a point estimate: runs
land outside it (below its low end where on-chip buffers and fusions keep
bytes off HBM), so neither end bounds a run."""


def program_roofline(
    topology: str,
    *,
    flops: float,
    bytes_accessed: float,
    wire_bytes_by_axes: Sequence[tuple[tuple[str, ...], int]],
    mesh_axes: tuple[tuple[str, int], ...],
    matmul_dtype: str | None = None,
    tokens: int | None = None,
    model_flops: float | None = None,
    model_flops_basis: str | None = None,
    network_bytes_per_second: int | None = None,
    irregular_wire_bytes: Sequence[tuple[tuple[str, ...], int]] | None = None,
    work: Work | dict[str, Any] | None = None,
) -> Roofline:
    """The :func:`~nnx_introspect._roofline.estimate.roofline` of a compiled program.

    Args:
        topology: The target's name (``"h100-8"``, ``"v5e-8"``).
        flops: One device's program FLOPs.
        bytes_accessed: One device's program bytes accessed.
        wire_bytes_by_axes: ``(axes, wire bytes)`` per device and step, as the
            program's collectives give them: combinations repeated add up,
            those over one device are dropped, and those naming an axis the
            mesh lacks (``("?",)``: groups that are not whole mesh axes) are
            left out, with an assumption saying how many bytes. Axes marked
            :data:`~nnx_introspect._xla.collectives.DCN_MARK`
            (``("data@DCN",)``, the collectives of a multi-slice TPU program
            across its slices) are costed over the data-center network.
        mesh_axes: The mesh, ``(name, size)`` in its order.
        matmul_dtype: The program's matmul operand type; ``None``: ``"bf16"``.
        tokens: Tokens per step, for tokens/s.
        model_flops: The FLOPs the MFU counts; default the program's (a
            hardware FLOPs utilisation).
        model_flops_basis: How ``model_flops`` was counted, in words.
        network_bytes_per_second: The network bandwidth per GPU between hosts;
            ``None``: the family's default.
        irregular_wire_bytes: The ``("?",)`` bytes again, as ``(axes, wire
            bytes)`` keyed by the mesh axes each of their device groups lies
            inside (:meth:`~nnx_introspect._xla.collectives.Collectives.
            irregular_wire_bytes`): given, they are counted in those axes'
            terms instead of left out, and ``("?",)`` entries of
            ``wire_bytes_by_axes`` are not counted again.
        work: The program's work by instruction (a
            :class:`~nnx_introspect._xla.Work` or its JSON data): given, the
            estimate carries the point estimate of
            :func:`~nnx_introspect._roofline.timing.program_time`, its
            communication the roofline's terms.

    Returns:
        The estimate.

    Example:
        >>> est = program_roofline(
        ...     "h100-8", flops=1e12, bytes_accessed=1e9,
        ...     wire_bytes_by_axes=((("tp",), 450 * 10**6), (("?",), 2**20)),
        ...     mesh_axes=(("tp", 8),),
        ... )
        >>> [(term.axes, term.seconds) for term in est.comm]
        [(('tp',), 0.001)]
        >>> print(est.assumptions[-1])  # doctest: +NORMALIZE_WHITESPACE
        1 MiB on the wire over device groups that are not whole mesh axes are
        left out of the communication terms.
        >>> est = program_roofline(
        ...     "h100-8", flops=1e12, bytes_accessed=1e9,
        ...     wire_bytes_by_axes=((("tp",), 450 * 10**6), (("?",), 450 * 10**6)),
        ...     mesh_axes=(("tp", 8),), irregular_wire_bytes=((("tp",), 450 * 10**6),),
        ... )
        >>> [(term.axes, term.seconds) for term in est.comm]
        [(('tp',), 0.002)]
    """
    comm, dcn, left_out, irregular, spans = _split_wire(
        wire_bytes_by_axes, irregular_wire_bytes, mesh_axes
    )
    hardware = hardware_for(topology, network_bytes_per_second=network_bytes_per_second)
    dtype = matmul_dtype or "bf16"
    try:
        hardware.peak_flops_per_second(dtype)
    except ValueError:
        dtype = "f32"
    estimate = roofline(
        flops=flops,
        bytes_accessed=bytes_accessed,
        comm_bytes_by_axis=comm,
        mesh_axes=mesh_axes,
        hardware=hardware,
        dtype=dtype,
        tokens=tokens,
        model_flops=model_flops,
        model_flops_basis=model_flops_basis,
        dcn_bytes_by_axis=dcn,
    )
    if work is not None:
        found = work if isinstance(work, Work) else work_from_json(work)
        overlap = hidden_comm_seconds(
            found, estimate.comm, hardware, constants_for(hardware), dtype=dtype
        )
        estimate = with_time(
            estimate,
            program_time(
                found,
                hardware,
                dtype=dtype,
                comm_seconds=estimate.comm_seconds,
                comm_hidden=(overlap.hidden_seconds, overlap.windows),
                compiled_by=compiler_of(hardware.platform),
            ),
        )
    notes = []
    if irregular:
        notes.append(
            f"{format_bytes(irregular)} on the wire over device groups that are "
            "not whole mesh axes (axes '?') are counted over "
            f"{', '.join(spans)}: the axes each group lies inside, at their "
            "links' bandwidth."
        )
    if left_out:
        notes.append(
            f"{format_bytes(left_out)} on the wire over device groups that are "
            "not whole mesh axes are left out of the communication terms."
        )
    if not notes:
        return estimate
    return dataclasses.replace(estimate, assumptions=(*estimate.assumptions, *notes))


def _split_wire(
    wire_bytes_by_axes: Sequence[tuple[Sequence[str], int]],
    irregular_wire_bytes: Sequence[tuple[Sequence[str], int]] | None,
    mesh_axes: tuple[tuple[str, int], ...],
) -> tuple[dict[tuple[str, ...], int], dict[tuple[str, ...], int], int, int, list[str]]:
    """The wire bytes by the terms that cost them.

    ``(ICI or NVLink bytes by axes, DCN bytes by axes, bytes left out, bytes
    of irregular groups counted over the axes they lie in, those axes)``.
    """
    sizes = dict(mesh_axes)
    comm: dict[tuple[str, ...], int] = {}
    dcn: dict[tuple[str, ...], int] = {}
    left_out = irregular = 0
    listed = []
    for axes, wire in wire_bytes_by_axes:
        if axes and all(a.endswith(DCN_MARK) for a in axes):
            plain = tuple(a.removesuffix(DCN_MARK) for a in axes)
            if all(a in sizes for a in plain) and wire:
                dcn[plain] = dcn.get(plain, 0) + wire
                continue
        listed.append((tuple(axes), wire, False))
    if irregular_wire_bytes is not None:
        listed = [item for item in listed if item[0] != ("?",)]
        listed += [(tuple(axes), wire, True) for axes, wire in irregular_wire_bytes]
    spans: list[str] = []
    for axes, wire, spanned in listed:
        if axes and all(a in sizes for a in axes):
            if math.prod(sizes[a] for a in axes) > 1 and wire:
                comm[axes] = comm.get(axes, 0) + wire
                irregular += wire if spanned else 0
                spans += ["+".join(axes)] if spanned else []
        elif spanned and axes:
            raise ArgumentError(
                "irregular_wire_bytes",
                f"`irregular_wire_bytes` names axes {axes} the mesh "
                f"{dict(mesh_axes)} lacks; pass Collectives.irregular_wire_bytes() "
                "of the program compiled on this mesh.",
            )
        else:
            left_out += wire
    return comm, dcn, left_out, irregular, spans


def compiler_of(platform: str) -> str | None:
    """The compiler that wrote this environment's programs for ``platform``.

    XLA:TPU's programs are libtpu's, and every compile of this environment
    (here, in a child process, on the chip, or recalled from the cache, whose
    key names the versions) uses the installed one; ``None`` elsewhere (the
    data-sheet constants of other kinds name no compiler).

    Example:
        >>> compiler_of("cuda") is None
        True
    """
    if platform != "tpu":
        return None
    version = libtpu_version()
    return None if version is None else f"libtpu {version}"


def with_time(estimate: Roofline, time: ProgramTime) -> Roofline:
    """``estimate`` carrying the point estimate ``time``: its label and assumptions.

    The label leads with the point estimate and its basis (its calibration, or
    none); the roofline's range follows, said to be no bound.

    Example:
        >>> from nnx_introspect._accelerators.hardware import hardware_for
        >>> from nnx_introspect._roofline.timing import program_time
        >>> from nnx_introspect._xla import OpWork, Work
        >>> hardware = hardware_for("h100-1")
        >>> est = roofline(
        ...     flops=1e12, bytes_accessed=1e9, comm_bytes_by_axis={},
        ...     mesh_axes=(("data", 1),), hardware=hardware,
        ... )
        >>> work = Work((OpWork("matmul", 1e12, 0.0, 10**9, None, 1),))
        >>> timed = with_time(est, program_time(work, hardware))
        >>> print(timed.label)  # doctest: +NORMALIZE_WHITESPACE
        Estimate from the compiled program's instructions at the device's rates,
        not a measurement: 1.01 ms (uncalibrated: data-sheet peaks, no chip of
        this kind measured) per step on h100-1; roofline range 1.01 ms to 1.31 ms
        (compute-bound at best; XLA's cost analysis at data-sheet peaks; a range,
        not a bound: the program's bytes accessed overcount HBM traffic)
    """
    label = (
        f"{POINT_LABEL}: {time.words} per step on {estimate.topology}; roofline "
        f"range {duration(estimate.low_seconds)} to "
        f"{duration(estimate.high_seconds)} ({estimate.bound}-bound at best; "
        f"{RANGE_WORDS})"
    )
    c = time.constants
    if c.calibrated and c.error is not None:
        rates = (
            f"The point estimate sums the program's instructions, each the longest "
            f"of its matmul FLOPs at {c.matmul_fraction:.0%} of the peak, its HBM "
            f"bytes at {c.hbm_fraction:.0%} of the HBM bandwidth"
        )
        if c.vector_flops_per_second is not None:
            rates += f", its vector work at {c.vector_flops_per_second:.3g} FLOP/s"
        if c.seconds_per_cycle is not None:
            rates += (
                f" and XLA:TPU's cycle estimate at {c.seconds_per_cycle * 1e9:.3g} "
                "ns a cycle"
            )
        rates += (
            f", plus {c.launch_seconds * 1e6:.3g} us per instruction run "
            f"(constants {c.version}, fitted on {c.programs} programs run on the "
            f"chip; on {c.held_out} others, 9 in 10 ran within ±{c.error:.0%})."
        )
    else:
        rates = (
            "The point estimate sums the program's instructions, each the longest "
            "of its matmul FLOPs at the dense peak and its HBM bytes at the "
            "data-sheet bandwidth: uncalibrated, no chip of this kind was measured."
        )
    if time.comm_seconds and time.comm_windows:
        rates += (
            " Its communication terms are added but for what the compute scheduled "
            "while an asynchronous collective is in flight hides (synchronous "
            "collectives, and those whose window could not be read, hide "
            "nothing): uncalibrated, a single chip has no links to calibrate them on."
        )
    elif time.comm_seconds:
        rates += (
            " Its communication terms are added, not overlapped: a single chip has "
            "no links to calibrate them on."
        )
    return dataclasses.replace(
        estimate, label=label, time=time, assumptions=(rates, *estimate.assumptions)
    )

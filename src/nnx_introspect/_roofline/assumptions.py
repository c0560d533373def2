"""The words a roofline states about itself: its assumptions, with the figures used.

:func:`assumptions` gives one sentence per assumption of
:func:`~nnx_introspect._roofline.estimate.roofline` (the peak and its
precision, HBM, the links and how the mesh lies on them, the overlap, what
the utilisation counts); the estimate only computes.
"""

from collections.abc import Mapping
from typing import Final

from nnx_introspect._accelerators import Hardware
from nnx_introspect._render import format_bytes

__all__ = ["F32_PRECISION", "PROGRAM_BASIS", "assumptions", "dcn_assumptions"]

PROGRAM_BASIS: Final = "the program's FLOPs x devices, recompute included"
"""The :attr:`~nnx_introspect._roofline.estimate.Roofline.mfu_basis` of a
hardware FLOPs utilisation."""

F32_PRECISION: Final = {
    "f32": "the rate of f32 matmuls at JAX's default precision",
    "f32_highest": "the rate of f32 matmuls at Precision.HIGHEST",
}
"""How an f32 matmul runs, by the dtype name of its peak."""


def assumptions(
    hardware: Hardware,
    dtype: str,
    peak: float,
    mesh_axes: tuple[tuple[str, int], ...],
    assignment: tuple[tuple[int, ...], ...] | None,
    mfu_basis: str,
) -> tuple[str, ...]:
    """The estimate's assumptions, with the figures it used."""
    name = hardware.peak_name(dtype)
    runs = ""
    if name != dtype:
        runs = f" ({F32_PRECISION[dtype]})"
    texts = [
        f"Compute time is the program's FLOPs at the dense {name} peak of "
        f"{peak:.4g} FLOP/s per device ({hardware.device_name}){runs}: every "
        "FLOP at tensor-core/MXU speed, so work on vector units makes it a "
        "lower bound.",
        "Memory time is XLA's bytes accessed at the data-sheet HBM bandwidth of "
        f"{hardware.hbm_bytes_per_second:.4g} B/s per device; caches and fusion "
        "count only as XLA's cost model saw them.",
        "Communication time is each device's wire bytes over the bandwidth of its "
        "links in one direction; latency, per-message overhead and congestion are "
        "left out.",
        "An all-to-all (ragged or not) counts the (n-1)/n of its buffer each "
        "device sends, timed like a ring's; blocks to devices several hops away "
        "also load the links between, which is left out, so its time is a lower "
        "bound.",
    ]
    if hardware.platform == "cuda":
        texts.append(
            f"GPUs are numbered host-major, {hardware.gpus_per_host} per host "
            f"({hardware.hosts} host(s)), and the mesh's axes are row-major over "
            "them: an axis combination whose every group stays in one host uses "
            f"NVLink ({hardware.nvlink_bytes_per_second:.4g} B/s per GPU per "
            "direction), any other the network for all its bytes "
            f"({hardware.network_bytes_per_second:.4g} B/s per GPU per direction, "
            f"{hardware.source('network_bytes_per_second')})."
        )
    else:
        texts.append(
            f"The mesh's axes lie on the {'x'.join(map(str, hardware.torus_dims))} "
            f"torus (wraparound {hardware.wraparound}) by JAX's make_mesh rule: "
            "the last axis first, on the most whole torus dims whose sizes "
            "multiply to its size (the ring orders make_mesh uses inside one "
            "small tray are not modelled)."
        )
        texts.append(
            "A bidirectional ring along a torus dim uses 2 links' worth of ICI "
            "bandwidth when the dim wraps around and has more than 2 chips, 1 "
            "otherwise; an axis or combination spanning several dims uses the "
            "links of all of them at once (their sum); one link is "
            f"{hardware.ici_bytes_per_second_per_link:.4g} B/s per direction."
        )
        if assignment is None:
            texts.append(
                f"The mesh {tuple(s for _, s in mesh_axes)} fits no whole torus "
                "dims, so make_mesh falls back to plain device order: every "
                "communication term is counted at 1 link."
            )
    texts.append(
        "Low is perfect overlap: the largest of compute, memory and each "
        "communication term, each its own resource (optimistic even for terms "
        "sharing links); high is no overlap: their sum."
    )
    texts.append(_mfu_assumption(hardware, name, mfu_basis))
    return tuple(texts)


def _mfu_assumption(hardware: Hardware, name: str, basis: str) -> str:
    """What the utilisation counts, against which peaks."""
    if basis == PROGRAM_BASIS:
        what = (
            "Hardware FLOPs utilisation = the program's FLOPs x devices "
            "(rematerialized and redundant work included, so it overstates "
            "useful work)"
        )
    else:
        what = f"MFU = the model's FLOPs ({basis})"
    bf16 = ""
    if name != "bf16":
        bf16 = (
            ", given at the dense bf16 peak too "
            f"({hardware.peak_flops_per_second('bf16'):.4g} FLOP/s per device), "
            "the one MFUs are usually quoted against"
        )
    return (
        f"{what} / (step time x {name} peak x devices){bf16}; the ceiling uses "
        "the low time. Peaks and bandwidths are data-sheet figures "
        "(Hardware.sources); sustained rates are lower."
    )


def dcn_assumptions(
    hardware: Hardware,
    dcn_axes: tuple[tuple[str, int], ...],
    dcn: Mapping[tuple[str, ...], int],
) -> tuple[str, ...]:
    """What the estimate assumes across slices; ``()`` on one slice.

    Example:
        >>> from nnx_introspect._accelerators.hardware import hardware_for
        >>> hardware = hardware_for("2xv4-8")
        >>> texts = dcn_assumptions(hardware, (("data", 2),), {("data",): 2**20})
        >>> print(texts[-1])  # doctest: +NORMALIZE_WHITESPACE
        1 MiB on the wire across slices (over data) are not costed: TPU v4 chip
        (2 TensorCores as one megacore device) has no data-center network figure
        in the data sheets this reads.
    """
    if hardware.slices <= 1:
        return ()
    crossing = ", ".join(f"{n}={f}" for n, f in dcn_axes if f > 1)
    rate = hardware.dcn_bytes_per_second
    texts = [
        f"The {hardware.slices} slices are joined by the data-center network "
        f"(DCN), the mesh's leading axes across them ({crossing}), the rest of "
        "each axis on one slice's torus."
    ]
    if rate is not None:
        texts.append(
            "Collectives across slices (DCN) are costed at the data sheet's DCN "
            f"bandwidth of {rate:.4g} B/s per chip "
            f"({hardware.source('dcn_bytes_per_second')}), uncalibrated: each "
            "chip's wire bytes over its share, with the hosts' NICs, the "
            "network's latency and congestion left out."
        )
    elif dcn:
        over = ", ".join("+".join(axes) for axes in dcn)
        texts.append(
            f"{format_bytes(sum(dcn.values()))} on the wire across slices (over "
            f"{over}) are not costed: {hardware.device_name} has no data-center "
            "network figure in the data sheets this reads."
        )
    return tuple(texts)

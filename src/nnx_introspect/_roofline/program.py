"""The roofline of one compiled program on a named topology, from its figures.

:func:`program_roofline` is what a step report estimates with: the program's
FLOPs and bytes accessed, its collectives' wire bytes per mesh-axis
combination (those over groups that are not whole mesh axes left out, and
said so in an assumption), on the named topology's data-sheet figures at the
peak of the program's matmul dtype (``f32`` when the chip has no peak for it).
"""

import dataclasses
import math
from collections.abc import Sequence

from nnx_introspect._accelerators.hardware import hardware_for
from nnx_introspect._render.table import format_bytes
from nnx_introspect._roofline.estimate import Roofline, roofline

__all__ = ["program_roofline"]


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
            left out, with an assumption saying how many bytes.
        mesh_axes: The mesh, ``(name, size)`` in its order.
        matmul_dtype: The program's matmul operand type; ``None``: ``"bf16"``.
        tokens: Tokens per step, for tokens/s.
        model_flops: The FLOPs the MFU counts; default the program's (a
            hardware FLOPs utilisation).
        model_flops_basis: How ``model_flops`` was counted, in words.
        network_bytes_per_second: The network bandwidth per GPU between hosts;
            ``None``: the family's default.

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
    """
    sizes = dict(mesh_axes)
    comm: dict[tuple[str, ...], int] = {}
    left_out = 0
    for axes, wire in wire_bytes_by_axes:
        if axes and all(a in sizes for a in axes):
            if math.prod(sizes[a] for a in axes) > 1 and wire:
                comm[tuple(axes)] = comm.get(tuple(axes), 0) + wire
        else:
            left_out += wire
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
    )
    if not left_out:
        return estimate
    note = (
        f"{format_bytes(left_out)} on the wire over device groups that are "
        "not whole mesh axes are left out of the communication terms."
    )
    return dataclasses.replace(estimate, assumptions=(*estimate.assumptions, note))

"""Which links an axis combination's collectives cross: hosts, tori, ICI links.

The topology arithmetic of the roofline's communication terms
(:func:`~nnx_introspect._roofline.estimate.roofline`): whether each group of a
mesh axis combination stays inside one GPU host (NVLink) or spans hosts (the
network), how a TPU slice's torus dimensions carry the mesh's axes, and on
several slices which share of each axis crosses the data-center network.
"""

import itertools
import math

import numpy as np

from nnx_introspect._accelerators import Hardware, dcn_split, resolve_topology

__all__ = ["gpu_in_host", "ici_links", "slice_axes", "torus_assignment"]


def gpu_in_host(
    hardware: Hardware, mesh_axes: tuple[tuple[str, int], ...], axes: tuple[str, ...]
) -> bool:
    """Whether every group of devices varying ``axes`` stays within one host.

    Devices are numbered host-major (``gpus_per_host`` consecutive ids per
    host) and the mesh is row-major over them.
    """
    per_host = hardware.gpus_per_host or 1
    names = [name for name, _ in mesh_axes]
    sizes = [size for _, size in mesh_axes]
    host = (np.arange(math.prod(sizes)) // per_host).reshape(sizes)
    moved = [names.index(a) for a in axes]
    groups = np.moveaxis(host, moved, list(range(-len(moved), 0)))
    groups = groups.reshape(-1, math.prod(sizes[i] for i in moved))
    return bool((groups == groups[:, :1]).all())


def torus_assignment(
    dims: tuple[int, ...], sizes: tuple[int, ...]
) -> tuple[tuple[int, ...], ...] | None:
    """Each mesh axis's torus dims by JAX's greedy rule, or ``None`` if none fits.

    The rule of ``jax._src.mesh_utils._create_device_mesh_for_nd_torus`` (what
    ``topologies.make_mesh`` uses on a TPU slice): axes from the last to the
    first, each onto the largest set of still-free dims (of the 3D physical
    mesh, a 2D slice's third being 1) whose sizes multiply to the axis's size.
    """
    free = list(dims) + [1] * (3 - len(dims))
    assignment: list[tuple[int, ...]] = [() for _ in sizes]
    for index in reversed(range(len(sizes))):
        found: tuple[int, ...] | None = None
        for count in range(len(free), 0, -1):
            for combo in itertools.combinations(range(len(free)), count):
                if math.prod(free[d] for d in combo) == sizes[index]:
                    found = combo
                    break
            if found is not None:
                break
        if found is None:
            if sizes[index] > 1:
                return None
            continue
        assignment[index] = found
        for d in found:
            free[d] = 0
    return tuple(assignment)


def ici_links(hardware: Hardware, torus_dims: set[int]) -> int:
    """Links' worth a ring over ``torus_dims`` uses: 2 per wrapped dim, else 1."""
    links = 0
    for d in torus_dims:
        if d >= len(hardware.torus_dims) or hardware.torus_dims[d] == 1:
            continue
        wraps = hardware.wraparound[d] and hardware.torus_dims[d] > 2
        links += 2 if wraps else 1
    return max(links, 1)


def slice_axes(
    hardware: Hardware, mesh_axes: tuple[tuple[str, int], ...]
) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]]:
    """``(one slice's mesh, each axis's share of the slices)``; ``()`` for one.

    On several TPU slices the leading axes take the slices
    (:func:`~nnx_introspect._accelerators.dcn_split`); the rest of each axis
    lies on one slice's torus.

    Example:
        >>> from nnx_introspect._accelerators import hardware_for
        >>> slice_axes(hardware_for("2xv5e-4"), (("data", 2), ("fsdp", 4)))
        ((('data', 1), ('fsdp', 4)), (('data', 2), ('fsdp', 1)))
        >>> slice_axes(hardware_for("v5e-4"), (("fsdp", 4),))
        ((('fsdp', 4),), ())
    """
    if hardware.slices <= 1:
        return mesh_axes, ()
    ici, dcn = dcn_split(resolve_topology(hardware.topology), mesh_axes)
    names = [name for name, _ in mesh_axes]
    return tuple(zip(names, ici, strict=True)), tuple(zip(names, dcn, strict=True))

"""Which links an axis combination's collectives cross: hosts, tori, ICI links.

The topology arithmetic of the roofline's communication terms
(:func:`~nnx_introspect._roofline.estimate.roofline`): whether each group of a
mesh axis combination stays inside one GPU host (NVLink) or spans hosts (the
network), and how a TPU slice's torus dimensions carry the mesh's axes.
"""

import itertools
import math

import numpy as np

from nnx_introspect._accelerators import Hardware

__all__ = ["gpu_in_host", "ici_links", "torus_assignment"]


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

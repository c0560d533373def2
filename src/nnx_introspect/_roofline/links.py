"""Which links an axis combination's collectives cross: hosts, tori, ICI links.

The topology arithmetic of the roofline's communication terms
(:func:`~nnx_introspect._roofline.estimate.roofline`): whether each group of a
mesh axis combination stays inside one GPU host (NVLink) or spans hosts (the
network), how a TPU slice's torus dimensions carry the mesh's axes, and on
several slices which share of each axis crosses the data-center network;
and each axis combination's communication term (:class:`CommTerm`: its wire
bytes over those links' bandwidth).
"""

import dataclasses
import itertools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from nnx_introspect._accelerators import Hardware, dcn_split, resolve_topology

__all__ = [
    "CommTerm",
    "comm_term",
    "dcn_terms",
    "gpu_in_host",
    "ici_links",
    "slice_axes",
    "term_name",
    "torus_assignment",
]


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


@dataclasses.dataclass(frozen=True)
class CommTerm:
    """One mesh-axis combination's communication: its bytes, links and time.

    Attributes:
        axes: The mesh axes the collectives run over, as given.
        group_size: Devices in one group (the product of the axes' sizes;
            on several slices, of their shares within a slice for ICI, of the
            slices for DCN).
        wire_bytes: Bytes one device puts on the wire over these axes.
        link: ``"nvlink"``, ``"network"`` (GPUs), ``"ici"`` (TPUs) or
            ``"dcn"`` (TPUs: across slices, over the data-center network).
        links: Links' worth of bandwidth one device uses (1 on GPUs).
        bytes_per_second: The bandwidth used: ``links`` x one link's.
        seconds: ``wire_bytes / bytes_per_second``.
        torus_dims: TPU: the indices of the torus dimensions the axes span
            (``()`` on GPUs, or when the mesh fits no whole dimensions).

    Example:
        >>> from nnx_introspect._accelerators.hardware import hardware_for
        >>> from nnx_introspect._roofline.estimate import roofline
        >>> est = roofline(
        ...     flops=0.0, bytes_accessed=0.0,
        ...     comm_bytes_by_axis={("tp",): 450 * 10**6},
        ...     mesh_axes=(("tp", 8),), hardware=hardware_for("h100-8"),
        ... )
        >>> term = est.comm[0]
        >>> term.link, term.seconds
        ('nvlink', 0.001)
    """

    axes: tuple[str, ...]
    group_size: int
    wire_bytes: int
    link: str
    links: int
    bytes_per_second: float
    seconds: float
    torus_dims: tuple[int, ...] = ()

    def json_data(self) -> dict[str, Any]:
        """The term as JSON-ready values.

        Example:
            >>> from nnx_introspect._accelerators.hardware import hardware_for
            >>> from nnx_introspect._roofline.estimate import roofline
            >>> est = roofline(
            ...     flops=0.0, bytes_accessed=0.0,
            ...     comm_bytes_by_axis={("data",): 10**10},
            ...     mesh_axes=(("data", 4),), hardware=hardware_for("v5e-4"),
            ... )
            >>> data = est.comm[0].json_data()
            >>> data["link"], data["links"], data["torus_dims"], data["seconds"]
            ('ici', 2, [0, 1], 0.1)
        """
        return {
            "axes": list(self.axes),
            "group_size": self.group_size,
            "wire_bytes": self.wire_bytes,
            "link": self.link,
            "links": self.links,
            "bytes_per_second": self.bytes_per_second,
            "seconds": self.seconds,
            "torus_dims": list(self.torus_dims),
        }


def comm_term(
    hardware: Hardware,
    mesh_axes: tuple[tuple[str, int], ...],
    assignment: tuple[tuple[int, ...], ...] | None,
    axes: tuple[str, ...],
    wire_bytes: int,
) -> CommTerm:
    """One axis combination's links, bandwidth and time."""
    sizes = dict(mesh_axes)
    group = math.prod(sizes[a] for a in axes)
    names = [name for name, _ in mesh_axes]
    if hardware.platform == "cuda":
        in_host = gpu_in_host(hardware, mesh_axes, axes)
        link = "nvlink" if in_host else "network"
        if in_host:
            gpu_rate = hardware.nvlink_bytes_per_second
        else:
            gpu_rate = hardware.network_bytes_per_second
        if gpu_rate is None:  # pragma: no cover - hardware_for fills both
            raise AssertionError(f"{hardware.topology} has no {link} figure")
        rate = float(gpu_rate)
        return CommTerm(axes, group, wire_bytes, link, 1, rate, wire_bytes / rate)
    per_link = hardware.ici_bytes_per_second_per_link
    if per_link is None:  # pragma: no cover - hardware_for fills it
        raise AssertionError(f"{hardware.topology} has no ICI figure")
    dims: set[int] = set()
    if assignment is not None:
        for a in axes:
            dims.update(assignment[names.index(a)])
    torus = hardware.torus_dims
    spanned = tuple(sorted(d for d in dims if d < len(torus) and torus[d] > 1))
    links = ici_links(hardware, dims) if assignment is not None else 1
    ici_rate = float(links * per_link)
    seconds = wire_bytes / ici_rate
    return CommTerm(axes, group, wire_bytes, "ici", links, ici_rate, seconds, spanned)


def term_name(term: CommTerm) -> str:
    """A communication term's name: ``"communication over ('fsdp',)"``.

    A term across slices adds ``" across slices (DCN)"``.

    Example:
        >>> term_name(CommTerm(("data",), 2, 10, "dcn", 1, 1.0, 10.0))
        "communication over ('data',) across slices (DCN)"
    """
    across = " across slices (DCN)" if term.link == "dcn" else ""
    return f"communication over {term.axes}{across}"


def dcn_terms(
    hardware: Hardware,
    dcn_axes: tuple[tuple[str, int], ...],
    dcn: Mapping[tuple[str, ...], int],
) -> tuple[CommTerm, ...]:
    """The terms across slices: wire bytes over the chip's DCN bandwidth."""
    rate = hardware.dcn_bytes_per_second
    if rate is None or not dcn:
        return ()
    shares = dict(dcn_axes)
    return tuple(
        CommTerm(
            axes,
            math.prod(shares.get(a, 1) for a in axes),
            wire,
            "dcn",
            1,
            float(rate),
            wire / rate,
        )
        for axes, wire in dcn.items()
    )

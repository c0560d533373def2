"""The compilers of named topologies, found and started with no device present.

XLA:TPU comes from the ``libtpu`` package, XLA:GPU from the CUDA PJRT plugin;
:func:`topology_mesh` asks either for a named topology's compile-only devices
(``jax.experimental.topologies.get_topology_desc``) and lays a mesh onto them.
The topologies themselves are data, in ``_accelerators.topology``.
"""

import contextlib
import importlib.metadata
import importlib.util
import math
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
from jax.sharding import Mesh

from nnx_introspect._accelerators import Topology, dcn_split, resolve_topology
from nnx_introspect._text import error_line, plural
from nnx_introspect._typing import ArgumentError

__all__ = [
    "check_compiler",
    "cuda_plugin_version",
    "jaxlib_version",
    "libtpu_environment",
    "libtpu_version",
    "topology_mesh",
    "tpu_mesh",
]

_INSTALL_TPU = 'pip install "nnx-introspect[tpu]"'
_INSTALL_GPU = 'pip install "nnx-introspect[gpu]"'


def jaxlib_version() -> str:
    """The installed jaxlib's version (``"unknown"`` without its metadata).

    Example:
        >>> jaxlib_version() == importlib.metadata.version("jaxlib")
        True
    """
    try:
        return importlib.metadata.version("jaxlib")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover
        return "unknown"


def libtpu_version() -> str | None:
    """The installed libtpu's version, or ``None`` when it is not importable."""
    if importlib.util.find_spec("libtpu") is None:
        return None
    try:
        return importlib.metadata.version("libtpu")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover
        return "unknown version"


@contextlib.contextmanager
def libtpu_environment(accelerator_type: str) -> Iterator[None]:
    """Let libtpu start quietly on a machine without TPUs; restore the env after.

    ``ALLOW_MULTIPLE_LIBTPU_LOAD`` keeps libtpu from taking its process-wide
    lockfile (so other processes may load it too); the accelerator type and
    worker hostname stop it probing for a TPU VM's metadata and printing
    warnings. Only variables that are unset are set.
    """
    wanted = {
        "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
        "TPU_ACCELERATOR_TYPE": accelerator_type,
        "TPU_WORKER_HOSTNAMES": "localhost",
    }
    added = [k for k in wanted if k not in os.environ]
    for key in added:
        os.environ[key] = wanted[key]
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def cuda_plugin_version() -> str | None:
    """The installed CUDA PJRT plugin's version, or ``None`` when it is absent."""
    try:
        if importlib.util.find_spec("jax_plugins.xla_cuda12") is None:
            return None
    except ImportError:  # no jax_plugins namespace at all
        return None
    try:
        return importlib.metadata.version("jax-cuda12-plugin")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover
        return "unknown version"


def check_compiler(topology: str, mesh_axes: tuple[tuple[str, int], ...]) -> Topology:
    """The resolved target, its compiler's package checked; nothing is started.

    ``ArgumentError`` (a ``ValueError``) when the mesh does not match,
    ``ImportError`` without the compiler's package.
    """
    topo = resolve_topology(topology)
    n = math.prod(s for _, s in mesh_axes)
    has = plural(topo.devices, "GPU")
    if topo.platform == "tpu":
        has = f"{plural(topo.devices, 'chip')} (one JAX device each)"
    if n != topo.devices:
        raise ArgumentError(
            "topology",
            f"`topology` {topology!r} has {has} but `mesh` "
            f"{dict(mesh_axes)} has {plural(n, 'device')}. Make the mesh's axis sizes "
            "multiply to the device count, or pick another topology.",
        )
    if topo.platform == "tpu" and libtpu_version() is None:
        raise ImportError(
            f"`topology={topology!r}` compiles with XLA:TPU, which needs the "
            f"`libtpu` package (not installed). Install it with: {_INSTALL_TPU}"
        )
    if topo.platform == "cuda" and cuda_plugin_version() is None:
        raise ImportError(
            f"`topology={topology!r}` compiles with XLA:GPU, which needs the CUDA "
            "PJRT plugin and ptxas (`jax-cuda12-plugin`, `jax-cuda12-pjrt`, "
            f"`nvidia-cuda-nvcc-cu12`; not installed). Install them with: "
            f"{_INSTALL_GPU} (no GPU or CUDA runtime needed)."
        )
    return topo


def topology_mesh(
    topology: str, mesh_axes: tuple[tuple[str, int], ...]
) -> tuple[Mesh, str]:
    """A mesh of the target's compile-only devices, and the device order used.

    ``topologies.make_mesh`` lays the mesh onto the physical layout (ICI rings
    of a TPU slice, hosts of GPUs); when it cannot (``(32, 8)`` on a 16x16
    v5e-256), the devices are taken in plain order, and the order says so.
    """
    topo = check_compiler(topology, mesh_axes)
    from jax.experimental import topologies

    try:
        if topo.platform == "tpu":
            with libtpu_environment(topo.accelerator_type):
                desc = topologies.get_topology_desc(
                    topo.compiler_topology, "tpu", **dict(topo.options)
                )
        else:
            desc = topologies.get_topology_desc(
                platform="cuda",
                target_config=topo.target_config,
                topology=topo.compiler_topology,
            )
    except Exception as error:  # the compiler's JaxRuntimeError and friends
        compiler = (
            f"libtpu {libtpu_version()}"
            if topo.platform == "tpu"
            else f"the CUDA plugin {cuda_plugin_version()}"
        )
        hint = ""
        if "not implemented for cuda" in str(error):
            hint = (
                " (the CUDA plugin makes compile-only devices only when JAX "
                "started with JAX_PLATFORMS=cpu; pass the target, loss and "
                "optimizer by name so the step compiles in a child process that "
                "sets it)"
            )
        raise ArgumentError(
            "topology",
            f"`topology` {topology!r} (compiler topology "
            f"{topo.compiler_topology!r}) could not be created by {compiler}: "
            f"{error_line(error)}{hint}",
        ) from None
    names = tuple(a for a, _ in mesh_axes)
    sizes = tuple(s for _, s in mesh_axes)
    if topo.slices > 1:
        return _slices_mesh(topo, desc, mesh_axes)
    try:
        mesh = topologies.make_mesh(desc, sizes, names)
    except Exception as error:  # shapes the physical layout cannot follow
        layout = topo.compiler_topology.split(":")[-1]
        order = (
            f"plain device order (make_mesh could not lay {sizes} onto {layout}: "
            f"{error_line(error)[:120]})"
        )
        return Mesh(np.array(desc.devices).reshape(sizes), names), order
    return mesh, "physical (topologies.make_mesh)"


def _slices_mesh(
    topo: Topology, desc: Any, mesh_axes: tuple[tuple[str, int], ...]
) -> tuple[Mesh, str]:
    """A multi-slice target's mesh: leading axes over slices, the rest on ICI.

    ``mesh_utils.create_hybrid_device_mesh`` (MaxText's way) lays the ICI
    shape within each slice and the DCN shape across them
    (:func:`~nnx_introspect._accelerators.dcn_split`).
    """
    from jax.experimental import mesh_utils

    ici, dcn = dcn_split(topo, mesh_axes)
    names = tuple(a for a, _ in mesh_axes)
    devices = mesh_utils.create_hybrid_device_mesh(
        ici, dcn, devices=desc.devices, allow_split_physical_axes=True
    )
    crossing = ", ".join(f"{a}={d}" for a, d in zip(names, dcn, strict=True) if d > 1)
    order = (
        f"{topo.slices} slices over the data-center network ({crossing}), each "
        "axis's rest within a slice (mesh_utils.create_hybrid_device_mesh)"
    )
    return Mesh(devices, names), order


def tpu_mesh(topology: str, mesh_axes: tuple[tuple[str, int], ...]) -> Mesh:
    """The mesh of :func:`topology_mesh` alone (kept for the in-process path)."""
    return topology_mesh(topology, mesh_axes)[0]

"""Named accelerator slices (``v5e-4``...) as a table of families; their devices.

A family is one row of :data:`_FAMILIES`: its names, its device count rule (which
``N`` exist, the slice's shape, the compiler's options), the memory of one device
and the names the compiler knows it by. Adding a family is adding a row.
"""

import contextlib
import dataclasses
import importlib.metadata
import importlib.util
import math
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from jax.sharding import Mesh

from nnx_introspect._step.formats import _one_line
from nnx_introspect._typing import typechecked

_INSTALL_TPU = 'pip install "nnx-introspect[tpu]"'

_GIB = 2**30


@dataclasses.dataclass(frozen=True)
class _Topology:
    """One named slice, resolved: what the compiler needs to make its devices."""

    name: str
    compiler_topology: str
    devices: int
    options: tuple[tuple[str, Any], ...]
    accelerator_type: str


@dataclasses.dataclass(frozen=True)
class _Family:
    """One row of :data:`_FAMILIES`: the slices ``<name>-N`` of one accelerator."""

    name: str
    """The family as slice names spell it: ``v5e`` in ``v5e-4``."""
    aliases: tuple[str, ...]
    """Other spellings of ``name`` in slice names: ``v5litepod`` in ``v5litepod-4``."""
    platform: str
    """The compiler's platform: ``"tpu"`` (XLA:TPU, through ``libtpu``)."""
    compiler_family: str
    """The family in the compiler's topology name: ``v5`` in ``v5:2x2x1``."""
    accelerator_type: str
    """The family in the accelerator type the compiler is told: ``v5litepod-4``."""
    device_memory_bytes: int | None
    """High-bandwidth memory of one device (one chip), as the vendor's data sheet
    gives it (Cloud TPU's "16 GB" read as GiB), or ``None``. Not read yet."""
    slice_rule: Callable[["_Family", str, int], _Topology]
    """The device count rule: ``(family, name, N)`` to the resolved slice, or a
    ``ValueError`` saying which ``N`` the family has."""


# --- Device count rules ----------------------------------------------------------

_2D = {1: (1, 1), 4: (2, 2), 8: (2, 4), 16: (4, 4), 32: (4, 8), 64: (8, 8)}
_2D |= {128: (8, 16), 256: (16, 16)}


def _3d_shape(chips: int) -> tuple[int, int, int] | None:
    """Cloud TPU's cube shapes: 2x2x1, 2x2x2, 2x2x4, 2x4x4, 4x4x4, 4x4x8..."""
    shape = [2, 2, 1]
    order = (2, 1, 0)
    step = 0
    while math.prod(shape) < chips:
        if shape[2] == 1:
            shape[2] = 2
        else:
            shape[order[step % 3]] *= 2
            step += 1
    if math.prod(shape) != chips:
        return None
    return (shape[0], shape[1], shape[2])


def _chips_2d(family: _Family, topology: str, count: int) -> _Topology:
    """``N`` counts chips, one TensorCore each, in a 2D slice (``v5e-4`` is 2x2)."""
    dims2 = _2D.get(count)
    if dims2 is None:
        raise ValueError(
            f"`topology` {topology!r}: a {family.name} slice has one of "
            f"{sorted(_2D)} chips, got {count}."
        )
    wrap = {128: (False, True, False), 256: (True, True, False)}.get(count)
    options: dict[str, Any] = {}
    if wrap is not None:
        options = {"chips_per_host_bounds": (2, 2, 1), "num_slices": 1}
        options["wrap"] = wrap
    return _Topology(
        topology,
        f"{family.compiler_family}:{dims2[0]}x{dims2[1]}",
        count,
        tuple(options.items()),
        f"{family.accelerator_type}-{count}",
    )


def _megacores_3d(family: _Family, topology: str, count: int) -> _Topology:
    """``N`` counts TensorCores, two per chip (one device), in a 3D cube slice."""
    dims3 = _3d_shape(count // 2) if count % 2 == 0 and count >= 8 else None
    if dims3 is None or count > 8192:
        raise ValueError(
            f"`topology` {topology!r}: {family.name}-N counts TensorCores (2 per "
            f"chip); N must be 8, 16, 32, ... (a power of two up to 8192), got "
            f"{count}."
        )
    chips = count // 2
    options: dict[str, Any] = {"chip_config_name": "megacore"}
    if chips >= 64:
        options |= {
            "chips_per_host_bounds": (2, 2, 1),
            "num_slices": 1,
            "wrap": (True, True, True),
        }
    return _Topology(
        topology,
        f"{family.compiler_family}:{'x'.join(str(d) for d in dims3)}",
        chips,
        tuple(options.items()),
        f"{family.accelerator_type}-{count}",
    )


# --- The families ----------------------------------------------------------------

_FAMILIES: tuple[_Family, ...] = (
    # name, aliases, platform, compiler family, accelerator type, memory, rule
    _Family("v4", (), "tpu", "v4", "v4", 32 * _GIB, _megacores_3d),
    _Family("v5e", ("v5litepod",), "tpu", "v5e", "v5litepod", 16 * _GIB, _chips_2d),
    _Family("v5p", (), "tpu", "v5", "v5p", 95 * _GIB, _megacores_3d),
    _Family("v6e", (), "tpu", "v6e", "v6e", 32 * _GIB, _chips_2d),
)

_FAMILY_BY_SPELLING = {
    spelling: family
    for family in _FAMILIES
    for spelling in (family.name, *family.aliases)
}

_TOPOLOGY_RE = re.compile(
    f"({'|'.join(re.escape(s) for s in _FAMILY_BY_SPELLING)})-([0-9]+)"
)

TPU_FAMILIES = tuple(f.name for f in _FAMILIES if f.platform == "tpu")
"""The TPU families ``topology`` names: ``v5e-4``, ``v5p-8``, ``v6e-256``..."""


# --- Names to slices -------------------------------------------------------------


@typechecked
def parse_topology(topology: str, /) -> tuple[str, int]:
    """The libtpu topology of a Cloud TPU name, and its number of chips.

    ``v5e-N`` and ``v6e-N`` count chips (``v5e-4`` is a 2x2 slice of 4 chips);
    ``v4-N`` and ``v5p-N`` count TensorCores, two per chip (``v5p-8`` is a
    2x2x1 slice of 4 chips, one JAX device per chip), as Cloud TPU, MaxText
    and axlearn name them. ``v5litepod-N`` is accepted for ``v5e-N``.

    Args:
        topology: The name, such as ``"v5e-256"``.

    Returns:
        ``(libtpu topology name, chips)``, e.g. ``("v5e:2x2", 4)``.

    Raises:
        ValueError: If the name is not a supported TPU slice.

    Example:
        >>> parse_topology("v5e-4"), parse_topology("v5p-8"), parse_topology("v4-16")
        (('v5e:2x2', 4), ('v5:2x2x1', 4), ('v4:2x2x2', 8))
    """
    topo = _topology(topology)
    return topo.compiler_topology, topo.devices


def _topology(topology: str) -> _Topology:
    match = _TOPOLOGY_RE.fullmatch(topology.strip().lower())
    examples = "'v5e-4', 'v5e-256', 'v6e-8', 'v5p-8' (4 chips) or 'v4-16' (8 chips)"
    if match is None:
        raise ValueError(
            f"`topology` must name a Cloud TPU slice of the families "
            f"{list(TPU_FAMILIES)} such as {examples}, got {topology!r}."
        )
    family = _FAMILY_BY_SPELLING[match.group(1)]
    return family.slice_rule(family, topology, int(match.group(2)))


# --- The compiler's devices ------------------------------------------------------


def _libtpu_version() -> str | None:
    """The installed libtpu's version, or ``None`` when it is not importable."""
    if importlib.util.find_spec("libtpu") is None:
        return None
    try:
        return importlib.metadata.version("libtpu")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover
        return "unknown version"


@contextlib.contextmanager
def _libtpu_environment(accelerator_type: str) -> Iterator[None]:
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


def _tpu_mesh(topology: str, mesh_axes: tuple[tuple[str, int], ...]) -> Mesh:
    topo = _topology(topology)
    n = math.prod(s for _, s in mesh_axes)
    if n != topo.devices:
        raise ValueError(
            f"`topology` {topology!r} has {topo.devices} chip(s) (one JAX device "
            f"each) but `mesh` {dict(mesh_axes)} has {n} devices. Make the mesh's "
            "axis sizes multiply to the chip count, or pick another topology."
        )
    version = _libtpu_version()
    if version is None:
        raise ImportError(
            f"`topology={topology!r}` compiles with XLA:TPU, which needs the "
            f"`libtpu` package (not installed). Install it with: {_INSTALL_TPU}"
        )
    from jax.experimental import topologies

    try:
        with _libtpu_environment(topo.accelerator_type):
            desc = topologies.get_topology_desc(
                topo.compiler_topology, "tpu", **dict(topo.options)
            )
    except Exception as error:  # libtpu's JaxRuntimeError and friends
        raise ValueError(
            f"`topology` {topology!r} (libtpu topology "
            f"{topo.compiler_topology!r}) could not be created by libtpu "
            f"{version}: {_one_line(error)}"
        ) from None
    names = tuple(a for a, _ in mesh_axes)
    sizes = tuple(s for _, s in mesh_axes)
    try:
        return topologies.make_mesh(desc, sizes, names)
    except Exception:  # shapes the physical layout cannot follow: plain order
        return Mesh(np.array(desc.devices).reshape(sizes), names)

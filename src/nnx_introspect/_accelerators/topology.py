"""Named accelerator targets (``v5e-4``, ``h100-8``...) as a table of families.

A family is one row of :data:`_FAMILIES`: its names, its device count rule (which
``N`` exist, the slice's shape, the compiler's options), the memory of one device
and the names the compiler knows it by; an NVIDIA family also carries the figures
of XLA:GPU's target config (:class:`_GpuSpec`), rendered here as the
``GpuTargetConfig`` text proto the CUDA plugin compiles against. Adding a family
is adding a row.
"""

import dataclasses
import json
import math
import re
from collections.abc import Callable
from typing import Any

from nnx_introspect._typing import ArgumentError, typechecked

__all__ = [
    "FAMILY_BY_SPELLING",
    "GPU_FAMILIES",
    "TOPOLOGY_RE",
    "TPU_FAMILIES",
    "Topology",
    "dcn_split",
    "parse_topology",
    "resolve_topology",
    "slice_of",
    "topology_of_devices",
]

_MAX_COUNT_DIGITS = 6
"""A device count longer than this is refused before ``int()`` reads it."""

_GIB = 2**30


@dataclasses.dataclass(frozen=True)
class Topology:
    """One named slice, resolved: what the compiler needs to make its devices."""

    name: str
    compiler_topology: str
    devices: int
    options: tuple[tuple[str, Any], ...]
    accelerator_type: str
    platform: str = "tpu"
    device_memory_bytes: int | None = None
    target_config: str | None = None
    """XLA:GPU's ``GpuTargetConfig`` text proto (``None`` for a TPU)."""
    available_bytes: int | None = None
    """On a TPU: the HBM XLA:TPU lets one chip's program use (see
    :attr:`_Family.hbm_available_bytes`)."""
    slices: int = 1
    """TPU slices joined by the data-center network (``2xv5e-256``: 2), each
    of ``devices // slices`` devices; the compiler's ``num_slices``."""


@dataclasses.dataclass(frozen=True)
class _GpuSpec:
    """The figures of one NVIDIA GPU that XLA:GPU's cost and tiling models read.

    Field names follow XLA's ``stream_executor.GpuDeviceInfoProto``; see
    :func:`_gpu_target_config` for how they become the compiler's config.
    """

    device_name: str
    """``device_description_str``: what ``device_kind`` reports."""
    compute_capability: tuple[int, int]
    core_count: int
    """Streaming multiprocessors."""
    fpus_per_core: int
    memory_bandwidth: int
    """Bytes per second."""
    l2_cache_size: int
    clock_rate_ghz: float
    shared_memory_per_core: int
    shared_memory_per_block_optin: int
    dnn_version: tuple[int, int]
    """The cuDNN version the config claims (XLA's published spec's)."""


@dataclasses.dataclass(frozen=True)
class _Family:
    """One row of :data:`_FAMILIES`: the slices ``<name>-N`` of one accelerator."""

    name: str
    """The family as slice names spell it: ``v5e`` in ``v5e-4``."""
    aliases: tuple[str, ...]
    """Other spellings of ``name`` in slice names: ``v5litepod`` in ``v5litepod-4``."""
    platform: str
    """The compiler's platform: ``"tpu"`` (XLA:TPU, through ``libtpu``) or
    ``"cuda"`` (XLA:GPU, through the CUDA PJRT plugin)."""
    compiler_family: str
    """The family in the compiler's topology name: ``v5`` in ``v5:2x2x1``."""
    accelerator_type: str
    """The family in the accelerator type the compiler is told: ``v5litepod-4``."""
    device_memory_bytes: int | None
    """High-bandwidth memory of one device (one chip, one GPU): Cloud TPU's data
    sheet ("16 GB" read as GiB), or the ``device_memory_size`` XLA's published
    GPU spec gives (what CUDA reports). The report's default budget."""
    slice_rule: Callable[["_Family", str, int], Topology]
    """The device count rule: ``(family, name, N)`` to the resolved slice, or a
    ``ValueError`` saying which ``N`` the family has."""
    gpu: _GpuSpec | None = None
    """XLA:GPU's target figures, for a ``"cuda"`` family."""
    hbm_available_bytes: int | None = None
    """On a TPU: the HBM XLA:TPU lets a program use, as libtpu 0.0.52 states it
    in its ``CompileTimeHbmOom`` message ("exceeds available HBM (15.75G)" on a
    v5e, two decimals of GiB; measured here by compiling a 400 GiB program).
    The rest of the chip's HBM is reserved for the TPU runtime and is in none
    of ``memory_analysis()``'s figures (XLA's error E1000 page: "Reserved space
    for the XLA Runtime")."""
    device_kinds: tuple[str, ...] = ()
    """What JAX's ``device.device_kind`` says of one device of the family
    (``"TPU v5 lite"`` on a v5e chip, as seen on one); a GPU family's is its
    :attr:`_GpuSpec.device_name`."""


# --- Device count rules ----------------------------------------------------------

_2D = {1: (1, 1), 2: (1, 2), 4: (2, 2), 8: (2, 4), 16: (4, 4), 32: (4, 8), 64: (8, 8)}
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


def _chips_2d(family: _Family, topology: str, count: int) -> Topology:
    """``N`` counts chips, one TensorCore each, in a 2D slice (``v5e-4`` is 2x2)."""
    dims2 = _2D.get(count)
    if dims2 is None:
        raise ArgumentError(
            "topology",
            f"`topology` {topology!r}: a {family.name} slice has one of "
            f"{sorted(_2D)} chips, got {count}.",
        )
    wrap = {128: (False, True, False), 256: (True, True, False)}.get(count)
    options: dict[str, Any] = {}
    if wrap is not None:
        options = {"chips_per_host_bounds": (2, 2, 1), "num_slices": 1}
        options["wrap"] = wrap
    elif count < 4:  # a sub-host slice is its own host (libtpu 0.0.42's default
        # host bounds, 2x2x1, do not divide a 1x1 or 1x2 layout)
        options = {"chips_per_host_bounds": (*dims2, 1), "num_slices": 1}
    return Topology(
        topology,
        f"{family.compiler_family}:{dims2[0]}x{dims2[1]}",
        count,
        tuple(options.items()),
        f"{family.accelerator_type}-{count}",
        "tpu",
        family.device_memory_bytes,
        available_bytes=family.hbm_available_bytes,
    )


def _megacores_3d(family: _Family, topology: str, count: int) -> Topology:
    """``N`` counts TensorCores, two per chip (one device), in a 3D cube slice."""
    dims3 = _3d_shape(count // 2) if count % 2 == 0 and count >= 8 else None
    if dims3 is None or count > 8192:
        raise ArgumentError(
            "topology",
            f"`topology` {topology!r}: {family.name}-N counts TensorCores (2 per "
            f"chip); N must be 8, 16, 32, ... (a power of two up to 8192), got "
            f"{count}.",
        )
    chips = count // 2
    options: dict[str, Any] = {"chip_config_name": "megacore"}
    if chips >= 64:
        options |= {
            "chips_per_host_bounds": (2, 2, 1),
            "num_slices": 1,
            "wrap": (True, True, True),
        }
    return Topology(
        topology,
        f"{family.compiler_family}:{'x'.join(str(d) for d in dims3)}",
        chips,
        tuple(options.items()),
        f"{family.accelerator_type}-{count}",
        "tpu",
        family.device_memory_bytes,
        available_bytes=family.hbm_available_bytes,
    )


_GPUS_PER_HOST = 8
_MAX_GPUS = 16384


def _gpu_hosts(family: _Family, topology: str, count: int) -> Topology:
    """``N`` counts GPUs: one host of 1, 2, 4 or 8, or ``N / 8`` hosts of 8."""
    one_host = count in (1, 2, 4, _GPUS_PER_HOST)
    if not one_host and (count % _GPUS_PER_HOST or not 0 < count <= _MAX_GPUS):
        raise ArgumentError(
            "topology",
            f"`topology` {topology!r}: {family.name}-N counts GPUs: one host of 1, "
            f"2, 4 or 8, or hosts of 8 (N a multiple of 8 up to {_MAX_GPUS}), got "
            f"{count}.",
        )
    hosts, per_host = (1, count) if one_host else (count // 8, _GPUS_PER_HOST)
    if family.gpu is None:  # pragma: no cover - the table's invariant
        raise AssertionError(f"GPU family {family.name} has no target figures")
    return Topology(
        topology,
        f"1x{hosts}x{per_host}",
        count,
        (),
        family.gpu.device_name,
        "cuda",
        family.device_memory_bytes,
        _gpu_target_config(family.gpu, family.device_memory_bytes),
    )


def _gpu_target_config(gpu: _GpuSpec, memory: int | None) -> str:
    """The ``GpuTargetConfig`` text proto XLA:GPU compiles against, from a row.

    The fixed limits (threads, blocks, registers, 48 KiB of shared memory per
    block without opt-in) are the same on every CUDA GPU since compute
    capability 7.0 (NVIDIA's CUDA C++ Programming Guide, "Technical
    Specifications per Compute Capability").
    """
    major, minor = gpu.compute_capability
    dnn_major, dnn_minor = gpu.dnn_version
    info = {
        "threads_per_block_limit": 1024,
        "threads_per_warp": 32,
        "shared_memory_per_block": 49152,
        "shared_memory_per_core": gpu.shared_memory_per_core,
        "threads_per_core_limit": 2048,
        "core_count": gpu.core_count,
        "fpus_per_core": gpu.fpus_per_core,
        "block_dim_limit_x": 2**31 - 1,
        "block_dim_limit_y": 65535,
        "block_dim_limit_z": 65535,
        "memory_bandwidth": gpu.memory_bandwidth,
        "l2_cache_size": gpu.l2_cache_size,
        "clock_rate_ghz": gpu.clock_rate_ghz,
        "device_memory_size": memory,
        "shared_memory_per_block_optin": gpu.shared_memory_per_block_optin,
        "registers_per_core_limit": 65536,
        "registers_per_block_limit": 65536,
        "thread_dim_limit_x": 1024,
        "thread_dim_limit_y": 1024,
        "thread_dim_limit_z": 64,
    }
    fields = " ".join(f"{k}: {v}" for k, v in info.items())
    return (
        f"gpu_device_info {{ {fields} cuda_compute_capability {{ major: {major} "
        f'minor: {minor} }} }} platform_name: "CUDA" dnn_version_info {{ major: '
        f"{dnn_major} minor: {dnn_minor} }} device_description_str: "
        f"{json.dumps(gpu.device_name)}"
    )


# XLA:GPU's figures for each NVIDIA family, from NVIDIA's data sheets (A100
# "NVIDIA A100 Tensor Core GPU" 80GB SXM, H100 SXM5 80GB, H200 SXM 141GB, HGX
# B200) and XLA's published target specs, which record what CUDA reports on each
# (openxla/xla: xla/backends/gpu/target_config/specs/a100_sxm_80.txtpb,
# h100_sxm.txtpb, h200.txtpb, b200.txtpb): SM count, FP32 lanes per SM, memory
# bandwidth (B/s), L2 bytes, boost clock, shared memory per SM and per block
# (opt-in), device memory as CUDA reports it (bytes).
_A100 = _GpuSpec(
    "NVIDIA A100-SXM4-80GB",
    (8, 0),
    108,
    64,
    2_039_040_000_000,
    41_943_040,
    1.41,
    167_936,
    166_912,
    (8, 9),
)
_H100 = _GpuSpec(
    "NVIDIA H100 80GB HBM3",
    (9, 0),
    132,
    128,
    3_352_320_000_000,
    52_428_800,
    1.98,
    233_472,
    232_448,
    (9, 10),
)
_H200 = _GpuSpec(
    "NVIDIA H200 141GB HBM3e",
    (9, 0),
    132,
    128,
    4_800_000_000_000,
    52_428_800,
    1.98,
    233_472,
    232_448,
    (9, 10),
)
_B200 = _GpuSpec(
    "NVIDIA B200",
    (10, 0),
    148,
    128,
    7_672_320_000_000,
    132_644_864,
    1.965,
    233_472,
    232_448,
    (9, 7),
)


# --- The families ----------------------------------------------------------------

_FAMILIES: tuple[_Family, ...] = (
    # name, aliases, platform, compiler family, accelerator type, memory, rule
    _Family(
        "v4",
        (),
        "tpu",
        "v4",
        "v4",
        32 * _GIB,
        _megacores_3d,
        hbm_available_bytes=round(30.75 * _GIB),
        device_kinds=("TPU v4",),
    ),
    _Family(
        "v5e",
        ("v5litepod",),
        "tpu",
        "v5e",
        "v5litepod",
        16 * _GIB,
        _chips_2d,
        hbm_available_bytes=round(15.75 * _GIB),
        device_kinds=("TPU v5 lite", "TPU v5e"),
    ),
    _Family(
        "v5p",
        (),
        "tpu",
        "v5",
        "v5p",
        95 * _GIB,
        _megacores_3d,
        hbm_available_bytes=round(95.73 * _GIB),
        device_kinds=("TPU v5", "TPU v5p"),
    ),
    _Family(
        "v6e",
        (),
        "tpu",
        "v6e",
        "v6e",
        32 * _GIB,
        _chips_2d,
        hbm_available_bytes=round(31.24 * _GIB),
        device_kinds=("TPU v6 lite", "TPU v6e"),
    ),
    _Family("a100", (), "cuda", "", "", 85_100_068_864, _gpu_hosts, _A100),
    _Family("h100", (), "cuda", "", "", 84_942_979_072, _gpu_hosts, _H100),
    _Family("h200", (), "cuda", "", "", 151_397_597_184, _gpu_hosts, _H200),
    _Family("b200", (), "cuda", "", "", 191_514_411_008, _gpu_hosts, _B200),
)

FAMILY_BY_SPELLING = {
    spelling: family
    for family in _FAMILIES
    for spelling in (family.name, *family.aliases)
}

TOPOLOGY_RE = re.compile(
    f"(?:([0-9]+)x)?({'|'.join(re.escape(s) for s in FAMILY_BY_SPELLING)})-([0-9]+)"
)
"""A target name: ``[<slices>x]<family>-<devices>`` (``v5e-256``, ``2xv5e-256``)."""

_MAX_SLICES = 64
"""The most slices a multi-slice target may name (MaxText's published tables
go to 32 slices of ``v5e-256``)."""

TPU_FAMILIES = tuple(f.name for f in _FAMILIES if f.platform == "tpu")
"""The TPU families ``topology`` names: ``v5e-4``, ``v5p-8``, ``v6e-256``..."""

GPU_FAMILIES = tuple(f.name for f in _FAMILIES if f.platform == "cuda")
"""The NVIDIA families ``topology`` names: ``h100-8``, ``a100-16``, ``b200-64``..."""


# --- Names to slices -------------------------------------------------------------


@typechecked
def parse_topology(topology: str, /) -> tuple[str, int]:
    """The compiler's topology of a named target, and its number of devices.

    ``v5e-N`` and ``v6e-N`` count chips (``v5e-4`` is a 2x2 slice of 4 chips);
    ``v4-N`` and ``v5p-N`` count TensorCores, two per chip (``v5p-8`` is a
    2x2x1 slice of 4 chips, one JAX device per chip), as Cloud TPU, MaxText
    and axlearn name them. ``v5litepod-N`` is accepted for ``v5e-N``.
    ``a100-N``, ``h100-N``, ``h200-N`` and ``b200-N`` count NVIDIA GPUs: one
    host of 1, 2, 4 or 8, or ``N / 8`` hosts of 8 (the CUDA plugin's
    ``"1x<hosts>x<gpus per host>"``). ``<S>x<slice>`` names ``S`` TPU
    slices joined by the data-center network (``2xv5e-256``: 512 chips), as
    MaxText's ``compile_topology_num_slices`` does; the compiler topology is
    one slice's.

    Args:
        topology: The name, such as ``"v5e-256"`` or ``"h100-64"``.

    Returns:
        ``(compiler topology name, devices)``, e.g. ``("v5e:2x2", 4)``.

    Raises:
        ValueError: If the name is not a supported TPU slice or GPU target.

    Example:
        >>> parse_topology("v5e-4"), parse_topology("v5p-8"), parse_topology("v4-16")
        (('v5e:2x2', 4), ('v5:2x2x1', 4), ('v4:2x2x2', 8))
        >>> parse_topology("h100-8"), parse_topology("h100-2048")
        (('1x1x8', 8), ('1x256x8', 2048))
        >>> parse_topology("2xv5e-256")
        ('v5e:16x16', 512)
    """
    topo = resolve_topology(topology)
    return topo.compiler_topology, topo.devices


def resolve_topology(topology: str) -> Topology:
    match = TOPOLOGY_RE.fullmatch(topology.strip().lower())
    examples = "'v5e-4', 'v5e-256', 'v6e-8', 'v5p-8' (4 chips) or 'v4-16' (8 chips)"
    if match is None:
        shown = topology if len(topology) <= 60 else topology[:57] + "..."
        raise ArgumentError(
            "topology",
            f"`topology` must name a Cloud TPU slice of the families "
            f"{list(TPU_FAMILIES)} such as {examples}, several slices such as "
            f"'2xv5e-256', or NVIDIA GPUs of the families {list(GPU_FAMILIES)} "
            f"such as 'h100-8' or 'a100-64', got {shown!r}.",
        )
    family = FAMILY_BY_SPELLING[match.group(2)]
    digits = match.group(3).lstrip("0") or "0"
    if len(digits) > _MAX_COUNT_DIGITS:
        raise ArgumentError(
            "topology",
            f"`topology` {match.group(2)}-N: the device count N has {len(digits)} "
            f"digits; no {family.name} target has more than "
            f"{10**_MAX_COUNT_DIGITS - 1} devices. Pass a count such as "
            f"'{family.name}-8'.",
        )
    if match.group(1) is None:
        return family.slice_rule(family, topology, int(digits))
    one = f"{family.name}-{int(digits)}"
    return _slices(family, topology, one, match.group(1))


def _slices(family: _Family, topology: str, one: str, count: str) -> Topology:
    """``count`` slices ``one`` joined by the data-center network."""
    slices = int(count.lstrip("0") or "0") if len(count) <= 3 else _MAX_SLICES + 1
    if family.platform != "tpu":
        raise ArgumentError(
            "topology",
            f"`topology` {topology!r}: several slices joined by the data-center "
            f"network are a TPU target; name {family.name} GPUs as one "
            f"'{family.name}-N' (N = {family.name} GPUs in all, 8 a host).",
        )
    if not 1 <= slices <= _MAX_SLICES:
        raise ArgumentError(
            "topology",
            f"`topology` {topology!r}: the number of slices must be 1 to "
            f"{_MAX_SLICES}, got {count!r}. Pass e.g. '2x{one}'.",
        )
    single = family.slice_rule(family, one, int(one.rsplit("-", 1)[1]))
    options = dict(single.options) | {"num_slices": slices}
    return dataclasses.replace(
        single,
        name=topology,
        devices=single.devices * slices,
        options=tuple(options.items()),
        slices=slices,
    )


def dcn_split(
    topology: Topology, mesh_axes: tuple[tuple[str, int], ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """How a mesh lies over a multi-slice target: ``(ici shape, dcn shape)``.

    As MaxText's ``dcn_*_parallelism`` does, the outer (leading) axes cross the
    slices: each axis, from the first, takes the largest share of the slices
    still to place that divides it (its DCN factor), and the rest of it runs
    within a slice (its ICI factor). ``data=2,fsdp=256`` on ``2xv5e-256``: the
    ``data`` groups cross the data-center network, ``fsdp`` stays on ICI. One
    slice: every axis is ICI.

    Raises:
        ArgumentError: If the axes cannot hold the slices (naming ``mesh``).

    Example:
        >>> two = resolve_topology("2xv5e-256")
        >>> dcn_split(two, (("data", 2), ("fsdp", 256)))
        ((1, 256), (2, 1))
        >>> dcn_split(resolve_topology("4xv5e-4"), (("data", 8), ("tp", 2)))
        ((2, 2), (4, 1))
    """
    left = topology.slices
    ici: list[int] = []
    dcn: list[int] = []
    for _, size in mesh_axes:
        share = math.gcd(size, left)
        dcn.append(share)
        ici.append(size // share)
        left //= share
    if left != 1:
        raise ArgumentError(
            "mesh",
            f"`mesh` {dict(mesh_axes)} cannot lie over the {topology.slices} slices "
            f"of {topology.name!r}: the slices go to the leading axes (each takes "
            "the share of the slices that divides it), and these axes leave "
            f"{left} unplaced. Lead with an axis over the slices, e.g. "
            f"'data={topology.slices},...'.",
        )
    return tuple(ici), tuple(dcn)


def topology_of_devices(device_kind: str, count: int) -> str | None:
    """The target name of ``count`` present devices of ``device_kind``, if known.

    The name a report uses for the hardware's figures when it runs on the
    devices themselves: ``"v5e-1"`` for one ``"TPU v5 lite"``; ``None`` for a
    CPU or a kind no family lists, or a count no slice of the family has.

    Example:
        >>> topology_of_devices("TPU v5 lite", 1), topology_of_devices("TPU v5", 4)
        ('v5e-1', 'v5p-8')
        >>> h100 = "NVIDIA H100 80GB HBM3"
        >>> topology_of_devices(h100, 8), topology_of_devices("cpu", 8)
        ('h100-8', None)
    """
    for family in _FAMILIES:
        kinds = family.device_kinds or ((family.gpu.device_name,) if family.gpu else ())
        if device_kind not in kinds:
            continue
        # megacore families count TensorCores, two per chip (one device each)
        n = count * 2 if family.slice_rule is _megacores_3d else count
        name = f"{family.name}-{n}"
        try:
            resolve_topology(name)
        except ArgumentError:
            return None
        return name
    return None


def slice_of(topology: str, devices: int) -> str:
    """The name of a slice of ``devices`` devices of ``topology``'s family.

    A TPU family that counts TensorCores (``v4``, ``v5p``) names two per chip.

    Raises:
        ArgumentError: If the family has no slice of that many devices
            (``v5e-3``), naming ``topology``.

    Example:
        >>> slice_of("v5e-8", 4), slice_of("v5p-16", 4), slice_of("h100-8", 2)
        ('v5e-4', 'v5p-8', 'h100-2')
    """
    family = resolve_family(topology)
    n = devices * 2 if family.slice_rule is _megacores_3d else devices
    name = f"{family.name}-{n}"
    resolve_topology(name)
    return name


def resolve_family(topology: str) -> _Family:
    """The family of a topology name (checked as :func:`resolve_topology` does)."""
    resolve_topology(topology)
    match = TOPOLOGY_RE.fullmatch(topology.strip().lower())
    assert match is not None  # resolve_topology refused any other name
    return FAMILY_BY_SPELLING[match.group(2)]

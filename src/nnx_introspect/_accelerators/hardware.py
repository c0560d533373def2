"""Accelerator figures as data: what one device computes and moves per second.

One row of :data:`_CHIPS` per family of :mod:`~nnx_introspect._accelerators.topology`
(``v4``, ``v5e``, ``v5p``, ``v6e``, ``a100``, ``h100``, ``h200``, ``b200``):
the dense peak FLOP/s of one device per dtype, its HBM bandwidth and its links,
each figure with the page it comes from. :func:`hardware_for` resolves a named
target (``"v5e-256"``, ``"h100-64"``) to a :class:`Hardware`: the row plus the
slice's interconnect (a TPU slice's torus dimensions and wraparound, a GPU
target's hosts).

What the dtypes mean, the same on every family:

* ``"bf16"``, ``"fp8"``, ``"int8"``: dense (not 2:4-sparse) tensor-core / MXU
  peaks. NVIDIA's sheets print the sparse figure for these; the table halves it.
* ``"f32"``: an f32 matmul at JAX's *default* precision, which XLA runs on
  TF32 tensor cores on Ampere and later GPUs and as one bf16 MXU pass on TPUs
  (JAX docs, "Matmul precision"): the sheet's dense TF32 figure on a GPU, the
  bf16 figure on a TPU.
* ``"f32_highest"``: an f32 matmul at ``Precision.HIGHEST``: a GPU's FP32
  CUDA-core (non-tensor) figure; on a TPU six bf16 passes (XLA's
  ``BF16_BF16_F32_X6``), so the bf16 figure / 6, derived, on no data sheet.

What a report calls each peak (:meth:`Hardware.peak_name`): ``"f32"`` is
``"TF32"`` on a GPU (no f32 matmul runs at an FP32 rate there by default) and
``"f32_highest"`` ``"FP32 (CUDA cores)"``; on a TPU both are bf16 MXU passes,
and named so.

Bandwidths are bytes per second in one direction. The sheets print NVLink and
ICI bidirectional totals; the table halves them (and divides ICI by the chip's
ports). NICs are quoted in bits per second per direction; the table divides by
8.
"""

import dataclasses
from typing import Any

from nnx_introspect._accelerators.topology import (
    FAMILY_BY_SPELLING,
    TOPOLOGY_RE,
    resolve_topology,
)
from nnx_introspect._typing import ArgumentError, short_repr, typechecked

__all__ = [
    "DTYPES",
    "DTYPE_ALIASES",
    "HOST_LINKS",
    "NETWORK_OVERRIDE",
    "Hardware",
    "hardware_for",
    "host_link",
]

_TERA = 10**12
_GIGA = 10**9

DTYPES = ("bf16", "fp8", "int8", "f32", "f32_highest")
"""The dtypes a :class:`Hardware` may carry a peak for (see the module's text)."""

DTYPE_ALIASES = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp8": "fp8",
    "f8": "fp8",
    "float8": "fp8",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "e4m3": "fp8",
    "e5m2": "fp8",
    "int8": "int8",
    "i8": "int8",
    "s8": "int8",
    "f32": "f32",
    "fp32": "f32",
    "float32": "f32",
    "f32_highest": "f32_highest",
}


@dataclasses.dataclass(frozen=True)
class _Figure:
    """One number and the page (and arithmetic) it comes from."""

    value: float
    source: str


@dataclasses.dataclass(frozen=True)
class _Chip:
    """One row of :data:`_CHIPS`: a device's figures, each with its source."""

    device_name: str
    peaks: tuple[tuple[str, _Figure], ...]
    """``(dtype, dense FLOP/s of one device)`` for the dtypes the chip has."""
    hbm: _Figure
    """HBM bandwidth of one device, bytes/s."""
    ici_link: _Figure | None = None
    """TPU: one ICI link, one direction, bytes/s."""
    nvlink: _Figure | None = None
    """GPU: one GPU's NVLink bandwidth within a host, one direction, bytes/s."""
    network: _Figure | None = None
    """GPU: the default network bandwidth per GPU between hosts, one direction."""
    dcn: _Figure | None = None
    """TPU: the data-center network's bandwidth per chip between slices."""


# The names of the peaks where the dtype alone would mislead (see the module's text).
_PEAK_NAMES = {
    "cuda": {"f32": "TF32", "f32_highest": "FP32 (CUDA cores)"},
    "tpu": {
        "f32": "bf16 (one MXU pass per f32 matmul)",
        "f32_highest": "bf16 / 6 (six MXU passes per f32 matmul)",
    },
}

# --- Sources ---------------------------------------------------------------------

_A100 = "NVIDIA A100 Tensor Core GPU data sheet, A100 80GB SXM column"
_H100 = "NVIDIA H100 Tensor Core GPU data sheet, H100 SXM column"
_H200 = "NVIDIA H200 Tensor Core GPU data sheet, H200 SXM column"
_B200 = "NVIDIA HGX B200 specifications, per-GPU (HGX B200) column"
_SPARSE = "; the sheet prints it with 2:4 sparsity, dense is half"
_TF32 = (
    ": the dense TF32 Tensor Core figure, what an f32 matmul gets at JAX's "
    "default precision on Ampere and later (JAX docs, 'Matmul precision')"
)
_FP32 = ": FP32 on CUDA cores (non-tensor), what Precision.HIGHEST gets"
_NVLINK = ": NVLink per GPU, a bidirectional total; one direction is half"

_V4 = "Cloud TPU docs, TPU v4 system architecture (cloud.google.com/tpu/docs/v4)"
_V5E = "Cloud TPU docs, TPU v5e system architecture (cloud.google.com/tpu/docs/v5e)"
_V5P = "Cloud TPU docs, TPU v5p system architecture (cloud.google.com/tpu/docs/v5p)"
_V6E = "Cloud TPU docs, TPU v6e system architecture (cloud.google.com/tpu/docs/v6e)"
_TPU_F32 = (
    "an f32 matmul at JAX's default precision is one bf16 MXU pass on a TPU "
    "(JAX docs, 'Matmul precision'): the bf16 figure of "
)
_TPU_F32_HIGHEST = (
    "derived, on no data sheet: Precision.HIGHEST computes an f32 matmul as six "
    "bf16 MXU passes (XLA's BF16_BF16_F32_X6), so the bf16 figure / 6 of "
)


def _tpu_peaks(
    bf16: float, page: str, *, int8: float | None = None, fp8: float | None = None
) -> tuple[tuple[str, _Figure], ...]:
    """A TPU's peaks: bf16 (and int8, fp8) as printed; f32 and f32_highest derived."""
    peaks = [("bf16", _Figure(bf16, f"{page}: peak compute per chip (bf16)"))]
    if fp8 is not None:
        peaks.append(("fp8", _Figure(fp8, f"{page}: peak compute per chip (FP8)")))
    if int8 is not None:
        peaks.append(("int8", _Figure(int8, f"{page}: peak compute per chip (Int8)")))
    peaks.append(("f32", _Figure(bf16, _TPU_F32 + page)))
    peaks.append(("f32_highest", _Figure(bf16 / 6, _TPU_F32_HIGHEST + page)))
    return tuple(peaks)


def _gpu_peaks(
    sheet: str, *, bf16: float, tf32: float, fp32: float, int8: float, fp8: float | None
) -> tuple[tuple[str, _Figure], ...]:
    """A GPU's dense peaks from its sheet's sparse tensor figures and FP32."""
    peaks = [("bf16", _Figure(bf16 / 2, f"{sheet}: BF16 Tensor Core{_SPARSE}"))]
    if fp8 is not None:
        peaks.append(("fp8", _Figure(fp8 / 2, f"{sheet}: FP8 Tensor Core{_SPARSE}")))
    peaks.append(("int8", _Figure(int8 / 2, f"{sheet}: INT8 Tensor Core{_SPARSE}")))
    peaks.append(("f32", _Figure(tf32 / 2, f"{sheet}{_TF32}{_SPARSE}")))
    peaks.append(("f32_highest", _Figure(fp32, f"{sheet}{_FP32}")))
    return tuple(peaks)


NETWORK_OVERRIDE = "(override with `network_bytes_per_second`)"
"""How a step report's network rate is overridden; a serving report has no such
argument and leaves it out of its notes."""


def _nic(gbit: int, system: str) -> _Figure:
    """A per-GPU NIC of ``gbit`` Gb/s per direction, as bytes/s."""
    return _Figure(
        gbit * _GIGA // 8,
        f"{system}: one {gbit} Gb/s NIC per GPU, {gbit}/8 GB/s per direction "
        + NETWORK_OVERRIDE,
    )


# --- The table -------------------------------------------------------------------

_CHIPS: dict[str, _Chip] = {
    "v4": _Chip(
        "TPU v4 chip (2 TensorCores as one megacore device)",
        _tpu_peaks(275 * _TERA, _V4, int8=275 * _TERA),
        _Figure(1200 * _GIGA, f"{_V4}: HBM2 bandwidth 1200 GBps"),
        ici_link=_Figure(
            45 * _GIGA,
            f"derived from {_V4}: all-reduce bandwidth per Pod 1.1 PB/s / 4096 "
            "chips / 6 links = 44.8 GB/s, rounded to 45 GB/s (the page gives no "
            "per-link figure; the same arithmetic gives v5e's and v6e's per-link "
            "figures exactly)",
        ),
    ),
    "v5e": _Chip(
        "TPU v5e chip",
        _tpu_peaks(197 * _TERA, _V5E, int8=393 * _TERA),
        _Figure(819 * _GIGA, f"{_V5E}: HBM bandwidth per chip 819 GBps"),
        ici_link=_Figure(
            50 * _GIGA,
            f"{_V5E}: bidirectional ICI bandwidth per chip 400 GBps over 4 ICI "
            "ports: 100 GB/s per link both ways, 50 GB/s one way",
        ),
        dcn=_Figure(
            3_125_000_000,
            f"{_V5E}: data center network bandwidth per Pod 6.4 Tbps over its 256 "
            "chips = 25 Gbps = 3.125 GB/s per chip (the same as its per-host NIC "
            "configuration, 2 x 100 Gbps over 8 chips)",
        ),
    ),
    "v5p": _Chip(
        "TPU v5p chip (2 TensorCores as one megacore device)",
        _tpu_peaks(459 * _TERA, _V5P, fp8=459 * _TERA),
        _Figure(2765 * _GIGA, f"{_V5P}: HBM bandwidth per chip 2765 GBps"),
        ici_link=_Figure(
            100 * _GIGA,
            f"{_V5P}: bidirectional ICI bandwidth per chip 1200 GBps over the 6 "
            "links of a 3D torus: 200 GB/s per link both ways, 100 GB/s one way",
        ),
        dcn=_Figure(
            6_250_000_000,
            f"{_V5P}: data center network (DCN) bandwidth per chip 50 Gbps = 6.25 GB/s",
        ),
    ),
    "v6e": _Chip(
        "TPU v6e (Trillium) chip",
        _tpu_peaks(918 * _TERA, _V6E, int8=1836 * _TERA),
        _Figure(1640 * _GIGA, f"{_V6E}: HBM bandwidth per chip 1640 GBps"),
        ici_link=_Figure(
            100 * _GIGA,
            f"{_V6E}: bidirectional ICI bandwidth per chip 800 GBps over 4 ICI "
            "ports: 200 GB/s per link both ways, 100 GB/s one way",
        ),
    ),
    "a100": _Chip(
        "NVIDIA A100 80GB SXM",
        _gpu_peaks(
            _A100,
            bf16=624 * _TERA,
            tf32=312 * _TERA,
            fp32=19.5 * _TERA,
            int8=1248 * _TERA,
            fp8=None,
        ),
        _Figure(2039 * _GIGA, f"{_A100}: GPU memory bandwidth 2,039 GB/s"),
        nvlink=_Figure(300 * _GIGA, f"{_A100}{_NVLINK} of 600 GB/s"),
        network=_nic(200, "NVIDIA DGX A100 data sheet (ConnectX-6 HDR InfiniBand)"),
    ),
    "h100": _Chip(
        "NVIDIA H100 SXM5 80GB",
        _gpu_peaks(
            _H100,
            bf16=1979 * _TERA,
            tf32=989 * _TERA,
            fp32=67 * _TERA,
            int8=3958 * _TERA,
            fp8=3958 * _TERA,
        ),
        _Figure(3350 * _GIGA, f"{_H100}: GPU memory bandwidth 3.35 TB/s"),
        nvlink=_Figure(450 * _GIGA, f"{_H100}{_NVLINK} of 900 GB/s"),
        network=_nic(400, "NVIDIA DGX H100 data sheet (ConnectX-7 NDR InfiniBand)"),
    ),
    "h200": _Chip(
        "NVIDIA H200 SXM 141GB",
        _gpu_peaks(
            _H200,
            bf16=1979 * _TERA,
            tf32=989 * _TERA,
            fp32=67 * _TERA,
            int8=3958 * _TERA,
            fp8=3958 * _TERA,
        ),
        _Figure(4800 * _GIGA, f"{_H200}: GPU memory bandwidth 4.8 TB/s"),
        nvlink=_Figure(450 * _GIGA, f"{_H200}{_NVLINK} of 900 GB/s"),
        network=_nic(400, "NVIDIA DGX H200 data sheet (ConnectX-7 NDR InfiniBand)"),
    ),
    "b200": _Chip(
        "NVIDIA B200 (HGX B200)",
        _gpu_peaks(
            _B200,
            bf16=4500 * _TERA,
            tf32=2200 * _TERA,
            fp32=75 * _TERA,
            int8=9000 * _TERA,
            fp8=9000 * _TERA,
        ),
        _Figure(7700 * _GIGA, f"{_B200}: GPU memory bandwidth 7.7 TB/s"),
        nvlink=_Figure(900 * _GIGA, f"{_B200}{_NVLINK} of 1.8 TB/s"),
        network=_nic(400, "NVIDIA DGX B200 data sheet (ConnectX-7 VPI)"),
    ),
}


# --- The resolved target ---------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Hardware:
    """The figures of one named target: its devices, their peaks and links.

    Every figure is a data-sheet peak (sources in :attr:`sources`), per device,
    bandwidths in bytes per second in one direction. A TPU slice carries its
    torus (dimensions and wraparound, as the compiler is told them); a GPU
    target its hosts, NVLink within one and the network between them.

    Attributes:
        topology: The target's name, lower case: ``"h100-256"``.
        family: Its family, a key of the table: ``"h100"``.
        platform: ``"tpu"`` or ``"cuda"``.
        device_name: What one device is: ``"NVIDIA H100 SXM5 80GB"``.
        devices: The number of JAX devices (TPU chips, GPUs).
        peak_flops: ``(dtype, dense FLOP/s of one device)`` pairs, in the order
            of :data:`DTYPES`; a chip without a dtype (fp8 on an A100) has no
            pair for it.
        hbm_bytes_per_second: One device's HBM bandwidth.
        torus_dims: A TPU slice's torus dimensions, ``(16, 16)`` for a
            v5e-256, ``(2, 2, 1)`` for a v5p-8; ``()`` on GPUs.
        wraparound: Whether each torus dimension has its wraparound link.
        ici_bytes_per_second_per_link: One ICI link, one direction (TPU).
        hosts: The GPU hosts (``None`` on TPUs).
        gpus_per_host: GPUs in each host (``None`` on TPUs).
        nvlink_bytes_per_second: One GPU's NVLink, one direction.
        network_bytes_per_second: One GPU's network share between hosts, one
            direction: the NVIDIA reference system's figure unless overridden.
        slices: TPU slices joined by the data-center network (``2xv5e-256``:
            2); 1 for one slice and on GPUs.
        dcn_bytes_per_second: One TPU chip's share of the data-center network
            between slices (the data sheet's figure per chip, which it does not
            split by direction), or ``None`` where the data sheet gives none.
        sources: ``(figure, source)`` pairs: where each figure comes from and
            what arithmetic made it; figures are named as the fields are, peaks
            as ``"peak_flops.<dtype>"``.

    Example:
        >>> hw = hardware_for("h100-16")
        >>> hw.hosts, hw.gpus_per_host, hw.peak_flops_per_second("bf16")
        (2, 8, 989500000000000.0)
    """

    topology: str
    family: str
    platform: str
    device_name: str
    devices: int
    peak_flops: tuple[tuple[str, float], ...]
    hbm_bytes_per_second: int
    torus_dims: tuple[int, ...] = ()
    wraparound: tuple[bool, ...] = ()
    ici_bytes_per_second_per_link: int | None = None
    hosts: int | None = None
    gpus_per_host: int | None = None
    nvlink_bytes_per_second: int | None = None
    network_bytes_per_second: int | None = None
    sources: tuple[tuple[str, str], ...] = ()
    slices: int = 1
    dcn_bytes_per_second: int | None = None

    @typechecked
    def peak_flops_per_second(self, dtype: str = "bf16") -> float:
        """One device's dense peak FLOP/s for ``dtype``.

        Args:
            dtype: ``"bf16"``, ``"fp8"``, ``"int8"``, ``"f32"`` (default
                precision: TF32 on GPUs, one bf16 pass on TPUs) or
                ``"f32_highest"``; NumPy spellings (``"bfloat16"``,
                ``"float32"``, ``"float8_e4m3fn"``) are accepted.

        Returns:
            FLOP/s of one device (an ``int8`` peak counts operations).

        Raises:
            ValueError: If the chip has no peak for ``dtype``.

        Example:
            >>> hw = hardware_for("v5e-4")
            >>> hw.peak_flops_per_second("bfloat16") == 197e12
            True
            >>> hw.peak_flops_per_second("fp8")
            Traceback (most recent call last):
            ...
            nnx_introspect._typing.ArgumentError: `dtype` 'fp8' has no peak on ...
        """
        name = DTYPE_ALIASES.get(dtype.strip().lower())
        peaks = dict(self.peak_flops)
        if name is None or name not in peaks:
            raise ArgumentError(
                "dtype",
                f"`dtype` {short_repr(dtype)} has no peak on {self.device_name} "
                f"({self.topology}); pass one of {list(peaks)} (or a NumPy "
                "spelling such as 'bfloat16' or 'float32').",
            )
        return peaks[name]

    @typechecked
    def peak_name(self, dtype: str = "bf16") -> str:
        """What the peak ``dtype`` runs at is called: ``"TF32"`` for f32 on a GPU.

        An f32 matmul at JAX's default precision runs on TF32 tensor cores
        (Ampere and later) and as one bf16 MXU pass on a TPU; the name says
        which peak bounds it, where ``"f32"`` alone would suggest an FP32 rate.

        Args:
            dtype: A dtype :meth:`peak_flops_per_second` accepts.

        Returns:
            The peak's name: the canonical dtype (``"bf16"``, ``"fp8"``,
            ``"int8"``), or ``"TF32"``, ``"FP32 (CUDA cores)"`` and the TPU's
            bf16 passes for the f32 dtypes.

        Raises:
            ValueError: If the chip has no peak for ``dtype``.

        Example:
            >>> hardware_for("h100-8").peak_name("float32")
            'TF32'
            >>> hardware_for("v5e-8").peak_name("f32")
            'bf16 (one MXU pass per f32 matmul)'
            >>> hardware_for("h100-8").peak_name("bfloat16")
            'bf16'
        """
        self.peak_flops_per_second(dtype)  # refuses a dtype without a peak
        name = DTYPE_ALIASES[dtype.strip().lower()]
        return _PEAK_NAMES.get(self.platform, {}).get(name, name)

    @typechecked
    def source(self, figure: str) -> str:
        """Where ``figure`` (a field name, or ``"peak_flops.<dtype>"``) comes from.

        Example:
            >>> hardware_for("a100-8").source("nvlink_bytes_per_second")
            'NVIDIA A100 ... data sheet, A100 80GB SXM column: NVLink per GPU, ...'
        """
        sources = dict(self.sources)
        if figure not in sources:
            raise ArgumentError(
                "figure",
                f"`figure` {short_repr(figure)} is not a figure of {self.topology}; "
                f"pass one of {list(sources)}.",
            )
        return sources[figure]

    def json_data(self) -> dict[str, Any]:
        """Every figure and its source, as JSON-ready values.

        Example:
            >>> data = hardware_for("v5e-256").json_data()
            >>> data["torus_dims"], data["wraparound"]
            ([16, 16], [True, True])
        """
        return {
            "topology": self.topology,
            "family": self.family,
            "platform": self.platform,
            "device_name": self.device_name,
            "devices": self.devices,
            "peak_flops": dict(self.peak_flops),
            "hbm_bytes_per_second": self.hbm_bytes_per_second,
            "torus_dims": list(self.torus_dims),
            "wraparound": list(self.wraparound),
            "ici_bytes_per_second_per_link": self.ici_bytes_per_second_per_link,
            "hosts": self.hosts,
            "gpus_per_host": self.gpus_per_host,
            "nvlink_bytes_per_second": self.nvlink_bytes_per_second,
            "network_bytes_per_second": self.network_bytes_per_second,
            "slices": self.slices,
            "dcn_bytes_per_second": self.dcn_bytes_per_second,
            "sources": dict(self.sources),
        }


def _family(topology: str) -> str:
    """The family of a name :func:`resolve_topology` accepted."""
    match = TOPOLOGY_RE.fullmatch(topology.strip().lower())
    if match is None:  # pragma: no cover - resolve_topology refused it first
        raise AssertionError(topology)
    return FAMILY_BY_SPELLING[match.group(2)].name


def _torus(
    compiler_topology: str, options: dict[str, Any]
) -> tuple[tuple[int, ...], tuple[bool, ...]]:
    """A TPU slice's torus dims (``"v5e:16x16"`` -> 16, 16) and wraparound.

    Wraparound is what :mod:`~nnx_introspect._accelerators.topology` tells the
    compiler: v5e and v6e slices of 256 chips on both dims, of 128 (8x16) on the
    16 only; v4 and v5p slices of 64 chips or more (full 4x4x4 cubes and up) on
    all three; smaller slices on none.
    """
    dims = tuple(int(d) for d in compiler_topology.split(":")[-1].split("x"))
    wrap = tuple(bool(w) for w in options.get("wrap", ()))
    wrap = (wrap + (False,) * len(dims))[: len(dims)]
    return dims, wrap


@typechecked
def hardware_for(
    topology: str, /, *, network_bytes_per_second: int | None = None
) -> Hardware:
    """The data-sheet figures of a named target, its slice's links included.

    A TPU target (``v4``, ``v5e``, ``v5p``, ``v6e``) gets its chip's peaks,
    HBM bandwidth and ICI bandwidth per link, and its torus: dimensions as the
    compiler's topology names them and wraparound as the compiler is told.
    A GPU target (``a100``, ``h100``, ``h200``, ``b200``) gets its GPU's
    peaks, HBM and NVLink bandwidth, its hosts (one host of up to 8 GPUs, or
    hosts of 8), and the network bandwidth per GPU between hosts: by default
    the NVIDIA DGX reference system's one NIC per GPU (200 Gb/s HDR InfiniBand
    on a DGX A100 = 25 GB/s; 400 Gb/s NDR on DGX H100, H200 and B200 = 50 GB/s).

    Args:
        topology: A target name as :func:`parse_topology` takes it:
            ``"v5e-4"``, ``"v5p-8"``, ``"h100-256"``...
        network_bytes_per_second: A GPU cluster's network bandwidth per GPU
            between hosts, one direction, in bytes/s, when it is not the
            reference system's (e.g. ``100 * 10**9`` for 800 Gb/s NICs).

    Returns:
        The target's :class:`Hardware`.

    Raises:
        ValueError: If ``topology`` names no supported target, or
            ``network_bytes_per_second`` is not positive or is given for a TPU.

    Example:
        >>> hw = hardware_for("h100-256")
        >>> hw.hosts, hw.nvlink_bytes_per_second, hw.network_bytes_per_second
        (32, 450000000000, 50000000000)
        >>> tpu = hardware_for("v5p-8")
        >>> tpu.devices, tpu.torus_dims, tpu.wraparound
        (4, (2, 2, 1), (False, False, False))
        >>> pods = hardware_for("2xv5e-256")
        >>> pods.devices, pods.slices, pods.torus_dims, pods.dcn_bytes_per_second
        (512, 2, (16, 16), 3125000000)
    """
    topo = resolve_topology(topology)
    family = _family(topology)
    chip = _CHIPS[family]
    if network_bytes_per_second is not None:
        if isinstance(network_bytes_per_second, bool) or network_bytes_per_second <= 0:
            raise ArgumentError(
                "network_bytes_per_second",
                "`network_bytes_per_second` must be a positive number of bytes per "
                f"second, got {network_bytes_per_second!r}. Pass e.g. 50 * 10**9 "
                "for one 400 Gb/s NIC per GPU.",
            )
        if topo.platform != "cuda":
            raise ArgumentError(
                "network_bytes_per_second",
                f"`network_bytes_per_second` applies to GPU targets (the network "
                f"between hosts); {topology!r} is a TPU slice whose chips talk "
                "over ICI only. Leave it out.",
            )
    sources = [(f"peak_flops.{dtype}", figure.source) for dtype, figure in chip.peaks]
    sources.append(("hbm_bytes_per_second", chip.hbm.source))
    peaks = tuple((dtype, float(figure.value)) for dtype, figure in chip.peaks)
    common: dict[str, Any] = {
        "topology": topology.strip().lower(),
        "family": family,
        "platform": topo.platform,
        "device_name": chip.device_name,
        "devices": topo.devices,
        "peak_flops": peaks,
        "hbm_bytes_per_second": int(chip.hbm.value),
    }
    if topo.platform == "tpu":
        if chip.ici_link is None:  # pragma: no cover - the table's invariant
            raise AssertionError(f"TPU family {family} has no ICI figure")
        dims, wrap = _torus(topo.compiler_topology, dict(topo.options))
        sources.append(("ici_bytes_per_second_per_link", chip.ici_link.source))
        sources.append(
            (
                "torus_dims",
                f"the compiler topology {topo.compiler_topology!r} of {topology!r}",
            )
        )
        sources.append(("wraparound", f"the compiler's wrap option: {wrap}"))
        if chip.dcn is not None:
            sources.append(("dcn_bytes_per_second", chip.dcn.source))
        return Hardware(
            **common,
            torus_dims=dims,
            wraparound=wrap,
            ici_bytes_per_second_per_link=int(chip.ici_link.value),
            sources=tuple(sources),
            slices=topo.slices,
            dcn_bytes_per_second=None if chip.dcn is None else int(chip.dcn.value),
        )
    if chip.nvlink is None or chip.network is None:  # pragma: no cover
        raise AssertionError(f"GPU family {family} has no link figures")
    _, hosts, per_host = (int(n) for n in topo.compiler_topology.split("x"))
    network = chip.network
    if network_bytes_per_second is not None:
        network = _Figure(
            network_bytes_per_second, "given (`network_bytes_per_second`)"
        )
    sources.append(("nvlink_bytes_per_second", chip.nvlink.source))
    sources.append(("network_bytes_per_second", network.source))
    sources.append(
        (
            "hosts",
            f"the compiler topology {topo.compiler_topology!r} (1 x hosts x GPUs)",
        )
    )
    return Hardware(
        **common,
        hosts=hosts,
        gpus_per_host=per_host,
        nvlink_bytes_per_second=int(chip.nvlink.value),
        network_bytes_per_second=int(network.value),
        sources=tuple(sources),
    )


HOST_LINKS: dict[str, tuple[int, str]] = {
    "a100": (
        32 * _GIGA,
        "NVIDIA A100 data sheet: PCIe Gen4, 64 GB/s both ways, 32 GB/s one way",
    ),
    "h100": (
        64 * _GIGA,
        "NVIDIA H100 data sheet (SXM): PCIe Gen5, 128 GB/s both ways, 64 GB/s one way",
    ),
    "h200": (
        64 * _GIGA,
        "NVIDIA H200 data sheet (SXM): PCIe Gen5, 128 GB/s both ways, 64 GB/s one way",
    ),
}
"""One GPU's link to its host, one direction, by family, with its source.

The families whose data sheet states the host interface; a TPU's host link
is not on Cloud TPU's pages, and is not guessed."""


def host_link(topology: str) -> tuple[int, str] | None:
    """``(bytes per second one way, source)`` of one device's host link, if known.

    Example:
        >>> host_link("h100-8")[0], host_link("v5e-8")
        (64000000000, None)
    """
    return HOST_LINKS.get(hardware_for(topology).family)

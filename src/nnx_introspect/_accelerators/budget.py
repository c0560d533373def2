"""The memory a step may use on one device: the budget a verdict is held to.

On an NVIDIA GPU a JAX process does not get the device's memory: its XLA client
makes one pool (the BFC allocator) of ``XLA_CLIENT_MEM_FRACTION`` (or the older
``XLA_PYTHON_CLIENT_MEM_FRACTION``) of it, 0.75 unless set, and every array and
every compiled program's buffers come from that pool. The budget of a GPU
target is that pool, less :data:`GPU_POOL_RESERVE_BYTES` for what the pool
holds that XLA's figures for the step do not. On a TPU the budget is the HBM
XLA:TPU lets a program use (15.75 of a v5e chip's 16 GiB in libtpu 0.0.52; the
rest is reserved for the TPU runtime, outside every ``memory_analysis()``
figure), and XLA:TPU itself refuses, at compile time, a program over it.
"""

import dataclasses
import math
import os
import re
from collections.abc import Mapping

from nnx_introspect._accelerators.topology import resolve_topology
from nnx_introspect._text import format_bytes

__all__ = [
    "MAX_ADVISED_FRACTION",
    "Budget",
    "step_budget",
]

JAX_GPU_MEMORY_FRACTION = 0.75
"""The share of a GPU's memory JAX's allocator takes when no variable says
otherwise: ``GpuAllocatorConfig.memory_fraction``'s default in XLA
(``xla/pjrt/gpu/gpu_helpers.h``), which jaxlib's ``xla_client`` leaves alone
unless ``XLA_CLIENT_MEM_FRACTION`` / ``XLA_PYTHON_CLIENT_MEM_FRACTION`` is set."""

MAX_ADVISED_FRACTION = 0.95
"""The largest allocator fraction the report advises: above it, the CUDA
context, NCCL's buffers and the libraries' handles, which live outside the pool,
may no longer fit beside it."""

GPU_POOL_RESERVE_BYTES = 0
"""Bytes of the allocator's pool the budget keeps back (see the module's text)."""

_FRACTION_VARIABLES = ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION")


@dataclasses.dataclass(frozen=True)
class Budget:
    """The budget of one device and what it is based on.

    Attributes:
        bytes: The budget, or ``None`` (XLA:CPU with no ``max_device_bytes``).
        basis: How it was found, in words, for the verdict: ``"the 75% of the
            device's 79.11 GiB that JAX's GPU allocator takes (its default)"``.
        device_memory_bytes: The device's memory, or ``None``.
        fraction: The allocator's fraction on a GPU target, or ``None``.
        fraction_source: Where the fraction came from (an environment
            variable, or JAX's default), or ``None``.
    """

    bytes: int | None
    basis: str | None
    device_memory_bytes: int | None = None
    fraction: float | None = None
    fraction_source: str | None = None

    def needed_fraction(self, peak_bytes: int) -> float | None:
        """The allocator fraction at which ``peak_bytes`` fits, or ``None``.

        Rounded up to two decimals (what ``XLA_CLIENT_MEM_FRACTION=.83``
        takes); ``None`` off GPU targets, when the peak already fits, or when
        no fraction up to :data:`MAX_ADVISED_FRACTION` makes it fit.
        """
        memory = self.device_memory_bytes
        if self.fraction is None or memory is None or self.bytes is None:
            return None
        if peak_bytes <= self.bytes:
            return None
        needed = math.ceil((peak_bytes + GPU_POOL_RESERVE_BYTES) * 100 / memory) / 100
        return needed if needed <= MAX_ADVISED_FRACTION else None


def gpu_fraction(environ: Mapping[str, str] | None = None) -> tuple[float, str]:
    """The allocator fraction a JAX process started with ``environ`` gets.

    Read as jaxlib's ``xla_client`` reads it: ``XLA_CLIENT_MEM_FRACTION``, else
    the deprecated ``XLA_PYTHON_CLIENT_MEM_FRACTION``, else 0.75.

    Raises:
        ValueError: If both variables are set (JAX refuses that too), or one is
            not a number in ``(0, 1]``.

    Example:
        >>> gpu_fraction({})
        (0.75, "JAX's default")
        >>> gpu_fraction({"XLA_PYTHON_CLIENT_MEM_FRACTION": ".9"})
        (0.9, 'XLA_PYTHON_CLIENT_MEM_FRACTION=.9')
    """
    env = os.environ if environ is None else environ
    given = [(name, env[name]) for name in _FRACTION_VARIABLES if env.get(name)]
    if len(given) == 2:
        raise ValueError(
            "XLA_CLIENT_MEM_FRACTION and XLA_PYTHON_CLIENT_MEM_FRACTION are both "
            "set in the environment; JAX refuses that too. Unset "
            "XLA_PYTHON_CLIENT_MEM_FRACTION (deprecated)."
        )
    if not given:
        return JAX_GPU_MEMORY_FRACTION, "JAX's default"
    name, text = given[0]
    try:
        fraction = float(text)
    except ValueError:
        fraction = math.nan
    if not (math.isfinite(fraction) and 0 < fraction <= 1):
        raise ValueError(
            f"{name}={text!r} in the environment is not a fraction in (0, 1]; "
            "JAX's GPU allocator would not start with it. Set it to e.g. .9, or "
            "unset it (JAX's default is .75)."
        )
    return fraction, f"{name}={text}"


def _family_spelling(topology: str) -> str:
    """The family as ``topology`` spells it: ``v5e`` of ``v5e-4`` and ``2xv5e-256``."""
    return re.sub(r"^\s*[0-9]+x", "", topology.rsplit("-", 1)[0])


def step_budget(
    max_device_bytes: int | None,
    topology: str | None,
    environ: Mapping[str, str] | None = None,
) -> Budget:
    """The budget of one device for a step compiled for ``topology``.

    ``max_device_bytes`` (already in bytes) wins; else a GPU target's
    allocator pool; else a TPU chip's HBM; else none.

    Example:
        >>> b = step_budget(None, "h100-8", {})
        >>> b.bytes == int(84_942_979_072 * 0.75), b.fraction
        (True, 0.75)
        >>> print(b.basis)
        the 75% of the device's 79.11 GiB that JAX's GPU allocator takes
        (JAX's default)
        >>> step_budget(2**30, "h100-8", {}).basis
        'the budget given'
        >>> tpu = step_budget(None, "v5e-4", {})
        >>> tpu.bytes == round(15.75 * 2**30), tpu.device_memory_bytes == 16 * 2**30
        (True, True)
        >>> print(tpu.basis)
        the 15.75 GiB of HBM XLA:TPU lets a program use on a v5e chip; the rest of
        its 16 GiB is the TPU runtime's
    """
    memory = (
        None if topology is None else resolve_topology(topology).device_memory_bytes
    )
    if max_device_bytes is not None:
        return Budget(max_device_bytes, "the budget given", memory)
    if topology is None or memory is None:
        return Budget(None, None)
    topo = resolve_topology(topology)
    if topo.platform != "cuda":
        available = topo.available_bytes or memory
        basis = (
            f"the {format_bytes(available)} of HBM XLA:TPU lets a program use on a "
            f"{_family_spelling(topology)} chip; the rest of its "
            f"{format_bytes(memory)} is the TPU runtime's"
        )
        return Budget(available, basis, memory)
    fraction, source = gpu_fraction(environ)
    pool = int(memory * fraction) - GPU_POOL_RESERVE_BYTES
    basis = (
        f"the {fraction:.0%} of the device's {format_bytes(memory)} that JAX's "
        f"GPU allocator takes ({source})"
    )
    return Budget(pool, basis, memory, fraction, source)

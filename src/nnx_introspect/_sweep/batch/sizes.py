"""The batch sizes a :func:`~nnx_introspect.max_batch` search tries.

The data-parallel size and the range of sizes (multiples of it), the largest
size whose batch shards alone fit a budget, and the bisection over sizes.
"""

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax.sharding import PartitionSpec

from nnx_introspect._accelerators import step_budget, topology_of_devices
from nnx_introspect._mesh import entry_axes
from nnx_introspect._render import batch_str, format_bytes
from nnx_introspect._step import StepSpec
from nnx_introspect._typing import ArgumentError, as_int

__all__ = [
    "MAX_COMPILES",
    "batch_range",
    "bisect_sizes",
    "largest_by_arguments",
    "leading_size",
    "leaf_with_b",
    "present_budget",
    "search_budget",
    "with_batch_size",
]

MAX_COMPILES = 24
"""The most compiles one :func:`~nnx_introspect.max_batch` search makes."""


def batch_range(spec: StepSpec, lo: Any, hi: Any) -> tuple[int, int, int | None]:
    """``(data-parallel size, lo, hi or None)``, checked."""
    sizes = dict(spec.mesh_axes)
    # k microbatches: each of them splits as the whole batch does
    split = math.lcm(*(_leading_split(s, sizes) for s in spec.batch_specs))
    dp = split * int(spec.microbatches)
    low = dp if lo is None else _multiple(lo, "lo", dp)
    top = None if hi is None else _multiple(hi, "hi", dp)
    if top is not None and low > top:
        raise ArgumentError(
            "lo",
            f"`lo` ({low}) must be at most `hi` ({top}). Pass a smaller `lo` or a "
            "larger `hi`.",
        )
    return dp, low, top


def with_batch_size(spec: StepSpec, size: int) -> StepSpec:
    """``spec`` with every batch leaf's leading dimension ``size``."""
    leaves = spec.batch
    batch = tuple(jax.ShapeDtypeStruct((size, *b.shape[1:]), b.dtype) for b in leaves)
    return dataclasses.replace(spec, batch=batch)


def bisect_sizes(
    fits: Callable[[int], bool], start: int, low: int, high: int, dp: int
) -> tuple[int | None, int | None]:
    """``(largest size known to fit, smallest known not to)``, multiples of ``dp``.

    Doubling from ``start`` while it fits (halving while it does not), then
    bisection; at most :data:`MAX_COMPILES` calls of ``fits``.
    """
    calls = 1
    good: int | None = None
    bad: int | None = None
    if fits(start):
        good = start
        while good < high and calls < MAX_COMPILES:
            size = min(2 * good, high)
            calls += 1
            if not fits(size):
                bad = size
                break
            good = size
    else:
        bad = start
        while bad > low and calls < MAX_COMPILES:
            size = max(low, bad // 2 // dp * dp)
            calls += 1
            if fits(size):
                good = size
                break
            bad = size
    while good is not None and bad is not None and bad - good > dp:
        if calls >= MAX_COMPILES:
            break
        size = good + (bad - good) // dp // 2 * dp
        calls += 1
        if fits(size):
            good = size
        else:
            bad = size
    return good, bad


def search_budget(spec: StepSpec) -> tuple[int, str]:
    """``(bytes, basis)``: the budget every point is held to, and how it was found.

    The spec's own (``max_device_bytes``, else its ``topology``'s device);
    with neither, the present devices' when this process's default backend
    is a TPU or a GPU (:func:`present_budget`); required on a CPU.
    """
    budget = spec.budget
    if budget.bytes is not None and budget.basis is not None:
        return budget.bytes, budget.basis
    present = present_budget() if spec.topology is None else None
    if present is None:
        raise ArgumentError(
            "max_device_bytes",
            "`max_device_bytes` is required: the per-device budget the step must "
            "fit, such as '16GiB' or 17179869184 (a `topology` such as 'v5e-4' "
            "gives its device's memory instead, and so do this process's devices "
            f"on a TPU or GPU; they are {jax.default_backend().upper()}s).",
        )
    return present


def present_budget(
    backend: str | None = None, devices: Sequence[Any] | None = None
) -> tuple[int, str] | None:
    """The budget of this process's devices, on a TPU or GPU backend; else ``None``.

    The figure a named topology of the same devices gives (``"v5e-1"`` for
    one TPU v5 lite: the HBM XLA:TPU lets a program use; on a GPU, JAX's
    allocator's share), else the allocator's own limit (``bytes_limit`` of
    ``memory_stats()``); the basis says they are the present devices'.
    ``backend`` and ``devices`` default to JAX's.

    Example:
        >>> from types import SimpleNamespace
        >>> v5e = SimpleNamespace(device_kind="TPU v5 lite", memory_stats=dict)
        >>> found = present_budget("tpu", [v5e] * 4)
        >>> found[0] == round(15.75 * 2**30), found[1].split(":")[0]
        (True, "the present devices' (4 x TPU v5 lite, v5e-4)")
        >>> present_budget("cpu", [v5e]) is None
        True
    """
    backend = jax.default_backend() if backend is None else backend
    if backend not in ("tpu", "gpu"):
        return None
    devices = jax.devices() if devices is None else devices
    kind = devices[0].device_kind
    name = topology_of_devices(kind, len(devices))
    here = f"the present devices' ({len(devices)} x {kind}"
    if name is not None:
        budget = step_budget(None, name)
        if budget.bytes is not None and budget.basis is not None:
            return budget.bytes, f"{here}, {name}): {budget.basis}"
    stats = devices[0].memory_stats() or {}
    limit = stats.get("bytes_limit")
    if not limit:
        return None
    words = f"the {format_bytes(int(limit))} their allocator lets this process use"
    return int(limit), f"{here}): {words} (bytes_limit)"


def leading_size(leaves: tuple[jax.ShapeDtypeStruct, ...]) -> int:
    """The batch size the leaves share as their leading dimension."""
    for i, leaf in enumerate(leaves):
        if not leaf.shape:
            raise ArgumentError(
                "batch",
                f"`batch[{i}]` ({batch_str(leaf)}) is a scalar: every batch leaf's "
                "leading dimension is the batch dimension the search varies. Give "
                "each leaf a leading batch dimension.",
            )
    sizes = {leaf.shape[0] for leaf in leaves}
    if len(sizes) > 1:
        raise ArgumentError(
            "batch",
            f"`batch` leaves must share their leading (batch) dimension, got "
            f"{', '.join(batch_str(leaf) for leaf in leaves)}. Give every leaf "
            "the same leading size.",
        )
    return max(1, int(leaves[0].shape[0]))


def _leading_split(spec: PartitionSpec, sizes: dict[str, int]) -> int:
    """How many pieces ``spec`` cuts the leading dimension into.

    An axis not in the mesh counts 1: the step's plan reports it.
    """
    if not len(spec):
        return 1
    return math.prod(sizes.get(a, 1) for a in entry_axes(spec[0]))


def _multiple(value: Any, name: str, dp: int) -> int:
    size = as_int(value, name, minimum=1)
    if size % dp:
        raise ArgumentError(
            name,
            f"`{name}` must be a multiple of the data-parallel size {dp} (the mesh "
            f"axes the batch's leading dimension splits over), got {size}. Pass "
            f"{max(dp, size // dp * dp)} or {-(-size // dp) * dp}.",
        )
    return size


def largest_by_arguments(spec: StepSpec, dp: int, budget: int) -> int:
    """The largest multiple of ``dp`` whose batch shards alone fit ``budget``.

    A step's peak holds its arguments, the batch shards among them, so no
    larger batch fits. Bits per example and device are a lower bound (a split
    that does not divide is reported by :func:`~nnx_introspect.step_memory_report`).
    """
    bits = 0.0
    sizes = dict(spec.mesh_axes)
    for leaf, split_by in zip(spec.batch, spec.batch_specs, strict=True):
        elements = 1.0 / _leading_split(split_by, sizes)
        for dim, size in enumerate(leaf.shape[1:], start=1):
            axes = entry_axes(split_by[dim]) if dim < len(split_by) else ()
            split = math.prod(sizes.get(a, 1) for a in axes)
            elements *= size / split
        bits += elements * int(jax.dtypes.itemsize_bits(leaf.dtype))
    if bits == 0:  # zero-size leaves: the batch costs nothing
        return dp << (MAX_COMPILES // 2)
    return int(budget * 8 / bits) // dp * dp


def leaf_with_b(leaf: jax.ShapeDtypeStruct) -> str:
    text = batch_str(leaf)
    head, _, rest = text.partition("[")
    dims = rest.rstrip("]").split(",")
    return f"{head}[{','.join(['B', *dims[1:]])}]"

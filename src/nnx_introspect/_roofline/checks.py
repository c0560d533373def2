"""The checks of a roofline's inputs: every problem found, then one error.

:func:`checked_peak` checks the figures
:func:`~nnx_introspect._roofline.estimate.roofline` is given (numbers finite
and ``>= 0``, the mesh the hardware's size, each communication key whole mesh
axes, the dtype one the chip has a peak for) and raises one
:class:`~nnx_introspect._typing.ArgumentError` listing them all, naming the
argument of the first.
"""

import math
import re
from collections.abc import Mapping

from nnx_introspect._accelerators import Hardware
from nnx_introspect._text import plural
from nnx_introspect._typing import ArgumentError, short_repr

__all__ = ["checked_peak"]


def _number_problems(values: tuple[tuple[str, float | int | None], ...]) -> list[str]:
    """A sentence for each value that is not a finite number >= 0."""
    problems = []
    for name, value in values:
        if value is None:
            continue
        if isinstance(value, bool):
            raise TypeError(f"`{name}` must be a number, got the bool {value!r}.")
        if not math.isfinite(value) or value < 0:
            problems.append(
                f"`{name}` must be a finite number >= 0, got {value!r}; pass the "
                "compiled program's figure (XLA's cost_analysis())."
            )
    return problems


def _mesh_problems(mesh_axes: tuple[tuple[str, int], ...], devices: int) -> list[str]:
    """Sentences for a malformed mesh or one that is not the target's size."""
    problems = []
    names: list[str] = []
    for index, item in enumerate(mesh_axes):
        if (
            not isinstance(item, tuple)
            or len(item) != 2
            or not isinstance(item[0], str)
            or not isinstance(item[1], int)
            or isinstance(item[1], bool)
        ):
            raise TypeError(
                f"`mesh_axes[{index}]` must be a (name, size) pair such as "
                f"('fsdp', 32), got {short_repr(item)}."
            )
        name, size = item
        if size < 1:
            problems.append(
                f"`mesh_axes` axis {name!r} must have a positive size, got {size}."
            )
        if name in names:
            problems.append(f"`mesh_axes` names the axis {name!r} twice; rename one.")
        names.append(name)
    total = math.prod(size for _, size in mesh_axes)
    if not problems and total != devices:
        problems.append(
            f"`mesh_axes` {dict(mesh_axes)} has {plural(total, 'device')} but the "
            "hardware "
            f"has {devices}; make the axis sizes multiply to {devices}."
        )
    return problems


def _comm_problems(
    comm_bytes_by_axis: Mapping[tuple[str, ...], int],
    sizes: dict[str, int],
) -> list[str]:
    """Sentences for each key naming unknown axes and each bad byte count."""
    problems = []
    for key, value in comm_bytes_by_axis.items():
        where = f"`comm_bytes_by_axis[{short_repr(key)}]`"
        if not isinstance(key, tuple) or not all(isinstance(a, str) for a in key):
            raise TypeError(
                f"{where}: each key must be a tuple of mesh axis names such as "
                f"('fsdp',), got {short_repr(key)}."
            )
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(
                f"{where} must be an integer number of bytes, got {short_repr(value)}."
            )
        unknown = [a for a in key if a not in sizes]
        if not key or unknown or len(set(key)) != len(key):
            problems.append(
                f"{where}: the key must name distinct axes of `mesh_axes` "
                f"{list(sizes)}, got {key!r}."
            )
        elif value < 0:
            problems.append(f"{where} must be >= 0 bytes, got {value}.")
        elif value > 0 and math.prod(sizes[a] for a in key) == 1:
            problems.append(
                f"{where} is {value} bytes but the axes {key!r} span one device; "
                "a collective over one device sends nothing. Drop the entry."
            )
    return problems


def _argument_of(problem: str) -> str:
    """The argument a problem's sentence names first (its first backticked name)."""
    found = re.search(r"`([A-Za-z_]\w*)", problem)
    return "flops" if found is None else found.group(1)


def checked_peak(
    *,
    flops: float | int,
    bytes_accessed: float | int,
    comm_bytes_by_axis: Mapping[tuple[str, ...], int],
    mesh_axes: tuple[tuple[str, int], ...],
    hardware: Hardware,
    dtype: str,
    tokens: int | None,
    model_flops: float | int | None,
) -> float:
    """The dtype's peak once every figure is checked; every problem raised at once.

    Example:
        >>> from nnx_introspect._accelerators.hardware import hardware_for
        >>> figures = dict(flops=1.0, bytes_accessed=1.0, comm_bytes_by_axis={},
        ...     mesh_axes=(("data", 8),), hardware=hardware_for("h100-8"),
        ...     dtype="bf16", tokens=None, model_flops=None)
        >>> checked_peak(**figures)
        989500000000000.0
        >>> try:
        ...     checked_peak(**figures | {"flops": -1.0, "tokens": 0})
        ... except ArgumentError as error:
        ...     print(error.argument, "|", str(error).split(",")[0])
        flops | `flops` must be a finite number >= 0
    """
    problems = _number_problems(
        (
            ("flops", flops),
            ("bytes_accessed", bytes_accessed),
            ("model_flops", model_flops),
        )
    )
    problems += _mesh_problems(mesh_axes, hardware.devices)
    problems += _comm_problems(comm_bytes_by_axis, dict(mesh_axes))
    if tokens is not None and (isinstance(tokens, bool) or tokens < 1):
        problems.append(
            f"`tokens` must be a positive number of tokens per step, got {tokens!r}."
        )
    peak = math.nan
    try:
        peak = hardware.peak_flops_per_second(dtype)
    except ValueError as error:
        problems.append(str(error))
    if problems:
        raise ArgumentError(_argument_of(problems[0]), " ".join(problems))
    return peak

"""The comparison's utilisation column: what its figure is, and against which peak.

Each compiled row's :class:`~nnx_introspect._roofline.estimate.Roofline` knows
whether its utilisation is an MFU (the model's FLOPs, ``6·N·tokens``) or a
hardware FLOPs utilisation (the program's FLOPs, recompute included), and which
peak bounds compute (``TF32`` for float32 matmuls on a GPU). The figure is at
the step's point estimate (:attr:`~nnx_introspect._roofline.estimate.Roofline.mfu`)
where the row has one; a row without one keeps the roofline's ceiling (at the
low bound: the most the estimate allows), marked ``≤`` in a column of point
figures. The header says which (:func:`utilisation_header`), each cell gives
the bf16-peak figure too where that peak is another (:func:`utilisation_cell`),
and the notes name the basis and the peaks (:func:`utilisation_notes`).
"""

from collections.abc import Iterator, Sequence

from nnx_introspect._roofline import Roofline

_SHORT = {"MFU": "MFU", "hardware FLOPs utilisation": "HFU"}
"""Each kind's short name, in a cell of a column that mixes kinds."""


def _kinds(estimates: Sequence[Roofline | None]) -> list[str]:
    """The utilisation kinds of ``estimates``, each once, in order."""
    return list(dict.fromkeys(e.utilisation for e in estimates if e is not None))


def _points(estimates: Sequence[Roofline | None]) -> bool:
    """Whether some row has a point estimate: the column gives utilisations at it."""
    return any(e is not None and e.mfu is not None for e in estimates)


def utilisation_header(estimates: Sequence[Roofline | None]) -> str:
    """The column's header: what every row's figure is.

    ``"MFU (est.)"`` when each is an MFU (or none is known),
    ``"hardware FLOPs utilisation (est.)"`` when each counts the program's
    FLOPs, ``"utilisation (est.)"`` when they mix (each cell then names its
    own); with ``" ceiling"`` after the kind when no row has a point estimate
    (the figures are then the roofline's ceilings).

    Example:
        >>> from nnx_introspect._accelerators.hardware import hardware_for
        >>> from nnx_introspect._roofline.estimate import roofline
        >>> est = roofline(
        ...     flops=1e12, bytes_accessed=0.0, comm_bytes_by_axis={},
        ...     mesh_axes=(("data", 8),), hardware=hardware_for("h100-8"),
        ... )
        >>> utilisation_header([est, None])
        'hardware FLOPs utilisation ceiling (est.)'
        >>> utilisation_header([None])
        'MFU ceiling (est.)'
        >>> import dataclasses
        >>> from nnx_introspect._roofline.timing import program_time
        >>> from nnx_introspect._xla import OpWork, Work
        >>> work = Work((OpWork("matmul", 1e12, 0.0, 0, None, 1),))
        >>> timed = dataclasses.replace(
        ...     est, time=program_time(work, hardware_for("h100-8")))
        >>> utilisation_header([timed, est])
        'hardware FLOPs utilisation (est.)'
    """
    kinds = _kinds(estimates)
    ceiling = "" if _points(estimates) else " ceiling"
    if len(kinds) > 1:
        return f"utilisation{ceiling} (est.)"
    return f"{kinds[0] if kinds else 'MFU'}{ceiling} (est.)"


def utilisation_cell(
    estimate: Roofline | None, mixed: bool = False, points: bool = False
) -> str:
    """One row's figure: ``"43%"``, or ``"81% TF32; 40% bf16"`` at another peak.

    The utilisation at the step's point estimate where it has one, else the
    roofline's ceiling (marked ``"≤"`` when ``points``: the column's other
    figures are at point estimates), at the peak that bounds compute; then,
    where that is not the dense bf16 peak, at the bf16 peak too (the one MFUs
    are usually quoted against); ``"; "`` parts, so a narrow table puts them
    on two lines. ``mixed``: the column mixes kinds, so the cell starts with
    its own (``"MFU"``, ``"HFU"``). ``"-"`` with no estimate.

    Example:
        >>> from nnx_introspect._accelerators.hardware import hardware_for
        >>> from nnx_introspect._roofline.estimate import roofline
        >>> f32 = roofline(
        ...     flops=494.5e12, bytes_accessed=0.0, comm_bytes_by_axis={},
        ...     mesh_axes=(("data", 8),), hardware=hardware_for("h100-8"),
        ...     dtype="float32",
        ... )
        >>> utilisation_cell(f32), utilisation_cell(f32, mixed=True)
        ('100% TF32; 50% bf16', 'HFU 100% TF32; 50% bf16')
        >>> utilisation_cell(f32, points=True)  # a ceiling among point figures
        '≤100% TF32; ≤50% bf16'
        >>> utilisation_cell(None)
        '-'
    """
    if estimate is None:
        return "-"
    at = estimate.mfu
    bf16 = estimate.mfu_bf16
    mark = ""
    if at is None or bf16 is None:
        at, bf16 = estimate.mfu_ceiling, estimate.mfu_bf16_ceiling
        mark = "≤" if points else ""
    cell = f"{mark}{at:.0%}"
    if estimate.bf16_peak_flops_per_second != estimate.peak_flops_per_second:
        name = estimate.peak_name.split(" (")[0]
        cell += f" {name}; {mark}{bf16:.0%} bf16"
    if mixed:
        cell = f"{_SHORT.get(estimate.utilisation, estimate.utilisation)} {cell}"
    return cell


def utilisation_cells(estimates: Sequence[Roofline | None]) -> list[str]:
    """Each row's cell (:func:`utilisation_cell`), kinds named where they mix."""
    mixed = len(_kinds(estimates)) > 1
    points = _points(estimates)
    return [utilisation_cell(e, mixed, points) for e in estimates]


def utilisation_notes(estimates: Sequence[Roofline | None]) -> Iterator[str]:
    """What the column's figures count, against which peaks: one note per kind.

    Example:
        >>> from nnx_introspect._accelerators.hardware import hardware_for
        >>> from nnx_introspect._roofline.estimate import roofline
        >>> est = roofline(
        ...     flops=494.5e12, bytes_accessed=0.0, comm_bytes_by_axis={},
        ...     mesh_axes=(("data", 8),), hardware=hardware_for("h100-8"),
        ...     dtype="float32", model_flops=8 * 400e12,
        ...     model_flops_basis="6·N·tokens, attention not counted",
        ... )
        >>> print(*utilisation_notes([est]))  # doctest: +NORMALIZE_WHITESPACE
        MFU ceiling: the model's FLOPs (6·N·tokens, attention not counted) /
        (the low step time x the TF32 peak x devices), the MFU the estimate
        allows at best; TF32, 494.5 TFLOP/s per device, is the rate of f32
        matmuls at JAX's default precision. The second figure is against the
        dense bf16 peak (989.5 TFLOP/s per device), the one MFUs are usually
        quoted against.
    """
    seen: set[tuple[str, str, str, float, float, bool]] = set()
    for e in estimates:
        if e is None:
            continue
        key = (
            e.utilisation,
            e.mfu_basis,
            e.peak_words,
            e.peak_flops_per_second,
            e.bf16_peak_flops_per_second,
            e.mfu is not None,
        )
        if key not in seen:
            seen.add(key)
            yield _note(e)


def _note(e: Roofline) -> str:
    """One kind's note: its basis, its peak, and the bf16 peak where that differs."""
    name = e.peak_name.split(" (")[0]
    point = e.mfu is not None
    ceiling = "" if point else " ceiling"
    time = (
        "the estimated step time" if point else "the low step time"
    ) + f" x the {name} peak x devices"
    if e.utilisation == "MFU":
        what = f"MFU{ceiling}: the model's FLOPs ({e.mfu_basis}) / ({time})"
        what += (
            ", at the point estimate"
            if point
            else ", the MFU the estimate allows at best"
        )
    else:
        what = (
            f"hardware FLOPs utilisation{ceiling} (HFU), not an MFU: "
            f"({e.mfu_basis}) / ({time}); "
            "rematerialized and redundant work counts, so it overstates useful "
            "work (an MFU needs the tokens per step: a [B, T] integer token "
            "array in the batch)"
        )
    peak = f"{e.peak_flops_per_second / 1e12:.4g} TFLOP/s per device"
    why = e.peak_words.removeprefix(e.peak_name).removeprefix(", ")
    if why:
        what += f"; {e.peak_name}, {peak}, is {why}."
    else:
        what += f"; the {name} peak is {peak}."
    if e.bf16_peak_flops_per_second != e.peak_flops_per_second:
        what += (
            " The second figure is against the dense bf16 peak "
            f"({e.bf16_peak_flops_per_second / 1e12:.4g} TFLOP/s per device), the "
            "one MFUs are usually quoted against."
        )
    return what

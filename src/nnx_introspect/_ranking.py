"""Ranking candidates by their time estimates: ties within the calibrated error.

Every search that picks the fastest of several candidates (meshes, fit
configurations, GRPO layouts, serving meshes) ranks them by their point
estimates (:attr:`~nnx_introspect._roofline.estimate.Roofline.seconds`) and
calls two of them equal when the estimates lie within the calibrated error of
each other (:func:`~nnx_introspect._roofline.timing.same_time`): the error of
the larger of the two bars, as neither estimate is known closer than its own.
Uncalibrated estimates (no error bar) are equal only when they are the same.
The roofline's ``(low, high)`` range stays beside them, no bound, never the
ranking.
"""

from nnx_introspect._roofline import same_time

__all__ = ["error_words", "tie_error", "tied", "tied_with"]


def tie_error(*errors: float | None) -> float | None:
    """The error bar two estimates are compared within: the largest known.

    ``None`` when none is known (every estimate uncalibrated).

    Example:
        >>> tie_error(0.09, 0.12), tie_error(None, 0.09), tie_error(None, None)
        (0.12, 0.09, None)
    """
    known = [e for e in errors if e is not None]
    return max(known) if known else None


def tied(a: float, b: float, *errors: float | None) -> bool:
    """Whether estimates ``a`` and ``b`` cannot be ranked: within the error bar.

    Two estimates are equal when they differ by at most :func:`tie_error` of
    ``errors`` times the larger; with no error bar, only when they are equal.
    The same holds of rates (tokens/s): ``a`` and ``b`` within ``e`` of the
    larger exactly when their reciprocals are.

    Example:
        >>> tied(0.100, 0.109, 0.09, None), tied(0.100, 0.110, 0.09, 0.05)
        (True, False)
        >>> tied(0.1, 0.1, None), tied(0.1, 0.1000001, None)
        (True, False)
    """
    return same_time(a, b, tie_error(*errors))


def error_words(error: float | None, *, calibrated: bool = False) -> str:
    """An error bar in words: ``"±9%"``, or why there is none.

    ``calibrated``: whether the estimate's constants were fitted on a chip of
    its kind; such an estimate without an error bar (a program another
    compiler wrote, or one with Pallas kernels) claims none, and is not
    "uncalibrated".

    Example:
        >>> error_words(0.09), error_words(None)
        ('±9%', 'uncalibrated')
        >>> error_words(None, calibrated=True)
        'calibrated constants, no error bar claimed'
    """
    if error is not None:
        return f"±{error:.0%}"
    if calibrated:
        return "calibrated constants, no error bar claimed"
    return "uncalibrated"


def tied_with(
    names: list[str], errors: list[float | None], *, point: bool, sep: str = ", "
) -> str:
    """A verdict's words for the candidates tied with the best, or ``""``.

    ``errors`` are the best's and theirs; ``point``: whether the best has a
    point estimate (else their roofline ranges overlap).

    Example:
        >>> tied_with(["tp=8"], [0.14, 0.14], point=True)
        ' (tied with tp=8: their estimates are within ±14%)'
        >>> tied_with([], [None], point=True)
        ''
    """
    if not names:
        return ""
    words = " (tied with " + sep.join(names)
    if not point:
        return words + ": their estimates overlap)"
    error = tie_error(*errors)
    if error is None:
        return words + ": the same estimate)"
    return words + f": their estimates are within {error_words(error)})"

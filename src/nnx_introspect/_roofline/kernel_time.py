"""Pallas kernels in the time model: their time and the words that say how it was got.

A kernel's FLOPs (its own cost estimate or a rule over its shapes,
:mod:`nnx_introspect._xla.hlo.kernels`) run at the kernels' rate
(:attr:`~nnx_introspect._roofline.timing.TimeConstants.kernel_fraction`, an
attention kernel at its head dim's share of the matrix unit's width); the
words name that rate's calibration and each kernel left uncosted or bounded.
"""

from typing import Protocol

from nnx_introspect._xla import OpWork


class _Rates(Protocol):
    """What this module reads of the time model's constants.

    (:class:`~nnx_introspect._roofline.timing.TimeConstants`, not imported:
    that module imports this one.)
    """

    @property
    def version(self) -> str: ...
    @property
    def matmul_fraction(self) -> float: ...
    @property
    def kernel_fraction(self) -> float | None: ...
    @property
    def mxu_width(self) -> int | None: ...
    @property
    def kernels_calibrated(self) -> bool: ...
    @property
    def kernel_programs(self) -> int: ...
    @property
    def kernel_median_error(self) -> float | None: ...
    @property
    def kernel_worst_error(self) -> float | None: ...


__all__ = ["kernel_rate_words", "kernel_seconds", "kernel_words"]


def kernel_words(
    kernels: tuple[str, ...],
    uncosted: tuple[str, ...] = (),
    bounded: tuple[str, ...] = (),
    constants: _Rates | None = None,
) -> str:
    """What an estimate says of a program's Pallas kernels (``""``: none).

    ``constants``: the estimate's; where they are calibrated for kernels
    (:attr:`TimeConstants.kernels_calibrated`) the kernels are timed at the
    rate measured on the chip, else at the matrix unit's, uncalibrated.

    Example:
        >>> print(kernel_words(("splash_mha_fwd.1",), ("my_kernel.3",)))
        ; its 1 Pallas kernel (splash_mha_fwd.1) is timed at the matrix unit's rate, uncalibrated for kernels; Pallas kernel my_kernel.3 is not costed (no cost estimate, no rule): its FLOPs are left out
        >>> print(kernel_words(("a.1", "b.2"), bounded=("b.2",)))
        ; its 2 Pallas kernels (a.1, b.2) are timed at the matrix unit's rate, uncalibrated for kernels, the FLOPs of b.2 an upper bound (every block counted)
        >>> from nnx_introspect._roofline.timing import CONSTANTS
        >>> v5e = CONSTANTS["v5e"]
        >>> kernel_words(("gmm.1",), constants=v5e).startswith(
        ...     "; its 1 Pallas kernel (gmm.1) is timed at the rate measured on "
        ...     f"the chip (calibrated on {v5e.kernel_programs} kernel programs of "
        ...     f"a v5e chip at 512-wide blocks; held-out median "
        ...     f"{v5e.kernel_median_error:.0%}, worst {v5e.kernel_worst_error:.0%}); "
        ...     "no error bar is claimed for a program with kernels"
        ... )
        True
    """  # noqa: E501
    text = ""
    if kernels:
        one = len(kernels) == 1
        text += (
            f"; its {len(kernels)} Pallas kernel{'' if one else 's'} "
            f"({_names(kernels)}) {'is' if one else 'are'} timed at "
            + kernel_rate_words(constants)
        )
    if bounded:
        text += f", the FLOPs of {_names(bounded)} an upper bound (every block counted)"
    if uncosted:
        one = len(uncosted) == 1
        text += (
            f"; Pallas kernel{'' if one else 's'} {_names(uncosted)} "
            f"{'is' if one else 'are'} not costed (no cost estimate, no rule): "
            f"{'its' if one else 'their'} FLOPs are left out"
        )
    return text


def kernel_rate_words(c: _Rates | None) -> str:
    """The kernels' rate and what it was calibrated on."""
    if c is None or not c.kernels_calibrated:
        return "the matrix unit's rate, uncalibrated for kernels"
    return (
        f"the rate measured on the chip (calibrated on {c.kernel_programs} "
        f"kernel programs of a {c.version.split('/')[0][4:]} chip at 512-wide "
        f"blocks; held-out median {c.kernel_median_error:.0%}, worst "
        f"{c.kernel_worst_error:.0%}); no error bar is claimed for a program "
        "with kernels: smaller blocks run slower (splash attention at its "
        "default 128-wide blocks ran three training steps on the chip in "
        "1.48-1.98x their estimates)"
    )


def kernel_seconds(op: OpWork, c: _Rates, peak: float) -> float:
    """A Pallas kernel's FLOPs at the kernels' rate, in seconds.

    An attention kernel's run at its head dim's share of the matrix unit's
    width.

    Example:
        >>> import dataclasses
        >>> from nnx_introspect._roofline.timing import DATA_SHEET
        >>> attention = OpWork("kernel", 197e12, 0.0, 0, None, 1, head_dim=64)
        >>> kernel_seconds(attention, DATA_SHEET, 197e12)  # no width rule
        1.0
        >>> wide = dataclasses.replace(DATA_SHEET, kernel_fraction=0.5, mxu_width=128)
        >>> kernel_seconds(attention, wide, 197e12)  # half the rate, half the width
        4.0
    """
    fraction = c.matmul_fraction if c.kernel_fraction is None else c.kernel_fraction
    share = 1.0
    if c.mxu_width is not None and 0 < op.head_dim < c.mxu_width:
        share = op.head_dim / c.mxu_width
    return op.matmul_flops / (fraction * share * peak)


def _names(names: tuple[str, ...]) -> str:
    """The first three of ``names``, ``...`` after them if there are more."""
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")

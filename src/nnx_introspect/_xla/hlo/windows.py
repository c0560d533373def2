"""How many of a convolution's kernel taps meet data, from its ``window={...}``.

XLA:TPU writes dots as convolutions whose spatial dimensions are really batch
dimensions (``size=B stride=B-1 lhs_dilate=B``: of ``B`` taps one meets data)
or heads (``size=N pad=N-1_N-1`` over an input of one); a tap on padding or on
a hole of the input's dilation does no work. :func:`window_taps` counts the
taps that do, as XLA's own cost analysis does, for
the FLOPs of a convolution in :mod:`~nnx_introspect._xla.hlo.flops`.
"""

import math
import re

__all__ = ["window_taps"]


def _window_ints(window: str, key: str, dims: int, default: int) -> list[int] | None:
    """``key=AxB`` of ``window={...}`` as ints; ``default`` each where absent."""
    found = re.search(rf"\b{key}=([\dx]+)\b", window)
    if found is None:
        return [default] * dims
    values = [int(n) for n in found[1].split("x")]
    return values if len(values) == dims else None


def _dimension_taps(
    n: int, out: int, size: int, stride: int, low: int, lhs: int, rhs: int
) -> int:
    """Taps of one spatial dimension that meet data, summed over its outputs.

    Output ``o``'s tap ``t`` reads position ``o x stride + t x rhs - low`` of
    the input dilated ``lhs`` times (``n`` elements ``lhs`` apart): it meets
    data when that position is inside and a multiple of ``lhs``; padding and
    the dilation's holes are zeros, no work.
    """
    last = (n - 1) * lhs  # the dilated input's last position
    total = 0
    for t in range(size):
        c = t * rhs - low
        first = max(0, (-c + stride - 1) // stride)  # o x stride + c >= 0
        final = min(out - 1, (last - c) // stride)  # o x stride + c <= last
        if final < first:
            continue
        if lhs == 1:
            total += final - first + 1
            continue
        # o x stride = -c (mod lhs): one residue modulo lhs / gcd, or none
        g = math.gcd(stride, lhs)
        if c % g:
            continue
        m = lhs // g
        residue = (-c // g) * pow(stride // g, -1, m) % m if m > 1 else 0
        start = first + (residue - first) % m
        if start <= final:
            total += (final - start) // m + 1
    return total


def window_taps(
    window: str,
    inputs: tuple[int, ...] | None = None,
    outputs: tuple[int, ...] | None = None,
) -> float | None:
    """Kernel taps that meet the input per output element, from ``window={...}``.

    With the input's and the output's spatial sizes (``inputs``,
    ``outputs``: dimension 0, 1, ... of ``dim_labels``), the exact mean over
    the outputs: a tap on padding or on a hole of the input's dilation does no
    work. XLA:TPU writes a batched matmul as a convolution whose batch
    dimensions are spatial ones with ``size=B stride=B-1 lhs_dilate=B`` (of
    ``B`` taps one meets data), and a projection into heads as ``size=N
    pad=N-1_N-1`` over an input of one (one of ``N`` taps). Without the
    sizes, each dimension counts ``ceil(size / lhs_dilate)`` taps; ``None``
    without a window (the kernel's spatial sizes are then the taps).

    Example:
        >>> window_taps("{size=64x8 stride=63x7 lhs_dilate=64x8}")
        1
        >>> window_taps("{size=3x3 pad=1_1x1_1}"), window_taps("")
        (9, None)
        >>> window_taps("{size=1x16 pad=0_0x15_15 rhs_reversal=0x1}", (8, 1), (8, 16))
        1.0
        >>> window_taps("{size=3 pad=1_1}", (4,), (4,))  # the edges meet 2
        2.5
    """
    sizes = re.search(r"size=([\dx]+)", window)
    if sizes is None:
        return None
    dims = [int(n) for n in sizes[1].split("x")]
    dilation = _window_ints(window, "lhs_dilate", len(dims), 1)
    if inputs is None or outputs is None:
        return math.prod(
            -(-size // max(d, 1))
            for size, d in zip(dims, dilation or [1] * len(dims), strict=False)
        )
    strides = _window_ints(window, "stride", len(dims), 1)
    rhs = _window_ints(window, "rhs_dilate", len(dims), 1)
    pads = re.search(r"pad=([\d_x-]+)", window)
    lows = (
        [int(p.split("_")[0]) for p in pads[1].split("x")] if pads else [0] * len(dims)
    )
    if (
        dilation is None
        or strides is None
        or rhs is None
        or len(lows) != len(dims)
        or len(inputs) != len(dims)
        or len(outputs) != len(dims)
        or 0 in outputs
    ):
        return window_taps(window)
    taps = 1
    for n, out, size, stride, low, d, r in zip(
        inputs, outputs, dims, strides, lows, dilation, rhs, strict=True
    ):
        if n <= 0 or stride <= 0 or d <= 0 or r <= 0:
            return window_taps(window)
        taps *= _dimension_taps(n, out, size, stride, low, d, r)
    return taps / math.prod(outputs)

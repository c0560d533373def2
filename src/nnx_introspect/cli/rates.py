"""``--network-bandwidth``: a rate in bytes or bits per second, read without JAX.

NICs are sold in bits per second (``400Gb/s``, ``400Gbps``), memory in bytes:
both are accepted, told apart by the case of the ``b`` as the units' standards
write it (``Gb/s`` and ``Gbps`` are bits, ``GB/s``, ``GBps`` and ``GB`` bytes).
A lowercase ``b`` with no ``/s`` (``400Gb``) could be either and is refused.
``_step.inputs.as_network`` reads the same strings the same way (a test holds
the two equal).
"""

import argparse
import math
import re

_RATE = re.compile(
    r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([A-Za-z]*?)(/s|ps)?\s*", re.ASCII
)
_BYTES = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_BYTES |= {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_BITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_SI = {"": "", "k": "k", "m": "M", "g": "G", "t": "T"}

RATE_UNITS = (
    "bytes per second: B, kB, MB, GB, TB, KiB, MiB, GiB, TiB, each alone or "
    "with /s or ps (50GB, 50GB/s, 50GBps); bits per second: kb/s, Mb/s, Gb/s, "
    "Tb/s, kbps, Mbps, Gbps, Tbps, Gbit/s (400Gb/s = 50GB/s)"
)
"""The units ``--network-bandwidth`` takes, as its help and errors list them."""


def _bits_prefix(unit: str, rate: bool) -> str | None:
    """The SI prefix of a bits unit (``"g"`` for ``Gb``/``Gbit``), else ``None``."""
    lower = unit.lower()
    for spelt in ("bits", "bit"):
        if lower.endswith(spelt) and lower[: -len(spelt)] in _BITS:
            return lower[: -len(spelt)]
    if rate and unit.endswith("b") and unit[:-1].lower() in _BITS:
        return unit[:-1].lower()
    return None


def rate_bytes(text: str) -> int:
    """Bytes per second of ``text``; ``ValueError`` naming what is wrong.

    Example:
        >>> rate_bytes("400Gbps"), rate_bytes("400 Gb/s"), rate_bytes("50GB")
        (50000000000, 50000000000, 50000000000)
        >>> rate_bytes("50GB/s"), rate_bytes("1GiBps"), rate_bytes("800Mbit/s")
        (50000000000, 1073741824, 100000000)
        >>> rate_bytes("400Gb")
        Traceback (most recent call last):
        ...
        ValueError: '400Gb' may be bits or bytes: write 400Gb/s or 400Gbps for \
bits per second, 400GB or 400GB/s for bytes per second
    """
    match = _RATE.fullmatch(text)
    if match is None:
        raise ValueError(f"must be a rate like '400Gb/s' or '50GB', got {text!r} "
                         f"({RATE_UNITS})")  # fmt: skip
    number, unit, per_second = match.group(1), match.group(2), match.group(3)
    if not unit:
        raise ValueError(
            f"needs a unit, got {text!r}: write {number}Gb/s for bits per second "
            f"or {number}GB for bytes per second"
        )
    prefix = _bits_prefix(unit, per_second is not None)
    if prefix is not None:
        value = float(number) * _BITS[prefix] / 8
    elif unit.endswith("b") and unit[:-1].lower() in _BITS:
        si = _SI[unit[:-1].lower()]
        raise ValueError(
            f"{text.strip()!r} may be bits or bytes: write {number}{si}b/s or "
            f"{number}{si}bps for bits per second, {number}{si}B or {number}{si}B/s "
            "for bytes per second"
        )
    elif unit.lower() in _BYTES:
        value = float(number) * _BYTES[unit.lower()]
    else:
        raise ValueError(f"must be a rate like '400Gb/s' or '50GB', got {text!r} "
                         f"({RATE_UNITS})")  # fmt: skip
    if not math.isfinite(value) or not value.is_integer():
        raise ValueError(
            f"must be a whole number of bytes per second, got {text!r} "
            f"({value:g} bytes per second)"
        )
    if value <= 0:
        raise ValueError(f"must be positive, got {text!r}")
    return int(value)


def rate_arg(text: str) -> int:
    """``--network-bandwidth``: :func:`rate_bytes` for ``argparse``'s ``type=``."""
    try:
        return rate_bytes(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None

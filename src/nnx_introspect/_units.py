"""Quantities written for people: bytes with binary units.

The lowest module of the package (it imports nothing), so that the data of
:mod:`nnx_introspect._accelerators` can word a budget without the renderers.
"""

__all__ = ["format_bytes"]


def format_bytes(n: float) -> str:
    """Human-readable bytes with binary units.

    Example:
        >>> format_bytes(1536), format_bytes(512), format_bytes(16 * 2**30)
        ('1.50 KiB', '512 B', '16 GiB')
    """
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(value) < 1024 or unit == "PiB":
            if unit == "B":
                return f"{value:g} B"
            return f"{value:.2f} {unit}".replace(".00 ", " ")
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover

"""Plain text for people: bytes with binary units, an error on one line.

The lowest module of the package (it imports nothing): the data of
:mod:`nnx_introspect._accelerators` words a budget with it, and the command
line's target lookup its errors, without the renderers (rich) or JAX.
"""

__all__ = ["error_line", "format_bytes", "plural"]


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


def plural(n: int, noun: str) -> str:
    """``n`` and ``noun``, the noun plural unless ``n`` is 1: a count in words.

    Example:
        >>> plural(1, "device"), plural(8, "device"), plural(1, "cpu device")
        ('1 device', '8 devices', '1 cpu device')
    """
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def error_line(error: BaseException) -> str:
    """``error`` as one line of at most 300 characters: its type and message.

    Survives what user code raises: ``SystemExit`` (its code is shown) and an
    exception whose ``__str__`` itself raises.

    Example:
        >>> error_line(ValueError("bad   value"))
        'ValueError: bad value'
        >>> error_line(SystemExit("stop"))
        "SystemExit('stop')"
    """
    name = type(error).__name__
    try:
        if isinstance(error, SystemExit):  # `sys.exit("message")` or a code
            text = f"{name}({error.code!r})"
        else:
            text = " ".join(str(error).split())
            text = f"{name}: {text}" if text else name
    except Exception:  # a user exception whose __str__ or __repr__ fails
        text = f"{name}: <unprintable>"
    return text if len(text) <= 300 else text[:297] + "..."

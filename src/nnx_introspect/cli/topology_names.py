"""``--topology`` names and their device counts, read without JAX.

The library's table (:mod:`nnx_introspect._accelerators.topology`) imports
JAX with its checks; the command line refuses a name it does not hold (or a
mesh of another size) before JAX starts, from these spellings and count rules.
A test holds the two equal: the same device count for every name either
accepts, the same refusal for every name either refuses.
"""

import math
import re

__all__ = ["topology_devices"]

_CHIPS_2D = (1, 2, 4, 8, 16, 32, 64, 128, 256)
"""The chip counts of a v5e or v6e slice (``v5e-4`` is 2x2)."""

_TPU = {"v4": "cores", "v5e": "chips", "v5litepod": "chips", "v5p": "cores"}
_TPU |= {"v6e": "chips"}
_GPU = ("a100", "h100", "h200", "b200")
_MAX_GPUS = 16384
_MAX_COUNT_DIGITS = 6

_NAME = re.compile(
    r"(?:([0-9]+)x)?"
    f"({'|'.join(re.escape(s) for s in sorted((*_TPU, *_GPU), key=len)[::-1])})"
    r"-([0-9]+)"
)
_MAX_SLICES = 64

_EXAMPLES = "'v5e-4', 'v5e-256', 'v6e-8', 'v5p-8' (4 chips) or 'v4-16' (8 chips)"


def _family(spelling: str) -> str:
    return "v5e" if spelling == "v5litepod" else spelling


def _cube(chips: int) -> bool:
    """Whether ``chips`` is a Cloud TPU cube's: 4, 8, 16, 32... (2x2x1, 2x2x2...)."""
    return chips >= 4 and chips & (chips - 1) == 0


def topology_devices(name: str) -> int:
    """The JAX devices of the ``--topology`` ``name``, or a ``ValueError`` in its words.

    ``v5e-N`` and ``v6e-N`` count chips (1, 2, 4, ... 256); ``v4-N`` and
    ``v5p-N`` count TensorCores, two per chip and device (8, 16, ... 8192);
    ``a100-N``, ``h100-N``, ``h200-N`` and ``b200-N`` count GPUs (one host of
    1, 2, 4 or 8, or hosts of 8); ``<S>x<slice>`` is ``S`` TPU slices.

    Example:
        >>> [topology_devices(n) for n in ("v5e-4", "v5p-8", "h100-16", "2xv5e-256")]
        [4, 4, 16, 512]
        >>> topology_devices("v5e-3")
        Traceback (most recent call last):
        ...
        ValueError: --topology v5e-3: a v5e slice has one of [1, 2, 4, 8, 16, 32, 64, \
128, 256] chips, got 3.
    """
    match = _NAME.fullmatch(name.strip().lower())
    if match is None:
        shown = name if len(name) <= 60 else name[:57] + "..."
        raise ValueError(
            "--topology must name a Cloud TPU slice of the families ['v4', 'v5e', "
            f"'v5p', 'v6e'] such as {_EXAMPLES}, several slices such as "
            "'2xv5e-256', or NVIDIA GPUs of the families "
            f"{list(_GPU)} such as 'h100-8' or 'a100-64', got {shown!r}."
        )
    spelling, digits = match.group(2), match.group(3).lstrip("0") or "0"
    if match.group(1) is not None:
        return _slices(name, match.group(1), spelling, digits)
    family = _family(spelling)
    if len(digits) > _MAX_COUNT_DIGITS:
        raise ValueError(
            f"--topology {spelling}-N: the device count N has {len(digits)} digits; "
            f"no {family} target has more than {10**_MAX_COUNT_DIGITS - 1} devices. "
            f"Pass a count such as '{family}-8'."
        )
    count = int(digits)
    if _TPU.get(spelling) == "chips":
        if count not in _CHIPS_2D:
            raise ValueError(
                f"--topology {name}: a {family} slice has one of {list(_CHIPS_2D)} "
                f"chips, got {count}."
            )
        return count
    if _TPU.get(spelling) == "cores":
        if count % 2 or count < 8 or count > 8192 or not _cube(count // 2):
            raise ValueError(
                f"--topology {name}: {family}-N counts TensorCores (2 per chip); N "
                "must be 8, 16, 32, ... (a power of two up to 8192), got "
                f"{count}."
            )
        return count // 2
    one_host = count in (1, 2, 4, 8)
    if not one_host and (count % 8 or not 0 < count <= _MAX_GPUS):
        raise ValueError(
            f"--topology {name}: {family}-N counts GPUs: one host of 1, 2, 4 or 8, "
            f"or hosts of 8 (N a multiple of 8 up to {_MAX_GPUS}), got {count}."
        )
    return count


def _slices(name: str, count: str, spelling: str, digits: str) -> int:
    """The devices of ``count`` slices of ``spelling-digits`` (the library's rule)."""
    family = _family(spelling)
    one = f"{family}-{int(digits)}" if len(digits) <= _MAX_COUNT_DIGITS else ""
    if spelling not in _TPU:
        raise ValueError(
            f"--topology {name}: several slices joined by the data-center network "
            f"are a TPU target; name {family} GPUs as one '{family}-N' (N = "
            f"{family} GPUs in all, 8 a host)."
        )
    slices = int(count.lstrip("0") or "0") if len(count) <= 3 else _MAX_SLICES + 1
    if not 1 <= slices <= _MAX_SLICES:
        raise ValueError(
            f"--topology {name}: the number of slices must be 1 to {_MAX_SLICES}, "
            f"got {count!r}. Pass e.g. '2x{one}'."
        )
    return slices * topology_devices(one or f"{spelling}-{digits}")


def mesh_devices(axes: tuple[tuple[str, int], ...]) -> int:
    """The devices of a mesh's ``(axis, size)`` pairs.

    Example:
        >>> mesh_devices((("fsdp", 2), ("tp", 4)))
        8
    """
    return math.prod(size for _, size in axes)

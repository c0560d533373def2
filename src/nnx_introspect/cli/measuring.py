"""``--measure``: a warning before a run the devices cannot hold; a failed run's code.

``step`` and ``serve`` compile the program first (from the cache when it was
compiled before), compare its peak with the memory the run will have
(:func:`room_to_run`) and warn on stderr when it is more, before the measured
run starts. A run that fails (a program that
compiled but could not allocate its buffers) is shown in the report and exits
with 1, its error on stderr: never a success.
"""

import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from nnx_introspect.cli.args import PROG

__all__ = ["measurable", "measure_failed", "room_to_run", "warn_if_too_big"]


def measurable(devices: int) -> bool:
    """Whether this process has the ``devices`` a measured run needs.

    Without them the library refuses ``--measure`` at once (naming the
    flag); compiling first to warn would only delay that.
    """
    import jax

    return devices <= jax.device_count()


def warn_if_too_big(
    peak_bytes: int, devices: int, what: str, out: TextIO | None = None
) -> bool:
    """Warn on ``out`` (stderr) when ``peak_bytes`` per device exceed the room.

    ``what`` names the program (``"the step"``). Returns whether it warned.
    """
    from nnx_introspect._render import format_bytes

    room = room_to_run(devices)
    if room is None or peak_bytes <= room[0]:
        return False
    (sys.stderr if out is None else out).write(
        f"{PROG}: warning: {what} needs {format_bytes(peak_bytes)} per device (its "
        f"compiled peak), more than {room[1]} ({format_bytes(room[0])} per "
        "device): the measured run will likely fail to allocate; measuring "
        "anyway\n"
    )
    return True


def measure_failed(runs: Sequence[tuple[str, Any]], out: TextIO | None = None) -> bool:
    """Say on ``out`` (stderr) which measured runs failed; whether any did.

    ``runs`` are ``(program's name, its Measured or None)`` pairs.
    """
    failed = [(name, m.error) for name, m in runs if m is not None and m.error]
    for name, error in failed:
        (sys.stderr if out is None else out).write(
            f"{PROG}: error: the measured run of {name} failed: {error}\n"
        )
    return bool(failed)


def room_to_run(num_devices: int) -> tuple[int, str] | None:
    """The bytes a program may use on each of this process's first ``num_devices``.

    What a measured run has, before it runs: on an accelerator the first
    device's ``bytes_limit`` less its ``bytes_in_use`` (the allocator's
    figures); on the CPU, the host's available memory (Linux's
    ``MemAvailable``, else the free pages) shared by the CPU devices. Returns
    ``(bytes per device, where they come from in words)``, or ``None`` when
    the backend does not say.

    Example:
        >>> room = room_to_run(1)
        >>> room is None or (room[0] > 0 and "available" in room[1])
        True
    """
    import jax

    from nnx_introspect._render import format_bytes

    devices = jax.devices()[: max(num_devices, 1)]
    first = devices[0]
    if first.platform == "cpu":
        available = _host_available_bytes()
        if available is None:
            return None
        shared = f", shared by {num_devices} CPU devices" if num_devices > 1 else ""
        words = f"this host's {format_bytes(available)} of available memory{shared}"
        return available // max(num_devices, 1), words
    try:
        stats = first.memory_stats() or {}
    except Exception:  # a backend without statistics
        return None
    limit = stats.get("bytes_limit")
    if limit is None:
        return None
    free = int(limit) - int(stats.get("bytes_in_use", 0))
    words = (
        f"{format_bytes(free)} available on each {first.device_kind} (its "
        "allocator's bytes_limit less bytes_in_use)"
    )
    return free, words


def _host_available_bytes() -> int | None:
    """The host's available memory, or ``None`` when it does not say.

    ``MemAvailable`` of ``/proc/meminfo`` (Linux), else the free pages.
    """
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None

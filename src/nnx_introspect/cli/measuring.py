"""``--measure``: a warning before a run the devices cannot hold; a failed run's code.

``step`` and ``serve`` compile the program first (from the cache when it was
compiled before), compare its peak with the memory the run will have
(:func:`~nnx_introspect._step.measured.room_to_run`) and warn on stderr when
it is more, before the measured run starts. A run that fails (a program that
compiled but could not allocate its buffers) is shown in the report and exits
with 1, its error on stderr: never a success.
"""

import sys
from collections.abc import Sequence
from typing import Any, TextIO

from nnx_introspect.cli.args import PROG

__all__ = ["measurable", "measure_failed", "warn_if_too_big"]


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
    from nnx_introspect._step.measured import room_to_run

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

"""Keep native log lines of JAX's plugins (CUDA, libtpu) off the user's stderr.

Importing JAX with the CUDA PJRT plugin installed on a machine without a GPU
makes its C++ code write ``Could not find cuda drivers`` lines straight to file
descriptor 2, below anything Python's logging or ``warnings`` can filter. The
command line starts JAX inside :func:`native_stderr_filtered` (from
:mod:`nnx_introspect._xla.native_log`, which the library shares), which points file
descriptor 2 at a temporary file while JAX loads its plugins and backends, then
writes back every line that is not known plugin noise, so real errors still
reach the user.
"""

import contextlib
import gc
import os
import sys
import types
from collections.abc import Iterator
from typing import Any

from nnx_introspect._xla import NOISE, drop_noise, native_stderr_filtered

__all__ = [
    "NOISE",
    "drop_noise",
    "native_stderr_filtered",
    "orbax_leftovers_dropped",
    "start_jax_quietly",
]


def start_jax_quietly() -> None:
    """Import JAX and start its backends with the plugin noise filtered out."""
    with native_stderr_filtered():
        import jax

        jax.devices()


def _is_orbax_leftover(unraisable: Any) -> bool:
    """Whether an unraisable exception is a failed orbax restore's leftover.

    When orbax 0.12 fails part-way through reading a sharded array, it closes
    its event loop without cancelling the other reads: tensorstore's callbacks
    then hit the closed loop (``RuntimeError: Event loop is closed``) and the
    abandoned coroutines raise when collected. The command already reported
    the failure as one line; these are echoes of it.
    """
    error = unraisable.exc_value
    if isinstance(error, RuntimeError) and str(error) == "Event loop is closed":
        return True
    obj = unraisable.object
    code = (
        getattr(obj, "cr_code", None) if isinstance(obj, types.CoroutineType) else None
    )
    return code is not None and f"{os.sep}orbax{os.sep}" in code.co_filename


@contextlib.contextmanager
def orbax_leftovers_dropped() -> Iterator[None]:
    """Drop the unraisable leftovers of a failed orbax restore for the block.

    Every other unraisable exception reaches the hook that was installed
    before; the hook is restored (after a garbage collection that flushes the
    abandoned coroutines) when the block ends.
    """
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if not _is_orbax_leftover(unraisable):
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        gc.collect()
        sys.unraisablehook = previous

"""Keep native log lines of JAX's plugins (CUDA, libtpu) off the user's stderr.

Importing JAX with the CUDA PJRT plugin installed on a machine without a GPU
makes its C++ code write ``Could not find cuda drivers`` lines straight to file
descriptor 2, below anything Python's logging or ``warnings`` can filter. The
command line starts JAX inside :func:`native_stderr_filtered`, which points file
descriptor 2 at a temporary file while JAX loads its plugins and backends, then
writes back every line that is not known plugin noise, so real errors still
reach the user.
"""

import contextlib
import gc
import os
import re
import sys
import tempfile
import types
from collections.abc import Iterator
from typing import Any

__all__ = [
    "NOISE",
    "drop_noise",
    "native_stderr_filtered",
    "orbax_leftovers_dropped",
    "start_jax_quietly",
]

# Lines the CUDA plugin's stub and absl print when no GPU (or CUDA library) is
# present, and libtpu's probes of a TPU VM that is not there. Anything else
# that JAX writes while starting is passed through.
NOISE = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|[IWE]\d{4} [\d:.]+\s+\d+ (cudart_stub|cuda_executor|cuda_diagnostics"
    r"|cuda_dnn|cuda_fft|cuda_blas|xla_bridge|tpu_[a-z_]+|[a-z_]*tpu[a-z_]*)\.cc:"
    r"|.*\bINVALID_ARGUMENT\b.*\b(metadata|TPU)\b)"
)


def drop_noise(text: str) -> str:
    r"""``text`` without the lines :data:`NOISE` matches.

    Example:
        >>> drop_noise(
        ...     "WARNING: All log messages before absl::InitializeLog() is called "
        ...     "are written to STDERR\n"
        ...     "I0000 00:00:1796285128.637274   20770 cudart_stub.cc:31] Could not "
        ...     "find cuda drivers on your machine, GPU will not be used.\n"
        ...     "a real error\n"
        ... )
        'a real error\n'
    """
    kept = [line for line in text.splitlines(True) if not NOISE.match(line)]
    return "".join(kept)


@contextlib.contextmanager
def native_stderr_filtered() -> Iterator[None]:
    """Capture file descriptor 2 for the block; write back all but the noise."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            text = capture.read().decode("utf-8", "replace")
            rest = drop_noise(text)
            if rest:
                sys.stderr.write(rest)
                sys.stderr.flush()


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

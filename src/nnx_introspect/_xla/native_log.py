"""Native log lines on file descriptor 2: captured, and plugin noise dropped.

JAX's PJRT plugins log from C++ straight to file descriptor 2, below anything
Python's ``logging`` or ``warnings`` can filter: importing JAX with the CUDA
plugin installed on a machine without a GPU writes ``Could not find cuda
drivers`` lines, starting libtpu off a TPU VM writes its probes' errors, and
XLA writes its compile warnings. :func:`native_stderr_captured` keeps what a
block writes there; :func:`native_stderr_filtered` writes back all but the
known plugin noise (:data:`NOISE`), so real errors still reach the user. No
JAX here: this module is imported before JAX is.
"""

import contextlib
import os
import re
import sys
from collections.abc import Iterator

__all__ = [
    "NOISE",
    "drop_noise",
    "native_stderr_captured",
    "native_stderr_filtered",
    "python_log_dropped",
    "start_backends_quietly",
]

NOISE = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|[IWE]\d{4} [\d:.]+\s+\d+ (cudart_stub|cuda_executor|cuda_diagnostics"
    r"|cuda_dnn|cuda_fft|cuda_blas|xla_bridge|tpu_[a-z_]+|[a-z_]*tpu[a-z_]*)\.cc:"
    r"|.*\bINVALID_ARGUMENT\b.*\b(metadata|TPU)\b"
    r"|Failed to find host bounds for accelerator type: WARNING: could not "
    r"determine TPU"
    r"|WARNING: Logging before InitGoogle\(\) is written to STDERR"
    r"|=== Source Location Trace: ===\s*$"
    r"|learning/[\w/.-]+/libtpu[\w.-]*\.cc:\d+\s*$)"
)
"""Lines the CUDA plugin's stub and absl print when no GPU (or CUDA library) is
present, and libtpu's probes of a TPU VM that is not there (its "host bounds"
warning, its InitGoogle line and the source trace of its init)."""


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
def native_stderr_captured() -> Iterator[list[str]]:
    """What the block writes to file descriptor 2, kept off it.

    Yields a list that holds the captured text (one string) once the block
    ends; file descriptor 2 is restored, also on an error. Where it cannot be
    duplicated (closed), nothing is captured and the list stays empty.
    """
    import tempfile  # here, not at import: `nnx-introspect --help` stays fast

    captured: list[str] = []
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:
        yield captured
        return
    try:
        with tempfile.TemporaryFile(mode="w+b") as capture:
            os.dup2(capture.fileno(), 2)
            try:
                yield captured
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
                capture.seek(0)
                captured.append(capture.read().decode("utf-8", "replace"))
    finally:
        os.close(saved)


@contextlib.contextmanager
def native_stderr_filtered() -> Iterator[None]:
    """Capture file descriptor 2 for the block; write back all but the noise."""
    captured: list[str] = []
    try:
        with native_stderr_captured() as captured:
            yield
    finally:  # also when the block raises: real errors still reach the user
        rest = drop_noise("".join(captured))
        if rest:
            sys.stderr.write(rest)
            sys.stderr.flush()


@contextlib.contextmanager
def python_log_dropped(name: str) -> Iterator[None]:
    """Drop the records of Python logger ``name`` (and its children) in the block.

    A filter on each of the root logger's handlers and on Python's last-resort
    handler, removed when the block ends (also on an error): what JAX logs
    while it starts a plugin that cannot start (a traceback) is dropped, the
    loggers' own settings are never touched.

    Example:
        >>> import logging
        >>> with python_log_dropped("jax._src.xla_bridge"):
        ...     logging.getLogger("jax._src.xla_bridge").warning("dropped")
    """
    import logging

    def keep(record: logging.LogRecord) -> bool:
        return not (record.name == name or record.name.startswith(name + "."))

    handlers = [*logging.getLogger().handlers]
    if logging.lastResort is not None:
        handlers.append(logging.lastResort)
    for handler in handlers:
        handler.addFilter(keep)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(keep)


def start_backends_quietly() -> None:
    """Start JAX's backends in this process, the plugins' noise kept off stderr.

    Library code that needs this process's devices (a step compiled on a CPU
    mesh here, counting the devices) calls it first. Starting the backends is
    then the library's doing, not the caller's: a CUDA plugin that finds no
    GPU writes driver lines to file descriptor 2 and logs a traceback through
    ``jax._src.xla_bridge``, libtpu its probe errors; both are dropped, every
    other line is written back (:func:`native_stderr_filtered`). Cheap once
    the backends are started.

    Example:
        >>> start_backends_quietly()
        >>> import jax
        >>> jax.device_count() >= 1
        True
    """
    with native_stderr_filtered(), python_log_dropped("jax._src.xla_bridge"):
        import jax

        jax.devices()

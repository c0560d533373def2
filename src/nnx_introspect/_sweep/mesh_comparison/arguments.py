"""The arguments checked before anything compiles: what can travel to a worker.

A worker rebuilds each step from names and pickles: the model, loss and
optimizer by name (:meth:`~nnx_introspect.StepSpec.names` checks them), and
rules and specs that pickle (checked here). The executor, the default pool's
size and the timeout are checked here too.
"""

import concurrent.futures
import math
import pickle
from typing import Any

from nnx_introspect._sweep.mesh_comparison.rows import error_text
from nnx_introspect._typing import ArgumentError, as_int


def check_executor(executor: object, max_workers: Any) -> int | None:
    """``max_workers`` checked (``None`` unless given); TypeError for ``executor``."""
    if executor is not None and not isinstance(executor, concurrent.futures.Executor):
        raise TypeError(
            "`executor` must be a concurrent.futures.Executor (a "
            "ProcessPoolExecutor, dask's Client(...).get_executor(), ...) or None "
            f"for a local process pool, got a {type(executor).__name__}."
        )
    if max_workers is None:
        return None
    size = as_int(max_workers, "max_workers", minimum=1)
    if executor is not None:
        raise ArgumentError(
            "max_workers",
            f"`max_workers` ({size}) sizes the default process pool, but an "
            "`executor` was given: it brings its own workers. Pass one or the "
            "other.",
        )
    return size


def check_timeout(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool):
        raise TypeError(
            f"`timeout` must be a number of seconds (per candidate) or None for no "
            f"limit, got the bool {timeout!r}."
        )
    value = float(timeout)
    if not (math.isfinite(value) and value > 0):
        raise ArgumentError(
            "timeout",
            f"`timeout` must be a positive number of seconds (per candidate) or "
            f"None for no limit, got {timeout!r}.",
        )
    return value


BY_NAME = "each candidate's step compiles in a worker (`executor`), which rebuilds "
BY_NAME += "everything from names"


def check_picklable(value: Any, name: str) -> None:
    try:
        pickle.dumps(value)
    except Exception as error:
        raise ArgumentError(
            name,
            f"`{name}` must be picklable: {BY_NAME}, and pickle refuses it "
            f"({error_text(error)}). Use strings, tuples and PartitionSpecs.",
        ) from None

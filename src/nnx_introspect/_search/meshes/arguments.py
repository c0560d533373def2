"""The arguments checked before anything compiles: what can travel to a worker.

A worker rebuilds each step from names and pickles: the model as
``"package.module:factory"``, the loss as a name or an importable function,
the optimizer as a name, and rules and specs that pickle. The executor, the
default pool's size and the timeout are checked here too.
"""

import concurrent.futures
import math
import pickle
from typing import Any

import optax
from flax import nnx

from nnx_introspect._mesh import OPTIMIZER_NAMES, optimizer_from_name
from nnx_introspect._search.meshes.report import _error_text
from nnx_introspect._step.inputs import as_model, importable_name
from nnx_introspect._typing import as_int


def _check_executor(executor: object, max_workers: Any) -> int | None:
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
        raise ValueError(
            f"`max_workers` ({size}) sizes the default process pool, but an "
            "`executor` was given: it brings its own workers. Pass one or the "
            "other."
        )
    return size


def _check_timeout(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool):
        raise TypeError(
            f"`timeout` must be a number of seconds (per candidate) or None for no "
            f"limit, got the bool {timeout!r}."
        )
    value = float(timeout)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(
            f"`timeout` must be a positive number of seconds (per candidate) or "
            f"None for no limit, got {timeout!r}."
        )
    return value


_BY_NAME = "each candidate's step compiles in a worker (`executor`), which rebuilds "
_BY_NAME += "everything from names"


def _target_name(target: Any) -> str:
    """The ``"package.module:factory"`` a worker rebuilds the model from."""
    if isinstance(target, nnx.State):
        as_model(target)  # its TypeError: a step needs the module
    name = None if isinstance(target, nnx.Module) else importable_name(target)
    if name is None:
        raise ValueError(
            "`target` must be passed as 'package.module:factory' (or a factory "
            f"importable by that name), not a module object or a lambda: {_BY_NAME}."
        )
    return name


def _loss_by_name(loss: Any) -> str | None:
    if loss is None or isinstance(loss, str):
        return loss
    name = importable_name(loss)
    if name is None:
        raise ValueError(
            "`loss` must be 'mean', 'lm', None or a function importable as "
            f"'package.module:function' (not a lambda or closure): {_BY_NAME}."
        )
    return name


def _optimizer_by_name(
    optimizer: Any,
) -> tuple[str | None, optax.GradientTransformation | None]:
    if optimizer is None:
        return None, None
    if not isinstance(optimizer, str):
        raise ValueError(
            f"`optimizer` must be a name, one of {list(OPTIMIZER_NAMES)}, not an "
            f"optax object: {_BY_NAME}."
        )
    return optimizer.lower(), optimizer_from_name(optimizer)


def _check_picklable(value: Any, name: str) -> None:
    try:
        pickle.dumps(value)
    except Exception as error:
        raise ValueError(
            f"`{name}` must be picklable: {_BY_NAME}, and pickle refuses it "
            f"({_error_text(error)}). Use strings, tuples and PartitionSpecs."
        ) from None

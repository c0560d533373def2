"""The objectives a step differentiates (``"mean"``, ``"lm"``, callables).

Every objective returns ``(loss, aux)``: ``aux`` is ``None`` for the built-in
losses and for a callable returning a scalar, and the callable's second item when
it returns ``(loss, aux)`` (the ``has_aux=True`` idiom of flax and optax).
"""

import types
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from nnx_introspect._conventions import (
    KV_CACHE_CONVENTION,
    accepts_positional,
    call_parameters,
    follows_kv_cache_convention,
    logits_by_kv_cache_convention,
)
from nnx_introspect._render import error_line
from nnx_introspect._step.inputs import LossLike
from nnx_introspect._typing import ArgumentError


class _ModelError(Exception):
    """The model raised while called on the batch (inside the trace)."""


class _LossError(Exception):
    """The loss raised or returned something other than a scalar."""


class _OptimizerError(Exception):
    """The optimizer's update raised (inside the trace)."""


Objective = Callable[[Any, tuple[Any, ...]], tuple[Any, Any]]


def _call_model(model: Any, batch: tuple[Any, ...], loss: str | None) -> Any:
    """``model(*batch)``, or the KV-cache convention when the batch is its tokens.

    A model whose ``__call__`` cannot take the batch alone but follows
    ``model(tokens, positions, cache, attention_mask) -> (logits, cache)`` gets
    positions and a causal mask built here, no cache, and gives its logits;
    any other model is refused in one line naming a loss callable.
    """
    convention = not accepts_positional(model, len(batch))
    if convention and (len(batch) != 1 or not follows_kv_cache_convention(model)):
        raise ArgumentError("loss", _no_convention(model, batch, loss))
    try:
        if convention:
            return logits_by_kv_cache_convention(model, batch[0])
        return model(*batch)
    except Exception as error:
        raise _ModelError(error_line(error)) from error


def _no_convention(model: Any, batch: tuple[Any, ...], loss: str | None) -> str:
    params = call_parameters(model) or ()
    takes = ", ".join(p.name for p in params)
    given = ", ".join(_describe(leaf, 1) for leaf in batch)
    return (
        f"`loss={loss!r}` cannot call `{type(model).__name__}({takes})` with "
        f"`batch` ({given}): the built-in losses call `model(*batch)` or, for one "
        f"token array, {KV_CACHE_CONVENTION}; pass your own loss, "
        '`loss="pkg.mod:fn"` (--loss pkg.mod:fn), a function '
        "`fn(model, batch) -> loss` that calls the model as it wants"
    )


def _describe(value: Any, depth: int = 0) -> str:
    """``float32[2,16,64]``, ``a tuple of 2 (float32[2,16,64], dict)``, ``None``..."""
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None and not isinstance(value, type):
        name = getattr(dtype, "name", str(dtype))
        return f"{name}[{','.join(str(d) for d in shape)}]"
    if isinstance(value, tuple | list) and depth == 0:
        items = ", ".join(_describe(v, 1) for v in value[:4])
        more = ", ..." if len(value) > 4 else ""
        return f"a {type(value).__name__} of {len(value)} ({items}{more})"
    return "None" if value is None else type(value).__name__


def _is_array(value: Any) -> bool:
    return isinstance(value, jax.Array | jax.core.Tracer)


def _is_float_scalar(value: Any) -> bool:
    return (
        _is_array(value)
        and jnp.shape(value) == ()
        and jnp.issubdtype(jnp.result_type(value), jnp.floating)
    )


def _raised_in_model(error: BaseException) -> bool:
    """Whether ``error`` was raised inside a method of an ``nnx.Module``."""
    tb: types.TracebackType | None = error.__traceback__
    while tb is not None:
        if isinstance(tb.tb_frame.f_locals.get("self"), nnx.Module):
            return True
        tb = tb.tb_next
    return False


def _one_array(output: Any, loss: str) -> Any:
    if not _is_array(output):
        raise _LossError(
            f"`loss={loss!r}` needs the model to return one array, but it returned "
            f"{_describe(output)}; pass a loss callable that picks the logits, "
            "e.g. `lambda model, batch: model(*batch)[0].mean()` (importable by "
            "name for a child compile)"
        )
    return output


def _objective(loss: LossLike) -> Objective:
    if loss == "mean":

        def mean(model: Any, batch: tuple[Any, ...]) -> tuple[Any, Any]:
            out = _one_array(_call_model(model, batch, "mean"), "mean")
            return jnp.mean(jnp.asarray(out, jnp.float32)), None

        return mean
    if loss == "lm":

        def lm(model: Any, batch: tuple[Any, ...]) -> tuple[Any, Any]:
            logits = _one_array(_call_model(model, batch, "lm"), "lm")
            tokens = batch[0]
            shape = tuple(logits.shape)
            if len(shape) != 3 or shape[:2] != tuple(tokens.shape):
                raise _LossError(
                    "`loss='lm'` needs (batch, sequence, vocab) logits for "
                    f"(batch, sequence) tokens {tuple(tokens.shape)}, but the "
                    f"model returned {_describe(logits)}"
                )
            logits = jnp.asarray(logits[:, :-1], jnp.float32)
            value = optax.softmax_cross_entropy_with_integer_labels(
                logits, tokens[:, 1:]
            ).mean()
            return value, None

        return lm
    assert callable(loss)
    user: Callable[..., Any] = loss

    def custom(model: Any, batch: tuple[Any, ...]) -> tuple[Any, Any]:
        try:
            value = user(model, batch)
        except Exception as error:
            if _raised_in_model(error):
                raise _ModelError(error_line(error)) from error
            raise _LossError(error_line(error)) from error
        if _is_float_scalar(value):
            return value, None
        if (
            isinstance(value, tuple | list)
            and len(value) == 2
            and _is_float_scalar(value[0])
        ):
            return value[0], value[1]
        raise _LossError(
            "it must return a float scalar or a (float scalar, aux) pair, got "
            f"{_describe(value)}"
        )

    return custom

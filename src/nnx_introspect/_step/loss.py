"""The objectives a step differentiates (``"mean"``, ``"lm"``, callables)."""

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from nnx_introspect._step.formats import _one_line
from nnx_introspect._step.inputs import LossLike


class _ModelError(Exception):
    """The model raised while called on the batch (inside the trace)."""


class _LossError(Exception):
    """The loss raised or returned something other than a scalar."""


def _call_model(model: Any, batch: tuple[Any, ...]) -> Any:
    try:
        return model(*batch)
    except Exception as error:
        raise _ModelError(_one_line(error)) from error


def _objective(loss: LossLike) -> Callable[[Any, tuple[Any, ...]], Any]:
    if loss == "mean":

        def mean(model: Any, batch: tuple[Any, ...]) -> Any:
            leaves = jax.tree.leaves(_call_model(model, batch))
            if not leaves:
                raise _LossError("the model returned no array to average")
            total = sum(jnp.sum(jnp.asarray(x, jnp.float32)) for x in leaves)
            return total / sum(math.prod(jnp.shape(x)) for x in leaves)

        return mean
    if loss == "lm":

        def lm(model: Any, batch: tuple[Any, ...]) -> Any:
            logits = _call_model(model, batch)
            tokens = batch[0]
            shape = tuple(getattr(logits, "shape", ()))
            if len(shape) != 3 or shape[:2] != tuple(tokens.shape):
                raise _LossError(
                    "`loss='lm'` needs (batch, sequence, vocab) logits for "
                    f"(batch, sequence) tokens {tuple(tokens.shape)}, but the "
                    f"model returned shape {shape}"
                )
            logits = jnp.asarray(logits[:, :-1], jnp.float32)
            return optax.softmax_cross_entropy_with_integer_labels(
                logits, tokens[:, 1:]
            ).mean()

        return lm
    assert callable(loss)
    user: Callable[..., Any] = loss

    def custom(model: Any, batch: tuple[Any, ...]) -> Any:
        try:
            value = user(model, batch)
        except _ModelError:
            raise
        except Exception as error:
            raise _LossError(_one_line(error)) from error
        if jnp.shape(value) != () or not jnp.issubdtype(
            jnp.result_type(value), jnp.floating
        ):
            raise _LossError(
                f"it must return a float scalar, got shape {jnp.shape(value)} "
                f"dtype {jnp.result_type(value)}"
            )
        return value

    return custom

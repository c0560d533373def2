"""How a model is called: the calling conventions the step and serving recognise.

A model's ``__call__`` is read through its decorators (:func:`inspect.unwrap`:
tunix wraps every ``__call__`` in ``jax.named_scope``). Two conventions are
known: ``model(*batch)`` (the batch holds the model's positional arguments)
and the KV-cache convention of tunix and flax's gemma example,
``model(tokens, positions, cache, attention_mask) -> (logits, cache)``.
"""

import inspect
from typing import Any

import jax
import jax.numpy as jnp

__all__ = [
    "KV_CACHE_CONVENTION",
    "accepts_positional",
    "call_parameters",
    "causal_inputs",
    "follows_kv_cache_convention",
    "logits_by_kv_cache_convention",
]

KV_CACHE_CONVENTION = (
    "`model(tokens, positions, cache, attention_mask) -> (logits, cache)` "
    "(the tunix and flax-gemma convention)"
)
"""The KV-cache convention, as messages name it."""

_POSITIONAL = (
    inspect.Parameter.POSITIONAL_ONLY,
    inspect.Parameter.POSITIONAL_OR_KEYWORD,
)


def call_parameters(model: Any) -> tuple[inspect.Parameter, ...] | None:
    """The parameters of ``type(model).__call__`` after ``self``, decorators unwrapped.

    ``None`` when Python cannot read the signature (a builtin, a C extension).

    Example:
        >>> class M:
        ...     def __call__(self, tokens, positions=None): ...
        >>> [p.name for p in call_parameters(M())]
        ['tokens', 'positions']
    """
    if not callable(model):
        return None
    try:
        signature = inspect.signature(inspect.unwrap(type(model).__call__))
    except (TypeError, ValueError):
        return None
    return tuple(signature.parameters.values())[1:]


def accepts_positional(model: Any, count: int) -> bool:
    """Whether ``model`` can be called with ``count`` positional arguments alone.

    ``True`` when the signature cannot be read (the call itself will tell).

    Example:
        >>> class M:
        ...     def __call__(self, x, y=None): ...
        >>> accepts_positional(M(), 1), accepts_positional(M(), 3)
        (True, False)
    """
    params = call_parameters(model)
    if params is None:
        return True
    positional = [p for p in params if p.kind in _POSITIONAL]
    required = [p for p in positional if p.default is inspect.Parameter.empty]
    star = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    keyword_required = any(
        p.kind is inspect.Parameter.KEYWORD_ONLY
        and p.default is inspect.Parameter.empty
        for p in params
    )
    fits = len(required) <= count and (star or count <= len(positional))
    return fits and not keyword_required


def follows_kv_cache_convention(model: Any) -> bool:
    """Whether ``model`` takes ``(tokens, positions, cache, attention_mask)``.

    Read from the signature: four named positional parameters (a bare
    ``*args`` says nothing of the convention).

    Example:
        >>> class Gemma:
        ...     def __call__(self, last_tokens, positions, cache, attention_mask): ...
        >>> follows_kv_cache_convention(Gemma()), follows_kv_cache_convention(len)
        (True, False)
    """
    params = call_parameters(model)
    if params is None:
        return False
    return sum(p.kind in _POSITIONAL for p in params) >= 4


def causal_inputs(tokens: Any) -> tuple[jax.Array, jax.Array]:
    """``positions`` ``[B, T]`` (``0 .. T-1``) and a causal ``[B, T, T]`` bool mask.

    What a training step passes a KV-cache-convention model without a cache:
    each token at its index, reading itself and the tokens before it.

    Example:
        >>> positions, mask = causal_inputs(jnp.zeros((2, 3), jnp.int32))
        >>> positions.tolist()
        [[0, 1, 2], [0, 1, 2]]
        >>> mask[0].astype(int).tolist()
        [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    """
    b, t = tokens.shape
    positions = jnp.broadcast_to(jnp.arange(t), (b, t))
    mask = jnp.broadcast_to(jnp.tril(jnp.ones((t, t), dtype=bool)), (b, t, t))
    return positions, mask


def logits_by_kv_cache_convention(model: Any, tokens: Any) -> Any:
    """``model(tokens, positions, None, mask)``'s logits, without a KV cache.

    The logits are the first item of the ``(logits, cache)`` the convention
    returns; a model returning one array gives that array.

    Example:
        >>> class Echo:
        ...     def __call__(self, tokens, positions, cache, attention_mask):
        ...         return positions + attention_mask.sum(-1), cache
        >>> logits_by_kv_cache_convention(Echo(), jnp.zeros((1, 3), jnp.int32))
        Array([[1, 3, 5]], dtype=int32)
    """
    positions, mask = causal_inputs(tokens)
    out = model(tokens, positions, None, mask)
    if isinstance(out, tuple | list) and len(out) == 2:
        return out[0]
    return out

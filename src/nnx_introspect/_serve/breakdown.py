"""The buffers at a serving program's peak: weights, KV cache, logits, the rest.

A serving program compiled with XLA's dump is read as a training step's is,
by the same code (:func:`~nnx_introspect._step.compile.compile_or_recall`),
with the names this module gives its arguments and outputs: its
entry parameters are the served ``weights``, the ``KV cache`` (donated) and
the tokens and positions (``batch``); its outputs the ``logits`` and the new
``KV cache`` leaves; what the forward pass makes is a ``temporary`` (activations:
there is no backward pass to keep them for) or a collective's buffer.
"""

from typing import Any

import jax

from nnx_introspect._breakdown import ArgumentLeaf
from nnx_introspect._serve.programs import Inputs

__all__ = ["serve_leaves", "serve_outputs"]


def _key(entry: Any) -> str:
    for name in ("key", "name", "idx"):
        if hasattr(entry, name):
            return str(getattr(entry, name))
    return str(entry)


def _paths(tree: Any) -> list[str]:
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return ["/".join(_key(k) for k in path if _key(k) != "value") for path, _ in flat]


def serve_leaves(inputs: Inputs, name: str) -> tuple[ArgumentLeaf, ...]:
    """The program's flattened arguments as XLA numbers its entry parameters.

    ``(weights, cache, tokens, positions[, slot])``, as ``jax.jit`` flattens
    them.

    Example:
        >>> from nnx_introspect._serve.programs import Inputs
        >>> inputs = Inputs(None, {"w": 1}, {"layer_0": {"k": 2, "v": 3}},
        ...                 0, 0, 0, print)
        >>> [(a.parameter, a.path, a.kind) for a in serve_leaves(inputs, "decode")]
        [(0, 'w', 'weights'), (1, 'layer_0/k', 'KV cache'), \
(2, 'layer_0/v', 'KV cache'), (3, 'tokens', 'batch'), (4, 'positions', 'batch')]
    """
    kinds = [(path, "weights") for path in _paths(inputs.weights)]
    kinds += [(path, "KV cache") for path in _paths(inputs.cache)]
    kinds += [("tokens", "batch"), ("positions", "batch")]
    if name == "prefill":
        kinds.append(("slot", "batch"))
    return tuple(ArgumentLeaf(i, path, kind) for i, (path, kind) in enumerate(kinds))


def serve_outputs(inputs: Inputs) -> tuple[str, ...]:
    """A name per flattened output: the logits, then the new cache's leaves.

    Example:
        >>> from nnx_introspect._serve.programs import Inputs
        >>> inputs = Inputs(None, {}, {"layer_0": {"k": 2, "v": 3}}, 0, 0, 0, print)
        >>> serve_outputs(inputs)
        ('logits', 'KV cache layer_0/k', 'KV cache layer_0/v')
    """
    return ("logits", *(f"KV cache {path}" for path in _paths(inputs.cache)))

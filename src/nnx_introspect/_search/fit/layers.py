"""Which layer to rematerialise: the module class whose code keeps the most bytes.

The breakdown of a failing compile names each kept activation's innermost
user frame (file, line). A module class "holds" the bytes whose frame lies in
its ``__call__``; the class with the most, the model's own class left out (to
rematerialise it would recompute the whole forward), is the default.
"""

import inspect
import os
from collections import Counter
from typing import Any

from flax import nnx

from nnx_introspect._breakdown.report import Breakdown

__all__ = ["KEPT", "layer_to_remat"]

KEPT = "activation kept for backward"
"""The breakdown's kind of the bytes a rematerialisation frees."""


def _call_lines(cls: type) -> tuple[str, int, int] | None:
    """``(file, first line, last line)`` of ``cls.__call__``, if it has source."""
    call = cls.__dict__.get("__call__")
    if call is None:  # inherited: the class's own code holds nothing
        return None
    try:
        lines, first = inspect.getsourcelines(call)
        path = inspect.getsourcefile(call)
    except (OSError, TypeError):
        return None
    if path is None:
        return None
    return os.path.realpath(path), first, first + len(lines) - 1


def layer_to_remat(model: Any, breakdown: Breakdown | None) -> tuple[str | None, str]:
    """``(class name or None, how it was chosen)`` for ``model``.

    By the breakdown's kept bytes per class ``__call__`` when there are any;
    else the module class with the most instances (the repeated layer).

    Example:
        >>> from flax import nnx
        >>> from nnx_introspect.examples import llama_tiny
        >>> from nnx_introspect import abstract_model
        >>> layer_to_remat(abstract_model(llama_tiny), None)
        ('LlamaLayer', 'the module class repeated most (8 instances) with \
parameters of its own modules')
    """
    root = type(model)
    classes: dict[str, tuple[str, int, int]] = {}
    counts: Counter[str] = Counter()
    for _, module in nnx.iter_modules(model):
        cls = type(module)
        if cls is root:
            continue
        counts[cls.__name__] += 1
        where = _call_lines(cls)
        if where is not None:
            classes.setdefault(cls.__name__, where)
    held: Counter[str] = Counter()
    if breakdown is not None:
        for row in breakdown.rows:
            if row.kind != KEPT or row.source is None:
                continue
            path = os.path.realpath(row.source.file)
            for name, (file, first, last) in classes.items():
                if file == path and first <= row.source.line <= last:
                    held[name] += row.nbytes
    if held:
        name, nbytes = held.most_common(1)[0]
        return name, (
            f"its __call__ holds the most activations kept for the backward pass "
            f"({nbytes:,} bytes per device at the peak)"
        )
    layered = [
        (n, c) for n, c in counts.most_common() if c > 1 and _has_submodules(model, n)
    ]
    if layered:
        name, count = layered[0]
        return name, (
            f"the module class repeated most ({count} instances) with parameters "
            "of its own modules"
        )
    return None, "no module class repeats"


def _has_submodules(model: Any, name: str) -> bool:
    """Whether a module of class ``name`` holds other modules (a layer, not a leaf)."""
    for _, module in nnx.iter_modules(model):
        if type(module).__name__ == name:
            return any(m is not module for _, m in nnx.iter_modules(module))
    return False

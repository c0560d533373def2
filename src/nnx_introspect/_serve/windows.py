"""Sliding-window layers whose KV cache is sized in full: :func:`sliding_window_notes`.

Gemma 2 and 3 alternate global attention with layers that attend only over
the last ``sliding_window_size`` positions (tunix: ``attn_type`` of
``AttentionType.LOCAL_SLIDING``). tunix's sampler allocates every layer's
cache at the full context all the same, as does any cache made by
``init_cache``: the report compiles that cache, and says what a cache bounded
to the window for those layers would hold instead (arithmetic on the cache's
own bytes per position, labelled so).
"""

from typing import Any

from flax import nnx

from nnx_introspect._render import format_bytes

__all__ = ["sliding_window_notes", "window_layers"]


def _local(node: Any) -> int | None:
    """The window of a sliding-window attention module, else ``None``."""
    window = getattr(node, "sliding_window_size", None)
    kind = getattr(node, "attn_type", None)
    name = str(getattr(kind, "name", kind or "")).upper()
    if (
        isinstance(window, int)
        and window > 0
        and ("SLIDING" in name or "LOCAL" in name)
    ):
        return window
    return None


def window_layers(model: Any) -> tuple[int, tuple[int, ...]]:
    """``(attention layers, windows of the sliding ones)`` of ``model``.

    An attention layer is a module with an ``attn_type`` (tunix's Gemma) or a
    ``sliding_window_size``; a sliding one has a positive window and a kind
    naming a local or sliding window.

    Example:
        >>> from nnx_introspect.examples import llama_tiny
        >>> from nnx_introspect import abstract_model
        >>> window_layers(abstract_model(llama_tiny))
        (0, ())
    """
    total, windows = 0, []
    for _, node in nnx.iter_graph(model):
        if not isinstance(node, nnx.Module):
            continue
        if hasattr(node, "attn_type") or hasattr(node, "sliding_window_size"):
            total += 1
            window = _local(node)
            if window is not None:
                windows.append(window)
    return total, tuple(windows)


def sliding_window_notes(spec: Any, readings: Any) -> tuple[str, ...]:
    """One sentence on the sliding-window layers' cache, or none.

    ``spec`` is the :class:`~nnx_introspect._serve.spec.ServeSpec`, ``readings``
    the compiled :class:`~nnx_introspect._serve.compile.ServeReadings` (its
    cache's bytes per position of one sequence on a device, all layers).
    """
    total, windows = window_layers(spec.model)
    if not windows or total == 0 or readings.kv_bytes_per_token == 0:
        return ()
    context, rows = spec.context, spec.sequences // spec.data_parallel
    per_layer = readings.kv_bytes_per_token / total
    local = sum(min(w, context) for w in windows)
    full = per_layer * total * context * rows
    bounded = per_layer * ((total - len(windows)) * context + local) * rows
    sizes = sorted(set(windows))
    shown = ", ".join(f"{w:,}" for w in sizes)
    return (
        f"{len(windows)} of {total} attention layers attend over a sliding "
        f"window ({shown} positions), yet the cache holds all {context:,} "
        "positions for every layer, as tunix's sampler allocates it; a cache "
        "bounded to the window for those layers would hold "
        f"{format_bytes(bounded)} per device instead of {format_bytes(full)} "
        f"({1 - bounded / full:.0%} less; arithmetic on the cache's bytes per "
        "position, not compiled).",
    )

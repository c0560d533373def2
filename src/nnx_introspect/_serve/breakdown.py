"""The buffers at a serving program's peak: weights, KV cache, logits, the rest.

A serving program compiled with XLA's dump is read as a training step's is
(:func:`~nnx_introspect._xla.dump.read_peak`) and its buffers classified by
the same rules (:func:`~nnx_introspect._breakdown.report.classify`): its
entry parameters are the served ``weights``, the ``KV cache`` (donated) and
the tokens and positions (``batch``); its outputs the ``logits`` and the new
``KV cache`` leaves; what the forward pass makes is a ``temporary`` (activations:
there is no backward pass to keep them for) or a collective's buffer.
"""

import dataclasses
import shutil
import tempfile
import time
from typing import Any

import jax

from nnx_introspect._breakdown.report import ArgumentLeaf, Breakdown, classify
from nnx_introspect._render.formats import error_line
from nnx_introspect._serve.programs import Inputs, lower_program
from nnx_introspect._xla.analysis import compile_lowered
from nnx_introspect._xla.dump import DumpFormatError, read_peak
from nnx_introspect._xla.readings import XlaReadings

__all__ = ["compile_with_breakdown", "serve_leaves", "serve_outputs"]


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


def compile_with_breakdown(
    jitted: Any,
    args: tuple[Any, ...],
    mesh: Any,
    trace_devices: list[Any] | None,
    leaves: tuple[ArgumentLeaf, ...],
    outputs: tuple[str, ...],
) -> tuple[XlaReadings, Breakdown | None]:
    """XLA's numbers for the program and the breakdown of its peak.

    A breakdown that cannot be made (a compile refused for memory assigns no
    buffers; a dump this jaxlib's reader does not know) is
    the readings' ``breakdown_error`` and ``None``, never an exception.
    """
    start = time.perf_counter()
    lowered = lower_program(jitted, args, mesh, trace_devices)
    directory = tempfile.mkdtemp(prefix="nnx-introspect-serve-dump-")
    try:
        numbers = compile_lowered(lowered, mesh, start, dump_to=directory)
        if numbers.out_of_memory:
            why = (
                "the compiler refused the program for memory, so it assigned "
                "no buffers to break down"
            )
            return dataclasses.replace(numbers, breakdown_error=why), None
        try:
            peak = read_peak(directory, backend=numbers.backend)
            held = (
                (numbers.argument_bytes or 0)
                + (numbers.output_bytes or 0)
                + (numbers.temp_bytes or 0)
                - (numbers.alias_bytes or 0)
            )
            found = classify(peak, leaves, held_bytes=held, outputs=outputs)
        except (DumpFormatError, ValueError) as error:
            why = error_line(error)
            return dataclasses.replace(numbers, breakdown_error=why), None
        return numbers, found
    finally:
        shutil.rmtree(directory, ignore_errors=True)

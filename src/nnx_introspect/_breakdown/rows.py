"""Each buffer live at XLA's peak as a classified row: its kind, path or source.

The step's arguments as XLA numbers them (:class:`ArgumentLeaf`,
:func:`argument_leaves`), the row of one buffer (:class:`BreakdownRow`,
:func:`classify_buffer`, its user frame) and the row's JSON. Nothing here
compiles or reads a file.

The kinds and the order they are decided in: :mod:`~nnx_introspect._breakdown.kinds`.
"""

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from nnx_introspect._breakdown.kinds import ARGUMENT_KINDS, EXPERT_KINDS, KINDS
from nnx_introspect._typing import ArgumentError, typechecked
from nnx_introspect._xla import COLLECTIVES as _COLLECTIVES
from nnx_introspect._xla import REDUCING as _REDUCING
from nnx_introspect._xla import (
    Origin,
    PeakBuffer,
    PeakBuffers,
    SourceLocation,
    user_frame,
    user_frames,
)
from nnx_introspect._xla import source_json as _source_json

__all__ = [
    "ARGUMENT_KINDS",
    "EXPERT_KINDS",
    "KINDS",
    "TIMES",
    "ArgumentLeaf",
    "BreakdownRow",
    "ExpertSteps",
    "argument_leaves",
    "backward_has_begun",
    "classify_buffer",
    "expert_kind",
    "layout_links",
    "row_from_json",
    "row_json",
    "where",
]

_CACHE_OUTPUT: Final = "KV cache "
"""How a serving program names the new cache's leaves among its outputs."""

TIMES: Final = "\N{MULTIPLICATION SIGN}"
"""Written before a count of buffers alike: ``layers/*/w \N{MULTIPLICATION SIGN}4``."""
_FORWARD: Final = "jvp("
_BACKWARD: Final = "transpose("

ExpertSteps = Mapping[tuple[tuple[str, int], ...], str | None]
"""A mixture of experts' steps by their user frames (``(file, line)``,
innermost first): ``"expert dispatch"``, ``"expert combine"``, or ``None`` for
another step of the forward pass (see :mod:`~nnx_introspect._breakdown.kinds`,
rule 4b)."""


@dataclass(frozen=True)
class ArgumentLeaf:
    """One flattened argument of the jitted step: XLA's entry parameter number.

    Attributes:
        parameter: XLA's entry parameter number (the leaf's index when
            ``jax.jit`` flattens the step's arguments in order).
        path: its state path (``"layers/3/attn/q/kernel"``,
            ``"optimizer/opt_state/0/mu/..."``, ``"batch[0]"``).
        kind: one of :data:`ARGUMENT_KINDS`.

    Example:
        >>> ArgumentLeaf(0, "l1/kernel", "parameter").kind
        'parameter'
    """

    parameter: int
    path: str
    kind: str

    def __post_init__(self) -> None:
        if self.kind not in ARGUMENT_KINDS:
            raise ArgumentError(
                "kind",
                f"`kind` must be one of {list(ARGUMENT_KINDS)}, got {self.kind!r}.",
            )
        if self.parameter < 0:
            raise ArgumentError(
                "parameter",
                f"`parameter` must be a non-negative integer, got {self.parameter}.",
            )


@typechecked
def argument_leaves(
    parameters: Sequence[str],
    other_state: Sequence[str],
    optimizer_state: Sequence[str],
    n_batch: int,
) -> tuple[ArgumentLeaf, ...]:
    """The step's arguments numbered as XLA numbers its entry parameters.

    For the library's training step ``train(params, rest, opt_state, step,
    batch)`` (``jax.jit`` flattens them in that order, ``keep_unused=True``
    keeps every leaf): the parameters' paths, the other model state's, the
    optimizer's (its state's leaves, then ``"optimizer/step"``), then the batch
    as ``batch[0]``, ``batch[1]``, ... Steps without an optimizer pass an empty
    ``optimizer_state``.

    Args:
        parameters: the ``nnx.Param`` leaves' paths, in tree order.
        other_state: the other model state's paths, in tree order.
        optimizer_state: the optimizer's paths, in tree order.
        n_batch: how many arrays the batch has.

    Returns:
        One :class:`ArgumentLeaf` per entry parameter, numbered from 0.

    Example:
        >>> leaves = argument_leaves(["w"], ["bn/mean"], ["optimizer/step"], 1)
        >>> [(leaf.parameter, leaf.path, leaf.kind) for leaf in leaves]
        [(0, 'w', 'parameter'), (1, 'bn/mean', 'other model state'), \
(2, 'optimizer/step', 'optimizer state'), (3, 'batch[0]', 'batch')]
    """
    if n_batch < 0:
        raise ArgumentError(
            "n_batch", f"`n_batch` must be a non-negative integer, got {n_batch}."
        )
    kinds = (
        [(path, "parameter") for path in parameters]
        + [(path, "other model state") for path in other_state]
        + [(path, "optimizer state") for path in optimizer_state]
        + [(f"batch[{i}]", "batch") for i in range(n_batch)]
    )
    return tuple(ArgumentLeaf(i, path, kind) for i, (path, kind) in enumerate(kinds))


@dataclass(frozen=True)
class BreakdownRow:
    """One buffer live at the peak, classified.

    Attributes:
        kind: one of :data:`KINDS`.
        label: the argument's path, the output's name, or the source location
            (``"_mlp model.py:12"``), else XLA's op name or instruction.
        nbytes: its bytes in XLA's live-range accounting.
        shape: the array shape (``()`` for a tuple's index table).
        dtype: XLA's element type (``f32``, ``bf16``, ``tuple``, ...).
        instruction: the HLO instruction that defines it.
        opcode: that instruction's opcode.
        op_name: JAX's op name, if any.
        path: the argument's state path, for an entry parameter.
        source: the innermost user frame, if any.
        parameter: XLA's entry parameter number, for an entry parameter.
        output_index: its index in the step's output, for an output.
        memory_space: the memory space of its layout (``S(1)`` on XLA:TPU);
            0 for the device's main memory.
        aliases: the other values live at the peak that are this tensor: in
            the same bytes (``name{index}``, no bytes of their own) or in
            another layout (a copy, bitcast or reshape of it, or it of them:
            their instruction's name, a row of its own).
        stack: the user frames of its instruction, innermost first (every
            frame outside JAX, jaxlib, flax, optax and numpy): the call chain
            through the model's modules, ``LlamaLayer.__call__`` then
            ``Llama.__call__``, by which a row is attributed to each module
            class whose ``__call__`` it ran under.

    Example:
        >>> row = BreakdownRow("parameter", "l1/kernel", 8192, (512, 4), "f32", \
"w.1", "parameter", None, "l1/kernel", None, 0, None)
        >>> row.type_str
        'f32[512,4]'
    """

    kind: str
    label: str
    nbytes: int
    shape: tuple[int, ...]
    dtype: str
    instruction: str
    opcode: str
    op_name: str | None
    path: str | None
    source: SourceLocation | None
    parameter: int | None
    output_index: tuple[int, ...] | None
    memory_space: int = 0
    aliases: tuple[str, ...] = ()
    stack: tuple[SourceLocation, ...] = ()

    @property
    def type_str(self) -> str:
        """``f32[1024,4096]``, as XLA writes a shape."""
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"


def backward_has_begun(peak: PeakBuffers) -> bool:
    """Whether a buffer live at the peak was made by a backward op (rule 4).

    Example:
        >>> from nnx_introspect._xla.dump import PeakBuffers
        >>> backward_has_begun(PeakBuffers("cpu", "jit_f", 0, "x", 0, ()))
        False
    """
    return any(_BACKWARD in (b.op_name or "") for b in peak.buffers)


def classify_buffer(
    buffer: PeakBuffer,
    arguments: dict[int, ArgumentLeaf],
    outputs: Sequence[str],
    backward_begun: bool,
    gradients: frozenset[tuple[str, tuple[int, ...]]] = frozenset(),
    peak_time: int | None = None,
    experts: ExpertSteps | None = None,
) -> BreakdownRow:
    """One buffer live at the peak as a row: its kind by the module's rules.

    Args:
        buffer: The buffer, from XLA's dump.
        arguments: The step's leaves by XLA's entry parameter number.
        outputs: A name per top-level output index.
        backward_begun: :func:`backward_has_begun` of the peak.
        gradients: ``(element type, per-device shape)`` of each
            differentiated parameter.
        peak_time: the peak's program point: an asynchronous collective
            started by it and done after it is in flight (``None``: none is).
        experts: a mixture of experts' steps by their user frames
            (:data:`ExpertSteps`): a value made by a dispatch or combine step
            is of that kind, unless it is a gradient.

    Returns:
        The buffer's :class:`BreakdownRow`, labelled by its argument's path,
        its output's name or its user frame.
    """
    path: str | None = None
    source = user_frame(buffer.stack, buffer.source)
    cache_output = _cache_output(buffer, outputs)
    if cache_output is not None:  # the donated cache, updated in place
        kind, path = "KV cache", cache_output
        label = (
            f"{path} (its donated buffer, rewritten after the peak)"
            if buffer.empty
            else f"{path} (updated in place)"
        )
    elif buffer.empty:
        kind, label = "empty buffer", _empty_label(buffer, arguments, outputs)
    elif _in_flight(buffer, peak_time):
        kind = "collective in flight"
        label = _in_flight_label(buffer, arguments, source)
        if "all-to-all" in buffer.opcode:
            kind = expert_kind(user_frames(buffer.stack), experts) or kind
    elif buffer.parameter is not None:
        leaf = arguments[buffer.parameter]
        kind, path, label = leaf.kind, leaf.path, leaf.path
        if buffer.parameter_index:
            path = label = f"{leaf.path}{list(buffer.parameter_index)}"
    elif buffer.output_index is not None:
        kind = "output"
        first = buffer.output_index[0] if buffer.output_index else None
        name = (
            outputs[first]
            if first is not None and first < len(outputs)
            else f"output {list(buffer.output_index)}"
        )
        label = f"{name} ({where(source)})" if source else name
    elif (copied := _argument_of(buffer.op_name, arguments)) is not None:
        kind, label = copied.kind, f"copy of {copied.path}"
        if copied.kind == "KV cache":
            kind, label = "KV cache copy", _cache_copy_label(buffer, copied, source)
    elif (cached := _cache_origin(buffer.origin, arguments)) is not None:
        kind, label = "KV cache copy", _cache_copy_label(buffer, cached, source)
    elif (traced := _traced_argument(buffer.origin, arguments)) is not None:
        kind, label = traced
    else:
        kind = _role(buffer, backward_begun, gradients)
        if kind != "gradient":
            kind = expert_kind(user_frames(buffer.stack), experts) or kind
        label = where(source) if source else buffer.op_name or buffer.instruction
    return BreakdownRow(
        kind=kind,
        label=label,
        nbytes=buffer.nbytes,
        shape=buffer.shape,
        dtype=buffer.dtype,
        instruction=buffer.instruction,
        opcode=buffer.opcode,
        op_name=buffer.op_name,
        path=path,
        source=source,
        parameter=buffer.parameter,
        output_index=buffer.output_index,
        memory_space=buffer.memory_space,
        aliases=buffer.aliases,
        stack=user_frames(buffer.stack),
    )


def expert_kind(
    stack: Sequence[SourceLocation], experts: ExpertSteps | None
) -> str | None:
    """The role of the step that made a value, by its user frames, or ``None``.

    ``stack`` is the value's user frames, innermost first. Its innermost
    frames that name a step of ``experts`` decide: a value made inside a
    call that the traced program takes as one step (``jnp.take``) is named
    by the call's frames. A step of another role (``None``) ends the search,
    so an outer frame never names a value of an inner step.

    Example:
        >>> inner = SourceLocation("/m/moe.py", 30, "permute")
        >>> call = SourceLocation("/m/moe.py", 12, "MoE.__call__")
        >>> steps = {(("/m/moe.py", 12),): "expert dispatch",
        ...          (("/m/moe.py", 14),): None}
        >>> expert_kind((inner, call), steps)
        'expert dispatch'
        >>> expert_kind((SourceLocation("/m/moe.py", 14, "f"), call), steps) is None
        True
    """
    if not experts:
        return None
    frames = [(frame.file, frame.line) for frame in stack]
    depths = sorted({len(key) for key in experts}, reverse=True)
    for start in range(len(frames)):
        for depth in depths:
            key = tuple(frames[start : start + depth])
            if len(key) == depth and key in experts:
                found = experts[key]
                return found if found in EXPERT_KINDS else None
    return None


def _cache_output(buffer: PeakBuffer, outputs: Sequence[str]) -> str | None:
    """The cache leaf's path when ``buffer`` holds a new cache output, else ``None``."""
    if buffer.output_index is None or not buffer.output_index:
        return None
    first = buffer.output_index[0]
    name = outputs[first] if first < len(outputs) else ""
    return name.removeprefix(_CACHE_OUTPUT) if name.startswith(_CACHE_OUTPUT) else None


def _cache_origin(
    found: Origin | None, arguments: dict[int, ArgumentLeaf]
) -> ArgumentLeaf | None:
    """The cache leaf a copy, cast or transpose was made from, if it was one."""
    if found is None or not found.through:
        return None
    leaf = (
        arguments.get(found.parameter)
        if found.parameter is not None
        else _argument_of(found.op_name, arguments)
    )
    return leaf if leaf is not None and leaf.kind == "KV cache" else None


def _cache_copy_label(
    buffer: PeakBuffer, leaf: ArgumentLeaf, source: SourceLocation | None
) -> str:
    """``copy of layer_0/v: transpose, bf16[64,1,64,8192] at model.py:12``."""
    shape = f"{buffer.dtype}[{','.join(str(d) for d in buffer.shape)}]"
    op = (buffer.op_name or "").rsplit("/", 1)[-1] or buffer.opcode
    if op.startswith(("cache[", "cache.")):  # JAX names a copy by its argument
        op = buffer.opcode
    text = f"copy of {leaf.path}: {op}, {shape}"
    return f"{text} at {where(source)}" if source is not None else text


def _in_flight(buffer: PeakBuffer, peak_time: int | None) -> bool:
    """Whether ``buffer`` is an asynchronous collective's, started and not done."""
    return (
        peak_time is not None
        and buffer.opcode.endswith("-start")
        and buffer.opcode in _COLLECTIVES
        and buffer.done_at is not None
        and buffer.live_range is not None
        and buffer.live_range[0] <= peak_time < buffer.done_at
    )


def _in_flight_label(
    buffer: PeakBuffer, arguments: dict[int, ArgumentLeaf], source: Any
) -> str:
    """``all-gather of layers/0/w (in flight: points 1455-1465)``."""
    traced = _traced_argument(buffer.origin, arguments)
    what = (
        traced[1]
        if traced is not None
        else f"{buffer.opcode.removesuffix('-start')}"
        + (f" at {where(source)}" if source else "")
    )
    start = buffer.live_range[0] if buffer.live_range else None
    span = f"points {start}-{buffer.done_at}" if start is not None else ""
    return f"{what} (in flight{': ' + span if span else ''})"


def _empty_label(
    buffer: PeakBuffer, arguments: dict[int, ArgumentLeaf], outputs: Sequence[str]
) -> str:
    """``empty: held for output new params l1/kernel, its value written at point 9``."""
    if buffer.parameter is not None and buffer.parameter in arguments:
        held = f"argument {arguments[buffer.parameter].path}"
    elif buffer.output_index is not None:
        first = buffer.output_index[0] if buffer.output_index else None
        held = "output " + (
            outputs[first]
            if first is not None and first < len(outputs)
            else str(list(buffer.output_index))
        )
    else:
        held = buffer.instruction
    when = ""
    if buffer.live_range is not None:
        start, end = buffer.live_range
        if buffer.parameter is not None:  # its old value, dead by the peak
            when = f", its value last used at point {end}"
        elif buffer.output_index is not None:  # an output lives to the end
            when = f", its value written at point {start}"
        else:
            when = f", its value live at points {start}-{end}"
    return f"empty: held for {held}{when}"


def _traced_argument(
    found: Origin | None, arguments: dict[int, ArgumentLeaf]
) -> tuple[str, str] | None:
    """``(kind, label)`` of a copy, cast or gathering of a parameter (rule 3).

    Only parameters: a copy of optimizer state XLA makes for the update stays
    a temporary of it.
    """
    if found is None or not found.through:
        return None
    leaf = (
        arguments.get(found.parameter)
        if found.parameter is not None
        else _argument_of(found.op_name, arguments)
    )
    if leaf is None or leaf.kind != "parameter":
        return None
    collective = next((op for op in found.through if op in _COLLECTIVES), None)
    if collective is None:
        return leaf.kind, f"copy of {leaf.path}"
    return leaf.kind, f"{collective.removesuffix('-start')} of {leaf.path}"


def _role(
    buffer: PeakBuffer,
    backward_begun: bool,
    gradients: frozenset[tuple[str, tuple[int, ...]]],
) -> str:
    """The kind of a value made inside the step: rules 4 to 7."""
    op_name = buffer.op_name or ""
    found = buffer.origin
    role = found.op_name if found is not None and found.op_name else buffer.op_name
    through = found.through if found is not None else ()
    reducing = buffer.opcode in _REDUCING or any(op in _REDUCING for op in through)
    if (buffer.dtype, buffer.shape) in gradients and (
        _BACKWARD in op_name
        or (backward_begun and buffer.opcode in _REDUCING and not _is_forward(role))
    ):
        return "gradient"
    if (
        backward_begun
        and reducing
        and _BACKWARD in (role or "")
        and _partial_gradient(buffer, gradients)
    ):
        return "gradient"
    if backward_begun and _is_forward(role):
        return "activation kept for backward"
    if buffer.opcode in _COLLECTIVES:
        return "collective buffer"
    return "temporary"


_ARGUMENT_NAME = re.compile(r"([A-Za-z_]\w*)((?:\[[^\]]*\]|\.\w+)*)")
_ARGUMENT_KEY = re.compile(r"\['((?:[^'\\]|\\.)*)'\]|\[(-?\d+)\]|\.(\w+)")


def _argument_of(
    op_name: str | None, arguments: dict[int, ArgumentLeaf]
) -> ArgumentLeaf | None:
    """The argument whose path is ``op_name``, as JAX names a step's arguments.

    ``params['down']['kernel'].value`` names the parameter ``down/kernel``;
    ``opt_state[0].mu['w']`` the optimizer leaf ``optimizer/opt_state/0/mu/w``.
    ``None`` for JAX's op names (``jit(step)/...``) and for a path that names
    no argument or several of different kinds.

    Example:
        >>> leaves = {0: ArgumentLeaf(0, "down/kernel", "parameter"),
        ...           1: ArgumentLeaf(1, "optimizer/opt_state/0/mu/down/kernel",
        ...                           "optimizer state")}
        >>> _argument_of("params['down']['kernel'].value", leaves).kind
        'parameter'
        >>> _argument_of("opt_state[0].mu['down']['kernel']", leaves).kind
        'optimizer state'
        >>> _argument_of("jit(train)/jvp()/dot_general", leaves) is None
        True
    """
    found = _ARGUMENT_NAME.fullmatch(op_name or "")
    if found is None or not found[2]:
        return None
    keys = [
        next(part for part in key.groups() if part is not None)
        for key in _ARGUMENT_KEY.finditer(found[2])
    ]
    if keys and keys[-1] in ("value", "raw_value"):
        keys = keys[:-1]
    if not keys:
        return None
    joined = "/".join(keys)
    scoped = f"{found[1]}/{joined}"
    matches = {
        leaf.kind: leaf
        for leaf in arguments.values()
        if leaf.path == joined
        or leaf.path == scoped
        or leaf.path.endswith("/" + scoped)
    }
    return next(iter(matches.values())) if len(matches) == 1 else None


def _partial_gradient(
    buffer: PeakBuffer, gradients: frozenset[tuple[str, tuple[int, ...]]]
) -> bool:
    """Whether ``buffer`` has a gradient's type, or a partial sum's of one.

    A partial sum before its reduce-scatter is the gradient's shard with
    some dimensions whole: each a multiple of the shard's.
    """
    return any(
        dtype == buffer.dtype
        and len(shape) == len(buffer.shape)
        and all(
            d and whole % d == 0 for whole, d in zip(buffer.shape, shape, strict=True)
        )
        for dtype, shape in gradients
    )


def layout_links(peak: PeakBuffers) -> dict[str, tuple[str, ...]]:
    """The buffers live at the peak that are one tensor in two layouts, by name.

    Two buffers are linked when one's origin was followed through the other
    by layout changes only (a copy, bitcast, reshape or transpose of the same
    element type and count): each lists the other.

    Example:
        >>> from nnx_introspect._xla.dump import PeakBuffers
        >>> layout_links(PeakBuffers("cpu", "jit_f", 0, "x", 0, ()))
        {}
    """
    names = {b.instruction for b in peak.buffers}
    links: dict[str, set[str]] = {}
    for b in peak.buffers:
        for other in b.origin.layouts if b.origin is not None else ():
            if other in names and other != b.instruction:
                links.setdefault(b.instruction, set()).add(other)
                links.setdefault(other, set()).add(b.instruction)
    return {name: tuple(sorted(found)) for name, found in links.items()}


def _is_forward(op_name: str | None) -> bool:
    return op_name is not None and _FORWARD in op_name and _BACKWARD not in op_name


def where(source: SourceLocation | None) -> str:
    """A source location as ``"function file.py:12"``; ``"(no source)"`` for none.

    Example:
        >>> where(SourceLocation("/src/model.py", 12, "_mlp"))
        '_mlp model.py:12'
    """
    if source is None:
        return "(no source)"
    return f"{source.function} {os.path.basename(source.file)}:{source.line}"


def row_json(row: BreakdownRow) -> dict[str, Any]:
    """A row as JSON, in exact integers (:func:`row_from_json` reads it back)."""
    return {
        "kind": row.kind,
        "label": row.label,
        "bytes": row.nbytes,
        "shape": list(row.shape),
        "dtype": row.dtype,
        "instruction": row.instruction,
        "opcode": row.opcode,
        "op_name": row.op_name,
        "path": row.path,
        "source": _source_json(row.source),
        "parameter": row.parameter,
        "output_index": None if row.output_index is None else list(row.output_index),
        "memory_space": row.memory_space,
        "aliases": list(row.aliases),
        "stack": [_source_json(frame) for frame in row.stack],
    }


def row_from_json(data: dict[str, Any]) -> BreakdownRow:
    """The row :func:`row_json` wrote.

    Example:
        >>> row = BreakdownRow("batch", "batch[0]", 96, (8, 3), "f32", "x", \
"parameter", "x", "batch[0]", None, 0, None)
        >>> row_from_json(row_json(row)) == row
        True
    """
    source = data.get("source")
    index = data.get("output_index")
    return BreakdownRow(
        kind=str(data["kind"]),
        label=str(data["label"]),
        nbytes=int(data["bytes"]),
        shape=tuple(int(d) for d in data["shape"]),
        dtype=str(data["dtype"]),
        instruction=str(data["instruction"]),
        opcode=str(data["opcode"]),
        op_name=data.get("op_name"),
        path=data.get("path"),
        source=None
        if source is None
        else SourceLocation(
            str(source["file"]), int(source["line"]), str(source["function"])
        ),
        parameter=data.get("parameter"),
        output_index=None if index is None else tuple(int(i) for i in index),
        memory_space=int(data.get("memory_space", 0)),
        aliases=tuple(str(name) for name in data.get("aliases", ())),
        stack=tuple(
            SourceLocation(str(f["file"]), int(f["line"]), str(f["function"]))
            for f in data.get("stack", ())
        ),
    )

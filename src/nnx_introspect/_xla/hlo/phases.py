"""The phases of a training step's schedule: forward, backward, optimizer update.

JAX names each op under ``jax.value_and_grad`` by the transformation that made
it: forward ops carry ``jvp(`` (``jit(train)/jvp()/dot_general``), backward ops
``transpose(`` (``jit(train)/transpose(jvp())/dot_general``). The backward
pass begins at the first backward op that depends on at least half of the
forward pass's floating-point ops (transitively, through its operands): the
loss's gradient, made from the logits, which need every layer. Backward ops
that need less (the cotangent's seed, a constant; index arithmetic on the
tokens; a transposed weight for a later matmul) may be scheduled anywhere,
and XLA:CPU does schedule them early (on the tiny Llama of the tests, the
first at point 88 of 1,699, the gradient's first op at 829, just after the
logits). The optimizer
update is an op outside both whose stack has a frame in optax and that
depends (through its operands) on a backward op: it consumes a gradient. An
optax op that needs no gradient (Adam's step count ``count + 1``) may be
scheduled anywhere and marks no phase.

The phases are read off the schedule (XLA's ``InstructionSequence``, program
point to instruction): the backward pass begins at the first backward op, the
optimizer update at the first update op. XLA may interleave them (the last
layers' update before the first layers' backward); a point's phase is the
latest of the three begun by it.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from nnx_introspect._xla.hlo.frames import in_package, source_stack
from nnx_introspect._xla.hlo.instructions import metadata
from nnx_introspect._xla.hlo.module import Module
from nnx_introspect._xla.hlo.text import HloTextError

__all__ = ["PHASES", "Phase", "Phases", "op_phase", "schedule_phases"]

Phase = Literal["forward", "backward", "optimizer"]
PHASES: Final = ("forward", "backward", "optimizer")
"""The phases of a training step, in the order they begin."""
_FORWARD: Final = "jvp("
_BACKWARD: Final = "transpose("
_FLOAT: Final = re.compile(r"(?<![\w])(?:bf16|f8\w*|f16|f32|f64)\[")
"""A floating-point array in a shape's text: a value the gradient flows through."""


@dataclass(frozen=True)
class Phases:
    """Where the backward pass and the optimizer update begin in the schedule.

    Attributes:
        backward_start: the first program point of a backward op; ``None``
            when the program has none (a forward pass).
        optimizer_start: the first program point of an optimizer-update op
            (an optax op that consumes a gradient); ``None`` when none.

    Example:
        >>> phases = Phases(backward_start=10, optimizer_start=30)
        >>> phases.at(3), phases.at(12), phases.at(30)
        ('forward', 'backward', 'optimizer')
        >>> Phases(None, None).at(3) is None
        True
    """

    backward_start: int | None
    optimizer_start: int | None

    def at(self, point: int) -> Phase | None:
        """The latest phase begun by ``point``; ``None`` for a program with neither."""
        if self.optimizer_start is not None and point >= self.optimizer_start:
            return "optimizer"
        if self.backward_start is not None and point >= self.backward_start:
            return "backward"
        if self.backward_start is None and self.optimizer_start is None:
            return None
        return "forward"


def op_phase(op_name: str | None) -> Phase | None:
    """``forward`` or ``backward`` by JAX's op name; ``None`` for other ops.

    A fusion whose op name joins ops of both passes is neither.

    Example:
        >>> op_phase("jit(train)/jvp()/dot_general")
        'forward'
        >>> op_phase("jit(train)/transpose(jvp())/dot_general")
        'backward'
        >>> op_phase("jit(train)/mul") is None
        True
        >>> op_phase("jit(t)/(jvp()/reduce_sum:transpose(jvp())/dot_general)") is None
        True
    """
    name = op_name or ""
    # a multi-output fusion names its ops together: "jit(t)/(jvp()/a:transpose(...)/b)"
    parts = name.split(":") if ":" in name else [name]
    phases: set[Phase | None] = set()
    for part in parts:
        if _BACKWARD in part:
            phases.add("backward")
        elif _FORWARD in part:
            phases.add("forward")
        else:
            phases.add(None)
    return phases.pop() if len(phases) == 1 else None


def schedule_phases(sequence: Mapping[int, str], module: Module) -> Phases:
    r"""Where the backward pass and the optimizer update begin in ``sequence``.

    Args:
        sequence: the instruction at each program point (XLA's
            ``InstructionSequence``); names not in ``module`` are skipped.
        module: the compiled module, for each instruction's metadata and
            operands.

    Returns:
        The first point of each (see the module's docstring).

    Example:
        >>> from nnx_introspect._xla.hlo.module import parse_module
        >>> module = parse_module("\n".join([
        ...     "HloModule m", "", "ENTRY %main (p: f32[4]) -> f32[4] {",
        ...     "  %p = f32[4]{0} parameter(0)",
        ...     '  %s = f32[4]{0} sine(%p),'
        ...     ' metadata={op_name="jit(t)/transpose(jvp())/seed"}',
        ...     '  %f = f32[4]{0} sine(%p), metadata={op_name="jit(t)/jvp()/sin"}',
        ...     '  ROOT %b = f32[4]{0} cosine(%f),'
        ...     ' metadata={op_name="jit(t)/transpose(jvp())/cos"}', "}"]))
        >>> schedule_phases({0: "p", 1: "s", 2: "f", 3: "b"}, module)
        Phases(backward_start=3, optimizer_start=None)
    """
    points = [p for p in sorted(sequence) if sequence[p] in module.instructions]
    # the forward ops each value depends on, as bits (forward ops numbered in
    # schedule order), floating-point values only
    ancestry: dict[str, int] = {}
    phase_of: dict[int, Phase | None] = {}
    forward = 0
    for point in points:
        found = module.instructions[sequence[point]]
        items = metadata(found.text)
        phase_of[point] = op_phase(items.get("op_name"))
        bits = 0
        for op in found.operands:
            bits |= ancestry.get(op, 0)
        if phase_of[point] == "forward" and _FLOAT.search(found.shape):
            bits |= 1 << forward
            forward += 1
        ancestry[found.name] = bits
    backward = [p for p in points if phase_of[p] == "backward"]
    backward_start = next(
        (p for p in backward if 2 * ancestry[sequence[p]].bit_count() >= forward),
        None,
    )
    after = set(backward)
    optimizer_start: int | None = None
    needs_gradient: set[str] = set()
    for point in points:
        found = module.instructions[sequence[point]]
        if (
            backward_start is not None and point >= backward_start and point in after
        ) or any(op in needs_gradient for op in found.operands):
            needs_gradient.add(found.name)
        if (
            phase_of[point] is None
            and found.name in needs_gradient
            and _in_optax(metadata(found.text), module)
        ):
            optimizer_start = point
            break
    return Phases(backward_start, optimizer_start)


def _in_optax(items: dict[str, str], module: Module) -> bool:
    try:
        stack = source_stack(items, module.frames)
    except HloTextError:
        return False
    return any(in_package(frame.file, "optax") for frame in stack)

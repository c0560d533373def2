"""The phases of a training step's schedule: forward, backward, optimizer update.

JAX names each op under ``jax.value_and_grad`` by the transformation that made
it: forward ops carry ``jvp(`` (``jit(train)/jvp()/dot_general``), backward ops
``transpose(`` (``jit(train)/transpose(jvp())/dot_general``). The backward
pass begins at the first backward op that depends on a forward op (the
cotangent's seed, a constant, may be scheduled anywhere). The optimizer
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

    Example:
        >>> op_phase("jit(train)/jvp()/dot_general")
        'forward'
        >>> op_phase("jit(train)/transpose(jvp())/dot_general")
        'backward'
        >>> op_phase("jit(train)/mul") is None
        True
    """
    name = op_name or ""
    if _BACKWARD in name:
        return "backward"
    if _FORWARD in name:
        return "forward"
    return None


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
    backward_start: int | None = None
    optimizer_start: int | None = None
    after_forward: set[str] = set()
    needs_gradient: set[str] = set()
    for point in sorted(sequence):
        found = module.instructions.get(sequence[point])
        if found is None:
            continue
        items = metadata(found.text)
        phase = op_phase(items.get("op_name"))
        if phase == "forward" or any(op in after_forward for op in found.operands):
            after_forward.add(found.name)
        backward = phase == "backward" and found.name in after_forward
        if backward or any(op in needs_gradient for op in found.operands):
            needs_gradient.add(found.name)
        if backward and backward_start is None:
            backward_start = point
        if (
            optimizer_start is None
            and phase is None
            and found.name in needs_gradient
            and _in_optax(items, module)
        ):
            optimizer_start = point
    return Phases(backward_start, optimizer_start)


def _in_optax(items: dict[str, str], module: Module) -> bool:
    try:
        stack = source_stack(items, module.frames)
    except HloTextError:
        return False
    return any(in_package(frame.file, "optax") for frame in stack)

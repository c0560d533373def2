r"""How many times a while loop runs its body: XLA's stated trip count, or a counter's.

Shared by the collectives reader (a collective in a loop runs once per trip)
and the cost analysis (XLA's ``HloCostAnalysis`` counts a loop's body once, so
its FLOPs and bytes are multiplied by the trips here).

Example:
    >>> from nnx_introspect._xla.hlo import parse_module
    >>> module = parse_module("\n".join([
    ...     "HloModule jit_f",
    ...     "",
    ...     "%body (p: (s32[])) -> (s32[]) {",
    ...     "  %p = (s32[]) parameter(0)",
    ...     "  %i = s32[] get-tuple-element(%p), index=0",
    ...     "  %one = s32[] constant(1)",
    ...     "  %next = s32[] add(%i, %one)",
    ...     "  ROOT %t = (s32[]) tuple(%next)",
    ...     "}",
    ...     "",
    ...     "%cond (q: (s32[])) -> pred[] {",
    ...     "  %q = (s32[]) parameter(0)",
    ...     "  %j = s32[] get-tuple-element(%q), index=0",
    ...     "  %n = s32[] constant(12)",
    ...     "  ROOT %lt = pred[] compare(%j, %n), direction=LT",
    ...     "}",
    ...     "",
    ...     "ENTRY %main () -> (s32[]) {",
    ...     "  %zero = s32[] constant(0)",
    ...     "  %init = (s32[]) tuple(%zero)",
    ...     "  ROOT %w = (s32[]) while(%init), condition=%cond, body=%body",
    ...     "}",
    ... ]))
    >>> trip_count(module.instructions["w"], module)
    12
"""

import re

from nnx_introspect._xla.hlo.instructions import Instruction, names_in
from nnx_introspect._xla.hlo.module import Module

__all__ = ["trip_count"]

_KNOWN_TRIPS = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')


def trip_count(loop: Instruction, module: Module) -> int | None:
    """How many times ``loop`` runs its body; ``None`` when the program does not say.

    XLA's ``known_trip_count`` (XLA:CPU and XLA:GPU state it), else the trips
    of a counter XLA:TPU leaves unstated (:func:`_counter_trips`).
    """
    stated = _KNOWN_TRIPS.search(loop.attributes.get("backend_config", ""))
    if stated:
        return int(stated[1])
    return _counter_trips(loop, module)


def _through_copies(name: str, module: Module) -> Instruction | None:
    seen = set()
    at = module.instructions.get(name)
    while at is not None and at.opcode in ("copy", "bitcast") and at.name not in seen:
        seen.add(at.name)
        at = module.instructions.get(at.operands[0]) if at.operands else None
    return at


def _constant(name: str, module: Module) -> int | None:
    at = _through_copies(name, module)
    if at is None or at.opcode != "constant":
        return None
    try:
        return int(at.operand_text.strip())
    except ValueError:
        return None


def _tuple_index(name: str, module: Module) -> int | None:
    """``i`` when ``name`` is ``get-tuple-element(<the parameter>), index=i``."""
    at = _through_copies(name, module)
    if at is None or at.opcode != "get-tuple-element" or not at.operands:
        return None
    source = module.instructions.get(at.operands[0])
    if source is None or source.opcode != "parameter":
        return None
    index = at.attributes.get("index", "")
    return int(index) if index.isdigit() else None


def _counter_trips(loop: Instruction, module: Module) -> int | None:
    """Trips of ``for (i = K; i < N; i += c)`` written as XLA:TPU leaves it.

    The condition's root compares a tuple element ``i`` of its parameter
    ``LT`` a constant ``N``; the body's root tuple sets element ``i`` to itself
    plus a positive constant ``c``; the loop's initial tuple holds a constant
    ``K`` there (copies allowed anywhere). Anything else: ``None``.
    """
    condition = names_in(loop.attributes.get("condition", ""))
    body = names_in(loop.attributes.get("body", ""))
    if len(condition) != 1 or len(body) != 1 or len(loop.operands) != 1:
        return None
    cond_root = module.root(condition[0])
    body_root = module.root(body[0])
    start = _through_copies(loop.operands[0], module)
    if (
        cond_root is None
        or body_root is None
        or start is None
        or cond_root.opcode != "compare"
        or cond_root.attributes.get("direction") != "LT"
        or len(cond_root.operands) != 2
        or body_root.opcode != "tuple"
        or start.opcode != "tuple"
    ):
        return None
    index = _tuple_index(cond_root.operands[0], module)
    bound = _constant(cond_root.operands[1], module)
    if index is None or bound is None:
        return None
    if index >= len(body_root.operands) or index >= len(start.operands):
        return None
    first = _constant(start.operands[index], module)
    step_of = _through_copies(body_root.operands[index], module)
    if first is None or step_of is None or step_of.opcode != "add":
        return None
    if len(step_of.operands) != 2:
        return None
    a, b = step_of.operands
    if _tuple_index(a, module) == index:
        step = _constant(b, module)
    elif _tuple_index(b, module) == index:
        step = _constant(a, module)
    else:
        return None
    if step is None or step <= 0:
        return None
    return max(0, -((first - bound) // step))

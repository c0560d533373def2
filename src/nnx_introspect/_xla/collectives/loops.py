"""How many times one step runs each computation: its while loops and their trips."""

import re
from dataclasses import dataclass

from nnx_introspect._xla.collectives.errors import _format_error
from nnx_introspect._xla.hlo import Instruction, Module, names_in


@dataclass(frozen=True)
class _Calls:
    count: int
    known: bool
    loops: tuple[str, ...]


def _call_counts(module: Module) -> dict[str, _Calls]:
    """How many times one run of ENTRY runs each reachable computation."""
    done: dict[str, _Calls] = {}
    active: set[str] = set()

    def visit(name: str) -> _Calls:
        if name in done:
            return done[name]
        if name == module.entry:
            done[name] = _Calls(1, True, ())
            return done[name]
        if name in active:
            raise _format_error("a call graph without cycles", f"computation {name}")
        active.add(name)
        count, known, loops = 0, True, None
        for caller in module.callers.get(name, []):
            if caller.opcode in ("async-update", "async-done"):
                continue
            outer = visit(caller.computation)
            factor, here_known, here_loops = 1, True, outer.loops
            if caller.opcode == "while" and name in (
                names_in(caller.attributes.get("body", ""))
                + names_in(caller.attributes.get("condition", ""))
            ):
                trips = _trip_count(caller, module)
                here_known = trips is not None
                factor = trips if trips is not None else 1
                here_loops = (*outer.loops, caller.name)
            count += outer.count * factor
            known = known and outer.known and here_known
            loops = here_loops if loops is None else loops
        active.discard(name)
        done[name] = _Calls(count, known, loops or ())
        return done[name]

    for name in module.computations:
        if name == module.entry or module.callers.get(name):
            visit(name)
    return done


_KNOWN_TRIPS = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')


def _trip_count(loop: Instruction, module: Module) -> int | None:
    """XLA's ``known_trip_count``, else a constant-bounded counter's trips."""
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

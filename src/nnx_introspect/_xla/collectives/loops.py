"""How many times one step runs each computation: its while loops and their trips."""

from dataclasses import dataclass

from nnx_introspect._xla.collectives.errors import format_error
from nnx_introspect._xla.hlo import Module, names_in
from nnx_introspect._xla.hlo.loops import trip_count


@dataclass(frozen=True)
class Calls:
    count: int
    known: bool
    loops: tuple[str, ...]


def call_counts(module: Module) -> dict[str, Calls]:
    """How many times one run of ENTRY runs each reachable computation."""
    done: dict[str, Calls] = {}
    active: set[str] = set()

    def visit(name: str) -> Calls:
        if name in done:
            return done[name]
        if name == module.entry:
            done[name] = Calls(1, True, ())
            return done[name]
        if name in active:
            raise format_error("a call graph without cycles", f"computation {name}")
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
                trips = trip_count(caller, module)
                here_known = trips is not None
                factor = trips if trips is not None else 1
                here_loops = (*outer.loops, caller.name)
            count += outer.count * factor
            known = known and outer.known and here_known
            loops = here_loops if loops is None else loops
        active.discard(name)
        done[name] = Calls(count, known, loops or ())
        return done[name]

    for name in module.computations:
        if name == module.entry or module.callers.get(name):
            visit(name)
    return done

r"""A program's costs with each while loop's body counted once per trip.

XLA's cost analysis (``HloCostAnalysis::HandleWhile``) adds a while loop's
body and condition to the program **once**, not once per trip: "the number of
iterations of the while node will not always be something that we can
statically analyze ... for now compute the cost of a single iteration". A
model that scans its layers (``nnx.scan``) would then show the FLOPs and bytes
of one layer where it runs all of them.

:func:`per_trip_costs` costs each loop's body and condition alone (a module
cut from the program's text whose ENTRY is that computation, given to the
same cost analysis) and adds ``(trips - 1) x body + trips x condition`` per
loop (a loop of ``t`` trips evaluates its condition ``t + 1`` times); nested
loops multiply. The trips are the ones the collectives reader uses
(:func:`~nnx_introspect._xla.hlo.loops.trip_count`). When a loop's trips are
not stated, or a loop sits where XLA's analysis does not count it once per
caller (a conditional's branch, an asynchronous computation), the result says
why and gives no figure: a known-short figure is never returned.

Example:
    >>> text = "\n".join([
    ...     "HloModule jit_f",
    ...     "",
    ...     "%body (p: (s32[], f32[4])) -> (s32[], f32[4]) {",
    ...     "  %p = (s32[], f32[4]) parameter(0)",
    ...     "  %i = s32[] get-tuple-element(%p), index=0",
    ...     "  %x = f32[4] get-tuple-element(%p), index=1",
    ...     "  %y = f32[4] negate(%x)",
    ...     "  %one = s32[] constant(1)",
    ...     "  %next = s32[] add(%i, %one)",
    ...     "  ROOT %t = (s32[], f32[4]) tuple(%next, %y)",
    ...     "}",
    ...     "",
    ...     "%cond (q: (s32[], f32[4])) -> pred[] {",
    ...     "  %q = (s32[], f32[4]) parameter(0)",
    ...     "  %j = s32[] get-tuple-element(%q), index=0",
    ...     "  %n = s32[] constant(8)",
    ...     "  ROOT %lt = pred[] compare(%j, %n), direction=LT",
    ...     "}",
    ...     "",
    ...     "ENTRY %main (a: f32[4]) -> (s32[], f32[4]) {",
    ...     "  %a = f32[4] parameter(0)",
    ...     "  %zero = s32[] constant(0)",
    ...     "  %init = (s32[], f32[4]) tuple(%zero, %a)",
    ...     "  ROOT %w = (s32[], f32[4]) while(%init), condition=%cond, body=%body",
    ...     "}",
    ... ])
    >>> def analyse(module_text):  # a stand-in: 5 FLOPs a body, 1 a condition
    ...     return (5.0, 50.0) if "ENTRY %body" in module_text else (1.0, 9.0)
    >>> found = per_trip_costs(text, analyse)
    >>> found.loops, found.flops, found.bytes_accessed  # 7 x 5 + 8 x 1
    ((('w', 8),), 43.0, 422.0)
    >>> found.unknown is None
    True
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from nnx_introspect._xla.hlo import Instruction, Module, names_in, parse_module
from nnx_introspect._xla.hlo.loops import trip_count
from nnx_introspect._xla.hlo.module import (
    CLOSING,
    COMPUTATION,
    called_computations,
    instruction_text,
)

__all__ = ["ONCE_PER_LOOP", "PerTrip", "left_out", "per_trip_costs"]

Costs = tuple[float, float]
"""``(flops, bytes accessed)``."""

ONCE_PER_LOOP: Final = (
    "XLA's cost analysis counts a while loop's body once, not once per trip"
)
"""The sentence that opens every explanation of a loop's missing costs."""


@dataclass(frozen=True)
class PerTrip:
    """What a program's while loops add to XLA's once-per-loop costs.

    Attributes:
        flops: FLOPs to add to XLA's figure (negative for a loop of no trips).
        bytes_accessed: bytes accessed to add to XLA's figure.
        loops: ``(name, trips)`` of each while loop, in the program's order.
        unknown: ``None``, or why the loops' costs cannot be given (then
            ``flops`` and ``bytes_accessed`` are 0 and mean nothing).
    """

    flops: float
    bytes_accessed: float
    loops: tuple[tuple[str, int | None], ...]
    unknown: str | None = None


class _UncountedError(Exception):
    """A loop XLA's analysis does not count once per caller."""


def per_trip_costs(text: str, analyse: Callable[[str], Costs]) -> PerTrip:
    """What ``text``'s loops add to its costs when each trip is counted.

    Args:
        text: one module's optimized HLO text (``compiled.as_text()``).
        analyse: XLA's cost analysis of a module's text, ``(flops, bytes
            accessed)`` of its ENTRY computation; called with one module per
            loop body and condition, cut from ``text``.

    Returns:
        The :class:`PerTrip`; a program without loops adds nothing and is
        not parsed. ``analyse``'s errors and the HLO parser's
        (:class:`~nnx_introspect._xla.hlo.HloTextError`) propagate.
    """
    if " while(" not in text:
        return PerTrip(0.0, 0.0, ())
    module = parse_module(text)
    loops = [i for b in module.computations.values() for i in b if i.opcode == "while"]
    trips = {loop.name: trip_count(loop, module) for loop in loops}
    found = tuple(trips.items())
    unstated = [name for name, count in found if count is None]
    if unstated:
        names = ", ".join(f"`{name}`" for name in unstated)
        why = f"the program does not state the trips of {names}"
        return PerTrip(0.0, 0.0, found, why)
    costing = _Costing(module, _computation_texts(text), analyse, trips)
    try:
        flops, moved = costing.extra(module.entry)
    except _UncountedError as error:
        return PerTrip(0.0, 0.0, found, str(error))
    return PerTrip(flops, moved, found)


class _Costing:
    """One program's loop bodies costed, each computation once."""

    def __init__(
        self,
        module: Module,
        texts: tuple[str, dict[str, str]],
        analyse: Callable[[str], Costs],
        trips: dict[str, int | None],
    ) -> None:
        self.module = module
        self.preamble, self.texts = texts
        self.analyse = analyse
        self.trips = trips
        self.alone: dict[str, Costs] = {}
        self.extras: dict[str, Costs] = {}
        self.looping: dict[str, bool] = {}

    def extra(self, computation: str) -> Costs:
        """What ``computation``'s loops add, per run of it, to XLA's count."""
        if computation not in self.extras:
            flops = moved = 0.0
            for found in self.module.computations[computation]:
                looping = found.opcode == "while"
                add = self._loop(found) if looping else self._through(found)
                flops, moved = flops + add[0], moved + add[1]
            self.extras[computation] = (flops, moved)
        return self.extras[computation]

    def _loop(self, loop: Instruction) -> Costs:
        body = self._first(loop, "body")
        condition = self._first(loop, "condition")
        trips = self.trips[loop.name]
        assert trips is not None  # per_trip_costs returned before
        body_once, condition_once = self._alone(body), self._alone(condition)
        body_extra, condition_extra = self.extra(body), self.extra(condition)

        def added(i: int) -> float:
            """A run of the loop, its costs' ``i``-th, less what XLA counted."""
            body_run = body_once[i] + body_extra[i]
            condition_run = condition_once[i] + condition_extra[i]
            counted = body_once[i] + condition_once[i]
            return trips * body_run + (trips + 1) * condition_run - counted

        return added(0), added(1)

    def _first(self, loop: Instruction, key: str) -> str:
        """The computation a loop's ``body=`` or ``condition=`` names."""
        names = names_in(loop.attributes.get(key, ""))
        if not names or names[0] not in self.module.computations:
            raise _UncountedError(f"`{loop.name}` names no {key} this code reads")
        return names[0]

    def _through(self, caller: Instruction) -> Costs:
        """What loops in the computations ``caller`` calls add (a ``call``'s)."""
        flops = moved = 0.0
        for name in called_computations(caller):
            if name not in self.module.computations or not self._has_loop(name):
                continue
            if caller.opcode != "call":
                raise _UncountedError(
                    f"a loop runs inside `{caller.name}` ({caller.opcode}), which "
                    "XLA's analysis does not count once per call"
                )
            add = self.extra(name)
            flops, moved = flops + add[0], moved + add[1]
        return flops, moved

    def _has_loop(self, computation: str) -> bool:
        if computation not in self.looping:
            self.looping[computation] = False  # so a call cycle ends here
            self.looping[computation] = any(
                found.opcode == "while"
                or any(
                    name in self.module.computations and self._has_loop(name)
                    for name in called_computations(found)
                )
                for found in self.module.computations[computation]
            )
        return self.looping[computation]

    def _alone(self, computation: str) -> Costs:
        """XLA's costs of one run of ``computation`` (its loops counted once)."""
        if computation not in self.alone:
            self.alone[computation] = self.analyse(self._module_text(computation))
        return self.alone[computation]

    def _module_text(self, entry: str) -> str:
        """A module of ``entry`` and what it calls, in the program's order."""
        needed = self._reachable(entry)
        parts = [f"HloModule {self.module.name}.{entry}", self.preamble]
        for name, block in self.texts.items():
            if name in needed:
                header, _, rest = block.partition("\n")
                header = header.removeprefix("ENTRY ")
                parts.append(("ENTRY " if name == entry else "") + header + "\n" + rest)
        return "\n\n".join(part for part in parts if part) + "\n"

    def _reachable(self, entry: str) -> set[str]:
        seen, todo = set(), [entry]
        while todo:
            name = todo.pop()
            if name in seen or name not in self.module.computations:
                continue
            seen.add(name)
            for found in self.module.computations[name]:
                todo.extend(called_computations(found))
        return seen


def _computation_texts(text: str) -> tuple[str, dict[str, str]]:
    """The lines before the first computation, and each computation's text."""
    preamble: list[str] = []
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    lines = text.splitlines()
    at = 1
    while at < len(lines):
        line, at = lines[at], at + 1
        if current is not None:
            if not CLOSING.match(line):  # an instruction, perhaps over lines
                line, at = instruction_text(lines, at - 1)
            current.append(line)
            if CLOSING.match(line):
                current = None
            continue
        found = COMPUTATION.match(line)
        if found is not None:
            current = blocks[found[2]] = [line]
        elif not blocks:
            preamble.append(line)
    return "\n".join(preamble).strip("\n"), {
        name: "\n".join(lines) for name, lines in blocks.items()
    }


def left_out(why: str) -> str:
    """The warning for a program whose loops' costs cannot be counted per trip.

    Example:
        >>> print(left_out("the program does not state the trips of `while.3`"))
        XLA's cost analysis counts a while loop's body once, not once per trip, and the program does not state the trips of `while.3`: the FLOPs, bytes accessed and step-time estimate are left out rather than given short.
    """  # noqa: E501
    return (
        f"{ONCE_PER_LOOP}, and {why}: the FLOPs, bytes accessed and step-time "
        "estimate are left out rather than given short."
    )

"""A compiled program's FLOPs and bytes: XLA's cost analysis, per loop trip.

XLA's ``cost_analysis()`` counts a loop's body once whatever its trip count,
and XLA:TPU leaves out the Pallas kernels with no cost estimate of their own:
:func:`program_costs` counts each loop's body once per trip
(:mod:`~nnx_introspect._xla.loop_costs`) and adds the kernels' ruled FLOPs
(:func:`~nnx_introspect._xla.hlo.work.ruled_kernel_flops`); XLA:GPU's library
calls (cuBLAS GEMMs), which its cost analysis misses, are counted from their
shapes. :func:`matmul_dtype` names the operand type of a program's matmuls.
"""

import json
import math
from typing import Any, NamedTuple

from nnx_introspect._xla.hlo import (
    HloTextError,
    Instruction,
    definition,
    instruction,
    operand_shapes,
    parse_module,
    parse_shape,
    tuple_elements,
)
from nnx_introspect._xla.hlo.work import ruled_kernel_flops
from nnx_introspect._xla.loop_costs import PerTrip, per_trip_costs
from nnx_introspect._xla.native_log import native_stderr_captured

__all__ = ["Costs", "gpu_flops", "matmul_dtype", "program_costs"]


def matmul_dtype(hlo_text: str) -> str | None:
    """The operand type of the dots doing most of a program's matmul FLOPs.

    Each ``dot`` (in fusions too) counts ``2 x output elements x contracted
    size``; ``None`` when the program has no dot. An operand printed without
    its shape (XLA:GPU's fused computations) takes its definition's.

    Example:
        >>> matmul_dtype(
        ...     "%d = f32[8,16]{1,0} dot(bf16[8,4]{1,0} %a, bf16[4,16]{1,0} %b), "
        ...     "lhs_contracting_dims={1}, rhs_contracting_dims={0}"
        ... )
        'bf16'
    """
    flops: dict[str, int] = {}
    lines = hlo_text.splitlines()
    defined: dict[str, tuple[str, tuple[int, ...]]] | None = None
    for line in lines:
        dot = _parsed(line) if " dot(" in line else None
        if dot is None or dot.opcode != "dot" or dot.shape.startswith("("):
            continue
        operands = operand_shapes(dot)
        if not operands or "lhs_contracting_dims" not in dot.attributes:
            continue
        shape, name = operands[0]
        if shape is None:
            if defined is None:
                defined = _definitions(lines)
            if name not in defined:
                continue
            kind, lhs = defined[name]
        else:
            kind, lhs = parse_shape(shape)
        out = parse_shape(dot.shape)[1]
        k = dot.attributes["lhs_contracting_dims"].strip("{}")
        contracted = [int(i) for i in k.split(",") if i]
        if any(i >= len(lhs) for i in contracted):
            continue
        work = 2 * math.prod(out) * math.prod(lhs[i] for i in contracted)
        flops[kind] = flops.get(kind, 0) + work
    return max(flops, key=lambda k: flops[k]) if flops else None


def _parsed(line: str) -> Instruction | None:
    """The instruction on ``line``, or ``None`` for a line that is none."""
    try:
        return instruction(line)
    except HloTextError:
        return None


def _definitions(lines: list[str]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Each instruction's ``(dtype, dims)`` by name; a tuple's first element's."""
    out = {}
    for line in lines:
        found = definition(line)
        if found is None:
            continue
        name, shape = found
        elements = tuple_elements(shape)
        out[name] = parse_shape(elements[0] if elements else shape)
    return out


class Costs(NamedTuple):
    """One device's program costs, each loop's body counted once per trip.

    ``loops`` are ``(name, trips)`` of the program's while loops; ``why``
    says why the figures are ``None`` for a program with loops (a trip count
    the program does not state, a body XLA's analysis could not cost alone).
    """

    flops: float | None
    bytes_accessed: float | None
    loops: tuple[tuple[str, int | None], ...] = ()
    why: str | None = None


def program_costs(compiled: Any, backend: str, text: str | None = None) -> Costs:
    """FLOPs and bytes accessed of one device's program, each loop trip counted.

    XLA:CPU and XLA:TPU give ``cost_analysis()``. A deviceless XLA:GPU compile
    gives none ("GetCostAnalysis is not supported" without a GPU client), so
    XLA's generic HLO cost analysis runs on the compiled per-device module
    (through the CPU client): it counts dots and Triton GEMM fusions; matmuls
    rewritten into cuBLAS library calls are custom calls it does not see, and
    :func:`_library_gemm_flops` adds them. ``None`` for a figure XLA gives
    none of.

    Either analysis counts a while loop's body once, not once per trip; the
    loops of the program's ``text`` (XLA:GPU: of each module) are added per
    trip by :func:`~nnx_introspect._xla.loop_costs.per_trip_costs`, their
    bodies costed by the same generic analysis. Without ``text`` (a program
    jaxlib cannot print) the figures are XLA's own.
    """
    if backend == "gpu":
        return _gpu_costs(compiled)
    cost = compiled.cost_analysis()
    if isinstance(cost, list | tuple):  # pragma: no cover - older jax
        cost = cost[0] if cost else None
    cost = cost if isinstance(cost, dict) else {}
    flops = float(cost.get("flops", math.nan))
    moved = float(cost.get("bytes accessed", math.nan))
    once = Costs(
        flops if math.isfinite(flops) else None,
        moved if math.isfinite(moved) and moved >= 0 else None,
    )
    if text is None:
        return once
    return _with_kernels(_per_trip(once, _loops_of(text)), text, cost)


def _with_kernels(costs: "Costs", text: str, cost: dict[str, Any]) -> "Costs":
    """``costs`` with the FLOPs of Pallas kernels XLA:TPU's analysis leaves out.

    XLA:TPU counts a kernel's own cost estimate and nothing of one without
    (splash attention): those are added by their rule
    (:func:`~nnx_introspect._xla.hlo.work.ruled_kernel_flops`). Where the
    analysis gave no FLOPs at all but did run (its bytes are there), its
    FLOPs were zero. A program without kernels is not read.
    """
    if '"tpu_custom_call"' not in text or costs.why is not None:
        return costs
    try:
        added = ruled_kernel_flops(parse_module(text))
    except HloTextError:
        return costs
    flops = costs.flops
    if flops is None and "bytes accessed" in cost:
        flops = 0.0
    if flops is None or not added:
        return costs
    return costs._replace(flops=flops + added)


def _gpu_costs(compiled: Any) -> Costs:
    import jax

    try:
        modules = compiled.runtime_executable().hlo_modules()
        client = jax.devices("cpu")[0].client
        flops = moved = 0.0
        texts = []
        for module in modules:
            texts.append(module.to_string())
            module_flops, module_moved = _module_costs(client, module, texts[-1])
            flops += module_flops
            moved += module_moved
    except Exception:  # pragma: no cover - a jaxlib without these hooks
        return Costs(None, None)

    def positive(total: float) -> float | None:
        return total if math.isfinite(total) and total > 0 else None

    loops = [_loops_of(text) for text in texts]
    return _per_trip(Costs(positive(flops), positive(moved)), *loops)


def _module_costs(client: Any, module: Any, text: str) -> tuple[float, float]:
    """XLA's generic cost analysis of one module, cuBLAS calls' FLOPs added."""
    from jaxlib import _jax

    cost = _jax.hlo_module_cost_analysis(client, module)
    # a module whose only work is a library call reports -1 (unknown)
    flops = max(0.0, float(cost.get("flops", 0.0))) + _library_gemm_flops(text)
    return flops, max(0.0, float(cost.get("bytes accessed", 0.0)))


def _loops_of(text: str) -> PerTrip:
    """What ``text``'s loops add per trip, costed by XLA's generic analysis.

    A body XLA's text reader or cost analysis refuses leaves the costs
    unknown (:attr:`PerTrip.unknown` says why), never short.
    """
    if " while(" not in text:
        return PerTrip(0.0, 0.0, ())
    import importlib

    import jax

    hlo: Any = importlib.import_module("jaxlib._hlo")  # jaxlib's HLO bindings
    client = jax.devices("cpu")[0].client

    def analyse(module_text: str) -> tuple[float, float]:
        module = hlo.hlo_module_from_text(module_text)
        return _module_costs(client, module, module_text)

    try:
        with native_stderr_captured():
            return per_trip_costs(text, analyse)
    except Exception as error:  # XLA's reader or analysis, or ours (HloTextError)
        said = " ".join(str(error).split())[:300]
        return PerTrip(
            0.0,
            0.0,
            (),
            f"its loops could not be costed alone ({type(error).__name__}: {said})",
        )


def _per_trip(once: Costs, *loops: PerTrip) -> Costs:
    """``once`` (XLA's figures) with every loop's trips added; ``None`` if unknown."""
    found = tuple(loop for each in loops for loop in each.loops)
    why = next((each.unknown for each in loops if each.unknown is not None), None)
    if why is not None:
        return Costs(None, None, found, why)
    flops = sum(each.flops for each in loops)
    moved = sum(each.bytes_accessed for each in loops)
    return Costs(
        None if once.flops is None else once.flops + flops,
        None if once.bytes_accessed is None else once.bytes_accessed + moved,
        found,
    )


def gpu_flops(compiled: Any) -> float | None:
    """The FLOPs of :func:`_gpu_costs`."""
    return _gpu_costs(compiled).flops


def _library_gemm_flops(hlo_text: str) -> float:
    """``2 * output elements * contracted size`` of each cuBLAS call in the HLO.

    Shapes are read from each instruction's definition (``%a = f32[64,256]``,
    a tuple's first element); the contracted dimensions from the call's
    ``gemm_backend_config``.
    """
    lines = hlo_text.splitlines()
    shapes: dict[str, tuple[str, tuple[int, ...]]] | None = None
    total = 0.0
    for line in lines:
        if 'custom_call_target="__cublas$' not in line:
            continue
        call = _parsed(line)
        if call is None or not call.operands:
            continue
        try:
            config, _ = json.JSONDecoder().raw_decode(
                call.attributes.get("backend_config", "")
            )
        except json.JSONDecodeError:
            continue
        gemm = config.get("gemm_backend_config", {}) if isinstance(config, dict) else {}
        numbers = gemm.get("dot_dimension_numbers", {})
        if shapes is None:
            shapes = _definitions(lines)
        if call.operands[0] not in shapes:
            continue
        lhs = shapes[call.operands[0]][1]
        out = shapes[call.name][1]
        contracted = math.prod(
            lhs[int(d)] for d in numbers.get("lhs_contracting_dimensions", [])
        )
        total += 2.0 * math.prod(out) * contracted
    return total

r"""The work of a Pallas (Mosaic) kernel: its own cost estimate, else a rule.

XLA:TPU runs a Pallas kernel as a ``custom-call`` to ``tpu_custom_call``
whose body (the kernel's compiled Mosaic program) no reader of this package
opens: its FLOPs come from

* the kernel's own estimate, where the ``pallas_call`` was given one
  (``pl.CostEstimate``; XLA:TPU prints it in the call's ``backend_config`` as
  ``custom_call_config.cost_estimate``: megablox ``gmm`` and ``tgmm``, the
  flash attention kernel's forward);
* else a rule per kernel over its operands' shapes, the kernel known by its
  name (the instruction's, which is the ``pallas_call``'s):

  - splash attention (``splash_mha_*`` / ``splash_mqa_*``): per query head of
    ``Q`` positions against ``K`` keys of width ``D``, a forward does
    ``QK^T`` and ``PV``, ``4 QKD``; the ``dq`` kernel recomputes ``QK^T`` and
    does ``dO V^T`` and ``dS K``, ``6 QKD``; the ``dkv`` kernel recomputes
    ``QK^T`` and does ``P^T dO``, ``dO V^T`` and ``dS^T Q``, ``8 QKD`` (with
    ``dq`` fused in, ``use_fused_bwd_kernel``: ``10 QKD``). Each is scaled
    by the share of ``(query block, key block)`` pairs its block mask
    computes (a causal mask: about half), read from the mask's constant
    where XLA printed it (followed through copies and into loops); where it
    did not (XLA prints no constant of more than ten elements), every block
    is counted and the estimate says so;
  - the flash attention kernel's backward (``flash_mha_bwd_dq*``,
    ``flash_mha_bwd_dkv*``): ``6 QKD`` and ``8 QKD`` per batch row and head,
    every block (its causal flag is in its body, not its shapes);
  - ragged paged attention (``ragged_paged_attention*``) and decode paged
    attention (``paged_attention*``): at most ``4 x tokens x heads x D x`` a
    sequence's pages of keys (its page table's width times a page's
    positions): the lengths it runs over are known at run time only.

Every FLOP of a kernel is counted as the matrix unit's (its softmax's
exponentials are a small share). An attention kernel's head dim ``D`` (its
``q``'s minor dimension) is kept (:attr:`KernelCost.head_dim`): its matmuls
contract over ``D`` or produce ``D`` columns, so a matrix unit wider than
``D`` runs them at ``D`` of its width. The bytes a kernel moves are its own
estimate's where it has one, else its operands' and results' (the traffic
rules). A Pallas kernel matching none of these is *uncosted*: its FLOPs
are not known, and the program's estimate names it. XLA:TPU's own Mosaic
kernels (``jax.lax.ragged_dot``'s) are no Pallas kernels:
:mod:`~nnx_introspect._xla.hlo.flops` costs them.

Example:
    >>> from nnx_introspect._xla.hlo import parse_module
    >>> module = parse_module("\n".join([
    ...     "HloModule jit_f",
    ...     "ENTRY %main (q: bf16[2,256,128], k: bf16[2,256,128]) -> bf16[2,256,128] {",
    ...     "  %q = bf16[2,256,128]{2,1,0} parameter(0)",
    ...     "  %k = bf16[2,256,128]{2,1,0} parameter(1)",
    ...     "  %m = s8[1,2,2]{2,1,0} constant({ { { 1, 0 }, { 2, 1 } } })",
    ...     "  ROOT %splash_mha_fwd_no_residuals.1 = bf16[2,256,128]{2,1,0}"
    ...     " custom-call(%m, %m, %q, %k, %k), custom_call_target=\"tpu_custom_call\","
    ...     " frontend_attributes={kernel_metadata={}}",
    ...     "}",
    ... ]))
    >>> cost = kernel_cost(module, module.instructions["splash_mha_fwd_no_residuals.1"])
    >>> cost.flops == 4 * 2 * 256 * 256 * 128 * 3 / 4, cost.rule, cost.head_dim
    (True, 'splash attention forward, 4 QKD a head, 3 of 4 blocks', 128)
"""

import dataclasses
import json
import math
import re
from typing import Final

from nnx_introspect._xla.hlo.instructions import Instruction, metadata
from nnx_introspect._xla.hlo.module import Module
from nnx_introspect._xla.hlo.shapes import parse_shape

__all__ = ["MOSAIC", "OWN_ESTIMATE", "KernelCost", "kernel_cost", "kernel_name"]

MOSAIC: Final = '"tpu_custom_call"'
"""The ``custom_call_target`` of a Pallas kernel on XLA:TPU, as printed."""

OWN_ESTIMATE: Final = "the kernel's own estimate"
""":attr:`KernelCost.rule` of a kernel costed by its own ``pl.CostEstimate``."""

_ESTIMATE: Final = re.compile(r'"cost_estimate":(\{[^{}]*\})')
"""The kernel's own ``pl.CostEstimate`` in its configuration: a flat JSON
object whose keys libtpu orders as it likes (0.0.52: ``flops`` first; the
chip's 0.0.42.1: ``bytes_accessed`` first, with ``remote_bytes_transferred``)."""
_FLOATS: Final = ("bf16", "f16", "f32", "f64", "f8")
_VIEWS: Final = frozenset({"copy", "copy-done", "bitcast", "reshape"})
_LITERAL: Final = re.compile(r"constant\((\{.*\})\)")
_ATTENTION: Final = (
    "splash_mha_",
    "splash_mqa_",
    "flash_mha_",
    "ragged_paged_attention",
    "paged_attention",
)
"""The names of attention kernels (with any name holding ``flash_attention``:
the flash attention forward, ``jvp_jit_flash_attention__`` under ``grad``)."""


@dataclasses.dataclass(frozen=True)
class KernelCost:
    """One Pallas kernel call's work, and where the figure comes from.

    Attributes:
        name: the instruction's name (the ``pallas_call``'s).
        flops: its FLOPs (one run); ``None`` where it is uncosted.
        bytes_accessed: the bytes its own estimate says it moves; ``None``
            where it has no estimate (its operands' and results' bytes stand).
        rule: how the FLOPs were found: :data:`OWN_ESTIMATE`, the rule's
            words, or why it is uncosted.
        exact_blocks: ``False`` where a mask's blocks could not be read and
            every block was counted (an upper bound).
        head_dim: an attention kernel's head dim ``D`` (its ``q``'s minor
            dimension); 0 for any other kernel, or where ``q`` is not read.
    """

    name: str
    flops: float | None
    bytes_accessed: int | None
    rule: str
    exact_blocks: bool = True
    head_dim: int = 0


def kernel_cost(module: Module, inst: Instruction) -> KernelCost | None:
    """The work of ``inst`` if it is a Pallas kernel (``None`` for anything else)."""
    found = _kernel_cost(module, inst)
    if found is None or found.flops is None:
        return found
    return dataclasses.replace(found, head_dim=_head_dim(module, inst))


def _head_dim(module: Module, inst: Instruction) -> int:
    """``D`` of an attention kernel (known by its name); 0 for any other."""
    name = kernel_name(inst)
    if not name.startswith(_ATTENTION) and "flash_attention" not in name:
        return 0
    floats = _floats(module, inst)
    return floats[0][-1] if floats else 0


def _kernel_cost(module: Module, inst: Instruction) -> KernelCost | None:
    if inst.opcode != "custom-call":
        return None
    if inst.attributes.get("custom_call_target", "") != MOSAIC:
        return None
    if not _pallas(inst):
        return None  # XLA's own Mosaic kernel (ragged_dot's): flops.py's rule
    own = _own_estimate(inst)
    if own is not None:
        return KernelCost(inst.name, own[0], own[1], OWN_ESTIMATE)
    name = kernel_name(inst)
    if name.startswith(("splash_mha_", "splash_mqa_")):
        return _splash(module, inst, name)
    if name.startswith("flash_mha_bwd_"):
        return _attention(module, inst, 8 if "_dkv" in name else 6, "flash attention")
    if name.startswith("ragged_paged_attention"):
        return _ragged_paged(module, inst)
    if name.startswith("paged_attention"):
        return _paged(module, inst)
    return KernelCost(inst.name, None, None, "no cost estimate and no rule")


def _own_estimate(inst: Instruction) -> tuple[float, int] | None:
    """``(flops, bytes accessed)`` of the kernel's own cost estimate, if it has one.

    Example:
        >>> from nnx_introspect._xla.hlo.instructions import instruction
        >>> line = (
        ...     '%k = f32[8]{0} custom-call(), custom_call_target="tpu_custom_call", '
        ...     'backend_config={"custom_call_config":{"cost_estimate":'
        ...     '{"bytes_accessed":"64","flops":"128","remote_bytes_transferred":"0",'
        ...     '"transcendentals":"0"}}}'
        ... )
        >>> _own_estimate(instruction(line))
        (128.0, 64)
    """
    found = _ESTIMATE.search(inst.attributes.get("backend_config", ""))
    if found is None:
        return None
    try:
        estimate = json.loads(found[1])
        return float(estimate["flops"]), int(estimate["bytes_accessed"])
    except (ValueError, KeyError, TypeError):
        return None  # not the estimate's shape: costed as if it had none


def kernel_name(inst: Instruction) -> str:
    """The ``pallas_call``'s name: the instruction's, else its ``op_name``'s.

    XLA names a kernel's instruction after the ``pallas_call``; where the
    instruction was renamed, the ``op_name`` (``.../splash_mha_fwd/pallas_call``)
    still holds it.

    Example:
        >>> from nnx_introspect._xla.hlo.instructions import instruction
        >>> kernel_name(instruction(
        ...     '%custom-call.3 = f32[8]{0} custom-call(%a), metadata={op_name='
        ...     '"jit(f)/splash_mha_fwd_no_residuals/pallas_call"}'))
        'splash_mha_fwd_no_residuals'
    """
    op_name = metadata(inst.text).get("op_name", "")
    head, _, last = op_name.rpartition("/")
    if inst.name.startswith("custom-call") and last == "pallas_call" and head:
        return head.rpartition("/")[2].lower()
    return inst.name.lower()


def _pallas(inst: Instruction) -> bool:
    """Whether a ``tpu_custom_call`` is a Pallas kernel, not one XLA emitted.

    A ``pallas_call`` gives its kernel a ``kernel_metadata`` frontend
    attribute and its name in the ``op_name``; XLA:TPU's own Mosaic kernels
    (``jax.lax.ragged_dot``'s ``ragged-dot-metadata`` and ``ragged_dot_tiling``
    kernels) have neither.
    """
    attributes = inst.attributes.get("frontend_attributes", "")
    if "ragged_dot_tiling" in attributes:
        return False
    return "kernel_metadata=" in attributes or "pallas_call" in metadata(inst.text).get(
        "op_name", ""
    )


def _floats(module: Module, inst: Instruction) -> list[tuple[int, ...]]:
    """The dims of ``inst``'s floating-point array operands of two or more dims."""
    out = []
    for operand in inst.operands:
        found = module.instructions.get(operand)
        if found is None or found.shape.startswith("("):
            continue
        dtype, dims = parse_shape(found.shape)
        if dtype.startswith(_FLOATS) and len(dims) >= 2:
            out.append(dims)
    return out


def _qkd(module: Module, inst: Instruction) -> tuple[float, int, int, int] | None:
    """``(heads, Q, K, D)``: the first float operand is ``q``, the second ``k``."""
    floats = _floats(module, inst)
    if len(floats) < 2:
        return None
    q, k = floats[0], floats[1]
    return float(math.prod(q[:-2])), q[-2], k[-2], q[-1]


def _attention(
    module: Module, inst: Instruction, per_qkd: int, what: str
) -> KernelCost:
    shape = _qkd(module, inst)
    if shape is None:
        return KernelCost(inst.name, None, None, f"{what}: no q and k operands read")
    heads, q, k, d = shape
    part = "dK and dV" if per_qkd == 8 else "dQ"
    return KernelCost(
        inst.name,
        per_qkd * heads * q * k * d,
        None,
        f"{what} backward ({part}), {per_qkd} QKD a head, every block",
    )


def _splash(module: Module, inst: Instruction, name: str) -> KernelCost:
    fused = '\\"use_fused_bwd_kernel\\": true' in inst.attributes.get(
        "frontend_attributes", ""
    )
    if "_dkv" in name:
        per_qkd = 10 if fused else 8
        part = "backward (dQ, dK and dV)" if fused else "backward (dK and dV)"
    elif "_dq" in name:
        per_qkd, part = 6, "backward (dQ)"
    else:
        per_qkd, part = 4, "forward"
    shape = _qkd(module, inst)
    if shape is None:
        return KernelCost(inst.name, None, None, "splash attention: no q and k read")
    heads, q, k, d = shape
    blocks = _mask_blocks(module, inst.operands[1]) if len(inst.operands) > 1 else None
    dense = per_qkd * heads * q * k * d
    if blocks is None:
        return KernelCost(
            inst.name,
            dense,
            None,
            f"splash attention {part}, {per_qkd} QKD a head, every block (its "
            "block mask not read)",
            exact_blocks=False,
        )
    computed, total = blocks
    return KernelCost(
        inst.name,
        dense * computed / total,
        None,
        f"splash attention {part}, {per_qkd} QKD a head, {computed} of {total} blocks",
    )


def _mask_blocks(module: Module, name: str) -> tuple[int, int] | None:
    """``(computed, all)`` blocks of a splash kernel's block mask, where printed.

    The mask is an ``s8``/``s32`` constant (``0``: a block skipped, ``1``: a
    partial block, ``2``: a full one), perhaps copied into on-chip memory
    first, or a broadcast of one value (every block alike).
    """
    found = _source(module, module.instructions.get(name))
    if found is None or found.shape.startswith("("):
        return None
    dtype, dims = parse_shape(found.shape)
    if not dtype.startswith(("s", "u")):
        return None
    total = math.prod(dims)
    if found.opcode == "broadcast" and found.operands:
        scalar = module.instructions.get(found.operands[0])
        if scalar is None or scalar.opcode != "constant":
            return None
        value = scalar.text.partition(" constant(")[2].partition(")")[0]
        return (total, total) if value.strip() not in ("0", "") else (0, total)
    if found.opcode != "constant":
        return None
    literal = _LITERAL.search(found.text)
    if literal is None or "..." in literal[1]:
        return None
    values = [int(v) for v in re.findall(r"-?\d+", literal[1])]
    if len(values) != total:
        return None
    return sum(1 for v in values if v != 0), total


def _source(module: Module, found: Instruction | None) -> Instruction | None:
    """What ``found`` copies, views or carries through a loop, followed back.

    Through copies (an asynchronous one: its start's operand), bitcasts and
    reshapes, and from a loop's parameter element to the element of the
    tuple the loop started with (the block mask of a kernel in a scanned
    layer is carried into the loop).
    """
    for _ in range(16):
        if found is None or not found.operands:
            return found
        operand = module.instructions.get(found.operands[0])
        if found.opcode == "copy-done":
            found = None if operand is None else _first(module, operand)
        elif found.opcode in _VIEWS:
            found = operand
        elif found.opcode == "get-tuple-element":
            found = _element(module, found, operand)
        else:
            return found
    return None


def _first(module: Module, found: Instruction) -> Instruction | None:
    return module.instructions.get(found.operands[0]) if found.operands else None


def _element(
    module: Module, gte: Instruction, tuple_of: Instruction | None
) -> Instruction | None:
    """The instruction ``gte`` takes from a tuple, or a loop's starting tuple."""
    index = int(gte.attributes.get("index", "-1"))
    if tuple_of is not None and tuple_of.opcode == "parameter":
        callers = module.callers.get(tuple_of.computation, [])
        if len(callers) != 1 or callers[0].opcode != "while":
            return None
        tuple_of = _first(module, callers[0])
    if tuple_of is None or tuple_of.opcode != "tuple":
        return None
    if not 0 <= index < len(tuple_of.operands):
        return None
    return module.instructions.get(tuple_of.operands[index])


def _paged(module: Module, inst: Instruction) -> KernelCost:
    """Decode paged attention: each query against its sequence's whole page table.

    Its operands: the lengths and the page table (``s32``, the table
    flattened, ``sequences x pages`` long), ``q`` (``sequences`` first) and
    the key and value pages (``[kv heads, pages, page size, D]``).
    """
    floats = _floats(module, inst)
    tables = [
        math.prod(parse_shape(found.shape)[1])
        for found in (module.instructions.get(n) for n in inst.operands)
        if found is not None
        and not found.shape.startswith("(")
        and parse_shape(found.shape)[0] == "s32"
    ]
    if len(floats) < 2 or not tables or len(floats[1]) != 4:
        return KernelCost(inst.name, None, None, "paged attention: shapes unread")
    q, pages = floats[0], floats[1]
    keys = max(tables) // q[0] * pages[2]
    return KernelCost(
        inst.name,
        4.0 * math.prod(q) * keys,
        None,
        f"paged attention, at most 4 x queries x heads x D x {keys} keys "
        "(a sequence's whole page table)",
        exact_blocks=False,
    )


def _ragged_paged(module: Module, inst: Instruction) -> KernelCost:
    """At most every query token against its sequence's whole page table."""
    floats = _floats(module, inst)
    tables = [
        parse_shape(found.shape)[1]
        for found in (module.instructions.get(n) for n in inst.operands)
        if found is not None
        and not found.shape.startswith("(")
        and parse_shape(found.shape)[0] == "s32"
        and len(parse_shape(found.shape)[1]) == 2
    ]
    if len(floats) < 2 or not tables or len(floats[0]) != 3 or len(floats[1]) != 4:
        return KernelCost(
            inst.name, None, None, "ragged paged attention: shapes unread"
        )
    tokens, heads, d = floats[0]
    page = floats[1][1]
    keys = tables[0][1] * page
    return KernelCost(
        inst.name,
        4.0 * tokens * heads * d * keys,
        None,
        f"ragged paged attention, at most 4 x tokens x heads x D x {keys} keys "
        "(a sequence's whole page table)",
        exact_blocks=False,
    )

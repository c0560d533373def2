r"""The FLOPs one HLO instruction does, by the unit that does them.

:func:`instruction_flops` gives ``(matmul, vector)`` FLOPs of one run of an
instruction (a fusion: its body's): the matrix unit's ``2 x output elements x
contracted size`` of a dot, a convolution (XLA:TPU writes dots as
convolutions), a library GEMM call (XLA:GPU's cuBLAS) or a grouped-matmul
kernel (XLA:TPU's Mosaic ``ragged_dot``), each row of a grouped matmul
through its one group, or a Pallas kernel (its own estimate, else a rule per
kernel: :mod:`~nnx_introspect._xla.hlo.kernels`; an uncosted one, none);
and the vector unit's one FLOP per output element of
each arithmetic or transcendental operation (per input element of a
reduction). :mod:`~nnx_introspect._xla.hlo.work` reads them into a program's
work, beside its bytes and XLA:TPU's cycles.

Example:
    A row sum: one vector FLOP per element it reads (128), not per element
    it writes (8).

    >>> from nnx_introspect._xla.hlo import parse_module
    >>> module = parse_module("\n".join([
    ...     "HloModule jit_rows",
    ...     "%add (x: f32[], y: f32[]) -> f32[] {",
    ...     "  %x = f32[] parameter(0)",
    ...     "  %y = f32[] parameter(1)",
    ...     "  ROOT %s = f32[] add(%x, %y)",
    ...     "}",
    ...     "ENTRY %main (a: f32[8,16]) -> f32[8] {",
    ...     "  %a = f32[8,16]{1,0} parameter(0)",
    ...     "  %z = f32[] constant(0)",
    ...     "  ROOT %r = f32[8]{0} reduce(%a, %z), dimensions={1}, to_apply=%add",
    ...     "}",
    ... ]))
    >>> instruction_flops(module, module.instructions["r"])
    (0.0, 128.0)
"""

import math
import re
from typing import Final

from nnx_introspect._xla.hlo.instructions import Instruction, metadata
from nnx_introspect._xla.hlo.kernels import kernel_cost
from nnx_introspect._xla.hlo.module import Module, called_computations
from nnx_introspect._xla.hlo.shapes import arrays, parse_shape, tuple_elements
from nnx_introspect._xla.hlo.windows import window_taps

__all__ = [
    "ASYNC_COPIES",
    "COLLECTIVES",
    "body_of",
    "dims_of",
    "instruction_flops",
    "shape_of",
]

COLLECTIVES: Final = frozenset(
    {
        "all-gather",
        "all-gather-start",
        "all-reduce",
        "all-reduce-start",
        "all-to-all",
        "ragged-all-to-all",
        "collective-permute",
        "collective-permute-start",
        "reduce-scatter",
        "collective-broadcast",
        "send",
        "recv",
    }
)

ASYNC_COPIES: Final = frozenset({"copy-start", "slice-start", "copy-to-host-start"})

_FREE: Final = frozenset(
    {
        "parameter",
        "constant",
        "bitcast",
        "bitcast-convert",
        "broadcast",
        "reshape",
        "transpose",
        "copy",
        "slice",
        "dynamic-slice",
        "dynamic-update-slice",
        "concatenate",
        "pad",
        "tuple",
        "get-tuple-element",
        "iota",
        "gather",
        "scatter",
        "reverse",
        "fusion",
        "call",
        "convolution",
        "dot",
        "custom-call",
        "while",
        "conditional",
        "after-all",
        "partition-id",
        "replica-id",
        "opt-barrier",
        "sort",
        "rng-bit-generator",
        "rng",
        "get-dimension-size",
        "domain",
    }
)
"""Opcodes that are no vector arithmetic of their own: views, data movement,
and instructions whose work is counted elsewhere (a fusion's by its body)."""

_REDUCTIONS: Final = frozenset({"reduce", "reduce-window", "select-and-scatter"})


_GEMM_CALLS: Final = ("__cublas$gemm", "__cublas$lt$matmul", "__cudnn$")


def _elements(shape: str) -> int:
    """Elements of every array of ``shape``."""
    return sum(math.prod(dims) for _, dims, _ in arrays(shape)) if shape else 0


def dims_of(module: Module, name: str) -> tuple[int, ...] | None:
    found = module.instructions.get(name)
    if found is None or found.shape.startswith("("):
        return None
    return parse_shape(found.shape)[1]


def _dot_flops(module: Module, inst: Instruction) -> float:
    """``2 x output elements x contracted size`` of a ``dot``."""
    lhs = dims_of(module, inst.operands[0]) if inst.operands else None
    contracting = inst.attributes.get("lhs_contracting_dims", "").strip("{}")
    if lhs is None or inst.shape.startswith("("):
        return 0.0
    dims = [int(i) for i in contracting.split(",") if i.strip()]
    if any(i >= len(lhs) for i in dims):
        return 0.0
    out = parse_shape(inst.shape)[1]
    return 2.0 * math.prod(out) * math.prod(lhs[i] for i in dims)


def _convolution_flops(module: Module, inst: Instruction) -> float:
    """``2 x output elements x (input features / groups) x window`` of a convolution.

    XLA:TPU writes a dot as a convolution (``dim_labels=bf_io->bf``): the
    input's ``f`` dimension is the contracted one, and the kernel's spatial
    dimensions (digits) are the window.
    """
    labels = inst.attributes.get("dim_labels", "")
    found = re.fullmatch(r"(\w+)_(\w+)->(\w+)", labels.strip())
    if found is None or len(inst.operands) < 2 or inst.shape.startswith("("):
        return 0.0
    lhs = dims_of(module, inst.operands[0])
    rhs = dims_of(module, inst.operands[1])
    lhs_labels, rhs_labels = found[1], found[2]
    if (
        lhs is None
        or rhs is None
        or len(lhs) != len(lhs_labels)
        or len(rhs) != len(rhs_labels)
        or "f" not in lhs_labels
    ):
        return 0.0
    groups = int(inst.attributes.get("feature_group_count", "1") or 1)
    out = parse_shape(inst.shape)[1]
    spatial = sorted(c for c in lhs_labels if c.isdigit())
    out_labels = found[3]
    inputs = outputs = None
    if len(out) == len(out_labels) and all(c in out_labels for c in spatial):
        inputs = tuple(lhs[lhs_labels.index(c)] for c in spatial)
        outputs = tuple(out[out_labels.index(c)] for c in spatial)
    window = window_taps(inst.attributes.get("window", ""), inputs, outputs)
    if window is None:
        window = math.prod(
            size for label, size in zip(rhs_labels, rhs, strict=True) if label.isdigit()
        )
    features = lhs[lhs_labels.index("f")] // max(groups, 1)
    flops = float(round(2 * math.prod(out) * features * window))
    return flops / _ragged_groups(inst, module)


def _masked(module: Module | None, inst: Instruction) -> bool:
    """Whether a convolution's operands are selected by a group mask.

    XLA:TPU writes the weight gradient of a ragged dot (a grouped matmul's
    backward) with no ``ragged_dot`` name: a convolution over every group
    whose operands are fusions selecting each row into its group by a
    ``pred`` mask (its fusion's ``mask_aggregator_config`` skips the masked
    iterations; a v5e chip ran it in one group's time).
    """
    if module is None:
        return False
    for name in inst.operands:
        found = module.instructions.get(name)
        if found is None or found.opcode != "fusion":
            return False
        body = body_of(module, found)
        if not any(
            i.opcode == "select"
            and i.operands
            and shape_of(module, i.operands[0]).startswith("pred")
            for i in body
        ):
            return False
    return bool(inst.operands)


def _ragged_groups(inst: Instruction, module: Module | None = None) -> int:
    """The groups a ``jax.lax.ragged_dot`` convolution's output spans, else 1.

    XLA:TPU writes a ragged dot (an MoE's grouped matmul) as a convolution
    over every group, its output ``[groups, rows, n]`` then masked: each row
    belongs to one group, and the chip did the work of one (a 16-expert
    step ran in the time of its rows' one group, not sixteen), so its FLOPs
    are the dense figure over the groups, ``size`` of the window's dilated
    dimension.

    Example:
        >>> from nnx_introspect._xla.hlo.instructions import instruction
        >>> inst = instruction(
        ...     "%c = bf16[16,4096,1024]{2,1,0} convolution(%a, %b),"
        ...     " window={size=16 stride=15 lhs_dilate=16}, dim_labels=0bf_0io->0bf,"
        ...     ' metadata={op_name="jit(f)/ragged_dot_general"}'
        ... )
        >>> _ragged_groups(inst)
        16
    """
    if "ragged_dot" not in metadata(inst.text).get("op_name", "") and not _masked(
        module, inst
    ):
        return 1
    window = inst.attributes.get("window", "")
    sizes = re.search(r"size=([\dx]+)", window)
    dilated = re.search(r"lhs_dilate=([\dx]+)", window)
    if sizes is None or dilated is None:
        return 1
    return math.prod(
        size
        for size, d in zip(
            (int(n) for n in sizes[1].split("x")),
            (int(n) for n in dilated[1].split("x")),
            strict=False,
        )
        if size == d > 1
    )


def _gemm_call_flops(module: Module, inst: Instruction) -> float:
    """A library GEMM's FLOPs (XLA:GPU's cuBLAS calls): ``2 x M x N x K``."""
    target = inst.attributes.get("custom_call_target", "").strip('"')
    if not target.startswith(_GEMM_CALLS) or len(inst.operands) < 2:
        return 0.0
    lhs = dims_of(module, inst.operands[0])
    elements = tuple_elements(inst.shape)
    out_shape = elements[0] if elements else inst.shape
    config = inst.attributes.get("backend_config", "")
    found = re.search(r'"lhs_contracting_dimensions":\["?(\d+)', config)
    if lhs is None or found is None or int(found[1]) >= len(lhs):
        return 0.0
    out = parse_shape(out_shape)[1]
    return 2.0 * math.prod(out) * lhs[int(found[1])]


def _ragged_kernel_flops(module: Module, inst: Instruction) -> float:
    """A grouped-matmul kernel's FLOPs (XLA:TPU's Mosaic ``ragged_dot``).

    XLA:TPU emits ``jax.lax.ragged_dot`` as a ``tpu_custom_call`` whose
    frontend attributes name its ``ragged_dot_tiling``: each of the output's
    ``M`` rows is one row of the ``[M, K]`` left operand through its group's
    ``[K, N]`` matrix, ``2 x M x N x K`` FLOPs (``2 x output elements x K``).
    Zero for any other custom call, or where no operand is the ``[M, K]`` rows.
    """
    if "ragged_dot_tiling" not in inst.attributes.get("frontend_attributes", ""):
        return 0.0
    if inst.shape.startswith("("):
        return 0.0
    out = parse_shape(inst.shape)[1]
    if len(out) != 2:
        return 0.0
    rows = [
        dims
        for dims in (dims_of(module, name) for name in inst.operands)
        if dims is not None and len(dims) == 2 and dims[0] == out[0]
    ]
    return 2.0 * math.prod(out) * rows[0][1] if rows else 0.0


def body_of(module: Module, inst: Instruction) -> list[Instruction]:
    """The instructions of the computations ``inst`` calls (a fusion's body)."""
    return [
        inner
        for called in called_computations(inst)
        for inner in module.computations.get(called, [])
    ]


def instruction_flops(
    module: Module, inst: Instruction, seen: int = 0
) -> tuple[float, float]:
    """``(matmul, vector)`` FLOPs of one run of ``inst`` (a fusion: its body's)."""
    op = inst.opcode
    if op == "dot":
        return _dot_flops(module, inst), 0.0
    if op == "convolution":
        return _convolution_flops(module, inst), 0.0
    if op == "custom-call":
        found = _gemm_call_flops(module, inst) or _ragged_kernel_flops(module, inst)
        if found:
            return found, 0.0
        kernel = kernel_cost(module, inst)
        return (0.0 if kernel is None else kernel.flops or 0.0), 0.0
    if op in ("fusion", "call") and seen < 16:
        matmul = vector = 0.0
        for inner in body_of(module, inst):
            m, v = instruction_flops(module, inner, seen + 1)
            matmul += m
            vector += v
        return matmul, vector
    if op in _REDUCTIONS:
        operands = inst.operands[: max(1, len(inst.operands) // 2)]
        return 0.0, float(sum(_elements(shape_of(module, n)) for n in operands))
    if op in _FREE or op in COLLECTIVES or op in ASYNC_COPIES:
        return 0.0, 0.0
    if op.endswith(("-start", "-done", "-update")):
        return 0.0, 0.0
    return 0.0, float(_elements(inst.shape))


def shape_of(module: Module, name: str) -> str:
    found = module.instructions.get(name)
    return "" if found is None else found.shape

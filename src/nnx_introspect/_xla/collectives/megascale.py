"""A multi-slice TPU program's collectives across slices: megascale host transfers.

XLA:TPU partitions a program for several slices (``num_slices``) per slice:
``num_partitions`` is one slice's devices, and what crosses the data-center
network (DCN) is no XLA collective but a pair of host transfers handled by the
megascale runtime (as libtpu 0.0.52 writes them)::

    %send = (bf16[64,8,128]{...}, u32[], token[]) send(%x, %after-all),
        is_host_transfer=true, frontend_attributes={
        _xla_host_transfer_handler_name="xla_megascale_runtime",
        _xla_host_transfer_rendezvous="all-reduce.1_0",
        _xla_megascale_target="{1,2}x{0:3}",
        _xla_megascale_transfer_type="ALL_REDUCE", ...}
    %recv = (bf16[64,8,128]{...}, u32[], token[]) recv(%after-all), ... (the same)

with a ``send-done`` and a ``recv-done``. One row per ``send``: its kind from
the transfer type (:data:`TRANSFER_KINDS`), its operand what this device
sends, the ``recv`` of the same rendezvous what it receives. The slices each
group joins come from the target: ``"{1,2}x{0:3}"`` (slices 1 and 2, each
device 0 to 3), ``{{100000,200000},...}`` (groups of devices, slice x 100000
+ device), or ``{{100001->200000},...}`` (a one-to-one transfer's pairs).
"""

import re
from typing import Final

from nnx_introspect._xla.collectives.errors import format_error, shape_arrays
from nnx_introspect._xla.hlo import Instruction, Module

__all__ = [
    "HANDLER",
    "TRANSFER_KINDS",
    "dcn_axes_of",
    "is_megascale",
    "megascale_recv",
    "transfer_arrays",
    "transfer_kind",
    "transfer_pairs",
    "transfer_slices",
]

HANDLER: Final = '_xla_host_transfer_handler_name="xla_megascale_runtime"'
"""What a megascale host transfer's ``frontend_attributes`` hold."""

TRANSFER_KINDS: Final = {
    "ALL_REDUCE": "all-reduce",
    "ALL_GATHER": "all-gather",
    "REDUCE_SCATTER": "reduce-scatter",
    "ALL_TO_ALL": "all-to-all",
    "ONE_TO_ONE": "collective-permute",
}
"""The collective each ``_xla_megascale_transfer_type`` is."""

_TYPE = re.compile(r'_xla_megascale_transfer_type="?(\w+)')
_RENDEZVOUS = re.compile(r'_xla_host_transfer_rendezvous="([^"]*)"')
_SLICE_LIST = re.compile(r'_xla_megascale_target="\{([\d,]+)\}x')
_DEVICE_GROUP = re.compile(r"_xla_megascale_target=\{\{([\d,]+)\}")


def is_megascale(instruction: Instruction) -> bool:
    """Whether ``instruction`` is a host transfer of the megascale runtime.

    Example:
        >>> from nnx_introspect._xla.hlo import instruction as parse_instruction
        >>> send = parse_instruction(
        ...     "%s = (f32[4]{0}, u32[], token[]) send(%x, %t), channel_id=2, "
        ...     'is_host_transfer=true, frontend_attributes={' + HANDLER + "}")
        >>> is_megascale(send)
        True
    """
    return HANDLER in instruction.attributes.get("frontend_attributes", "")


def transfer_kind(send: Instruction) -> str:
    """The collective a megascale ``send`` is, from its transfer type.

    Raises:
        CollectiveFormatError: a transfer type this code does not read.

    Example:
        >>> from nnx_introspect._xla.hlo import instruction as parse_instruction
        >>> send = parse_instruction(
        ...     "%s = (f32[4]{0}, u32[], token[]) send(%x, %t), frontend_attributes="
        ...     '{_xla_megascale_transfer_type="ALL_GATHER"}')
        >>> transfer_kind(send)
        'all-gather'
    """
    found = _TYPE.search(send.attributes.get("frontend_attributes", ""))
    kind = TRANSFER_KINDS.get(found.group(1)) if found else None
    if kind is None:
        raise format_error(
            "a megascale transfer of a type this code reads "
            f"({', '.join(TRANSFER_KINDS)})",
            send.text,
        )
    return kind


def transfer_slices(send: Instruction) -> int | None:
    """How many slices each group of a megascale transfer joins; ``None``: unsaid.

    Example:
        >>> from nnx_introspect._xla.hlo import instruction as parse_instruction
        >>> send = parse_instruction(
        ...     "%s = (f32[4]{0}, u32[], token[]) send(%x, %t), frontend_attributes="
        ...     '{_xla_megascale_target="{1,2}x{0:3}"}')
        >>> transfer_slices(send)
        2
    """
    attributes = send.attributes.get("frontend_attributes", "")
    listed = _SLICE_LIST.search(attributes)
    if listed:
        return len(listed.group(1).split(","))
    group = _DEVICE_GROUP.search(attributes)
    if group:
        return len({int(d) // 100000 for d in group.group(1).split(",")})
    return None


def transfer_pairs(send: Instruction) -> tuple[tuple[int, int], ...]:
    """A one-to-one transfer's ``(source, target)`` pairs, as its target names them.

    Each id is ``slice x 100000 + device`` (``100001->200000``: device 1 of
    slice 1 to device 0 of slice 2); ``()`` when the target lists none.

    Example:
        >>> from nnx_introspect._xla.hlo import instruction as parse_instruction
        >>> send = parse_instruction(
        ...     "%s = (f32[4]{0}, u32[], token[]) send(%x, %t), frontend_attributes="
        ...     "{_xla_megascale_target={{100001->200000},{200000->100003}}}")
        >>> transfer_pairs(send)
        ((100001, 200000), (200000, 100003))
    """
    attributes = send.attributes.get("frontend_attributes", "")
    return tuple((int(a), int(b)) for a, b in re.findall(r"(\d+)->(\d+)", attributes))


def megascale_recv(send: Instruction, module: Module) -> Instruction | None:
    r"""The ``recv`` of the same rendezvous as a megascale ``send``, if any.

    Example:
        >>> from nnx_introspect._xla.hlo import parse_module
        >>> attributes = 'frontend_attributes={_xla_host_transfer_rendezvous="ag_0"}'
        >>> module = parse_module("\n".join([
        ...     "HloModule m, num_partitions=4", "",
        ...     "ENTRY %main (p: f32[4]) -> f32[8] {",
        ...     "  %p = f32[4]{0} parameter(0)",
        ...     "  %t = token[] after-all()",
        ...     f"  %s = (f32[4]{{0}}, u32[], token[]) send(%p, %t), {attributes}",
        ...     f"  %r = (f32[8]{{0}}, u32[], token[]) recv(%t), {attributes}",
        ...     "  ROOT %g = f32[8]{0} get-tuple-element(%r), index=0", "}"]))
        >>> megascale_recv(module.instructions["s"], module).name
        'r'
    """
    found = _RENDEZVOUS.search(send.attributes.get("frontend_attributes", ""))
    if found is None:
        return None
    key = f'_xla_host_transfer_rendezvous="{found.group(1)}"'
    for instruction in module.instructions.values():
        if instruction.opcode == "recv" and key in instruction.attributes.get(
            "frontend_attributes", ""
        ):
            return instruction
    return None


def transfer_arrays(
    instruction: Instruction,
) -> list[tuple[str, tuple[int, ...], int]]:
    """The arrays a megascale ``send``/``recv`` moves: its tuple's first element.

    ``(payload, u32[], token[])``: the context word and token are not data.

    Example:
        >>> from nnx_introspect._xla.hlo import instruction as parse_instruction
        >>> transfer_arrays(parse_instruction(
        ...     "%s = (bf16[8,256]{1,0}, u32[], token[]) send(%x, %t)"))
        [('bf16', (8, 256), 4096)]
    """
    arrays = shape_arrays(instruction.shape, instruction.text)
    if not arrays:
        raise format_error(
            "a host transfer of (data, context, token)", instruction.text
        )
    return arrays[:1]


def dcn_axes_of(
    dcn_axes: tuple[tuple[str, int], ...], slices: int | None
) -> tuple[str, ...]:
    """The mesh axes a transfer over groups of ``slices`` slices crosses.

    The only combination of the axes over slices (DCN factor above 1) whose
    factors multiply to ``slices``; every axis over slices when ``slices`` is
    unsaid or no single combination fits.

    Example:
        >>> dcn_axes_of((("data", 2), ("fsdp", 1), ("pp", 4)), 2)
        ('data',)
        >>> dcn_axes_of((("data", 2), ("fsdp", 1)), None)
        ('data',)
    """
    crossing = [(name, factor) for name, factor in dcn_axes if factor > 1]
    every = tuple(name for name, _ in crossing)
    if slices is None:
        return every
    fits = []
    for mask in range(1, 2 ** len(crossing)):
        chosen = [crossing[i] for i in range(len(crossing)) if mask >> i & 1]
        product = 1
        for _, factor in chosen:
            product *= factor
        if product == slices:
            fits.append(tuple(name for name, _ in chosen))
    return fits[0] if len(fits) == 1 else every

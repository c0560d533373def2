"""Reading a compiled program's collectives: each one once, in every form XLA writes."""

import dataclasses
import math
import re
from typing import Final

import jax

from nnx_introspect._text import plural
from nnx_introspect._typing import ArgumentError, typechecked
from nnx_introspect._xla.collectives.errors import (
    CollectiveFormatError,
    base_opcode,
    format_error,
    read_module,
    shape_arrays,
    shape_bytes,
)
from nnx_introspect._xla.collectives.groups import (
    group_axes,
    host_network,
    replica_groups,
)
from nnx_introspect._xla.collectives.loops import Calls, call_counts
from nnx_introspect._xla.collectives.megascale import (
    dcn_axes_of,
    is_megascale,
    megascale_recv,
    transfer_arrays,
    transfer_kind,
    transfer_pairs,
    transfer_slices,
)
from nnx_introspect._xla.collectives.report import Collectives
from nnx_introspect._xla.collectives.rows import KINDS, Collective
from nnx_introspect._xla.collectives.sources import array_sources
from nnx_introspect._xla.hlo import (
    HloTextError,
    Instruction,
    Module,
    SourceLocation,
    metadata,
    source_stack,
    tuple_elements,
)
from nnx_introspect._xla.hlo.frames import user_frame
from nnx_introspect._xla.toolchain import jaxlib_version

_UNREAD: Final = frozenset(
    f"{op}{suffix}"
    for op in ("collective-broadcast", "send", "recv")
    for suffix in ("", "-start", "-done")
)
"""Collective opcodes XLA has that this reader does not count: a program holding
one raises :class:`CollectiveFormatError` rather than report less than it moves."""


# --- entry points --------------------------------------------------------------


@typechecked
def compiled_hlo_text(compiled: jax.stages.Compiled) -> str:
    """The optimized per-device HLO text of a compiled step, on any backend.

    ``compiled.as_text()`` gives it for XLA:CPU, XLA:TPU and a deviceless
    XLA:GPU compile alike (checked with jaxlib 0.10.2, the CUDA plugin 0.10.2
    and libtpu 0.0.52); when it gives none, the executable's one HLO module is
    printed instead.

    Args:
        compiled: ``jax.jit(f).lower(...).compile()``.

    Returns:
        The module's text, starting with ``HloModule``.

    Raises:
        ArgumentError: the executable has no single HLO module to print.
        CollectiveFormatError: neither could print the program (jaxlib reads
            the compiler's module back to print it; a libtpu newer than
            jaxlib's XLA can write instructions jaxlib's reader refuses).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> text = compiled_hlo_text(jax.jit(jnp.sin).lower(1.0).compile())
        >>> text.startswith("HloModule jit_sin")
        True
    """
    first: Exception | None = None
    try:
        text = compiled.as_text()
    except Exception as error:  # a backend without the text: print the module
        text, first = None, error
    if isinstance(text, str) and text.startswith("HloModule"):
        return text
    try:
        executable = compiled.runtime_executable()
        modules = [] if executable is None else executable.hlo_modules()
    except Exception as error:
        said = " ".join(str(first or error).split())[:300]
        raise CollectiveFormatError(
            "XLA could not print the compiled program, so its collectives cannot "
            f'be read: "{said}" (jaxlib {jaxlib_version()})'
        ) from error
    if len(modules) != 1:
        raise ArgumentError(
            "compiled",
            f"`compiled` holds {len(modules)} HLO modules, not one; pass the "
            "compiled step of one jax.jit function.",
        )
    printed: str = modules[0].to_string()
    return printed


@typechecked
def read_collectives(
    hlo_text: str,
    mesh_axes: tuple[tuple[str, int], ...],
    *,
    dcn_axes: tuple[tuple[str, int], ...] = (),
    network: str | None = None,
    hosts: tuple[int, ...] | None = None,
) -> Collectives:
    r"""Every collective of a compiled SPMD program, its bytes and its mesh axes.

    Reads each all-gather, reduce-scatter, all-reduce, all-to-all, ragged
    all-to-all and collective-permute once (see the module's docstring for how
    the backends write them), with:

    * ``nbytes``: per device and execution, the **result** bytes of an
      all-gather, all-reduce, all-to-all or collective-permute, the
      **operand** (input) bytes of a reduce-scatter, and for a ragged
      all-to-all its payload: the smaller of its send buffer (operand 0) and
      its receive buffer (the result, which XLA sizes statically for the worst
      case: ``Collective.worst_case_receive_bytes``), what each device sends
      on average when every row of the send buffer is sent;
    * ``wire_bytes``: the ring algorithms' bytes each device sends,
      ``(n-1)/n * nbytes`` for an all-gather, a reduce-scatter and an
      all-to-all (ragged or not), ``2(n-1)/n * nbytes`` for an all-reduce and
      ``nbytes`` for a collective-permute, over groups of ``n`` devices
      (:func:`wire_factor`);
    * ``axes``: the mesh axes each group spans, from the replica groups in any
      form XLA prints them (``{{0,1},{2,3}}``, ``[2,4]<=[8]``,
      ``[4,2]<=[2,4]T(1,0)`` or ``mesh['axis_0'=2,'axis_1'=4] {'axis_0'}``,
      whose ``axis_i`` are XLA's own factoring of the devices, not the mesh's
      axes: the groups are expanded to partition ids and mapped back);
    * ``count``: the product of the known trip counts of the while loops around
      it (XLA's ``known_trip_count``, or for a loop without one, XLA:TPU's, a
      counter compared ``LT`` with a constant, stepped by a constant from a
      constant); a loop with neither counts once and sets
      ``trip_count_known=False``. Collectives in a conditional's branches count
      as if every branch ran.

    Args:
        hlo_text: the optimized module (``compiled.as_text()`` or
            :func:`compiled_hlo_text`).
        mesh_axes: the mesh it was compiled for, ``(name, size)`` per axis in
            ``mesh.devices`` order (``tuple(mesh.shape.items())``); their
            product is the program's ``num_partitions``. For a program over
            several TPU slices, one slice's mesh: each axis's size divided by
            its ``dcn_axes`` factor.
        dcn_axes: for a program over several TPU slices, each axis's share
            of the slices, ``(name, factor)`` in the mesh's order (``()``: one
            slice). Its megascale host transfers (``send``/``recv`` pairs of
            the ``xla_megascale_runtime``, see
            :mod:`~nnx_introspect._xla.collectives.megascale`) are read as
            collectives over the data-center network, one row per ``send``,
            with ``network="DCN"`` and as axes the axes over slices.
        network: what the program's own collectives' rows say they cross
            (``"ICI"`` for a TPU program); ``None``: unsaid.
        hosts: for a GPU program, each partition's host
            (``device.process_index`` of ``mesh.devices.flat``): each row's
            network is then ``"NVLink"`` when every group stays in one host,
            else ``"network"`` (``groups.host_network``).

    Returns:
        The :class:`Collectives`, rows in the program's order.

    Raises:
        ArgumentError: `hlo_text` is not an HLO module, or `mesh_axes` is empty,
            repeats a name, has a size below 1 or does not multiply to the
            program's partitions.
        CollectiveFormatError: a collective (or the module around it) is in a
            form this code does not read, or is one it does not count
            (``collective-broadcast``, ``send``/``recv`` other than the
            megascale runtime's).

    Example:
        >>> text = "\n".join([
        ...     "HloModule jit_f, num_partitions=4",
        ...     "",
        ...     "ENTRY %main (p: f32[8]) -> f32[32] {",
        ...     "  %p = f32[8]{0} parameter(0)",
        ...     "  ROOT %ag = f32[32]{0} all-gather(%p), channel_id=1, replica_groups="
        ...     "[1,4]<=[4], dimensions={0}, use_global_device_ids=true",
        ...     "}",
        ... ])
        >>> (row,) = read_collectives(text, (("data", 4),)).rows
        >>> row.nbytes, row.group_size, row.axes, row.wire_bytes
        (128, 4, ('data',), Fraction(96, 1))
    """
    _check_mesh_axes(mesh_axes)
    if dcn_axes:
        _check_mesh_axes(dcn_axes)
    _check_module_text(hlo_text)
    module = read_module(hlo_text)
    partitions = math.prod(size for _, size in mesh_axes)
    if partitions != module.num_partitions:
        raise ArgumentError(
            "mesh_axes",
            f"`mesh_axes` {dict(mesh_axes)} has {plural(partitions, 'device')} but the "
            f"program {module.name} was partitioned for {module.num_partitions}; "
            "pass the axes of the mesh it was compiled on.",
        )
    if module.replica_count != 1:
        raise CollectiveFormatError(
            f"{module.name} has replica_count={module.replica_count}: this code "
            "reads SPMD-partitioned programs of one replica (jax.jit's), where a "
            "replica group's ids are partitions."
        )
    calls = call_counts(module)
    rows: list[Collective] = []
    for instructions in module.computations.values():
        for instruction in instructions:
            if is_megascale(instruction):
                row = _dcn_collective(instruction, module, calls, dcn_axes)
            else:
                row = _collective(instruction, module, calls, mesh_axes)
                if row is not None and hosts is not None:
                    row = dataclasses.replace(
                        row, network=host_network(row.groups, hosts)
                    )
                elif row is not None and network is not None:
                    row = dataclasses.replace(row, network=network)
            if row is not None:
                rows.append(row)
    _check_pairs(module)
    _check_tpu_fusions(module)
    return Collectives(
        module=module.name, mesh_axes=mesh_axes, rows=tuple(rows), dcn_axes=dcn_axes
    )


def _check_mesh_axes(mesh_axes: tuple[tuple[str, int], ...]) -> None:
    names = [name for name, _ in mesh_axes]
    if not mesh_axes or len(set(names)) != len(names):
        raise ArgumentError(
            "mesh_axes",
            "`mesh_axes` must name each mesh axis once, as (name, size) pairs such "
            f"as (('data', 2), ('fsdp', 4)), got {mesh_axes!r}.",
        )
    bad = [(name, size) for name, size in mesh_axes if size < 1]
    if bad:
        raise ArgumentError(
            "mesh_axes", f"`mesh_axes` sizes must be positive integers, got {bad!r}."
        )


def _check_module_text(text: str) -> None:
    lines = text.splitlines()
    if not lines or not re.match(r"^HloModule (\S+?),?(?: |$)", lines[0]):
        raise ArgumentError(
            "hlo_text",
            "`hlo_text` must be an XLA HLO module (its first line 'HloModule "
            f"...'), got {text[:60]!r}; pass compiled_hlo_text(compiled).",
        )
    if sum(line.startswith("HloModule ") for line in lines) != 1:
        raise ArgumentError(
            "hlo_text", "`hlo_text` holds several HLO modules; pass one module's text."
        )


# --- one collective ------------------------------------------------------------


def _collective(
    instruction: Instruction,
    module: Module,
    calls: dict[str, Calls],
    mesh_axes: tuple[tuple[str, int], ...],
) -> Collective | None:
    opcode = instruction.opcode
    if opcode in _UNREAD:
        raise format_error(
            f"a {opcode} (not one of the collectives this code counts: "
            f"{', '.join(KINDS)})",
            instruction.text,
        )
    if base_opcode(opcode) not in KINDS:
        return None
    if opcode.endswith("-done"):
        return None  # counted at its start (_check_pairs: one done per start)
    if instruction.computation not in calls:
        raise format_error(
            "a collective in a computation no instruction calls", instruction.text
        )
    found = _form(instruction, module)
    if found is None:
        return None
    kind, named, form, result_shape = found
    count = calls[instruction.computation]
    groups, pairs = replica_groups(instruction, module.num_partitions)
    result = shape_arrays(result_shape, instruction.text)
    operands = [
        array
        for name in instruction.operands
        for array in shape_arrays(
            _operand_shape(name, module, instruction), instruction.text
        )
    ]
    counted = operands if kind == "reduce-scatter" else result
    if kind == "ragged-all-to-all":
        counted = _ragged_payload(instruction, module, result)
    items = metadata(named.text)
    try:
        stack = source_stack(items, module.frames)
    except HloTextError as error:
        raise format_error(error.what, named.text) from None
    channel = instruction.attributes.get("channel_id")
    own = user_frame(stack, stack[0] if stack else None)
    sources = array_sources(instruction, kind, len(counted), module)
    return Collective(
        kind=kind,
        name=named.name,
        opcode=named.opcode,
        form=form,
        computation=named.computation,
        nbytes=sum(nbytes for _, _, nbytes in counted),
        result_bytes=sum(nbytes for _, _, nbytes in result),
        operand_bytes=sum(nbytes for _, _, nbytes in operands),
        dtypes=tuple(dtype for dtype, _, _ in counted),
        shapes=tuple(dims for _, dims, _ in counted),
        group_size=max((len(g) for g in groups), default=1),
        groups=groups,
        axes=group_axes(groups, mesh_axes),
        source_target_pairs=pairs,
        channel_id=int(channel) if channel and channel.isdigit() else None,
        op_name=items.get("op_name"),
        source=own or _heaviest(sources, [nbytes for _, _, nbytes in counted]),
        stack=stack,
        count=count.count,
        trip_count_known=count.known,
        loops=count.loops,
        sources=sources,
    )


def _dcn_collective(
    instruction: Instruction,
    module: Module,
    calls: dict[str, Calls],
    dcn_axes: tuple[tuple[str, int], ...],
) -> Collective | None:
    """A megascale ``send``'s row: a collective across slices; ``None`` for the rest.

    The ``recv``, ``send-done`` and ``recv-done`` of the same transfer are
    not rows (the ``send`` is). Its bytes follow :class:`Collective`'s rule:
    the received buffer of an all-gather, the sent one otherwise.
    """
    if instruction.opcode != "send":
        return None
    if not any(factor > 1 for _, factor in dcn_axes):
        raise format_error(
            "a megascale host transfer in a program of one slice (pass the "
            "mesh's axes over slices, `dcn_axes`)",
            instruction.text,
        )
    if instruction.computation not in calls:
        raise format_error(
            "a collective in a computation no instruction calls", instruction.text
        )
    kind = transfer_kind(instruction)
    sent = transfer_arrays(instruction)
    recv = megascale_recv(instruction, module)
    received = sent if recv is None else transfer_arrays(recv)
    counted = received if kind == "all-gather" else sent
    slices = transfer_slices(instruction)
    axes = dcn_axes_of(dcn_axes, slices)
    factors = dict(dcn_axes)
    count = calls[instruction.computation]
    items = metadata(instruction.text)
    try:
        stack = source_stack(items, module.frames)
    except HloTextError as error:
        raise format_error(error.what, instruction.text) from None
    channel = instruction.attributes.get("channel_id")
    return Collective(
        kind=kind,
        name=instruction.name,
        opcode=instruction.opcode,
        form="megascale host transfer",
        computation=instruction.computation,
        nbytes=sum(nbytes for _, _, nbytes in counted),
        result_bytes=sum(nbytes for _, _, nbytes in received),
        operand_bytes=sum(nbytes for _, _, nbytes in sent),
        dtypes=tuple(dtype for dtype, _, _ in counted),
        shapes=tuple(dims for _, dims, _ in counted),
        group_size=slices or math.prod(factors[a] for a in axes),
        groups=(),
        axes=axes,
        source_target_pairs=transfer_pairs(instruction)
        if kind == "collective-permute"
        else None,
        channel_id=int(channel) if channel and channel.isdigit() else None,
        op_name=items.get("op_name"),
        source=user_frame(stack, stack[0] if stack else None),
        stack=stack,
        count=count.count,
        trip_count_known=count.known,
        loops=count.loops,
        network="DCN",
    )


def _ragged_payload(
    instruction: Instruction,
    module: Module,
    result: list[tuple[str, tuple[int, ...], int]],
) -> list[tuple[str, tuple[int, ...], int]]:
    """The arrays of a ragged all-to-all's payload: its send or receive buffer.

    ``ragged-all-to-all(input, output, input_offsets, send_sizes,
    output_offsets, recv_sizes)``: each device sends rows of ``input`` (at most
    all of them) and receives into a buffer of ``output``'s shape, the result,
    which XLA sizes statically for the worst case. What is sent is received,
    so on average over the devices a device sends at most the smaller of the
    two buffers; routing that sends every row (a dropless MoE's dispatch, and
    its combine sending them back) reaches it. The sizes are run-time values.
    """
    if len(instruction.operands) != 6:
        raise format_error(
            "a ragged-all-to-all of six operands (input, output, input_offsets, "
            "send_sizes, output_offsets, recv_sizes)",
            instruction.text,
        )
    sent = shape_arrays(
        _operand_shape(instruction.operands[0], module, instruction),
        instruction.text,
    )
    if len(sent) != 1 or len(result) != 1:
        raise format_error("a ragged-all-to-all of one array", instruction.text)
    return sent if sent[0][2] <= result[0][2] else result


def _heaviest(
    sources: tuple[SourceLocation | None, ...], nbytes: list[int]
) -> SourceLocation | None:
    """The source of the most bytes among a collective's arrays (first on a tie)."""
    weights: dict[SourceLocation, int] = {}
    for source, size in zip(sources, nbytes, strict=True):
        if source is not None:
            weights[source] = weights.get(source, 0) + size
    return max(weights, key=lambda s: weights[s], default=None)


def _form(
    instruction: Instruction, module: Module
) -> tuple[str, Instruction, str, str] | None:
    """``(kind, instruction named, form, result shape)`` of a collective's row.

    ``None`` for a half counted elsewhere: the done or a continuation of
    XLA:TPU's async collective fusion.
    """
    kind, named, form = base_opcode(instruction.opcode), instruction, "sync"
    result_shape = instruction.shape
    callers = [
        c
        for c in module.callers.get(instruction.computation, [])
        if c.opcode not in ("async-update", "async-done")
    ]
    fusions = [c for c in callers if c.opcode == "fusion"]
    if instruction.opcode.endswith("-start"):
        form, result_shape = "async", _start_result(instruction, module)
    elif fusions:
        root = module.root(instruction.computation)
        target = root.attributes.get("custom_call_target", "") if root else ""
        if target == '"AsyncCollectiveDone"':
            return None  # the done half of XLA:TPU's async collective fusion
        if any(
            "continuation_config" in f.attributes.get("backend_config", "")
            for f in fusions
        ):
            return None  # a continuation of the same collective
        form = (
            "TPU async collective fusion"
            if (target == '"AsyncCollectiveStart"')
            else "fused"
        )
        scatter = _scatter_fusion(instruction, fusions, module)
        if scatter is not None:
            kind, named, form = "reduce-scatter", scatter, "TPU reduce-scatter fusion"
            result_shape = scatter.shape
    elif any(c.opcode == "async-start" for c in callers):
        form = "async wrapper"
    return kind, named, form, result_shape


def _start_result(start: Instruction, module: Module) -> str:
    """The result shape of an async ``-start``, read from its own shape.

    An all-reduce-start's shape is its result; the other starts' are tuples
    whose second element is the result (``(operands, results)``, then a
    collective-permute's context words). A done that uses the start directly
    must hold as many bytes; a done reached through a loop's tuple (a
    pipelined collective) is not needed.
    """
    if start.opcode == "all-reduce-start":
        own = start.shape
    else:
        elements = tuple_elements(start.shape)
        if len(elements) < 2:
            raise format_error(f"a {start.opcode} of (operands, results)", start.text)
        own = elements[1]
    done = f"{base_opcode(start.opcode)}-done"
    for user in module.users.get(start.name, []):
        if user.opcode == done and shape_bytes(user.shape, user.text) != shape_bytes(
            own, start.text
        ):
            raise format_error(f"a {done} of its start's result", user.text)
    return own


def _check_pairs(module: Module) -> None:
    """As many ``X-done`` as ``X-start`` for each kind, or the reading is off."""
    for kind in KINDS:
        starts = dones = 0
        for instruction in module.instructions.values():
            starts += instruction.opcode == f"{kind}-start"
            dones += instruction.opcode == f"{kind}-done"
        if starts != dones:
            raise format_error(
                f"one {kind}-done per {kind}-start (found {starts} and {dones})",
                module.name,
            )


def _operand_shape(name: str, module: Module, at: Instruction) -> str:
    operand = module.instructions.get(name)
    if operand is None:
        raise format_error(f"the operand %{name}", at.text)
    return operand.shape


def _scatter_fusion(
    instruction: Instruction, fusions: list[Instruction], module: Module
) -> Instruction | None:
    """XLA:TPU's reduce-scatter fusion around ``instruction``, if it is one.

    A ``kCustom`` fusion whose computation all-reduces and uses the sum only
    through ``dynamic-slice``s (each device keeps its share), with a result of
    ``1 / n`` of the all-reduce's bytes over groups of ``n``.
    """
    if instruction.opcode != "all-reduce" or len(fusions) != 1:
        return None
    fusion = fusions[0]
    if fusion.attributes.get("kind") != "kCustom":
        return None
    users = module.users.get(instruction.name, [])
    slices = []
    for user in users:
        if user.opcode == "get-tuple-element":
            slices.extend(module.users.get(user.name, []))
        else:
            slices.append(user)
    if not slices or any(s.opcode != "dynamic-slice" for s in slices):
        return None
    groups, _ = replica_groups(instruction, module.num_partitions)
    size = max((len(g) for g in groups), default=1)
    reduced = shape_bytes(instruction.shape, instruction.text)
    if shape_bytes(fusion.shape, fusion.text) * size != reduced:
        return None
    return fusion


def _check_tpu_fusions(module: Module) -> None:
    """As many XLA:TPU async collective starts as dones, or the reading is off."""
    targets: dict[str, int] = {}
    for name in module.computations:
        root = module.root(name)
        if root is None or root.opcode != "custom-call":
            continue
        target = root.attributes.get("custom_call_target", "")
        if target in ('"AsyncCollectiveStart"', '"AsyncCollectiveDone"'):
            callers = [c for c in module.callers.get(name, []) if c.opcode == "fusion"]
            targets[target] = targets.get(target, 0) + len(callers)
    starts = targets.get('"AsyncCollectiveStart"', 0)
    dones = targets.get('"AsyncCollectiveDone"', 0)
    if starts != dones:
        raise format_error(
            f"as many AsyncCollectiveStart fusions as AsyncCollectiveDone ones "
            f"(found {starts} and {dones})",
            module.name,
        )

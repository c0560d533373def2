"""Replica groups in every form XLA prints, as partition ids, then as mesh axes."""

import math
import re
from collections.abc import Sequence

import numpy as np

from nnx_introspect._xla.collectives.errors import base_opcode, format_error
from nnx_introspect._xla.collectives.rows import ANY_QUESTION
from nnx_introspect._xla.hlo import Instruction

_EXPLICIT = re.compile(r"\{(?:\{[\d,]*\}(?:,\{[\d,]*\})*)?\}")


_IOTA = re.compile(r"\[(\d+),(\d+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")


_MESH_ONLY = re.compile(r"mesh\[(?P<axes>[^\]]*)\] (?P<group>\{[^}]*\})")


_MESH = re.compile(
    r"mesh\[(?P<axes>[^\]]*)\] \((?:\[(?P<iota>[\d,]+)\](?:T\((?P<perm>[\d,]+)\))?"
    r"|(?P<list>(?:\[[\d,]+\])?[\d,]+))\) (?P<group>\{[^}]*\})"
)


_MESH_AXIS = re.compile(r"'([^']*)'=(\d+)")


_MESH_GROUP = re.compile(r"'([^']*)'(?::\((\d+)\)(\d+))?")


def replica_groups(
    instruction: Instruction, partitions: int
) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, int], ...] | None]:
    """The groups as partition ids, and a permute's pairs."""
    attributes = instruction.attributes
    cross_replica = "channel_id" not in attributes
    if cross_replica and attributes.get("use_global_device_ids") == "true":
        raise format_error(
            "global device ids with a channel id (XLA requires one)", instruction.text
        )
    if base_opcode(instruction.opcode) == "collective-permute":
        text = attributes.get("source_target_pairs")
        if text is None or not _EXPLICIT.fullmatch(text):
            raise format_error("source_target_pairs={{s,t},...}", instruction.text)
        pairs = tuple((int(s), int(t)) for s, t in re.findall(r"\{(\d+),(\d+)\}", text))
        if cross_replica:  # replica ids; one replica: each device alone
            return _alone(pairs, instruction, partitions), pairs
        _check_ids([i for pair in pairs for i in pair], partitions, instruction)
        return _components(pairs), pairs
    text = attributes.get("replica_groups")
    if text is None:
        raise format_error("replica_groups=", instruction.text)
    if text.startswith("mesh["):
        groups = _mesh_groups(text, attributes.get("device_ids"), instruction)
    elif _EXPLICIT.fullmatch(text):
        groups = [
            tuple(int(i) for i in group.split(",") if i)
            for group in re.findall(r"\{([\d,]*)\}", text[1:-1])
        ]
    elif found := _IOTA.fullmatch(text):
        dims = [int(d) for d in found[3].split(",")]
        perm = [int(p) for p in found[4].split(",")] if found[4] else None
        ids = np.arange(math.prod(dims)).reshape(dims)
        ids = ids.transpose(perm) if perm else ids
        groups = [tuple(int(i) for i in g) for g in ids.reshape(int(found[1]), -1)]
        if len(groups[0]) != int(found[2]):
            raise format_error("an iota replica group list", instruction.text)
    else:
        raise format_error("replica groups", instruction.text)
    if cross_replica:
        flat = [i for g in groups for i in g]
        return _alone([(i, i) for i in flat], instruction, partitions), None
    if not groups or groups == [()]:
        groups = [tuple(range(partitions))]
    _check_ids([i for g in groups for i in g], partitions, instruction)
    return tuple(groups), None


def _alone(
    pairs: Sequence[tuple[int, int]], instruction: Instruction, partitions: int
) -> tuple[tuple[int, ...], ...]:
    """Cross-replica groups with one replica: ids 0 only; each device alone."""
    if any(i != 0 for pair in pairs for i in pair):
        raise format_error("replica ids of a one-replica program", instruction.text)
    return tuple((p,) for p in range(partitions))


def _check_ids(ids: Sequence[int], partitions: int, instruction: Instruction) -> None:
    if any(i >= partitions for i in ids):
        raise format_error(
            f"partition ids below num_partitions={partitions}", instruction.text
        )


def _components(pairs: Sequence[tuple[int, int]]) -> tuple[tuple[int, ...], ...]:
    """The sets of devices a permute's pairs connect (each sorted)."""
    parent: dict[int, int] = {}

    def find(i: int) -> int:
        parent.setdefault(i, i)
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for source, target in pairs:
        parent[find(source)] = find(target)
    members: dict[int, list[int]] = {}
    for i in sorted(parent):
        members.setdefault(find(i), []).append(i)
    return tuple(tuple(group) for group in members.values())


def _mesh_groups(
    text: str, device_ids: str | None, instruction: Instruction
) -> list[tuple[int, ...]]:
    """XLA's ``mesh[...] {axes}`` replica groups, expanded as XLA expands them.

    XLA's ``MeshAxesReplicaGroupList``: the mesh's device array (iota, or the
    ``device_ids``) reshaped so each named (sub-)axis is a dimension, the named
    ones moved last in the order listed, then cut into groups.
    """
    # without device ids: "mesh[...] {axes}"; with them, XLA prints
    # "mesh[...], device_ids=(...) {axes}", read as two attributes
    found = (
        _MESH_ONLY.fullmatch(text)
        if device_ids is None
        else _MESH.fullmatch(text + " " + device_ids)
    )
    if found is None:
        raise format_error("a mesh replica group list", instruction.text)
    axes = [(name, int(size)) for name, size in _MESH_AXIS.findall(found["axes"])]
    if not axes or ",".join(f"'{n}'={s}" for n, s in axes) != found["axes"]:
        raise format_error("a mesh's axes", instruction.text)
    sizes = [size for _, size in axes]
    total = math.prod(sizes)
    if device_ids is None:
        devices = np.arange(total)
    elif found["iota"]:
        dims = [int(d) for d in found["iota"].split(",")]
        perm = [int(p) for p in found["perm"].split(",")] if found["perm"] else None
        devices = np.arange(math.prod(dims)).reshape(dims)
        devices = (devices.transpose(perm) if perm else devices).reshape(-1)
    else:
        listed = re.sub(r"^\[[\d,]+\]", "", found["list"])
        devices = np.array([int(i) for i in listed.split(",") if i])
    selected = found["group"]
    if devices.size != total or sorted(devices.tolist()) != list(range(total)):
        raise format_error("a mesh's device ids", instruction.text)
    inner = selected[1:-1]
    refs = [
        (name, int(pre) if pre else None, int(size) if size else None)
        for name, pre, size in _MESH_GROUP.findall(inner)
    ]
    written = ",".join(
        f"'{n}'" + (f":({p}){s}" if p is not None else "") for n, p, s in refs
    )
    index = {name: i for i, (name, _) in enumerate(axes)}
    if written != inner or any(name not in index for name, _, _ in refs):
        raise format_error("a mesh's grouped axes", instruction.text)
    # each mesh dimension split as its (sub-)axes need; the grouped parts found
    reshape: list[int] = []
    grouped: list[int] = [0] * len(refs)
    for dim, (_, size) in enumerate(axes):
        mine = [(k, ref) for k, ref in enumerate(refs) if index[ref[0]] == dim]
        if not mine:
            reshape.append(size)
            continue
        if any(ref[1] is None for _, ref in mine):
            if len(mine) != 1:
                raise format_error("a mesh's grouped axes", instruction.text)
            grouped[mine[0][0]] = len(reshape)
            reshape.append(size)
            continue
        product = 1
        for k, (_, pre, sub) in sorted(mine, key=lambda item: item[1][1] or 0):
            assert pre is not None and sub is not None
            if pre % product or size % (pre * sub):
                raise format_error("a mesh's sub-axes", instruction.text)
            if pre != product:
                reshape.append(pre // product)
            grouped[k] = len(reshape)
            reshape.append(sub)
            product = pre * sub
        if product != size:
            reshape.append(size // product)
    rest = [d for d in range(len(reshape)) if d not in grouped]
    arranged = devices.reshape(reshape).transpose(rest + grouped)
    group_size = math.prod(reshape[d] for d in grouped)
    return [tuple(int(i) for i in g) for g in arranged.reshape(-1, group_size)]


def group_axes(
    groups: tuple[tuple[int, ...], ...], mesh_axes: tuple[tuple[str, int], ...]
) -> tuple[str, ...]:
    """The mesh axes every group spans whole, or ``("?",)``."""
    sizes = [size for _, size in mesh_axes]
    spans = set()
    for group in groups:
        if len(set(group)) != len(group):
            return ANY_QUESTION
        coords = np.array(np.unravel_index(list(group), sizes)).T
        varying = tuple(
            d for d in range(len(sizes)) if len(set(coords[:, d].tolist())) > 1
        )
        if len(group) != math.prod(sizes[d] for d in varying):
            return ANY_QUESTION
        spans.add(varying)
    if len(spans) != 1:
        return () if not spans else ANY_QUESTION
    (span,) = spans
    return tuple(mesh_axes[d][0] for d in span)


def host_network(
    groups: tuple[tuple[int, ...], ...], hosts: Sequence[int]
) -> str | None:
    """A GPU collective's link: ``"NVLink"`` when each group stays in one host.

    ``hosts`` is each partition's host (``device.process_index`` of
    ``mesh.devices.flat``); a group spanning hosts goes over ``"network"``,
    as :func:`~nnx_introspect._roofline.links.gpu_in_host` counts it.
    ``None`` without groups.

    Example:
        >>> host_network(((0, 1), (2, 3)), (0, 0, 1, 1))
        'NVLink'
        >>> host_network(((0, 2), (1, 3)), (0, 0, 1, 1))
        'network'
    """
    if not groups:
        return None
    one_host = all(len({hosts[i] for i in group}) == 1 for group in groups)
    return "NVLink" if one_host else "network"

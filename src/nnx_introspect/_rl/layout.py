"""Where each role of a GRPO step runs: one mesh for all, or a slice each.

``role_meshes`` names the mesh of the roles that do not run on ``mesh``:
``{"rollout": "tp=4"}`` puts the rollout on 4 devices of its own and the
actor and reference on ``mesh``'s devices (tunix's disaggregated
``RLCluster(role_to_mesh=...)``). Each mesh named is a slice of its own: the
slices are disjoint, and together they must fit the topology (or this
process's devices). A role's programs compile for its slice (``v5e-4`` of a
``v5e-8``: the same chips, fewer of them).
"""

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from nnx_introspect._accelerators import resolve_topology, slice_of
from nnx_introspect._mesh import as_abstract_mesh
from nnx_introspect._serve import TENSOR_PARALLEL_AXES
from nnx_introspect._text import plural
from nnx_introspect._typing import ArgumentError

__all__ = ["ROLES", "Layout", "RoleSlice", "as_layout", "data_parallel", "spoken"]

ROLES = ("actor", "rollout", "reference")
"""The roles ``role_meshes`` may place: the actor (its training step), the
rollout (prefill and decode) and the reference (its log-probabilities)."""

CRITIC = "critic"
"""A PPO step's fifth role: the critic (its values and its training step)."""


def spoken(names: list[str]) -> str:
    """Names in words: ``"a"``, ``"a and b"``, ``"a, b and c"``.

    Example:
        >>> spoken(["actor"]), spoken(["actor", "critic"])
        ('actor', 'actor and critic')
        >>> spoken(["actor", "reference", "critic"])
        'actor, reference and critic'
    """
    if len(names) < 2:
        return "".join(names)
    return f"{', '.join(names[:-1])} and {names[-1]}"


@dataclasses.dataclass(frozen=True)
class RoleSlice:
    """The devices one group of roles runs on.

    Attributes:
        mesh: The mesh as given (what the role's programs compile on).
        label: The mesh in words: ``"fsdp=4"``.
        devices: Its device count.
        topology: The slice's own target (``"v5e-4"``), or ``None``.
    """

    mesh: Any
    label: str
    devices: int
    topology: str | None


@dataclasses.dataclass(frozen=True)
class Layout:
    """Each role's slice; roles on the same slice share its devices.

    Example:
        >>> layout = as_layout("fsdp=4", {"rollout": "tp=4"}, "v5e-8", True)
        >>> layout.slice("actor").label, layout.slice("rollout").topology
        ('fsdp=4', 'v5e-4')
        >>> layout.colocated, layout.shared("actor", "reference")
        (False, True)
        >>> layout.named("reference")
        'fsdp=4 (actor and reference)'
    """

    slices: tuple[tuple[str, RoleSlice], ...]
    topology: str | None = None
    """The topology the slices are cut from."""

    def slice(self, role: str) -> RoleSlice:
        """The slice ``role`` runs on."""
        return dict(self.slices)[role]

    def shared(self, a: str, b: str) -> bool:
        """Whether roles ``a`` and ``b`` run on the same devices."""
        return self.slice(a) is self.slice(b)

    def named(self, role: str) -> str:
        """``role``'s slice in words: its mesh and the roles on it."""
        on = [r for r, s in self.slices if s is self.slice(role)]
        return f"{self.slice(role).label} ({spoken(on)})"

    @property
    def colocated(self) -> bool:
        """Whether every role runs on the same devices."""
        return len({id(s) for _, s in self.slices}) == 1

    def words(self) -> str:
        """The layout in words, for a title."""
        if self.colocated:
            return "colocated"
        groups: dict[int, list[str]] = {}
        for role, s in self.slices:
            groups.setdefault(id(s), []).append(role)
        parts = []
        for roles in groups.values():
            s = self.slice(roles[0])
            devices = f"{s.devices} device{'s' if s.devices != 1 else ''}"
            parts.append(f"{spoken(roles)} on {s.label} ({devices})")
        return "disaggregated: " + "; ".join(parts)


def data_parallel(mesh: Any) -> int:
    """The devices ``mesh``'s data-parallel axes span: every axis but ``tp``'s.

    Example:
        >>> data_parallel("fsdp=4,tp=2"), data_parallel({"tp": 8})
        (4, 1)
    """
    abstract = as_abstract_mesh(mesh)
    return math.prod(
        int(n)
        for a, n in zip(abstract.axis_names, abstract.axis_sizes, strict=True)
        if a not in TENSOR_PARALLEL_AXES
    )


def _slice(mesh: Any, topology: str | None, name: str) -> RoleSlice:
    try:
        abstract = as_abstract_mesh(mesh, name)
    except ValueError as error:
        raise ArgumentError(name.partition("[")[0], str(error)) from None
    devices = math.prod(int(n) for n in abstract.axis_sizes)
    label = ",".join(
        f"{a}={n}"
        for a, n in zip(abstract.axis_names, abstract.axis_sizes, strict=True)
    )
    return RoleSlice(mesh, label, devices, topology)


def as_layout(
    mesh: Any,
    role_meshes: Any,
    topology: str | None,
    reference: bool,
    critic: bool = False,
) -> Layout:
    """``mesh`` and ``role_meshes`` checked: each role's slice, before any compile.

    The roles are :data:`ROLES`, and with ``critic`` the critic too.

    Raises:
        ArgumentError: An unknown role, a role mesh for a role the step does
            not run, a mesh JAX refuses, slices that together need more
            devices than the topology (or this process) has, or a slice size
            the topology's family has no slice of; naming ``role_meshes``.
    """
    roles = (*ROLES, CRITIC) if critic else ROLES
    if role_meshes is None or (isinstance(role_meshes, Mapping) and not role_meshes):
        whole = _slice(mesh, topology, "mesh")
        return Layout(tuple((role, whole) for role in roles), topology)
    if not isinstance(role_meshes, Mapping):
        raise ArgumentError(
            "role_meshes",
            "`role_meshes` must map roles to meshes, such as {'rollout': 'tp=4'}, "
            f"got {type(role_meshes).__name__}.",
        )
    unknown = sorted(str(r) for r in role_meshes if r not in (*ROLES, CRITIC))
    if unknown:
        raise ArgumentError(
            "role_meshes",
            f"`role_meshes` names the role {unknown[0]!r}, which an RL step does "
            f"not have; its roles are {', '.join(ROLES)} (and {CRITIC}, with a "
            "critic).",
        )
    if CRITIC in role_meshes and not critic:
        raise ArgumentError(
            "role_meshes",
            "`role_meshes` places the critic, but no `critic` is given (a GRPO "
            "step has none). Leave it out, or pass `critic=` for a PPO step.",
        )
    if "reference" in role_meshes and not reference:
        raise ArgumentError(
            "role_meshes",
            "`role_meshes` places the reference, but `reference=False` runs "
            "none. Leave it out, or pass `reference=True`.",
        )
    total = _total_devices(topology)
    base = _slice(mesh, None, "mesh")
    own = {r: _slice(m, None, f"role_meshes['{r}']") for r, m in role_meshes.items()}
    groups = [base] * any(r not in own for r in roles) + list(own.values())
    needed = sum(g.devices for g in groups)
    if total is not None and needed > total:
        parts = " + ".join(f"{g.label} ({g.devices})" for g in groups)
        raise ArgumentError(
            "role_meshes",
            f"`role_meshes` is not a slice of the devices: {parts} need {needed} "
            f"devices, and {topology or 'this process'} has {total}. Each role "
            "mesh is a slice of its own; pass smaller meshes.",
        )
    placed = {id(g): _placed(g, topology) for g in groups}
    slices = tuple((role, placed[id(own.get(role, base))]) for role in roles)
    return Layout(slices, topology)


def _placed(group: RoleSlice, topology: str | None) -> RoleSlice:
    """``group`` with its slice's own topology, checked."""
    if topology is None:
        return group
    try:
        name = slice_of(topology, group.devices)
    except ArgumentError as error:
        raise ArgumentError(
            "role_meshes",
            f"`role_meshes`: the {group.label} slice "
            f"({plural(group.devices, 'device')}) is "
            f"not a slice {topology}'s family has: {error}",
        ) from None
    return dataclasses.replace(group, topology=name)


def _total_devices(topology: str | None) -> int | None:
    if topology is not None:
        return resolve_topology(topology).devices
    import jax

    return jax.device_count()

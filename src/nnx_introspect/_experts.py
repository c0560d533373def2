"""Routed experts, read from a model's structure: which parameters a token skips.

A mixture-of-experts layer routes each token to ``top_k`` of its ``experts``, so
a token uses ``top_k / experts`` of the routed experts' weights and all of the
rest (attention, router, shared experts, embeddings). Nothing here runs the
model: the layers are found from what every MoE implementation holds.

- **A router**: a module with an integer attribute counting its experts (one of
  :data:`EXPERT_COUNT_ATTRS`, ``num_experts`` for tunix's Qwen3 ``MoELayer``
  and the examples' :class:`~nnx_introspect.examples.MoeBlock`) and one giving
  each token's number of experts (one of :data:`TOP_K_ATTRS`: tunix's
  ``experts_per_tok``, the examples' ``top_k``).
- **Its routed experts**: the parameters under that module whose expert
  dimension has ``experts`` entries: the dimension a sharding name of
  :data:`EXPERT_NAMES` marks (the examples' ``"expert"``), else the first
  dimension of a stacked weight of rank 3 or more (after a leading
  ``"layers"`` axis, if any), as tunix's ``(experts, d_model, d_ff)`` kernels
  annotated ``("fsdp", None, "tp")``; or, for experts kept as a list of
  modules (``experts/0/...``), each member of a list whose name says
  ``expert`` and that holds ``experts`` members.

A parameter belongs to the innermost router above it. The router's own kernel
(``d_model x experts``: experts last, rank 2) and a shared expert (no expert
dimension) count as used by every token.
"""

import dataclasses
from collections.abc import Sequence
from typing import Any

from flax import nnx

from nnx_introspect import _nnx
from nnx_introspect._inventory import VarRecord, inventory, path_str
from nnx_introspect._typing import ArgumentError

__all__ = [
    "EXPERT_COUNT_ATTRS",
    "EXPERT_NAMES",
    "TOP_K_ATTRS",
    "ExpertGroup",
    "ExpertLeaf",
    "expert_groups",
    "planned_expert_groups",
    "unused_params",
]

EXPERT_COUNT_ATTRS = (
    "num_experts",
    "n_experts",
    "n_routed_experts",
    "num_routed_experts",
    "num_local_experts",
)
"""Attributes that count a router's experts (tunix, MaxText, DeepSeek, Mixtral)."""

TOP_K_ATTRS = (
    "top_k",
    "experts_per_tok",
    "num_experts_per_tok",
    "n_experts_per_tok",
    "num_experts_per_token",
    "experts_per_token",
    "num_selected_experts",
)
"""Attributes giving how many experts a router sends each token to."""

EXPERT_NAMES = frozenset({"expert", "experts", "exp", "ep"})
"""Sharding names that mark a dimension of experts."""

_LAYER_NAMES = frozenset({"layers", "layer", "stack"})
"""Sharding names of a leading stacked-layer axis, before the expert dimension."""


@dataclasses.dataclass(frozen=True)
class ExpertLeaf:
    """One parameter of routed experts.

    Attributes:
        path: The parameter's path.
        dim: Its expert dimension, or ``None`` when the whole leaf is one
            expert's (a member of a list of experts).
        size: Its elements.

    Example:
        >>> from nnx_introspect import abstract_model, count_active_params
        >>> from nnx_introspect.examples import moe_tiny
        >>> leaf = expert_groups(abstract_model(moe_tiny))[0].leaves[0]
        >>> leaf.path, leaf.dim, leaf.size  # 8 experts of 64 x 32
        (('layers', 0, 'moe', 'w_down'), 0, 16384)
    """

    path: tuple[Any, ...]
    dim: int | None
    size: int


@dataclasses.dataclass(frozen=True)
class ExpertGroup:
    """A router and the routed experts' parameters it chooses from.

    Attributes:
        path: The router module's path (``("layers", 0, "moe")``).
        experts: How many experts it routes to.
        top_k: How many of them each token goes to.
        leaves: The routed experts' parameters.

    Example:
        >>> group = ExpertGroup(("moe",), 8, 2, (ExpertLeaf(("moe", "w"), 0, 64),))
        >>> group.params, group.active_params
        (64, 16)
    """

    path: tuple[Any, ...]
    experts: int
    top_k: int
    leaves: tuple[ExpertLeaf, ...]

    @property
    def params(self) -> int:
        """Elements of all the routed experts' parameters."""
        return sum(leaf.size for leaf in self.leaves)

    @property
    def active_params(self) -> int:
        """Of :attr:`params`, those a token uses: ``params * top_k / experts``.

        Exact: each expert holds ``params / experts`` of them.
        """
        return self.params * self.top_k // self.experts

    @property
    def path_str(self) -> str:
        """The router's path joined by ``/``."""
        return path_str(self.path)


def _int_attr(module: Any, names: Sequence[str]) -> int | None:
    attrs = vars(module)
    for name in names:
        value = attrs.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _names(record: VarRecord) -> tuple[Any, ...]:
    names = getattr(record.sharding, "spec", record.sharding)
    if isinstance(names, Sequence) and not isinstance(names, str):
        return tuple(names)
    return ()


def _expert_dim(record: VarRecord, experts: int) -> int | None:
    """The dimension of ``record`` that holds ``experts`` experts, if it has one."""
    names = _names(record)
    for dim, name in enumerate(names[: len(record.shape)]):
        if isinstance(name, str) and name in EXPERT_NAMES:
            return dim if record.shape[dim] == experts else None
    first = 1 if names[:1] and names[0] in _LAYER_NAMES else 0
    if len(record.shape) - first >= 3 and record.shape[first] == experts:
        return first
    return None


def _listed_expert(path: tuple[Any, ...], lists: set[tuple[Any, ...]]) -> bool:
    """Whether ``path`` lies under a member of one of ``lists`` (``experts/3/...``).

    ``path`` and ``lists`` are relative to the router; a list of experts is
    named so (``experts``, not ``shared_experts``).
    """
    for i, key in enumerate(path):
        if isinstance(key, int) and not isinstance(key, bool) and i > 0:
            name = str(path[i - 1]).lower()
            if "expert" in name and "shared" not in name and path[:i] in lists:
                return True
    return False


_Modules = list[tuple[tuple[Any, ...], nnx.Module]]


def _routers(modules: _Modules) -> list[tuple[tuple[Any, ...], int, int]]:
    """``(path, experts, top_k)`` of every module that routes to experts."""
    found = []
    for path, module in modules:
        experts = _int_attr(module, EXPERT_COUNT_ATTRS)
        top_k = _int_attr(module, TOP_K_ATTRS)
        if experts is None or top_k is None:
            continue
        if not 1 <= top_k <= experts:
            raise ArgumentError(
                "target",
                f"`target`'s module `{path_str(path) or '(root)'}` "
                f"({type(module).__name__}) routes each token to {top_k} of its "
                f"{experts} experts; a router picks 1 to {experts} of them.",
            )
        found.append((path, experts, top_k))
    return found


def expert_groups(target: Any) -> tuple[ExpertGroup, ...]:
    """Every router of ``target`` and the routed experts' parameters under it.

    Read from the structure only (see the module docstring), for concrete and
    abstract models alike; a router whose experts are not found has no leaves.
    ``()`` for a model without experts.

    Raises:
        ArgumentError: If a router's ``top_k`` is not in ``1 .. experts``, or
            ``target`` is an ``nnx.State`` with a dimension named as experts:
            a state holds no router, so its ``top_k`` is unknown.

    Example:
        >>> from nnx_introspect import abstract_model
        >>> from nnx_introspect.examples import moe_tiny
        >>> groups = expert_groups(abstract_model(moe_tiny))
        >>> [(g.path_str, g.experts, g.top_k, len(g.leaves)) for g in groups]
        [('layers/0/moe', 8, 2, 3), ('layers/1/moe', 8, 2, 3)]
    """
    modules = _nnx.iter_modules(target)
    routers = _routers(modules)
    if not routers:
        if isinstance(target, nnx.State):
            _refuse_named_state(inventory(target, (nnx.Param,)))
        return ()
    records = inventory(target, (nnx.Param,))
    # the innermost router first: a parameter belongs to the deepest one above it
    routers.sort(key=lambda r: -len(r[0]))
    lists = _expert_lists(modules, routers)
    leaves: dict[tuple[Any, ...], list[ExpertLeaf]] = {r[0]: [] for r in routers}
    for record in records:
        for path, experts, _ in routers:
            if record.path[: len(path)] != path:
                continue
            dim = _expert_dim(record, experts)
            rel = record.path[len(path) :]
            if dim is not None or _listed_expert(rel, lists[path]):
                leaves[path].append(ExpertLeaf(record.path, dim, record.size))
            break
    groups = [
        ExpertGroup(path, experts, top_k, tuple(leaves[path]))
        for path, experts, top_k in routers
    ]
    return tuple(sorted(groups, key=lambda g: [str(k) for k in g.path]))


def planned_expert_groups(target: Any) -> tuple[ExpertGroup, ...]:
    """:func:`expert_groups` for a plan: ``()`` where the routers cannot be read.

    The one read of a model's experts that a plan (and so every program
    compiled from it) carries: a state, or a router whose ``top_k`` the count
    refuses, plans with no experts (only dimensions annotated ``"expert"``
    split as experts) instead of failing.

    Example:
        >>> from nnx_introspect import abstract_model
        >>> from nnx_introspect.examples import moe_tiny, two_layer
        >>> len(planned_expert_groups(abstract_model(moe_tiny)))
        2
        >>> planned_expert_groups(abstract_model(two_layer))
        ()
    """
    try:
        return expert_groups(target)
    except ArgumentError:
        return ()


def _expert_lists(
    modules: _Modules, routers: list[tuple[tuple[Any, ...], int, int]]
) -> dict[tuple[Any, ...], set[tuple[Any, ...]]]:
    """Per router, the paths (relative to it) of module lists as long as its experts."""
    out: dict[tuple[Any, ...], set[tuple[Any, ...]]] = {}
    for path, experts, _ in routers:
        counts: dict[tuple[Any, ...], set[int]] = {}
        for sub, _module in modules:
            rel = sub[len(path) :]
            if sub[: len(path)] == path and rel and isinstance(rel[-1], int):
                counts.setdefault(rel[:-1], set()).add(rel[-1])
        out[path] = {rel for rel, members in counts.items() if len(members) == experts}
    return out


def _refuse_named_state(records: Sequence[VarRecord]) -> None:
    for record in records:
        if any(isinstance(n, str) and n in EXPERT_NAMES for n in _names(record)):
            raise ArgumentError(
                "target",
                f"`target` is an nnx.State whose `{record.path_str}` has a "
                "dimension of experts, but a state holds no router, so how many "
                "experts a token uses is unknown. Pass the model (or its "
                "abstract_model) instead.",
            )


def unused_params(groups: Sequence[ExpertGroup]) -> int:
    """The routed experts' parameters a token does not use, over ``groups``.

    Example:
        >>> leaf = ExpertLeaf(("moe", "w"), 0, 64)
        >>> unused_params([ExpertGroup(("moe",), 8, 2, (leaf,))])  # 64 - 16
        48
    """
    return sum(group.params - group.active_params for group in groups)

"""Resolving each leaf's spec (rules, metadata, logical rules) and its problems."""

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from flax.core import spmd as core_spmd
from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec

from nnx_introspect._inventory import VarRecord, dtype_nbytes
from nnx_introspect._mesh.records import LeafShard, MeshProblem
from nnx_introspect._mesh.specs import (
    EXPERT_AXIS,
    Entry,
    entry_axes,
    entry_names,
    expert_mesh_axis,
    spec_of,
)
from nnx_introspect._render import spec_str


class Planner:
    """Places leaves on one abstract mesh, caching JAX's answers per (spec, shape)."""

    def __init__(self, mesh: AbstractMesh) -> None:
        self.mesh = mesh
        self.sizes = {
            str(n): int(s)
            for n, s in zip(mesh.axis_names, mesh.axis_sizes, strict=True)
        }
        self.num_devices = math.prod(self.sizes.values())
        self._cache: dict[tuple[PartitionSpec, tuple[int, ...]], Any] = {}
        self._replicated: dict[PartitionSpec | None, tuple[str, ...]] = {}
        self._bytes: dict[tuple[Any, tuple[int, ...]], int] = {}
        self._names: dict[Any, str] = {}
        self._errors: dict[tuple[PartitionSpec, tuple[int, ...]], str] = {}

    def check_spec(
        self,
        path: str,
        spec: PartitionSpec,
        shape: tuple[int, ...],
        untranslated: frozenset[str] = frozenset(),
    ) -> list[MeshProblem]:
        """Every problem with ``spec`` (JAX raises them one at a time).

        ``untranslated``: logical names that stand inside a tuple entry, which
        flax does not translate (the message says so).
        """
        problems: list[MeshProblem] = []
        used: list[str] = []
        usable: list[bool] = []  # per entry: worth asking JAX about divisibility
        for dim, entry in enumerate(spec):
            names = entry_names(entry)
            if names is None:
                usable.append(False)
                problems.append(
                    MeshProblem(
                        path,
                        "invalid-spec",
                        f"`{path}`: entry {dim} of spec {spec_str(spec)} is "
                        f"{entry!r}; an entry must be None, a mesh axis name or a "
                        "tuple of axis names.",
                    )
                )
                continue
            ok = True
            for axis in names:
                if axis not in self.sizes:
                    ok = False
                    problems.append(self._unknown(path, spec, axis, untranslated))
                elif axis in used:
                    ok = False
                    problems.append(
                        MeshProblem(
                            path,
                            "duplicate-axis",
                            f"`{path}`: spec {spec_str(spec)} uses axis {axis!r} "
                            "twice; a mesh axis can split only one dimension, once.",
                            axes=(axis,),
                        )
                    )
                used.append(axis)
            usable.append(ok and bool(names))
        if len(spec) > len(shape):
            problems.append(
                MeshProblem(
                    path,
                    "rank",
                    f"`{path}`: spec {spec_str(spec)} has {len(spec)} entries but "
                    f"the array has rank {len(shape)} (shape {shape}).",
                )
            )
            return problems
        problems += self._indivisible(path, spec, shape, usable)
        if not problems and self.shard_shape(spec, shape) is None:
            # Anything else JAX refuses is a problem too, never a silent pass.
            problems.append(
                MeshProblem(
                    path,
                    "invalid-spec",
                    f"`{path}`: JAX cannot build NamedSharding(mesh, "
                    f"{spec_str(spec)}) for shape {shape}: "
                    f"{self._errors[(spec, shape)]}",
                )
            )
        return problems

    def _indivisible(
        self,
        path: str,
        spec: PartitionSpec,
        shape: tuple[int, ...],
        usable: list[bool],
    ) -> list[MeshProblem]:
        """A problem per ``usable`` entry of ``spec`` whose dimension does not divide.

        JAX is asked about each dimension alone, so every indivisible dimension
        is reported (JAX itself stops at the first).
        """
        problems: list[MeshProblem] = []
        for dim, entry in enumerate(spec):
            if not usable[dim]:
                continue
            alone = PartitionSpec(*([None] * dim), entry)
            if self.shard_shape(alone, shape) is None:
                axes = entry_axes(entry)
                product = math.prod(self.sizes[a] for a in axes)
                problems.append(
                    MeshProblem(
                        path,
                        "indivisible",
                        f"`{path}` with shape {shape}: dimension {dim} (size "
                        f"{shape[dim]}) does not divide over {'x'.join(axes)} "
                        f"(product {product}). Pad the dimension to a multiple of "
                        f"{product} or choose axes whose product divides it.",
                        dimension=dim,
                        size=shape[dim],
                        axes=axes,
                        product=product,
                    )
                )
        return problems

    def _unknown(
        self, path: str, spec: PartitionSpec, axis: str, untranslated: frozenset[str]
    ) -> MeshProblem:
        if axis in untranslated:
            message = (
                f"`{path}`: spec {spec_str(spec)} names {axis!r} inside a tuple "
                "entry. Flax translates a logical name only when it is a whole "
                "entry, so flax looks for a mesh axis "
                f"{axis!r}, which the mesh {tuple(self.sizes)} lacks, and cannot "
                "place this variable. Write mesh axis names inside tuple entries, "
                "or map one logical name to a tuple of mesh axes in the logical "
                "rules (e.g. ('batch', ('data', 'seq')))."
            )
        else:
            message = (
                f"`{path}`: spec {spec_str(spec)} names axis {axis!r}, which the "
                f"mesh {tuple(self.sizes)} lacks. Add the axis, map the name with "
                "`logical_rules`, or override the spec with `rules`."
            )
        return MeshProblem(path, "unknown-axis", message, axes=(axis,))

    def shard_shape(
        self, spec: PartitionSpec, shape: tuple[int, ...]
    ) -> tuple[int, ...] | None:
        """``NamedSharding(mesh, spec).shard_shape(shape)``; ``None`` if JAX refuses.

        JAX's reason is kept in ``_errors``: whatever JAX raises (an
        ``IndivisibleError``, a ``DuplicateSpecError``...) never escapes.
        """
        key = (spec, shape)
        if key not in self._cache:
            try:
                self._cache[key] = tuple(
                    int(d) for d in NamedSharding(self.mesh, spec).shard_shape(shape)
                )
            except Exception as err:
                self._cache[key] = None
                self._errors[key] = f"{type(err).__name__}: {str(err).splitlines()[0]}"
        result: tuple[int, ...] | None = self._cache[key]
        return result

    def replicated_over(self, spec: PartitionSpec | None) -> tuple[str, ...]:
        """Mesh axes of size > 1 that ``spec`` does not use (all of them for None)."""
        if spec not in self._replicated:
            used = {a for entry in spec or () for a in entry_axes(entry)}
            self._replicated[spec] = tuple(
                n for n, s in self.sizes.items() if s > 1 and n not in used
            )
        return self._replicated[spec]

    def shard_bytes(self, dtype: Any, shard_shape: tuple[int, ...]) -> int:
        """Packed bytes of one shard (cached: layers repeat the same shapes)."""
        key = (dtype, shard_shape)
        if key not in self._bytes:
            self._bytes[key] = dtype_nbytes(dtype, math.prod(shard_shape))
        return self._bytes[key]

    def dtype_name(self, dtype: Any) -> str:
        """``str(dtype)``, cached (NumPy computes dtype names slowly)."""
        name = self._names.get(dtype)
        if name is None:
            name = self._names[dtype] = str(dtype)
        return name

    def leaf(
        self,
        record: VarRecord,
        spec: PartitionSpec,
        *,
        category: str,
        source: str,
        shard_shape: tuple[int, ...] | None,
        kind: str | None = None,
        path: str | None = None,
    ) -> LeafShard:
        per_device = (
            record.nbytes
            if shard_shape is None
            else self.shard_bytes(record.dtype, shard_shape)
        )
        return LeafShard(
            path=record.path_str if path is None else path,
            kind=record.kind_name if kind is None else kind,
            shape=record.shape,
            dtype=self.dtype_name(record.dtype),
            spec=spec,
            shard_shape=shard_shape,
            global_bytes=record.nbytes,
            bytes_per_device=per_device,
            category=category,
            source=source,
            replicated_over=self.replicated_over(None if shard_shape is None else spec),
            num_devices=self.num_devices,
        )


@dataclasses.dataclass(frozen=True)
class _MetaSpec:
    """A variable's spec from its metadata, as flax translates it.

    ``untranslated``: logical names flax leaves inside tuple entries.
    ``expert_dim``: the dimension annotated :data:`EXPERT_AXIS`, if any.
    """

    spec: PartitionSpec
    source: str
    untranslated: frozenset[str] = frozenset()
    expert_dim: int | None = None


def _metadata_spec(
    record: VarRecord,
    logical: tuple[tuple[str, Entry], ...] | None,
    axes: tuple[str, ...] = (),
) -> _MetaSpec | None:
    """Flax's own spec for ``record``'s variable, its source, untranslated names.

    The untranslated names are logical names flax leaves inside tuple entries.
    Flax (``flax.core.spmd.apply_rules`` when it shards a variable eagerly,
    ``nnx.get_partition_spec`` / ``nnx.get_named_sharding`` otherwise) maps each
    entry that *is* a logical name to its rule's mesh axes; a tuple entry is
    kept as written, logical names and all. The plan does exactly the same, so
    it never places a variable that flax would refuse.

    An entry :data:`EXPERT_AXIS` the logical rules do not map becomes the mesh
    axis of ``axes`` that :func:`expert_mesh_axis` names (``None``, replicated,
    when there is none), and that axis leaves the variable's other entries: a
    mesh axis splits one dimension, and experts over ``fsdp`` leave an
    ``("expert", "fsdp", "tp")`` kernel's ``fsdp`` dimension whole.
    """
    sharding = record.sharding
    if sharding is None:
        return None
    if isinstance(sharding, NamedSharding):
        return _MetaSpec(sharding.spec, "metadata")
    try:
        entries = tuple(sharding)
    except TypeError:
        entries = (sharding,)
    rules = logical if logical is not None else core_spmd.get_logical_axis_rules()
    mapping: dict[str, Any] = dict(rules) if rules else {}
    source = "metadata"
    expert_dim = next(
        (d for d, e in enumerate(entries) if isinstance(e, str) and e == EXPERT_AXIS),
        None,
    )
    if any(isinstance(e, str) and e in mapping for e in entries):
        entries = tuple(
            mapping[e] if isinstance(e, str) and e in mapping else e for e in entries
        )
        source = "metadata + logical rules"
    if expert_dim is not None and EXPERT_AXIS not in mapping:
        axis = expert_mesh_axis(axes)
        entries = tuple(
            axis if d == expert_dim else _without(e, axis)
            for d, e in enumerate(entries)
        )
        source += f", experts over {axis or 'no axis (replicated)'}"
    untranslated = frozenset(
        name
        for e in entries
        if isinstance(e, tuple | list)
        for name in e
        if isinstance(name, str) and name in mapping
    )
    return _MetaSpec(spec_of(entries), source, untranslated, expert_dim)


def _without(entry: Any, axis: str | None) -> Any:
    """``entry`` without mesh axis ``axis`` (``None`` when nothing is left)."""
    if axis is None or entry is None:
        return entry
    if isinstance(entry, str):
        return None if entry == axis else entry
    if isinstance(entry, tuple | list):
        kept = tuple(a for a in entry if a != axis)
        return kept if len(kept) > 1 else (kept[0] if kept else None)
    return entry


def experts_problem(
    path: str, problem: MeshProblem, experts: int, dim: int
) -> MeshProblem:
    """``problem`` (a dimension that does not divide) said of experts, with the fix.

    One line naming ``mesh`` (``--mesh``) and the sizes that divide the
    experts.

    Example:
        >>> found = MeshProblem("moe/w", "indivisible", "...", dimension=0,
        ...                     size=8, axes=("ep",), product=3)
        >>> print(experts_problem("moe/w", found, 8, 0).message)
        `moe/w`: its 8 experts (dimension 0) do not split over ep=3. Choose \
`mesh` (--mesh) with ep dividing 8: 1, 2, 4 or 8.
    """
    axes = problem.axes
    over = (
        f"{axes[0]}={problem.product}"
        if len(axes) == 1
        else f"{' x '.join(axes)} = {problem.product}"
    )
    sizes = [str(n) for n in range(1, experts + 1) if experts % n == 0]
    listed = sizes[0] if len(sizes) == 1 else f"{', '.join(sizes[:-1])} or {sizes[-1]}"
    return dataclasses.replace(
        problem,
        kind="experts",
        message=(
            f"`{path}`: its {experts} experts (dimension {dim}) do not split over "
            f"{over}. Choose `mesh` (--mesh) with {' x '.join(axes)} dividing "
            f"{experts}: {listed}."
        ),
    )


def _category(record: VarRecord) -> str:
    return "params" if record.is_param else "other state"


@dataclasses.dataclass(frozen=True)
class _ModelPlan:
    """The model's leaves as planned, and what the rules did.

    ``rule_wins[i]``: leaves rule ``i`` gave their spec; ``rule_matches[i]``:
    leaves whose path rule ``i`` matched, taken by an earlier rule or not.
    """

    leaves: tuple[LeafShard, ...]
    param_plans: dict[tuple[Any, ...], LeafShard]
    problems: tuple[MeshProblem, ...]
    rule_wins: tuple[int, ...]
    rule_matches: tuple[int, ...]


def plan_model_leaves(
    planner: Planner,
    records: Sequence[VarRecord],
    compiled_rules: Sequence[tuple[str, re.Pattern[str], PartitionSpec]],
    logical: tuple[tuple[str, Entry], ...] | None,
    experts: Mapping[tuple[Any, ...], tuple[int, int]] | None = None,
) -> _ModelPlan:
    """Each state leaf's spec (rules, then metadata, else replicated) and problems.

    ``experts``: ``path -> (dimension, experts)`` of the routed experts'
    parameters; a dimension of experts that does not divide over its axes is
    an ``"experts"`` problem (:func:`experts_problem`), as is one annotated
    :data:`EXPERT_AXIS`.
    """
    experts = experts or {}
    problems: list[MeshProblem] = []
    winners = [0] * len(compiled_rules)
    matched = [0] * len(compiled_rules)
    leaves: list[LeafShard] = []
    param_plans: dict[tuple[Any, ...], LeafShard] = {}
    for record in records:
        path = record.path_str
        spec: PartitionSpec | None = None
        source = "default"
        for i, (pattern, compiled, rule_spec) in enumerate(compiled_rules):
            if compiled.search(path):
                matched[i] += 1
                if spec is None:
                    winners[i] += 1
                    spec, source = rule_spec, f"rule {i} {pattern!r}"
        untranslated: frozenset[str] = frozenset()
        expert = experts.get(record.path)
        if spec is None:
            meta = _metadata_spec(record, logical, tuple(planner.sizes))
            if meta is not None:
                spec, source, untranslated = meta.spec, meta.source, meta.untranslated
                if expert is None and meta.expert_dim is not None:
                    expert = (meta.expert_dim, record.shape[meta.expert_dim])
        if spec is None:
            spec = PartitionSpec()
        found = planner.check_spec(path, spec, record.shape, untranslated)
        if expert is not None:
            found = [
                experts_problem(path, p, expert[1], expert[0])
                if p.kind == "indivisible" and p.dimension == expert[0]
                else p
                for p in found
            ]
        problems.extend(found)
        shard = None if found else planner.shard_shape(spec, record.shape)
        leaf = planner.leaf(
            record, spec, category=_category(record), source=source, shard_shape=shard
        )
        leaves.append(leaf)
        if leaf.category == "params":
            param_plans[record.path] = leaf
    return _ModelPlan(
        leaves=tuple(leaves),
        param_plans=param_plans,
        problems=tuple(problems),
        rule_wins=tuple(winners),
        rule_matches=tuple(matched),
    )


def find_unmatched_rules(
    compiled_rules: Sequence[tuple[str, re.Pattern[str], PartitionSpec]],
    plan: _ModelPlan,
) -> tuple[tuple[str, ...], tuple[MeshProblem, ...]]:
    """The patterns that gave no leaf its spec, and a warning for each."""
    unmatched: list[str] = []
    problems: list[MeshProblem] = []
    for i, (pattern, _, _) in enumerate(compiled_rules):
        if plan.rule_wins[i]:
            continue
        unmatched.append(pattern)
        why = (
            "matched no leaf"
            if not plan.rule_matches[i]
            else f"matched {plan.rule_matches[i]} leaf/leaves, all taken by earlier "
            "rules"
        )
        problems.append(
            MeshProblem(
                "",
                "unmatched-rule",
                f"rule {i} {pattern!r} {why}; check the pattern against the paths "
                "in this report or remove it.",
                severity="warning",
            )
        )
    return tuple(unmatched), tuple(problems)

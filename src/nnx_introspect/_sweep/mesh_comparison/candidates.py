"""The candidate meshes: a list checked, ``"auto"`` enumerated, each one planned.

:func:`listed_meshes` checks the meshes given (every problem of the list in
one error); :func:`pick_auto_axes` and :func:`auto_meshes` enumerate
``meshes="auto"``; :func:`plan_check` plans one candidate in this process, and
what the planner rejects is never compiled.

A mixture of experts whose expert weights carry the logical axis ``"expert"``
(the examples' :func:`~nnx_introspect.examples.moe_tiny_sharded`) gets an
expert-parallel axis among ``"auto"``'s: ``ep``, after the data-parallel axes
and before the rest (``fsdp, ep, tp``), since the planner splits such a
dimension over ``ep`` when the mesh has one. Every factorisation over those
axes is a candidate, ranked by the time model like any other; one whose ``ep``
(or ``fsdp``, where the experts split over it) does not divide the experts is
rejected by the planner, with the sizes that do.
"""

import math
import re
from collections.abc import Iterator
from typing import Any

from jax.sharding import PartitionSpec

from nnx_introspect._mesh import (
    as_abstract_mesh,
    as_logical_rules,
    entry_axes,
    mesh_config_report,
    planned_axes,
)
from nnx_introspect._render import format_bytes
from nnx_introspect._step import StepSpec, as_model, plan_problems
from nnx_introspect._sweep.mesh_comparison.rows import MeshAxes, mesh_name
from nnx_introspect._text import plural
from nnx_introspect._typing import ArgumentError

__all__ = ["EXPERT_PARALLEL_AXIS", "MAX_AUTO_MESHES", "named_axes"]

MAX_AUTO_MESHES = 512
"""The most candidates ``meshes="auto"`` may enumerate (before planning)."""


PROBE_AXIS = "__nnx_introspect_probe__"
"""The one axis of the mesh ``meshes="auto"`` plans on to read the model's axes."""

EXPERT_PARALLEL_AXIS = "ep"
"""The expert-parallel axis ``meshes="auto"`` adds for a model with an expert axis."""


def listed_meshes(
    meshes: Any, topology: str | None, devices: int | None
) -> list[MeshAxes]:
    """The listed candidates as axes, every problem of the list in one error."""
    if isinstance(meshes, str):
        raise ArgumentError(
            "meshes",
            f"`meshes` must be a list of meshes or 'auto', got the string "
            f"{meshes!r}. Wrap one mesh in a list: [{meshes!r}].",
        )
    items = list(meshes)
    if not items:
        raise ArgumentError(
            "meshes",
            "`meshes` must list at least one mesh, got an empty list. Pass e.g. "
            "['fsdp=8', 'fsdp=4,tp=2'], or 'auto'.",
        )
    out: list[MeshAxes] = []
    for i, mesh in enumerate(items):
        try:
            abstract = as_abstract_mesh(mesh, f"meshes[{i}]")
        except ArgumentError:
            raise
        except ValueError as error:
            raise ArgumentError("meshes", str(error)) from error
        out.append(
            tuple(
                (str(a), int(s))
                for a, s in zip(abstract.axis_names, abstract.axis_sizes, strict=True)
            )
        )
    problems: list[str] = []
    counts = [math.prod(s for _, s in axes) for axes in out]
    if devices is not None:
        problems += [
            f"`meshes[{i}]` ({mesh_name(axes)}) has {plural(n, 'device')}, but "
            "`topology` "
            f"{topology!r} has {devices}"
            for i, (axes, n) in enumerate(zip(out, counts, strict=True))
            if n != devices
        ]
    elif len(set(counts)) > 1:
        groups = {n: [i for i, m in enumerate(counts) if m == n] for n in counts}
        shown = "; ".join(
            f"{n} ({', '.join(f'meshes[{i}]' for i in where)})"
            for n, where in groups.items()
        )
        problems.append(
            "`meshes` must all have the same number of devices (candidates for "
            f"one machine), got {shown}"
        )
    first: dict[MeshAxes, int] = {}
    for i, axes in enumerate(out):
        if axes in first:
            problems.append(
                f"`meshes[{i}]` ({mesh_name(axes)}) repeats `meshes[{first[axes]}]`"
            )
        first.setdefault(axes, i)
    if problems:
        raise ArgumentError(
            "meshes",
            "; ".join(problems)
            + ". Give each candidate once, with the same device count"
            + (f" as `topology` {topology!r}" if devices is not None else "")
            + ".",
        )
    return out


def pick_auto_axes(
    model: Any, rules: Any, logical_rules: Any, batch_spec: Any
) -> tuple[str, ...]:
    """The mesh axes the step's sharding names, data-parallel ones first.

    ``batch_spec``'s, then the mesh axes ``logical_rules`` map names to, then
    the axes of the plan's specs (rules first, then metadata translated by the
    logical rules), planned on a one-axis probe mesh; then the axes named as
    data-parallel axes conventionally are (:data:`_DATA_AXES`: ``data``,
    ``dp``, ``batch``, ``replica``, ``fsdp``) move to the front, in that order.
    The first axis is the outermost (its devices are the farthest apart: on
    GPUs, across hosts) and the batch splits over it by default, so tensor
    parallelism (``tp``) stays innermost, within a host, as trainers lay it out.
    A model with an expert axis gets ``ep`` after the data-parallel axes
    (:func:`_expert_parallel`): ``fsdp, ep, tp``.
    """
    order = list(_step_axes(model, rules, logical_rules, batch_spec))
    expert = _expert_parallel(model, rules, logical_rules, order)
    if not order and expert is None:
        raise ArgumentError(
            "meshes",
            "`meshes='auto'` found no mesh axis: the model's variables carry no "
            "sharding metadata, and neither `rules`, `logical_rules` nor "
            "`batch_spec` names one. List the meshes, or pass `rules` that shard "
            "the parameters.",
        )
    ranked = sorted(
        order,
        key=lambda a: (
            (0, _DATA_AXES.index(a)) if a in _DATA_AXES else (1, order.index(a))
        ),
    )
    if expert is not None:  # after the data-parallel axes, before the rest
        at = sum(1 for a in ranked if a in _DATA_AXES)
        ranked.insert(at, expert)
    return tuple(ranked)


def _expert_parallel(
    model: Any, rules: Any, logical_rules: Any, axes: list[str]
) -> str | None:
    """:data:`EXPERT_PARALLEL_AXIS` when the plan would split experts over it.

    ``None`` when ``axes`` already hold an expert-parallel axis (``expert``
    or ``ep``), or nothing of the model names :data:`~nnx_introspect._mesh.
    EXPERT_AXIS` (or the logical rules map it elsewhere): the planner, asked
    on a probe mesh with an ``ep`` axis, puts no dimension on it.

    Example:
        >>> from nnx_introspect import abstract_model
        >>> from nnx_introspect.examples import llama_tiny_sharded, moe_tiny_sharded
        >>> _expert_parallel(abstract_model(moe_tiny_sharded), None, None, [])
        'ep'
        >>> _expert_parallel(abstract_model(llama_tiny_sharded), None, None, []) is None
        True
    """
    if any(a in ("expert", EXPERT_PARALLEL_AXIS) for a in axes):
        return None
    probe = {PROBE_AXIS: 1, EXPERT_PARALLEL_AXIS: 1}
    plan = mesh_config_report(model, probe, rules=rules, logical_rules=logical_rules)
    named = {axis for leaf in plan.leaves for e in leaf.spec for axis in entry_axes(e)}
    return EXPERT_PARALLEL_AXIS if EXPERT_PARALLEL_AXIS in named else None


def named_axes(
    target: Any,
    *,
    rules: Any = None,
    logical_rules: Any = None,
    batch_spec: Any = None,
    experts: bool = False,
) -> tuple[str, ...]:
    """The mesh axes a step's sharding names, in the order they first appear.

    What ``meshes="auto"`` enumerates over (before its data-parallel axes move
    to the front): ``batch_spec``'s axes, the mesh axes of ``logical_rules``,
    then those of the plan's specs (``rules`` and the model's metadata) on a
    one-axis probe mesh; nothing compiles. Empty when nothing names an axis.
    With ``experts``, also the expert-parallel axis ``ep`` where the planner
    would split the model's experts over it (a mesh may name it, and need
    not: without it they split over ``fsdp``).

    Args:
        target: The model as :class:`~nnx_introspect.StepSpec` takes it.
        rules: See :class:`~nnx_introspect.StepSpec`.
        logical_rules: See :class:`~nnx_introspect.StepSpec`.
        batch_spec: See :class:`~nnx_introspect.StepSpec`.
        experts: Add ``ep`` for a mixture of experts with an expert axis.

    Returns:
        The axis names, each once.

    Example:
        >>> from jax.sharding import PartitionSpec as P
        >>> target = "nnx_introspect.examples:two_layer"
        >>> named_axes(target), named_axes(target, rules=[("kernel", P(None, "tp"))])
        ((), ('tp',))
        >>> moe = "nnx_introspect.examples:moe_tiny_sharded"
        >>> named_axes(moe), named_axes(moe, experts=True)
        (('tp', 'fsdp'), ('tp', 'fsdp', 'ep'))
    """
    model = as_model(target)
    found = _step_axes(model, rules, logical_rules, batch_spec)
    if not experts:
        return found
    expert = _expert_parallel(model, rules, logical_rules, list(found))
    return found if expert is None else (*found, expert)


def _step_axes(
    model: Any, rules: Any, logical_rules: Any, batch_spec: Any
) -> tuple[str, ...]:
    """The axes :func:`named_axes` reads, of a model already built."""
    seen: dict[str, None] = {}
    specs: list[Any] = []
    if isinstance(batch_spec, PartitionSpec):
        specs.append(batch_spec)
    elif batch_spec is not None:
        specs += [s for s in batch_spec if s is not None]
    entries = [entry for spec in specs for entry in spec]
    entries += [axes for _, axes in as_logical_rules(logical_rules) or ()]
    for entry in entries:
        for axis in entry_axes(entry):
            seen.setdefault(axis, None)
    for axis in planned_axes(model, rules=rules, logical_rules=logical_rules):
        seen.setdefault(axis, None)
    return tuple(seen)


_DATA_AXES = ("data", "dp", "batch", "replica", "fsdp")
"""Axis names that conventionally shard the batch: outermost in ``'auto'``."""


def auto_meshes(axes: tuple[str, ...], devices: int) -> list[MeshAxes]:
    """Every factorisation of ``devices`` over ``axes`` (sizes >= 1), in order.

    Sizes in lexicographic order: ``(1, 8), (2, 4), (4, 2), (8, 1)``.
    """
    sizes = list(_factorisations(devices, len(axes)))
    if len(sizes) > MAX_AUTO_MESHES:
        raise ArgumentError(
            "meshes",
            f"`meshes='auto'` gives {len(sizes)} candidates ({devices} devices over "
            f"the axes {', '.join(axes)}), more than {MAX_AUTO_MESHES}. List the "
            "meshes to compare, or name fewer axes.",
        )
    return [tuple(zip(axes, s, strict=True)) for s in sizes]


def _factorisations(n: int, k: int) -> Iterator[tuple[int, ...]]:
    """Every ``k``-tuple of positive integers whose product is ``n``.

    Example:
        >>> list(_factorisations(8, 2))
        [(1, 8), (2, 4), (4, 2), (8, 1)]
        >>> len(list(_factorisations(256, 3))), list(_factorisations(6, 1))
        (45, [(6,)])
    """
    divisors = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    divisors = sorted({*divisors, *(n // d for d in divisors)})

    def split(m: int, parts: int) -> Iterator[tuple[int, ...]]:
        if parts == 1:
            yield (m,)
            return
        for d in divisors:
            if d > m:
                break
            if m % d == 0:
                for rest in split(m // d, parts - 1):
                    yield (d, *rest)

    return split(n, k)


def plan_check(spec: StepSpec, budget: int | None) -> tuple[str | None, int | None]:
    """``(why the planner rejects spec's mesh or None, its state per device)``.

    Rejected: the plan has errors, the batch does not split over the mesh, or
    the parameters, other state and optimizer state alone exceed ``budget``.
    The state is the plan's own bytes per device, ``None`` when the plan has
    errors: a leaf the mesh cannot shard as its spec says has no bytes on this
    mesh (the planner would count it whole, a figure of another layout).
    """
    plan, problems = plan_problems(spec)
    state = sum(leaf.bytes_per_device for leaf in plan.leaves + plan.optimizer_leaves)
    if problems:
        return _one_line(problems), None if plan.errors else state
    if budget is not None and state > budget:
        return (
            f"the parameters, other state and optimizer state alone need "
            f"{format_bytes(state)} per device, over the budget of "
            f"{format_bytes(budget)}"
        ), state
    return None, state


_LEAF = re.compile(r"^`[^`]*`")


def _one_line(problems: list[str]) -> str:
    """The first problem, and how many more: those alike but for the leaf first.

    Example:
        >>> print(_one_line([
        ...     "`a/w`: its 8 experts do not split over ep=16.",
        ...     "`b/w`: its 8 experts do not split over ep=16.",
        ...     "`batch`: 3 rows over data=2.",
        ... ]))
        `a/w`: its 8 experts do not split over ep=16. (and 1 more leaf alike, 1 more \
problem)
    """
    first, rest = problems[0], problems[1:]
    alike = sum(1 for p in rest if _LEAF.sub("", p) == _LEAF.sub("", first))
    other = len(rest) - alike
    more = []
    if alike:
        more.append(f"{alike} more lea{'f' if alike == 1 else 'ves'} alike")
    if other:
        more.append(f"{other} more problem{'s' * (other != 1)}")
    return f"{first} (and {', '.join(more)})" if more else first

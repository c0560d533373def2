"""Mesh configuration reports: how each state leaf would split over a device mesh.

All shard arithmetic is JAX's own: an ``AbstractMesh`` built from the proposed
axes, a ``NamedSharding`` per leaf, and ``NamedSharding.shard_shape``. No device
is needed, so a 2,048-device proposal can be planned on one CPU.

Each leaf's partition spec comes from, in order: the user's ``rules`` (regular
expressions searched in the leaf's ``/``-joined path, first match wins), the
variable's NNX sharding metadata (``nnx.with_partitioning``), translated through
logical-axis rules where names are logical; otherwise the leaf is replicated.
Optimizer state mirrors the parameter it belongs to; gradients copy the
parameters' sharding and dtype.
"""

import dataclasses
import html
import json
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

import jax
import numpy as np
import optax
from flax import nnx
from flax.core import spmd as core_spmd
from jax.sharding import AbstractMesh, Mesh, NamedSharding, PartitionSpec

from nnx_introspect import _render
from nnx_introspect._inventory import VarRecord, dtype_nbytes, inventory
from nnx_introspect._nnx import keypath_keys
from nnx_introspect._render import Report, Table, format_bytes
from nnx_introspect._typing import IntLike, Target, as_int, typechecked

__all__ = [
    "CATEGORIES",
    "MAX_MESH_DEVICES",
    "OPTIMIZER_NAMES",
    "LeafShard",
    "MeshConfigReport",
    "MeshProblem",
    "as_abstract_mesh",
    "load_rules_file",
    "mesh_config_report",
    "optimizer_from_name",
    "parse_bytes",
]

# The containers' items are checked by the planner itself (not by beartype), so
# that a bad size or rule gets a message naming ``mesh['model']`` or ``rules[1]``.
MeshLike: TypeAlias = Mapping[Any, Any] | str | Mesh | AbstractMesh
"""A proposed mesh: ``{"data": 2, "model": 4}`` (sizes: integer-valued scalars),
``"data=2,model=4"``, a ``Mesh`` or an ``AbstractMesh``."""

SpecLike: TypeAlias = PartitionSpec | tuple[Any, ...] | list[Any] | None
"""A partition spec: a ``PartitionSpec``, a tuple/list of its entries, or ``None``
(replicated)."""

RulesLike: TypeAlias = Sequence[Any] | Mapping[Any, Any]
"""Ordered ``(regular expression, SpecLike)`` pairs, or a mapping in insertion order."""

LogicalRulesLike: TypeAlias = Sequence[Any] | Mapping[Any, Any]
"""``(logical name, mesh axis or axes or None)`` pairs, as in
``nnx.logical_axis_rules``."""

CATEGORIES = ("params", "other state", "optimizer state", "gradients")
"""The kinds of memory a plan totals, in display order."""

_Entry: TypeAlias = str | tuple[str, ...] | None


@dataclasses.dataclass(frozen=True)
class LeafShard:
    """How one leaf is placed on the mesh.

    Attributes:
        path: The leaf's path, keys joined by ``/``.
        kind: The variable type's name (``"Param"``; ``"Gradient"`` for planned
            gradients).
        shape: The global shape.
        dtype: The dtype's name.
        spec: The partition spec applied (``PartitionSpec()`` = replicated).
        shard_shape: The per-device shape from ``NamedSharding.shard_shape``, or
            ``None`` when the spec cannot be applied (see ``problems``).
        global_bytes: Bytes of the whole array.
        bytes_per_device: Bytes of one device's shard (the whole array when
            replicated; ``global_bytes`` when the spec cannot be applied).
        category: One of :data:`CATEGORIES`.
        source: What gave the spec: ``"rule 0 'kernel$'"``, ``"metadata"``,
            ``"metadata + logical rules"``, ``"mirrors <param path>"``,
            ``"gradient of <param path>"`` or ``"default"`` (replicated).
        replicated_over: The mesh axes (of size > 1) the spec does not use: every
            device along them holds the same shard (every axis when the spec
            cannot be applied).
        num_devices: Devices in the mesh, for the ideal share.

    Example:
        >>> from flax import nnx
        >>> from nnx_introspect import mesh_config_report
        >>> model = nnx.Linear(4, 6, rngs=nnx.Rngs(0))
        >>> leaf = mesh_config_report(model, "model=4").leaves[1]
        >>> leaf.path, leaf.spec, leaf.shard_shape, leaf.bytes_per_device
        ('kernel', P(), (4, 6), 96)
        >>> leaf.replicated_over
        ('model',)
    """

    path: str
    kind: str
    shape: tuple[int, ...]
    dtype: str
    spec: PartitionSpec
    shard_shape: tuple[int, ...] | None
    global_bytes: int
    bytes_per_device: int
    category: str = "params"
    source: str = "default"
    replicated_over: tuple[str, ...] = ()
    num_devices: int = 1

    @property
    def ideal_bytes(self) -> float:
        """``global_bytes / num_devices``: accounting, not a placement."""
        return self.global_bytes / self.num_devices

    @property
    def waste_bytes(self) -> float:
        """Bytes per device above the ideal share (replication overhead)."""
        return self.bytes_per_device - self.ideal_bytes


@dataclasses.dataclass(frozen=True)
class MeshProblem:
    """A reason a leaf cannot be placed as specified, or a warning about the plan.

    Attributes:
        path: The leaf's path (``""`` for mesh-wide problems).
        kind: A short code: ``"indivisible"``, ``"unknown-axis"``,
            ``"duplicate-axis"``, ``"rank"``, ``"invalid-spec"`` (an entry or
            spec JAX refuses for another reason), ``"mesh-too-large"``,
            ``"unmatched-rule"``, ``"optimizer-metadata"``.
        message: A full sentence saying what is wrong and how to fix it.
        severity: ``"error"`` (the plan cannot be applied) or ``"warning"``.
        dimension: For ``"indivisible"``: the array dimension that does not divide.
        size: For ``"indivisible"``: that dimension's size.
        axes: The mesh axes involved.
        product: For ``"indivisible"``: the product of those axes' sizes.

    Example:
        >>> from flax import nnx
        >>> from jax.sharding import PartitionSpec as P
        >>> from nnx_introspect import mesh_config_report
        >>> model = nnx.Linear(4, 6, rngs=nnx.Rngs(0))
        >>> rules = [("kernel", P(None, "model"))]
        >>> report = mesh_config_report(model, "model=4", rules=rules)
        >>> problem = report.errors[0]
        >>> problem.kind, problem.path, problem.dimension, problem.size, problem.product
        ('indivisible', 'kernel', 1, 6, 4)
    """

    path: str
    kind: str
    message: str
    severity: str = "error"
    dimension: int | None = None
    size: int | None = None
    axes: tuple[str, ...] = ()
    product: int | None = None


@dataclasses.dataclass(frozen=True)
class MeshConfigReport(Report):
    """Per-leaf placement of a model's state (and training memory) over a mesh.

    Attributes:
        axis_names: The mesh axis names, in order.
        axis_sizes: The mesh axis sizes, in order.
        num_devices: The product of the axis sizes.
        n_state_leaves: Number of the model's state leaves (every kind).
        n_params: Number of ``nnx.Param`` elements.
        param_bytes: Global bytes of the ``nnx.Param`` leaves.
        leaves: One :class:`LeafShard` per state leaf of the model.
        problems: Every problem and warning found, collected (never
            first-error-only).
        optimizer_leaves: One entry per optimizer-state leaf (empty without
            ``optimizer``).
        gradient_leaves: One entry per parameter gradient (empty without
            ``optimizer``).
        rules: The rules' patterns, in order (empty without ``rules``).
        unmatched_rules: Patterns that gave no leaf its spec.
        devices_present: ``jax.device_count()`` when the plan was made.

    Example:
        >>> from flax import nnx
        >>> from nnx_introspect import mesh_config_report
        >>> model = nnx.Linear(4, 6, rngs=nnx.Rngs(0))
        >>> report = mesh_config_report(model, "data=2,model=4")
        >>> report.num_devices, report.bytes_per_device, report.ideal_bytes_per_device
        (8, 120, 15.0)
        >>> report.ok
        True
    """

    SCHEMA = "nnx-introspect/mesh-config"
    SCHEMA_VERSION = 2

    axis_names: tuple[str, ...]
    axis_sizes: tuple[int, ...]
    num_devices: int
    n_state_leaves: int
    n_params: int
    param_bytes: int
    leaves: tuple[LeafShard, ...]
    problems: tuple[MeshProblem, ...] = ()
    optimizer_leaves: tuple[LeafShard, ...] = ()
    gradient_leaves: tuple[LeafShard, ...] = ()
    rules: tuple[str, ...] = ()
    unmatched_rules: tuple[str, ...] = ()
    devices_present: int = 1

    @property
    def all_leaves(self) -> tuple[LeafShard, ...]:
        """Model leaves, then optimizer state, then gradients."""
        return self.leaves + self.optimizer_leaves + self.gradient_leaves

    @property
    def bytes_per_device(self) -> int:
        """Bytes each device holds under this plan (optimizer and gradients too)."""
        return sum(leaf.bytes_per_device for leaf in self.all_leaves)

    @property
    def global_bytes(self) -> int:
        """Bytes of every planned array, counted once."""
        return sum(leaf.global_bytes for leaf in self.all_leaves)

    @property
    def ideal_bytes_per_device(self) -> float:
        """``global_bytes / num_devices``: the share if nothing were replicated."""
        return self.global_bytes / self.num_devices

    @property
    def replication_overhead(self) -> float:
        """Bytes per device above the ideal share."""
        return self.bytes_per_device - self.ideal_bytes_per_device

    @property
    def bytes_by_category(self) -> dict[str, int]:
        """Bytes per device for each of :data:`CATEGORIES` (zeros included)."""
        out = dict.fromkeys(CATEGORIES, 0)
        for leaf in self.all_leaves:
            out[leaf.category] += leaf.bytes_per_device
        return out

    @property
    def global_bytes_by_category(self) -> dict[str, int]:
        """Global bytes for each of :data:`CATEGORIES`."""
        out = dict.fromkeys(CATEGORIES, 0)
        for leaf in self.all_leaves:
            out[leaf.category] += leaf.global_bytes
        return out

    @property
    def errors(self) -> tuple[MeshProblem, ...]:
        """The problems that make the plan inapplicable (not warnings)."""
        return tuple(p for p in self.problems if p.severity == "error")

    @property
    def warnings(self) -> tuple[MeshProblem, ...]:
        """Warnings: a mesh larger than the devices present, unmatched rules."""
        return tuple(p for p in self.problems if p.severity != "error")

    @property
    def ok(self) -> bool:
        """Whether every leaf could be placed as specified (warnings allowed)."""
        return not self.errors

    def top_waste(self, n: IntLike = 5) -> tuple[LeafShard, ...]:
        """The ``n`` leaves with the most bytes per device above their ideal share.

        Args:
            n: How many leaves, a nonnegative integer (fewer if fewer waste).

        Raises:
            TypeError: If ``n`` is not an integer-valued scalar.
            ValueError: If ``n`` is negative or not integral.

        Example:
            >>> from flax import nnx
            >>> from nnx_introspect import mesh_config_report
            >>> model = nnx.Linear(4, 6, rngs=nnx.Rngs(0))
            >>> report = mesh_config_report(model, "model=4")
            >>> [leaf.path for leaf in report.top_waste(1)]
            ['kernel']
        """
        count = as_int(n, "n", minimum=0)
        wasting = [leaf for leaf in self.all_leaves if leaf.waste_bytes > 0]
        wasting.sort(key=lambda leaf: leaf.waste_bytes, reverse=True)
        return tuple(wasting[:count])

    def fits(self, max_device_bytes: IntLike) -> bool:
        """Whether the plan's bytes per device are at most ``max_device_bytes``.

        Args:
            max_device_bytes: The per-device budget in bytes, a nonnegative
                integer (use :func:`parse_bytes` for ``"16GiB"``).

        Raises:
            TypeError: If ``max_device_bytes`` is not an integer-valued scalar.
            ValueError: If it is negative or not integral.

        Example:
            >>> from flax import nnx
            >>> from nnx_introspect import mesh_config_report
            >>> model = nnx.Linear(4, 6, rngs=nnx.Rngs(0))
            >>> report = mesh_config_report(model, "model=4")
            >>> report.bytes_per_device, report.fits(120), report.fits(119)
            (120, True, False)
        """
        budget = as_int(max_device_bytes, "max_device_bytes", minimum=0)
        return self.bytes_per_device <= budget

    def table(self) -> Table:
        """The plan as a :class:`~nnx_introspect.Table`."""
        rows = tuple(
            (
                leaf.path,
                str(leaf.shape),
                _spec_str(leaf.spec),
                _short_source(leaf.source),
                "-" if leaf.shard_shape is None else str(leaf.shard_shape),
                ", ".join(leaf.replicated_over) or "-",
                format_bytes(leaf.bytes_per_device),
                format_bytes(leaf.ideal_bytes),
            )
            for leaf in self.all_leaves
        )
        blank = ("",) * 5
        by_cat = self.bytes_by_category
        global_cat = self.global_bytes_by_category
        totals = tuple(
            (
                cat,
                *blank,
                format_bytes(by_cat[cat]),
                format_bytes(global_cat[cat] / self.num_devices),
            )
            for cat in CATEGORIES
            if global_cat[cat] or cat in ("params", "other state")
        )
        totals += (
            (
                "total per device",
                *blank,
                format_bytes(self.bytes_per_device),
                format_bytes(self.ideal_bytes_per_device),
            ),
            (
                "replication overhead",
                *blank,
                format_bytes(self.replication_overhead),
                "",
            ),
        )
        notes = tuple(
            ("Warning: " if p.severity != "error" else "") + p.message
            for p in self.problems
        )
        if self.rules:
            notes += (
                "Rules: "
                + "; ".join(f"rule {i} {p!r}" for i, p in enumerate(self.rules))
                + ".",
            )
        notes += tuple(
            f"Wastes {format_bytes(leaf.waste_bytes)} per device above its ideal "
            f"share: {leaf.path} (replicated over "
            f"{', '.join(leaf.replicated_over) or 'no axis'})."
            for leaf in self.top_waste()
        )
        return Table(
            title=f"Mesh plan ({_mesh_str(self)}; {self.num_devices} devices)",
            columns=(
                "path",
                "shape",
                "spec",
                "source",
                "shard shape",
                "replicated over",
                "bytes/device",
                "ideal/device",
            ),
            rows=rows,
            totals=totals,
            notes=notes,
        )

    def json_data(self) -> dict[str, Any]:
        """Exact figures for JSON output."""
        return {
            "mesh": dict(zip(self.axis_names, self.axis_sizes, strict=True)),
            "num_devices": self.num_devices,
            "devices_present": self.devices_present,
            "n_state_leaves": self.n_state_leaves,
            "n_params": self.n_params,
            "param_bytes": self.param_bytes,
            "bytes_per_device": self.bytes_per_device,
            "global_bytes": self.global_bytes,
            "ideal_bytes_per_device": self.ideal_bytes_per_device,
            "replication_overhead": self.replication_overhead,
            "bytes_per_device_by_category": self.bytes_by_category,
            "global_bytes_by_category": self.global_bytes_by_category,
            "ok": self.ok,
            "rules": list(self.rules),
            "unmatched_rules": list(self.unmatched_rules),
            "top_waste": [leaf.path for leaf in self.top_waste()],
            "leaves": [_leaf_json(leaf) for leaf in self.all_leaves],
            "problems": [
                {**dataclasses.asdict(p), "axes": list(p.axes)} for p in self.problems
            ],
        }

    def to_html(self, *, max_device_bytes: IntLike | None = None) -> str:
        """A self-contained page: the verdict first, the per-leaf detail last.

        The first screen holds the verdict (every leaf placeable or how many
        problems; within the budget or not), the problems and warnings, the
        bytes-per-device chart and the totals; then how each leaf splits (a
        device grid whose cells say which slice of the array each device
        holds) and the full per-leaf table.

        Args:
            max_device_bytes: A per-device budget: drawn on the chart and judged
                in the verdict.

        Returns:
            The HTML page (inline CSS, no scripts, no external files).

        Raises:
            TypeError: If ``max_device_bytes`` is not an integer-valued scalar.
            ValueError: If ``max_device_bytes`` is negative or not integral.

        Example:
            >>> from flax import nnx
            >>> from nnx_introspect import mesh_config_report
            >>> model = nnx.Linear(4, 6, rngs=nnx.Rngs(0))
            >>> report = mesh_config_report(model, "model=4")
            >>> page = report.to_html(max_device_bytes=100)
            >>> page.index("EXCEEDS the budget") < page.index("How each leaf splits")
            True
        """
        budget = (
            None
            if max_device_bytes is None
            else as_int(max_device_bytes, "max_device_bytes", minimum=0)
        )
        esc = html.escape
        used = self.bytes_per_device
        over = budget is not None and used > budget
        if self.ok:
            verdict = "OK: every leaf can be placed as specified"
        else:
            verdict = (
                f"{len(self.errors)} problem(s): the plan cannot be applied as "
                "specified"
            )
        if budget is not None:
            verdict += f"; {format_bytes(used)} per device " + (
                f"EXCEEDS the budget of {format_bytes(budget)} by "
                f"{format_bytes(used - budget)}"
                if over
                else f"fits the budget of {format_bytes(budget)}"
            )
        good = self.ok and not over
        verdict = f'<p class="verdict {"ok" if good else "bad"}">{esc(verdict)}.</p>'
        lists = _problem_list_html("Problems", "problems", self.errors)
        lists += _problem_list_html("Warnings", "warnings", self.warnings)
        chart = _render.bar_chart_html(
            "Bytes per device by kind",
            [
                (cat, self.bytes_by_category[cat], gb / self.num_devices)
                for cat, gb in self.global_bytes_by_category.items()
                if gb
            ]
            + [("total", used, self.ideal_bytes_per_device)],
            budget=budget,
        )
        full = self.table()
        totals = _render.table_html(
            _render.Table(
                title="Totals per device",
                columns=("kind", "bytes/device", "ideal/device"),
                rows=tuple((row[0], row[-2], row[-1]) for row in full.totals),
            )
        )
        other_notes = tuple(n for n in full.notes if n.startswith(("Rules:", "Wastes")))
        notes = (
            '<ul class="notes">'
            + "".join(f"<li>{esc(n)}</li>" for n in other_notes)
            + "</ul>"
            if other_notes
            else ""
        )
        shown = self.leaves + self.optimizer_leaves
        sharded = [i for i, leaf in enumerate(shown) if any(leaf.spec)][:3]
        grids = "".join(
            _render.split_grid_html(
                title=f"{leaf.path} {leaf.shape} {_spec_str(leaf.spec)}",
                shape=leaf.shape,
                spec=tuple(_entry_axes(e) for e in leaf.spec),
                axis_names=self.axis_names,
                axis_sizes=self.axis_sizes,
                shard_shape=leaf.shard_shape,
                open_=i in sharded,
            )
            for i, leaf in enumerate(shown)
        )
        head = (
            f"<h1>Mesh plan: {esc(_mesh_str(self))} ({self.num_devices} devices)"
            f"</h1>{verdict}<p>{format_bytes(used)} per device (ideal "
            f"{format_bytes(self.ideal_bytes_per_device)}, replication overhead "
            f"{format_bytes(self.replication_overhead)}); {len(self.errors)} "
            f"problem(s), {len(self.warnings)} warning(s)"
            + (
                "; leaves that cannot be placed are counted whole"
                if self.errors
                else ""
            )
            + ".</p>"
        )
        detail = _render.table_html(
            _render.Table(title="Every leaf", columns=full.columns, rows=full.rows)
        )
        body = (
            head
            + lists
            + chart
            + totals
            + notes
            + "<h2>How each leaf splits</h2>"
            + _render.GRID_LEGEND_HTML
            + grids
            + "<h2>Every leaf</h2>"
            + detail
        )
        return _render.page_html(full.title, body)


_SHOWN_PROBLEMS = 8
"""Problems listed on the HTML page's first screen; the rest fold away."""


def _problem_list_html(
    heading: str, css: str, problems: tuple[MeshProblem, ...]
) -> str:
    """A heading, the first few problems and the rest in a collapsed block."""
    if not problems:
        return ""
    esc = html.escape
    kinds: dict[str, int] = {}
    for p in problems:
        kinds[p.kind] = kinds.get(p.kind, 0) + 1
    counts = ", ".join(f"{n} {kind}" for kind, n in kinds.items())
    items = [f"<li>{esc(p.message)}</li>" for p in problems]
    out = f'<h2>{heading} ({counts})</h2><ul class="{css}">'
    out += "".join(items[:_SHOWN_PROBLEMS]) + "</ul>"
    if len(items) > _SHOWN_PROBLEMS:
        out += (
            f'<details class="more"><summary>{len(items) - _SHOWN_PROBLEMS} more '
            f'{heading.lower()}</summary><ul class="{css}">'
            + "".join(items[_SHOWN_PROBLEMS:])
            + "</ul></details>"
        )
    return out


def _leaf_json(leaf: LeafShard) -> dict[str, Any]:
    return {
        "path": leaf.path,
        "kind": leaf.kind,
        "category": leaf.category,
        "shape": list(leaf.shape),
        "dtype": leaf.dtype,
        "spec": _spec_json(leaf.spec),
        "source": leaf.source,
        "shard_shape": None if leaf.shard_shape is None else list(leaf.shard_shape),
        "replicated_over": list(leaf.replicated_over),
        "global_bytes": leaf.global_bytes,
        "bytes_per_device": leaf.bytes_per_device,
        "ideal_bytes": leaf.ideal_bytes,
    }


def _short_source(source: str) -> str:
    """The table's compact source: the path column already names the parameter."""
    if source.startswith("mirrors "):
        return "mirrors param"
    if source.startswith("gradient of "):
        return "as param"
    if source.startswith("rule "):
        return " ".join(source.split(" ")[:2])  # the notes list each rule's pattern
    return source


def _mesh_str(report: MeshConfigReport) -> str:
    return ", ".join(
        f"{n}={s}" for n, s in zip(report.axis_names, report.axis_sizes, strict=True)
    )


def _spec_str(spec: PartitionSpec) -> str:
    return "P(" + ", ".join(repr(a) for a in spec) + ")"


def _spec_json(spec: PartitionSpec) -> list[Any]:
    return [list(a) if isinstance(a, tuple) else a for a in spec]


def _entry_axes(entry: Any) -> tuple[str, ...]:
    if entry is None:
        return ()
    if isinstance(entry, tuple | list):
        return tuple(str(a) for a in entry if a is not None)
    return (str(entry),)


def _entry_names(entry: Any) -> tuple[str, ...] | None:
    """The mesh axis names of a spec entry, or ``None`` if it is not a valid entry."""
    if entry is None:
        return ()
    if isinstance(entry, str):
        return (entry,)
    if isinstance(entry, tuple | list) and all(isinstance(a, str) for a in entry):
        return tuple(entry)
    return None


# ----------------------------------------------------------------------------
# Argument parsing: meshes, specs, rules, byte sizes, optimizers
# ----------------------------------------------------------------------------


MAX_MESH_DEVICES = 2**31 - 1
"""The most devices a JAX mesh can describe: its size must fit a signed 32-bit
integer (jax 0.10: ``NamedSharding`` on a larger ``AbstractMesh`` raises
``RuntimeError: std::bad_cast`` from C++)."""


def as_abstract_mesh(mesh: Any, name: str = "mesh") -> AbstractMesh:
    """An ``AbstractMesh`` from a mapping, ``"a=2,b=4"``, Mesh or AbstractMesh.

    Raises:
        TypeError: If ``mesh`` or an axis name or size has the wrong type.
        ValueError: If a size is not a positive integer, the string is malformed
            or the mesh has more than :data:`MAX_MESH_DEVICES` devices.
    """
    if isinstance(mesh, Mesh):
        mesh = mesh.abstract_mesh
    if isinstance(mesh, AbstractMesh):
        _check_mesh_size(
            tuple(str(n) for n in mesh.axis_names),
            tuple(int(s) for s in mesh.axis_sizes),
            name,
        )
        return mesh
    if isinstance(mesh, str):
        mesh = _parse_mesh_str(mesh, name)
    if isinstance(mesh, Mapping):
        if not mesh:
            raise ValueError(
                f"`{name}` must name at least one axis, got {{}}. Pass e.g. "
                "{'data': 2, 'model': 4}."
            )
        names: list[str] = []
        sizes: list[int] = []
        for axis, size in mesh.items():
            if not isinstance(axis, str) or not axis:
                raise TypeError(
                    f"`{name}` axis names must be nonempty strings, got {axis!r} "
                    f"in {dict(mesh)!r}."
                )
            names.append(axis)
            sizes.append(as_int(size, f"{name}[{axis!r}]", minimum=1))
        _check_mesh_size(tuple(names), tuple(sizes), name)
        return AbstractMesh(tuple(sizes), tuple(names))
    raise TypeError(  # pragma: no cover - beartype rejects these first
        f"`{name}` must be a mapping like {{'data': 2, 'model': 4}}, a string like "
        f"'data=2,model=4', a Mesh or an AbstractMesh, got {type(mesh).__name__}."
    )


def _check_mesh_size(names: tuple[str, ...], sizes: tuple[int, ...], name: str) -> None:
    total = math.prod(sizes)
    if total > MAX_MESH_DEVICES:
        shown = " x ".join(f"{n}={s}" for n, s in zip(names, sizes, strict=True))
        raise ValueError(
            f"`{name}` has {total} devices ({shown}); JAX meshes hold at most "
            f"2**31 - 1 = {MAX_MESH_DEVICES} devices (the product of the axis "
            "sizes must fit a 32-bit integer). Use smaller axes."
        )


def _parse_mesh_str(text: str, name: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in text.split(","):
        axis, sep, size = part.partition("=")
        axis, size = axis.strip(), size.strip()
        if not sep or not axis or not axis.isidentifier():
            raise ValueError(
                f"`{name}` must look like 'data=2,model=4', got {text!r}: {part!r} "
                "is not 'axis=size'."
            )
        if axis in out:
            raise ValueError(
                f"`{name}` names axis {axis!r} twice in {text!r}; each axis once."
            )
        try:
            number: float = int(size)
        except ValueError:
            try:
                number = float(size)
            except ValueError:
                raise ValueError(
                    f"`{name}` must look like 'data=2,model=4', got {text!r}: the "
                    f"size {size!r} of axis {axis!r} is not a number."
                ) from None
        out[axis] = as_int(number, f"{name}[{axis!r}]", minimum=1)
    return out


def _as_spec(spec: Any, name: str) -> PartitionSpec:
    if spec is None:
        return PartitionSpec()
    if isinstance(spec, PartitionSpec):
        entries: Sequence[Any] = tuple(spec)
    elif isinstance(spec, tuple | list):
        entries = spec
    else:
        raise TypeError(
            f"`{name}` must be a PartitionSpec or a tuple of mesh axis names / None, "
            f"got {spec!r}. Write e.g. PartitionSpec(None, 'model')."
        )
    out: list[_Entry] = []
    for entry in entries:
        if entry is None or isinstance(entry, str):
            out.append(entry)
        elif isinstance(entry, tuple | list) and all(isinstance(a, str) for a in entry):
            out.append(tuple(entry))
        else:
            raise TypeError(
                f"`{name}` entries must be None, an axis name or a tuple of axis "
                f"names, got {entry!r} in {spec!r}."
            )
    return PartitionSpec(*out)


def _pairs(value: Any, name: str, example: str) -> list[tuple[str, Any]]:
    """``(label, item)`` for each item of a rules container, labelled for errors.

    Every item is checked by the caller (beartype samples only one).
    """
    if isinstance(value, str | bytes):
        raise TypeError(
            f"`{name}` must be a list of pairs or a mapping, got the string "
            f"{value!r}. Write e.g. [{example}]."
        )
    if isinstance(value, Mapping):
        return [(f"{name}[{key!r}]", (key, item)) for key, item in value.items()]
    return [(f"{name}[{i}]", item) for i, item in enumerate(value)]


def _compile_rules(rules: Any) -> list[tuple[str, re.Pattern[str], PartitionSpec]]:
    if rules is None:
        return []
    out: list[tuple[str, re.Pattern[str], PartitionSpec]] = []
    for label, pair in _pairs(rules, "rules", "('kernel$', P(None, 'model'))"):
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise TypeError(
                f"`{label}` must be a (regular expression, PartitionSpec) pair, "
                f"got {pair!r}."
            )
        pattern, spec = pair
        if isinstance(pattern, re.Pattern):
            compiled = pattern
            if not isinstance(compiled.pattern, str):
                raise TypeError(
                    f"`{label}` must use a str regular expression, got the bytes "
                    f"pattern {compiled.pattern!r}."
                )
        elif isinstance(pattern, str):
            try:
                compiled = re.compile(pattern)
            except re.error as err:
                raise ValueError(
                    f"`{label}` has an invalid regular expression {pattern!r}: "
                    f"{err}. Fix the pattern (rules are searched with re.search)."
                ) from None
        else:
            raise TypeError(
                f"`{label}` must start with a regular expression string, got "
                f"{pattern!r}."
            )
        out.append((compiled.pattern, compiled, _as_spec(spec, label)))
    return out


def _as_logical_rules(rules: Any) -> tuple[tuple[str, _Entry], ...] | None:
    if rules is None:
        return None
    out: list[tuple[str, _Entry]] = []
    for label, pair in _pairs(rules, "logical_rules", "('embed', 'model')"):
        ok = isinstance(pair, tuple | list) and len(pair) == 2
        if ok and isinstance(pair[0], str):
            target = pair[1]
            if target is None or isinstance(target, str):
                out.append((pair[0], target))
                continue
            if isinstance(target, tuple | list) and all(
                isinstance(a, str) for a in target
            ):
                out.append((pair[0], tuple(target)))
                continue
        raise TypeError(
            f"`{label}` must be a (logical name, mesh axis or tuple of axes or "
            f"None) pair, got {pair!r}. Write e.g. ('embed', 'model')."
        )
    return tuple(out)


_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


@typechecked
def parse_bytes(text: str | IntLike, /) -> int:
    """Parse a byte size: ``"16GiB"``, ``"1.5 GB"``, ``"4096"`` or a number.

    Binary units (KiB, MiB, GiB, TiB) are powers of 1024, decimal ones (kB, MB,
    GB, TB) powers of 1000; case does not matter.

    Args:
        text: The size, as a string with an optional unit or an integer-valued
            number.

    Returns:
        The number of bytes, a Python ``int``.

    Raises:
        ValueError: If ``text`` is not a nonnegative size with a known unit, or
            names a fraction of a byte.

    Example:
        >>> parse_bytes("16GiB"), parse_bytes("1.5 kB"), parse_bytes(4096)
        (17179869184, 1500, 4096)
    """
    if not isinstance(text, str):
        return as_int(text, "max_device_bytes", minimum=0)
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise ValueError(
            f"`max_device_bytes` must be a size like '16GiB', '500MB' or '4096', got "
            f"{text!r}. Units: B, kB, MB, GB, TB, KiB, MiB, GiB, TiB."
        )
    value = float(match.group(1)) * _UNITS[unit]
    return as_int(value, "max_device_bytes", minimum=0)


_OPTIMIZERS: dict[str, Callable[[], optax.GradientTransformation]] = {
    "adamw": lambda: optax.adamw(1e-3),
    "adam": lambda: optax.adam(1e-3),
    "sgd": lambda: optax.sgd(1e-3),
    "momentum": lambda: optax.sgd(1e-3, momentum=0.9),
    "adafactor": lambda: optax.adafactor(1e-3),
    "lion": lambda: optax.lion(1e-4),
    "adagrad": lambda: optax.adagrad(1e-3),
    "rmsprop": lambda: optax.rmsprop(1e-3),
}


OPTIMIZER_NAMES = tuple(sorted(_OPTIMIZERS))
"""The optimizer names :func:`optimizer_from_name` (and the CLI) know."""


def optimizer_from_name(name: str) -> optax.GradientTransformation:
    """An optax transformation for a CLI name (``"adamw"``, ``"sgd"``...).

    The learning rate does not change the state's shapes, so a default is used.
    """
    factory = _OPTIMIZERS.get(name.lower())
    if factory is None:
        raise ValueError(
            f"`optimizer` must be one of {sorted(_OPTIMIZERS)}, got {name!r}. "
            "Pass an optax transformation to the Python API for anything else."
        )
    return factory()


def load_rules_file(
    path: str | os.PathLike[str],
) -> tuple[list[tuple[str, SpecLike]], list[tuple[str, Any]] | None]:
    """Read rules from a JSON file: ``[[regex, spec], ...]`` or an object.

    The object form is ``{"rules": [[regex, spec], ...], "logical_rules":
    [[name, axis], ...]}``. A spec is a list of entries: ``null``, an axis name,
    or a list of axis names.

    Returns:
        ``(rules, logical_rules)``; ``logical_rules`` is ``None`` when absent.

    Raises:
        ValueError: If the file is not valid JSON of that shape.
    """
    with open(path, encoding="utf-8") as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as err:
            raise ValueError(
                f"`--rules` file {str(path)!r} is not JSON: {err}."
            ) from None
    logical: list[tuple[str, Any]] | None = None
    if isinstance(data, dict):
        raw_logical = data.get("logical_rules")
        if raw_logical is not None:
            if not isinstance(raw_logical, list):
                raise ValueError(
                    f"`--rules` file {str(path)!r}: 'logical_rules' must be a list of "
                    "[name, axis] pairs."
                )
            logical = [
                (p[0], tuple(p[1]) if isinstance(p[1], list) else p[1])
                if isinstance(p, list) and len(p) == 2
                else p
                for p in raw_logical
            ]
        data = data.get("rules", [])
    if not isinstance(data, list):
        raise ValueError(
            f"`--rules` file {str(path)!r} must hold a list of [regex, spec] pairs or "
            'an object {"rules": [...], "logical_rules": [...]}.'
        )
    rules: list[tuple[str, SpecLike]] = []
    for i, pair in enumerate(data):
        if not isinstance(pair, list) or len(pair) != 2:
            raise ValueError(
                f"`--rules` file {str(path)!r}: entry {i} must be [regex, spec], got "
                f"{pair!r}."
            )
        spec = pair[1]
        if isinstance(spec, list):
            spec = [tuple(e) if isinstance(e, list) else e for e in spec]
        rules.append((pair[0], spec))
    return rules, logical


# ----------------------------------------------------------------------------
# Planning
# ----------------------------------------------------------------------------


class _Planner:
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
            names = _entry_names(entry)
            if names is None:
                usable.append(False)
                problems.append(
                    MeshProblem(
                        path,
                        "invalid-spec",
                        f"`{path}`: entry {dim} of spec {_spec_str(spec)} is "
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
                            f"`{path}`: spec {_spec_str(spec)} uses axis {axis!r} "
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
                    f"`{path}`: spec {_spec_str(spec)} has {len(spec)} entries but "
                    f"the array has rank {len(shape)} (shape {shape}).",
                )
            )
            return problems
        for dim, entry in enumerate(spec):
            if not usable[dim]:
                continue
            # Ask JAX about this dimension alone, so every indivisible dimension
            # is reported (JAX itself stops at the first).
            alone = PartitionSpec(*([None] * dim), entry)
            if self.shard_shape(alone, shape) is None:
                axes = _entry_axes(entry)
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
        if not problems and self.shard_shape(spec, shape) is None:
            # Anything else JAX refuses is a problem too, never a silent pass.
            problems.append(
                MeshProblem(
                    path,
                    "invalid-spec",
                    f"`{path}`: JAX cannot build NamedSharding(mesh, "
                    f"{_spec_str(spec)}) for shape {shape}: "
                    f"{self._errors[(spec, shape)]}",
                )
            )
        return problems

    def _unknown(
        self, path: str, spec: PartitionSpec, axis: str, untranslated: frozenset[str]
    ) -> MeshProblem:
        if axis in untranslated:
            message = (
                f"`{path}`: spec {_spec_str(spec)} names {axis!r} inside a tuple "
                "entry. Flax translates a logical name only when it is a whole "
                "entry, so flax looks for a mesh axis "
                f"{axis!r}, which the mesh {tuple(self.sizes)} lacks, and cannot "
                "place this variable. Write mesh axis names inside tuple entries, "
                "or map one logical name to a tuple of mesh axes in the logical "
                "rules (e.g. ('batch', ('data', 'seq')))."
            )
        else:
            message = (
                f"`{path}`: spec {_spec_str(spec)} names axis {axis!r}, which the "
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
            used = {a for entry in spec or () for a in _entry_axes(entry)}
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


def _metadata_spec(
    record: VarRecord, logical: tuple[tuple[str, _Entry], ...] | None
) -> tuple[PartitionSpec, str, frozenset[str]] | None:
    """Flax's own spec for ``record``'s variable, its source, untranslated names.

    The untranslated names are logical names flax leaves inside tuple entries.
    Flax (``flax.core.spmd.apply_rules`` when it shards a variable eagerly,
    ``nnx.get_partition_spec`` / ``nnx.get_named_sharding`` otherwise) maps each
    entry that *is* a logical name to its rule's mesh axes; a tuple entry is
    kept as written, logical names and all. The plan does exactly the same, so
    it never places a variable that flax would refuse.
    """
    sharding = record.sharding
    if sharding is None:
        return None
    if isinstance(sharding, NamedSharding):
        return sharding.spec, "metadata", frozenset()
    try:
        entries = tuple(sharding)
    except TypeError:
        entries = (sharding,)
    rules = logical if logical is not None else core_spmd.get_logical_axis_rules()
    mapping: dict[str, Any] = dict(rules) if rules else {}
    source = "metadata"
    if any(isinstance(e, str) and e in mapping for e in entries):
        entries = tuple(
            mapping[e] if isinstance(e, str) and e in mapping else e for e in entries
        )
        source = "metadata + logical rules"
    untranslated = frozenset(
        name
        for e in entries
        if isinstance(e, tuple | list)
        for name in e
        if isinstance(name, str) and name in mapping
    )
    return _spec_of(entries), source, untranslated


def _spec_of(entries: Sequence[Any]) -> PartitionSpec:
    """``PartitionSpec(*entries)``; entries it cannot hold are kept for the report."""
    try:
        return PartitionSpec(*entries)
    except Exception:
        return PartitionSpec(
            *(e if _entry_names(e) is not None else repr(e) for e in entries)
        )


def _category(record: VarRecord) -> str:
    return "params" if record.is_param else "other state"


def _optimizer_records(
    records: Sequence[VarRecord], tx: optax.GradientTransformation
) -> tuple[VarRecord, ...]:
    """The records of ``nnx.Optimizer(model, tx, wrt=nnx.Param)``'s state.

    Derived without building an optimizer: ``jax.eval_shape(tx.init, params)``
    on an ``nnx.State`` of the parameters' ``ShapeDtypeStruct``s (what
    ``nnx.Optimizer`` passes to ``tx.init``, minus the ``Variable`` wrappers),
    then ``step``. Paths and kinds are the optimizer's own: ``opt_state/...``
    (``OptVariable`` where the leaf belongs to a parameter, ``OptArray``
    otherwise) and ``step`` (``OptState``, ``uint32``). No variable is created,
    so no sharding metadata (``eager_sharding``) or mesh is involved.
    """
    tree: dict[Any, Any] = {}
    param_paths = set()
    for record in records:
        if not record.is_param:
            continue
        node = tree
        for key in record.path[:-1]:
            node = node.setdefault(key, {})
        node[record.path[-1]] = jax.ShapeDtypeStruct(record.shape, record.dtype)
        param_paths.add(record.path)
    try:
        state = jax.eval_shape(tx.init, nnx.State(tree))
        flat, _ = jax.tree_util.tree_flatten_with_path(state)
    except Exception as err:
        raise ValueError(
            f"`optimizer`'s init failed on the model's parameters: "
            f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''} "
            "Pass an optax transformation whose init takes the parameter tree."
        ) from None
    out: list[VarRecord] = []
    nbytes: dict[tuple[Any, tuple[int, ...]], int] = {}
    for keypath, leaf in flat:
        keys = keypath_keys(keypath)
        owned = any(keys[i:] in param_paths for i in range(1, len(keys)))
        kind = nnx.OptVariable if owned else nnx.OptArray
        out.append(_record(("opt_state", *keys), kind, leaf, nbytes))
    step = jax.ShapeDtypeStruct((), np.dtype("uint32"))
    out.append(_record(("step",), nnx.OptState, step, nbytes))
    # The order of ``nnx.to_flat_state(nnx.state(optimizer))``: sorted paths.
    try:
        out.sort(key=lambda r: r.path)
    except TypeError:  # int and str keys at one level: flax could not sort either
        out.sort(key=lambda r: tuple(_sort_key(k) for k in r.path))
    return tuple(out)


def _sort_key(key: Any) -> tuple[int, Any]:
    return (0, key) if isinstance(key, int) else (1, str(key))


def _record(
    path: tuple[Any, ...],
    kind: type,
    leaf: Any,
    nbytes: dict[tuple[Any, tuple[int, ...]], int],
) -> VarRecord:
    shape = tuple(int(d) for d in getattr(leaf, "shape", ()))
    dtype = getattr(leaf, "dtype", None)
    if dtype is None:  # pragma: no cover - eval_shape gives ShapeDtypeStructs
        dtype = jax.dtypes.canonicalize_dtype(np.asarray(leaf).dtype)
    key = (dtype, shape)
    if key not in nbytes:
        nbytes[key] = dtype_nbytes(dtype, math.prod(shape))
    return VarRecord(
        path=path,
        kind=kind,
        shape=shape,
        dtype=dtype,
        size=math.prod(shape),
        nbytes=nbytes[key],
        sharding=None,
        array=None,
    )


@typechecked
def mesh_config_report(
    target: Target,
    mesh: MeshLike,
    /,
    *,
    rules: RulesLike | None = None,
    logical_rules: LogicalRulesLike | None = None,
    optimizer: optax.GradientTransformation | str | None = None,
) -> MeshConfigReport:
    """Plan how every state leaf of ``target`` splits over ``mesh``.

    Each leaf's partition spec comes from, in order: the first of ``rules`` whose
    regular expression is found (``re.search``) in the leaf's path written as
    its keys joined by ``/`` (``layers/0/attn/q/kernel``); the variable's NNX
    sharding metadata (``nnx.with_partitioning`` / ``out_sharding``), whose
    logical names are translated by ``logical_rules`` (or the active
    ``nnx.logical_axis_rules`` context) exactly as flax translates them: an
    entry that is a logical name becomes its rule's mesh axes, a tuple entry
    is kept as written; otherwise the leaf is replicated. Shard shapes come
    from ``NamedSharding(abstract_mesh, spec).shard_shape``. Every problem
    (each indivisible dimension, unknown or repeated axes, rank mismatches,
    anything else JAX refuses) is collected in ``problems``; warnings (a mesh
    larger than the devices present, rules that gave no leaf its spec) too. No
    device is needed, nothing is allocated, and the model is not mutated.

    With ``optimizer``, the state ``nnx.Optimizer(model, optimizer,
    wrt=nnx.Param)`` would hold is planned too, derived with
    ``jax.eval_shape(optimizer.init, params)`` (no optimizer is built) under the
    optimizer's own paths (``optimizer/opt_state/...``, ``optimizer/step``):
    each leaf sharded like the parameter it mirrors (same path suffix and
    shape), others replicated; and one gradient per parameter (same sharding
    and dtype).

    Args:
        target: An ``nnx.Module``, graph node or ``nnx.State``, concrete or
            abstract.
        mesh: A mapping axis name -> size (``{"data": 2, "model": 4}``), a
            string ``"data=2,model=4"``, a ``jax.sharding.Mesh`` or an
            ``AbstractMesh``.
        rules: Ordered ``(regular expression, PartitionSpec)`` pairs; the first
            match wins over metadata. A spec may be a tuple of entries.
        logical_rules: ``(logical name, mesh axis)`` pairs translating logical
            names in sharding metadata; default: the active
            ``nnx.logical_axis_rules``.
        optimizer: An optax transformation (or a name such as ``"adamw"``) whose
            state and gradients to plan.

    Returns:
        A frozen :class:`MeshConfigReport`.

    Raises:
        TypeError: If ``mesh``, ``rules`` or ``logical_rules`` (or any item of
            them) have the wrong type.
        ValueError: If a mesh size is not a positive integer, a mesh string is
            malformed, the mesh has more than :data:`MAX_MESH_DEVICES` devices,
            a rule's regular expression is invalid, an optimizer name is
            unknown or the optimizer's ``init`` fails on the parameters.

    Example:
        >>> from flax import nnx
        >>> from jax.sharding import PartitionSpec as P
        >>> model = nnx.Linear(4, 6, rngs=nnx.Rngs(0))
        >>> rules = [("kernel", P("model"))]
        >>> report = mesh_config_report(model, "model=4", rules=rules)
        >>> report.num_devices, report.n_state_leaves, report.n_params
        (4, 2, 30)
        >>> report.leaves[1].path, report.leaves[1].shard_shape, report.leaves[1].source
        ('kernel', (1, 6), "rule 0 'kernel'")
        >>> report.leaves[0].shard_shape, report.leaves[0].replicated_over  # bias
        ((6,), ('model',))
        >>> report.bytes_per_device, report.ideal_bytes_per_device
        (48, 30.0)
    """
    abstract = as_abstract_mesh(mesh)
    compiled_rules = _compile_rules(rules)
    logical = _as_logical_rules(logical_rules)
    tx = optimizer_from_name(optimizer) if isinstance(optimizer, str) else optimizer
    planner = _Planner(abstract)
    records = inventory(target)
    opt_records = _optimizer_records(records, tx) if tx is not None else ()

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
        if spec is None:
            from_meta = _metadata_spec(record, logical)
            if from_meta is not None:
                spec, source, untranslated = from_meta
        if spec is None:
            spec = PartitionSpec()
        found = planner.check_spec(path, spec, record.shape, untranslated)
        problems.extend(found)
        shard = None if found else planner.shard_shape(spec, record.shape)
        leaf = planner.leaf(
            record, spec, category=_category(record), source=source, shard_shape=shard
        )
        leaves.append(leaf)
        if leaf.category == "params":
            param_plans[record.path] = leaf

    optimizer_leaves: list[LeafShard] = []
    annotated = {r.path: r for r in records if r.is_param and r.sharding is not None}
    reshaped: list[tuple[str, tuple[int, ...], str]] = []
    for record in opt_records:
        mirrored = _mirrored_param(record, param_plans)
        if mirrored is None:
            spec, source, shard = PartitionSpec(), "default", record.shape
            owner = _owner(record.path, annotated)
            if record.kind is nnx.OptVariable and owner is not None:
                reshaped.append((record.path_str, record.shape, owner.path_str))
        else:
            spec, source = mirrored.spec, f"mirrors {mirrored.path}"
            shard = mirrored.shard_shape
        optimizer_leaves.append(
            planner.leaf(
                record,
                spec,
                category="optimizer state",
                source=source,
                shard_shape=shard,
                path="optimizer/" + record.path_str,
            )
        )
    gradient_leaves: list[LeafShard] = []
    if tx is not None:
        for record in records:
            plan = param_plans.get(record.path)
            if plan is None:
                continue
            gradient_leaves.append(
                planner.leaf(
                    record,
                    plan.spec,
                    category="gradients",
                    source=f"gradient of {plan.path}",
                    shard_shape=plan.shard_shape,
                    kind="Gradient",
                    path="grads/" + plan.path,
                )
            )

    if reshaped:
        path, shape, owner_path = reshaped[0]
        problems.append(
            MeshProblem(
                "",
                "optimizer-metadata",
                f"{len(reshaped)} optimizer-state leaf/leaves differ in shape from "
                f"the annotated parameter they belong to (first: "
                f"`optimizer/{path}`, shape {shape}, of `{owner_path}`); the plan "
                "replicates them. Flax's nnx.Optimizer copies the parameter's "
                "`out_sharding` onto them, so if the parameters were created with "
                "eager sharding (flax's default under a mesh) it fails to build; "
                "create that state another way (e.g. "
                "`jax.jit(tx.init, out_shardings=...)`).",
                severity="warning",
            )
        )
    unmatched: list[str] = []
    for i, (pattern, _, _) in enumerate(compiled_rules):
        if winners[i]:
            continue
        unmatched.append(pattern)
        why = (
            "matched no leaf"
            if not matched[i]
            else f"matched {matched[i]} leaf/leaves, all taken by earlier rules"
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
    present = jax.device_count()
    if planner.num_devices > present:
        problems.append(
            MeshProblem(
                "",
                "mesh-too-large",
                f"The mesh has {planner.num_devices} devices but only {present} "
                f"{'is' if present == 1 else 'are'} present: fine for a proposal, "
                "but it cannot run here.",
                severity="warning",
            )
        )
    params = [r for r in records if r.is_param]
    return MeshConfigReport(
        axis_names=tuple(planner.sizes),
        axis_sizes=tuple(planner.sizes.values()),
        num_devices=planner.num_devices,
        n_state_leaves=len(records),
        n_params=sum(r.size for r in params),
        param_bytes=sum(r.nbytes for r in params),
        leaves=tuple(leaves),
        problems=tuple(problems),
        optimizer_leaves=tuple(optimizer_leaves),
        gradient_leaves=tuple(gradient_leaves),
        rules=tuple(p for p, _, _ in compiled_rules),
        unmatched_rules=tuple(unmatched),
        devices_present=present,
    )


def _owner(
    path: tuple[Any, ...], params: Mapping[tuple[Any, ...], VarRecord]
) -> VarRecord | None:
    """The parameter whose path is the longest suffix of ``path``, any shape."""
    for start in range(1, len(path)):
        found = params.get(path[start:])
        if found is not None:
            return found
    return None


def _mirrored_param(
    record: VarRecord, params: Mapping[tuple[Any, ...], LeafShard]
) -> LeafShard | None:
    """The parameter whose path is the longest suffix of ``record.path``, same shape."""
    path = record.path
    for start in range(1, len(path)):
        plan = params.get(path[start:])
        if plan is not None and plan.shape == record.shape:
            return plan
    return None

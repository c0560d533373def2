"""Model summaries: one row per variable, totals per kind and per dtype.

A :class:`ModelSummary` is computed from the variable inventory alone, so it is
the same for a concrete model, an abstract one (``nnx.eval_shape`` or
:func:`~nnx_introspect.abstract_model`), an ``nnx.State`` or an
``nnx.Optimizer``. No forward pass runs and nothing is patched.
"""

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from flax import nnx

from nnx_introspect._experts import ExpertGroup, expert_groups, unused_params
from nnx_introspect._inventory import VarRecord, inventory, path_str
from nnx_introspect._render import Report, Table, format_bytes
from nnx_introspect._typing import (
    ArgumentError,
    IntLike,
    ModulePaths,
    Target,
    as_int,
    check_items,
    typechecked,
)

__all__ = [
    "KindTotal",
    "ModelSummary",
    "SummaryRow",
    "fold_layers",
    "summarize",
]

LAYER_AXES = ("layers",)
"""Sharding-metadata axis names that mark a stacked-layer axis (the convention of
``nnx.vmap(..., transform_metadata={nnx.PARTITION_NAME: "layers"})``)."""


@dataclasses.dataclass(frozen=True)
class SummaryRow:
    """One row of a :class:`ModelSummary`: a variable, or a group at ``depth``.

    Attributes:
        path: The keys leading to the variable (or the group's module prefix).
        kind: The variable type's name (``"Param"``, ``"BatchStat"``, ...).
        shape: The global shape; ``None`` for a group of several leaves.
        dtype: The dtype name; dtypes of a group joined by ``", "``.
        elements: Number of elements, an exact ``int``.
        nbytes: Packed bytes (int4 counts half a byte per element).
        leaves: Number of array leaves in the row (1 for a single variable).
        layers: The size of the leading stacked-layer axis, or ``None``.
        repeats: How many rows of a Python list of layers this row stands for
            (``summarize(..., group_layers=True)``); its ``path`` then holds
            ``"*"`` for the grouped index, ``shape`` is one member's shape and
            ``elements``, ``nbytes`` and ``leaves`` are the sums.

    Example:
        >>> from flax import nnx
        >>> from nnx_introspect import summarize
        >>> row = summarize(nnx.Linear(4, 3, rngs=nnx.Rngs(0))).rows[1]
        >>> row.path, row.kind, row.shape, row.elements, row.nbytes
        (('kernel',), 'Param', (4, 3), 12, 48)
    """

    path: tuple[Any, ...]
    kind: str
    shape: tuple[int, ...] | None
    dtype: str
    elements: int
    nbytes: int
    leaves: int = 1
    layers: int | None = None
    repeats: int = 1

    @property
    def path_str(self) -> str:
        """The path joined by ``/``."""
        return path_str(self.path)

    @property
    def layer_shape(self) -> tuple[int, ...] | None:
        """The shape of one layer of a stacked variable (``None`` otherwise)."""
        if self.layers is None or self.shape is None:
            return None
        return self.shape[1:]

    def shape_str(self) -> str:
        """``"(4096, 4096)"``, ``"32 x (4096, 4096)"`` or ``"9 leaves"``."""
        if self.shape is None:
            text = _leaves(self.leaves)
        else:
            text = str(self.layer_shape if self.layers is not None else self.shape)
        return text if self.layers is None else f"{self.layers} x {text}"


@dataclasses.dataclass(frozen=True)
class KindTotal:
    """Totals of the rows sharing one variable type or one dtype.

    Attributes:
        name: The variable type's name or the dtype's name.
        leaves: Number of array leaves.
        elements: Number of elements.
        nbytes: Packed bytes.

    Example:
        >>> from flax import nnx
        >>> from nnx_introspect import summarize
        >>> total = summarize(nnx.Linear(4, 3, rngs=nnx.Rngs(0))).by_kind[0]
        >>> total.name, total.leaves, total.elements, total.nbytes
        ('Param', 2, 15, 60)
    """

    name: str
    leaves: int
    elements: int
    nbytes: int


@dataclasses.dataclass(frozen=True)
class ModelSummary(Report):
    """What a model holds: rows, totals by variable type and by dtype.

    Render it with ``rich.print(summary)`` (terminals), by displaying it
    (notebooks), with :meth:`to_markdown` or :meth:`to_json`.

    JSON schema ``nnx-introspect/summary`` version 1 (every count an exact
    integer): ``schema``, ``version``, ``title``, ``abstract``, ``depth``,
    ``n_params``, ``n_state_leaves``, ``param_bytes``, ``total_bytes``,
    ``rows`` (each ``path``, ``keys``, ``kind``, ``shape`` (``null`` for a group),
    ``layers`` (``null`` unless stacked), ``dtype``, ``elements``, ``bytes``,
    ``leaves``), ``by_kind`` and ``by_dtype`` (each ``name``, ``leaves``,
    ``elements``, ``bytes``). A summary made with ``group_layers=True`` adds
    ``repeats`` to every row (1 for a row that stands for one variable or
    group); a grouped row's ``keys`` hold ``"*"`` for the grouped list index
    and its ``path`` reads ``layers/*/q/kernel``. ``n_active_params`` (``null``
    when unknown) and ``experts`` (each router's ``path``, ``experts``,
    ``top_k``, ``params`` and ``active_params``; empty without experts) say
    what a token uses of a mixture of experts.

    Attributes:
        title: What was summarized (the class name of the target).
        rows: One row per variable, or per module prefix and kind at ``depth``.
        by_kind: Totals per variable type, in order of first appearance.
        by_dtype: Totals per dtype, in order of first appearance.
        n_params: Elements of ``nnx.Param`` variables (and subclasses) only.
        n_state_leaves: Array leaves of every kind.
        param_bytes: Packed bytes of the ``nnx.Param`` variables.
        total_bytes: Packed bytes of every leaf.
        abstract: Whether the leaves were shape-only (nothing allocated).
        depth: The aggregation depth, or ``None`` for one row per variable.
        grouped: Whether identical rows of a list of layers were grouped.
        n_active_params: Of ``n_params``, those one token uses
            (:func:`~nnx_introspect.count_active_params`): all of them without
            experts; ``None`` when unknown (a state whose dimensions are named
            as experts holds no router to say how many a token uses).
        experts: The routers of a mixture of experts, each with its routed
            experts' parameters; ``()`` without experts.

    Example:
        >>> import json
        >>> from flax import nnx
        >>> from nnx_introspect import summarize
        >>> summary = summarize(nnx.Linear(4, 3, rngs=nnx.Rngs(0)))
        >>> summary.n_params, summary.n_state_leaves, summary.total_bytes
        (15, 2, 60)
        >>> json.loads(summary.to_json())["schema"]
        'nnx-introspect/summary'
    """

    SCHEMA = "nnx-introspect/summary"
    SCHEMA_VERSION = 1

    title: str
    rows: tuple[SummaryRow, ...]
    by_kind: tuple[KindTotal, ...]
    by_dtype: tuple[KindTotal, ...]
    n_params: int
    n_state_leaves: int
    param_bytes: int
    total_bytes: int
    abstract: bool
    depth: int | None
    grouped: bool = False
    n_active_params: int | None = None
    experts: tuple[ExpertGroup, ...] = ()

    def _repr_items(self) -> dict[str, Any]:
        items = super()._repr_items()
        if not self.grouped:
            del items["grouped"]
        if not self.experts:
            items.pop("experts", None)
            if self.n_active_params == self.n_params:
                del items["n_active_params"]
        return items

    def table(self) -> Table:
        """The summary as a :class:`~nnx_introspect.Table`."""
        rows = tuple(
            (
                (r.path_str or "(root)")
                + (f" \u00d7{r.repeats}" if r.repeats > 1 else ""),
                r.kind,
                r.shape_str(),
                r.dtype,
                f"{r.elements:,}",
                format_bytes(r.nbytes),
            )
            for r in self.rows
        )
        totals: list[tuple[str, ...]] = []
        for t in self.by_kind:
            totals.append(
                (
                    f"{t.name} total",
                    "",
                    _leaves(t.leaves),
                    "",
                    f"{t.elements:,}",
                    format_bytes(t.nbytes),
                )
            )
        if len(self.by_dtype) > 1:
            for t in self.by_dtype:
                totals.append(
                    (
                        f"{t.name} total",
                        "",
                        _leaves(t.leaves),
                        t.name,
                        f"{t.elements:,}",
                        format_bytes(t.nbytes),
                    )
                )
        total_elements = sum(t.elements for t in self.by_kind)
        totals.append(
            (
                "Total",
                "",
                _leaves(self.n_state_leaves),
                "",
                f"{total_elements:,}",
                format_bytes(self.total_bytes),
            )
        )
        notes = [
            f"Parameters (nnx.Param only): {self.n_params:,} "
            f"({format_bytes(self.param_bytes)}).",
            "Shared (tied) variables are counted once; sub-byte dtypes at their "
            "packed size.",
        ]
        notes.extend(self._expert_notes())
        if self.abstract:
            notes.append("Abstract: shapes only, nothing was allocated.")
        state = "abstract" if self.abstract else "concrete"
        return Table(
            title=f"{self.title} ({state}): {self.n_params:,} parameters, "
            f"{format_bytes(self.total_bytes)} of state",
            columns=("Path", "Type", "Shape", "Dtype", "Elements", "Bytes"),
            rows=rows,
            totals=tuple(totals),
            notes=tuple(notes),
        )

    def _expert_notes(self) -> list[str]:
        if self.n_active_params is None:
            return [
                "Parameters a token uses: unknown (a state holds no router to say "
                "how many of its experts a token goes to)."
            ]
        if not self.experts:
            return []
        routes = sorted({(g.top_k, g.experts) for g in self.experts})
        how = "; ".join(f"top-{k} of {e} experts" for k, e in routes)
        routed = sum(g.params for g in self.experts)
        share = self.n_active_params / self.n_params if self.n_params else 0.0
        return [
            f"Parameters a token uses: {self.n_active_params:,} of "
            f"{self.n_params:,} ({share:.1%}): {len(self.experts)} router"
            f"{'s' if len(self.experts) > 1 else ''} ({how}) over "
            f"{routed:,} routed-expert parameters."
        ]

    def json_data(self) -> dict[str, Any]:
        """The summary's JSON payload (see the class docstring for the schema)."""

        def total(t: KindTotal) -> dict[str, Any]:
            return {
                "name": t.name,
                "leaves": t.leaves,
                "elements": t.elements,
                "bytes": t.nbytes,
            }

        def row(r: SummaryRow) -> dict[str, Any]:
            data = {
                "path": r.path_str,
                "keys": [k if isinstance(k, int) else str(k) for k in r.path],
                "kind": r.kind,
                "shape": None if r.shape is None else list(r.shape),
                "layers": r.layers,
                "dtype": r.dtype,
                "elements": r.elements,
                "bytes": r.nbytes,
                "leaves": r.leaves,
            }
            if self.grouped:
                data["repeats"] = r.repeats
            return data

        return {
            "title": self.title,
            "abstract": self.abstract,
            "depth": self.depth,
            "n_params": self.n_params,
            "n_state_leaves": self.n_state_leaves,
            "param_bytes": self.param_bytes,
            "total_bytes": self.total_bytes,
            "n_active_params": self.n_active_params,
            "experts": [
                {
                    "path": g.path_str,
                    "experts": g.experts,
                    "top_k": g.top_k,
                    "params": g.params,
                    "active_params": g.active_params,
                }
                for g in self.experts
            ],
            "rows": [row(r) for r in self.rows],
            "by_kind": [total(t) for t in self.by_kind],
            "by_dtype": [total(t) for t in self.by_dtype],
        }


def _leaves(n: int) -> str:
    return f"{n} leaf" if n == 1 else f"{n} leaves"


def _kind_name(record: VarRecord) -> str:
    return record.kind_name if record.is_variable else "Array"


def _layers(record: VarRecord, stacked: Sequence[tuple[Any, ...]]) -> int | None:
    if not record.shape:
        return None
    sharding = record.sharding
    names = getattr(sharding, "spec", sharding)
    if (
        isinstance(names, Sequence)
        and not isinstance(names, str)
        and len(names) > 0
        and names[0] in LAYER_AXES
    ):
        return record.shape[0]
    for prefix in stacked:
        if record.path[: len(prefix)] == prefix:
            return record.shape[0]
    return None


def _totals(pairs: Iterable[tuple[str, VarRecord]]) -> tuple[KindTotal, ...]:
    acc: dict[str, list[int]] = {}
    for name, record in pairs:
        entry = acc.setdefault(name, [0, 0, 0])
        entry[0] += 1
        entry[1] += record.size
        entry[2] += record.nbytes
    return tuple(KindTotal(name, *values) for name, values in acc.items())


def _aggregate(rows: list[SummaryRow], depth: int) -> list[SummaryRow]:
    groups: dict[tuple[tuple[Any, ...], str], list[SummaryRow]] = {}
    for row in rows:
        key = (row.path[:depth], row.kind)
        groups.setdefault(key, []).append(row)
    out = []
    for (prefix, kind), members in groups.items():
        if len(members) == 1:
            out.append(dataclasses.replace(members[0], path=prefix))
            continue
        dtypes = list(dict.fromkeys(m.dtype for m in members))
        layers = {m.layers for m in members}
        out.append(
            SummaryRow(
                path=prefix,
                kind=kind,
                shape=None,
                dtype=", ".join(dtypes),
                elements=sum(m.elements for m in members),
                nbytes=sum(m.nbytes for m in members),
                leaves=sum(m.leaves for m in members),
                layers=layers.pop() if len(layers) == 1 else None,
            )
        )
    return out


def _is_index(key: Any) -> bool:
    return isinstance(key, int) and not isinstance(key, bool)


def fold_layers(rows: list[SummaryRow]) -> list[SummaryRow]:
    """Fold rows that differ only in one list index into one ``"*"`` row.

    A run is folded only when it covers every index the model has at that
    position (under the same prefix), so a differing layer is never hidden.
    """
    indices: dict[tuple[Any, ...], set[int]] = {}
    for row in rows:
        for i, key in enumerate(row.path):
            if _is_index(key):
                indices.setdefault(row.path[:i], set()).add(key)
    runs: dict[tuple[Any, ...], list[int]] = {}
    for n, row in enumerate(rows):
        for i, key in enumerate(row.path):
            if _is_index(key):
                rest = dataclasses.replace(
                    row, path=(*row.path[:i], "*", *row.path[i + 1 :])
                )
                runs.setdefault((i, rest), []).append(n)
    claimed: dict[int, SummaryRow] = {}
    skipped: set[int] = set()
    for (i, rest), members in runs.items():
        if len(members) < 2 or any(n in claimed or n in skipped for n in members):
            continue
        if {rows[n].path[i] for n in members} != indices[rest.path[:i]]:
            continue
        claimed[members[0]] = dataclasses.replace(
            rest,
            elements=sum(rows[n].elements for n in members),
            nbytes=sum(rows[n].nbytes for n in members),
            leaves=sum(rows[n].leaves for n in members),
            repeats=sum(rows[n].repeats for n in members),
        )
        skipped.update(members[1:])
    return [claimed.get(n, row) for n, row in enumerate(rows) if n not in skipped]


def _parse_prefix(prefix: str) -> tuple[Any, ...]:
    return tuple(int(k) if k.isdigit() else k for k in prefix.split("/") if k)


@typechecked
def summarize(
    target: Target,
    /,
    *,
    depth: IntLike | None = None,
    stacked: ModulePaths = (),
    group_layers: bool = False,
) -> ModelSummary:
    """Summarize what ``target`` holds: every variable, by type and by dtype.

    One row per state leaf (path, variable type, shape, dtype, elements,
    packed bytes), in ``nnx.state`` order; shared (tied) variables appear once.
    ``n_params`` counts ``nnx.Param`` elements only: batch statistics, RNG
    state and optimizer state are reported under their own types, never as
    parameters. Sub-byte dtypes count at their packed size (int4: half a byte
    per element, as XLA stores it). Stacked layers (a leading layer axis from
    ``nnx.vmap``/``nnx.scan``) show as ``layers x per-layer shape`` when the
    axis is annotated ``"layers"`` in the sharding metadata (flax's
    ``transform_metadata={nnx.PARTITION_NAME: "layers"}``) or lies under a
    module named in ``stacked``. Works on concrete and abstract models alike
    and reads shapes only: nothing is computed, copied or mutated.

    ``n_active_params`` counts the parameters one token uses
    (:func:`~nnx_introspect.count_active_params`: a mixture of experts' routed
    experts at ``top_k / experts``), ``experts`` lists its routers; a dense
    model's ``n_active_params`` is ``n_params``.

    Args:
        target: An ``nnx.Module`` (concrete or abstract), another graph node such
            as an ``nnx.Optimizer``, or an ``nnx.State``.
        depth: Aggregate rows into one per module prefix of this many path keys
            and variable type; ``None`` (default) keeps one row per variable.
        stacked: Module paths (``"blocks"``, ``"encoder/layers"``) whose variables
            carry a leading layer axis without a ``"layers"`` annotation.
        group_layers: Fold the rows of a Python list of layers that differ only
            in the list index (same type, shape, dtype) into one row with path
            ``layers/*/q/kernel`` and ``repeats`` (shown ``x32``): elements and
            bytes are summed, the shape is one layer's. A run is folded only when
            it covers every index of the list, so a differing layer keeps its own
            rows. Applies after ``depth``. Totals never change.

    Returns:
        A :class:`ModelSummary`.

    Raises:
        TypeError: If ``target`` is not a graph node or state, ``depth`` is
            not an integer, or ``stacked`` is a single string or holds a
            non-string.
        ValueError: If ``depth`` is smaller than 1, or a router of the model
            sends each token to more experts than it has (or to none).

    Example:
        >>> from flax import nnx
        >>> summary = summarize(nnx.Linear(4, 3, rngs=nnx.Rngs(0)))
        >>> [(r.path_str, r.kind, r.shape, r.elements) for r in summary.rows]
        [('bias', 'Param', (3,), 3), ('kernel', 'Param', (4, 3), 12)]
        >>> summary.n_params, summary.total_bytes
        (15, 60)

        A list of identical layers folds into one row per leaf:

        >>> class Stack(nnx.Module):
        ...     def __init__(self):
        ...         rngs = nnx.Rngs(0)
        ...         self.layers = nnx.List([nnx.Linear(4, 4, rngs=rngs) for _ in "abc"])
        >>> grouped = summarize(Stack(), group_layers=True)
        >>> [(r.path_str, r.repeats, r.shape, r.elements) for r in grouped.rows]
        [('layers/*/bias', 3, (4,), 12), ('layers/*/kernel', 3, (4, 4), 48)]

        A mixture of experts also says what a token uses:

        >>> from nnx_introspect import abstract_model
        >>> from nnx_introspect.examples import moe_tiny
        >>> moe = summarize(abstract_model(moe_tiny))
        >>> moe.n_params, moe.n_active_params, [g.top_k for g in moe.experts]
        (214336, 140608, [2, 2])
    """
    level = None if depth is None else as_int(depth, "depth", minimum=1)
    if isinstance(stacked, str):
        raise TypeError(
            f"`stacked` must be a sequence of module paths, got the string "
            f"{stacked!r}. Wrap it in a list: `stacked=[{stacked!r}]`."
        )
    check_items(stacked, "stacked", str, "a module path string such as 'blocks'")
    prefixes = []
    for entry in stacked:
        prefix = _parse_prefix(entry)
        if not prefix:
            raise ArgumentError(
                "stacked",
                f"`stacked` entries must name a module path such as 'blocks', got "
                f"{entry!r}.",
            )
        prefixes.append(prefix)
    records = inventory(target)
    rows = [
        SummaryRow(
            path=r.path,
            kind=_kind_name(r),
            shape=r.shape,
            dtype=r.dtype_name,
            elements=r.size,
            nbytes=r.nbytes,
            layers=_layers(r, prefixes),
        )
        for r in records
    ]
    if level is not None:
        rows = _aggregate(rows, level)
    if group_layers:
        rows = fold_layers(rows)
    params = [r for r in records if r.is_param]
    n_params = sum(r.size for r in params)
    try:
        groups = expert_groups(target)
    except ArgumentError:
        # a state named as experts: unknown; a model's router out of range: said
        if not isinstance(target, nnx.State):
            raise
        groups, active = (), None
    else:
        active = n_params - unused_params(groups)
    title = type(target).__name__
    return ModelSummary(
        title=title,
        rows=tuple(rows),
        by_kind=_totals((_kind_name(r), r) for r in records),
        by_dtype=_totals((r.dtype_name, r) for r in records),
        n_params=n_params,
        n_state_leaves=len(records),
        param_bytes=sum(r.nbytes for r in params),
        total_bytes=sum(r.nbytes for r in records),
        abstract=bool(records) and all(r.is_abstract for r in records),
        depth=level,
        grouped=group_layers,
        n_active_params=active,
        experts=groups,
    )

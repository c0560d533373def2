"""The engine behind every diff: two inventories compared path by path."""

from collections.abc import Mapping, Sequence
from typing import Any

from nnx_introspect._compare.diff import DiffEntry, Problem, StateDiff, sentence
from nnx_introspect._compare.values import value_entry
from nnx_introspect._inventory import VarRecord, path_sort_key


def _key(record: VarRecord) -> tuple[str, ...]:
    return tuple(str(k) for k in record.path)


def diff_records(
    a: Sequence[VarRecord],
    b: Sequence[VarRecord],
    *,
    rtol: float,
    atol: float,
    a_label: str = "a",
    b_label: str = "b",
    compare_values: bool = True,
    notes: Sequence[str] = (),
    b_values: Mapping[tuple[str, ...], Any] | None = None,
) -> StateDiff:
    """The engine behind every diff: compare two inventories path by path.

    Paths match on their keys as strings (an ``nnx.List`` index ``0`` matches a
    checkpoint's ``"0"``). Variable types are compared only where both records
    carry NNX variable types. Values are compared only where shapes and dtypes
    match, both sides have values and ``compare_values`` is true. ``b_values``
    overrides ``b``'s values by key (restored arrays).
    """
    a_map = {_key(r): r for r in a}
    b_map = {_key(r): r for r in b}
    order = {
        k: i for i, k in enumerate(sorted(set(a_map) | set(b_map), key=path_sort_key))
    }
    entries: list[tuple[int, DiffEntry]] = []

    def add(k: tuple[str, ...], problem: Problem, x: str, y: str) -> None:
        p = "/".join(k)
        msg = sentence(p, problem, x, y, a_label, b_label)
        entries.append((order[k], DiffEntry(p, problem, x, y, msg)))

    common = [k for k in a_map if k in b_map]
    kinds_compared = bool(common) and all(
        a_map[k].is_variable and b_map[k].is_variable for k in common
    )
    all_values = compare_values
    n_values = 0  # paths whose values were compared
    for k, ra in a_map.items():
        if k not in b_map:
            add(k, "missing", _describe(ra), "-")
            continue
        rb = b_map[k]
        if ra.is_variable and rb.is_variable and ra.kind is not rb.kind:
            add(k, "variable-type", ra.kind_name, rb.kind_name)
        if ra.shape != rb.shape:
            add(k, "shape", str(ra.shape), str(rb.shape))
        if ra.dtype != rb.dtype:
            add(k, "dtype", ra.dtype_name, rb.dtype_name)
        if ra.shape != rb.shape or ra.dtype != rb.dtype:
            continue
        vb = rb.array if b_values is None else b_values.get(k)
        if not compare_values or ra.array is None or vb is None:
            all_values = False
            continue
        n_values += 1
        entry = value_entry("/".join(k), ra.array, vb, rtol=rtol, atol=atol)
        if entry is not None:
            entries.append((order[k], entry))
    for k, rb in b_map.items():
        if k not in a_map:
            add(k, "extra", "-", _describe(rb))
    entries.sort(key=lambda pair: pair[0])
    # No value compared (no common path, or none whose shape and dtype match)
    # is not "values compared": never let an empty comparison read as one.
    all_values = all_values and n_values > 0
    all_notes = _notes(notes, kinds_compared or not common, all_values)
    return StateDiff(
        a_label=a_label,
        b_label=b_label,
        entries=tuple(e for _, e in entries),
        n_paths_a=len(a_map),
        n_paths_b=len(b_map),
        n_common=len(common),
        values_compared=all_values,
        kinds_compared=kinds_compared,
        rtol=rtol,
        atol=atol,
        notes=all_notes,
    )


def _notes(
    notes: Sequence[str], kinds_compared: bool, values_compared: bool
) -> tuple[str, ...]:
    """``notes``, then what the comparison could not check, if anything."""
    out = list(notes)
    if not kinds_compared:
        out.append(
            "Variable types were not compared: at least one side does not record "
            "them (checkpoints and plain mappings hold arrays only)."
        )
    if not values_compared:
        out.append(
            "Values were not compared for every path: only structure, shapes and "
            "dtypes were checked where a side is abstract or is metadata."
        )
    return tuple(out)


def _describe(record: VarRecord) -> str:
    kind = f"{record.kind_name} " if record.is_variable else ""
    return f"{kind}{record.dtype_name}{list(record.shape)}"

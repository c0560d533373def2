"""State comparison: every difference between two states, per path.

Matching sums do not prove two models equal, and one forward output cannot prove
every parameter matches (a zero input hides every kernel). :func:`compare_states`
compares what does: the set of paths, each leaf's variable type, shape, dtype and
values (with a tolerance), collecting every difference instead of stopping at the
first. The checkpoint checks in ``_checkpoint.py`` reuse the same engine.
"""

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.experimental import multihost_utils

from nnx_introspect._abstract import check_takes_rngs
from nnx_introspect._inventory import VarRecord, inventory
from nnx_introspect._nnx import keypath_keys
from nnx_introspect._render import Report, Table
from nnx_introspect._typing import IntLike, Target, as_int, typechecked

__all__ = [
    "DiffEntry",
    "StateDiff",
    "check_reproducible_init",
    "compare_states",
]

Problem = Literal["missing", "extra", "variable-type", "shape", "dtype", "value"]
_FLIPPED: dict[Problem, Problem] = {"missing": "extra", "extra": "missing"}
Comparable = Target | Mapping[Any, Any]
"""What :func:`compare_states` accepts: a module or graph node, an ``nnx.State``
(concrete or abstract) or a nested mapping of arrays / ``jax.ShapeDtypeStruct``."""
Tolerance = float | int | np.floating[Any]
"""A tolerance: a finite, nonnegative real (``0``, ``1e-6``)."""


@dataclasses.dataclass(frozen=True)
class DiffEntry:
    """One difference at one path.

    Attributes:
        path: The leaf's path, keys joined by ``/``.
        problem: ``"missing"`` (in ``a``, not in ``b``), ``"extra"`` (in ``b``,
            not in ``a``), ``"variable-type"``, ``"shape"``, ``"dtype"`` or
            ``"value"``.
        a: What ``a`` holds there (a type name, shape or dtype; ``"-"`` if absent).
        b: What ``b`` holds there.
        n_different: For ``"value"``: elements outside the tolerance, exact.
        n_elements: For ``"value"``: elements compared.
        max_abs_diff: For ``"value"``: the largest ``|a - b|`` (``nan`` if a NaN
            faces a number).
        max_rel_diff: For ``"value"``: the largest ``|a - b| / |a|`` over the
            differing elements where ``a != 0``, or ``None`` if there are none.
        message: A sentence saying what differs.

    Example:
        >>> from flax import nnx
        >>> from nnx_introspect import compare_states
        >>> a = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
        >>> b = nnx.Linear(2, 3, rngs=nnx.Rngs(1))
        >>> entry = compare_states(a, b).entries[0]
        >>> entry.path, entry.problem, entry.n_different, entry.n_elements
        ('kernel', 'value', 6, 6)
    """

    path: str
    problem: Problem
    a: str
    b: str
    message: str
    n_different: int | None = None
    n_elements: int | None = None
    max_abs_diff: float | None = None
    max_rel_diff: float | None = None


@dataclasses.dataclass(frozen=True)
class StateDiff(Report):
    """Every difference between two states, per path; never first-error-only.

    ``a`` is the reference: ``"missing"`` means a path of ``a`` that ``b`` lacks,
    ``"extra"`` a path of ``b`` that ``a`` lacks.

    Attributes:
        a_label: What ``a`` is (``"a"``, ``"target"``, ``"build 1"``).
        b_label: What ``b`` is (``"b"``, ``"checkpoint"``, ``"build 2"``).
        entries: Every difference found, in path order.
        n_paths_a: Leaves in ``a``.
        n_paths_b: Leaves in ``b``.
        n_common: Paths present in both.
        values_compared: Whether values were compared for every common path whose
            shape and dtype match (``False`` when a side is abstract or is
            checkpoint metadata: then only structure, shapes and dtypes were).
        kinds_compared: Whether variable types were compared (both sides must
            carry NNX variable types; checkpoints and plain mappings do not).
        rtol: Relative tolerance used for values.
        atol: Absolute tolerance used for values.
        notes: Caveats, in sentences.

    Example:
        >>> from flax import nnx
        >>> from nnx_introspect import compare_states
        >>> a = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
        >>> b = nnx.Linear(2, 4, rngs=nnx.Rngs(0))
        >>> diff = compare_states(a, b)
        >>> diff.equal, [(e.path, e.problem) for e in diff.entries]
        (False, [('bias', 'shape'), ('kernel', 'shape')])
    """

    SCHEMA = "nnx-introspect/state-diff"
    SCHEMA_VERSION = 1

    a_label: str
    b_label: str
    entries: tuple[DiffEntry, ...]
    n_paths_a: int
    n_paths_b: int
    n_common: int
    values_compared: bool
    kinds_compared: bool
    rtol: float
    atol: float
    notes: tuple[str, ...] = ()

    @property
    def equal(self) -> bool:
        """Whether no difference was found (within what was compared)."""
        return not self.entries

    @property
    def paths(self) -> tuple[str, ...]:
        """The paths with at least one difference, in order, each once."""
        return tuple(dict.fromkeys(e.path for e in self.entries))

    def at(self, path: str) -> tuple[DiffEntry, ...]:
        """The differences found at ``path`` (``"l1/kernel"``)."""
        if not isinstance(path, str):
            raise TypeError(
                f"`path` must be a string of keys joined by '/' (such as "
                f"'l1/kernel'), got {path!r} of type {type(path).__name__}."
            )
        return tuple(e for e in self.entries if e.path == path)

    def reversed(self) -> "StateDiff":
        """The same comparison read the other way: ``b`` first, ``a`` second.

        Labels and path counts swap, each entry's ``a`` and ``b`` swap,
        ``"missing"`` becomes ``"extra"`` and back, and messages are reworded
        for the new order. Everything else is kept as measured: the value
        figures (``n_different``, ``max_abs_diff``, ``max_rel_diff``) and the
        tolerances still use the original ``a`` as the reference, so with
        tolerances or for ``max_rel_diff`` this is the original comparison
        relabelled, not a new one. Exact comparisons (the default) read the
        same both ways, so ``compare_states(a, b).reversed()`` then holds the
        entries of ``compare_states(b, a)``, except that ``max_rel_diff`` is
        still relative to the old ``a`` and the labels keep naming the old
        sides (the old ``a`` is now ``b_label``).

        Returns:
            A new :class:`StateDiff`; ``self`` is unchanged.

        Example:
            >>> from flax import nnx
            >>> from nnx_introspect import compare_states
            >>> a = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
            >>> diff = compare_states(a, {"kernel": a.kernel[...]})
            >>> [(e.path, e.problem, e.a, e.b) for e in diff.entries]
            [('bias', 'missing', 'Param float32[3]', '-')]
            >>> back = diff.reversed()
            >>> back.a_label, back.b_label, back.n_paths_a, back.n_paths_b
            ('b', 'a', 1, 2)
            >>> [(e.path, e.problem, e.a, e.b) for e in back.entries]
            [('bias', 'extra', '-', 'Param float32[3]')]
        """
        a_label, b_label = self.b_label, self.a_label
        entries = []
        for e in self.entries:
            problem = _FLIPPED.get(e.problem, e.problem)
            message = e.message
            if problem != "value":
                message = _sentence(e.path, problem, e.b, e.a, a_label, b_label)
            entries.append(
                dataclasses.replace(e, problem=problem, a=e.b, b=e.a, message=message)
            )
        return dataclasses.replace(
            self,
            a_label=a_label,
            b_label=b_label,
            entries=tuple(entries),
            n_paths_a=self.n_paths_b,
            n_paths_b=self.n_paths_a,
        )

    def table(self) -> Table:
        """The diff as a :class:`~nnx_introspect.Table`."""
        rows = tuple(
            (
                e.path,
                e.problem,
                e.a,
                e.b,
                "" if e.n_different is None else f"{e.n_different}/{e.n_elements}",
                "" if e.max_abs_diff is None else f"{e.max_abs_diff:.3g}",
                "" if e.max_rel_diff is None else f"{e.max_rel_diff:.3g}",
            )
            for e in self.entries
        )
        verdict = (
            "equal"
            if self.equal
            else (f"{len(self.entries)} difference(s) at {len(self.paths)} path(s)")
        )
        what = "values" if self.values_compared else "structure, shapes and dtypes"
        totals = (
            (
                f"{self.n_common} common path(s)",
                f"{self.n_paths_a} in {self.a_label}, "
                f"{self.n_paths_b} in {self.b_label}",
                "",
                "",
                "",
                "",
                "",
            ),
        )
        return Table(
            title=f"State diff: {self.a_label} vs {self.b_label}: {verdict} "
            f"(compared {what})",
            columns=(
                "path",
                "problem",
                self.a_label,
                self.b_label,
                "differing",
                "max |a-b|",
                "max rel",
            ),
            rows=rows,
            totals=totals,
            notes=self.notes,
        )

    def json_data(self) -> dict[str, Any]:
        """Exact figures for JSON output (non-finite floats as strings)."""
        return {
            "equal": self.equal,
            "a_label": self.a_label,
            "b_label": self.b_label,
            "n_paths_a": self.n_paths_a,
            "n_paths_b": self.n_paths_b,
            "n_common": self.n_common,
            "values_compared": self.values_compared,
            "kinds_compared": self.kinds_compared,
            "rtol": self.rtol,
            "atol": self.atol,
            "entries": [
                {
                    **dataclasses.asdict(e),
                    "max_abs_diff": json_float(e.max_abs_diff),
                    "max_rel_diff": json_float(e.max_rel_diff),
                }
                for e in self.entries
            ],
            "notes": list(self.notes),
        }


def json_float(x: float | None) -> float | str | None:
    """``x`` as strict JSON allows: finite floats stay, NaN and inf become strings."""
    if x is None or math.isfinite(x):
        return x
    return str(x)


def check_tolerance(value: object, name: str) -> float:
    """A finite, nonnegative tolerance as a Python ``float``, or raise."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating):
        raise TypeError(
            f"`{name}` must be a nonnegative float such as 1e-6, got {value!r} of "
            f"type {type(value).__name__}."
        )
    result = float(value)
    if not math.isfinite(result) or result < 0:
        raise ValueError(
            f"`{name}` must be a finite nonnegative float such as 1e-6, got {result!r}."
        )
    return result


def leaf_dtype(
    leaf: object, name: str, path: str, must: str = "must hold numeric arrays"
) -> np.dtype[Any] | None:
    """The dtype of a numeric state leaf, ``None`` for a PRNG key, or raise.

    Accepts arrays (JAX, NumPy, ``jax.ShapeDtypeStruct``, tracers) of a bool,
    integer, floating or complex dtype (int4, bfloat16 and float8 included) and
    Python or NumPy numbers. Anything else (``None``, a string, an object or
    string array, a datetime) raises a ``TypeError`` naming ``name`` and
    ``path``: "`name` {must}, got ...".
    """
    if isinstance(leaf, bool | int | float | complex):
        return np.dtype(jnp.result_type(leaf).name)
    dtype = getattr(leaf, "dtype", None)
    if dtype is not None:
        if is_key_dtype(dtype):
            return None
        try:
            numeric = bool(
                jnp.issubdtype(dtype, jnp.number) or jnp.issubdtype(dtype, np.bool_)
            )
        except TypeError:  # pragma: no cover - dtype objects NumPy cannot read
            numeric = False
        if numeric:
            result: np.dtype[Any] = np.dtype(dtype)
            return result
        what = f"an array of dtype {dtype}"
    elif leaf is None:
        what = "None"
    else:
        what = f"{leaf!r:.60} of type {type(leaf).__name__}"
    raise TypeError(
        f"`{name}` {must}, got {what} at {path!r}. Give every "
        "leaf a bool, integer, float or complex array (`jnp.asarray(...)`), or "
        "leave that entry out."
    )


def check_leaves(state: Any, name: str, must: str = "must hold numeric arrays") -> None:
    """Raise ``TypeError`` naming ``name`` and the path of the first non-numeric leaf.

    ``None`` counts as a leaf here (a variable or mapping entry without a value),
    so it is reported instead of silently vanishing from the tree.
    """
    pairs, _ = jax.tree_util.tree_flatten_with_path(state, is_leaf=_is_none)
    for keypath, leaf in pairs:
        leaf_dtype(leaf, name, keypath_str(keypath), must)


def _is_none(x: object) -> bool:
    return x is None


def keypath_str(keypath: Any) -> str:
    """A ``jax.tree_util`` key path as state keys joined by ``/`` (no ``value``)."""
    keys = [
        k
        for k in keypath
        if not (isinstance(k, jax.tree_util.GetAttrKey) and k.name == "value")
    ]
    return "/".join(str(k) for k in keypath_keys(tuple(keys)))


def records_of(x: object, name: str) -> tuple[VarRecord, ...]:
    """The inventory of a module, state or nested mapping (wrapped in a State).

    Every leaf is checked first (:func:`check_leaves`): a string, object or
    ``None`` leaf raises a ``TypeError`` naming ``name`` and the path.
    """
    if isinstance(x, nnx.State | nnx.Pytree):
        check_leaves(x if isinstance(x, nnx.State) else nnx.state(x), name)
        return inventory(x)
    if isinstance(x, Mapping):
        state = nnx.State(x)
        check_leaves(state, name)
        return inventory(state)
    raise TypeError(  # pragma: no cover - beartype rejects these first
        f"`{name}` must be an nnx.Module, an nnx.State or a mapping of arrays, "
        f"got {type(x).__name__}."
    )


def _key(record: VarRecord) -> tuple[str, ...]:
    return tuple(str(k) for k in record.path)


def is_key_dtype(dtype: Any) -> bool:
    """Whether ``dtype`` is a typed PRNG key dtype (``key<fry>``)."""
    try:
        return bool(jnp.issubdtype(dtype, jax.dtypes.prng_key))
    except TypeError:  # pragma: no cover - exotic dtype objects
        return False


def _host(value: Any) -> np.ndarray:
    if is_key_dtype(getattr(value, "dtype", None)):
        value = jax.random.key_data(value)
    return np.asarray(jax.device_get(value))


def is_global(value: object) -> bool:
    """Whether ``value`` is a concrete array not fully addressable from this process.

    That is an array sharded over devices of several processes
    (``jax.distributed``): no process can read all of it.
    """
    return (
        isinstance(value, jax.Array)
        and not isinstance(value, jax.core.Tracer)
        and not value.is_fully_addressable
    )


# Per-shard statistics: n_bad, has_rel (ints), max_abs, max_rel (floats, -inf when
# there is nothing to take the max of). Combining two is sum / or / max / max, so
# the statistics of disjoint parts combine into those of the whole, exactly.
_Stats = tuple[int, bool, float, float]
_NO_STATS: _Stats = (0, False, -math.inf, -math.inf)


def _stats(xa: np.ndarray, ya: np.ndarray, rtol: float, atol: float) -> _Stats:
    """Differing elements, the largest ``|x - y|`` and ``|x - y| / |x|`` among them."""
    if xa.size == 0 or np.array_equal(xa, ya):  # the common case, without copies
        return _NO_STATS
    inexact = bool(jnp.issubdtype(xa.dtype, jnp.inexact))
    wide = (
        np.complex128 if jnp.issubdtype(xa.dtype, jnp.complexfloating) else np.float64
    )
    xw, yw = xa.astype(wide), ya.astype(wide)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(xw - yw)
        if inexact:
            close = (diff <= atol + rtol * np.abs(xw)) | (xw == yw)
            close |= np.isnan(xw) & np.isnan(yw)
        else:
            close = xa == ya
    bad = ~close
    n_bad = int(np.count_nonzero(bad))
    if n_bad == 0:
        return _NO_STATS
    bad_diff = diff[bad]
    ref = np.abs(xw[bad])
    nonzero = ref != 0
    has_rel = bool(nonzero.any())
    max_rel = float(np.max(bad_diff[nonzero] / ref[nonzero])) if has_rel else -math.inf
    return n_bad, has_rel, float(np.max(bad_diff)), max_rel


def _combine(parts: Sequence[_Stats]) -> _Stats:
    if not parts:
        return _NO_STATS
    maxes = np.asarray([[p[2], p[3]] for p in parts], np.float64)
    top = np.max(maxes, axis=0)  # NaN anywhere stays NaN, as in one np.max
    return (
        sum(p[0] for p in parts),
        any(p[1] for p in parts),
        float(top[0]),
        float(top[1]),
    )


def _pack(stats: _Stats) -> np.ndarray:
    ints = np.asarray([stats[0], int(stats[1])], np.int64).tobytes()
    floats = np.asarray([stats[2], stats[3]], np.float64).tobytes()
    return np.frombuffer(ints + floats, np.uint8)


def _unpack(packed: np.ndarray) -> _Stats:
    raw = np.ascontiguousarray(packed, np.uint8).tobytes()
    ints = np.frombuffer(raw[:16], np.int64)
    floats = np.frombuffer(raw[16:], np.float64)
    return int(ints[0]), bool(ints[1]), float(floats[0]), float(floats[1])


def _same_layout(x: jax.Array, y: Any) -> jax.Array:
    """``y`` laid out like the global array ``x``, without gathering either."""
    sharding = x.sharding
    if isinstance(y, jax.Array) and not is_global(y):
        y = np.asarray(jax.device_get(y))  # a local copy: the same on every process
    if not isinstance(y, jax.Array):
        host = np.asarray(y)
        return jax.make_array_from_callback(x.shape, sharding, lambda i: host[i])
    if y.sharding.is_equivalent_to(sharding, x.ndim):
        return y
    out: jax.Array = jax.jit(lambda v: v, out_shardings=sharding)(y)
    return out


def _global_stats(x: Any, y: Any, rtol: float, atol: float) -> _Stats:
    """:func:`_stats` of two arrays sharded over several processes.

    Each process reads only its own shards (one replica of each), then the
    processes exchange their few statistics (``process_allgather`` of 32 bytes),
    so every process returns the same figures as a single-host comparison, and
    no array is gathered to one host.
    """
    if is_key_dtype(getattr(x, "dtype", None)):
        x, y = jax.random.key_data(x), jax.random.key_data(y)
    if is_global(x):
        y = _same_layout(x, y)
    else:
        x = _same_layout(y, x)
    local = [
        _stats(np.asarray(xs.data), np.asarray(ys.data), rtol, atol)
        for xs, ys in zip(x.addressable_shards, y.addressable_shards, strict=True)
        if xs.replica_id == 0
    ]
    gathered = multihost_utils.process_allgather(_pack(_combine(local)))
    return _combine([_unpack(row) for row in np.asarray(gathered)])


def value_entry(
    path: str, x: Any, y: Any, *, rtol: float, atol: float
) -> DiffEntry | None:
    """Compare two same-shape, same-dtype values; a ``"value"`` entry or ``None``.

    Floating and complex values are close when ``|x - y| <= atol + rtol * |x|``
    (``x`` is the reference); NaN matches NaN and equal infinities match.
    Integers, booleans and PRNG keys (their key data) must be equal exactly.
    Arrays sharded over several processes are compared shard by shard where
    they live, and every process gets the same entry.
    """
    if is_global(x) or is_global(y):
        n_bad, has_rel, max_abs, max_rel = _global_stats(x, y, rtol, atol)
    else:
        n_bad, has_rel, max_abs, max_rel = _stats(_host(x), _host(y), rtol, atol)
    if n_bad == 0:
        return None
    shape = np.shape(x)
    if is_key_dtype(getattr(x, "dtype", None)):  # compared as key data
        shape = jax.eval_shape(jax.random.key_data, x).shape
    n = math.prod(shape)
    inexact = bool(jnp.issubdtype(jnp.result_type(x), jnp.inexact))
    return DiffEntry(
        path=path,
        problem="value",
        a="values",
        b="values",
        message=(
            f"{path}: {n_bad} of {n} element(s) differ"
            + (f" beyond rtol={rtol:g}, atol={atol:g}" if inexact else "")
            + f" (max |a-b| = {max_abs:.3g})."
        ),
        n_different=n_bad,
        n_elements=n,
        max_abs_diff=max_abs,
        max_rel_diff=max_rel if has_rel else None,
    )


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
    order = {k: i for i, k in enumerate(sorted(set(a_map) | set(b_map)))}
    entries: list[tuple[int, DiffEntry]] = []

    def add(k: tuple[str, ...], problem: Problem, x: str, y: str) -> None:
        p = "/".join(k)
        msg = _sentence(p, problem, x, y, a_label, b_label)
        entries.append((order[k], DiffEntry(p, problem, x, y, msg)))

    common = [k for k in a_map if k in b_map]
    kinds_compared = bool(common) and all(
        a_map[k].is_variable and b_map[k].is_variable for k in common
    )
    all_values = compare_values
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
        entry = value_entry("/".join(k), ra.array, vb, rtol=rtol, atol=atol)
        if entry is not None:
            entries.append((order[k], entry))
    for k, rb in b_map.items():
        if k not in a_map:
            add(k, "extra", "-", _describe(rb))
    entries.sort(key=lambda pair: pair[0])
    all_notes = list(notes)
    if not kinds_compared and common:
        all_notes.append(
            "Variable types were not compared: at least one side does not record "
            "them (checkpoints and plain mappings hold arrays only)."
        )
    if not all_values:
        all_notes.append(
            "Values were not compared for every path: only structure, shapes and "
            "dtypes were checked where a side is abstract or is metadata."
        )
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
        notes=tuple(all_notes),
    )


def _sentence(
    path: str, problem: Problem, x: str, y: str, a_label: str, b_label: str
) -> str:
    """The message of a structural entry: ``x`` is what ``a`` holds, ``y`` ``b``."""
    if problem == "missing":
        return f"{path}: in {a_label} ({x}), not in {b_label}."
    if problem == "extra":
        return f"{path}: in {b_label} ({y}), not in {a_label}."
    what = {"variable-type": "", "shape": "shape ", "dtype": "dtype "}[problem]
    return f"{path}: {what}{x} in {a_label}, {y} in {b_label}."


def _describe(record: VarRecord) -> str:
    kind = f"{record.kind_name} " if record.is_variable else ""
    return f"{kind}{record.dtype_name}{list(record.shape)}"


@typechecked
def compare_states(
    a: Comparable,
    b: Comparable,
    /,
    *,
    rtol: Tolerance = 0.0,
    atol: Tolerance = 0.0,
) -> StateDiff:
    """Compare two states path by path and report every difference.

    For each path: present in both (else ``"missing"`` / ``"extra"``), same
    variable type (when both sides record one), same shape, same dtype and, when
    both sides hold values, the same values within the tolerance. Nothing stops
    at the first difference. Exact by default (``rtol = atol = 0``): a restore
    or a rebuild from the same seed must match bitwise; pass tolerances to
    compare across devices or precisions. An abstract side (``nnx.eval_shape``)
    limits the comparison to structure, shapes and dtypes, and the result says
    so (``values_compared`` is ``False``). Neither side is modified; values are
    copied to the host one leaf at a time. Arrays sharded over several
    processes (``jax.distributed``) are compared where their shards live: each
    process reads its own shards and the processes exchange a few numbers per
    leaf, so every process gets the same diff and no array is gathered. Every
    process must then call ``compare_states`` on the same pair, as for any
    multi-process JAX computation.

    Args:
        a: The reference: an ``nnx.Module`` (or other graph node), an
            ``nnx.State``, concrete or abstract, or a nested mapping of arrays
            (``state.to_pure_dict()``).
        b: The state to check, of the same forms.
        rtol: Relative tolerance for floating values, ``>= 0``.
        atol: Absolute tolerance for floating values, ``>= 0``.

    Returns:
        A :class:`StateDiff`; ``diff.equal`` is ``True`` when nothing differs.

    Raises:
        TypeError: If ``a`` or ``b`` is not a module, state or mapping, holds a
            leaf that is not a numeric array (``None``, a string, an object; the
            message names the side and the path), or a tolerance is not a float.
        ValueError: If a tolerance is negative or not finite.

    Example:
        >>> from flax import nnx
        >>> a = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
        >>> compare_states(a, nnx.Linear(2, 3, rngs=nnx.Rngs(0))).equal
        True
        >>> diff = compare_states(a, nnx.Linear(2, 3, rngs=nnx.Rngs(1)))
        >>> [(e.path, e.problem, e.n_different) for e in diff.entries]
        [('kernel', 'value', 6)]
    """
    rtol_f = check_tolerance(rtol, "rtol")
    atol_f = check_tolerance(atol, "atol")
    return diff_records(
        records_of(a, "a"), records_of(b, "b"), rtol=rtol_f, atol=atol_f
    )


@typechecked
def check_reproducible_init(
    factory: Callable[[nnx.Rngs], nnx.Module], seed: IntLike
) -> StateDiff:
    """Build a model twice, each from a fresh ``nnx.Rngs(seed)``, and diff the states.

    Compares the full states (every parameter, batch statistic and RNG
    variable), not one forward output: a zero input would hide every kernel
    difference. The comparison is exact. It catches factories that do not use
    the ``rngs`` they are given: a closure over one shared ``nnx.Rngs`` advances
    between the builds, so the second build gets different keys. A seeded build
    recreates initial values only, never trained ones.

    Args:
        factory: A callable taking ``rngs`` and returning an ``nnx.Module``.
        seed: An integer-valued seed, ``>= 0``.

    Returns:
        The :class:`StateDiff` of build 1 against build 2; ``.equal`` means the
        initialization is reproducible.

    Raises:
        TypeError: If ``seed`` is not an integer-valued scalar or ``factory``
            does not return an ``nnx.Module`` of numeric arrays.
        ValueError: If ``seed`` is negative or non-integral.

    Example:
        >>> from flax import nnx
        >>> check_reproducible_init(lambda rngs: nnx.Linear(2, 3, rngs=rngs), 0).equal
        True
        >>> shared = nnx.Rngs(0)  # the classic mistake: one advancing Rngs
        >>> def factory(rngs):
        ...     return nnx.Linear(2, 3, rngs=shared)  # ignores the rngs it is given
        >>> diff = check_reproducible_init(factory, 0)
        >>> diff.equal, diff.paths
        (False, ('kernel',))
    """
    key = as_int(seed, "seed", minimum=0)
    check_takes_rngs(factory)
    builds = []
    for _ in range(2):
        module = factory(nnx.Rngs(key))
        if not isinstance(module, nnx.Module):
            raise TypeError(
                f"`factory` must return an nnx.Module, got {type(module).__name__}. "
                "Pass a callable such as `lambda rngs: nnx.Linear(3, 2, rngs=rngs)`."
            )
        check_leaves(nnx.state(module), "factory", "must build numeric arrays")
        builds.append(module)
    return diff_records(
        inventory(builds[0]),
        inventory(builds[1]),
        rtol=0.0,
        atol=0.0,
        a_label="build 1",
        b_label="build 2",
    )

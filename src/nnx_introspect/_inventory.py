"""The variable inventory: one immutable record per state leaf.

Every report in nnx-introspect is a small function of an inventory, and this is
the only module (with ``_nnx.py``) that walks an NNX state. It reads shapes,
dtypes and metadata; it never copies, converts or mutates a value.
"""

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nnx_introspect import _nnx
from nnx_introspect._typing import ArgumentError

__all__ = [
    "VarRecord",
    "dtype_nbytes",
    "inventory",
    "metadata_inventory",
    "path_sort_key",
    "path_str",
    "require_values",
]

Path = tuple[Any, ...]


@dataclasses.dataclass(frozen=True, eq=False)
class VarRecord:
    """One array leaf of an NNX state.

    Attributes:
        path: The keys leading to the leaf, as ``nnx.to_flat_state`` gives them.
        kind: The variable type (``nnx.Param``, ``nnx.BatchStat``, ...) or, for a
            raw array attribute, the array's own type.
        shape: The global shape.
        dtype: The dtype (PRNG key dtypes included).
        size: Number of elements, an exact Python ``int``.
        nbytes: Packed bytes: ``ceil(size * bits / 8)`` (int4 is half a byte).
        sharding: The NNX sharding annotation (``out_sharding``) or ``None``.
        array: The array for a concrete state, ``None`` for an abstract one.

    Example:
        >>> from flax import nnx
        >>> from nnx_introspect._inventory import inventory
        >>> record = inventory(nnx.Linear(4, 3, rngs=nnx.Rngs(0)))[1]
        >>> record.path_str, record.kind_name, record.shape, record.size, record.nbytes
        ('kernel', 'Param', (4, 3), 12, 48)
    """

    path: Path
    kind: type
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    size: int
    nbytes: int
    sharding: Any
    array: Any

    @property
    def path_str(self) -> str:
        """The path as its keys joined by ``/`` (``"l1/kernel"``)."""
        return path_str(self.path)

    @property
    def kind_name(self) -> str:
        """The variable type's name (``"Param"``)."""
        return self.kind.__name__

    @property
    def is_variable(self) -> bool:
        """Whether the leaf is held by an ``nnx.Variable`` (not a raw array)."""
        return isinstance(self.kind, type) and issubclass(self.kind, nnx.Variable)

    @property
    def is_param(self) -> bool:
        """Whether the leaf is an ``nnx.Param`` (or subclass): a parameter."""
        return isinstance(self.kind, type) and issubclass(self.kind, nnx.Param)

    @property
    def dtype_name(self) -> str:
        """The dtype's name (``"float32"``, ``"key<fry>"``)."""
        return str(getattr(self.dtype, "name", self.dtype))

    @property
    def is_abstract(self) -> bool:
        """Whether the leaf is a shape-only placeholder (no value to read)."""
        return self.array is None


def require_values(
    records: tuple[VarRecord, ...], consequence: str, fix: str, name: str = "target"
) -> None:
    """Raise ``ValueError`` naming the first abstract record, if there is one.

    ``consequence`` completes "so ..." and ``fix`` says what to pass instead.
    """
    abstract = [r.path_str for r in records if r.array is None]
    if abstract:
        raise ArgumentError(
            name,
            f"`{name}` is abstract at {len(abstract)} leaf(s) (first: "
            f"{abstract[0]!r}), so {consequence}. {fix}",
        )


def path_sort_key(path: Path) -> tuple[tuple[int, int, str], ...]:
    """A key that orders paths naturally: ``layers/2`` before ``layers/10``.

    Keys compare one by one: integer keys, and strings of digits (a
    checkpoint's ``"10"``), by their value, before any other key; other keys
    by their text. Flax orders a model's state this way already; orbax
    metadata, whose keys are strings, and plain string sorting do not.

    Example:
        >>> paths = [("layers", "10"), ("layers", 2), ("layers", "1"), ("norm",)]
        >>> [path_str(p) for p in sorted(paths, key=path_sort_key)]
        ['layers/1', 'layers/2', 'layers/10', 'norm']
    """
    out = []
    for key in path:
        text = str(key)
        if isinstance(key, int) and not isinstance(key, bool):
            out.append((0, int(key), text))
        elif text.isdecimal() and text.isascii():
            out.append((0, int(text), text))
        else:
            out.append((1, 0, text))
    return tuple(out)


def path_str(path: Path) -> str:
    """Join path keys with ``/``, the way rules and reports write paths."""
    return "/".join(str(k) for k in path)


def dtype_nbytes(dtype: Any, size: int) -> int:
    """Exact packed bytes of ``size`` elements of ``dtype`` (sub-byte dtypes packed).

    PRNG key dtypes count their underlying key data (8 bytes for ``threefry``).
    """
    dt = np.dtype(dtype) if not _is_key_dtype(dtype) else dtype
    if _is_key_dtype(dt):
        return size * int(dt.itemsize)
    bits = int(jax.dtypes.itemsize_bits(dt))
    return (size * bits + 7) // 8


def _is_key_dtype(dtype: Any) -> bool:
    try:
        return bool(jnp.issubdtype(dtype, jax.dtypes.prng_key))
    except TypeError:  # pragma: no cover - exotic dtype objects
        return False


def _shape_dtype(value: Any) -> tuple[tuple[int, ...], Any] | None:
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return None
    return tuple(int(d) for d in shape), dtype


def inventory(
    target: nnx.Pytree | nnx.State[Any, Any], filters: tuple[Any, ...] = ()
) -> tuple[VarRecord, ...]:
    """The records of ``target``'s state leaves matching any of ``filters``.

    In ``jax.tree.leaves(nnx.state(target))`` order; shared variables once.
    Leaves without a shape (a Python scalar stored in a variable) are recorded
    with shape ``()`` and the dtype JAX would give them.
    """
    state = _nnx.select_state(target, filters)
    records: list[VarRecord] = []
    for path, leaf in _nnx.flat_state(state):
        kind: type = type(leaf)
        sharding = _nnx.variable_sharding(leaf)
        for sub, value in _nnx.iter_variable_leaves(leaf):
            sd = _shape_dtype(value)
            if sd is None:
                arr = np.asarray(value)
                shape, dtype = (
                    tuple(arr.shape),
                    jax.dtypes.canonicalize_dtype(arr.dtype),
                )
            else:
                shape, dtype = sd
            if not isinstance(leaf, nnx.Variable):
                kind = type(value)
            size = math.prod(shape)
            concrete = isinstance(value, jax.Array) or (
                sd is None or isinstance(value, np.ndarray | np.generic)
            )
            records.append(
                VarRecord(
                    path=path + sub,
                    kind=kind,
                    shape=shape,
                    dtype=dtype,
                    size=size,
                    nbytes=dtype_nbytes(dtype, size),
                    sharding=sharding,
                    array=value if concrete else None,
                )
            )
    return tuple(records)


def metadata_inventory(tree: Any) -> tuple[VarRecord, ...]:
    """The records of a metadata tree, such as an orbax checkpoint's, reading no value.

    Leaves are anything with ``shape`` and ``dtype`` (orbax ``ArrayMetadata``,
    ``jax.ShapeDtypeStruct``); ``kind`` is the leaf's own type, ``sharding`` its
    ``sharding`` attribute (orbax sharding metadata) and ``value`` is ``None``.
    Paths are the tree's keys, unchanged, in natural order
    (:func:`path_sort_key`: ``layers/2`` before ``layers/10``, as flax orders
    the model they were saved from), not ``jax.tree.leaves`` order, which sorts
    orbax's string keys as text.
    """
    records: list[VarRecord] = []
    for path, leaf in _nnx.flat_state_public(tree):
        shape = tuple(int(d) for d in (getattr(leaf, "shape", None) or ()))
        dtype = getattr(leaf, "dtype", None)
        dtype = np.dtype(object) if dtype is None else dtype
        size = math.prod(shape)
        records.append(
            VarRecord(
                path=path,
                kind=type(leaf),
                shape=shape,
                dtype=dtype,
                size=size,
                nbytes=dtype_nbytes(dtype, size) if dtype != np.dtype(object) else 0,
                sharding=getattr(leaf, "sharding", None),
                array=None,
            )
        )
    records.sort(key=lambda r: path_sort_key(r.path))
    return tuple(records)

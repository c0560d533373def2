"""Checkpoint checks with orbax: read the metadata, compare it, then restore.

A restore that fails on a missing key or a shape mismatch fails after reading
gigabytes. These functions read an orbax checkpoint's metadata (its tree,
shapes, dtypes and shardings; no array) and compare it per path with a model
before any restore, and restore into a model's abstract state to compare values.

Accepted layouts (detected from the metadata, reported as ``layout``):

- ``"nnx-state"``: an ``nnx.State`` saved as is, the Flax way:
  ``ocp.StandardCheckpointer().save(path, nnx.state(model))``. Orbax stores each
  variable's array under an extra ``value`` key, which is dropped for comparison.
- ``"pure-dict"``: nested mappings of arrays, such as ``nnx.to_pure_dict(state)``.

Orbax stores arrays, not NNX variable types, so a checkpoint cannot tell a
``Param`` from a ``BatchStat``; PRNG keys are stored (and compared) as their
``uint32`` key data; a Python number (``nnx.Param(2.5)``) is stored as a 64-bit
scalar and compared in the dtype JAX gives it on restore.

A damaged checkpoint is an error, never an empty one: every function first
checks that the files orbax wrote are whole (its JSON metadata parses, and every
index node and data file the array store references exists and is long enough)
and raises a ``ValueError`` naming ``path`` and the damaged file otherwise. A
checkpoint that really holds no array reads as an empty report.

A checkpoint saved by several ``jax.distributed`` processes reads the same way,
in any number of processes: each process wrote its shards to its own
``ocdbt.process_<i>/`` data files and ``array_metadatas/process_<i>``, and the
merged index (``manifest.ocdbt``) names every data file, so damage to any
process's files is found and named.
"""

import dataclasses
import json
import os
import pathlib
import re
from typing import Any, Literal

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from nnx_introspect._compare import (
    Comparable,
    StateDiff,
    Tolerance,
    check_tolerance,
    diff_records,
    is_key_dtype,
    records_of,
)
from nnx_introspect._inventory import VarRecord, metadata_inventory, require_values
from nnx_introspect._nnx import keypath_keys
from nnx_introspect._render import Report, Table, format_bytes
from nnx_introspect._typing import typechecked

__all__ = [
    "CheckpointLeaf",
    "CheckpointReport",
    "check_checkpoint",
    "checkpoint_report",
    "verify_restore",
]

PathLike = str | bytes | os.PathLike[str] | os.PathLike[bytes]
Layout = Literal["nnx-state", "pure-dict"]
Key = tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class CheckpointLeaf:
    """One array of a checkpoint, as its metadata describes it.

    Attributes:
        path: The array's path, keys joined by ``/`` (without the ``value`` key
            of the ``"nnx-state"`` layout).
        shape: The global shape.
        dtype: The stored dtype's name.
        size: Number of elements, an exact Python ``int``.
        nbytes: Packed bytes of the array (not of its compressed files).
        sharding: How it was sharded when saved (``"P(None, 'model') on
            model=8"``, ``"single device cpu:0"``), or ``"-"`` if not recorded.

    Example:
        >>> import tempfile, pathlib
        >>> import orbax.checkpoint as ocp
        >>> from flax import nnx
        >>> from nnx_introspect import checkpoint_report
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "ckpt"
        >>> with ocp.StandardCheckpointer() as checkpointer:
        ...     checkpointer.save(path, nnx.state(nnx.Linear(4, 3, rngs=nnx.Rngs(0))))
        >>> leaf = checkpoint_report(path).leaves[1]
        >>> leaf.path, leaf.shape, leaf.dtype, leaf.nbytes
        ('kernel', (4, 3), 'float32', 48)
    """

    path: str
    shape: tuple[int, ...]
    dtype: str
    size: int
    nbytes: int
    sharding: str


@dataclasses.dataclass(frozen=True)
class CheckpointReport(Report):
    """The contents of an orbax checkpoint, read from its metadata alone.

    Attributes:
        path: The checkpoint directory.
        layout: ``"nnx-state"`` or ``"pure-dict"`` (see the module docs).
        leaves: One :class:`CheckpointLeaf` per stored array, in tree order.

    Example:
        >>> import tempfile, pathlib
        >>> import orbax.checkpoint as ocp
        >>> from flax import nnx
        >>> from nnx_introspect import checkpoint_report
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "ckpt"
        >>> with ocp.StandardCheckpointer() as checkpointer:
        ...     checkpointer.save(path, nnx.state(nnx.Linear(4, 3, rngs=nnx.Rngs(0))))
        >>> report = checkpoint_report(path)
        >>> report.layout, [leaf.path for leaf in report.leaves]
        ('nnx-state', ['bias', 'kernel'])
    """

    SCHEMA = "nnx-introspect/checkpoint"
    SCHEMA_VERSION = 1

    path: str
    layout: Layout
    leaves: tuple[CheckpointLeaf, ...]

    @property
    def n_elements(self) -> int:
        """Elements stored, over every array."""
        return sum(leaf.size for leaf in self.leaves)

    @property
    def nbytes(self) -> int:
        """Packed bytes of every array (uncompressed)."""
        return sum(leaf.nbytes for leaf in self.leaves)

    def table(self) -> Table:
        """The checkpoint as a :class:`~nnx_introspect.Table`."""
        rows = tuple(
            (
                leaf.path,
                str(leaf.shape),
                leaf.dtype,
                f"{leaf.size:,}",
                format_bytes(leaf.nbytes),
                leaf.sharding,
            )
            for leaf in self.leaves
        )
        totals = (
            (
                f"{len(self.leaves)} arrays",
                "",
                "",
                f"{self.n_elements:,}",
                format_bytes(self.nbytes),
                "",
            ),
        )
        return Table(
            title=f"Checkpoint {self.path} ({self.layout} layout)",
            columns=("path", "shape", "dtype", "elements", "bytes", "sharding"),
            rows=rows,
            totals=totals,
            notes=(
                ("Read from metadata only: no array was loaded.",)
                if self.leaves
                else (
                    "The checkpoint is empty: its metadata is intact and lists no "
                    "array (a damaged checkpoint raises an error instead).",
                )
            ),
        )

    def json_data(self) -> dict[str, Any]:
        """Exact figures for JSON output."""
        return {
            "path": self.path,
            "layout": self.layout,
            "n_arrays": len(self.leaves),
            "n_elements": self.n_elements,
            "nbytes": self.nbytes,
            "leaves": [
                {**dataclasses.asdict(leaf), "shape": list(leaf.shape)}
                for leaf in self.leaves
            ],
        }


@dataclasses.dataclass(frozen=True)
class _Checkpoint:
    path: pathlib.Path
    tree: Any
    layout: Layout
    records: tuple[VarRecord, ...]  # paths without the nnx-state "value" key
    # Array-store key (leaf name, field and chunk: "embed" "." "value/1.0") -> the
    # data file holding it, relative to `path` ("ocdbt.process_1/d/..."); values
    # inlined in the index are absent.
    data_files: tuple[tuple[str, str], ...] = ()


class CheckpointNotFoundError(FileNotFoundError, ValueError):
    """A checkpoint ``path`` that does not exist.

    Both a ``FileNotFoundError`` (what it is) and a ``ValueError`` (a bad value
    of ``path``, like every other bad argument).
    """


def _as_path(path: PathLike) -> pathlib.Path:
    """``path`` as a :class:`pathlib.Path`, or the error a non-path deserves.

    Accepts ``str``, ``bytes`` and ``os.PathLike`` (of either). Orbax and
    tensorstore open UTF-8 paths only, so a name that is not valid UTF-8 (a
    byte such as ``0xff``, which Python keeps as a surrogate escape) is refused
    here rather than deep inside tensorstore.
    """
    try:
        text = os.fsdecode(path)
    except TypeError as error:  # an os.PathLike whose __fspath__ is no path
        raise TypeError(
            f"`path` must be a str, bytes or os.PathLike path to a checkpoint "
            f"directory, got {path!r} ({error})."
        ) from error
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raw = os.fsencode(text)
        bad = raw[len(text[: error.start].encode("utf-8", "surrogateescape")) :][:1]
        raise ValueError(
            f"`path` {raw!r} is not a UTF-8 path (byte 0x{bad.hex()} is not "
            "UTF-8), and orbax and tensorstore open UTF-8 paths only. Rename the "
            "directory (or the directory holding it) to a UTF-8 name."
        ) from error
    return pathlib.Path(text)


def resolve_checkpoint(path: PathLike) -> pathlib.Path:
    """The absolute checkpoint directory, or the error a bad ``path`` deserves.

    Raises:
        FileNotFoundError: If ``path`` does not exist (also a ``ValueError``).
        TypeError: If ``path`` is not a str, bytes or ``os.PathLike`` path.
        ValueError: If ``path`` is not UTF-8, or has no orbax ``_METADATA``
            file (the message lists the checkpoints found one or two levels
            below, such as ``7/default``).
    """
    given = _as_path(path)
    p = given.expanduser().absolute()
    if not p.exists():
        raise CheckpointNotFoundError(
            f"`path` {str(given)!r} does not exist. Pass the directory an orbax "
            "checkpointer saved to (the one holding a `_METADATA` file)."
        )
    if not (p / "_METADATA").is_file():
        found = sorted(
            str(m.parent.relative_to(p))
            for pattern in ("*/_METADATA", "*/*/_METADATA")
            for m in p.glob(pattern)
        )
        hint = (
            f" It contains checkpoints at: {', '.join(found[:5])}; pass one of those."
            if found
            else " Pass the directory given to `save` (it holds `_METADATA`)."
        )
        raise ValueError(
            f"`path` {str(given)!r} is not an orbax PyTree checkpoint: it has no "
            f"`_METADATA` file.{hint}"
        )
    return p


def _damaged(p: pathlib.Path, what: str) -> ValueError:
    """The error for a checkpoint whose files cannot be read as orbax wrote them."""
    return ValueError(
        f"`path` {str(p)!r} is a damaged orbax checkpoint, not an empty one: {what}. "
        "Restore it from a backup or save it again."
    )


def _one_line(text: str, p: pathlib.Path) -> str:
    """An exception text on one line, without tensorstore's spec dump."""
    text = text.split(" [tensorstore_spec=")[0]
    text = text.split("See full TensorStore details")[0]
    return " ".join(text.replace(f"{p}/", "./").split()).rstrip(".")


def _load_json(p: pathlib.Path, rel: str) -> Any:
    try:
        return json.loads((p / rel).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:  # JSONDecodeError, UnicodeDecodeError
        raise _damaged(
            p, f"its `{rel}` file is not valid JSON ({_one_line(str(error), p)})"
        ) from error


# Value types orbax keeps in the array store (strings go to `_strings.json`).
_IN_STORE = frozenset({"jax.Array", "np.ndarray", "scalar"})


def _check_json_files(p: pathlib.Path) -> tuple[int, set[str], bool]:
    """Validate the JSON files orbax wrote.

    Returns the number of saved leaves, the names orbax gives the arrays in its
    store (keys joined by ``.``) and whether the store is OCDBT.

    ``_METADATA`` must hold orbax's tree metadata; ``_sharding``,
    ``_strings.json``, ``_CHECKPOINT_METADATA`` and ``array_metadatas/`` are
    optional (older orbax versions do not write them) but must parse when present.
    """
    meta = _load_json(p, "_METADATA")
    tree = meta.get("tree_metadata") if isinstance(meta, dict) else None
    if not isinstance(tree, dict) or not all(
        isinstance(v, dict) and isinstance(v.get("value_metadata"), dict)
        for v in tree.values()
    ):
        raise _damaged(
            p,
            "its `_METADATA` file is JSON but not orbax tree metadata (it has no "
            "`tree_metadata` mapping of saved leaves)",
        )
    n_stored = sum(
        not v["value_metadata"].get("skip_deserialize") for v in tree.values()
    )
    in_store = {
        ".".join(str(k.get("key")) for k in v.get("key_metadata", []))
        for v in tree.values()
        if v["value_metadata"].get("value_type") in _IN_STORE
        and not v["value_metadata"].get("skip_deserialize")
        and all(isinstance(k, dict) for k in v.get("key_metadata", []))
    }
    use_ocdbt = meta.get("use_ocdbt")
    if not isinstance(use_ocdbt, bool):
        use_ocdbt = (p / "manifest.ocdbt").exists()
    for rel in ("_CHECKPOINT_METADATA", "_strings.json"):
        if (p / rel).exists():
            _load_json(p, rel)
    if (p / "_sharding").exists():
        sharding = _load_json(p, "_sharding")
        if not isinstance(sharding, dict) or not all(
            isinstance(v, str) for v in sharding.values()
        ):
            raise _damaged(p, "its `_sharding` file is not a mapping of shardings")
        for key, value in sharding.items():
            try:
                json.loads(value)
            except ValueError as error:
                raise _damaged(
                    p,
                    f"its `_sharding` file holds an unreadable sharding for "
                    f"{key!r} ({error})",
                ) from error
    if (p / "array_metadatas").is_dir():
        _check_array_metadatas(p)
    return n_stored, in_store, use_ocdbt


def _check_array_metadatas(p: pathlib.Path) -> None:
    """Every ``array_metadatas/process_<i>`` file, i = 0..n-1, parses."""
    files = {}
    for f in (p / "array_metadatas").iterdir():
        index = f.name.removeprefix("process_")
        if f.name.startswith("process_") and index.isdigit():
            files[int(index)] = f.name
    if not files:
        raise _damaged(
            p,
            "its `array_metadatas/` directory holds no `process_<i>` file (orbax "
            "writes one per process that saved arrays)",
        )
    missing = sorted(set(range(max(files) + 1)) - set(files))
    if missing:
        raise _damaged(
            p,
            f"`array_metadatas/process_{missing[0]}` is missing (found "
            f"{', '.join(files[i] for i in sorted(files))})",
        )
    for name in files.values():
        data = _load_json(p, f"array_metadatas/{name}")
        if not isinstance(data, dict) or not isinstance(
            data.get("array_metadatas"), list
        ):
            raise _damaged(
                p,
                f"its `array_metadatas/{name}` file is JSON but not orbax array "
                "metadata (no `array_metadatas` list)",
            )


def _location(location: str) -> tuple[str, int]:
    """The file and end byte an OCDBT location refers to.

    A location reads ``"<kind>:<base>:<file>:<offset>:<length>"``; the file is
    returned relative to the checkpoint directory.
    """
    rest = location.split(":", 1)[1]
    base, file_id, offset, length = rest.rsplit(":", 3)
    return base + file_id, int(offset) + int(length)


def _check_array_store(p: pathlib.Path, expected: set[str]) -> dict[str, str]:
    """Check that every file the OCDBT array store references is whole.

    Walks the store's B-tree from ``manifest.ocdbt``: every index node and every
    data file it references must exist and be long enough, and every array
    ``_METADATA`` lists (``expected``) must have keys in it. Reads the small
    index nodes only, never array data. Returns the data file of every key not
    inlined in the index (``ocdbt.process_<i>/d/...`` for the process that
    wrote it), to name the file when a restore finds its bytes damaged.
    """
    import tensorstore as ts  # deferred, as orbax

    if not (p / "manifest.ocdbt").is_file():
        raise _damaged(
            p, "its `manifest.ocdbt` file (the index of the array store) is missing"
        )
    holders: dict[str, set[str]] = {}
    ends: dict[str, int] = {}
    found: set[str] = set()
    data_files: dict[str, str] = {}

    def need(location: str, holder: str) -> str:
        rel, end = _location(location)
        ends[rel] = max(ends.get(rel, 0), end)
        holders.setdefault(rel, set()).add(holder)
        f = p / rel
        if not f.is_file():
            raise _damaged(p, f"`{rel}` ({_held(holders[rel])}) is missing")
        size = f.stat().st_size
        if size < ends[rel]:
            raise _damaged(
                p,
                f"`{rel}` ({_held(holders[rel])}) is truncated: {size} bytes, the "
                f"array store references {ends[rel]}",
            )
        return location

    try:
        base = ts.KvStore.open({"driver": "file", "path": f"{p}/"}).result()
        manifest = ts.ocdbt.dump(base).result()
        versions = manifest.get("versions") or []
        root = versions[-1].get("root", {}).get("location") if versions else None
        pending = [need(root, "the array index")] if root else []
        while pending:
            node = ts.ocdbt.dump(base, pending.pop()).result()
            for entry in node.get("entries", []):
                key = bytes(entry.get("key", b"")).decode("utf-8", "replace")
                name = key.split("/")[0]
                found.add(name)
                for value in entry.values():
                    if isinstance(value, str) and value.startswith("btreenode:"):
                        pending.append(need(value, "the array index"))
                    elif isinstance(value, str) and value.startswith("value:"):
                        need(value, f"data of `{name}`")
                        data_files[key] = _location(value)[0]
    except ValueError as error:
        if str(error).startswith("`path`"):
            raise
        raise _damaged(p, _store_error(error, p)) from error
    except Exception as error:  # tensorstore raises bare exceptions too
        raise _damaged(p, _store_error(error, p)) from error
    missing = sorted(expected - found)
    if missing and expected & found:  # names as orbax gives them, yet some absent
        shown = ", ".join(f"`{m}`" for m in missing[:3])
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise _damaged(
            p,
            f"`_METADATA` lists {shown}{more}, which the array store "
            "(`manifest.ocdbt`) does not hold",
        )
    return data_files


def _held(holders: set[str]) -> str:
    names = sorted(holders)
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return "holds " + ", ".join(names[:3]) + more


def _chain(error: BaseException) -> list[str]:
    """The texts of ``error`` and the errors it was raised from, outermost first."""
    texts: list[str] = []
    seen: BaseException | None = error
    while seen is not None and len(texts) < 8:
        texts.append(str(seen))
        seen = seen.__cause__ or seen.__context__
    return texts


def _is_read_error(error: BaseException) -> bool:
    """Whether ``error`` is orbax/tensorstore failing to read stored bytes."""
    return any(
        "Encountered error while reading array index" in text or 'local file "' in text
        for text in _chain(error)
    )


def _store_error(
    error: BaseException,
    p: pathlib.Path,
    data_files: tuple[tuple[str, str], ...] = (),
) -> str:
    """What an orbax or tensorstore read error says is damaged, on one line.

    ``data_files`` maps array-store keys to their data files: a key the error
    names is followed by its file (in a multi-process checkpoint, the file of
    the process that wrote that chunk).
    """
    texts = _chain(error)
    for text in reversed(texts):  # the innermost error names the file
        text = text.split(" [tensorstore_spec=")[0]
        files = [
            f
            for f in re.findall(r'local file "([^"]*)"', text)
            if f and not f.endswith("/")
        ]
        key = re.search(r'"(([^"/]+)/([^"]*))" in OCDBT', text)
        where = ""
        if files:
            part = f"`{os.path.relpath(files[-1], p)}`"
        elif key:
            part = f"the data of `{key.group(2)}`"
            data_file = dict(data_files).get(key.group(1))
            if data_file is not None:
                where = f": chunk `{key.group(3)}`, stored in `{data_file}`"
        else:
            continue
        reason = _one_line(text.rsplit('": ', 1)[-1], p)
        return f"{part} could not be read ({reason}){where}"
    return f"its array store could not be read ({_one_line(texts[-1], p)})"


def _read(path: PathLike) -> _Checkpoint:
    import orbax.checkpoint as ocp  # deferred: orbax is slow to import

    p = resolve_checkpoint(path)
    n_stored, in_store, use_ocdbt = _check_json_files(p)
    data_files = _check_array_store(p, in_store) if use_ocdbt and in_store else {}
    handler = ocp.PyTreeCheckpointHandler()
    try:
        meta = handler.metadata(p)
    except Exception as error:  # orbax/tensorstore: ValueError, KeyError, bare
        raise _damaged(p, _store_error(error, p)) from error
    finally:
        handler.close()
    tree = getattr(meta, "tree", meta)
    raw = metadata_inventory(tree) if tree is not None else ()
    if len(raw) != n_stored:
        raise _damaged(
            p,
            f"`_METADATA` lists {n_stored} saved leaves but orbax read the "
            f"metadata of {len(raw)}",
        )
    state_layout = bool(raw) and all(
        len(r.path) >= 2 and str(r.path[-1]) == "value" for r in raw
    )
    records = tuple(
        dataclasses.replace(r, path=r.path[:-1]) if state_layout else r for r in raw
    )
    return _Checkpoint(
        path=p,
        tree=tree,
        layout="nnx-state" if state_layout else "pure-dict",
        records=records,
        data_files=tuple(sorted(data_files.items())),
    )


def _key(path: tuple[Any, ...]) -> Key:
    return tuple(str(k) for k in path)


def _sharding_str(meta: Any) -> str:
    if meta is None:
        return "-"
    spec = getattr(meta, "partition_spec", None)
    if spec is not None:
        # Orbax keeps the mesh shape as a NumPy array: never test its truth.
        names = getattr(meta, "axis_names", None)
        sizes = getattr(meta, "shape", None)
        mesh = ", ".join(
            f"{n}={int(s)}"
            for n, s in zip(
                () if names is None else names,
                () if sizes is None else sizes,
                strict=False,
            )
        )
        return f"{_spec_str(tuple(spec))} on {mesh}"
    device = getattr(meta, "device_str", None)
    if device is not None:
        return f"single device {device}"
    return type(meta).__name__  # pragma: no cover - other sharding metadata


def _spec_str(spec: tuple[Any, ...]) -> str:
    """``P(...)`` as JAX and the mesh planner write it (orbax stores lists)."""
    return (
        "P("
        + ", ".join(repr(tuple(a) if isinstance(a, list) else a) for a in spec)
        + ")"
    )


def _normalize_spec(spec: tuple[Any, ...]) -> tuple[Any, ...]:
    out = [tuple(a) if isinstance(a, list) else a for a in spec]
    while out and out[-1] is None:
        out.pop()
    return tuple(out)


def _target_spec(record: VarRecord) -> tuple[Any, ...] | None:
    sharding = record.sharding
    if sharding is None and isinstance(
        getattr(record.array, "sharding", None), NamedSharding
    ):
        sharding = record.array.sharding
    if isinstance(sharding, NamedSharding):
        sharding = sharding.spec
    if isinstance(sharding, PartitionSpec | tuple | list):
        return _normalize_spec(tuple(sharding))
    return None


def _as_stored(record: VarRecord) -> VarRecord:
    """A PRNG key record as orbax stores it: its ``uint32`` key data."""
    if not is_key_dtype(record.dtype):
        return record
    data = jax.eval_shape(
        jax.random.key_data, jax.ShapeDtypeStruct(record.shape, record.dtype)
    )
    shape = tuple(int(d) for d in data.shape)
    return dataclasses.replace(record, shape=shape, dtype=data.dtype)


def _is_number(value: Any) -> bool:
    """Whether ``value`` is a Python number (``2.5``, ``7``), not a NumPy scalar."""
    return isinstance(value, bool | int | float | complex) and not isinstance(
        value, np.generic
    )


def _stored_number(record: VarRecord) -> bool:
    """Whether orbax stored this checkpoint leaf from a Python number."""
    import orbax.checkpoint as ocp  # deferred: orbax is slow to import

    return isinstance(record.kind, type) and issubclass(
        record.kind, ocp.metadata.ScalarMetadata
    )


def _as_restored(record: VarRecord) -> VarRecord:
    """A checkpoint record with the dtype a restore gives it.

    Orbax stores a Python number as ``np.asarray(number)``: ``float64`` or
    ``int64`` whatever JAX's default. A Python number is weakly typed in JAX,
    which holds it (and restores it) in its default dtype: ``float32`` /
    ``int32`` unless ``jax_enable_x64``. Arrays keep their stored dtype.
    """
    if not _stored_number(record):
        return record
    return dataclasses.replace(
        record, dtype=jax.dtypes.canonicalize_dtype(record.dtype)
    )


def _notes(ckpt: _Checkpoint, target: tuple[VarRecord, ...]) -> list[str]:
    notes = [f"Checkpoint layout: {ckpt.layout}."]
    if any(is_key_dtype(r.dtype) for r in target):
        notes.append(
            "PRNG keys are compared as their uint32 key data, as orbax stores them."
        )
    numbers = [r.path_str for r in ckpt.records if _stored_number(r)]
    if numbers:
        shown = ", ".join(numbers[:3]) + (" ..." if len(numbers) > 3 else "")
        notes.append(
            f"Python numbers ({shown}) are stored by orbax as 64-bit scalars and "
            "compared in the dtype JAX gives them on restore "
            f"({jax.dtypes.canonicalize_dtype(np.float64).name} for a float)."
        )
    saved = {_key(r.path): r for r in ckpt.records}
    for record in target:
        spec = _target_spec(record)
        stored = saved.get(_key(record.path))
        stored_spec = getattr(getattr(stored, "sharding", None), "partition_spec", None)
        if spec is None or stored_spec is None:
            continue
        if _normalize_spec(tuple(stored_spec)) != spec:
            notes.append(
                f"{record.path_str}: saved sharded as {_spec_str(tuple(stored_spec))}, "
                f"the target expects {_spec_str(spec)}; orbax reshards on restore."
            )
    return notes


def _check(
    path: PathLike, raw: tuple[VarRecord, ...]
) -> tuple[_Checkpoint, tuple[VarRecord, ...], list[str], StateDiff]:
    ckpt = _read(path)
    records = tuple(_as_stored(r) for r in raw)
    notes = _notes(ckpt, raw)
    diff = diff_records(
        records,
        tuple(_as_restored(r) for r in ckpt.records),
        rtol=0.0,
        atol=0.0,
        a_label="target",
        b_label="checkpoint",
        compare_values=False,
        notes=notes,
    )
    return ckpt, records, notes, diff


@typechecked
def checkpoint_report(path: PathLike, /) -> CheckpointReport:
    """Describe an orbax checkpoint from its metadata, without loading any array.

    Reads the tree, shapes, dtypes and save-time shardings that orbax records
    beside the data, so a checkpoint of any size is described in milliseconds
    and nothing is allocated on any device.

    Args:
        path: The checkpoint directory (the one passed to ``save``; it holds
            ``_METADATA``).

    Returns:
        A :class:`CheckpointReport`.

    Raises:
        FileNotFoundError: If ``path`` does not exist (also a ``ValueError``).
        TypeError: If ``path`` is not a ``str``, ``bytes`` or ``os.PathLike``.
        ValueError: If ``path`` is not an orbax PyTree checkpoint (the message
            lists checkpoints found inside it, such as a step's ``default``),
            is not UTF-8, or is damaged: the message names the damaged file. A
            checkpoint that really holds no array gives a report with no leaves.

    Example:
        >>> import tempfile, pathlib
        >>> import orbax.checkpoint as ocp
        >>> from flax import nnx
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "ckpt"
        >>> with ocp.StandardCheckpointer() as checkpointer:
        ...     checkpointer.save(path, nnx.state(nnx.Linear(2, 3, rngs=nnx.Rngs(0))))
        >>> report = checkpoint_report(path)
        >>> report.layout, [(leaf.path, leaf.shape) for leaf in report.leaves]
        ('nnx-state', [('bias', (3,)), ('kernel', (2, 3))])
    """
    ckpt = _read(path)
    return CheckpointReport(
        path=str(ckpt.path),
        layout=ckpt.layout,
        leaves=tuple(
            CheckpointLeaf(
                path=r.path_str,
                shape=r.shape,
                dtype=str(getattr(r.dtype, "name", r.dtype)),
                size=r.size,
                nbytes=r.nbytes,
                sharding=_sharding_str(r.sharding),
            )
            for r in ckpt.records
        ),
    )


@typechecked
def check_checkpoint(path: PathLike, target: Comparable, /) -> StateDiff:
    """Compare a checkpoint's metadata with a model per path, before any restore.

    Reports every path the target has and the checkpoint lacks (``"missing"``),
    every stored array the target lacks (``"extra"``), and every shape or dtype
    mismatch, reading metadata only: no array is loaded or allocated, so an
    abstract target (``nnx.eval_shape``) of any size works. Values and variable
    types are not compared (the diff says so): use :func:`verify_restore` for
    values. Save-time shardings that differ from the target's annotations are
    listed in the notes; they do not fail the check, as orbax reshards. A
    Python number saved from a variable (``nnx.Param(2.5)``; orbax stores it as
    a 64-bit scalar) is compared in the dtype JAX gives it, as a restore does.

    Args:
        path: The checkpoint directory.
        target: The model (concrete or abstract), ``nnx.State`` or pure dict you
            mean to restore into; the reference side (``a``) of the diff.

    Returns:
        A :class:`StateDiff` of target against checkpoint; ``.equal`` means a
        restore into ``target`` will find every array with the right shape and
        dtype.

    Raises:
        FileNotFoundError: If ``path`` does not exist (also a ``ValueError``).
        TypeError: If ``path`` is not a ``str``, ``bytes`` or ``os.PathLike``.
        ValueError: If ``path`` is not an orbax PyTree checkpoint, is not
            UTF-8, or is damaged (the message names the damaged file).

    Example:
        >>> import tempfile, pathlib
        >>> import orbax.checkpoint as ocp
        >>> from flax import nnx
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "ckpt"
        >>> with ocp.StandardCheckpointer() as checkpointer:
        ...     checkpointer.save(path, nnx.state(nnx.Linear(2, 3, rngs=nnx.Rngs(0))))
        >>> abstract = nnx.eval_shape(lambda: nnx.Linear(2, 4, rngs=nnx.Rngs(0)))
        >>> diff = check_checkpoint(path, abstract)
        >>> [(e.path, e.problem, e.a, e.b) for e in diff.entries]
        [('bias', 'shape', '(4,)', '(3,)'), ('kernel', 'shape', '(2, 4)', '(2, 3)')]
    """
    return _check(path, records_of(target, "target"))[3]


@typechecked
def verify_restore(
    path: PathLike,
    target: Comparable,
    /,
    *,
    rtol: Tolerance = 0.0,
    atol: Tolerance = 0.0,
) -> StateDiff:
    """Restore a checkpoint into the target's abstract state and compare values.

    First checks the metadata as :func:`check_checkpoint` does; then restores
    every array whose shape and dtype match, with the target's shapes, dtypes
    and shardings (orbax reshards as needed; mismatched and extra arrays are
    skipped, never read), and compares the restored values with the target's
    within the tolerance (exact by default). The target is not modified: the
    restored arrays are compared, then dropped. To restore for real after a
    clean verification, use ``nnx.update(model, restored_state)``.

    Args:
        path: The checkpoint directory.
        target: A concrete model, ``nnx.State`` or pure dict whose values the
            checkpoint should hold; the reference side (``a``).
        rtol: Relative tolerance for floating values, ``>= 0``.
        atol: Absolute tolerance for floating values, ``>= 0``.

    Returns:
        A :class:`StateDiff` of target against checkpoint, values included.

    Raises:
        FileNotFoundError: If ``path`` does not exist (also a ``ValueError``).
        TypeError: If ``path`` is not a path or a tolerance is not a float.
        ValueError: If ``path`` is not an orbax PyTree checkpoint, is not UTF-8
            or is damaged (its metadata, its index or, found while restoring, its
            array data: the message names the damaged file); if ``target`` is
            abstract or holds arrays other processes share (a multi-process
            run: restore and compare on one process); or if a tolerance is
            negative or not finite.

    Example:
        >>> import tempfile, pathlib
        >>> import orbax.checkpoint as ocp
        >>> from flax import nnx
        >>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "ckpt"
        >>> with ocp.StandardCheckpointer() as checkpointer:
        ...     checkpointer.save(path, nnx.state(model))
        >>> verify_restore(path, model).equal
        True
        >>> diff = verify_restore(path, nnx.Linear(2, 3, rngs=nnx.Rngs(1)))
        >>> [(e.path, e.problem, e.n_different) for e in diff.entries]
        [('kernel', 'value', 6)]
    """
    import orbax.checkpoint as ocp  # deferred: orbax is slow to import

    rtol_f = check_tolerance(rtol, "rtol")
    atol_f = check_tolerance(atol, "atol")
    raw = records_of(target, "target")
    require_values(
        raw,
        "there are no values to compare a restore with",
        "Pass the concrete model, or use `check_checkpoint` to compare "
        "shapes and dtypes only.",
    )
    require_addressable(raw)
    ckpt, records, notes, meta_diff = _check(path, raw)
    mismatched = {e.path for e in meta_diff.entries}
    wanted = {_key(r.path): r for r in records if r.path_str not in mismatched}
    strip = ckpt.layout == "nnx-state"
    stored = {_key(r.path): r for r in ckpt.records}
    # A Python number restores as one where orbax stored one (compared exactly,
    # as Python numbers); elsewhere it is compared as the array JAX makes of it.
    records = tuple(
        dataclasses.replace(r, array=np.asarray(r.array, dtype=r.dtype))
        if _is_number(r.array) and not _stored_number(stored.get(_key(r.path), r))
        else r
        for r in records
    )

    def restore_leaf(keypath: Any, leaf: Any) -> Any:
        k = _key(keypath_keys(keypath))
        record = wanted.get(k[:-1] if strip else k)
        if record is None:
            return ocp.PLACEHOLDER
        value = record.array
        if _is_number(value) and isinstance(leaf, ocp.metadata.ScalarMetadata):
            return value  # orbax restores a stored Python number as one
        sharding = getattr(value, "sharding", None)
        if not isinstance(sharding, jax.sharding.Sharding):
            sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
        if is_key_dtype(getattr(value, "dtype", None)):
            return jax.ShapeDtypeStruct(value.shape, value.dtype, sharding=sharding)
        return jax.ShapeDtypeStruct(record.shape, record.dtype, sharding=sharding)

    item = jax.tree_util.tree_map_with_path(restore_leaf, ckpt.tree)
    restored = _restore(ckpt, item) if wanted else {}
    return diff_records(
        records,
        tuple(_as_restored(r) for r in ckpt.records),
        rtol=rtol_f,
        atol=atol_f,
        a_label="target",
        b_label="checkpoint",
        notes=notes,
        b_values=restored,
    )


def require_addressable(records: tuple[VarRecord, ...], name: str = "target") -> None:
    """Raise ``ValueError`` if a record holds an array this process cannot read whole.

    In a multi-process run (``jax.distributed``) an array sharded over the
    devices of several processes is not fully addressable from any one of them.
    """
    partial = [
        r.path_str
        for r in records
        if getattr(r.array, "is_fully_addressable", True) is False
    ]
    if partial:
        raise ValueError(
            f"`{name}` holds {len(partial)} array(s) that are not fully addressable "
            f"from this process (first: {partial[0]!r}), as in a multi-process "
            "`jax.distributed` run, and `verify_restore` restores and compares on one "
            "process. Run it in a single process, use `check_checkpoint` to check "
            "shapes and dtypes (it reads metadata only), or restore with orbax in "
            "every process and compare with `compare_states`."
        )


def _restore(ckpt: _Checkpoint, item: Any) -> dict[Key, Any]:
    """Restore ``item`` (abstract leaves or ``ocp.PLACEHOLDER``) from ``ckpt``.

    Returns the restored arrays by path, placeholders left out; for the
    ``nnx-state`` layout orbax's trailing ``value`` key is stripped. A read
    that fails (array data damaged in place, which the index checks of
    :func:`_read` cannot see) is a ``ValueError`` naming the damaged file.
    """
    import orbax.checkpoint as ocp  # deferred: orbax is slow to import

    try:
        with ocp.PyTreeCheckpointer() as checkpointer:
            out = checkpointer.restore(
                ckpt.path,
                args=ocp.args.PyTreeRestore(
                    item=item,
                    restore_args=ocp.checkpoint_utils.construct_restore_args(item),
                ),
            )
    except Exception as error:  # tensorstore raises a bare `Exception`
        if _is_read_error(error):
            raise _damaged(
                ckpt.path, _store_error(error, ckpt.path, ckpt.data_files)
            ) from error
        raise ValueError(
            f"orbax could not restore `path` {str(ckpt.path)!r}: "
            f"{_one_line(str(error), ckpt.path)}."
        ) from error
    strip = ckpt.layout == "nnx-state"
    restored: dict[Key, Any] = {}
    for keypath, leaf in jax.tree_util.tree_flatten_with_path(out)[0]:
        if leaf is ocp.PLACEHOLDER:
            continue
        k = _key(keypath_keys(keypath))
        restored[k[:-1] if strip else k] = leaf
    return restored


def is_checkpoint_dir(path: PathLike) -> bool:
    """Whether ``path`` is a directory holding an orbax ``_METADATA`` file."""
    try:
        return (_as_path(path).expanduser() / "_METADATA").is_file()
    except (TypeError, ValueError):
        return False


def _restore_all(ckpt: _Checkpoint) -> dict[str, Any]:
    """Every array of ``ckpt`` on the default device, as a pure nested dict."""
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    import orbax.checkpoint as ocp  # deferred: orbax is slow to import

    def abstract(leaf: Any) -> Any:
        if isinstance(leaf, ocp.metadata.ScalarMetadata):
            return np.dtype(leaf.dtype).type(0).item()  # restored as a Python number
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=device)

    item = jax.tree.map(abstract, ckpt.tree)
    nested: dict[str, Any] = {}
    for k, leaf in _restore(ckpt, item).items():
        node = nested
        for part in k[:-1]:
            node = node.setdefault(part, {})
        node[k[-1]] = leaf
    return nested


def diff_checkpoints(
    path_a: PathLike,
    path_b: PathLike,
    *,
    values: bool = True,
    rtol: float = 0.0,
    atol: float = 0.0,
) -> StateDiff:
    """Compare two checkpoints per path (the CLI's ``diff`` of two directories).

    With ``values=False`` only their metadata is read and compared (structure,
    shapes, dtypes); otherwise both are restored to the default device and
    compared with :func:`~nnx_introspect.compare_states`. Layouts may differ.
    """
    a, b = _read(path_a), _read(path_b)
    if not values:
        return diff_records(
            a.records, b.records, rtol=rtol, atol=atol, compare_values=False
        )
    return diff_records(
        records_of(_restore_all(a), "a"),
        records_of(_restore_all(b), "b"),
        rtol=check_tolerance(rtol, "rtol"),
        atol=check_tolerance(atol, "atol"),
    )

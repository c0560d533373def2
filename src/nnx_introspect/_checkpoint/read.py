"""A checkpoint's metadata read into records, after its files are checked."""

import dataclasses
import pathlib
from typing import Any, Literal

from nnx_introspect._checkpoint.files import (
    PathLike,
    check_json_files,
    damaged,
    resolve_checkpoint,
)
from nnx_introspect._checkpoint.store import check_array_store, store_error
from nnx_introspect._inventory import VarRecord, metadata_inventory

Layout = Literal["nnx-state", "pure-dict"]
Key = tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A checkpoint as read from its metadata, its files checked first."""

    path: pathlib.Path
    tree: Any
    layout: Layout
    records: tuple[VarRecord, ...]  # paths without the nnx-state "value" key
    # Array-store key (leaf name, field and chunk: "embed" "." "value/1.0") -> the
    # data file holding it, relative to `path` ("ocdbt.process_1/d/..."); values
    # inlined in the index are absent.
    data_files: tuple[tuple[str, str], ...] = ()


def read_checkpoint(path: PathLike) -> Checkpoint:
    """Check the files of the checkpoint at ``path``, then read its metadata."""
    import orbax.checkpoint as ocp  # deferred: orbax is slow to import

    p = resolve_checkpoint(path)
    n_stored, in_store, use_ocdbt = check_json_files(p)
    data_files = check_array_store(p, in_store) if use_ocdbt and in_store else {}
    handler = ocp.PyTreeCheckpointHandler()
    try:
        meta = handler.metadata(p)
    except Exception as error:  # orbax/tensorstore: ValueError, KeyError, bare
        raise damaged(p, store_error(error, p)) from error
    finally:
        handler.close()
    tree = getattr(meta, "tree", meta)
    raw = metadata_inventory(tree) if tree is not None else ()
    if len(raw) != n_stored:
        raise damaged(
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
    return Checkpoint(
        path=p,
        tree=tree,
        layout="nnx-state" if state_layout else "pure-dict",
        records=records,
        data_files=tuple(sorted(data_files.items())),
    )


def key_of(path: tuple[Any, ...]) -> Key:
    """A path's keys as strings, as checkpoint records are matched."""
    return tuple(str(k) for k in path)

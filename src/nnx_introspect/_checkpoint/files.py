"""The files orbax wrote: the checkpoint path, and its JSON metadata checked whole."""

import json
import os
import pathlib
from typing import Any

from nnx_introspect._typing import ArgumentError

PathLike = str | bytes | os.PathLike[str] | os.PathLike[bytes]


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
        raise ArgumentError(
            "path",
            f"`path` {raw!r} is not a UTF-8 path (byte 0x{bad.hex()} is not "
            "UTF-8), and orbax and tensorstore open UTF-8 paths only. Rename the "
            "directory (or the directory holding it) to a UTF-8 name.",
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
        found = _checkpoints_below(p)
        hint = (
            f" It contains checkpoints at: {', '.join(found[:5])}; pass one of those."
            if found
            else " Pass the directory given to `save` (it holds `_METADATA`)."
        )
        raise ArgumentError(
            "path",
            f"`path` {str(given)!r} is not an orbax PyTree checkpoint: it has no "
            f"`_METADATA` file.{hint}",
        )
    return p


def _checkpoints_below(p: pathlib.Path) -> list[str]:
    """The checkpoints one or two levels below ``p``, for the error's hint.

    A directory another process removes while it is listed (a shared
    ``/tmp``) is passed over: the hint never turns the error into another.
    """
    found: list[str] = []
    for pattern in ("*/_METADATA", "*/*/_METADATA"):
        try:
            found += [str(m.parent.relative_to(p)) for m in p.glob(pattern)]
        except OSError:
            continue
    return sorted(found)


def damaged(p: pathlib.Path, what: str) -> ValueError:
    """The error for a checkpoint whose files cannot be read as orbax wrote them."""
    return ValueError(
        f"`path` {str(p)!r} is a damaged orbax checkpoint, not an empty one: {what}. "
        "Restore it from a backup or save it again."
    )


def one_line(text: str, p: pathlib.Path) -> str:
    """An exception text on one line, without tensorstore's spec dump."""
    text = text.split(" [tensorstore_spec=")[0]
    text = text.split("See full TensorStore details")[0]
    return " ".join(text.replace(f"{p}/", "./").split()).rstrip(".")


def _load_json(p: pathlib.Path, rel: str) -> Any:
    try:
        return json.loads((p / rel).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:  # JSONDecodeError, UnicodeDecodeError
        raise damaged(
            p, f"its `{rel}` file is not valid JSON ({one_line(str(error), p)})"
        ) from error


# Value types orbax keeps in the array store (strings go to `_strings.json`).
_IN_STORE = frozenset({"jax.Array", "np.ndarray", "scalar"})


def check_json_files(p: pathlib.Path) -> tuple[int, set[str], bool]:
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
        raise damaged(
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
            raise damaged(p, "its `_sharding` file is not a mapping of shardings")
        for key, value in sharding.items():
            try:
                json.loads(value)
            except ValueError as error:
                raise damaged(
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
        raise damaged(
            p,
            "its `array_metadatas/` directory holds no `process_<i>` file (orbax "
            "writes one per process that saved arrays)",
        )
    missing = sorted(set(range(max(files) + 1)) - set(files))
    if missing:
        raise damaged(
            p,
            f"`array_metadatas/process_{missing[0]}` is missing (found "
            f"{', '.join(files[i] for i in sorted(files))})",
        )
    for name in files.values():
        data = _load_json(p, f"array_metadatas/{name}")
        if not isinstance(data, dict) or not isinstance(
            data.get("array_metadatas"), list
        ):
            raise damaged(
                p,
                f"its `array_metadatas/{name}` file is JSON but not orbax array "
                "metadata (no `array_metadatas` list)",
            )


def is_checkpoint_dir(path: PathLike) -> bool:
    """Whether ``path`` is a directory holding an orbax ``_METADATA`` file."""
    try:
        return (_as_path(path).expanduser() / "_METADATA").is_file()
    except (TypeError, ValueError):
        return False

"""The OCDBT array store: its index checked whole, and its read errors named."""

import os
import pathlib
import re

from nnx_introspect._checkpoint.files import damaged, one_line


def _location(location: str) -> tuple[str, int]:
    """The file and end byte an OCDBT location refers to.

    A location reads ``"<kind>:<base>:<file>:<offset>:<length>"``; the file is
    returned relative to the checkpoint directory.
    """
    rest = location.split(":", 1)[1]
    base, file_id, offset, length = rest.rsplit(":", 3)
    return base + file_id, int(offset) + int(length)


def check_array_store(p: pathlib.Path, expected: set[str]) -> dict[str, str]:
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
        raise damaged(
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
            raise damaged(p, f"`{rel}` ({_held(holders[rel])}) is missing")
        size = f.stat().st_size
        if size < ends[rel]:
            raise damaged(
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
        raise damaged(p, store_error(error, p)) from error
    except Exception as error:  # tensorstore raises bare exceptions too
        raise damaged(p, store_error(error, p)) from error
    missing = sorted(expected - found)
    if missing and expected & found:  # names as orbax gives them, yet some absent
        shown = ", ".join(f"`{m}`" for m in missing[:3])
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise damaged(
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


def is_read_error(error: BaseException) -> bool:
    """Whether ``error`` is orbax/tensorstore failing to read stored bytes."""
    return any(
        "Encountered error while reading array index" in text or 'local file "' in text
        for text in _chain(error)
    )


def store_error(
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
        reason = one_line(text.rsplit('": ', 1)[-1], p)
        return f"{part} could not be read ({reason}){where}"
    return f"its array store could not be read ({one_line(texts[-1], p)})"

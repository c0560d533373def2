"""Each compiled program's optimized HLO text, kept on disk: ``timecal.py``'s hook.

:func:`install` names :func:`keep_text` as the library's program-text hook
(the environment's ``NNX_INTROSPECT_PROGRAM_TEXT_HOOK``, read by
``nnx_introspect._xla.text_hook`` each time a compile's program text is read:
a training step, a serving prefill or decode, every phase of an RL step). The
child processes a deviceless compile runs in inherit the environment, so they
call it too. When ``TIMECAL_HLO_DIR`` and ``TIMECAL_HLO_SLUG`` are set, it
writes the text gzip-compressed to ``<dir>/<slug>__<index>__<module>.hlo.gz``
and appends a line to ``<dir>/<slug>.manifest.jsonl``: the index (the order of
compilation in the case, across processes), the HLO module's name, the file,
the compiled program's memory analysis (to match the file to its report row),
the text's sha256 and the process id. A file lock makes the index safe across
the child processes.

Only the standard library is imported here at import time.
"""

import contextlib
import fcntl
import gzip
import hashlib
import json
import os
import re
import sys
from collections.abc import Iterator
from typing import Any

DIR = "TIMECAL_HLO_DIR"
SLUG = "TIMECAL_HLO_SLUG"
_MODULE = re.compile(r"HloModule\s+([^\s,]+)")
MEMORY = ("argument_bytes", "output_bytes", "temp_bytes", "alias_bytes")


HOOK_VARIABLE = "NNX_INTROSPECT_PROGRAM_TEXT_HOOK"
HOOK = "benchmarks.calibration.timecal_hook:keep_text"


def install() -> None:
    """Name :func:`keep_text` as the program-text hook, here and in the children."""
    os.environ[HOOK_VARIABLE] = HOOK


def keep_text(text: str, compiled: Any) -> None:
    """The hook: :func:`save` the text; a failure is a line on stderr, not an error."""
    try:
        save(text, compiled)
    except Exception as error:  # never break the compile for the hook
        print(f"timecal_hook: not saved: {error!r}", file=sys.stderr)


def module_name(text: str) -> str:
    found = _MODULE.search(text[:2000])
    return found.group(1) if found else "unknown"


def _memory(compiled: Any) -> dict[str, int | None]:
    try:
        memory = compiled.memory_analysis()
    except Exception:
        return {k: None for k in MEMORY}
    return {
        "argument_bytes": int(memory.argument_size_in_bytes),
        "output_bytes": int(memory.output_size_in_bytes),
        "temp_bytes": int(memory.temp_size_in_bytes),
        "alias_bytes": int(memory.alias_size_in_bytes),
    }


@contextlib.contextmanager
def _locked(directory: str) -> Iterator[None]:
    with open(os.path.join(directory, ".timecal.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def manifest_path(directory: str, slug: str) -> str:
    return os.path.join(directory, f"{slug}.manifest.jsonl")


def save(text: str, compiled: Any) -> None:
    """Write ``text`` and its manifest line, when the environment names a case."""
    directory, slug = os.environ.get(DIR), os.environ.get(SLUG)
    if not directory or not slug:
        return
    os.makedirs(directory, exist_ok=True)
    module = re.sub(r"[^A-Za-z0-9_.-]", "_", module_name(text))
    entry: dict[str, Any] = {"module": module, **_memory(compiled)}
    entry["sha256"] = hashlib.sha256(text.encode()).hexdigest()
    entry["chars"] = len(text)
    entry["pid"] = os.getpid()
    manifest = manifest_path(directory, slug)
    with _locked(directory):
        index = 0
        if os.path.exists(manifest):
            with open(manifest) as f:
                index = sum(1 for line in f if line.strip())
        name = f"{slug}__{index:02d}__{module}.hlo.gz"
        with gzip.open(os.path.join(directory, name), "wt") as f:
            f.write(text)
        entry = {"index": index, "file": name, **entry}
        with open(manifest, "a") as f:
            f.write(json.dumps(entry) + "\n")


def start_case(directory: str, slug: str) -> None:
    """Forget an earlier run of the case: its manifest and files; name it here."""
    os.makedirs(directory, exist_ok=True)
    with _locked(directory):
        for name in os.listdir(directory):
            if name.startswith(f"{slug}__") or name == f"{slug}.manifest.jsonl":
                os.remove(os.path.join(directory, name))
    os.environ[DIR] = os.path.abspath(directory)
    os.environ[SLUG] = slug


def captured(directory: str, slug: str) -> list[dict[str, Any]]:
    """The case's manifest, in the order of compilation."""
    path = manifest_path(directory, slug)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        entries = [json.loads(line) for line in f if line.strip()]
    return sorted(entries, key=lambda e: e["index"])

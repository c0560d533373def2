"""Damaged orbax checkpoints are errors naming the damage, never empty checkpoints.

Each case saves a real checkpoint the way users do (``StandardCheckpointer`` of an
``nnx.State``, of a pure dict, and ``PyTreeCheckpointer``), damages one of the
files orbax 0.12 wrote, and checks that every function raises a ``ValueError``
naming ``path`` and the damaged part, and that the CLI exits 1 with one line.
A sweep then deletes and truncates every file in turn and holds the verdict
against orbax's own restore: whenever orbax cannot restore the right values,
``verify_restore`` must raise.

What orbax 0.12.8 writes for ``save(path, nnx.state(model))``::

    _METADATA                    JSON: the tree, one entry per saved leaf
    _sharding                    JSON: the save-time sharding of each array
    _CHECKPOINT_METADATA         JSON: timestamps and custom metadata
    array_metadatas/process_0    JSON: write/chunk shapes, PRNG key impls
    manifest.ocdbt, d/<id>       the array store's index (OCDBT B-tree, merged)
    ocdbt.process_0/d/<id>       array data (values over 1 KiB; small ones are
                                 inlined in the index)
    ocdbt.process_0/manifest.ocdbt and its small d/<id> index nodes: the
                                 per-process index, superseded by the merged one
    commit_success.txt
"""

import gc
import json
import os
import pathlib
import shutil
import subprocess
import sys
import warnings
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from flax import nnx

from nnx_introspect import check_checkpoint, checkpoint_report, verify_restore
from nnx_introspect.cli import main


@contextmanager
def nothing_left_behind() -> Iterator[None]:
    """Fail if the block leaves an unraisable exception or unawaited coroutine behind.

    A failed orbax restore can abandon the reads still in flight: their
    coroutines are finalized later, outside any ``try``, and print "Exception
    ignored in <coroutine ...>" or "coroutine ... was never awaited" into
    whatever runs next (issue 14). Every orbax restore that fails mid-read runs
    in a child process; this guard holds every test of the checkpoint modules to
    leaving nothing behind: it captures ``sys.unraisablehook`` for the block,
    collects garbage at its end and asserts nothing was reported.
    """
    caught: list[str] = []

    def record(args: Any) -> None:
        what = args.err_msg or "Exception ignored in"
        caught.append(
            f"{what}: {args.object!r}: {args.exc_type.__name__}: {args.exc_value}"
        )

    previous = sys.unraisablehook
    sys.unraisablehook = record
    try:
        yield
        with warnings.catch_warnings(record=True) as emitted:
            warnings.simplefilter("always", RuntimeWarning)
            gc.collect()
    finally:
        sys.unraisablehook = previous
    caught += [str(w.message) for w in emitted if "never awaited" in str(w.message)]
    assert not caught, "left behind:\n" + "\n".join(caught)


@pytest.fixture(autouse=True)
def _leaves_nothing_behind() -> Iterator[None]:
    with nothing_left_behind():
        yield


class _Suspend:
    """An awaitable that suspends once, as a read waiting for tensorstore does."""

    def __await__(self) -> Generator[None, None, None]:
        yield


async def _read_like_orbax() -> None:
    """Orbax's ``_read_array_index_and_device_put``: any exit becomes ``Exception``."""
    try:
        await _Suspend()
    except BaseException as error:  # as orbax 0.12.8 does, GeneratorExit included
        raise Exception("Encountered error while reading array index") from error


def test_the_guard_fails_on_abandoned_coroutines() -> None:
    # Both in a reference cycle, as orbax's abandoned tasks are: only the
    # guard's own garbage collection finalizes them.
    started = _read_like_orbax()
    started.send(None)  # suspended mid-read, then abandoned
    cycle: list[Any] = [started]
    cycle.append(cycle)
    with (
        pytest.raises(
            AssertionError, match=r"(?s)Exception ignored in.*_read_like_orbax"
        ),
        nothing_left_behind(),
    ):
        del started, cycle
    never_started: list[Any] = [_read_like_orbax()]
    never_started.append(never_started)
    with (
        pytest.raises(
            AssertionError, match="coroutine '_read_like_orbax' was never awaited"
        ),
        nothing_left_behind(),
    ):
        del never_started
    with nothing_left_behind():  # a coroutine run to the end leaves nothing
        finished = _read_like_orbax()
        finished.send(None)
        with pytest.raises(StopIteration):
            finished.send(None)


class Model(nnx.Module):
    """A kernel large enough to be stored outside the index, plus small leaves."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.big = nnx.Linear(32, 64, rngs=rngs)  # 8 KiB of random floats
        self.bn = nnx.BatchNorm(4, rngs=rngs)
        self.drop = nnx.Dropout(0.5, rngs=rngs)  # a PRNG key and a counter


def build() -> Model:
    return Model(nnx.Rngs(0, dropout=1))


LAYOUTS: dict[str, Callable[[pathlib.Path, Model], None]] = {}


def _layout(name: str) -> Callable[[Any], Any]:
    def register(fn: Callable[[pathlib.Path, Model], None]) -> Any:
        LAYOUTS[name] = fn
        return fn

    return register


@_layout("nnx-state")
def _save_state(path: pathlib.Path, model: Model) -> None:
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(path, nnx.state(model))


@_layout("pure-dict")
def _save_pure(path: pathlib.Path, model: Model) -> None:
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(path, nnx.to_pure_dict(nnx.state(model)))


@_layout("pytree")
def _save_pytree(path: pathlib.Path, model: Model) -> None:
    with ocp.PyTreeCheckpointer() as checkpointer:
        checkpointer.save(path, nnx.to_pure_dict(nnx.state(model)))


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pathlib.Path]:
    """One clean checkpoint per layout, copied by each test before damaging it."""
    root = tmp_path_factory.mktemp("clean")
    model = build()
    out = {}
    for name, save in LAYOUTS.items():
        save(root / name, model)
        out[name] = root / name
    return out


def fresh(saved: dict[str, pathlib.Path], layout: str, dest: pathlib.Path) -> Any:
    shutil.copytree(saved[layout], dest)
    return dest


# --- the damages --------------------------------------------------------------------


def _garbage(f: pathlib.Path) -> None:
    f.write_bytes(b"\x00garbage{{")


def _garbage_text(f: pathlib.Path, text: str) -> None:
    f.write_text(text)


def _truncate(f: pathlib.Path) -> None:
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])


def _index_node(p: pathlib.Path) -> pathlib.Path:
    """The merged index's B-tree node (the only file directly under ``d/``)."""
    (node,) = (p / "d").iterdir()
    return node


def _data_file(p: pathlib.Path) -> pathlib.Path:
    """The file holding the big kernel's data: the largest under ocdbt.process_0."""
    return max((p / "ocdbt.process_0" / "d").iterdir(), key=lambda f: f.stat().st_size)


def _ghost_leaf(p: pathlib.Path) -> None:
    """``_METADATA`` lists an array the store does not hold."""
    meta = json.loads((p / "_METADATA").read_text())
    meta["tree_metadata"]["('ghost',)"] = {
        "key_metadata": [{"key": "ghost", "key_type": 2}],
        "value_metadata": {"value_type": "jax.Array", "skip_deserialize": False},
    }
    (p / "_METADATA").write_text(json.dumps(meta))


def _bad_sharding_entry(p: pathlib.Path) -> None:
    entries = json.loads((p / "_sharding").read_text())
    (p / "_sharding").write_text(json.dumps({k: "{not json" for k in entries}))


def _flip_first_byte(f: pathlib.Path) -> None:
    data = bytearray(f.read_bytes())
    data[0] ^= 0xFF  # breaks the zstd frame's magic number; the length is unchanged
    f.write_bytes(bytes(data))


HEX = r"[0-9a-f]+"

# (name, damage, what the message says is damaged)
DAMAGES: list[tuple[str, Callable[[pathlib.Path], None], str]] = [
    (
        "_METADATA garbage",
        lambda p: _garbage(p / "_METADATA"),
        r"its `_METADATA` file is not valid JSON",
    ),
    (
        "_METADATA truncated",
        lambda p: _truncate(p / "_METADATA"),
        r"its `_METADATA` file is not valid JSON",
    ),
    (
        "_METADATA emptied",
        lambda p: _garbage_text(p / "_METADATA", ""),
        r"its `_METADATA` file is not valid JSON",
    ),
    (
        "_METADATA not orbax",
        lambda p: _garbage_text(p / "_METADATA", '{"a": 1}'),
        r"its `_METADATA` file is JSON but not orbax tree metadata",
    ),
    (
        "_METADATA lists a leaf the store lacks",
        _ghost_leaf,
        r"`_METADATA` lists `ghost`, which the array store \(`manifest.ocdbt`\) "
        r"does not hold",
    ),
    (
        "manifest.ocdbt deleted",
        lambda p: (p / "manifest.ocdbt").unlink(),
        r"its `manifest.ocdbt` file \(the index of the array store\) is missing",
    ),
    (
        "manifest.ocdbt garbage",
        lambda p: _garbage(p / "manifest.ocdbt"),
        r"`manifest.ocdbt` could not be read \(Error decoding manifest",
    ),
    (
        "manifest.ocdbt truncated",
        lambda p: _truncate(p / "manifest.ocdbt"),
        r"`manifest.ocdbt` could not be read \(Error decoding manifest",
    ),
    (
        "index node truncated",
        lambda p: _truncate(_index_node(p)),
        rf"`d/{HEX}` \(holds the array index\) is truncated: \d+ bytes, the array "
        r"store references \d+",
    ),
    (
        "index node deleted",
        lambda p: _index_node(p).unlink(),
        rf"`d/{HEX}` \(holds the array index\) is missing",
    ),
    (
        "array data truncated",
        lambda p: _truncate(_data_file(p)),
        rf"`ocdbt.process_0/d/{HEX}` \(holds data of `big(/|\.)kernel(\.value)?`\) is "
        r"truncated: \d+ bytes, the array store references \d+",
    ),
    (
        "array data deleted",
        lambda p: _data_file(p).unlink(),
        rf"`ocdbt.process_0/d/{HEX}` \(holds data of `big(/|\.)kernel(\.value)?`\) is "
        r"missing",
    ),
    (
        "_sharding truncated",
        lambda p: _truncate(p / "_sharding"),
        r"its `_sharding` file is not valid JSON",
    ),
    (
        "_sharding garbage",
        lambda p: _garbage(p / "_sharding"),
        r"its `_sharding` file is not valid JSON",
    ),
    (
        "_sharding entry unreadable",
        _bad_sharding_entry,
        r"its `_sharding` file holds an unreadable sharding for",
    ),
    (
        "array_metadatas/process_0 garbage",
        lambda p: _garbage(p / "array_metadatas" / "process_0"),
        r"its `array_metadatas/process_0` file is not valid JSON",
    ),
    (
        "array_metadatas/process_0 truncated",
        lambda p: _truncate(p / "array_metadatas" / "process_0"),
        r"its `array_metadatas/process_0` file is not valid JSON",
    ),
    (
        "array_metadatas/process_0 deleted",
        lambda p: (p / "array_metadatas" / "process_0").unlink(),
        r"its `array_metadatas/` directory holds no `process_<i>` file",
    ),
    (
        "_CHECKPOINT_METADATA garbage",
        lambda p: _garbage(p / "_CHECKPOINT_METADATA"),
        r"its `_CHECKPOINT_METADATA` file is not valid JSON",
    ),
]


def _message(p: pathlib.Path, what: str) -> str:
    return (
        rf"`path` '{p}' is a damaged orbax checkpoint, not an empty one: .*{what}.*"
        r"Restore it from a backup or save it again\."
    )


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize(
    ("name", "damage", "what"), DAMAGES, ids=[d[0] for d in DAMAGES]
)
def test_every_damage_is_a_value_error_naming_the_part(
    saved: dict[str, pathlib.Path],
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
    layout: str,
    name: str,
    damage: Callable[[pathlib.Path], None],
    what: str,
) -> None:
    model = build()
    path = fresh(saved, layout, tmp_path / "ckpt")
    assert verify_restore(path, model).equal  # clean before the damage
    damage(path)
    match = _message(path, what)
    with pytest.raises(ValueError, match=match):
        checkpoint_report(path)
    with pytest.raises(ValueError, match=match):
        check_checkpoint(path, model)
    with pytest.raises(ValueError, match=match):
        check_checkpoint(path, nnx.eval_shape(build))
    with pytest.raises(ValueError, match=match):
        verify_restore(path, model)
    capsys.readouterr()
    code = main(["checkpoint", str(path)])
    out, err = capsys.readouterr()
    assert code == 1 and out == "", name
    assert err.count("\n") == 1 and err.startswith("nnx-introspect: error: "), err
    assert "damaged orbax checkpoint, not an empty one" in err


# A failed restore abandons the reads of other chunks still in flight (their
# coroutines then raise when finalized, see `nothing_left_behind`): one array of
# one chunk on one device is one read, so these failing restores leave none.
def test_data_damaged_in_place_is_found_by_the_restore(tmp_path: pathlib.Path) -> None:
    """A data file of the right length but wrong bytes: only reading it tells."""
    w = jax.random.normal(jax.random.key(0), (32, 64))  # 8 KiB: not inlined
    target = nnx.State({"w": nnx.Param(w)})
    path = tmp_path / "ckpt"
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(path, target)
    _flip_first_byte(_data_file(path))
    # The metadata is intact, and it is all these two read.
    assert check_checkpoint(path, target).equal
    assert [leaf.path for leaf in checkpoint_report(path).leaves] == ["w"]
    # Orbax itself fails on it, with a bare `Exception`...
    abstract = nnx.State({"w": nnx.Param(jax.ShapeDtypeStruct(w.shape, w.dtype))})
    with (
        pytest.raises(Exception, match="Encountered error while reading array index"),
        ocp.StandardCheckpointer() as checkpointer,
    ):
        checkpointer.restore(path, abstract)
    # ... which verify_restore turns into a ValueError naming the array.
    with pytest.raises(
        ValueError,
        match=_message(
            path, r"the data of `w.value` could not be read \(ZSTD_decompress"
        ),
    ):
        verify_restore(path, target)


# --- a sweep held against orbax's own restore ---------------------------------------

# Files orbax 0.12 can restore without, which we still require to parse when
# present: their damage means something overwrote the checkpoint.
STRICTER = {"array_metadatas/process_0", "_CHECKPOINT_METADATA"}


def orbax_restores_the_model(path: str) -> bool:
    """Whether orbax's own Flax-style restore gives back ``build()``'s values."""
    abstract = nnx.state(nnx.eval_shape(build))
    try:
        with ocp.StandardCheckpointer() as checkpointer:
            restored = checkpointer.restore(path, abstract)
    except Exception:  # orbax and tensorstore raise anything, bare ones included
        return False
    want = jax.tree.leaves(nnx.state(build()))
    got = jax.tree.leaves(restored)
    if len(want) != len(got):
        return False
    for a, b in zip(want, got, strict=True):
        if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        if not np.array_equal(np.asarray(a), np.asarray(b)):
            return False
    return True


# Orbax's failing restores leave "Event loop is closed" and abandoned coroutines
# behind (on stderr, or at interpreter exit); they run in a child process.
ORACLE = """
import json, sys
from tests.test_checkpoint_damage import orbax_restores_the_model
print(json.dumps({p: orbax_restores_the_model(p) for p in sys.argv[1:]}))
"""


def _files(p: pathlib.Path) -> list[str]:
    return sorted(str(f.relative_to(p)) for f in p.rglob("*") if f.is_file())


HOWS = ("delete", "truncate")


@pytest.fixture(scope="module")
def damaged(
    saved: dict[str, pathlib.Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, tuple[pathlib.Path, bool]]]:
    """Per damage (each of :data:`HOWS`), per file: the checkpoint with that one
    file damaged, and whether orbax's own restore gives the model back.

    Both damages are judged by orbax in one child process (an interpreter that
    imports JAX and orbax once).
    """
    rels = _files(saved["nnx-state"])
    paths: dict[str, dict[str, pathlib.Path]] = {}
    for how in HOWS:
        root = tmp_path_factory.mktemp(how)
        paths[how] = {}
        for i, rel in enumerate(rels):
            path = fresh(saved, "nnx-state", root / str(i))
            if how == "delete":
                (path / rel).unlink()
            else:
                _truncate(path / rel)
            paths[how][rel] = path
    every = [str(path) for by_rel in paths.values() for path in by_rel.values()]
    result = subprocess.run(
        [sys.executable, "-c", ORACLE, *every],
        capture_output=True,
        text=True,
        cwd=pathlib.Path(__file__).parents[1],
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        timeout=600,
        check=True,
    )
    orbax_ok = json.loads(result.stdout.splitlines()[-1])
    return {
        how: {rel: (path, orbax_ok[str(path)]) for rel, path in by_rel.items()}
        for how, by_rel in paths.items()
    }


@pytest.mark.parametrize("how", HOWS)
def test_no_false_green_when_any_file_is_damaged(
    saved: dict[str, pathlib.Path],
    damaged: dict[str, dict[str, tuple[pathlib.Path, bool]]],
    how: str,
) -> None:
    model = build()
    rels = _files(saved["nnx-state"])
    assert "manifest.ocdbt" in rels and "array_metadatas/process_0" in rels
    assert sorted(damaged[how]) == rels
    paths = {rel: path for rel, (path, _) in damaged[how].items()}
    orbax_ok = {str(path): ok for path, ok in damaged[how].values()}
    verdicts = {}
    for rel, path in paths.items():
        try:
            ours_ok = verify_restore(path, model).equal
        except ValueError as error:
            assert str(path) in str(error), rel
            ours_ok = False
        verdicts[rel] = (orbax_ok[str(path)], ours_ok)
        if not orbax_ok[str(path)]:  # never green when orbax cannot restore them
            assert not ours_ok, rel
        elif not ours_ok:  # never red for a damage orbax does not mind...
            assert rel in STRICTER or rel.startswith("_METADATA"), rel
    # Both verdicts occur: the index and data are vital, the per-process index
    # (superseded by the merged one) and the commit marker are not.
    assert verdicts["manifest.ocdbt"] == (False, False)
    assert verdicts["commit_success.txt"] == (True, True)
    assert verdicts["ocdbt.process_0/manifest.ocdbt"] == (True, True)
    data = max(
        (r for r in rels if r.startswith("ocdbt.process_0/d/")),
        key=lambda r: (saved["nnx-state"] / r).stat().st_size,
    )
    assert verdicts[data] == (False, False)  # the kernel's data


# --- an empty checkpoint is not a damaged one ---------------------------------------


def test_orbax_refuses_an_empty_tree(tmp_path: pathlib.Path) -> None:
    with (
        pytest.raises(ValueError, match="Found empty item"),
        ocp.StandardCheckpointer() as checkpointer,
    ):
        checkpointer.save(tmp_path / "ckpt", {})


def test_a_checkpoint_of_empty_containers_reads_as_empty(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ckpt"
    with ocp.PyTreeCheckpointer() as checkpointer:
        checkpointer.save(path, {"layers": {}})
    with ocp.PyTreeCheckpointer() as checkpointer:  # orbax agrees: nothing stored
        assert jax.tree.leaves(checkpointer.restore(path)) == []
    report = checkpoint_report(path)
    assert report.leaves == () and report.n_elements == 0
    assert "The checkpoint is empty: its metadata is intact" in report.to_markdown()
    diff = check_checkpoint(path, nnx.Linear(2, 2, rngs=nnx.Rngs(0)))
    assert [(e.path, e.problem) for e in diff.entries] == [
        ("bias", "missing"),
        ("kernel", "missing"),
    ]
    capsys.readouterr()
    assert main(["checkpoint", str(path), "--format", "markdown"]) == 0
    assert "The checkpoint is empty" in capsys.readouterr().out
    # The same checkpoint with its metadata damaged is an error, not empty.
    _truncate(path / "_METADATA")
    with pytest.raises(ValueError, match=_message(path, "`_METADATA` file")):
        checkpoint_report(path)


# --- the CLI in a real process ------------------------------------------------------


def test_cli_prints_one_line_and_no_traceback(
    saved: dict[str, pathlib.Path], tmp_path: pathlib.Path
) -> None:
    """No traceback, no "Exception ignored" from orbax's coroutines on stderr."""
    damaged = []
    cases: list[tuple[str, Callable[[pathlib.Path], None]]] = [
        ("data", lambda p: _truncate(_data_file(p))),
        ("meta", lambda p: _truncate(p / "array_metadatas" / "process_0")),
    ]
    for name, damage in cases:
        path = fresh(saved, "nnx-state", tmp_path / name)
        damage(path)
        damaged.append(path)
    not_utf8 = os.fsencode(tmp_path) + b"/step\xff"
    os.rename(os.fsencode(fresh(saved, "nnx-state", tmp_path / "clean")), not_utf8)
    script = (
        "import sys\n"
        "from nnx_introspect.cli import main\n"
        "codes = [main(['checkpoint', p]) for p in sys.argv[1:]]\n"
        "import gc; gc.collect()\n"
        "print(codes)\n"
    )
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    result = subprocess.run(
        [sys.executable, "-c", script, *map(os.fsencode, damaged), not_utf8],
        capture_output=True,
        text=True,
        errors="replace",
        env=env,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0 and result.stdout == "[1, 1, 2]\n", result.stderr
    errors = [line for line in result.stderr.splitlines() if "nnx-introspect" in line]
    assert len(errors) == 3, result.stderr
    assert all("damaged orbax checkpoint, not an empty one" in e for e in errors[:2])
    assert "is not a UTF-8 path" in errors[2]
    for noise in ("Traceback", "Exception ignored", "Event loop is closed"):
        assert noise not in result.stderr, result.stderr

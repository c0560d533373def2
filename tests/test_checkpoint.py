"""checkpoint_report, check_checkpoint and verify_restore on real orbax checkpoints."""

import dataclasses
import json
import os
import pathlib
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from nnx_introspect._checkpoint import (
    check_checkpoint,
    checkpoint_report,
    diff_checkpoints,
    is_checkpoint_dir,
    require_addressable,
    verify_restore,
)
from nnx_introspect._inventory import inventory, metadata_inventory
from tests.conftest import BNDropoutMLP, assert_unchanged, snapshot
from tests.test_checkpoint_damage import nothing_left_behind

Flat = dict[tuple[Any, ...], Any]


@pytest.fixture(autouse=True)
def _leaves_nothing_behind() -> Iterator[None]:
    with nothing_left_behind():
        yield


def build(seed: int = 0) -> BNDropoutMLP:
    return BNDropoutMLP(nnx.Rngs(seed, dropout=1))


def save(path: pathlib.Path, tree: Any) -> pathlib.Path:
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(path, tree)
    return path


def save_flat(path: pathlib.Path, pairs: Flat, layout: str) -> pathlib.Path:
    """Save a (possibly corrupted) flat state in the given layout."""
    state = nnx.from_flat_state(list(pairs.items()))
    return save(path, state if layout == "nnx-state" else nnx.to_pure_dict(state))


def flat(model: nnx.Module) -> Flat:
    return {tuple(p): v for p, v in nnx.to_flat_state(nnx.state(model))}


def problems(diff: Any) -> list[tuple[str, str]]:
    return [(e.path, e.problem) for e in diff.entries]


def _drop(pairs: Flat) -> None:
    del pairs[("l1", "bias")]


def _add(pairs: Flat) -> None:
    pairs[("l2", "extra")] = nnx.Param(jnp.ones(2))


def _reshape(pairs: Flat) -> None:
    pairs[("l2", "kernel")] = nnx.Param(jnp.zeros((6, 2)))


def _cast(pairs: Flat) -> None:
    pairs[("bn", "mean")] = nnx.BatchStat(jnp.zeros(5, jnp.bfloat16))


def _flip(pairs: Flat) -> None:
    pairs[("l1", "kernel")] = nnx.Param(-pairs[("l1", "kernel")][...])


# (corruption, problems check_checkpoint reports, problems verify_restore reports)
CORPUS: list[tuple[str, Callable[[Flat], None], list[Any], list[Any]]] = [
    ("missing key", _drop, [("l1/bias", "missing")], [("l1/bias", "missing")]),
    ("extra key", _add, [("l2/extra", "extra")], [("l2/extra", "extra")]),
    ("changed shape", _reshape, [("l2/kernel", "shape")], [("l2/kernel", "shape")]),
    ("changed dtype", _cast, [("bn/mean", "dtype")], [("bn/mean", "dtype")]),
    ("flipped values", _flip, [], [("l1/kernel", "value")]),
]


@pytest.mark.parametrize("layout", ["nnx-state", "pure-dict"])
@pytest.mark.parametrize(
    ("name", "corrupt", "meta", "restore"), CORPUS, ids=[c[0] for c in CORPUS]
)
def test_corruption_corpus(
    tmp_path: pathlib.Path,
    layout: str,
    name: str,
    corrupt: Callable[[Flat], None],
    meta: list[Any],
    restore: list[Any],
    abstract_bn_dropout: Any,
) -> None:
    model = build(0)
    pairs = flat(model)
    corrupt(pairs)
    path = save_flat(tmp_path / "ckpt", pairs, layout)
    assert checkpoint_report(path).layout == layout
    for target in (model, abstract_bn_dropout, nnx.state(model)):
        diff = check_checkpoint(path, target)
        assert problems(diff) == meta, name
        assert not diff.values_compared
    full = verify_restore(path, model)
    assert problems(full) == restore, name
    assert full.values_compared


def test_flipped_values_count_from_independent_arithmetic(
    tmp_path: pathlib.Path,
) -> None:
    model = build(0)
    pairs = flat(model)
    _flip(pairs)
    path = save_flat(tmp_path / "ckpt", pairs, "nnx-state")
    entry = verify_restore(path, model).at("l1/kernel")[0]
    kernel = np.asarray(model.l1.kernel[...])
    assert entry.n_different == int(np.count_nonzero(kernel)) and entry.n_elements == 15
    assert entry.max_abs_diff == pytest.approx(2 * float(np.abs(kernel).max()))
    # A tolerance wide enough to cover the flip accepts it.
    assert verify_restore(path, model, atol=10.0).equal


def test_a_different_seed_is_caught_by_values_only(tmp_path: pathlib.Path) -> None:
    path = save(tmp_path / "ckpt", nnx.state(build(1)))
    assert check_checkpoint(path, build(0)).equal  # same structure
    diff = verify_restore(path, build(0))
    assert problems(diff) == [("l1/kernel", "value"), ("l2/kernel", "value")]


def test_a_different_variable_kind_is_invisible_to_checkpoints(
    tmp_path: pathlib.Path,
) -> None:
    # Orbax stores arrays, not variable types: the diff must say it did not check.
    pairs = flat(build(0))
    pairs[("bn", "var")] = nnx.Param(pairs[("bn", "var")][...])
    path = save_flat(tmp_path / "ckpt", pairs, "nnx-state")
    diff = verify_restore(path, build(0))
    assert diff.equal and not diff.kinds_compared
    assert any("Variable types were not compared" in n for n in diff.notes)


@pytest.mark.parametrize("layout", ["nnx-state", "pure-dict"])
def test_clean_pairs_report_nothing(tmp_path: pathlib.Path, layout: str) -> None:
    model = build(0)
    path = save_flat(tmp_path / "ckpt", flat(model), layout)
    abstract = nnx.eval_shape(lambda: build(0))
    for target in (
        model,
        abstract,
        nnx.state(model),
        nnx.to_pure_dict(nnx.state(model)),
    ):
        assert check_checkpoint(path, target).entries == ()
    diff = verify_restore(path, model)
    assert diff.equal and diff.values_compared and diff.n_common == 10
    assert any(
        "PRNG keys are compared as their uint32 key data" in n for n in diff.notes
    )


def test_report_reads_metadata(tmp_path: pathlib.Path) -> None:
    path = save(tmp_path / "ckpt", nnx.state(build(0)))
    report = checkpoint_report(path)
    by_path = {leaf.path: leaf for leaf in report.leaves}
    assert sorted(by_path) == [
        "bn/bias", "bn/mean", "bn/scale", "bn/var", "drop/rngs/count",
        "drop/rngs/key", "l1/bias", "l1/kernel", "l2/bias", "l2/kernel",
    ]  # fmt: skip
    assert (
        by_path["l1/kernel"].shape == (3, 5) and by_path["l1/kernel"].dtype == "float32"
    )
    assert by_path["drop/rngs/key"].shape == (2,)  # threefry key data
    assert by_path["drop/rngs/key"].dtype == "uint32"
    # 3*5+5 + 4*5 + 5*2+2 float32 elements, a uint32 count and 2 uint32 of key data.
    assert report.n_elements == 20 + 20 + 12 + 1 + 2
    assert report.nbytes == 4 * report.n_elements
    assert by_path["l1/kernel"].sharding.startswith("single device")
    payload = json.loads(report.to_json())
    assert (
        payload["schema"] == "nnx-introspect/checkpoint" and payload["n_arrays"] == 10
    )
    assert "no array was loaded" in report.to_markdown()


def test_sharded_save_report_and_restore(tmp_path: pathlib.Path) -> None:
    mesh = jax.make_mesh((8,), ("model",))
    model = nnx.Linear(8, 8, rngs=nnx.Rngs(0))
    state = nnx.state(model)
    sharded = jax.device_put(
        model.kernel[...], NamedSharding(mesh, PartitionSpec(None, "model"))
    )
    state["kernel"] = nnx.Param(sharded)
    path = save(tmp_path / "ckpt", state)
    leaf = {leaf.path: leaf for leaf in checkpoint_report(path).leaves}["kernel"]
    assert leaf.sharding == "P(None, 'model') on model=8"
    assert verify_restore(path, model).equal  # single-device target, resharded
    with jax.set_mesh(mesh):
        annotated = nnx.eval_shape(
            lambda: nnx.Linear(
                8,
                8,
                kernel_metadata={"out_sharding": ("model", None)},
                rngs=nnx.Rngs(0),
            )
        )
    diff = check_checkpoint(path, annotated)
    assert diff.equal
    assert any(
        "kernel: saved sharded as P(None, 'model'), the target expects P('model')" in n
        for n in diff.notes
    )


def test_huge_abstract_target_allocates_nothing(tmp_path: pathlib.Path) -> None:
    path = save(tmp_path / "ckpt", nnx.state(nnx.Linear(2, 3, rngs=nnx.Rngs(0))))
    huge = nnx.eval_shape(lambda: nnx.Linear(100_000, 10_000, rngs=nnx.Rngs(0)))
    before = {id(a) for a in jax.live_arrays()}
    with jax.transfer_guard("disallow"):
        diff = check_checkpoint(path, huge)
        report = checkpoint_report(path)
    assert {id(a) for a in jax.live_arrays()} - before == set()
    assert problems(diff) == [("bias", "shape"), ("kernel", "shape")]
    assert diff.at("kernel")[0].a == "(100000, 10000)"  # 10^9 elements, never built
    assert report.n_elements == 9


def test_targets_are_not_modified_and_nothing_is_printed(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = build(1)
    path = save(tmp_path / "ckpt", nnx.state(build(0)))
    before = snapshot(model)
    checkpoint_report(path)
    check_checkpoint(path, model)
    assert not verify_restore(path, model).equal
    assert_unchanged(before, model)
    assert capsys.readouterr().out == ""


def test_missing_path(tmp_path: pathlib.Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"`path` '.*nowhere' does not exist"):
        checkpoint_report(tmp_path / "nowhere")


def test_not_a_checkpoint_lists_the_checkpoints_inside(tmp_path: pathlib.Path) -> None:
    save(
        tmp_path / "run" / "7" / "default",
        nnx.state(nnx.Linear(1, 1, rngs=nnx.Rngs(0))),
    )
    with pytest.raises(ValueError, match=r"no `_METADATA` file.*at: 7/default; pass"):
        check_checkpoint(tmp_path / "run", nnx.Linear(1, 1, rngs=nnx.Rngs(0)))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"not an orbax PyTree checkpoint.*given to"):
        checkpoint_report(str(tmp_path / "empty"))


def test_verify_restore_needs_values(
    tmp_path: pathlib.Path, abstract_bn_dropout: Any
) -> None:
    path = save(tmp_path / "ckpt", nnx.state(build(0)))
    with pytest.raises(
        ValueError, match=r"`target` is abstract at 10 leaf\(s\).*check_checkpoint"
    ):
        verify_restore(path, abstract_bn_dropout)
    with pytest.raises(ValueError, match=r"`rtol` must be a finite nonnegative float"):
        verify_restore(path, build(0), rtol=-0.5)


def test_diff_of_two_checkpoints_across_layouts(tmp_path: pathlib.Path) -> None:
    state = nnx.state(build(0))
    a = save(tmp_path / "a", state)
    b = save(tmp_path / "b", nnx.to_pure_dict(state))
    c = save(tmp_path / "c", nnx.state(build(1)))
    assert is_checkpoint_dir(a) and not is_checkpoint_dir(tmp_path)
    assert diff_checkpoints(a, b).equal
    assert diff_checkpoints(a, c, values=False).equal
    assert not diff_checkpoints(a, c, values=False).values_compared
    diff = diff_checkpoints(a, c)
    assert problems(diff) == [("l1/kernel", "value"), ("l2/kernel", "value")]


def test_metadata_inventory_reads_shapes_only() -> None:
    tree = {
        "a": {"w": jax.ShapeDtypeStruct((3, 4), jnp.int4)},
        "b": jax.ShapeDtypeStruct((2,), jnp.bfloat16),
    }
    records = metadata_inventory(tree)
    assert [(r.path_str, r.size, r.nbytes) for r in records] == [
        ("a/w", 12, 12 * 4 // 8),  # int4 packed two to a byte
        ("b", 2, 2 * 2),
    ]
    assert all(r.array is None and r.kind is jax.ShapeDtypeStruct for r in records)


# --- Python numbers as variables (issue 8, item 7) ---------------------------------


class Numbers(nnx.Module):
    """Variables holding Python numbers, as flax allows, beside an array."""

    def __init__(self, scale: float = 2.5, step: int = 7) -> None:
        self.scale = nnx.Param(scale)
        self.step = nnx.BatchStat(step)
        self.tenth = nnx.Param(0.1)  # not exact in float32
        self.flag = nnx.Variable(True)
        self.kernel = nnx.Param(jnp.arange(3.0))


def test_python_numbers_match_their_own_checkpoint(tmp_path: pathlib.Path) -> None:
    model = Numbers()
    path = tmp_path / "ckpt"
    with ocp.StandardCheckpointer() as checkpointer:  # the standard flax way
        checkpointer.save(path, nnx.state(model))
    # What orbax writes: np.asarray(number), 64-bit whatever JAX's default...
    dtypes = {leaf.path: leaf.dtype for leaf in checkpoint_report(path).leaves}
    assert dtypes == {
        "flag": "bool",
        "kernel": "float32",
        "scale": "float64",
        "step": "int64",
        "tenth": "float64",
    }
    # ... and what it restores: the Python numbers themselves, or, into an
    # abstract state (where JAX holds them as weakly typed float32/int32), arrays
    # of the target's dtype.
    abstract = nnx.eval_shape(Numbers)
    with ocp.StandardCheckpointer() as checkpointer:
        plain = checkpointer.restore(path)
        typed = checkpointer.restore(path, nnx.state(abstract))
    assert type(plain["scale"]["value"]) is float and plain["tenth"]["value"] == 0.1
    assert typed["scale"][...].dtype == jnp.float32
    assert typed["step"][...].dtype == jnp.int32
    for target in (model, abstract, nnx.state(model)):
        diff = check_checkpoint(path, target)
        assert diff.entries == (), problems(diff)
    assert any("Python numbers (flag, scale, step ...)" in n for n in diff.notes), (
        diff.notes
    )
    full = verify_restore(path, model)
    assert full.equal and full.values_compared and full.n_common == 5
    # Values are compared exactly, as the Python numbers they were saved as.
    assert problems(verify_restore(path, Numbers(scale=2.5000000001))) == [
        ("scale", "value")
    ]
    assert problems(verify_restore(path, Numbers(step=8))) == [("step", "value")]


def test_a_real_dtype_mismatch_is_still_reported(tmp_path: pathlib.Path) -> None:
    stored = {
        "w": nnx.Param(np.ones(3, np.float64)),  # a float64 array, not a number
        "s": nnx.Param(np.asarray(1.5)),  # a 0-d float64 array
        "n": nnx.Param(2.5),  # a Python number
    }
    path = save(tmp_path / "ckpt", nnx.State(stored))
    dtypes = {leaf.path: leaf.dtype for leaf in checkpoint_report(path).leaves}
    assert dtypes == {"n": "float64", "s": "float64", "w": "float64"}
    target = {
        "w": nnx.Param(jnp.ones(3)),
        "s": nnx.Param(jnp.asarray(1.5)),
        "n": nnx.Param(jnp.asarray(2, jnp.int32)),
    }
    diff = check_checkpoint(path, target)
    assert [(e.path, e.problem, e.a, e.b) for e in diff.entries] == [
        ("n", "dtype", "int32", "float32"),  # the number as JAX holds it
        ("s", "dtype", "float32", "float64"),
        ("w", "dtype", "float32", "float64"),
    ]
    # A float32 array target for a stored Python number is what a restore gives.
    target["n"] = nnx.Param(jnp.asarray(2.5))
    assert problems(verify_restore(path, target)) == [("s", "dtype"), ("w", "dtype")]


# --- paths (issue 8, item 11) ------------------------------------------------------


def test_non_utf8_path_is_a_value_error(tmp_path: pathlib.Path) -> None:
    good = save(tmp_path / "ckpt", nnx.state(nnx.Linear(2, 2, rngs=nnx.Rngs(0))))
    raw = os.fsencode(tmp_path) + b"/run\xff"
    os.rename(os.fsencode(good), raw)  # orbax cannot even save to such a name
    message = (
        r"`path` b'.*/run\\xff' is not a UTF-8 path \(byte 0xff is not UTF-8\), "
        r"and orbax and tensorstore open UTF-8 paths only\. Rename the directory"
    )
    model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    for given in (os.fsdecode(raw), raw, pathlib.Path(os.fsdecode(raw))):
        with pytest.raises(ValueError, match=message):
            checkpoint_report(given)
        with pytest.raises(ValueError, match=message):
            check_checkpoint(given, model)
        with pytest.raises(ValueError, match=message):
            verify_restore(given, model)
    assert not is_checkpoint_dir(raw)


class _FsPath:
    """An ``os.PathLike`` that is not a ``pathlib.Path``."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __fspath__(self) -> Any:
        return self.value


def test_bytes_and_pathlike_paths_are_accepted(tmp_path: pathlib.Path) -> None:
    path = save(tmp_path / "ckpt", nnx.state(nnx.Linear(2, 2, rngs=nnx.Rngs(0))))
    expected = checkpoint_report(str(path))
    model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    for given in (os.fsencode(path), _FsPath(str(path)), _FsPath(os.fsencode(path))):
        assert checkpoint_report(given) == expected
        assert check_checkpoint(given, model).equal
        assert verify_restore(given, model).equal
    with pytest.raises(TypeError, match=r"`path` must be a str, bytes or os.PathLike"):
        checkpoint_report(_FsPath(3))
    with pytest.raises(TypeError, match=r"^`path` must be "):
        checkpoint_report(3)  # type: ignore[arg-type]


# --- more than one process ---------------------------------------------------------


class _NotAddressable:
    """Stands in for an array sharded over the devices of several processes."""

    shape = (3, 5)
    dtype = np.dtype(np.float32)
    is_fully_addressable = False


def test_arrays_other_processes_hold_are_refused() -> None:
    records = inventory(build(0))
    require_addressable(records)  # one process: every array is addressable
    index = [r.path_str for r in records].index("l1/kernel")
    partial = list(records)
    partial[index] = dataclasses.replace(records[index], array=_NotAddressable())
    with pytest.raises(
        ValueError,
        match=(
            r"`target` holds 1 array\(s\) that are not fully addressable from this "
            r"process \(first: 'l1/kernel'\), as in a multi-process `jax.distributed` "
            r"run, and `verify_restore` restores and compares on one process\. Run it "
            r"in a single process, use `check_checkpoint`.*`compare_states`\."
        ),
    ):
        require_addressable(tuple(partial))

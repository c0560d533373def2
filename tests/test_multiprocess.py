"""Two real ``jax.distributed`` processes: arrays no single process can read whole.

The test starts two CPU processes (4 devices each, one global mesh of 8) joined
over the loopback address, runs :mod:`tests._multiprocess_worker` in each, and
holds their answers against the single-process answer computed here, on this
process's 8 devices, from the same global values, and against NumPy arithmetic.

* ``param_sum`` and ``compare_states`` are correct on non-fully-addressable
  arrays: the same answer on both processes and here.
* ``param_fingerprint`` and ``verify_restore`` raise ``ValueError`` naming
  ``target`` (a content hash and a one-process restore need every byte on one
  host).
* A checkpoint both processes save together (each writes its own
  ``ocdbt.process_<i>/`` and ``array_metadatas/process_<i>``) reads whole in
  each of them and here, restores here to the global values (orbax's own
  restore agrees), and damage to process 1's files is an error naming the file
  exactly when orbax's own restore fails on it (both restores of the damaged
  copies run in a child process: a failed orbax restore leaves abandoned reads
  behind).

Every test here is held to leave no unraisable exception behind (issue 14).

The coordinator port is reserved before the children start: this process binds
it with ``SO_REUSEPORT`` and holds it until they exit, so no other program can
take it in between (the coordinator's gRPC server binds with ``SO_REUSEPORT``
too). No retry: a run either passes or fails with both children's output.
"""

import dataclasses
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from flax import nnx

from nnx_introspect import (
    check_checkpoint,
    checkpoint_report,
    compare_states,
    param_fingerprint,
    verify_restore,
)
from tests import _multiprocess_worker as worker
from tests.test_checkpoint_damage import nothing_left_behind

WORKER = Path(worker.__file__).resolve()
TIMEOUT_S = 120.0  # a bound, not a measurement: a healthy run takes ~15 s


@pytest.fixture(autouse=True)
def _leaves_nothing_behind() -> Iterator[None]:
    with nothing_left_behind():
        yield


@contextmanager
def reserved_loopback_port() -> Iterator[int]:
    """A free port on 127.0.0.1, held (``SO_REUSEPORT``, not listening) meanwhile."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])
    finally:
        sock.close()


def child_env() -> dict[str, str]:
    """This environment without the 8-device XLA flag the root conftest sets."""
    env = dict(os.environ)
    flags = [
        flag
        for flag in env.pop("XLA_FLAGS", "").split()
        if "xla_force_host_platform_device_count" not in flag
    ]
    if flags:
        env["XLA_FLAGS"] = " ".join(flags)
    env.pop("JAX_NUM_CPU_DEVICES", None)
    env["JAX_PLATFORMS"] = "cpu"
    root = str(WORKER.parent.parent / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def run_two_processes(
    tmp_path: Path, checkpoint: Path, save_dir: Path
) -> list[dict[str, Any]]:
    """Start both workers, wait (bounded), kill on failure; their RESULT lines."""
    logs = [tmp_path / f"process_{i}.log" for i in range(worker.NUM_PROCESSES)]
    procs: list[subprocess.Popen[bytes]] = []
    with reserved_loopback_port() as port:
        try:
            for i, log in enumerate(logs):
                with log.open("wb") as out:
                    procs.append(
                        subprocess.Popen(
                            [
                                sys.executable,
                                str(WORKER),
                                str(i),
                                str(port),
                                str(checkpoint),
                                str(save_dir),
                            ],
                            stdout=out,
                            stderr=subprocess.STDOUT,
                            env=child_env(),
                            cwd=tmp_path,
                        )
                    )
            deadline = time.monotonic() + TIMEOUT_S
            codes: list[int | None] = []
            for proc in procs:
                try:
                    codes.append(
                        proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                    )
                except subprocess.TimeoutExpired:
                    codes.append(None)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    texts = [log.read_text(errors="replace") for log in logs]
    report = "\n".join(
        f"--- process {i} (exit {code}) ---\n{text[-4000:]}"
        for i, (code, text) in enumerate(zip(codes, texts, strict=True))
    )
    assert codes == [0, 0], report
    results = []
    for text in texts:
        lines = [line for line in text.splitlines() if line.startswith("RESULT ")]
        assert len(lines) == 1, report
        results.append(json.loads(lines[0].removeprefix("RESULT ")))
    return results


@pytest.fixture(scope="module")
def mesh() -> jax.sharding.Mesh:
    assert jax.device_count() == 8  # the root conftest's virtual devices
    return jax.make_mesh(worker.MESH_SHAPE, worker.MESH_AXES, devices=jax.devices())


@dataclasses.dataclass(frozen=True)
class Run:
    results: list[dict[str, Any]]  # each process's RESULT line
    saved: Path  # the checkpoint both processes saved together


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, mesh: jax.sharding.Mesh) -> Run:
    tmp_path = tmp_path_factory.mktemp("multiprocess")
    checkpoint = tmp_path / "ckpt"
    model = worker.build(worker.global_values(0), mesh)
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(checkpoint, nnx.state(model))
    # The checkpoint is sound: in one process it verifies clean.
    assert verify_restore(checkpoint, model).equal
    saved = tmp_path / "saved_by_two"
    return Run(run_two_processes(tmp_path, checkpoint, saved), saved)


@pytest.fixture(scope="module")
def two_processes(run: Run) -> list[dict[str, Any]]:
    return run.results


def normalized(data: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(json.dumps(data))
    return result


def test_the_processes_really_split_the_arrays(
    two_processes: list[dict[str, Any]],
) -> None:
    assert [r["process_index"] for r in two_processes] == [0, 1]
    for result in two_processes:
        assert result["device_processes"] == [0, 0, 0, 0, 1, 1, 1, 1]
        assert result["kernel_fully_addressable"] is False


def test_every_process_gives_the_single_process_answer(
    two_processes: list[dict[str, Any]], mesh: jax.sharding.Mesh
) -> None:
    here = normalized(worker.measure(mesh))
    assert here["kernel_fully_addressable"] is True  # the reference is one process
    for result in two_processes:
        for key, value in here.items():
            if key != "kernel_fully_addressable":
                assert result[key] == value, key


def test_param_sum_is_the_exact_total(two_processes: list[dict[str, Any]]) -> None:
    values = worker.global_values(0)
    exact = sum(
        float(np.asarray(v).astype(np.float64).sum())
        for k, v in values.items()
        if k != "keys"  # PRNG keys are not summed
    )
    for result in two_processes:
        assert result["sum"] == result["sum_jit"] == ["float32", exact]


def test_compare_states_counts_each_difference_once(
    two_processes: list[dict[str, Any]],
) -> None:
    a, b = worker.global_values(0), worker.perturbed(worker.global_values(0))
    expected: dict[str, tuple[int, float, float | None]] = {}
    tolerant_expected: dict[str, int] = {}
    for name in ("bias", "kernel", "qkernel"):
        x, y = a[name].astype(np.float64), b[name].astype(np.float64)
        diff = np.abs(x - y)[x != y]
        ref = np.abs(x[x != y])
        rel = diff[ref != 0] / ref[ref != 0]
        expected[name] = (
            int(diff.size),
            float(diff.max()),
            float(rel.max()) if rel.size else None,
        )
        floating = name != "qkernel"  # integers compare exactly, tolerance or not
        n_tolerant = int((diff > 1.0).sum()) if floating else int(diff.size)
        if n_tolerant:
            tolerant_expected[name] = n_tolerant
    assert expected["kernel"][0] == 3 and expected["bias"][0] == 1
    for result in two_processes:
        assert result["same"]["equal"] and result["same"]["values_compared"]
        assert result["other_layout"]["equal"]
        for diff in (result["changed"], result["relaid_changed"], result["host_dict"]):
            got = {
                e["path"]: (e["n_different"], e["max_abs_diff"], e["max_rel_diff"])
                for e in diff["entries"]
                if e["problem"] == "value"
            }
            assert got == expected
        assert [(e["path"], e["problem"]) for e in result["host_dict"]["entries"]] == [
            ("bias", "value"),
            ("kernel", "value"),
            ("keys", "missing"),
            ("qkernel", "value"),
        ]
        # atol=1.0 forgives the 0.25 and 0.5 changes, not the larger ones.
        tolerant = {
            e["path"]: e["n_different"] for e in result["changed_atol"]["entries"]
        }
        assert tolerant == tolerant_expected and "bias" not in tolerant
        assert result["reversed"]["a_label"] == "b"
        assert len(result["reversed"]["entries"]) == 3


def test_fingerprint_and_verify_restore_refuse_with_a_fix(
    two_processes: list[dict[str, Any]],
) -> None:
    for result in two_processes:
        for key in ("fingerprint_error", "fingerprint_state_error"):
            message = result[key]
            assert message is not None, key
            assert message.startswith("`target` holds 4 array(s) sharded over several")
            assert "first: 'bias'" in message and "`compare_states`" in message
            assert "process_allgather" in message
        restore = result["verify_restore_error"]
        assert restore is not None
        assert restore.startswith(
            "`target` holds 5 array(s) that are not fully addressable"
        )
        assert "`compare_states`" in restore


def test_in_one_process_the_same_arrays_fingerprint_and_compare(
    mesh: jax.sharding.Mesh,
) -> None:
    # The refusals above are about processes, not about sharding: sharded over 8
    # devices of one process, the fingerprint exists and matches a host copy.
    values = worker.global_values(0)
    model = worker.build(values, mesh)
    host = {k: v for k, v in values.items() if k != "keys"}
    fp = param_fingerprint(model)
    assert [leaf.path for leaf in fp.leaves] == ["bias", "kernel", "qkernel", "scale"]
    assert fp.leaves[1].sum == float(values["kernel"].astype(np.float64).sum())
    diff = compare_states(model, host)
    assert [(e.path, e.problem) for e in diff.entries] == [("keys", "missing")]


# --- a checkpoint written by both processes ---------------------------------------

MESH = "on data=2, model=4"
# path -> global shape, stored dtype, packed bytes, save-time spec. Orbax stores a
# PRNG key array as its uint32 key data (a threefry key is two words); int4 packs
# two elements per byte.
SAVED = {
    "bias": ((16,), "float32", 16 * 4, "P('model')"),
    "embed": ((64, 256), "float32", 64 * 256 * 4, "P('data', 'model')"),
    "kernel": ((8, 16), "float32", 8 * 16 * 4, "P('data', 'model')"),
    "keys": ((8, 2), "uint32", 8 * 2 * 4, "P(('data', 'model'), None)"),
    "qkernel": ((8, 16), "int4", 8 * 16 // 2, "P('data', 'model')"),
    "scale": ((4,), "bfloat16", 4 * 2, "P()"),
}


def expected_leaves() -> list[dict[str, Any]]:
    values = worker.checkpoint_values(0)
    leaves = []
    for path, (shape, dtype, nbytes, spec) in SAVED.items():
        if path != "keys":  # the shapes are the global arrays' own
            assert values[path].shape == shape and values[path].dtype.name == dtype
        size = int(np.prod(shape))
        leaves.append(
            {
                "path": path,
                "shape": list(shape),
                "dtype": dtype,
                "size": size,
                "nbytes": nbytes,
                "sharding": f"{spec} {MESH}",
            }
        )
    return leaves


def test_every_process_reads_the_checkpoint_they_saved_together(
    run: Run,
) -> None:
    for result in run.results:
        report = result["saved_report"]
        assert report["path"] == str(run.saved)
        assert report["layout"] == "nnx-state"
        assert report["leaves"] == expected_leaves()
        assert result["saved_check_equal"] is True
        assert result["saved_check_entries"] == []
        message = result["saved_verify_error"]
        assert message is not None
        assert message.startswith(
            "`target` holds 6 array(s) that are not fully addressable"
        )


def restores_with_orbax(path: str | Path) -> bool:
    """Whether orbax's own restore, in one process, gives back the global values.

    Restores onto this process's 8 devices in the reference layout and compares
    with :func:`worker.checkpoint_values` in NumPy; never raises.
    """
    mesh = jax.make_mesh(worker.MESH_SHAPE, worker.MESH_AXES, devices=jax.devices())
    values = worker.checkpoint_values(0)
    state = nnx.state(worker.build(values, mesh))
    abstract = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state
    )
    want = {k: v for k, v in values.items() if k != "keys"}
    want["keys"] = np.asarray(
        jax.random.key_data(jax.random.split(jax.random.key(0), 8))
    )
    try:
        with ocp.StandardCheckpointer() as checkpointer:
            restored = checkpointer.restore(path, abstract)
        got = {
            str(k[0]): np.asarray(
                jax.random.key_data(v[...]) if k == ("keys",) else v[...]
            )
            for k, v in nnx.to_flat_state(restored)
        }
    except Exception:  # orbax and tensorstore raise anything, bare ones included
        return False
    return sorted(got) == sorted(want) and all(
        got[k].dtype == want[k].dtype and np.array_equal(got[k], want[k]) for k in want
    )


def test_one_process_reads_and_restores_what_two_saved(
    run: Run, mesh: jax.sharding.Mesh
) -> None:
    saved = run.saved
    # Both processes wrote their shards: process 1 has its own files.
    assert (saved / "array_metadatas" / "process_1").is_file()
    assert any((saved / "ocdbt.process_1" / "d").iterdir())
    report = checkpoint_report(saved)
    assert report.json_data()["leaves"] == expected_leaves()
    assert report.json_data() == run.results[0]["saved_report"]
    values = worker.checkpoint_values(0)
    assert restores_with_orbax(saved)  # orbax itself restores it in one process
    assert check_checkpoint(saved, worker.build(values, mesh)).equal
    # The values written by both processes restore and compare in one, into the
    # saved layout and another (orbax reshards).
    for layout in (0, 1):
        diff = verify_restore(saved, worker.build(values, mesh, layout=layout))
        assert diff.equal and diff.values_compared, layout
    # Both halves were read: changes in process 0's and process 1's rows count.
    other = worker.perturbed(values)
    other["embed"][40, 200] += 1.0  # a shard in one of process 1's data files
    diff = verify_restore(saved, worker.build(other, mesh))
    assert [(e.path, e.problem, e.n_different) for e in diff.entries] == [
        ("bias", "value", 1),
        ("embed", "value", 1),
        ("kernel", "value", 3),
        ("qkernel", "value", 1),
    ]


def _flip_first_byte(f: Path) -> None:
    data = bytearray(f.read_bytes())
    data[0] ^= 0xFF
    f.write_bytes(bytes(data))


def _truncate(f: Path) -> None:
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])


DAMAGES: dict[str, Callable[[Path], None]] = {
    "delete": Path.unlink,
    "truncate": _truncate,
    "flip": _flip_first_byte,
}


def verdicts(path: str) -> tuple[bool, bool | str]:
    """Orbax's verdict on ``path`` and ours: ``verify_restore``'s ``equal`` or error."""
    mesh = jax.make_mesh(worker.MESH_SHAPE, worker.MESH_AXES, devices=jax.devices())
    model = worker.build(worker.checkpoint_values(0), mesh)
    try:
        ours: bool | str = verify_restore(path, model).equal
    except ValueError as error:
        ours = str(error)
    return restores_with_orbax(path), ours


# A restore that fails on one chunk of a sharded array (here: data damaged in
# place, which only the read finds) abandons the reads of the other chunks in
# flight; orbax closes its event loop under them, and they surface later as
# "Event loop is closed" and "Exception ignored in <coroutine
# _read_array_index_and_device_put>" in whatever runs next (issue 14). So both
# orbax's and our restores of the damaged copies run in a child process.
ORACLE = """
import json, sys
from tests.test_multiprocess import verdicts
print(json.dumps({p: verdicts(p) for p in sys.argv[1:]}))
"""


def test_damage_to_process_1_files_is_named_or_harmless(
    run: Run, tmp_path: Path
) -> None:
    saved = run.saved
    rels = sorted(
        str(f.relative_to(saved))
        for f in saved.rglob("*")
        if f.is_file() and "process_1" in str(f.relative_to(saved))
    )
    data_files = [r for r in rels if r.startswith("ocdbt.process_1/d/")]
    assert "array_metadatas/process_1" in rels and data_files
    copies: dict[tuple[str, str], Path] = {}
    for rel in rels:
        for how, damage in DAMAGES.items():
            copy = tmp_path / f"{len(copies)}"
            shutil.copytree(saved, copy)
            damage(copy / rel)
            copies[rel, how] = copy
    result = subprocess.run(
        [sys.executable, "-c", ORACLE, *map(str, copies.values())],
        capture_output=True,
        text=True,
        cwd=WORKER.parent.parent,
        timeout=TIMEOUT_S,
        check=True,
    )
    child = json.loads(result.stdout.splitlines()[-1])
    verdict = {key: tuple(child[str(copy)]) for key, copy in copies.items()}
    for (rel, how), (orbax_restores, ours) in verdict.items():
        copy = copies[rel, how]
        if orbax_restores:  # never red for a damage orbax does not mind
            assert ours is True, (rel, how, ours)
        else:  # never green, and the message names the damaged file
            assert isinstance(ours, str), (rel, how)
            assert ours.startswith(
                f"`path` '{copy}' is a damaged orbax checkpoint, not an empty one: "
            )
            assert f"`{rel}`" in ours, (rel, how, ours)
    # Orbax reads every `array_metadatas/process_<i>` file present (a missing
    # one is not needed) and process 1's data file, through the merged index
    # that supersedes process 1's own `manifest.ocdbt`. Process 1 may also have
    # written its own index nodes to files of their own under `d/` (whether it
    # does depends on timing): the merged index replaces those too, so they are
    # held above to agree with orbax, and not pinned here.
    holding = [
        f
        for f in data_files
        if "holds data of `embed.value`" in str(verdict[f, "delete"][1])
    ]
    assert holding, {f: verdict[f, "delete"] for f in data_files}
    pinned = {k: v[0] for k, v in verdict.items() if k[0] not in data_files}
    assert pinned == {
        ("array_metadatas/process_1", "delete"): True,
        ("array_metadatas/process_1", "truncate"): False,
        ("array_metadatas/process_1", "flip"): False,
        ("ocdbt.process_1/manifest.ocdbt", "delete"): True,
        ("ocdbt.process_1/manifest.ocdbt", "truncate"): True,
        ("ocdbt.process_1/manifest.ocdbt", "flip"): True,
    }
    assert "is not valid JSON" in str(verdict["array_metadatas/process_1", "flip"][1])
    for data_file in holding:
        assert [verdict[data_file, how][0] for how in DAMAGES] == [False] * 3
        assert f"`{data_file}` (holds data of `embed.value`) is missing" in str(
            verdict[data_file, "delete"][1]
        )
        assert re.search(
            rf"`{data_file}` \(holds data of `embed.value`\) is truncated: \d+ "
            r"bytes, the array store references \d+",
            str(verdict[data_file, "truncate"][1]),
        )
        # Same length, wrong bytes: only the restore finds it, and names the
        # chunk (process 1's rows) and the file of the process that wrote it.
        assert re.search(
            r"the data of `embed.value` could not be read \(ZSTD_decompress.*\): "
            rf"chunk `[0-9.]+`, stored in `{data_file}`\. Restore it",
            str(verdict[data_file, "flip"][1]),
        )

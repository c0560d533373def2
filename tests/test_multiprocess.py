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

The coordinator port is reserved before the children start: this process binds
it with ``SO_REUSEPORT`` and holds it until they exit, so no other program can
take it in between (the coordinator's gRPC server binds with ``SO_REUSEPORT``
too). No retry: a run either passes or fails with both children's output.
"""

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from flax import nnx

from nnx_introspect import compare_states, param_fingerprint, verify_restore
from tests import _multiprocess_worker as worker

WORKER = Path(worker.__file__).resolve()
TIMEOUT_S = 120.0  # a bound, not a measurement: a healthy run takes ~15 s


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


def run_two_processes(tmp_path: Path, checkpoint: Path) -> list[dict[str, Any]]:
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


@pytest.fixture(scope="module")
def two_processes(
    tmp_path_factory: pytest.TempPathFactory, mesh: jax.sharding.Mesh
) -> list[dict[str, Any]]:
    tmp_path = tmp_path_factory.mktemp("multiprocess")
    checkpoint = tmp_path / "ckpt"
    model = worker.build(worker.global_values(0), mesh)
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(checkpoint, nnx.state(model))
    # The checkpoint is sound: in one process it verifies clean.
    assert verify_restore(checkpoint, model).equal
    return run_two_processes(tmp_path, checkpoint)


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

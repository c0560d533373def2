"""One of the two ``jax.distributed`` processes that ``test_multiprocess.py`` starts.

Not collected by pytest (no ``test_`` prefix). Run as::

    python tests/_multiprocess_worker.py PROCESS_ID PORT CHECKPOINT_DIR SAVE_DIR

Each process owns 4 CPU devices; together they form one global mesh of 8
(``data=2, model=4``: process 0 holds the ``data=0`` row, process 1 the other).
The models are built from :func:`global_values`, the same NumPy arrays the test
process uses for its single-process answer, and each process prints one line
``RESULT <json>``. After the measurements both processes save the globally
sharded model together with orbax into ``SAVE_DIR`` (each writes its own shards:
``ocdbt.process_<i>/`` and ``array_metadatas/process_<i>``), then each reads
that checkpoint back with the library. Everything talks over the loopback address only: the
coordinator binds ``127.0.0.1`` and the gloo CPU collectives are created on
``127.0.0.1`` too (by default gloo uses the machine's host name).

Importing the module starts nothing (no backend, no distributed run), so the
test process imports :func:`global_values` and :func:`measure` from it.
"""

import json
import sys
from collections.abc import Callable
from typing import Any

import jax
import ml_dtypes
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx
from jax._src import distributed, xla_bridge
from jax._src.lib import _jax  # type: ignore[attr-defined]
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from nnx_introspect import (
    check_checkpoint,
    checkpoint_report,
    compare_states,
    param_fingerprint,
    param_sum,
    verify_restore,
)

NUM_PROCESSES = 2
DEVICES_PER_PROCESS = 4
MESH_SHAPE = (2, 4)
MESH_AXES = ("data", "model")

# name -> (partition spec of the reference layout, partition spec of another layout)
SPECS: dict[str, tuple[tuple[Any, ...], tuple[Any, ...]]] = {
    "kernel": (("data", "model"), (None, ("data", "model"))),
    # Sharded over `model` only: every process holds a full replica.
    "bias": (("model",), ((),)),
    "qkernel": (("data", "model"), ("model", None)),
    "scale": ((), ("model",)),
    "keys": ((("data", "model"),), ((),)),
    # Only in the checkpoint both processes save (see `checkpoint_values`).
    "embed": (("data", "model"), (None, "model")),
}


def global_values(seed: int) -> dict[str, np.ndarray]:
    """The global arrays (keys as seeds), on grids where every float sum is exact."""

    rng = np.random.default_rng(seed)
    return {
        "kernel": (rng.integers(-64, 65, (8, 16)) / 4).astype(np.float32),
        "bias": (rng.integers(-16, 17, (16,)) / 8).astype(np.float32),
        "qkernel": rng.integers(-8, 8, (8, 16)).astype(ml_dtypes.int4),
        "scale": (rng.integers(1, 9, (4,)) / 8).astype(ml_dtypes.bfloat16),
        "keys": np.asarray([seed], np.uint32),
    }


def checkpoint_values(seed: int) -> dict[str, np.ndarray]:
    """:func:`global_values` and ``embed``, the arrays both processes save.

    ``embed`` is large and random enough that every shard (32 x 64 float32,
    8 KiB) lands in a data file of the process that writes it: orbax inlines
    values up to 1 KiB in the array index, where the small arrays stay.
    """
    rng = np.random.default_rng(seed + 1)
    embed = rng.standard_normal((64, 256)).astype(np.float32)
    return {**global_values(seed), "embed": embed}


def perturbed(values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``values`` with elements changed in both processes' halves of the mesh."""
    out = {k: v.copy() for k, v in values.items()}
    out["kernel"][0, 1] += 0.25  # process 0's row
    out["kernel"][5, 15] -= 2.0  # process 1's row
    out["kernel"][7, 0] = -out["kernel"][7, 0] - 1.0
    out["bias"][3] += 0.5  # replicated on both processes: counted once
    out["qkernel"][6, 2] = 7 if out["qkernel"][6, 2] != 7 else -8
    return out


def build(values: dict[str, np.ndarray], mesh: Any, layout: int = 0) -> Any:
    """An NNX module holding ``values`` as global arrays laid out by ``SPECS``."""

    def place(name: str) -> jax.Array:
        sharding = NamedSharding(mesh, P(*SPECS[name][layout]))
        host = values[name]
        if name == "keys":  # typed PRNG keys, built by a global computation
            seed = int(host[0])
            make = jax.jit(
                lambda: jax.random.split(jax.random.key(seed), 8),
                out_shardings=sharding,
            )
            keys: jax.Array = make()
            return keys
        return jax.make_array_from_callback(host.shape, sharding, lambda i: host[i])

    class Sharded(nnx.Module):
        def __init__(self) -> None:
            self.kernel = nnx.Param(place("kernel"))
            self.bias = nnx.Param(place("bias"))
            self.qkernel = nnx.Param(place("qkernel"))
            self.scale = nnx.Param(place("scale"))
            self.keys = nnx.RngKey(place("keys"))
            if "embed" in values:
                self.embed = nnx.Param(place("embed"))

    return Sharded()


def measure(mesh: Any) -> dict[str, Any]:
    """What every process (or the single test process) reports, as JSON data."""

    values = global_values(0)
    model = build(values, mesh)
    twin = build(values, mesh)
    other = build(perturbed(values), mesh)
    relaid = build(values, mesh, layout=1)
    host_other = {k: v for k, v in perturbed(values).items() if k != "keys"}

    def total(x: jax.Array) -> list[Any]:
        return [x.dtype.name, float(x)]

    return {
        "kernel_fully_addressable": bool(model.kernel[...].is_fully_addressable),
        "sum": total(param_sum(model)),
        "sum_jit": total(jax.jit(param_sum)(nnx.state(model))),
        "same": compare_states(model, twin).json_data(),
        "changed": compare_states(model, other).json_data(),
        "changed_atol": compare_states(model, other, atol=1.0).json_data(),
        "other_layout": compare_states(model, relaid).json_data(),
        "relaid_changed": compare_states(relaid, other).json_data(),
        "host_dict": compare_states(model, host_other).json_data(),
        "reversed": compare_states(other, model).reversed().json_data(),
    }


def _loopback_cpu_backend() -> None:
    """Make the CPU backend's gloo collectives listen on 127.0.0.1 only."""

    def factory() -> Any:
        collectives = _jax.make_gloo_tcp_collectives(
            distributed_client=distributed.global_state.client, hostname="127.0.0.1"
        )
        return xla_bridge.make_cpu_client(collectives=collectives)

    xla_bridge.register_backend_factory("cpu", factory, priority=0)


def save_and_read_back(model: Any, path: str) -> dict[str, Any]:
    """Save ``model`` from every process into ``path``, then read it back here.

    Every process calls ``save`` with its own shards (orbax synchronizes them
    and process 0 finalizes the checkpoint); ``close`` waits until it is done.
    """
    checkpointer = ocp.StandardCheckpointer()
    try:
        checkpointer.save(path, nnx.state(model))
        checkpointer.wait_until_finished()
    finally:
        checkpointer.close()
    check = check_checkpoint(path, model)
    result: dict[str, Any] = {
        "saved_report": checkpoint_report(path).json_data(),
        "saved_check_equal": check.equal,
        "saved_check_entries": [(e.path, e.problem) for e in check.entries],
    }
    try:
        verify_restore(path, model)
        result["saved_verify_error"] = None
    except ValueError as error:
        result["saved_verify_error"] = str(error)
    return result


def main(process_id: int, port: int, checkpoint: str, save_dir: str) -> None:

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", DEVICES_PER_PROCESS)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    address = f"127.0.0.1:{port}"
    jax.distributed.initialize(
        coordinator_address=address,
        coordinator_bind_address=address,
        num_processes=NUM_PROCESSES,
        process_id=process_id,
        initialization_timeout=60,
    )
    _loopback_cpu_backend()

    mesh = jax.make_mesh(MESH_SHAPE, MESH_AXES, devices=jax.devices())
    result = measure(mesh)
    result["process_index"] = jax.process_index()
    result["device_processes"] = [d.process_index for d in mesh.devices.flat]
    model = build(global_values(0), mesh)
    calls: list[tuple[str, Callable[[], object]]] = [
        ("fingerprint_error", lambda: param_fingerprint(model)),
        ("verify_restore_error", lambda: verify_restore(checkpoint, model)),
        ("fingerprint_state_error", lambda: param_fingerprint(nnx.state(model))),
    ]
    for name, call in calls:
        try:
            call()
            result[name] = None
        except ValueError as error:
            result[name] = str(error)
    result.update(save_and_read_back(build(checkpoint_values(0), mesh), save_dir))
    print("RESULT " + json.dumps(result), flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])

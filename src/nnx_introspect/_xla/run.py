"""A compiled program run on this process's devices: :func:`run_compiled`.

The check of every deviceless figure: the very program the report compiled,
run where its devices are. Its inputs are made on the devices in the
shardings the compiled program takes (zeros: token ids and positions in
range; PRNG keys from seed 0), one warm-up run absorbs the first call's costs,
then ``runs`` timed runs each wait for the program's outputs
(``jax.block_until_ready``). A donated input is replaced by the output that
took its buffer (the updated parameters, optimizer state or KV cache, as a
training or serving loop feeds them back); a donated input no output matches
is made anew before the next run, outside the timing.

Afterwards each device's allocator statistics (``memory_stats()``) are read:
what they cover is the backend's (on a TPU they leave out a program's
temporaries; XLA:CPU keeps none), and the report says so.
"""

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from nnx_introspect._text import error_line

__all__ = ["run_compiled"]


def _maker(infos: Sequence[Any], shardings: Sequence[Any]) -> Callable[[], list[Any]]:
    """A function making each input on its devices, in its sharding."""

    def one(info: Any) -> Any:
        aval = info._aval  # jax.stages.ArgInfo keeps the abstract value here
        dtype, shape = aval.dtype, tuple(aval.shape)
        if jnp.issubdtype(dtype, jax.dtypes.prng_key):
            keys = jax.random.split(jax.random.key(0), max(1, math.prod(shape)))
            return keys[0] if shape == () else keys.reshape(shape)
        return jnp.zeros(shape, dtype)

    # One jitted maker per set of devices: a program may take inputs on
    # different devices (a serving step's scalar on one device beside its
    # weights on the mesh), and one jit cannot place outputs on both.
    groups: dict[tuple[int, ...], list[int]] = {}
    for index, sharding in enumerate(shardings):
        ids = tuple(sorted(d.id for d in sharding.device_set))
        groups.setdefault(ids, []).append(index)
    makers = [
        (
            indices,
            jax.jit(
                lambda indices=indices: [one(infos[i]) for i in indices],
                out_shardings=[shardings[i] for i in indices],
            ),
        )
        for indices in groups.values()
    ]

    def make() -> list[Any]:
        out: list[Any] = [None] * len(infos)
        for indices, made in makers:
            for i, value in zip(indices, made(), strict=True):
                out[i] = value
        return out

    return make


def _same(a: Any, b: Any) -> bool:
    """Whether an output can stand for an input: shape, dtype and sharding."""
    if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
        return False
    try:
        return bool(a.sharding.is_equivalent_to(b.sharding, len(a.shape)))
    except Exception:  # shardings of different kinds
        return False


def _feed_back(
    inputs: list[Any], donated: Sequence[int], outputs: Sequence[Any]
) -> list[int]:
    """Each donated input replaced by the first unused output like it.

    Returns:
        The donated inputs no output matched (to be made anew).
    """
    used: set[int] = set()
    missing = []
    for index in donated:
        for at, out in enumerate(outputs):
            if at not in used and _same(out, inputs[index]):
                inputs[index] = out
                used.add(at)
                break
        else:
            missing.append(index)
    return missing


def _allocator(devices: Sequence[Any]) -> dict[str, int] | None:
    """The allocators' figures over ``devices``: peak and limit, or ``None``."""
    stats = [device.memory_stats() for device in devices]
    if not stats or any(not s for s in stats):
        return None
    out: dict[str, int] = {}
    for key, pick in (
        ("peak_bytes_in_use", max),
        ("bytes_in_use", max),
        ("bytes_limit", min),
    ):
        values = [int(s[key]) for s in stats if key in s]
        if values:
            out[key] = pick(values)
    return out or None


def run_compiled(compiled: Any, runs: int) -> dict[str, Any]:
    """Run ``compiled`` on its devices: one warm-up, then ``runs`` timed runs.

    Args:
        compiled: ``jax.jit(f).lower(...).compile()`` for this process's devices.
        runs: How many timed runs (at least 1).

    Returns:
        JSON data: ``seconds`` (each timed run's wall clock),
        ``warmup_seconds``, ``runs``, ``platform``, ``device_kind``,
        ``devices`` and ``allocator`` (the largest ``peak_bytes_in_use`` and
        ``bytes_in_use``, the smallest ``bytes_limit`` over the program's
        devices; ``None`` where the backend keeps no statistics); or, when a
        run fails on the device (a program that compiled but cannot allocate
        its buffers), ``error``: the runtime's words.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> step = jax.jit(lambda w, x: (w + x.sum(), x), donate_argnums=0)
        >>> args = jnp.zeros((4, 4)), jnp.zeros((8,), jnp.int32)
        >>> compiled = step.lower(*args).compile()
        >>> measured = run_compiled(compiled, 3)
        >>> measured["runs"], len(measured["seconds"]), measured["platform"]
        (3, 3, 'cpu')
        >>> measured["allocator"] is None  # XLA:CPU keeps no allocator statistics
        True
    """
    infos = jax.tree.leaves(compiled.args_info)
    # an argument the program does not use (pruned) has no sharding: None
    shardings = jax.tree.leaves(compiled.input_shardings, is_leaf=lambda s: s is None)
    if len(infos) != len(shardings):  # pragma: no cover - jax keeps them aligned
        raise RuntimeError("the compiled program's inputs and shardings disagree")
    args_tree = jax.tree.structure(compiled.args_info)
    donated = [i for i, info in enumerate(infos) if info.donated]
    devices = sorted(
        {d for s in shardings if s is not None for d in s.device_set},
        key=lambda d: d.id,
    )
    shardings = [
        jax.sharding.SingleDeviceSharding(devices[0]) if s is None else s
        for s in shardings
    ]
    make = _maker(infos, shardings)
    inputs = make()
    seconds: list[float] = []
    try:
        for run in range(runs + 1):
            args, kwargs = jax.tree.unflatten(args_tree, inputs)
            began = time.perf_counter()
            out = compiled(*args, **kwargs)
            jax.block_until_ready(out)
            seconds.append(time.perf_counter() - began)
            missing = _feed_back(inputs, donated, jax.tree.leaves(out))
            if missing and run < runs:
                fresh = make()
                for index in missing:
                    inputs[index] = fresh[index]
    except Exception as error:  # the runtime's: out of memory at run time...
        return {
            "error": error_line(error),
            "runs": runs,
            "platform": devices[0].platform,
            "device_kind": devices[0].device_kind,
            "devices": len(devices),
        }
    return {
        "seconds": seconds[1:],
        "warmup_seconds": seconds[0],
        "runs": runs,
        "platform": devices[0].platform,
        "device_kind": devices[0].device_kind,
        "devices": len(devices),
        "allocator": _allocator(devices),
    }

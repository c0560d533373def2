"""Value comparison of two same-shape leaves, on one host or across processes."""

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

from nnx_introspect._compare.diff import DiffEntry
from nnx_introspect._compare.inputs import is_key_dtype


def _host(value: Any) -> np.ndarray:
    if is_key_dtype(getattr(value, "dtype", None)):
        value = jax.random.key_data(value)
    return np.asarray(jax.device_get(value))


def is_global(value: object) -> bool:
    """Whether ``value`` is a concrete array not fully addressable from this process.

    That is an array sharded over devices of several processes
    (``jax.distributed``): no process can read all of it.
    """
    return (
        isinstance(value, jax.Array)
        and not isinstance(value, jax.core.Tracer)
        and not value.is_fully_addressable
    )


# Per-shard statistics: n_bad, has_rel (ints), max_abs, max_rel (floats, -inf when
# there is nothing to take the max of). Combining two is sum / or / max / max, so
# the statistics of disjoint parts combine into those of the whole, exactly.
_Stats = tuple[int, bool, float, float]
_NO_STATS: _Stats = (0, False, -math.inf, -math.inf)


def _stats(xa: np.ndarray, ya: np.ndarray, rtol: float, atol: float) -> _Stats:
    """Differing elements, the largest ``|x - y|`` and ``|x - y| / |x|`` among them."""
    if xa.size == 0 or np.array_equal(xa, ya):  # the common case, without copies
        return _NO_STATS
    inexact = bool(jnp.issubdtype(xa.dtype, jnp.inexact))
    wide = (
        np.complex128 if jnp.issubdtype(xa.dtype, jnp.complexfloating) else np.float64
    )
    xw, yw = xa.astype(wide), ya.astype(wide)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(xw - yw)
        if inexact:
            close = (diff <= atol + rtol * np.abs(xw)) | (xw == yw)
            close |= np.isnan(xw) & np.isnan(yw)
        else:
            close = xa == ya
    bad = ~close
    n_bad = int(np.count_nonzero(bad))
    if n_bad == 0:
        return _NO_STATS
    bad_diff = diff[bad]
    ref = np.abs(xw[bad])
    nonzero = ref != 0
    has_rel = bool(nonzero.any())
    max_rel = float(np.max(bad_diff[nonzero] / ref[nonzero])) if has_rel else -math.inf
    return n_bad, has_rel, float(np.max(bad_diff)), max_rel


def _combine(parts: Sequence[_Stats]) -> _Stats:
    if not parts:
        return _NO_STATS
    maxes = np.asarray([[p[2], p[3]] for p in parts], np.float64)
    top = np.max(maxes, axis=0)  # NaN anywhere stays NaN, as in one np.max
    return (
        sum(p[0] for p in parts),
        any(p[1] for p in parts),
        float(top[0]),
        float(top[1]),
    )


def _pack(stats: _Stats) -> np.ndarray:
    ints = np.asarray([stats[0], int(stats[1])], np.int64).tobytes()
    floats = np.asarray([stats[2], stats[3]], np.float64).tobytes()
    return np.frombuffer(ints + floats, np.uint8)


def _unpack(packed: np.ndarray) -> _Stats:
    raw = np.ascontiguousarray(packed, np.uint8).tobytes()
    ints = np.frombuffer(raw[:16], np.int64)
    floats = np.frombuffer(raw[16:], np.float64)
    return int(ints[0]), bool(ints[1]), float(floats[0]), float(floats[1])


def _same_layout(x: jax.Array, y: Any) -> jax.Array:
    """``y`` laid out like the global array ``x``, without gathering either."""
    sharding = x.sharding
    if isinstance(y, jax.Array) and not is_global(y):
        y = np.asarray(jax.device_get(y))  # a local copy: the same on every process
    if not isinstance(y, jax.Array):
        host = np.asarray(y)
        return jax.make_array_from_callback(x.shape, sharding, lambda i: host[i])
    if y.sharding.is_equivalent_to(sharding, x.ndim):
        return y
    out: jax.Array = jax.jit(lambda v: v, out_shardings=sharding)(y)
    return out


def _global_stats(x: Any, y: Any, rtol: float, atol: float) -> _Stats:
    """:func:`_stats` of two arrays sharded over several processes.

    Each process reads only its own shards (one replica of each), then the
    processes exchange their few statistics (``process_allgather`` of 32 bytes),
    so every process returns the same figures as a single-host comparison, and
    no array is gathered to one host.
    """
    if is_key_dtype(getattr(x, "dtype", None)):
        x, y = jax.random.key_data(x), jax.random.key_data(y)
    if is_global(x):
        y = _same_layout(x, y)
    else:
        x = _same_layout(y, x)
    local = [
        _stats(np.asarray(xs.data), np.asarray(ys.data), rtol, atol)
        for xs, ys in zip(x.addressable_shards, y.addressable_shards, strict=True)
        if xs.replica_id == 0
    ]
    gathered = multihost_utils.process_allgather(_pack(_combine(local)))
    return _combine([_unpack(row) for row in np.asarray(gathered)])


def value_entry(
    path: str, x: Any, y: Any, *, rtol: float, atol: float
) -> DiffEntry | None:
    """Compare two same-shape, same-dtype values; a ``"value"`` entry or ``None``.

    Floating and complex values are close when ``|x - y| <= atol + rtol * |x|``
    (``x`` is the reference); NaN matches NaN and equal infinities match.
    Integers, booleans and PRNG keys (their key data) must be equal exactly.
    Arrays sharded over several processes are compared shard by shard where
    they live, and every process gets the same entry.
    """
    if is_global(x) or is_global(y):
        n_bad, has_rel, max_abs, max_rel = _global_stats(x, y, rtol, atol)
    else:
        n_bad, has_rel, max_abs, max_rel = _stats(_host(x), _host(y), rtol, atol)
    if n_bad == 0:
        return None
    shape = np.shape(x)
    if is_key_dtype(getattr(x, "dtype", None)):  # compared as key data
        shape = jax.eval_shape(jax.random.key_data, x).shape
    n = math.prod(shape)
    inexact = bool(jnp.issubdtype(jnp.result_type(x), jnp.inexact))
    return DiffEntry(
        path=path,
        problem="value",
        a="values",
        b="values",
        message=(
            f"{path}: {n_bad} of {n} element(s) differ"
            + (f" beyond rtol={rtol:g}, atol={atol:g}" if inexact else "")
            + f" (max |a-b| = {max_abs:.3g})."
        ),
        n_different=n_bad,
        n_elements=n,
        max_abs_diff=max_abs,
        max_rel_diff=max_rel if has_rel else None,
    )

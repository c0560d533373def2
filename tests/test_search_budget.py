"""``max_batch``'s budget with no ``topology``: the present devices' on a TPU or GPU.

A process on a TPU or GPU compiles for the devices it has, so the search holds
every point to their memory, and says so; on a CPU the budget must be given.
The figures are the data sheet's (a v5e chip: 15.75 of its 16 GiB for a
program; an H100 80GB: XLA's 84,942,979,072 bytes, of which JAX's allocator
takes 75%), or the allocator's own ``bytes_limit`` for a device no table lists.
"""

from types import SimpleNamespace
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from nnx_introspect import ArgumentError, max_batch
from nnx_introspect._sweep.batch import sizes

X = jax.ShapeDtypeStruct((8, 16), jnp.float32)
H100_BYTES = 84_942_979_072


def mlp(rngs: nnx.Rngs) -> nnx.Sequential:
    return nnx.Sequential(
        nnx.Linear(16, 64, rngs=rngs), nnx.relu, nnx.Linear(64, 16, rngs=rngs)
    )


def _devices(kind: str, n: int, stats: dict[str, int] | None = None) -> list[Any]:
    return [SimpleNamespace(device_kind=kind, memory_stats=lambda: stats)] * n


def test_a_tpu_gives_its_chips_hbm() -> None:
    found = sizes.present_budget("tpu", _devices("TPU v5 lite", 8))
    assert found is not None
    assert found[0] == round(15.75 * 2**30)
    assert found[1].startswith("the present devices' (8 x TPU v5 lite, v5e-8): ")
    assert "15.75 GiB of HBM XLA:TPU lets a program use" in found[1]


def test_a_gpu_gives_the_allocators_share(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)
    monkeypatch.setenv("XLA_CLIENT_MEM_FRACTION", ".9")
    found = sizes.present_budget("gpu", _devices("NVIDIA H100 80GB HBM3", 8))
    assert found is not None and found[0] == int(H100_BYTES * 0.9)
    assert "(8 x NVIDIA H100 80GB HBM3, h100-8)" in found[1]


def test_a_device_no_table_lists_gives_its_allocators_limit() -> None:
    found = sizes.present_budget("gpu", _devices("Some GPU", 2, {"bytes_limit": 999}))
    assert found == (
        999,
        "the present devices' (2 x Some GPU): the 999 B their allocator lets this "
        "process use (bytes_limit)",
    )
    assert sizes.present_budget("gpu", _devices("Some GPU", 2, {})) is None


def test_a_cpu_has_none() -> None:
    assert sizes.present_budget("cpu", _devices("cpu", 8)) is None
    assert jax.default_backend() == "cpu"  # the suite's: the budget is required
    with pytest.raises(ArgumentError, match=r"on a TPU or GPU; they are CPUs") as e:
        max_batch(mlp, "data=8", X, loss=None)
    assert e.value.argument == "max_device_bytes"


def test_the_search_holds_every_point_to_the_present_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    basis = "the present devices' (8 x TPU v5 lite, v5e-8): 40,000 bytes, for a test"
    monkeypatch.setattr(sizes, "present_budget", lambda: (40_000, basis))
    found = max_batch(mlp, "data=8", X, loss=None, hi=64)
    assert found.max_device_bytes == 40_000 and found.budget_basis == basis
    assert all(fits == (peak <= 40_000) for _, peak, fits in found.points)
    assert found.verdict.endswith(f"; the budget is {basis}")
    assert f"per device: {basis}." in " ".join(found.table().notes)
    # a topology or a budget given wins over the present devices
    given = max_batch(mlp, "data=8", X, loss=None, hi=8, max_device_bytes=30_000)
    assert given.budget_basis == "the budget given"


def test_the_note_says_what_hi_is() -> None:
    found = max_batch(mlp, "data=8", X, loss=None, max_device_bytes=12_000)
    note = next(n for n in found.table().notes if "The sizes the search may try" in n)
    assert f"from lo = 8 to hi = {found.hi:,} (the largest batch whose shards" in note
    assert "no larger batch can fit" in note
    capped = max_batch(mlp, "data=8", X, loss=None, max_device_bytes=12_000, hi=16)
    assert "to hi = 16 (given)" in " ".join(capped.table().notes)

"""The variable inventory: paths, kinds, shapes, dtypes and packed byte sizes."""

from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_introspect._inventory import dtype_nbytes, inventory, path_sort_key, path_str


def test_records_of_bn_dropout(bn_dropout: Any) -> None:
    records = {r.path_str: r for r in inventory(bn_dropout)}
    assert set(records) == {
        "bn/bias",
        "bn/mean",
        "bn/scale",
        "bn/var",
        "drop/rngs/count",
        "drop/rngs/key",
        "l1/bias",
        "l1/kernel",
        "l2/bias",
        "l2/kernel",
    }
    kernel = records["l1/kernel"]
    assert kernel.kind is nnx.Param and kernel.kind_name == "Param"
    assert kernel.shape == (3, 5) and kernel.size == 15 and kernel.nbytes == 60
    assert kernel.dtype == np.float32 and not kernel.is_abstract
    assert records["bn/mean"].kind is nnx.BatchStat
    assert records["drop/rngs/key"].kind is nnx.RngKey
    assert records["drop/rngs/key"].nbytes == 8  # two uint32 words of threefry key data
    assert records["drop/rngs/count"].kind is nnx.RngCount
    assert records["drop/rngs/count"].nbytes == 4


def test_abstract_records_have_no_value(
    abstract_bn_dropout: Any, bn_dropout: Any
) -> None:
    abstract, concrete = inventory(abstract_bn_dropout), inventory(bn_dropout)
    assert all(r.is_abstract for r in abstract)
    for a, c in zip(abstract, concrete, strict=True):
        assert (a.path, a.kind, a.shape, a.dtype, a.size, a.nbytes) == (
            c.path,
            c.kind,
            c.shape,
            c.dtype,
            c.size,
            c.nbytes,
        )


@pytest.mark.parametrize(
    ("dtype", "size", "expected"),
    [
        (jnp.float32, 10, 40),
        (jnp.bfloat16, 10, 20),
        (jnp.int8, 3, 3),
        (jnp.int4, 10, 5),  # half a byte per element, as XLA packs it
        (jnp.int4, 3, 2),  # rounded up to whole bytes
        (jnp.uint4, 1, 1),
        (jnp.float64, 2, 16),
        (jnp.bool_, 5, 5),
    ],
)
def test_dtype_nbytes(dtype: Any, size: int, expected: int) -> None:
    assert dtype_nbytes(jnp.dtype(dtype), size) == expected


def test_key_dtype_nbytes() -> None:
    keys = jax.random.split(jax.random.key(0), 3)
    assert dtype_nbytes(keys.dtype, 3) == 24 == jax.random.key_data(keys).nbytes


def test_int4_and_bf16_variables() -> None:
    class Quant(nnx.Module):
        def __init__(self) -> None:
            self.w = nnx.Param(jnp.zeros((4, 6), jnp.int4))
            self.s = nnx.Param(jnp.zeros((6,), jnp.bfloat16))

    records = {r.path_str: r for r in inventory(Quant())}
    assert records["w"].nbytes == 4 * 6 // 2
    assert records["s"].nbytes == 6 * 2


def test_path_str() -> None:
    assert path_str(("layers", 0, "attn", "q", "kernel")) == "layers/0/attn/q/kernel"


def test_bad_filter_is_named_before_flax_sees_it() -> None:
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    with pytest.raises(
        TypeError,
        match=r"^`filters\[1\]` must be an NNX filter: a Variable type .*; got 3 of "
        r"type int\.$",
    ):
        inventory(model, (nnx.Param, 3))


def test_numpy_scalars_are_concrete_values() -> None:
    # A NumPy scalar in a variable has a value to read: it is not abstract.
    model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    model.scale = nnx.Param(np.float64(1.5))  # type: ignore[attr-defined]
    (record,) = inventory(model, (lambda path, _: path[-1] == "scale",))
    assert record.array is not None
    assert not record.is_abstract
    assert float(record.array) == 1.5


# --- natural path order: layers/2 before layers/10 -------------------------------


class Twelve(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.layers = nnx.List([nnx.Linear(2, 2, rngs=rngs) for _ in range(12)])


NATURAL = [f"layers/{i}/{leaf}" for i in range(12) for leaf in ("bias", "kernel")]
"""The 12-layer model's paths in natural order, written out independently."""


def test_path_sort_key_orders_integer_and_digit_keys_by_value() -> None:
    shuffled = [("layers", "10"), ("layers", 2), ("layers", "1"), ("norm",), ("a",)]
    ordered = sorted(shuffled, key=path_sort_key)
    assert ordered == [
        ("a",),
        ("layers", "1"),
        ("layers", 2),
        ("layers", "10"),
        ("norm",),
    ]


def test_reports_of_a_twelve_layer_model_list_layers_in_numeric_order(
    tmp_path: Path,
) -> None:
    import orbax.checkpoint as ocp

    from nnx_introspect import checkpoint_report, mesh_config_report, summarize

    model = Twelve(nnx.Rngs(0))
    assert [r.path_str for r in summarize(model).rows] == NATURAL
    assert [leaf.path for leaf in mesh_config_report(model, "data=2").leaves] == NATURAL
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(tmp_path / "ckpt", nnx.state(model))
    # orbax stores the keys as strings: plain sorting gives layers/1, layers/10.
    report = checkpoint_report(tmp_path / "ckpt")
    assert [leaf.path for leaf in report.leaves] == NATURAL


def test_diff_entries_of_a_twelve_layer_model_are_in_numeric_order() -> None:
    from nnx_introspect import compare_states

    diff = compare_states(Twelve(nnx.Rngs(0)), Twelve(nnx.Rngs(1)))
    assert list(diff.paths) == [p for p in NATURAL if p.endswith("kernel")]

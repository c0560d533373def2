import dataclasses
import json
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from nnx_introspect import ModelSummary, abstract_model, summarize
from nnx_introspect import examples as ex


def snapshot(target: Any) -> list[tuple[Any, bytes]]:
    out = []
    for path, leaf in jax.tree_util.tree_leaves_with_path(nnx.state(target)):
        if jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        out.append((path, np.asarray(leaf).tobytes()))
    return out


def rows(summary: ModelSummary) -> list[tuple[str, str, Any, str, int, int]]:
    return [
        (r.path_str, r.kind, r.shape, r.dtype, r.elements, r.nbytes)
        for r in summary.rows
    ]


def test_linear_rows_and_totals() -> None:
    s = summarize(nnx.Linear(4, 3, rngs=nnx.Rngs(0)))
    assert rows(s) == [
        ("bias", "Param", (3,), "float32", 3, 12),
        ("kernel", "Param", (4, 3), "float32", 12, 48),
    ]
    assert (s.n_params, s.n_state_leaves, s.param_bytes, s.total_bytes) == (
        15,
        2,
        60,
        60,
    )
    assert not s.abstract


def test_batchstat_and_rng_rows_are_not_parameters() -> None:
    model = ex.bn_dropout_mlp(nnx.Rngs(0))
    before = snapshot(model)
    s = summarize(model)
    assert snapshot(model) == before
    kinds = {r.path_str: r.kind for r in s.rows}
    assert kinds["bn/mean"] == kinds["bn/var"] == "BatchStat"
    assert kinds["drop/rngs/count"] == "RngCount"
    assert kinds["drop/rngs/key"] == "RngKey"
    assert kinds["bn/scale"] == kinds["l1/kernel"] == "Param"
    by_kind = {t.name: (t.leaves, t.elements, t.nbytes) for t in s.by_kind}
    n_param = 3 * 5 + 5 + 5 + 5 + 5 * 2 + 2
    assert by_kind == {
        "Param": (6, n_param, 4 * n_param),
        "BatchStat": (2, 10, 40),
        "RngCount": (1, 1, 4),
        "RngKey": (1, 1, 8),  # threefry key data: two uint32
    }
    assert s.n_params == n_param == 42
    assert s.param_bytes == 4 * n_param
    assert s.total_bytes == 4 * (n_param + 10) + 4 + 8
    assert s.n_state_leaves == 10
    by_dtype = {t.name: t.elements for t in s.by_dtype}
    assert by_dtype == {"float32": n_param + 10, "uint32": 1, "key<fry>": 1}


def test_optimizer_state_is_its_own_kinds() -> None:
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    opt = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    s = summarize(opt)
    by_kind = {t.name: (t.leaves, t.elements) for t in s.by_kind}
    # adam: mu and nu per parameter (2 * (6 + 3)), its int32 count, the step
    assert by_kind == {"OptArray": (1, 1), "OptVariable": (4, 18), "OptState": (1, 1)}
    assert s.n_params == 0
    assert s.total_bytes == 4 * 18 + 4 + 4
    abstract = summarize(
        nnx.eval_shape(
            lambda: nnx.Optimizer(
                nnx.Linear(2, 3, rngs=nnx.Rngs(0)), optax.adam(1e-3), wrt=nnx.Param
            )
        )
    )
    assert abstract.abstract
    assert rows(abstract) == rows(s)


def test_tied_variables_once() -> None:
    s = summarize(ex.tied_embedding(nnx.Rngs(0)))
    assert rows(s) == [("embed/embedding", "Param", (10, 4), "float32", 40, 160)]
    assert s.n_params == 40


class Packed(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.q = nnx.Param(jnp.zeros((3, 5), jnp.int4))
        self.h = nnx.Param(jnp.zeros((4, 4), jnp.bfloat16))
        self.odd = nnx.Param(jnp.zeros((3,), jnp.int4))


@pytest.mark.parametrize("abstract", [False, True])
def test_int4_and_bfloat16_bytes(abstract: bool) -> None:
    model = abstract_model(Packed) if abstract else Packed(nnx.Rngs(0))
    s = summarize(model)
    got = {r.path_str: (r.dtype, r.elements, r.nbytes) for r in s.rows}
    assert got == {
        "q": ("int4", 15, 8),  # 15 * 4 bits = 60 bits -> 7.5 bytes, packed: 8
        "h": ("bfloat16", 16, 32),
        "odd": ("int4", 3, 2),
    }
    assert s.total_bytes == 8 + 32 + 2
    assert s.abstract == abstract


class Block(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.lin = nnx.Linear(
            3, 3, rngs=rngs, kernel_metadata={"out_sharding": (None, None)}
        )


class Stacked(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        @nnx.vmap(
            in_axes=0, out_axes=0, transform_metadata={nnx.PARTITION_NAME: "layers"}
        )
        def annotated(r: nnx.Rngs) -> Block:
            return Block(r)

        @nnx.vmap(in_axes=0, out_axes=0)
        def plain(r: nnx.Rngs) -> nnx.Linear:
            return nnx.Linear(3, 2, rngs=r)

        self.blocks = annotated(rngs.fork().split(4))
        self.plain = plain(rngs.fork().split(5))
        self.head = nnx.Linear(3, 3, rngs=rngs)


def test_stacked_layers() -> None:
    model = abstract_model(Stacked)
    s = summarize(model)
    got = {r.path_str: (r.layers, r.layer_shape, r.shape_str()) for r in s.rows}
    assert got["blocks/lin/kernel"] == (4, (3, 3), "4 x (3, 3)")
    # the bias has no annotation, so it is not known to be stacked
    assert got["blocks/lin/bias"] == (None, None, "(4, 3)")
    assert got["plain/kernel"] == (None, None, "(5, 3, 2)")
    assert got["head/kernel"] == (None, None, "(3, 3)")
    named = {r.path_str: r for r in summarize(model, stacked=["plain", "blocks"]).rows}
    assert named["plain/kernel"].shape_str() == "5 x (3, 2)"
    assert named["plain/bias"].shape_str() == "5 x (2,)"
    assert named["blocks/lin/bias"].layers == 4
    assert named["head/kernel"].layers is None
    assert named["plain/kernel"].elements == 5 * 3 * 2


def test_depth_aggregation() -> None:
    cfg = ex.LlamaConfig(vocab=11, d_model=8, n_layers=2, n_heads=2, d_ff=12)
    model = abstract_model(ex.llama(cfg))
    per_layer = 4 * 8 * 8 + 3 * 8 * 12 + 2 * 8
    s2 = summarize(model, depth=2)
    got = {r.path_str: (r.kind, r.leaves, r.elements, r.shape) for r in s2.rows}
    assert got == {
        "embed/embedding": ("Param", 1, 11 * 8, (11, 8)),
        "layers/0": ("Param", 9, per_layer, None),
        "layers/1": ("Param", 9, per_layer, None),
        "lm_head/kernel": ("Param", 1, 8 * 11, (8, 11)),
        "norm/scale": ("Param", 1, 8, (8,)),
    }
    s1 = summarize(model, depth=1)
    assert [(r.path_str, r.leaves, r.elements) for r in s1.rows] == [
        ("embed", 1, 88),
        ("layers", 18, 2 * per_layer),
        ("lm_head", 1, 88),
        ("norm", 1, 8),
    ]
    assert s1.rows[1].shape_str() == "18 leaves"
    assert s1.n_params == s2.n_params == 2 * 88 + 2 * per_layer + 8
    assert s1.depth == 1


def test_depth_keeps_kinds_apart() -> None:
    s = summarize(ex.bn_dropout_mlp(nnx.Rngs(0)), depth=1)
    got = [(r.path_str, r.kind, r.leaves, r.elements) for r in s.rows]
    assert ("bn", "Param", 2, 10) in got
    assert ("bn", "BatchStat", 2, 10) in got
    assert ("drop", "RngCount", 1, 1) in got


def test_json_schema() -> None:
    s = summarize(ex.bn_dropout_mlp(nnx.Rngs(0)), depth=1)
    data = json.loads(s.to_json())
    assert list(data)[:2] == ["schema", "version"]
    assert data["schema"] == "nnx-introspect/summary"
    assert data["version"] == 1
    assert set(data) == {
        "schema", "version", "title", "abstract", "depth", "n_params",
        "n_state_leaves", "param_bytes", "total_bytes", "rows", "by_kind", "by_dtype",
        "n_active_params", "experts",
    }  # fmt: skip
    assert data["n_params"] == 42 and data["depth"] == 1 and data["abstract"] is False
    assert data["n_active_params"] == 42 and data["experts"] == []  # no experts
    row_keys = {
        "path",
        "keys",
        "kind",
        "shape",
        "layers",
        "dtype",
        "elements",
        "bytes",
        "leaves",
    }
    assert all(set(r) == row_keys for r in data["rows"])
    bn = next(r for r in data["rows"] if r["path"] == "bn" and r["kind"] == "BatchStat")
    assert bn == {
        "path": "bn", "keys": ["bn"], "kind": "BatchStat", "shape": None, "layers": None,
        "dtype": "float32", "elements": 10, "bytes": 40, "leaves": 2,
    }  # fmt: skip
    assert {"name": "Param", "leaves": 6, "elements": 42, "bytes": 168} in data[
        "by_kind"
    ]
    assert all(
        set(t) == {"name", "leaves", "elements", "bytes"} for t in data["by_dtype"]
    )


def test_json_counts_are_exact_at_7b() -> None:
    data = json.loads(summarize(abstract_model(ex.llama_7b)).to_json())
    assert data["n_params"] == 6_738_415_616
    assert data["total_bytes"] == 4 * 6_738_415_616
    assert data["n_state_leaves"] == 291
    assert data["abstract"] is True


def test_abstract_and_concrete_agree() -> None:
    concrete = summarize(ex.bn_dropout_mlp(nnx.Rngs(0)))
    abstract = summarize(abstract_model(ex.bn_dropout_mlp))
    assert rows(concrete) == rows(abstract)
    assert abstract.abstract and not concrete.abstract


def test_state_input() -> None:
    model = ex.bn_dropout_mlp(nnx.Rngs(0))
    assert rows(summarize(nnx.state(model))) == rows(summarize(model))
    params = summarize(nnx.state(model, nnx.Param))
    assert {r.kind for r in params.rows} == {"Param"}


def test_renderers() -> None:
    s = summarize(ex.bn_dropout_mlp(nnx.Rngs(0)))
    md = s.to_markdown()
    assert "| bn/mean | BatchStat | (5,) | float32 | 5 | 20 B |" in md
    assert "Parameters (nnx.Param only): 42" in md
    console = Console(record=True, width=200)
    console.print(s)
    text = console.export_text()
    assert "BatchStat total" in text and "RngKey" in text
    assert "BNDropoutMLP (concrete): 42 parameters" in text
    assert "<table>" in s._repr_html_()


def test_argument_errors() -> None:
    model = ex.two_layer(nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"`depth` must be a positive integer, got 0"):
        summarize(model, depth=0)
    with pytest.raises(ValueError, match=r"`depth` must be .* non-integral value 1.5"):
        summarize(model, depth=1.5)
    with pytest.raises(ValueError, match=r"`stacked` entries must name a module path"):
        summarize(model, stacked=[""])
    with pytest.raises(TypeError, match=r"`stacked` must be a sequence .*\['blocks'\]"):
        summarize(model, stacked="blocks")
    with pytest.raises(TypeError, match="target"):
        summarize(3)  # type: ignore[arg-type]


def test_depth_float_is_accepted() -> None:
    model = ex.two_layer(nnx.Rngs(0))
    assert summarize(model, depth=1.0).depth == 1


@settings(deadline=None, max_examples=15)
@given(
    st.integers(1, 64),
    st.integers(1, 64),
    st.sampled_from(["float32", "bfloat16", "int8", "int4", "float16"]),
)
def test_property_linear(d_in: int, d_out: int, dtype: str) -> None:
    bits = {"float32": 32, "bfloat16": 16, "int8": 8, "int4": 4, "float16": 16}[dtype]

    def factory(rngs: nnx.Rngs) -> nnx.Module:
        return nnx.Linear(
            d_in, d_out, param_dtype=jnp.dtype(dtype), rngs=rngs,
            kernel_init=nnx.initializers.zeros, bias_init=nnx.initializers.zeros,
        )  # fmt: skip

    s = summarize(abstract_model(factory))
    n = d_in * d_out + d_out
    assert s.n_params == n
    expected = -(-(d_in * d_out * bits) // 8) + -(-(d_out * bits) // 8)
    assert s.total_bytes == s.param_bytes == expected


def test_dataclass_is_frozen() -> None:
    s = summarize(ex.two_layer(nnx.Rngs(0)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.n_params = 0  # type: ignore[misc]


def test_stacked_items_are_all_checked_with_their_index() -> None:
    # beartype checks one sampled item of a Sequence[str]: before, a non-string
    # entry crashed with AttributeError ('int' object has no attribute 'split')
    # whenever the string was the one sampled. Repeat to cover every sampling.
    model = ex.two_layer(nnx.Rngs(0))
    for _ in range(20):
        with pytest.raises(
            TypeError,
            match=r"^`stacked\[1\]` must be a module path string such as 'blocks', "
            r"got 3 of type int\.$",
        ):
            summarize(model, stacked=("l1", 3))  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"^`stacked\[0\]` .* got None"):
            summarize(model, stacked=[None, "l1"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"^`stacked` must be a sequence"):
        summarize(model, stacked={"l1"})  # type: ignore[arg-type]

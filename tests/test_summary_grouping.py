"""Folding the identical rows of a list of layers (``group_layers``, the CLI default)."""

import json

import pytest
from flax import nnx

from nnx_introspect import abstract_model, summarize
from nnx_introspect.cli import main
from nnx_introspect.examples import llama_7b_sharded

PER_LAYER = {"attn_norm/scale", "q/kernel", "k/kernel", "v/kernel", "o/kernel",
             "mlp_norm/scale", "gate/kernel", "up/kernel", "down/kernel"}  # fmt: skip


def test_7b_folds_into_one_row_per_layer_leaf() -> None:
    model = abstract_model(llama_7b_sharded)
    every = summarize(model)
    grouped = summarize(model, group_layers=True)
    assert len(every.rows) == 9 * 32 + 3
    paths = {r.path_str: r for r in grouped.rows}
    assert set(paths) == {f"layers/*/{p}" for p in PER_LAYER} | {
        "embed/embedding", "norm/scale", "lm_head/kernel"}  # fmt: skip
    assert len(grouped.rows) == 12
    for leaf in PER_LAYER:
        row = paths[f"layers/*/{leaf}"]
        assert row.repeats == 32 and row.leaves == 32
        assert row.path == ("layers", "*", *leaf.split("/"))
        one = next(r for r in every.rows if r.path_str == f"layers/7/{leaf}")
        assert row.shape == one.shape and row.dtype == one.dtype
        assert row.elements == 32 * one.elements and row.nbytes == 32 * one.nbytes
    assert paths["embed/embedding"].repeats == 1
    for field in ("by_kind", "by_dtype", "n_params", "n_state_leaves",
                  "param_bytes", "total_bytes", "abstract", "depth"):  # fmt: skip
        assert getattr(grouped, field) == getattr(every, field), field
    assert sum(r.elements for r in grouped.rows) == sum(r.elements for r in every.rows)
    assert sum(r.nbytes for r in grouped.rows) == every.total_bytes
    assert sum(r.leaves for r in grouped.rows) == every.n_state_leaves
    assert grouped.grouped and not every.grouped


def test_default_is_unchanged() -> None:
    model = abstract_model(llama_7b_sharded)
    assert summarize(model) == summarize(model, group_layers=False)
    data = json.loads(summarize(model).to_json())
    assert all("repeats" not in r for r in data["rows"])


class Odd(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.layers = nnx.List(
            [
                nnx.Linear(4, 4, rngs=rngs),
                nnx.Linear(4, 4, rngs=rngs),
                nnx.Linear(4, 8, rngs=rngs),
            ]
        )


class HalfOdd(nnx.Module):
    """Layer 2 differs in its bias only: the kernels still fold."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.layers = nnx.List(
            [
                nnx.Linear(4, 4, rngs=rngs),
                nnx.Linear(4, 4, rngs=rngs),
                nnx.Linear(4, 4, rngs=rngs, param_dtype="bfloat16"),
            ]
        )
        self.layers[2].kernel = nnx.Param(self.layers[0].kernel[...] + 1)


def test_a_differing_layer_is_never_hidden() -> None:
    model = Odd(nnx.Rngs(0))
    every = summarize(model)
    grouped = summarize(model, group_layers=True)
    assert grouped.rows == every.rows
    assert all(r.repeats == 1 for r in grouped.rows)
    assert [r.path_str for r in grouped.rows] == [
        f"layers/{i}/{leaf}" for i in range(3) for leaf in ("bias", "kernel")
    ]


def test_only_the_identical_leaves_fold() -> None:
    model = HalfOdd(nnx.Rngs(0))
    every = summarize(model)
    grouped = summarize(model, group_layers=True)
    rows = [(r.path_str, r.dtype, r.repeats) for r in grouped.rows]
    assert rows == [
        ("layers/0/bias", "float32", 1),
        ("layers/*/kernel", "float32", 3),
        ("layers/1/bias", "float32", 1),
        ("layers/2/bias", "bfloat16", 1),
    ]
    assert grouped.by_dtype == every.by_dtype and grouped.by_kind == every.by_kind
    assert grouped.total_bytes == every.total_bytes


def test_depth_aggregates_then_folds() -> None:
    model = abstract_model(llama_7b_sharded)
    every = summarize(model, depth=2)
    grouped = summarize(model, depth=2, group_layers=True)
    assert len(every.rows) == 32 + 3
    layers = next(r for r in grouped.rows if r.path_str == "layers/*")
    assert layers.repeats == 32 and layers.leaves == 9 * 32 and layers.shape is None
    assert len(grouped.rows) == 4
    assert grouped.by_kind == every.by_kind
    assert grouped.total_bytes == every.total_bytes


def test_json_rows_carry_repeats_and_star_keys() -> None:
    data = json.loads(
        summarize(abstract_model(llama_7b_sharded), group_layers=True).to_json()
    )
    assert data["version"] == 1
    assert all(isinstance(r["repeats"], int) for r in data["rows"])
    q = next(r for r in data["rows"] if r["path"] == "layers/*/q/kernel")
    assert q["keys"] == ["layers", "*", "q", "kernel"]
    assert q["repeats"] == 32 and q["shape"] == [4096, 4096]
    assert q["elements"] == 32 * 4096 * 4096 and q["bytes"] == 4 * q["elements"]
    embed = next(r for r in data["rows"] if r["path"] == "embed/embedding")
    assert embed["repeats"] == 1


def test_cli_folds_by_default_and_every_leaf_lists_all(
    capsys: pytest.CaptureFixture[str],
) -> None:
    target = "nnx_introspect.examples:llama_7b_sharded"
    assert main(["summary", target, "--format", "json"]) == 0
    grouped = json.loads(capsys.readouterr().out)
    assert main(["summary", target, "--format", "json", "--every-leaf"]) == 0
    every = json.loads(capsys.readouterr().out)
    assert len(grouped["rows"]) == 12 and len(every["rows"]) == 291
    assert all("repeats" not in r for r in every["rows"])
    for key in ("n_params", "n_state_leaves", "param_bytes", "total_bytes",
                "by_kind", "by_dtype"):  # fmt: skip
        assert grouped[key] == every[key], key
    assert main(["summary", target, "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "| layers/*/q/kernel \u00d732 | Param | (4096, 4096) | float32 |" in out
    assert "layers/0/" not in out
    assert main(["summary", target, "--format", "markdown", "--every-leaf"]) == 0
    out = capsys.readouterr().out
    assert "| layers/31/q/kernel | Param | (4096, 4096) | float32 |" in out
    assert "\u00d7" not in out
    assert main(["summary", target, "--depth", "1", "--format", "markdown"]) == 0
    assert "| layers | Param | 288 leaves | float32 |" in capsys.readouterr().out
    assert main(["summary", "--help"]) == 0
    assert "--every-leaf" in capsys.readouterr().out

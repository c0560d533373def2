"""Mesh planning: specs, rules, problems, training memory, and real placement."""

import json
import math
import re
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.sharding import AbstractMesh, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from nnx_introspect import abstract_model, mesh_config_report
from nnx_introspect._mesh import (
    LeafShard,
    MeshConfigReport,
    load_rules_file,
    optimizer_from_name,
    parse_bytes,
)
from nnx_introspect._render import split_grid_html
from nnx_introspect.examples import LlamaConfig, llama
from tests.conftest import assert_unchanged, snapshot

F32 = 4


class Sharded(nnx.Module):
    """Metadata specs: a kernel over ``model``, an embedding with logical names."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(
            4,
            8,
            kernel_init=nnx.with_partitioning(
                nnx.initializers.lecun_normal(), (None, "model")
            ),
            rngs=rngs,
        )
        self.bn = nnx.BatchNorm(8, rngs=rngs)
        self.emb = nnx.Embed(
            10,
            6,
            embedding_init=nnx.with_partitioning(
                nnx.initializers.normal(), ("vocab", "embed")
            ),
            rngs=rngs,
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        y: jax.Array = self.bn(self.l1(x))
        return y


def sharded_model() -> Sharded:
    with nnx.use_eager_sharding(False):
        return Sharded(nnx.Rngs(0))


LOGICAL = [("vocab", "data"), ("embed", None)]


def by_path(report: MeshConfigReport) -> dict[str, LeafShard]:
    return {leaf.path: leaf for leaf in report.all_leaves}


def real_mesh() -> Mesh:
    return Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("data", "model"))


# --- the foundation contract ----------------------------------------------------


def test_linear_replicated_on_model_axis(linear: nnx.Linear) -> None:
    report = mesh_config_report(linear, {"model": 4})
    assert report.axis_names == ("model",)
    assert report.axis_sizes == (4,)
    assert report.num_devices == 4
    assert report.n_state_leaves == 2
    assert report.n_params == 4 * 3 + 3
    assert report.param_bytes == (4 * 3 + 3) * F32
    leaves = by_path(report)
    assert leaves["kernel"].shard_shape == (4, 3)
    assert leaves["kernel"].bytes_per_device == 12 * F32
    assert leaves["kernel"].replicated_over == ("model",)
    assert leaves["kernel"].source == "default"
    assert report.bytes_per_device == 15 * F32
    assert report.ok and report.problems == ()


@pytest.mark.parametrize(
    "mesh",
    [
        {"data": 2, "model": 4},
        {"data": 2.0, "model": np.int64(4)},
        {"data": jnp.asarray(2), "model": np.asarray(4.0)},
        "data=2,model=4",
        " data = 2 , model=4.0 ",
        AbstractMesh((2, 4), ("data", "model")),
    ],
)
def test_mesh_forms(mesh: Any) -> None:
    report = mesh_config_report(sharded_model(), mesh)
    assert report.axis_names == ("data", "model")
    assert report.axis_sizes == (2, 4)
    assert report.num_devices == 8


def test_concrete_mesh_is_accepted() -> None:
    report = mesh_config_report(sharded_model(), real_mesh())
    assert (report.axis_sizes, report.num_devices) == ((2, 4), 8)


@pytest.mark.parametrize(
    ("mesh", "error", "match"),
    [
        ({}, ValueError, r"`mesh` must name at least one axis, got \{\}"),
        (
            {"model": 0},
            ValueError,
            r"`mesh\['model'\]` must be a positive integer, got 0",
        ),
        ({"model": -2}, ValueError, r"`mesh\['model'\]` must be a positive integer"),
        ({"model": 2.5}, ValueError, r"`mesh\['model'\]`.*non-integral value 2.5"),
        ({"model": float("nan")}, ValueError, r"`mesh\['model'\]`.*got nan"),
        ({"model": float("inf")}, ValueError, r"`mesh\['model'\]`.*got inf"),
        ({"model": True}, TypeError, r"`mesh\['model'\]`.*the bool True"),
        ({"model": "4"}, TypeError, r"`mesh\['model'\]`.*got '4' of type str"),
        ("data2", ValueError, r"`mesh` must look like 'data=2,model=4', got 'data2'"),
        ("data=x", ValueError, r"the size 'x' of axis 'data' is not a number"),
        ("a=2,a=4", ValueError, r"`mesh` names axis 'a' twice"),
        ("model=0", ValueError, r"`mesh\['model'\]` must be a positive integer, got 0"),
        (4, TypeError, r"mesh"),
    ],
)
def test_bad_mesh(mesh: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        mesh_config_report(nnx.Linear(2, 2, rngs=nnx.Rngs(0)), mesh)


def test_2048_device_proposal_on_one_cpu() -> None:
    cfg = LlamaConfig(
        vocab=32000, d_model=4096, n_layers=2, n_heads=32, d_ff=11008, partitioned=True
    )
    model = abstract_model(llama(cfg))
    report = mesh_config_report(
        model, "fsdp=8,tp=256", rules=[("norm", P())], optimizer="adamw"
    )
    assert report.num_devices == 2048
    assert report.ok  # 4096, 11008 and 32000 all divide
    (warning,) = report.warnings
    assert warning.kind == "mesh-too-large"
    assert "2048 devices but only 8 are present" in warning.message
    leaves = by_path(report)
    q = leaves["layers/0/q/kernel"]  # ("fsdp", "tp") over (8, 256)
    assert q.shard_shape == (4096 // 8, 4096 // 256)
    assert q.bytes_per_device == (4096 // 8) * (4096 // 256) * F32
    assert q.replicated_over == ()
    down = leaves["layers/1/down/kernel"]  # ("tp", "fsdp"): 11008 / 256 = 43
    assert down.shard_shape == (43, 512)
    norm = leaves["norm/scale"]
    assert norm.shard_shape == (4096,)
    assert norm.source == "rule 0 'norm'"
    assert norm.replicated_over == ("fsdp", "tp")
    mu = leaves["optimizer/opt_state/0/mu/layers/0/q/kernel"]
    assert (mu.spec, mu.shard_shape) == (q.spec, q.shard_shape)
    assert leaves["grads/layers/0/q/kernel"].bytes_per_device == q.bytes_per_device


# --- where specs come from --------------------------------------------------------


def test_metadata_specs() -> None:
    report = mesh_config_report(sharded_model(), "data=2,model=4")
    leaves = by_path(report)
    kernel = leaves["l1/kernel"]
    assert kernel.spec == P(None, "model")
    assert kernel.source == "metadata"
    assert kernel.shard_shape == (4, 8 // 4)
    assert kernel.bytes_per_device == 4 * 2 * F32
    assert kernel.replicated_over == ("data",)
    # Unmapped logical names are unknown mesh axes: both are reported at once.
    kinds = [(p.path, p.kind, p.axes) for p in report.problems]
    assert kinds == [
        ("emb/embedding", "unknown-axis", ("vocab",)),
        ("emb/embedding", "unknown-axis", ("embed",)),
    ]
    assert not report.ok


def test_logical_rules_argument() -> None:
    report = mesh_config_report(
        sharded_model(), "data=2,model=4", logical_rules=LOGICAL
    )
    emb = by_path(report)["emb/embedding"]
    assert emb.spec == P("data", None)
    assert emb.source == "metadata + logical rules"
    assert emb.shard_shape == (5, 6)
    assert emb.replicated_over == ("model",)
    assert report.ok


def test_logical_rules_from_flax_context() -> None:
    with nnx.logical_axis_rules([("vocab", "model"), ("embed", "data")]):
        report = mesh_config_report(sharded_model(), "data=2,model=5")
    emb = by_path(report)["emb/embedding"]
    assert (emb.spec, emb.shard_shape) == (P("model", "data"), (2, 3))


def test_logical_rules_inside_tuple_entries() -> None:
    class Folded(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            init = nnx.with_partitioning(
                nnx.initializers.lecun_normal(), (("vocab", "embed"), None)
            )
            self.l = nnx.Linear(16, 3, kernel_init=init, rngs=rngs)

    with nnx.use_eager_sharding(False):
        model = Folded(nnx.Rngs(0))
    report = mesh_config_report(model, "data=2,model=4", logical_rules=LOGICAL)
    kernel = by_path(report)["l/kernel"]
    assert (kernel.spec, kernel.shard_shape) == (P("data", None), (8, 3))
    rules = [("vocab", "data"), ("embed", "model")]
    report = mesh_config_report(model, "data=2,model=4", logical_rules=rules)
    kernel = by_path(report)["l/kernel"]
    assert (kernel.spec, kernel.shard_shape) == (P(("data", "model"), None), (2, 3))


def test_rules_first_match_wins_and_unmatched_rules() -> None:
    rules = [
        ("kernel$", P("data", None)),
        ("l1/kernel", P(None, "data")),  # shadowed by rule 0
        ("bn/(mean|var)", ("model",)),
        ("no-such-leaf", P()),
    ]
    report = mesh_config_report(
        sharded_model(), "data=2,model=4", rules=rules, logical_rules=LOGICAL
    )
    leaves = by_path(report)
    kernel = leaves["l1/kernel"]
    assert (kernel.spec, kernel.source) == (P("data", None), "rule 0 'kernel$'")
    assert kernel.shard_shape == (2, 8)
    assert leaves["bn/mean"].source == "rule 2 'bn/(mean|var)'"
    assert leaves["bn/var"].shard_shape == (2,)
    assert leaves["bn/scale"].source == "default"
    assert report.rules == ("kernel$", "l1/kernel", "bn/(mean|var)", "no-such-leaf")
    assert report.unmatched_rules == ("l1/kernel", "no-such-leaf")
    messages = [p.message for p in report.warnings]
    assert any("rule 1 'l1/kernel' matched 1 leaf" in m for m in messages)
    assert any("rule 3 'no-such-leaf' matched no leaf" in m for m in messages)
    assert report.ok  # unmatched rules warn, they do not fail the plan


def test_rules_as_mapping_and_compiled_patterns() -> None:
    report = mesh_config_report(
        sharded_model(),
        {"model": 4},
        rules={"emb": None, "kernel": [None, "model"]},
    )
    assert by_path(report)["emb/embedding"].spec == P()
    report2 = mesh_config_report(
        sharded_model(), {"model": 4}, rules=[(re.compile("emb"), P())]
    )
    assert by_path(report2)["emb/embedding"].source == "rule 0 'emb'"


@pytest.mark.parametrize(
    ("rules", "error", "match"),
    [
        (
            [("(", P())],
            ValueError,
            r"`rules\[0\]` has an invalid regular expression '\('",
        ),
        ([("a", P()), ("b",)], TypeError, r"`rules\[1\]` must be a \(regular"),
        ([("a", 3)], TypeError, r"`rules\[0\]` must be a PartitionSpec.*got 3"),
        ([("a", (1,))], TypeError, r"`rules\[0\]` entries must be None, an axis name"),
    ],
)
def test_bad_rules(rules: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        mesh_config_report(sharded_model(), {"model": 4}, rules=rules)


def test_bad_logical_rules() -> None:
    with pytest.raises(TypeError, match=r"`logical_rules\[0\]` must be a \(logical"):
        mesh_config_report(sharded_model(), {"model": 4}, logical_rules=[("a", 3)])


# --- problems, collected --------------------------------------------------------


class Uneven(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.a = nnx.Linear(6, 10, rngs=rngs)
        self.b = nnx.Linear(8, 7, rngs=rngs)


def test_every_indivisible_dimension_is_listed_at_once() -> None:
    model = Uneven(nnx.Rngs(0))
    rules = [("a/kernel", P("data", "model")), ("b/kernel", P(None, ("data", "model")))]
    report = mesh_config_report(model, {"data": 4, "model": 4}, rules=rules)
    found = [
        (p.path, p.dimension, p.size, p.axes, p.product)
        for p in report.problems
        if p.kind == "indivisible"
    ]
    assert found == [
        ("a/kernel", 0, 6, ("data",), 4),
        ("a/kernel", 1, 10, ("model",), 4),
        ("b/kernel", 1, 7, ("data", "model"), 16),
    ]
    assert not report.ok
    # JAX agrees that neither spec applies.
    mesh = AbstractMesh((4, 4), ("data", "model"))
    for spec, shape in [(rules[0][1], (6, 10)), (rules[1][1], (8, 7))]:
        with pytest.raises(ValueError):
            NamedSharding(mesh, spec).shard_shape(shape)
    kernel = by_path(report)["a/kernel"]
    assert kernel.shard_shape is None
    assert kernel.bytes_per_device == 60 * F32  # counted whole when it cannot split
    assert "dimension 0 (size 6) does not divide over data (product 4)" in (
        report.problems[0].message
    )


def test_unknown_duplicate_and_rank_problems() -> None:
    model = Uneven(nnx.Rngs(0))
    rules = [
        ("a/kernel", P("model", "model")),
        ("a/bias", P("expert")),
        ("b/bias", P(None, "model")),
    ]
    report = mesh_config_report(model, {"model": 2}, rules=rules)
    kinds = sorted((p.path, p.kind) for p in report.problems)
    assert kinds == [
        ("a/bias", "unknown-axis"),
        ("a/kernel", "duplicate-axis"),
        ("b/bias", "rank"),
    ]
    for problem in report.problems:
        assert problem.severity == "error"
        assert f"`{problem.path}`" in problem.message


# --- replication, totals and waste ----------------------------------------------


def test_replicated_leaves_ideal_share_and_waste() -> None:
    report = mesh_config_report(
        sharded_model(), "data=2,model=4", logical_rules=LOGICAL
    )
    leaves = by_path(report)
    bias = leaves["l1/bias"]
    assert bias.spec == P()
    assert bias.replicated_over == ("data", "model")
    assert bias.ideal_bytes == 8 * F32 / 8
    assert bias.waste_bytes == 8 * F32 - 8 * F32 / 8
    # Independent totals: kernel 4x2, embedding 5x6, everything else whole.
    params = (4 * 2 + 8 + 8 + 8 + 5 * 6) * F32  # kernel, bias, bn scale+bias, emb
    other = (8 + 8) * F32  # bn mean, var
    assert report.bytes_by_category == {
        "params": params,
        "other state": other,
        "optimizer state": 0,
        "gradients": 0,
    }
    assert report.bytes_per_device == params + other
    global_bytes = (32 + 8 + 16 + 60 + 16) * F32
    assert report.global_bytes == global_bytes
    assert report.ideal_bytes_per_device == global_bytes / 8
    assert report.replication_overhead == params + other - global_bytes / 8
    # Waste: embedding 120 - 30 = 90 B; each whole (8,) vector 32 - 4 = 28 B (the
    # first of those in leaf order ranks first); the kernel only 32 - 16 = 16 B.
    top = report.top_waste(2)
    assert [(leaf.path, leaf.waste_bytes) for leaf in top] == [
        ("emb/embedding", 90.0),
        ("bn/bias", 28.0),
    ]
    assert "l1/kernel" not in [leaf.path for leaf in report.top_waste(6)]


def test_optimizer_state_and_gradients() -> None:
    model = sharded_model()
    report = mesh_config_report(
        model, "data=2,model=4", logical_rules=LOGICAL, optimizer=optax.adamw(1e-3)
    )
    n_param_leaves = 5
    assert len(report.gradient_leaves) == n_param_leaves
    assert len(report.optimizer_leaves) == 2 * n_param_leaves + 2  # mu, nu, count, step
    leaves = by_path(report)
    for moment in ("mu", "nu"):
        leaf = leaves[f"optimizer/opt_state/0/{moment}/l1/kernel"]
        assert leaf.spec == P(None, "model")
        assert leaf.shard_shape == (4, 2)
        assert leaf.source == "mirrors l1/kernel"
        assert leaf.category == "optimizer state"
    count = leaves["optimizer/opt_state/0/count"]
    assert (count.spec, count.shard_shape, count.bytes_per_device) == (P(), (), 4)
    grad = leaves["grads/emb/embedding"]
    assert (grad.kind, grad.spec, grad.shard_shape) == (
        "Gradient",
        P("data", None),
        (5, 6),
    )
    params = (4 * 2 + 8 + 8 + 8 + 5 * 6) * F32
    assert report.bytes_by_category == {
        "params": params,
        "other state": 16 * F32,
        "optimizer state": 2 * params + 4 + 4,  # mu + nu + int32 count + uint32 step
        "gradients": params,
    }


def test_optimizer_by_name_and_stateless() -> None:
    report = mesh_config_report(sharded_model(), {"model": 4}, optimizer="sgd")
    assert [leaf.path for leaf in report.optimizer_leaves] == ["optimizer/step"]
    assert len(report.gradient_leaves) == 5
    params = {"w": jnp.zeros((2, 3))}
    by_name = optimizer_from_name("ADAMW").init(params)  # names are case-insensitive
    reference = optax.adamw(1e-3).init(params)
    assert str(jax.tree.structure(by_name)) == str(jax.tree.structure(reference))
    with pytest.raises(ValueError, match=r"`optimizer` must be one of .*got 'adamx'"):
        mesh_config_report(sharded_model(), {"model": 4}, optimizer="adamx")


def test_optimizer_needs_a_module() -> None:
    state = nnx.state(nnx.Linear(2, 2, rngs=nnx.Rngs(0)))
    with pytest.raises(
        TypeError, match=r"`optimizer` needs `target` to be an nnx.Module"
    ):
        mesh_config_report(state, {"model": 2}, optimizer="adamw")


def test_state_target_and_abstract_target_agree() -> None:
    model = sharded_model()
    abstract = nnx.eval_shape(lambda: sharded_model())
    a = mesh_config_report(model, {"model": 4}, logical_rules=LOGICAL)
    b = mesh_config_report(nnx.state(model), {"model": 4}, logical_rules=LOGICAL)
    c = mesh_config_report(abstract, {"model": 4}, logical_rules=LOGICAL)
    assert a.leaves == b.leaves == c.leaves


def test_read_only(bn_dropout: nnx.Module) -> None:
    before = snapshot(bn_dropout)
    mesh_config_report(
        bn_dropout, {"data": 2}, rules=[("kernel", P("data"))], optimizer="adamw"
    )
    assert_unchanged(before, bn_dropout)


# --- checked against JAX's own placement on 8 devices ----------------------------


def assert_matches_placement(leaf: LeafShard, value: jax.Array, mesh: Mesh) -> None:
    placed = jax.device_put(value, NamedSharding(mesh, leaf.spec))
    shards = placed.addressable_shards
    assert len(shards) == 8
    for shard in shards:
        assert tuple(shard.data.shape) == leaf.shard_shape, leaf.path
        assert shard.data.nbytes == leaf.bytes_per_device, leaf.path


def tiny_llama() -> nnx.Module:
    cfg = LlamaConfig(
        vocab=64, d_model=32, n_layers=2, n_heads=4, d_ff=48, partitioned=True
    )
    with nnx.use_eager_sharding(False):
        return llama(cfg)(nnx.Rngs(0))


LLAMA_LOGICAL = [("fsdp", "data"), ("tp", "model")]


@pytest.mark.parametrize("which", ["sharded", "llama"])
def test_plan_equals_real_placement(which: str) -> None:
    model = sharded_model() if which == "sharded" else tiny_llama()
    logical = LOGICAL if which == "sharded" else LLAMA_LOGICAL
    tx = optax.adamw(1e-3)
    report = mesh_config_report(
        model, "data=2,model=4", logical_rules=logical, optimizer=tx
    )
    assert report.ok
    mesh = real_mesh()
    state = nnx.to_flat_state(nnx.state(model))
    values = {"/".join(map(str, path)): var[...] for path, var in state}
    assert set(values) == {leaf.path for leaf in report.leaves}
    for leaf in report.leaves:
        assert_matches_placement(leaf, values[leaf.path], mesh)
    for leaf in report.gradient_leaves:
        assert_matches_placement(
            leaf, jnp.zeros_like(values[leaf.path[len("grads/") :]]), mesh
        )
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    opt_values = {
        "optimizer/" + "/".join(map(str, path)): var[...]
        for path, var in nnx.to_flat_state(nnx.state(optimizer))
    }
    assert set(opt_values) == {leaf.path for leaf in report.optimizer_leaves}
    for leaf in report.optimizer_leaves:
        assert_matches_placement(leaf, opt_values[leaf.path], mesh)
    # Per-device totals equal the sum of the real shards on device 0.
    total = 0
    for leaf in report.leaves:
        placed = jax.device_put(values[leaf.path], NamedSharding(mesh, leaf.spec))
        total += placed.addressable_shards[0].data.nbytes
    assert total == sum(leaf.bytes_per_device for leaf in report.leaves)


def test_plan_equals_jit_out_shardings() -> None:
    report = mesh_config_report(
        sharded_model(), "data=2,model=4", logical_rules=LOGICAL
    )
    mesh = real_mesh()
    leaves = [leaf for leaf in report.leaves if leaf.dtype == "float32"]
    shardings = tuple(NamedSharding(mesh, leaf.spec) for leaf in leaves)
    make = jax.jit(
        lambda: tuple(jnp.zeros(leaf.shape) for leaf in leaves), out_shardings=shardings
    )
    for leaf, array in zip(leaves, make(), strict=True):
        for shard in array.addressable_shards:
            assert tuple(shard.data.shape) == leaf.shard_shape
            assert shard.data.nbytes == leaf.bytes_per_device


def test_compiled_forward_argument_bytes_match_plan() -> None:
    model = tiny_llama()
    report = mesh_config_report(model, "data=2,model=4", logical_rules=LLAMA_LOGICAL)
    mesh = real_mesh()
    graphdef, state = nnx.split(model)
    specs = [NamedSharding(mesh, leaf.spec) for leaf in report.leaves]
    flat = [var[...] for _, var in nnx.to_flat_state(state)]
    tokens = jnp.zeros((8, 4), jnp.int32)

    def forward(leaves: list[jax.Array], tokens: jax.Array) -> jax.Array:
        restored = nnx.from_flat_state(
            [
                (path, var.replace(value))
                for (path, var), value in zip(
                    nnx.to_flat_state(state), leaves, strict=True
                )
            ]
        )
        y: jax.Array = nnx.merge(graphdef, restored)(tokens)
        return y

    compiled = (
        jax.jit(forward, in_shardings=(specs, NamedSharding(mesh, P("data", None))))
        .lower(flat, tokens)
        .compile()
    )
    analysis = compiled.memory_analysis()
    assert analysis is not None
    token_bytes = (8 // 2) * 4 * 4  # int32 tokens split over data
    planned = sum(leaf.bytes_per_device for leaf in report.leaves)
    assert analysis.argument_size_in_bytes == planned + token_bytes


AXES = st.sampled_from([None, "data", "model", ("data", "model"), ("model", "data")])


@settings(deadline=None, max_examples=20)
@given(
    shape=st.lists(st.sampled_from([1, 2, 3, 4, 6, 8, 12]), min_size=1, max_size=3),
    entries=st.lists(AXES, min_size=0, max_size=3),
)
def test_property_plan_equals_placement(shape: list[int], entries: list[Any]) -> None:
    entries = entries[: len(shape)]
    used = [a for e in entries if e for a in (e if isinstance(e, tuple) else (e,))]
    if len(used) != len(set(used)):
        entries = []
    spec = P(*entries)

    class One(nnx.Module):
        def __init__(self) -> None:
            self.w = nnx.Param(
                jnp.arange(math.prod(shape), dtype=jnp.float32).reshape(shape)
            )

    report = mesh_config_report(One(), "data=2,model=4", rules=[("w", spec)])
    (leaf,) = report.leaves
    mesh = real_mesh()
    try:
        placed = jax.device_put(jnp.zeros(shape), NamedSharding(mesh, spec))
    except ValueError:
        assert leaf.shard_shape is None
        assert [p.kind for p in report.errors] and {p.kind for p in report.errors} == {
            "indivisible"
        }
        return
    assert report.ok
    for shard in placed.addressable_shards:
        assert tuple(shard.data.shape) == leaf.shard_shape
        assert shard.data.nbytes == leaf.bytes_per_device


# --- rendering ------------------------------------------------------------------


def test_table_json_and_markdown() -> None:
    report = mesh_config_report(
        sharded_model(), "data=2,model=4", logical_rules=LOGICAL, optimizer="adamw"
    )
    data = json.loads(report.to_json())
    assert data["schema"] == "nnx-introspect/mesh-config"
    assert data["mesh"] == {"data": 2, "model": 4}
    assert data["bytes_per_device"] == report.bytes_per_device
    assert (
        data["bytes_per_device_by_category"]["gradients"] == (8 + 8 + 8 + 8 + 30) * F32
    )
    kernel = next(x for x in data["leaves"] if x["path"] == "l1/kernel")
    assert kernel["spec"] == [None, "model"]
    assert kernel["shard_shape"] == [4, 2]
    assert kernel["replicated_over"] == ["data"]
    markdown = report.to_markdown()
    assert (
        "| l1/kernel | (4, 8) | P(None, 'model') | metadata | (4, 2) | data | 32 B | 16 B |"
        in markdown
    )
    assert "replication overhead" in markdown


def test_html_is_self_contained_with_bars_and_grids() -> None:
    report = mesh_config_report(
        sharded_model(), "data=2,model=4", logical_rules=LOGICAL, optimizer="adamw"
    )
    page = report.to_html(max_device_bytes=600)
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page and "http" not in page
    assert "Bytes per device by kind" in page
    assert page.count('class="bar actual"') == 5  # four kinds + total
    assert 'class="budget"' in page
    assert "EXCEEDS the budget" in page
    assert page.count("<details") == len(report.leaves) + len(report.optimizer_leaves)


def test_split_grid_matches_jax_device_map() -> None:
    mesh = real_mesh()
    shape = (8, 8, 8)
    for spec in [P(None, "model"), P("data", None, "model"), P(("model", "data")), P()]:
        html = split_grid_html(
            title="w",
            shape=shape,
            spec=tuple(
                () if e is None else (e if isinstance(e, tuple) else (e,)) for e in spec
            ),
            axis_names=("data", "model"),
            axis_sizes=(2, 4),
            shard_shape=tuple(NamedSharding(mesh, spec).shard_shape(shape)),
        )
        cells = re.findall(
            r"device \(data=(\d), model=(\d)\) holds block \(([\d, ]*)\)", html
        )
        assert len(cells) == 8
        index_map = NamedSharding(mesh, spec).devices_indices_map(shape)
        shard = NamedSharding(mesh, spec).shard_shape(shape)
        for data, model, block in cells:
            device = mesh.devices[int(data), int(model)]
            starts = [s.start or 0 for s in index_map[device]]
            expected = tuple(
                start // size for start, size in zip(starts, shard, strict=True)
            )
            got = tuple(int(b) for b in block.split(",") if b.strip())
            assert got == expected, (spec, data, model)


def test_grid_omitted_for_huge_mesh_but_dims_shown() -> None:
    report = mesh_config_report(
        sharded_model(), "data=64,model=64", rules=[("kernel", P("model"))]
    )
    page = report.to_html()
    assert "Device grid omitted: 4096 devices" in page


# --- helpers --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("16GiB", 16 * 2**30),
        ("16 gib", 16 * 2**30),
        ("1.5kB", 1500),
        ("2MB", 2 * 10**6),
        ("512", 512),
        ("1e3", 1000),
        (4096, 4096),
        (4096.0, 4096),
    ],
)
def test_parse_bytes(text: Any, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (
            "16 apples",
            r"`max_device_bytes` must be a size like '16GiB'.*got '16 apples'",
        ),
        ("", r"`max_device_bytes` must be a size"),
        ("0.5", r"`max_device_bytes`.*non-integral value 0.5"),
        (-1, r"`max_device_bytes` must be a nonnegative integer, got -1"),
    ],
)
def test_parse_bytes_errors(text: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_bytes(text)


def test_load_rules_file(tmp_path: Path) -> None:
    path = tmp_path / "rules.json"
    path.write_text(
        json.dumps(
            {
                "rules": [["kernel$", [None, "model"]], ["emb", [["data", "model"]]]],
                "logical_rules": [["vocab", "data"], ["embed", None]],
            }
        )
    )
    rules, logical = load_rules_file(path)
    assert rules == [("kernel$", [None, "model"]), ("emb", [("data", "model")])]
    assert logical == [("vocab", "data"), ("embed", None)]
    report = mesh_config_report(sharded_model(), "data=2,model=4", rules=rules)
    assert by_path(report)["emb/embedding"].spec == P(("data", "model"))
    plain = tmp_path / "plain.json"
    plain.write_text('[["bias", null]]')
    assert load_rules_file(plain) == ([("bias", None)], None)
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ValueError, match="is not JSON"):
        load_rules_file(bad)
    bad.write_text('[["only-one"]]')
    with pytest.raises(ValueError, match=r"entry 0 must be \[regex, spec\]"):
        load_rules_file(bad)


def test_howto_page_doctests() -> None:
    """Run the ``{doctest}`` blocks of the how-to, as Sphinx's doctest builder does."""
    import doctest

    page = Path(__file__).parent.parent / "docs" / "howto" / "plan-a-mesh.md"
    blocks = re.findall(r"```\{doctest\}\n(.*?)```", page.read_text(), flags=re.S)
    globs = {"jax": jax, "jnp": jnp, "nnx": nnx, "ni": __import__("nnx_introspect")}
    test = doctest.DocTestParser().get_doctest(
        "\n".join(blocks), globs, "plan-a-mesh", str(page), 0
    )
    runner = doctest.DocTestRunner(
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    output: list[str] = []
    runner.run(test, out=output.append)
    assert runner.tries > 20
    assert runner.failures == 0, "".join(output)

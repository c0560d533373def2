"""Mesh planning: specs, rules, problems, training memory, and real placement."""

import html
import json
import math
import re
import subprocess
import sys
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
from nnx_introspect._render.mesh_charts import split_grid_html
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


MAX_DEVICES = 2**31 - 1


@pytest.mark.parametrize(
    ("mesh", "shown"),
    [
        ({"a": 2**31}, "2147483648 devices (a=2147483648)"),
        ("data=65536,model=65536", "4294967296 devices (data=65536 x model=65536)"),
        ("data=65536,model=32768", "2147483648 devices"),
        ({"a": 10**40}, f"{10**40} devices"),
        ({"a": 2**31 - 1, "b": 2}, "4294967294 devices"),
        (AbstractMesh((2**31,), ("a",)), "2147483648 devices (a=2147483648)"),
    ],
)
def test_mesh_larger_than_jax_can_describe(mesh: Any, shown: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"`mesh` has {shown}")) as info:
        mesh_config_report(nnx.Linear(2, 2, rngs=nnx.Rngs(0)), mesh)
    assert "at most 2**31 - 1 = 2147483647 devices" in str(info.value)


def test_mesh_size_limit_is_jax_own() -> None:
    """The limit is JAX's: one device fewer plans; one more is JAX's C++ error."""
    model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    for sizes in [(MAX_DEVICES,), (65536, 32767)]:
        names = ("a", "b")[: len(sizes)]
        report = mesh_config_report(model, dict(zip(names, sizes, strict=True)))
        assert report.num_devices == math.prod(sizes) <= MAX_DEVICES
        assert report.leaves[1].shard_shape == (2, 2)
    for sizes in [(MAX_DEVICES + 1,), (65536, 32768)]:
        names = ("a", "b")[: len(sizes)]
        with pytest.raises(RuntimeError, match="bad_cast"):
            NamedSharding(AbstractMesh(sizes, names), P()).shard_shape((2,))


def test_2048_device_proposal_on_one_cpu() -> None:
    jax.devices()  # a started backend: the plan compares with its devices
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


def test_logical_names_inside_tuple_entries_are_not_translated() -> None:
    """As in flax 0.12: a tuple entry is kept as written (tests/test_mesh_flax.py
    holds this against flax placing the variables on 8 devices)."""

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
    assert (kernel.spec, kernel.shard_shape) == (P(("vocab", "embed"), None), None)
    assert kernel.source == "metadata"  # no entry was translated
    assert [(p.kind, p.axes) for p in report.errors] == [
        ("unknown-axis", ("vocab",)),
        ("unknown-axis", ("embed",)),
    ]
    assert "Flax translates a logical name only when it is a whole entry" in (
        report.errors[0].message
    )
    # With flax itself: building it under the mesh and rules fails the same way.
    with (
        pytest.raises(ValueError, match="vocab"),
        jax.set_mesh(real_mesh()),
        nnx.logical_axis_rules(LOGICAL),
    ):
        Folded(nnx.Rngs(0))


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


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"rules": {"kernel": P(), 3: P()}},
            TypeError,
            r"`rules\[3\]` must start with a regular expression string, got 3",
        ),
        (
            {"rules": [("kernel", P()), ("bias", P()), ("x", 5)]},
            TypeError,
            r"`rules\[2\]` must be a PartitionSpec",
        ),
        (
            {"rules": "kernel"},
            TypeError,
            r"`rules` must be a list of pairs or a mapping, got the string 'kernel'",
        ),
        (
            {"logical_rules": {"vocab": "data", "embed": 3}},
            TypeError,
            r"`logical_rules\['embed'\]` must be a \(logical name",
        ),
        (
            {"logical_rules": [("vocab", "data"), (3, "model")]},
            TypeError,
            r"`logical_rules\[1\]` must be a \(logical name",
        ),
        (
            {"logical_rules": "vocab"},
            TypeError,
            r"`logical_rules` must be a list of pairs or a mapping",
        ),
    ],
)
def test_every_container_item_is_checked(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    """beartype samples one item of a container; the planner checks them all."""
    for _ in range(10):  # the wrong item is found every time, not by sampling
        with pytest.raises(error, match=match):
            mesh_config_report(sharded_model(), {"model": 4}, **kwargs)


@pytest.mark.parametrize(
    ("mesh", "match"),
    [
        ({"data": 2, 3: 4}, r"`mesh` axis names must be nonempty strings, got 3"),
        ({"data": 2, "": 4}, r"`mesh` axis names must be nonempty strings, got ''"),
        ({"data": 2, "model": "4"}, r"`mesh\['model'\]`.*got '4' of type str"),
    ],
)
def test_every_mesh_item_is_checked(mesh: Any, match: str) -> None:
    for _ in range(10):
        with pytest.raises(TypeError, match=match):
            mesh_config_report(sharded_model(), mesh)


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


def test_axis_repeated_inside_one_entry_is_a_duplicate_axis_problem() -> None:
    model = Uneven(nnx.Rngs(0))
    mesh = AbstractMesh((2,), ("m",))
    with pytest.raises(Exception, match="duplicate entries"):  # JAX's own refusal
        NamedSharding(mesh, P(None, ("m", "m"))).shard_shape((6, 10))
    report = mesh_config_report(model, {"m": 2}, rules=[("kernel", (None, ("m", "m")))])
    found = [(p.path, p.kind, p.axes) for p in report.problems]
    assert found == [
        ("a/kernel", "duplicate-axis", ("m",)),
        ("b/kernel", "duplicate-axis", ("m",)),
    ]
    assert not report.ok
    assert by_path(report)["a/kernel"].shard_shape is None
    # Through a logical rule mapping one name to ("m", "m").
    with nnx.use_eager_sharding(False):
        layer = nnx.Linear(
            4, 8, rngs=nnx.Rngs(0), kernel_metadata={"out_sharding": (None, "x")}
        )
    report = mesh_config_report(layer, {"m": 2}, logical_rules=[("x", ("m", "m"))])
    assert [(p.path, p.kind) for p in report.problems] == [("kernel", "duplicate-axis")]
    assert by_path(report)["kernel"].spec == P(None, ("m", "m"))


@pytest.mark.parametrize(
    ("spec", "kind", "match"),
    [
        (P(("m", None)), "invalid-spec", r"entry 0 of spec .* is \('m', None\)"),
        (P(P.UNCONSTRAINED), "invalid-spec", r"entry 0 of spec"),
    ],
)
def test_entries_jax_cannot_place_are_problems(spec: P, kind: str, match: str) -> None:
    """JAX refuses these at placement; the plan must not call them green."""
    mesh = real_mesh()
    with pytest.raises(Exception):  # noqa: B017 - whatever JAX raises
        jax.device_put(jnp.zeros((8, 8)), NamedSharding(mesh, spec))

    class One(nnx.Module):
        def __init__(self) -> None:
            with nnx.use_eager_sharding(False):
                self.w = nnx.Param(jnp.zeros((8, 8)), out_sharding=tuple(spec))

    report = mesh_config_report(One(), "m=2,n=4")
    assert not report.ok
    ((problem),) = report.errors
    assert problem.kind == kind and problem.path == "w"
    assert re.search(match, problem.message)
    assert report.leaves[0].shard_shape is None


def test_any_jax_refusal_becomes_a_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever JAX raises building a NamedSharding is collected, never raised."""
    import nnx_introspect._mesh.plan as mesh_module

    class Strict(NamedSharding):
        def shard_shape(self, shape: Any) -> Any:
            if shape == (4, 3):
                raise RuntimeError("a future JAX refusal")
            return super().shard_shape(shape)

    monkeypatch.setattr(mesh_module, "NamedSharding", Strict)
    report = mesh_config_report(
        nnx.Linear(4, 3, rngs=nnx.Rngs(0)), {"model": 2}, rules=[("kernel", P())]
    )
    ((problem),) = report.errors
    assert (problem.path, problem.kind) == ("kernel", "invalid-spec")
    assert "RuntimeError: a future JAX refusal" in problem.message


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


@pytest.mark.parametrize(
    ("n", "error", "match"),
    [
        (-1, ValueError, r"`n` must be a nonnegative integer, got -1"),
        (2.5, ValueError, r"`n` must be a nonnegative integer, got the non-integral"),
        ("3", TypeError, r"`n` must be a nonnegative integer, got '3' of type str"),
        (True, TypeError, r"`n` must be a nonnegative integer, got the bool True"),
        (None, TypeError, r"`n` must be a nonnegative integer, got None"),
    ],
)
def test_top_waste_validates_n(n: Any, error: type[Exception], match: str) -> None:
    report = mesh_config_report(sharded_model(), "data=2,model=4")
    with pytest.raises(error, match=match):
        report.top_waste(n)


def test_top_waste_counts() -> None:
    report = mesh_config_report(sharded_model(), "data=2,model=4")
    wasting = [leaf for leaf in report.all_leaves if leaf.waste_bytes > 0]
    assert report.top_waste(0) == ()
    assert len(report.top_waste(np.int64(2))) == 2
    assert len(report.top_waste(10**6)) == len(wasting) == 7


@pytest.mark.parametrize(
    ("budget", "error", "match"),
    [
        (-1, ValueError, r"`max_device_bytes` must be a nonnegative integer, got -1"),
        ("1GiB", TypeError, r"`max_device_bytes` must be a nonnegative integer"),
        (0.5, ValueError, r"`max_device_bytes`.*non-integral value 0.5"),
        (float("nan"), ValueError, r"`max_device_bytes`.*got nan"),
    ],
)
def test_fits_and_html_validate_the_budget(
    budget: Any, error: type[Exception], match: str
) -> None:
    report = mesh_config_report(sharded_model(), "data=2,model=4")
    with pytest.raises(error, match=match):
        report.fits(budget)
    with pytest.raises(error, match=match):
        report.to_html(max_device_bytes=budget)


def test_fits_boundary() -> None:
    report = mesh_config_report(sharded_model(), "data=2,model=4")
    used = report.bytes_per_device
    assert report.fits(used) and report.fits(float(used)) and not report.fits(used - 1)


def test_mesh_too_large_warning_grammar(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jax, "device_count", lambda: 1)
    report = mesh_config_report(sharded_model(), "data=2")
    assert "The mesh has 2 devices but only 1 is present" in report.warnings[0].message
    monkeypatch.setattr(jax, "device_count", lambda: 3)
    report = mesh_config_report(sharded_model(), "data=4")
    assert "The mesh has 4 devices but only 3 are present" in report.warnings[0].message


def test_a_plan_starts_no_jax_backend() -> None:
    """In a process whose JAX backend is not started, a plan does not start
    one (with a plugin installed and its device absent, that start writes
    the plugin's errors to stderr): it says no devices were counted."""
    code = (
        "from jax._src import xla_bridge\n"
        "from nnx_introspect import abstract_model, mesh_config_report\n"
        "from nnx_introspect.examples import llama_tiny_sharded\n"
        "r = mesh_config_report(abstract_model(llama_tiny_sharded), 'fsdp=2,tp=4')\n"
        "print(r.devices_present, xla_bridge.backends_are_initialized(), r.ok)\n"
        "print([w.kind for w in r.warnings])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert done.stdout.splitlines() == ["None False True", "[]"]


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


def test_html_first_screen_is_the_verdict_problems_and_chart() -> None:
    model = Uneven(nnx.Rngs(0))
    report = mesh_config_report(
        model, {"data": 4, "model": 4}, rules=[("a/kernel", P("data", "model"))]
    )
    page = report.to_html(max_device_bytes=100)
    verdict = page.index('class="verdict bad"')
    problems = page.index("<h2>Problems (2 indivisible)</h2>")
    chart = page.index("Bytes per device by kind")
    totals = page.index("Totals per device")
    grids = page.index("<details")
    detail = page.index("<h2>Every leaf</h2>")
    assert verdict < problems < chart < totals < grids < detail
    used = report.bytes_per_device  # (6x10 + 10 + 8x7 + 7) x 4 bytes, all whole
    assert used == (60 + 10 + 56 + 7) * F32
    assert (
        f"2 problem(s): the plan cannot be applied as specified; {used} B per "
        f"device EXCEEDS the budget of 100 B by {used - 100} B."
    ) in page
    for problem in report.errors:  # each problem's message, before the chart
        assert page.index(html.escape(problem.message)) < chart
    good = mesh_config_report(model, {"data": 2}).to_html(max_device_bytes=10**6)
    assert 'class="verdict ok"' in good
    assert "OK: every leaf can be placed as specified;" in good
    assert "fits the budget of 976.56 KiB." in good


def test_html_folds_long_problem_lists_below_the_first_few() -> None:
    cfg = LlamaConfig(
        vocab=64, d_model=32, n_layers=2, n_heads=4, d_ff=48, partitioned=True
    )
    report = mesh_config_report(abstract_model(llama(cfg)), "fsdp=3,tp=5")
    n = len(report.errors)
    assert n > 8
    page = report.to_html()
    chart = page.index("Bytes per device by kind")
    first = page[: page.index('<details class="more">')]
    assert first.count("<li>") == 8  # the first eight, then the rest folded
    assert f"<summary>{n - 8} more problems</summary>" in page
    assert page.index(f"<summary>{n - 8} more problems</summary>") < chart
    assert page.count("does not divide") == n


def test_grid_cells_name_the_slice_each_device_holds() -> None:
    """Cell labels are the slices JAX's own device index map gives each device."""
    mesh = real_mesh()
    shape = (8, 6, 4)
    for spec in [P("data", None, "model"), P(("model", "data")), P(None, "data"), P()]:
        html_text = split_grid_html(
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
            r'title="device \(data=(\d), model=(\d)\) holds block [^"]*">([^<]*)</td>',
            html_text,
        )
        assert len(cells) == 8
        index_map = NamedSharding(mesh, spec).devices_indices_map(shape)
        for data, model, label in cells:
            slices = index_map[mesh.devices[int(data), int(model)]]
            expected = ", ".join(
                ":" if s == slice(None) else f"{s.start}:{s.stop}" for s in slices
            )
            assert label == expected, (spec, data, model)
        assert "<th>data=1</th>" in html_text
        assert "<th>model=3</th>" in html_text


def test_html_has_a_grid_legend() -> None:
    report = mesh_config_report(
        sharded_model(), "data=2,model=4", logical_rules=LOGICAL
    )
    page = report.to_html()
    assert page.count('<p class="legend">') == 1
    assert "A cell shows the slice of the array that device holds" in page
    # The kernel P(None, 'model') on data=2, model=4: 2 columns per device.
    assert ">:, 0:2</td>" in page and ">:, 6:8</td>" in page


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
        ("512B", 512),
        ("1e3B", 1000),
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
        ("0.5B", r"`max_device_bytes`.*non-integral value 0.5"),
        ("512", r"`max_device_bytes` needs a unit, got '512': write '512GiB'"),
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


# --- issue 13/14: sizes of every mesh form, the budget on the report, repr ------


@pytest.mark.parametrize("size", [0, -2])
def test_every_mesh_form_rejects_a_size_below_one(size: int) -> None:
    model = nnx.Linear(4, 6, rngs=nnx.Rngs(0))
    no_device = Mesh(np.array(jax.devices()[:0]).reshape(0), ("data",))
    forms: list[Any] = [
        {"data": size},
        f"data={size}",
        AbstractMesh((size,), ("data",)),
        AbstractMesh((2, size), ("model", "data")),
    ]
    if size == 0:
        forms.append(no_device)  # JAX builds a Mesh of no device, too
    for mesh in forms:
        with pytest.raises(
            ValueError,
            match=rf"`mesh\['data'\]` must be a positive integer, got {size}",
        ):
            mesh_config_report(model, mesh)


def test_an_abstract_mesh_of_integral_floats_plans_as_integers() -> None:
    model = nnx.Linear(4, 6, rngs=nnx.Rngs(0))
    report = mesh_config_report(model, AbstractMesh((2.0,), ("data",)))  # type: ignore[arg-type]
    assert report.axis_sizes == (2,) and type(report.axis_sizes[0]) is int


def test_the_optimizer_init_error_keeps_the_users_traceback() -> None:
    class BoomError(Exception):
        pass

    def init(params: Any) -> Any:
        raise BoomError("no state for you")

    tx = optax.GradientTransformation(init, lambda u, s, p=None: (u, s))
    with pytest.raises(ValueError, match="`optimizer`'s init failed") as info:
        mesh_config_report(nnx.Linear(2, 2, rngs=nnx.Rngs(0)), "data=2", optimizer=tx)
    assert isinstance(info.value.__cause__, BoomError)


def test_the_budget_travels_with_the_report() -> None:
    model = nnx.Linear(4, 6, rngs=nnx.Rngs(0))
    used = (4 * 6 + 6) * F32  # replicated: every device holds kernel and bias
    fits = mesh_config_report(model, "model=4", max_device_bytes=used)
    over = mesh_config_report(model, "model=4", max_device_bytes=used - 1)
    kib = mesh_config_report(model, "model=4", max_device_bytes="1KiB")
    none = mesh_config_report(model, "model=4")
    assert (fits.max_device_bytes, over.max_device_bytes, kib.max_device_bytes) == (
        used,
        used - 1,
        1024,
    )
    assert fits.ok and fits.fits() and kib.ok
    assert not over.ok and not over.fits() and over.errors == ()
    assert none.ok and none.max_device_bytes is None
    # An explicit argument still judges against any budget.
    assert over.fits(used) and not fits.fits(used - 1)
    with pytest.raises(ValueError, match="`max_device_bytes` is needed"):
        none.fits()
    for data, budget, ok in [
        (json.loads(fits.to_json()), used, True),
        (json.loads(over.to_json()), used - 1, False),
    ]:
        assert data["version"] == 3
        assert (data["ok"], data["fits"], data["max_device_bytes"]) == (ok, ok, budget)
    data = json.loads(none.to_json())
    assert (data["ok"], data["fits"], data["max_device_bytes"]) == (True, None, None)
    with pytest.raises(ValueError, match="`max_device_bytes` must be a size"):
        mesh_config_report(model, "model=4", max_device_bytes="lots")
    with pytest.raises(ValueError, match="`max_device_bytes` must be a nonnegative"):
        mesh_config_report(model, "model=4", max_device_bytes=-1)


def _first_verdict(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(("OK", "FAIL")))


def test_no_failing_verdict_begins_with_ok_in_any_format() -> None:
    model = nnx.Linear(4, 6, rngs=nnx.Rngs(0))
    rules = [("kernel", P(None, "model"))]  # 6 over model=4: indivisible
    cases = [
        (mesh_config_report(model, "model=4", max_device_bytes=100), False),
        (mesh_config_report(model, "model=4", rules=rules), False),
        (mesh_config_report(model, "model=4", max_device_bytes=10**6), True),
    ]
    for report, ok in cases:
        assert report.ok is ok
        assert report.verdict.startswith("OK: " if ok else "FAIL: ")
        assert json.loads(report.to_json())["verdict"] == report.verdict
        markdown = report.to_markdown().splitlines()
        assert markdown[2] == report.verdict  # right under the title
        page = report.to_html()
        assert html.unescape(
            re.findall(r'<p class="verdict[^"]*">([^<]*)</p>', page)[0]
        ) == (report.verdict)
        assert ('class="verdict ok"' in page) is ok
        assert "OK:" not in page or ok
    # to_html's argument overrides the stored budget, both ways.
    tight = mesh_config_report(model, "model=4", max_device_bytes=100)
    assert "fits the budget of 1000 B" in tight.to_html(max_device_bytes=1000)
    assert 'class="verdict ok"' in tight.to_html(max_device_bytes=1000)


def test_repr_is_short_for_a_7b_plan() -> None:
    cfg = LlamaConfig(vocab=32000, d_model=4096, n_layers=32, n_heads=32, d_ff=11008)
    model = abstract_model(llama(cfg))
    report = mesh_config_report(model, "fsdp=2,tp=4", max_device_bytes="16GiB")
    text = repr(report)
    assert len(text) <= 300
    # Unannotated: every device holds all 6,738,415,616 float32 parameters.
    assert text == (
        "MeshConfigReport(mesh={'fsdp': 2, 'tp': 4}, leaves=291, "
        f"bytes_per_device={6_738_415_616 * F32}, "
        f"max_device_bytes={16 * 2**30}, errors=0, warnings=0, ok=False)"
    )


def test_integer_params_get_no_optimizer_state_and_no_gradient() -> None:
    """Quantized (int8) parameters are carried by a training step, not trained:
    the plan's gradients and AdamW moments cover the float parameters only."""
    import optax

    class Quantized(nnx.Module):
        def __init__(self) -> None:
            self.qweight = nnx.Param(jnp.zeros((4, 6), jnp.int8))
            self.scale = nnx.Param(jnp.ones((6,), jnp.float32))
            self.bias = nnx.Param(jnp.zeros((3,), jnp.float32))

    report = mesh_config_report(Quantized(), "data=1", optimizer=optax.adamw(1e-3))
    float_bytes = (6 + 3) * 4
    grads = report.global_bytes_by_category["gradients"]
    assert grads == float_bytes
    assert {leaf.path for leaf in report.gradient_leaves} == {
        "grads/scale",
        "grads/bias",
    }
    # adamw: mu and nu per float parameter, adam's count (int32) and the step.
    moments = sum(
        leaf.global_bytes for leaf in report.optimizer_leaves if "qweight" in leaf.path
    )
    assert moments == 0
    assert report.global_bytes_by_category["optimizer state"] == 2 * float_bytes + 4 + 4

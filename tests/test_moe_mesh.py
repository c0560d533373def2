"""Experts on a mesh: the plan splits them over an expert axis, or says which sizes do.

Shard shapes are checked against real placement on 8 CPU devices and the bytes
against hand arithmetic; a mesh that does not divide the experts is refused
before any compile, in one line naming ``--mesh`` and the sizes that work.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from nnx_introspect import (
    ArgumentError,
    abstract_model,
    mesh_config_report,
    step_memory_report,
)
from nnx_introspect import examples as ex
from nnx_introspect.cli import main
from tests.test_moe_counts import Stacked

EXPERTS = ("w_gate", "w_up", "w_down")


@pytest.fixture(scope="module")
def tiny() -> nnx.Module:
    return abstract_model(ex.moe_tiny_sharded)


def expert_leaves(report: object) -> dict[str, object]:
    return {
        leaf.path: leaf
        for leaf in report.leaves  # type: ignore[attr-defined]
        if leaf.path.rsplit("/", 1)[-1] in EXPERTS
    }


@pytest.mark.parametrize(
    ("mesh", "gate", "down", "shard"),
    [
        # an expert axis: experts over ep, the weights' other dimensions as named
        ("ep=4,fsdp=2,tp=1", P("ep", "fsdp", "tp"), P("ep", "tp", "fsdp"), (2, 32, 32)),
        # no ep: experts over fsdp, the d_model dimension left whole
        ("fsdp=8,tp=1", P("fsdp", None, "tp"), P("fsdp", "tp", None), (1, 64, 32)),
        ("fsdp=2,tp=2", P("fsdp", None, "tp"), P("fsdp", "tp", None), (4, 64, 16)),
    ],
)
def test_experts_split_over_the_expert_axis(
    tiny: nnx.Module, mesh: str, gate: P, down: P, shard: tuple[int, ...]
) -> None:
    report = mesh_config_report(tiny, mesh)
    assert report.ok
    leaves = expert_leaves(report)
    assert len(leaves) == 2 * 3
    for path, leaf in leaves.items():
        spec = down if path.endswith("w_down") else gate
        assert leaf.spec == spec, path  # type: ignore[attr-defined]
        axis = spec[0]
        assert leaf.source == f"metadata, experts over {axis}"  # type: ignore[attr-defined]
    gate_leaf = leaves["layers/0/moe/w_gate"]
    assert gate_leaf.shard_shape == shard  # type: ignore[attr-defined]
    # JAX's own placement on 8 CPU devices holds the same shard
    sizes = dict(part.split("=") for part in mesh.split(","))
    devices = jax.make_mesh(
        tuple(int(v) for v in sizes.values()),
        tuple(sizes),
        axis_types=(jax.sharding.AxisType.Explicit,) * len(sizes),
    )
    placed = jax.device_put(
        np.zeros((8, 64, 32), np.float32), NamedSharding(devices, gate)
    )
    assert placed.addressable_shards[0].data.shape == shard


def test_no_expert_axis_replicates_them_and_rules_map_them(tiny: nnx.Module) -> None:
    serving = mesh_config_report(
        tiny, "tp=2", logical_rules=[("fsdp", None), ("tp", "tp")]
    )
    assert serving.ok
    leaf = expert_leaves(serving)["layers/1/moe/w_up"]
    assert leaf.spec == P(None, None, "tp")  # type: ignore[attr-defined]
    assert leaf.source.endswith("experts over no axis (replicated)")  # type: ignore[attr-defined]
    mapped = mesh_config_report(
        tiny, "data=2,fsdp=2,tp=2", logical_rules=[("expert", "data")]
    )
    assert mapped.ok
    leaf = expert_leaves(mapped)["layers/1/moe/w_up"]
    assert leaf.spec == P("data", "fsdp", "tp")  # type: ignore[attr-defined]
    assert leaf.shard_shape == (4, 32, 16)  # type: ignore[attr-defined]


def test_qwen3_30b_a3b_bytes_on_an_expert_parallel_mesh() -> None:
    report = mesh_config_report(
        abstract_model(ex.qwen3_30b_a3b_sharded), "ep=16,fsdp=4,tp=1"
    )
    assert report.ok
    v, d, layers, e, f = 151936, 2048, 48, 128, 768
    embed_and_head = 2 * v * d // 4  # over fsdp
    attention = (d * 4096 * 2 + d * 512 * 2) // 4  # q, o; k, v: over fsdp
    per_layer = attention + 2 * d + d * e // 4 + 3 * e * d * f // (16 * 4)
    assert report.bytes_per_device == 4 * (embed_and_head + d + layers * per_layer)


def test_indivisible_experts_name_the_sizes_that_work(tiny: nnx.Module) -> None:
    report = mesh_config_report(tiny, "ep=3,fsdp=1,tp=1")
    problems = [p for p in report.errors if p.kind == "experts"]
    assert len(problems) == len(report.errors) == 6
    first = problems[0]
    assert (first.dimension, first.size, first.axes, first.product) == (
        0,
        8,
        ("ep",),
        3,
    )
    assert first.message == (
        "`layers/0/moe/w_down`: its 8 experts (dimension 0) do not split over "
        "ep=3. Choose `mesh` (--mesh) with ep dividing 8: 1, 2, 4 or 8."
    )


def test_experts_found_by_structure_alone() -> None:
    # tunix's layout: stacked experts annotated ("fsdp", None, "tp"), a router
    # counting them (num_experts, experts_per_tok)
    with nnx.use_eager_sharding(False):
        model = abstract_model(lambda rngs: Stacked(1, rngs))
    (problem,) = mesh_config_report(model, "fsdp=3,tp=1").errors
    assert problem.kind == "experts"
    assert problem.message.endswith("with fsdp dividing 4: 1, 2 or 4.")


def test_step_refuses_such_a_mesh_in_one_line_before_compiling(
    tiny: nnx.Module, capsys: pytest.CaptureFixture[str]
) -> None:
    batch = jax.ShapeDtypeStruct((6, 16), jnp.int32)
    with pytest.raises(ArgumentError, match=r"nothing compiled") as caught:
        step_memory_report(
            tiny, "ep=3,fsdp=1,tp=1", batch, loss="lm", optimizer="adamw"
        )
    message = str(caught.value)
    assert caught.value.argument == "mesh" and "\n" not in message
    assert "its 8 experts (dimension 0) do not split over ep=3" in message
    assert "Choose `mesh` (--mesh) with ep dividing 8: 1, 2, 4 or 8" in message
    code = main(
        [
            "step",
            "nnx_introspect.examples:moe_tiny_sharded",
            "--mesh",
            "ep=3,fsdp=1,tp=1",
            "--batch",
            "int32[6,16]",
            "--loss",
            "lm",
            "--optimizer",
            "adamw",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert "argument --mesh" in err and "with ep dividing 8: 1, 2, 4 or 8" in err

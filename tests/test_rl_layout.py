"""rl_memory_report(role_meshes=): roles on devices of their own, each slice alone."""

import json
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from nnx_introspect import (
    ArgumentError,
    RLMemoryReport,
    count_params,
    rl_memory_report,
)
from nnx_introspect._rl.layout import as_layout
from nnx_introspect._rl.loss import grpo_loss
from nnx_introspect._step import TRAIN_OPTIMIZER_DONATED, StepSpec, measure_step
from nnx_introspect.examples import LlamaConfig, llama
from tests.cli_helpers import run

SMALL = llama(LlamaConfig(vocab=64, d_model=32, n_layers=2, n_heads=2, d_ff=64))
KW: dict[str, Any] = {
    "batch": 2,
    "generations": 2,
    "prompt": 8,
    "completion": 8,
    "max_device_bytes": "64MiB",
}


def small(rngs: Any) -> Any:
    """The small Llama by name, for the command line."""
    return SMALL(rngs)


@pytest.fixture(scope="module")
def split() -> RLMemoryReport:
    return rl_memory_report(SMALL, "data=4", role_meshes={"rollout": "data=4"}, **KW)


def test_each_slice_holds_only_its_own_roles(split: RLMemoryReport) -> None:
    phases = {p.name: p for p in split.phases}
    # the rollout's devices hold its programs alone: its weights are arguments
    assert phases["prefill"].resident == () and phases["decode"].resident == ()
    assert phases["prefill"].mesh == "data=4 (rollout)"
    assert dict(phases["reference"].resident).keys() == {
        "actor parameters",
        "actor optimizer state",
    }
    assert dict(phases["train"].resident).keys() == {"reference parameters"}
    assert phases["train"].mesh == "data=4 (actor and reference)"
    assert split.layout.startswith("disaggregated: actor and reference on data=4")
    assert split.peak_bytes == max(p.peak_bytes for p in split.phases)


def test_the_reshard_is_the_rollouts_weights_on_each_of_its_devices(
    split: RLMemoryReport,
) -> None:
    n = count_params(SMALL(nnx.Rngs(0)))
    # the model's own float32 weights (tunix's RolloutConfig.data_type None),
    # replicated (no annotations) on each of 4 devices
    assert dict(split.roles)["rollout weights"] == 4 * n
    assert split.reshard_bytes == 4 * 4 * n
    data = json.loads(split.to_json())
    assert data["reshard_bytes"] == split.reshard_bytes
    assert "reshard per step" in split.to_markdown()


def test_the_train_program_is_the_slices_own_step(split: RLMemoryReport) -> None:
    """The train phase is the step compiled on the actor's slice alone."""
    s, p, c = 4, 8, 8
    ids, f32 = jnp.int32, jnp.float32
    batch = (
        jax.ShapeDtypeStruct((s, p), ids),
        jax.ShapeDtypeStruct((s, c), ids),
        jax.ShapeDtypeStruct((s, c), f32),
        jax.ShapeDtypeStruct((s,), f32),
        jax.ShapeDtypeStruct((s, c), f32),
        jax.ShapeDtypeStruct((s, c), f32),
    )
    spec = StepSpec(SMALL, "data=4", batch, loss=grpo_loss, optimizer="adamw")
    alone = measure_step(spec, cache=False, program=TRAIN_OPTIMIZER_DONATED)
    train = {p.name: p for p in split.phases}["train"]
    assert train.program_peak_bytes == alone.peak_bytes
    assert split.programs["train"].plan.axis_sizes == (4,)


def test_a_topology_is_cut_into_each_slices_own() -> None:
    layout = as_layout(
        "fsdp=4", {"rollout": "tp=2", "reference": "data=2"}, "v5e-8", True
    )
    assert layout.slice("actor").topology == "v5e-4"
    assert layout.slice("rollout").topology == "v5e-2"
    assert layout.slice("reference").topology == "v5e-2"
    assert not layout.shared("actor", "reference")
    assert as_layout("tp=8", None, "h100-8", True).colocated


@pytest.mark.parametrize(
    ("mesh", "role_meshes", "words"),
    [
        ("data=4", {"reward": "data=4"}, "'reward'"),
        ("data=8", {"rollout": "data=4"}, "need 12 devices"),
        ("data=4", ["rollout"], "must map roles"),
        ("data=4", {"rollout": "data=0"}, "role_meshes['rollout']"),
    ],
)
def test_bad_role_meshes_are_refused_before_any_compile(
    mesh: str, role_meshes: Any, words: str
) -> None:
    with pytest.raises(ArgumentError) as caught:
        rl_memory_report(SMALL, mesh, role_meshes=role_meshes, **KW)
    assert caught.value.argument == "role_meshes"
    assert words in str(caught.value)


def test_a_slice_the_family_has_not_is_refused() -> None:
    with pytest.raises(ArgumentError, match="v5e-3") as caught:
        as_layout("data=4", {"rollout": "tp=3"}, "v5e-8", True)
    assert caught.value.argument == "role_meshes"


def test_a_reference_mesh_without_a_reference_is_refused() -> None:
    with pytest.raises(ArgumentError, match="reference=False") as caught:
        rl_memory_report(
            SMALL, "data=4", role_meshes={"reference": "data=2"}, reference=False, **KW
        )
    assert caught.value.argument == "role_meshes"


def test_cli_role_mesh(capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "rl",
        "tests.test_rl_layout:small",
        "--mesh",
        "data=4",
        "--batch",
        "2",
        "--generations",
        "2",
        "--prompt",
        "8",
        "--completion",
        "8",
        "--format",
        "json",
    ]
    code, out, _ = run([*args, "--role-mesh", "rollout=data=4"], capsys)
    assert code == 0
    assert json.loads(out)["layout"].startswith("disaggregated")
    code, _, err = run([*args, "--role-mesh", "reward=data=4"], capsys)
    assert code == 2 and "argument --role-mesh:" in err
    code, _, err = run([*args, "--role-mesh", "rollout=data=8"], capsys)
    assert code == 2 and "--role-mesh" in err and "12" in err

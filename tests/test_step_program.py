"""Issue 29, item 3: programs are built by kinds, named in a child's request.

The training step is the kind ``"train"``: its argument groups number every
flattened argument as XLA numbers its entry parameters, with the roles the
plan gives each leaf; the child request names the kind and the child looks it
up; a kind added to the registry compiles through the same path, and the
breakdown's argument kinds are its groups' roles.
"""

import json
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import Mesh

from nnx_introspect import StepSpec
from nnx_introspect._breakdown.rows import argument_leaves
from nnx_introspect._step import child, registry
from nnx_introspect._step.compile import compile_request
from nnx_introspect._step.program import (
    ArgumentGroup,
    Program,
    ProgramKind,
    batch_group,
    sharded_batch,
    sharded_model_state,
    state_group,
)
from nnx_introspect._step.spec import plan_step
from nnx_introspect._step.train import TRAIN
from nnx_introspect._typing import ArgumentError

TARGET = "nnx_introspect.examples:two_layer"
X = jax.ShapeDtypeStruct((8, 3), jnp.float32)


def _spec(**options: Any) -> StepSpec:
    return StepSpec(TARGET, {"data": 2}, X, **options)


def _mesh() -> Mesh:
    return Mesh(jax.devices()[:2], ("data",))


def _built(spec: StepSpec) -> Program:
    plan = plan_step(spec)
    specs = {leaf.path: leaf.spec for leaf in plan.leaves + plan.optimizer_leaves}
    return TRAIN.build(spec.request(), _mesh(), specs)


def test_registry_names_the_training_step() -> None:
    assert registry.program_kind("train") is TRAIN
    with pytest.raises(ArgumentError, match="`program` must name") as caught:
        registry.program_kind("prefill")
    assert caught.value.argument == "program"
    assert "'train'" in str(caught.value)


@pytest.mark.parametrize(
    ("options", "optimizer", "outputs"),
    [
        ({"loss": None}, False, 1),
        ({"loss": "mean"}, False, 4),
        ({"loss": "mean", "optimizer": "adamw"}, True, 6),
    ],
)
def test_training_groups_are_the_plans_leaves_by_role(
    options: dict[str, Any], optimizer: bool, outputs: int
) -> None:
    spec = _spec(**options)
    program = _built(spec)
    plan = plan_step(spec)
    params = [leaf.path for leaf in plan.leaves]  # two_layer holds only Params
    opt = [leaf.path for leaf in plan.optimizer_leaves] if optimizer else []
    leaves = program.argument_leaves()
    # the breakdown's own numbering of the training step, by the plan's paths
    assert sorted(leaves, key=lambda leaf: leaf.path) == sorted(
        argument_leaves(params, [], opt, 1), key=lambda leaf: leaf.path
    )
    assert [leaf.parameter for leaf in leaves] == list(range(len(leaves)))
    assert len(leaves) == len(jax.tree.leaves(program.args))
    assert len(program.outputs) == outputs
    roles = [group.role for group in program.groups]
    assert ("optimizer state" in roles) is optimizer


def test_groups_that_miss_a_leaf_are_refused() -> None:
    program = _built(_spec(loss=None))
    short = Program(program.jitted, program.args, program.groups[:-1], ("output",))
    with pytest.raises(ValueError, match="groups name 4 arguments and its arguments"):
        short.argument_leaves()


def test_child_request_names_the_program() -> None:
    spec = _spec(loss=None)
    plan = plan_step(spec)
    assert child.child_request(spec, plan)["program"] == "train"
    with pytest.raises(ArgumentError, match="`program` must name"):
        child.child_request(spec, plan, program="decode")


def test_child_looks_the_program_up() -> None:
    spec = _spec(loss="mean")
    plan = plan_step(spec)
    payload = json.loads(json.dumps(child.child_request(spec, plan)))
    here = compile_request(spec.request(), _mesh(), plan)
    there = child.run_child_request(payload)
    assert there.argument_bytes == here.argument_bytes
    assert there.output_bytes == here.output_bytes
    # a parent that names no program (an older one) asks for the training step
    del payload["program"]
    assert child.run_child_request(payload).argument_bytes == here.argument_bytes
    payload["program"] = "decode"
    with pytest.raises(ArgumentError, match="`program` must name"):
        child.run_child_request(payload)


def _doubled(request: Any, mesh: Mesh, specs: Any) -> Program:
    """A forward-only program of its own: ``2 * model(x)``."""
    from flax import nnx

    graphdef, params, rest = sharded_model_state(request.model, specs, mesh)
    batch = sharded_batch(request.batch, request.batch_specs, mesh)

    def doubled(params: Any, rest: Any, batch: Any) -> Any:
        return 2 * nnx.merge(graphdef, params, rest)(*batch)

    groups = (
        state_group("parameter", params),
        state_group("other model state", rest),
        batch_group(batch),
    )
    jitted = jax.jit(doubled, keep_unused=True)
    return Program(jitted, (params, rest, batch), groups, ("doubled",))


def test_a_new_kind_compiles_through_the_same_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kind = ProgramKind("doubled", _doubled, "twice the forward pass")
    monkeypatch.setattr(registry, "PROGRAM_KINDS", (*registry.PROGRAM_KINDS, kind))
    spec = _spec(loss=None, breakdown=True)
    plan = plan_step(spec)
    payload = json.loads(json.dumps(child.child_request(spec, plan, "doubled")))
    readings = child.run_child_request(payload)
    # 36 float32 parameters, replicated, and 4 of 8 rows of 3 floats: XLA's
    assert readings.argument_bytes == 36 * 4 + 4 * 3 * 4
    # the output: 4 rows of 4 doubled floats
    assert readings.output_bytes == 4 * 4 * 4
    assert readings.breakdown is not None
    # every argument live at the peak, numbered and kinded by the groups
    arguments = {
        row["path"]: (row["parameter"], row["kind"])
        for row in readings.breakdown["rows"]
        if row["parameter"] is not None
    }
    assert arguments == {
        "l1/bias": (0, "parameter"),
        "l1/kernel": (1, "parameter"),
        "l2/bias": (2, "parameter"),
        "l2/kernel": (3, "parameter"),
        "batch[0]": (4, "batch"),
    }


def test_a_group_role_must_be_a_breakdown_kind() -> None:
    program = _built(_spec(loss=None))
    first = program.groups[0]
    bad = (ArgumentGroup("kv cache", first.paths), *program.groups[1:])
    wrong = Program(program.jitted, program.args, bad, ("output",))
    with pytest.raises(ArgumentError, match="`kind` must be one of") as caught:
        wrong.argument_leaves()
    assert caught.value.argument == "kind"

"""StepSpec: one checked, frozen value for a step; its JSON and its variations."""

import dataclasses
import json
import pickle
import subprocess
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from nnx_introspect import StepSpec
from nnx_introspect._step import child
from nnx_introspect._typing import ArgumentError

TARGET = "nnx_introspect.examples:two_layer"
X = jax.ShapeDtypeStruct((8, 3), jnp.float32)


def test_fields_are_checked_and_kept_normalised() -> None:
    spec = StepSpec(TARGET, "data=4", jnp.zeros((8, 3)), max_device_bytes="1KiB")
    assert spec.batch == (X,)
    assert spec.max_device_bytes == 1024
    assert spec.mesh_axes == (("data", 4),)
    assert spec.batch_specs == (P("data"),)
    assert spec.target_name == TARGET and spec.num_devices == 4
    assert spec.budget.bytes == 1024


@pytest.mark.parametrize(
    ("kwargs", "argument", "match"),
    [
        ({"loss": "bogus"}, "loss", "`loss` must be None"),
        ({"loss": None, "optimizer": "adamw"}, "optimizer", "needs a loss"),
        ({"max_device_bytes": "12"}, "max_device_bytes", "unit"),
        ({"batch_spec": [P(), P()]}, "batch_spec", "one per batch leaf"),
        ({"network_bytes_per_second": "50GB"}, "network_bytes_per_second", "GPU"),
        ({"topology": "v5e-8"}, "topology", "`topology` 'v5e-8'"),
    ],
)
def test_bad_values_are_argument_errors(
    kwargs: dict[str, Any], argument: str, match: str
) -> None:
    with pytest.raises(ArgumentError, match=match) as info:
        StepSpec(TARGET, "data=4", X, **kwargs)
    assert info.value.argument == argument


def test_replace_checks_again_and_keeps_the_model() -> None:
    spec = StepSpec(TARGET, "data=4", X)
    wider = dataclasses.replace(spec, mesh={"data": 2})
    assert wider.mesh_axes == (("data", 2),) and wider.model is spec.model
    with pytest.raises(ArgumentError, match="`batch` must hold") as info:
        dataclasses.replace(spec, batch=())
    assert info.value.argument == "batch"
    other = dataclasses.replace(spec, target="nnx_introspect.examples:llama_tiny")
    assert other.model is not spec.model


def test_json_round_trip_and_pickle() -> None:
    spec = StepSpec(
        TARGET,
        "data=2,model=2",
        X,
        optimizer="adamw",
        logical_rules=[("batch", "data")],
        max_device_bytes=4096,
    )
    data = json.loads(spec.to_json())
    assert len(data["batch_spec"]) == 1 and "rules" not in data
    back = StepSpec.from_json(spec.to_json())
    assert back.batch == spec.batch and back.mesh_axes == spec.mesh_axes
    assert back.batch_specs == spec.batch_specs
    assert back.optimizer_name == "adamw" and back.max_device_bytes == 4096
    assert back.logical_rules == [("batch", "data")]
    again = pickle.loads(pickle.dumps(spec))
    assert again == spec and again.model is not spec.model


def test_json_needs_names() -> None:
    spec = StepSpec(lambda rngs: nnx.Linear(3, 4, rngs=rngs), "data=1", X, loss=None)
    with pytest.raises(ArgumentError, match="`target` must be passed as") as info:
        spec.to_json()
    assert info.value.argument == "target"


def test_a_child_argument_error_stays_one(monkeypatch: pytest.MonkeyPatch) -> None:
    line = json.dumps(
        {"error": "ValueError", "argument": "batch", "message": "`batch` is bad"}
    )
    completed = subprocess.CompletedProcess([], 0, line + "\n", "")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: completed)
    with pytest.raises(ArgumentError, match="`batch` is bad") as info:
        child.run_child({"topology": None}, 2)
    assert info.value.argument == "batch"

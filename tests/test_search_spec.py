"""The searches take a StepSpec first, as step_memory_report and max_batch do."""

from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec as P

from nnx_introspect import StepSpec, compare_meshes, fit_step

X = jax.ShapeDtypeStruct((8, 3), jnp.float32)
TARGET = "nnx_introspect.examples:two_layer"
RULES = [("kernel", P(None, "model"))]


def _spec() -> StepSpec:
    return StepSpec(
        TARGET, "data=8", X, rules=RULES, batch_spec=P("data"), max_device_bytes="1MiB"
    )


def test_compare_meshes_by_spec_equals_the_keyword_form() -> None:
    meshes = ["data=8,model=1", "data=4,model=2"]
    with ThreadPoolExecutor(1) as pool:
        by_spec = compare_meshes(_spec(), meshes, executor=pool)
        by_keyword = compare_meshes(
            TARGET,
            meshes,
            X,
            rules=RULES,
            batch_spec=P("data"),
            max_device_bytes="1MiB",
            executor=pool,
        )
        # an option beside the spec replaces its field
        looser = compare_meshes(_spec(), meshes, executor=pool, max_device_bytes="2MiB")
    assert [(c.name, c.peak_bytes) for c in by_spec.candidates] == [
        (c.name, c.peak_bytes) for c in by_keyword.candidates
    ]
    assert by_spec.max_device_bytes == 2**20
    assert looser.max_device_bytes == 2**21


def test_fit_step_by_spec_equals_the_keyword_form() -> None:
    with ThreadPoolExecutor(1) as pool:
        by_spec = fit_step(_spec(), "data=8,model=1", executor=pool)
        by_keyword = fit_step(
            TARGET,
            "data=8,model=1",
            X,
            rules=RULES,
            batch_spec=P("data"),
            max_device_bytes="1MiB",
            executor=pool,
        )
    assert by_spec.change == by_keyword.change
    assert by_spec.compiles == by_keyword.compiles == 1


def test_a_spec_with_a_batch_beside_it_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"compare_meshes\(\) was given a StepSpec"):
        compare_meshes(_spec(), "auto", X)
    with pytest.raises(TypeError, match=r"fit_step\(\) needs `target`, `meshes`"):
        fit_step(TARGET, "data=8")
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'lo'"):
        fit_step(_spec(), "data=8", lo=8)  # type: ignore[call-arg]


def test_fit_step_chooses_the_microbatches() -> None:
    with pytest.raises(ValueError, match=r"`microbatches` is 2: `fit_step` chooses"):
        fit_step(_spec(), "data=8", microbatches=2)

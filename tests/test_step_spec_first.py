"""A StepSpec taken as the first argument; the step's options written once."""

import dataclasses
import typing

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from nnx_introspect import StepOptions, StepSpec, max_batch, step_memory_report

X = jax.ShapeDtypeStruct((8, 4), jnp.float32)


def linear(rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(4, 6, rngs=rngs)


def without_time(data: dict[str, typing.Any]) -> dict[str, typing.Any]:
    return {k: v for k, v in data.items() if k != "compile_seconds"}


def test_the_options_are_the_specs_keyword_fields() -> None:
    keyword = {
        f.name
        for f in dataclasses.fields(StepSpec)
        if f.init and f.kw_only and not f.name.startswith("_")
    }
    assert set(StepOptions.__optional_keys__) == keyword
    hints = typing.get_type_hints(StepOptions)
    spec_hints = typing.get_type_hints(StepSpec)
    assert all(hints[name] == spec_hints[name] for name in keyword)


def test_a_spec_alone_is_the_same_step() -> None:
    spec = StepSpec(linear, "data=8", X, optimizer="adamw")
    by_spec = step_memory_report(spec)
    by_keywords = step_memory_report(linear, "data=8", X, optimizer="adamw")
    assert without_time(by_spec.json_data()) == without_time(by_keywords.json_data())
    # options beside a spec replace its own: the forward pass only, 4 x 6 + 6
    # parameters and one of 8 rows of x on each device
    forward = step_memory_report(spec, loss=None, optimizer=None)
    assert forward.step == "forward"
    assert forward.argument_bytes == (4 * 6 + 6) * 4 + 4 * 4
    search = max_batch(spec, max_device_bytes="4KiB", hi=64)
    assert search.report is not None and search.report.optimizer == "adamw"


def test_a_spec_with_a_mesh_or_an_unknown_option_is_refused() -> None:
    spec = StepSpec(linear, "data=8", X)
    with pytest.raises(TypeError, match=r"given a StepSpec and a `mesh` or `batch`"):
        step_memory_report(spec, "data=8")
    with pytest.raises(
        TypeError, match=r"needs `target`, `mesh` and `batch`.*no `batch`"
    ):
        step_memory_report(linear, "data=8")
    with pytest.raises(
        TypeError, match=r"max_batch\(\) got an unexpected keyword argument 'los'"
    ):
        max_batch(spec, los="lm")  # type: ignore[call-arg]
    with pytest.raises(
        TypeError, match=r"^`loss` must be "
    ):  # the spec's own type check
        step_memory_report(linear, "data=8", X, loss=3)  # type: ignore[arg-type]

"""Issue 44's newcomer's list, item 9: a wrong type is one line naming the argument.

jaxtyping and beartype answered ``topology=8`` with a 30-line dump of every
argument and annotation; every public function (and ``StepSpec``) now raises
an ``ArgumentTypeError`` (a ``TypeError``) of one sentence: the argument in
backticks, what it must be, the value given and its type. The command line
maps the argument to its flag, as it does an ``ArgumentError``'s.
"""

import argparse
import pickle
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nnx_introspect import StepSpec, mesh_config_report, step_memory_report
from nnx_introspect._typing import ArgumentTypeError, as_count, typechecked
from nnx_introspect.cli.errors import usage_error
from nnx_introspect.examples import two_layer

X = jax.ShapeDtypeStruct((8, 3), jnp.float32)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: step_memory_report(two_layer, "data=1", X, topology=8),  # type: ignore[arg-type]
            "`topology` must be a string or None, got 8 of type int.",
        ),
        (
            lambda: step_memory_report(two_layer, "data=1", X, optimizer=3),
            "`optimizer` must be an optax.GradientTransformation, a string or "
            "None, got 3 of type int.",
        ),
        (
            lambda: StepSpec(two_layer, "data=1", X, breakdown="yes"),  # type: ignore[arg-type]
            "`breakdown` must be True or False, got 'yes' of type str.",
        ),
        (
            lambda: step_memory_report(two_layer, "data=1", X, cache="no"),  # type: ignore[arg-type]
            "`cache` must be True or False, got 'no' of type str.",
        ),
        (
            lambda: mesh_config_report(two_layer, "data=1"),  # type: ignore[arg-type]  # a factory
            "`target` must be an nnx.Pytree or an nnx.State, got <function two_layer",
        ),
    ],
)
def test_a_wrong_type_is_one_line_naming_the_argument(call: Any, message: str) -> None:
    with pytest.raises(ArgumentTypeError) as raised:
        call()
    text = str(raised.value)
    assert text.startswith(message)
    assert "\n" not in text and len(text) < 300
    assert isinstance(raised.value, TypeError)  # as jaxtyping's was


def test_the_argument_is_carried_and_survives_pickling() -> None:
    with pytest.raises(ArgumentTypeError) as raised:
        step_memory_report(two_layer, "data=1", X, topology=8)  # type: ignore[arg-type]
    assert raised.value.argument == "topology"
    again = pickle.loads(pickle.dumps(raised.value))
    assert (again.argument, str(again)) == ("topology", str(raised.value))


def test_the_command_line_names_the_flag() -> None:
    with pytest.raises(ArgumentTypeError) as raised:
        step_memory_report(two_layer, "data=1", X, topology=8)  # type: ignore[arg-type]
    args = argparse.Namespace(topology="8", rules=None, command="step")
    assert str(usage_error(raised.value, args)).startswith(
        "argument --topology: --topology must be a string or None"
    )


def test_an_error_deeper_inside_passes_through_as_it_is() -> None:
    @typechecked
    def inner(size: int) -> int:
        return size

    @typechecked
    def outer(name: str) -> int:
        return inner(name)  # type: ignore[arg-type]

    with pytest.raises(ArgumentTypeError, match=r"^`size` must be an integer, got 'a'"):
        outer("a")


def test_a_right_call_is_unchanged() -> None:
    @typechecked
    def f(n: int, /, *, name: str | None = None) -> str:
        return f"{n}{name}"

    assert f(3, name="x") == "3x"
    assert f.__name__ == "f"


@pytest.mark.parametrize("value", [2.0, np.float32(2.0), jnp.asarray(2.0)])
def test_a_count_refuses_a_float(value: Any) -> None:
    with pytest.raises(ArgumentTypeError, match=r"^`batch` must be an integer \(a "
                       r"count\), got the float 2\.0\. Pass 2\.$"):  # fmt: skip
        as_count(value, "batch")
    assert as_count(np.int32(2), "batch") == 2 and as_count(jnp.asarray(3), "n") == 3
    with pytest.raises(ValueError, match="`batch` must be a positive integer, got 0"):
        as_count(0, "batch")

"""Integer-scalar coercion and finiteness checks shared by every public function."""

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given
from hypothesis import strategies as st

from nnx_introspect._typing import (
    as_int,
    check_filters,
    check_finite,
    check_items,
    short_repr,
)


@pytest.mark.parametrize(
    "value",
    [
        3,
        3.0,
        np.int32(3),
        np.float32(3.0),
        np.int64(3),
        np.asarray(3),
        jnp.asarray(3.0),
    ],
)
def test_as_int_accepts_integer_valued_scalars(value: object) -> None:
    result = as_int(value, "n", minimum=1)
    assert result == 3 and type(result) is int


@pytest.mark.parametrize(
    ("value", "exc", "match"),
    [
        (0, ValueError, r"`n` must be a positive integer, got 0\."),
        (-2.0, ValueError, r"`n` must be a positive integer, got -2\."),
        (
            2.5,
            ValueError,
            r"`n` must be a positive integer, got the non-integral value 2\.5\.",
        ),
        (math.nan, ValueError, r"`n` must be a positive integer, got nan\."),
        (math.inf, ValueError, r"`n` must be a positive integer, got inf\."),
        (-math.inf, ValueError, r"`n` must be a positive integer, got -inf\."),
        (True, TypeError, r"`n` must be a positive integer, got the bool True\."),
        (np.bool_(True), TypeError, r"got the bool"),
        (jnp.asarray(True), TypeError, r"got the bool"),
        ("3", TypeError, r"`n` must be a positive integer, got '3' of type str\."),
        (None, TypeError, r"got None of type NoneType"),
        (np.ones(2), TypeError, r"got an array of shape \(2,\)"),
    ],
)
def test_as_int_rejects(value: object, exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        as_int(value, "n", minimum=1)


def test_as_int_nonnegative_wording() -> None:
    assert as_int(0, "seed", minimum=0) == 0
    with pytest.raises(
        ValueError, match=r"`seed` must be a nonnegative integer, got -1\."
    ):
        as_int(-1, "seed", minimum=0)


def test_as_int_rejects_traced_values() -> None:
    def f(v: jax.Array) -> int:
        return as_int(v, "seed")

    with pytest.raises(TypeError, match=r"`seed` must be a concrete .*static_argnums"):
        jax.jit(f)(jnp.asarray(1))


@given(st.integers(min_value=0, max_value=10**30))
def test_as_int_exact_for_python_ints(n: int) -> None:
    assert as_int(n, "n") == n


@given(st.integers(min_value=0, max_value=2**53))
def test_as_int_exact_for_integral_floats(n: int) -> None:
    assert as_int(float(n), "n") == n


def test_check_finite() -> None:
    check_finite(jnp.ones(3), "x")
    check_finite(jnp.arange(3), "x")  # integers are always finite
    with pytest.raises(
        ValueError,
        match=r"`x` must be finite, got 2 NaN or infinite value\(s\) among 4",
    ):
        check_finite(jnp.asarray([1.0, jnp.nan, jnp.inf, 0.0]), "x")

    @jax.jit
    def f(x: jax.Array) -> jax.Array:
        check_finite(x, "x")  # traced: cannot be inspected, lets it through
        return x

    assert bool(jnp.isnan(f(jnp.asarray([jnp.nan])))[0])


# --- filters ----------------------------------------------------------------------


def _path_and_value(path: tuple[object, ...], value: object) -> bool:
    return "kernel" in path


@pytest.mark.parametrize(
    "flt",
    [
        nnx.Param,
        "params",
        True,
        False,
        ...,
        None,
        _path_and_value,
        nnx.PathContains("kernel"),
        nnx.Not(nnx.Param),
        (nnx.Param, (nnx.BatchStat, "dropout")),
        [nnx.Param, ...],
    ],
    # a function's repr holds its address: name it, so ids agree across processes
    ids=lambda flt: (
        flt.__name__ if callable(flt) and hasattr(flt, "__code__") else repr(flt)
    ),
)
def test_check_filters_accepts_what_flax_accepts(flt: Any) -> None:
    check_filters((flt,))
    nnx.filterlib.to_predicate(flt)  # flax agrees


@pytest.mark.parametrize(
    ("filters", "where", "shown"),
    [
        ((3,), r"filters\[0\]", "got 3 of type int"),
        ((nnx.Param, 2.5), r"filters\[1\]", "got 2.5 of type float"),
        (((nnx.Param, (None, {})),), r"filters\[0\]\[1\]\[1\]", "got {} of type dict"),
        ((np.True_,), r"filters\[0\]", "got np.True_ of type bool"),
        ((object(),), r"filters\[0\]", "got <object object at .*> of type object"),
    ],
)
def test_check_filters_names_the_bad_item(
    filters: tuple[object, ...], where: str, shown: str
) -> None:
    with pytest.raises(
        TypeError, match=rf"^`{where}` must be an NNX filter: .*; {shown}\.$"
    ):
        check_filters(filters)
    # flax itself fails on these with its own broken f-string, not a useful message
    bad: Any = filters[-1]
    with pytest.raises((TypeError, ValueError), match="format"):
        nnx.filterlib.to_predicate(bad)


def test_check_filters_rejects_callables_that_cannot_take_path_and_value() -> None:
    with pytest.raises(
        TypeError,
        match=r"`filters\[0\]` .*the callable <built-in function len> cannot be called "
        r"as `f\(path, value\)` \(its signature is \(obj, /\)\)\.",
    ):
        check_filters((len,))
    check_filters((print,))  # (*args): callable with two arguments


def test_check_items_checks_every_item_with_its_index() -> None:
    check_items(("a", "b"), "stacked", str, "a module path string")
    for bad_at in range(4):
        items = ["a"] * 4
        items[bad_at] = 7  # type: ignore[call-overload]
        with pytest.raises(
            TypeError,
            match=rf"^`stacked\[{bad_at}\]` must be a module path string, got 7 of "
            r"type int\.$",
        ):
            check_items(items, "stacked", str, "a module path string")
    with pytest.raises(
        TypeError, match=r"`n\[0\]` must be an int, got True of type bool"
    ):
        check_items([True], "n", int, "an int")
    check_items([True], "flags", (bool, int), "a flag")


def test_short_repr_cuts_long_values() -> None:
    assert short_repr("x" * 10) == repr("x" * 10)
    cut = short_repr("x" * 200, limit=20)
    assert len(cut) == 20 and cut.endswith("...")


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "float16", "float32"])
def test_check_finite_sees_nan_in_every_float_dtype(dtype: str) -> None:
    """ml_dtypes floats (bfloat16, float8) are not np.inexact: NaN must still be seen."""
    x = jnp.array([1.0, jnp.nan], dtype=dtype)
    with pytest.raises(ValueError, match="`x` must be finite"):
        check_finite(x, "x")
    check_finite(jnp.ones(2, dtype=dtype), "x")


def test_a_check_that_names_no_parameter_is_named_by_its_argument() -> None:
    """jaxtyping names the failed parameter by checking each again with
    beartype, which samples one item of a container: on a good sample it names
    none (issue 44's CI saw "Type-check error whilst checking the parameters of
    ...roofline." alone). The one-line error then finds the argument itself."""
    import inspect

    from jaxtyping import TypeCheckError

    from nnx_introspect._typing import ArgumentTypeError, _one_line

    def plan(name: str, mesh_axes: tuple[tuple[str, int], ...]) -> int:
        return 0

    bad = (("data", 4), ("tp", "2"))
    error = TypeCheckError("Type-check error whilst checking the parameters of plan.")
    found = _one_line(error, plan, inspect.signature(plan), ("x", bad), {})
    assert isinstance(found, ArgumentTypeError) and found.argument == "mesh_axes"
    assert str(found).startswith("`mesh_axes` must be a tuple")

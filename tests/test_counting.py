"""Leaf and element counts, ideal shares and parameter sums.

Expected values come from independent arithmetic on the layer shapes, or from
JAX's own tree traversal, never from the library's helpers.
"""

from fractions import Fraction
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from nnx_introspect import count_params, count_state_leaves, ideal_share, param_sum
from nnx_introspect.examples import TwoLayer

# -- count_state_leaves -------------------------------------------------------------


def test_leaves_of_linear_match_spec(linear: nnx.Linear) -> None:
    _, state = nnx.split(linear)
    assert count_state_leaves(linear) == 2
    assert count_state_leaves(state) == len(jax.tree_util.tree_leaves(state)) == 2


def test_leaves_of_two_layer() -> None:
    model = TwoLayer(3, 4, rngs=nnx.Rngs(0))
    _, state = nnx.split(model)
    assert len(state) == 2  # top-level entries are not leaves
    assert count_state_leaves(model) == count_state_leaves(state) == 4


def test_leaves_by_kind(bn_dropout: nnx.Module) -> None:
    # l1 (kernel, bias) + bn (scale, bias, mean, var) + dropout rngs (key, count) + l2
    assert count_state_leaves(bn_dropout) == 2 + 4 + 2 + 2
    assert count_state_leaves(bn_dropout) == len(jax.tree.leaves(nnx.state(bn_dropout)))
    assert count_state_leaves(bn_dropout, nnx.Param) == 2 + 2 + 2
    assert count_state_leaves(bn_dropout, nnx.BatchStat) == 2
    assert count_state_leaves(bn_dropout, nnx.RngState) == 2
    # several filters select their union
    assert count_state_leaves(bn_dropout, nnx.BatchStat, nnx.RngState) == 4
    assert count_state_leaves(bn_dropout, ...) == 10
    assert count_state_leaves(bn_dropout, nnx.PathContains("mean")) == 1
    assert count_state_leaves(bn_dropout, "dropout") == 2  # a string filters by RNG tag


def test_leaves_of_filtered_state(bn_dropout: nnx.Module) -> None:
    state = nnx.state(bn_dropout)
    assert count_state_leaves(state, nnx.BatchStat) == 2
    assert count_state_leaves(state, nnx.Not(nnx.Param)) == 4


def test_tied_variables_count_once(tied: nnx.Module) -> None:
    assert count_state_leaves(tied) == 2
    assert count_params(tied) == 4 * 4 + 4


def test_raw_array_attributes_are_leaves() -> None:
    class WithRaw(nnx.Module):
        def __init__(self) -> None:
            self.l = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
            self.buf = jnp.zeros(5)

    model = WithRaw()
    assert count_state_leaves(model) == 3 == len(jax.tree.leaves(nnx.state(model)))
    assert count_params(model) == 6  # the raw buffer is not a Param
    assert count_params(model, ...) == 6 + 5


def test_abstract_matches_concrete(
    bn_dropout: nnx.Module, abstract_bn_dropout: nnx.Module
) -> None:
    for filters in [(), (nnx.Param,), (nnx.BatchStat,), (nnx.RngState,)]:
        assert count_state_leaves(abstract_bn_dropout, *filters) == count_state_leaves(
            bn_dropout, *filters
        )
        assert count_params(abstract_bn_dropout, *filters) == count_params(
            bn_dropout, *filters
        )


# -- count_params ------------------------------------------------------------------


@settings(deadline=None, max_examples=15)
@given(st.integers(1, 64), st.integers(1, 64))
def test_linear_param_count(d: int, f: int) -> None:
    model = nnx.eval_shape(lambda: nnx.Linear(d, f, rngs=nnx.Rngs(0)))
    assert count_params(model) == (d + 1) * f


def test_params_by_kind(bn_dropout: nnx.Module) -> None:
    linear1, bn, linear2 = 3 * 5 + 5, 5 + 5, 5 * 2 + 2
    assert count_params(bn_dropout) == linear1 + bn + linear2
    assert count_params(bn_dropout, nnx.BatchStat) == 5 + 5
    assert count_params(bn_dropout, nnx.RngState) == 1 + 1  # 0-d key and counter


def test_count_is_exact_python_int_at_trillion_scale() -> None:
    d, f = 10**6, 10**6
    model = nnx.eval_shape(lambda: nnx.Linear(d, f, rngs=nnx.Rngs(0)))
    total = count_params(model)
    assert type(total) is int
    assert total == 1_000_001_000_000  # (10**6 + 1) * 10**6, beyond float32 and int32
    assert count_state_leaves(model) == 2


def test_no_bias() -> None:
    model = nnx.Linear(4, 3, use_bias=False, rngs=nnx.Rngs(0))
    assert count_state_leaves(model) == 1
    assert count_params(model) == 12


# -- ideal_share -------------------------------------------------------------------


def test_ideal_share_examples_from_spec() -> None:
    assert ideal_share(20, 2) == 10.0
    assert ideal_share(6, 4) == 1.5
    assert ideal_share(6.0, 4.0) == 1.5
    assert ideal_share(np.int64(6), jnp.asarray(4)) == 1.5
    assert ideal_share(0, 3) == 0.0


@given(st.integers(0, 10**18), st.integers(1, 10**6))
def test_ideal_share_is_correctly_rounded_division(total: int, shards: int) -> None:
    share = ideal_share(total, shards)
    assert type(share) is float
    assert share == float(Fraction(total, shards))


@pytest.mark.parametrize(
    ("total", "shards", "exc", "match"),
    [
        (10, 0, ValueError, r"`num_shards` must be a positive integer, got 0\."),
        (10, -1, ValueError, r"`num_shards` must be a positive integer, got -1\."),
        (
            10,
            2.5,
            ValueError,
            r"`num_shards` must be a positive integer, got the non-integral value 2\.5\.",
        ),
        (
            10,
            float("nan"),
            ValueError,
            r"`num_shards` must be a positive integer, got nan\.",
        ),
        (
            10,
            float("inf"),
            ValueError,
            r"`num_shards` must be a positive integer, got inf\.",
        ),
        (
            10,
            True,
            TypeError,
            r"`num_shards` must be a positive integer, got the bool True\.",
        ),
        (-1, 2, ValueError, r"`total` must be a nonnegative integer, got -1\."),
        (
            1.5,
            2,
            ValueError,
            r"`total` must be a nonnegative integer, got the non-integral value 1\.5\.",
        ),
        ("10", 2, TypeError, r"total"),
        (10, "2", TypeError, r"num_shards"),
    ],
)
def test_ideal_share_rejects(
    total: Any, shards: Any, exc: type[Exception], match: str
) -> None:
    with pytest.raises(exc, match=match):
        ideal_share(total, shards)


# -- param_sum ---------------------------------------------------------------------


def test_param_sum_matches_spec_workflow() -> None:
    model = TwoLayer(3, 4, rngs=nnx.Rngs(0))
    _, state = nnx.split(model)
    expected = sum(jnp.sum(a) for a in jax.tree.leaves(state))
    got = param_sum(model)
    assert got.shape == () and got.dtype == jnp.float32
    assert np.asarray(got).tobytes() == np.asarray(expected).tobytes()
    assert np.asarray(param_sum(state)).tobytes() == np.asarray(expected).tobytes()


def test_param_sum_by_kind(bn_dropout: nnx.Module) -> None:
    bn: Any = bn_dropout.bn  # type: ignore[attr-defined]
    stats = float(jnp.sum(bn.mean[...]) + jnp.sum(bn.var[...]))
    assert float(param_sum(bn_dropout, nnx.BatchStat)) == stats == 5.0
    # RNG keys are skipped: only the uint32 counter is summed
    assert int(param_sum(bn_dropout, nnx.RngState)) == 0


def test_param_sum_under_jit(linear: nnx.Linear) -> None:
    eager = param_sum(linear)
    _, state = nnx.split(linear)
    jitted = jax.jit(lambda s: param_sum(s))(state)
    assert np.asarray(jitted).tobytes() == np.asarray(eager).tobytes()
    nnx_jitted = nnx.jit(lambda m: param_sum(m))(linear)
    assert np.asarray(nnx_jitted).tobytes() == np.asarray(eager).tobytes()


def test_equal_sums_do_not_prove_equal_params() -> None:
    a = nnx.Linear(1, 2, rngs=nnx.Rngs(0))
    b = nnx.Linear(1, 2, rngs=nnx.Rngs(0))
    a.kernel[...] = jnp.asarray([[1.0, 3.0]])
    b.kernel[...] = jnp.asarray([[2.0, 2.0]])
    assert float(param_sum(a)) == float(param_sum(b)) == 4.0


def test_param_sum_of_nothing_is_zero(linear: nnx.Linear) -> None:
    out = param_sum(linear, nnx.BatchStat)
    assert out.shape == () and out.dtype == jnp.float32 and float(out) == 0.0


def test_param_sum_rejects_abstract(abstract_bn_dropout: nnx.Module) -> None:
    with pytest.raises(ValueError, match=r"`target` is abstract .* use `count_params`"):
        param_sum(abstract_bn_dropout)


# -- param_sum: the accumulator holds every input -----------------------------------
#
# Expected totals are exact: Python ints, or float64 sums of values chosen on a
# coarse grid (multiples of 1/4, small magnitudes) so that every partial sum is
# exact in float32 too, whatever the reduction order. The previous implementation
# raised for int4 / uint4 ("Invalid integer data type 'V'") and for float8 next to
# float32 (TypePromotionError).


def exact_total(*arrays: Any) -> float:
    """The exact sum of the stored values, in float64 (exact for these inputs)."""
    return float(sum(np.asarray(a).astype(np.float64).sum() for a in arrays))


def grid_values(dtype: Any, n: int, seed: int) -> jax.Array:
    rng = np.random.default_rng(seed)
    if jnp.issubdtype(dtype, jnp.floating):
        return jnp.asarray(rng.integers(-200, 201, n) / 4, jnp.float32).astype(dtype)
    if dtype == jnp.bool_:
        return jnp.asarray(rng.integers(0, 2, n).astype(bool))
    bits = int(jax.dtypes.itemsize_bits(dtype))
    unsigned = jnp.issubdtype(dtype, jnp.unsignedinteger)
    lo, hi = (0, 2**bits) if unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1))
    return jnp.asarray(rng.integers(lo, hi, n)).astype(dtype)


def sum_eager_and_jit(state: nnx.State[Any, Any]) -> tuple[jax.Array, jax.Array]:
    return param_sum(state), jax.jit(param_sum)(state)


SMALL_DTYPES = [
    (jnp.bfloat16, jnp.float32),
    (jnp.float16, jnp.float32),
    (jnp.float8_e4m3fn, jnp.float32),
    (jnp.float8_e5m2, jnp.float32),
    (jnp.int4, jnp.int32),
    (jnp.uint4, jnp.uint32),
    (jnp.int8, jnp.int32),
    (jnp.uint8, jnp.uint32),
    (jnp.int16, jnp.int32),
    (jnp.bool_, jnp.uint32),
]


@pytest.mark.parametrize(("dtype", "acc"), SMALL_DTYPES)
def test_param_sum_of_each_narrow_dtype_is_exact_eager_and_jit(
    dtype: Any, acc: Any
) -> None:
    a, b = grid_values(dtype, 64, 0), grid_values(dtype, 33, 1).reshape(3, 11)
    state = nnx.State({"a": nnx.Param(a), "b": nnx.Param(b)})
    want = exact_total(a, b)
    for got in sum_eager_and_jit(state):
        assert got.shape == () and got.dtype == acc
        assert float(got) == want


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float8_e4m3fn, jnp.float16])
def test_param_sum_of_a_narrow_float_next_to_float32(dtype: Any) -> None:
    narrow, wide = grid_values(dtype, 40, 2), grid_values(jnp.float32, 50, 3)
    state = nnx.State({"narrow": nnx.Param(narrow), "wide": nnx.Param(wide)})
    for got in sum_eager_and_jit(state):
        assert got.dtype == jnp.float32 and float(got) == exact_total(narrow, wide)


class QwixLike(nnx.Module):
    """A quantized linear as qwix stores it: int4 kernel, float32 scale and bias."""

    def __init__(self, kernel: jax.Array, scale: jax.Array, bias: jax.Array) -> None:
        self.kernel = nnx.Param(kernel)
        self.scale = nnx.Param(scale)
        self.bias = nnx.Param(bias)


def test_param_sum_of_a_qwix_like_model_int4_kernels_and_float32_scales() -> None:
    rng = np.random.default_rng(4)
    ints = rng.integers(-8, 8, (16, 8))
    scale = rng.integers(1, 9, (1, 8)) / 8
    bias = rng.integers(-40, 41, 8) / 4
    model = QwixLike(
        jnp.asarray(ints, jnp.int4),
        jnp.asarray(scale, jnp.float32),
        jnp.asarray(bias, jnp.float32),
    )
    want = float(int(ints.sum())) + float(scale.sum()) + float(bias.sum())
    state = nnx.state(model)
    outs = [
        param_sum(model),
        jax.jit(param_sum)(state),
        nnx.jit(lambda m: param_sum(m))(model),
    ]
    for got in outs:
        assert got.dtype == jnp.float32 and float(got) == want
    # An int8 kernel too (qwix's other common width), and uint4.
    for dtype, lo, hi in [(jnp.int8, -128, 128), (jnp.uint4, 0, 16)]:
        q = rng.integers(lo, hi, (16, 8))
        m = QwixLike(jnp.asarray(q, dtype), model.scale[...], model.bias[...])
        want = float(int(q.sum())) + float(scale.sum()) + float(bias.sum())
        assert float(param_sum(m)) == float(jax.jit(param_sum)(nnx.state(m))) == want


def test_param_sum_of_float32_is_bitwise_the_plain_sum_also_with_x64() -> None:
    model = TwoLayer(3, 4, rngs=nnx.Rngs(1))
    leaves = jax.tree.leaves(nnx.state(model))
    want = np.asarray(sum(jnp.sum(a) for a in leaves)).tobytes()
    with jax.enable_x64(True):
        got = param_sum(model)
        assert got.dtype == jnp.float32
        assert np.asarray(got).tobytes() == want


def test_integer_totals_are_exact_or_the_accumulator_widens() -> None:
    # 127 * 2**22 * 5 > 2**31: int32 could overflow (jnp.sum of int8 wraps to a
    # negative number), so without x64 the total is a float32 near the truth and
    # with x64 an exact int64.
    n = 5 * 2**22
    q = jnp.full((n,), 127, jnp.int8)
    big = nnx.State({"q": nnx.Param(q)})
    truth = 127 * n
    assert truth > 2**31 and int(jnp.sum(q)) < 0  # what plain jnp does
    for got in sum_eager_and_jit(big):
        assert got.dtype == jnp.float32
        assert abs(float(got) - truth) <= truth * 2**-20
    with jax.enable_x64(True):
        for got in sum_eager_and_jit(big):
            assert got.dtype == jnp.int64 and int(got) == truth
    small = nnx.State({"q": nnx.Param(jnp.full((1000,), -128, jnp.int8))})
    assert param_sum(small).dtype == jnp.int32 and int(param_sum(small)) == -128_000


def test_int32_next_to_float32_is_float64_with_x64_and_rounds_without() -> None:
    # float32 cannot hold 2**24 + 1: only float64 holds every input here.
    def state() -> nnx.State[Any, Any]:
        return nnx.State(
            {
                "count": nnx.Param(jnp.asarray([2**24 + 1], jnp.int32)),
                "w": nnx.Param(jnp.asarray([0.5], jnp.float32)),
            }
        )

    rounded = np.float32(2**24 + 1) + np.float32(0.5)  # 2**24: the 1 is lost
    assert rounded == 2**24
    for got in sum_eager_and_jit(state()):
        assert got.dtype == jnp.float32 and float(got) == float(rounded)
    with jax.enable_x64(True):
        for got in sum_eager_and_jit(state()):
            assert got.dtype == jnp.float64 and float(got) == 2**24 + 1.5


def test_param_sum_keeps_uint32_counters_and_complex_values() -> None:
    counters = nnx.State({"a": nnx.Param(jnp.asarray(7, jnp.uint32))})
    assert param_sum(counters).dtype == jnp.uint32 and int(param_sum(counters)) == 7
    c = jnp.asarray([1 + 2j, 3 - 1j], jnp.complex64)
    mixed = nnx.State({"c": nnx.Param(c), "i": nnx.Param(jnp.asarray([4], jnp.int4))})
    for got in sum_eager_and_jit(mixed):
        assert got.dtype == jnp.complex64 and complex(got) == 8 + 1j


def test_param_sum_rejects_a_non_numeric_leaf() -> None:
    state: nnx.State[Any, Any] = nnx.State({"l1": {"kernel": nnx.Param("x")}})
    with pytest.raises(
        TypeError, match=r"`target` must hold numeric arrays.*'x'.*'l1/kernel'"
    ):
        param_sum(state)


# -- read-only and bad input -------------------------------------------------------


def test_counting_is_read_only(bn_dropout: nnx.Module, assert_readonly: Any) -> None:
    assert_readonly(bn_dropout, lambda: count_state_leaves(bn_dropout))
    assert_readonly(bn_dropout, lambda: count_params(bn_dropout, ...))
    assert_readonly(bn_dropout, lambda: param_sum(bn_dropout, ...))
    assert_readonly(bn_dropout, lambda: param_sum(bn_dropout, nnx.RngState))


@pytest.mark.parametrize("fn", [count_state_leaves, count_params, param_sum])
def test_rejects_non_models(fn: Any) -> None:
    with pytest.raises(TypeError, match="target"):
        fn({"kernel": jnp.ones(2)})
    with pytest.raises(TypeError, match="target"):
        fn(jnp.ones(2))

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

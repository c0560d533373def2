"""The four seed entrypoints against the specs' own by-hand workflows."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from nnx_introspect.exercises import (
    graphdef_vs_state,
    mesh_init_simulate,
    orbax_load_simulate,
    orbax_save_count,
)


def bits(a: Any) -> bytes:
    return np.asarray(a).tobytes()


# -- mesh_init_simulate ------------------------------------------------------------


def by_hand_leaves(seed: int, d: int, f: int) -> int:
    model = nnx.Linear(d, f, rngs=nnx.Rngs(seed))
    _, state = nnx.split(model)
    return len(jax.tree_util.tree_leaves(state))


@pytest.mark.parametrize(
    ("seed", "shape", "features", "mesh_axes"),
    [(0.0, (2, 4), 3.0, 4.0), (5.0, (1, 7), 8.0, 2048.0), (1.0, (3, 2), 5.0, 3.0)],
)
def test_mesh_init_simulate(
    seed: float, shape: tuple[int, int], features: float, mesh_axes: float
) -> None:
    x = jnp.ones(shape, jnp.float32)
    out = mesh_init_simulate(seed, x, features, mesh_axes)
    assert out.shape == (3,)
    assert jnp.issubdtype(out.dtype, jnp.floating)
    leaves = by_hand_leaves(int(seed), shape[-1], int(features))
    assert (
        out.tolist()
        == [features, mesh_axes, float(leaves)]
        == [features, mesh_axes, 2.0]
    )


def test_mesh_init_simulate_ignores_x_values_and_batch() -> None:
    a = mesh_init_simulate(0.0, jnp.zeros((1, 4)), 6.0, 4.0)
    b = mesh_init_simulate(3.0, jnp.full((9, 4), 123.0), 6.0, 4.0)
    assert a.tolist() == b.tolist() == [6.0, 4.0, 2.0]


def test_mesh_init_simulate_accepts_jax_and_numpy_scalars() -> None:
    out = mesh_init_simulate(
        jnp.float32(1.0), np.ones((2, 3), np.float32), np.float64(2.0), jnp.asarray(8.0)
    )
    assert out.tolist() == [2.0, 8.0, 2.0]


# -- orbax_save_count --------------------------------------------------------------


@settings(deadline=None, max_examples=10)
@given(
    st.integers(1, 6),
    st.integers(1, 16),
    st.integers(1, 16),
    st.integers(1, 9),
    st.integers(0, 5),
)
def test_orbax_save_count_arithmetic(
    b: int, d: int, f: int, shards: int, seed: int
) -> None:
    x = jnp.ones((b, d), jnp.float32)
    out = orbax_save_count(float(seed), x, float(f), float(shards))
    total = (d + 1) * f
    assert out.shape == (2,) and jnp.issubdtype(out.dtype, jnp.floating)
    assert out.tolist() == [float(total), float(np.float32(total / shards))]


def test_orbax_save_count_spec_examples() -> None:
    assert orbax_save_count(0.0, jnp.ones((3, 4)), 4.0, 2.0).tolist() == [20.0, 10.0]
    assert orbax_save_count(0.0, jnp.ones((1, 2)), 2.0, 4.0).tolist() == [6.0, 1.5]


def test_orbax_save_count_leaves_x_unchanged() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    before = x.copy()
    orbax_save_count(0, x, 2, 2)
    assert bits(x) == bits(before)


# -- graphdef_vs_state -------------------------------------------------------------


class SpecTwoLayer(nnx.Module):
    """The spec's model, written out again independently of the library."""

    def __init__(self, in_features: int, hidden: int, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(in_features, hidden, rngs=rngs)
        self.l2 = nnx.Linear(hidden, hidden, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        y: jax.Array = self.l2(self.l1(x))
        return y


def spec_graphdef_vs_state(seed: float, x: jax.Array, hidden: float) -> jax.Array:
    model = SpecTwoLayer(x.shape[-1], int(hidden), rngs=nnx.Rngs(int(seed)))
    forward_output_sum = jnp.sum(model(x))
    _, state = nnx.split(model)
    leaves = jax.tree.leaves(state)
    total_param_sum = sum(jnp.sum(a) for a in leaves)
    return jnp.stack([jnp.float32(len(leaves)), total_param_sum, forward_output_sum])


@pytest.mark.parametrize(
    ("seed", "n", "hidden"), [(0.0, 3, 4.0), (7.0, 5, 2.0), (2.0, 1, 9.0)]
)
def test_graphdef_vs_state_bitwise(seed: float, n: int, hidden: float) -> None:
    x = jax.random.normal(jax.random.key(1), (n,), jnp.float32)
    got = graphdef_vs_state(seed, x, 123.0, hidden)
    want = spec_graphdef_vs_state(seed, x, hidden)
    assert got.shape == (3,) and got.dtype == jnp.float32
    assert got[0].item() == 4.0
    assert bits(got) == bits(want)


def test_graphdef_vs_state_under_jit() -> None:
    x = jnp.asarray([0.5, -1.0, 2.0], jnp.float32)
    eager = graphdef_vs_state(3.0, x, 0.0, 4.0)
    jitted = jax.jit(graphdef_vs_state, static_argnums=(0, 2, 3))(3.0, x, 0.0, 4.0)
    np.testing.assert_allclose(
        np.asarray(jitted), np.asarray(eager), rtol=1e-6, atol=1e-6
    )
    assert jitted.shape == (3,) and jitted[0].item() == 4.0


def test_graphdef_vs_state_features_is_unused() -> None:
    x = jnp.ones(3)
    ref = graphdef_vs_state(0.0, x, 1.0, 4.0)
    for features in [0.0, 99.0, -5.5, None, "anything"]:
        assert bits(graphdef_vs_state(0.0, x, features, 4.0)) == bits(ref)


def test_graphdef_vs_state_sums_differ_from_counts() -> None:
    out = graphdef_vs_state(0.0, jnp.ones(3), 0.0, 4.0)
    model = SpecTwoLayer(3, 4, rngs=nnx.Rngs(0))
    assert sum(a.size for a in jax.tree.leaves(nnx.state(model))) == 36
    assert out[1].item() != 36.0


def test_graphdef_vs_state_seed_changes_values_not_count() -> None:
    a = graphdef_vs_state(0.0, jnp.ones(3), 0.0, 4.0)
    b = graphdef_vs_state(1.0, jnp.ones(3), 0.0, 4.0)
    assert a[0] == b[0] == 4.0
    assert a[1] != b[1]


# -- orbax_load_simulate -----------------------------------------------------------


def spec_orbax_load_simulate(seed: float, x: jax.Array, features: float) -> jax.Array:
    d, f = x.shape[-1], int(features)
    _first = nnx.Linear(d, f, rngs=nnx.Rngs(int(seed)))
    second = nnx.Linear(d, f, rngs=nnx.Rngs(int(seed)))
    y: jax.Array = second(x)
    return y.reshape(-1)


@pytest.mark.parametrize(
    ("seed", "b", "d", "f"), [(0.0, 2, 3, 2), (4.0, 5, 1, 7), (9.0, 1, 6, 1)]
)
def test_orbax_load_simulate_bitwise(seed: float, b: int, d: int, f: int) -> None:
    x = jax.random.normal(jax.random.key(2), (b, d), jnp.float32)
    got = orbax_load_simulate(seed, x, float(f))
    assert got.shape == (b * f,) and got.dtype == jnp.float32
    assert bits(got) == bits(spec_orbax_load_simulate(seed, x, float(f)))


def test_orbax_load_simulate_row_major_and_formula() -> None:
    x = jnp.asarray([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]], jnp.float32)
    layer = nnx.Linear(3, 4, rngs=nnx.Rngs(5))
    assert layer.bias is not None
    expected = (x @ layer.kernel[...] + layer.bias[...]).reshape(-1)
    got = orbax_load_simulate(5.0, x, 4.0)
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-6)
    assert bool((got < 0).any())  # negative outputs stay negative
    np.testing.assert_allclose(
        np.asarray(got[:4]), np.asarray(x[0] @ layer.kernel[...]), rtol=1e-6
    )


def test_orbax_load_simulate_under_jit_and_x_unchanged() -> None:
    x = jnp.asarray([[0.1, 0.2], [0.3, -0.4], [1.0, 2.0]], jnp.float32)
    before = bits(x)
    eager = orbax_load_simulate(1.0, x, 3.0)
    jitted = jax.jit(orbax_load_simulate, static_argnums=(0, 2))(1.0, x, 3.0)
    np.testing.assert_allclose(
        np.asarray(jitted), np.asarray(eager), rtol=1e-6, atol=1e-7
    )
    assert bits(x) == before


# -- bad input ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (
            lambda x: mesh_init_simulate(0.0, x, 0.0, 4.0),
            ValueError,
            r"`features` must be a positive integer, got 0\.",
        ),
        (
            lambda x: mesh_init_simulate(0.0, x, 3.0, 1.5),
            ValueError,
            r"`mesh_axes` must be a positive integer, got the non-integral value 1\.5\.",
        ),
        (
            lambda x: mesh_init_simulate(-1.0, x, 3.0, 2.0),
            ValueError,
            r"`seed` must be a nonnegative integer, got -1\.",
        ),
        (
            lambda x: orbax_save_count(0.0, x, 3.0, 0.0),
            ValueError,
            r"`num_shards` must be a positive integer, got 0\.",
        ),
        (
            lambda x: orbax_save_count(float("nan"), x, 3.0, 2.0),
            ValueError,
            r"`seed` must be a nonnegative integer, got nan\.",
        ),
        (
            lambda x: graphdef_vs_state(0.0, x[0], 0.0, float("inf")),
            ValueError,
            r"`hidden` must be a positive integer, got inf\.",
        ),
        (
            lambda x: orbax_load_simulate(0.0, x, -2.0),
            ValueError,
            r"`features` must be a positive integer, got -2\.",
        ),
        (
            lambda x: orbax_load_simulate(0.0, x.at[0, 0].set(jnp.nan), 2.0),
            ValueError,
            r"`x` must be finite",
        ),
        (
            lambda x: orbax_save_count(0.0, "x", 2.0, 2.0),  # type: ignore[arg-type]
            TypeError,
            r"x",
        ),
        (
            lambda x: orbax_load_simulate(0.0, jnp.ones((2, 3), jnp.int32), 2.0),
            TypeError,
            r"x",
        ),
    ],
)
def test_entrypoints_reject_bad_input(
    call: Any, exc: type[Exception], match: str
) -> None:
    with pytest.raises(exc, match=match):
        call(jnp.ones((2, 3), jnp.float32))

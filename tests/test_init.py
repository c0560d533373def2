"""fresh_init_forward: bitwise equal to a by-hand build, eager and compiled."""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from nnx_introspect import fresh_init_forward
from nnx_introspect.examples import LlamaConfig, bn_dropout_mlp, llama, two_layer


def gelu_mlp(rngs: nnx.Rngs) -> nnx.Module:
    """GELU + LayerNorm: compiled as a whole, its forward would differ bitwise."""
    return nnx.Sequential(
        nnx.Linear(8, 16, rngs=rngs),
        nnx.gelu,
        nnx.LayerNorm(16, rngs=rngs),
        nnx.Linear(
            16, 4, kernel_init=nnx.initializers.truncated_normal(0.02), rngs=rngs
        ),
    )


def linear(rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(3, 2, rngs=rngs)


SMALL_LLAMA = llama(LlamaConfig(vocab=32, d_model=16, n_layers=2, n_heads=2, d_ff=24))

X8 = jax.random.normal(jax.random.key(1), (4, 8))
X3 = jnp.arange(12.0).reshape(4, 3) / 7

CASES: list[tuple[Callable[[nnx.Rngs], Any], jax.Array]] = [
    (linear, X3),
    (two_layer, X3),
    (bn_dropout_mlp, X3),
    (gelu_mlp, X8),
    (SMALL_LLAMA, jnp.arange(10, dtype=jnp.int32).reshape(2, 5) % 32),
]


def same_bits(a: jax.Array, b: jax.Array) -> bool:
    a_np, b_np = np.asarray(a), np.asarray(b)
    return (
        a_np.dtype == b_np.dtype
        and a_np.shape == b_np.shape
        and (a_np.tobytes() == b_np.tobytes())
    )


@pytest.mark.parametrize(("factory", "x"), CASES)
def test_eager_equals_by_hand(factory: Callable[[nnx.Rngs], Any], x: jax.Array) -> None:
    by_hand = factory(nnx.Rngs(3))(x)
    assert same_bits(fresh_init_forward(factory, 3, x), by_hand)


@pytest.mark.parametrize(("factory", "x"), CASES)
def test_compiled_equals_eager(
    factory: Callable[[nnx.Rngs], Any], x: jax.Array
) -> None:
    for seed in (0, 1, 7):
        eager = fresh_init_forward(factory, seed, x)
        assert same_bits(fresh_init_forward(factory, seed, x, compiled=True), eager)


def test_compiled_forward_would_not_be_bitwise_equal() -> None:
    # Why only the build is compiled: a whole-forward jit fuses GELU differently.
    module = gelu_mlp(nnx.Rngs(0))
    whole = nnx.jit(lambda m, x: m(x))(module, X8)
    assert not same_bits(whole, module(X8))
    assert same_bits(fresh_init_forward(gelu_mlp, 0, X8, compiled=True), module(X8))


@settings(deadline=None, max_examples=15)
@given(seed=st.one_of(st.integers(0, 2**32 + 5), st.integers(2**40, 2**62)))
def test_compiled_equals_eager_for_any_seed(seed: int) -> None:
    eager = fresh_init_forward(gelu_mlp, seed, X8)
    assert same_bits(fresh_init_forward(gelu_mlp, seed, X8, compiled=True), eager)


def test_sweep_costs_one_trace() -> None:
    calls: list[int] = []

    def factory(rngs: nnx.Rngs) -> nnx.Module:
        calls.append(1)
        return nnx.Linear(5, 3, rngs=rngs)

    x = jnp.ones((2, 5))
    outs = [fresh_init_forward(factory, s, x, compiled=True) for s in range(20)]
    assert len(calls) == 1  # traced (and compiled) once for 20 seeds
    assert len({np.asarray(o).tobytes() for o in outs}) == 20  # seeds differ
    fresh_init_forward(factory, 0, jnp.ones((7, 5)), compiled=True)
    assert len(calls) == 1  # a new input shape does not rebuild either


def test_unhashable_factory_still_compiles() -> None:
    class Factory:
        __hash__ = None  # type: ignore[assignment]

        def __call__(self, rngs: nnx.Rngs) -> nnx.Module:
            return nnx.Linear(3, 2, rngs=rngs)

    out = fresh_init_forward(Factory(), 4, X3, compiled=True)
    assert same_bits(out, nnx.Linear(3, 2, rngs=nnx.Rngs(4))(X3))


@pytest.mark.parametrize(
    "seed", [3, 3.0, np.int32(3), np.uint64(3), np.float32(3.0), jnp.asarray(3)]
)
def test_integer_like_seeds(seed: Any) -> None:
    assert same_bits(fresh_init_forward(linear, seed, X3), linear(nnx.Rngs(3))(X3))


def test_same_seed_same_result_unlike_shared_rngs() -> None:
    a = fresh_init_forward(linear, 0, X3)
    b = fresh_init_forward(linear, 0, X3)
    assert same_bits(a, b)
    shared = nnx.Rngs(0)
    first, second = linear(shared)(X3), linear(shared)(X3)
    assert same_bits(first, a) and not same_bits(second, a)


def test_numpy_input() -> None:
    x = np.asarray(X3)
    by_hand = linear(nnx.Rngs(2))(x)  # type: ignore[arg-type]  # Linear takes NumPy
    assert same_bits(fresh_init_forward(linear, 2, x), by_hand)


def test_inside_jit_with_static_seed() -> None:
    jitted = jax.jit(lambda x: fresh_init_forward(linear, 5, x))
    expected = linear(nnx.Rngs(5))(X3)
    np.testing.assert_allclose(np.asarray(jitted(X3)), np.asarray(expected), rtol=1e-6)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize(
    ("seed", "error", "match"),
    [
        (-1, ValueError, r"`seed` must be a nonnegative integer, got -1"),
        (
            1.5,
            ValueError,
            r"`seed` must be a nonnegative integer, got the non-integral value 1.5",
        ),
        (float("nan"), ValueError, r"`seed` must be a nonnegative integer, got nan"),
        (float("inf"), ValueError, r"`seed` must be a nonnegative integer, got inf"),
        (True, TypeError, r"`seed` must be a nonnegative integer, got the bool True"),
        (np.ones(2), TypeError, r"`seed` must be a nonnegative integer \(a scalar\)"),
    ],
)
def test_bad_seed(
    seed: Any, error: type[Exception], match: str, compiled: bool
) -> None:
    with pytest.raises(error, match=match):
        fresh_init_forward(linear, seed, X3, compiled=compiled)


def test_string_seed_rejected() -> None:
    with pytest.raises(TypeError, match="seed"):
        fresh_init_forward(linear, "3", X3)  # type: ignore[arg-type]


@pytest.mark.parametrize("compiled", [False, True])
def test_non_finite_input(compiled: bool) -> None:
    x = X3.at[0, 0].set(jnp.nan)
    with pytest.raises(ValueError, match=r"`x` must be finite, got 1 NaN or infinite"):
        fresh_init_forward(linear, 0, x, compiled=compiled)


@pytest.mark.parametrize("compiled", [False, True])
def test_factory_must_return_a_module(compiled: bool) -> None:
    def not_a_module(rngs: nnx.Rngs) -> Any:
        return jnp.ones(3)

    with pytest.raises(TypeError, match=r"`factory` must return an nnx.Module, got"):
        fresh_init_forward(not_a_module, 0, X3, compiled=compiled)

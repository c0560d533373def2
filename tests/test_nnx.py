"""The version-sensitive paths in ``_nnx.py`` agree with their public fallbacks."""

from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from nnx_introspect import _nnx
from nnx_introspect.examples import TwoLayer


@pytest.fixture(params=["two_layer", "bn_dropout", "tied", "abstract"])
def any_model(request: pytest.FixtureRequest) -> Any:
    if request.param == "two_layer":
        return TwoLayer(3, 4, rngs=nnx.Rngs(0))
    if request.param == "abstract":
        return request.getfixturevalue("abstract_bn_dropout")
    return request.getfixturevalue(request.param)


def test_flat_state_matches_public_fallback(any_model: Any) -> None:
    state = nnx.state(any_model)
    fast = _nnx.flat_state(state)
    public = _nnx.flat_state_public(state)
    assert [p for p, _ in fast] == [p for p, _ in public]
    assert all(a is b for (_, a), (_, b) in zip(fast, public, strict=True))


def test_flat_state_order_is_tree_leaves_order(any_model: Any) -> None:
    state = nnx.state(any_model)
    flat_leaves = [
        leaf
        for _, v in _nnx.flat_state(state)
        for _, leaf in _nnx.iter_variable_leaves(v)
    ]
    assert all(a is b for a, b in zip(flat_leaves, jax.tree.leaves(state), strict=True))


def test_select_state_union_and_identity(bn_dropout: Any) -> None:
    state = nnx.state(bn_dropout)
    assert _nnx.select_state(state, ()) is state
    both = _nnx.select_state(bn_dropout, (nnx.BatchStat, nnx.RngState))
    paths = {p for p, _ in _nnx.flat_state(both)}
    assert paths == {
        ("bn", "mean"),
        ("bn", "var"),
        ("drop", "rngs", "key"),
        ("drop", "rngs", "count"),
    }


def test_variable_sharding_reads_metadata() -> None:
    init = nnx.with_partitioning(nnx.initializers.lecun_normal(), (None, "model"))
    with nnx.use_eager_sharding(False):
        layer = nnx.Linear(4, 8, kernel_init=init, rngs=nnx.Rngs(0))
    assert tuple(_nnx.variable_sharding(layer.kernel)) == (None, "model")
    assert _nnx.variable_sharding(layer.bias) is None
    assert _nnx.variable_sharding(jnp.ones(2)) is None
    spec = nnx.Param(
        jnp.ones((2, 2)), out_sharding=P("data", None), eager_sharding=False
    )
    assert _nnx.variable_sharding(spec) == P("data", None)


@pytest.mark.parametrize(
    "flt",
    [
        nnx.Param,
        "dropout",
        True,
        False,
        ...,
        None,
        nnx.PathContains("kernel"),
        (nnx.BatchStat, [nnx.RngState, "x"]),
        lambda path, value: "bn" in path,
    ],
    ids=[
        "type",
        "tag",
        "true",
        "false",
        "ellipsis",
        "none",
        "path-contains",
        "nested",
        "lambda",
    ],
)
def test_select_state_accepts_and_selects_as_flax_does(
    bn_dropout: Any, flt: Any
) -> None:
    ours = _nnx.select_state(bn_dropout, (flt,))
    theirs = nnx.state(bn_dropout, flt)
    assert [p for p, _ in _nnx.flat_state(ours)] == [
        p for p, _ in _nnx.flat_state(theirs)
    ]


@pytest.mark.parametrize(
    ("filters", "where"),
    [
        ((3,), r"filters\[0\]"),
        ((nnx.Param, object()), r"filters\[1\]"),
        (((nnx.Param, 2.5),), r"filters\[0\]\[1\]"),
    ],
)
def test_select_state_rejects_what_flax_cannot_use(
    bn_dropout: Any, filters: tuple[Any, ...], where: str
) -> None:
    # flax itself raises its own broken f-string error ("Invalid format specifier")
    with pytest.raises((TypeError, ValueError), match="format"):
        nnx.state(bn_dropout, nnx.Any(*filters))
    for target in (bn_dropout, nnx.state(bn_dropout)):
        with pytest.raises(TypeError, match=rf"^`{where}` must be an NNX filter"):
            _nnx.select_state(target, filters)


def test_devices_present_agrees_with_the_public_count_once_a_backend_runs() -> None:
    """The private check (``backends_are_initialized``) and the public API give
    the same count once JAX's backend is started; before, the plan asks for
    none (tested in a fresh process in test_mesh.py)."""
    import jax

    from nnx_introspect._nnx import devices_present

    jax.devices()
    assert devices_present() == jax.device_count() == 8

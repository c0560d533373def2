import dataclasses
import gc
from collections.abc import Callable
from typing import Any

import flax.errors
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_introspect import _nnx, abstract_model
from nnx_introspect import examples as ex

SMALL = ex.LlamaConfig(vocab=11, d_model=8, n_layers=2, n_heads=2, d_ff=12)
PARTITIONED = dataclasses.replace(SMALL, vocab=16, partitioned=True)

FACTORIES: list[Callable[[nnx.Rngs], Any]] = [
    ex.two_layer,
    ex.bn_dropout_mlp,
    ex.tied_embedding,
    ex.llama_tiny,
    ex.llama_7b,
    ex.llama(SMALL),
    ex.llama(PARTITIONED),
]


def structure(model: Any) -> list[tuple[Any, ...]]:
    """Everything an abstract state says: path, type, leaf (shape, dtype,
    sharding), metadata (sharding annotations included)."""
    out = []
    for path, var in nnx.to_flat_state(nnx.state(model)):
        leaf = var.get_value()
        assert isinstance(leaf, jax.ShapeDtypeStruct)
        out.append(
            (path, type(var), leaf.shape, leaf.dtype, leaf.sharding, var.get_metadata())
        )
    return out


@pytest.mark.parametrize("factory", FACTORIES, ids=lambda f: f.__name__)
def test_fast_build_equals_plain_eval_shape(factory: Callable[[nnx.Rngs], Any]) -> None:
    fast = _nnx.abstract_build(factory, 0)
    plain = _nnx.abstract_build_public(factory, 0)
    assert structure(fast) == structure(plain)
    assert nnx.graphdef(fast) == nnx.graphdef(plain)


def test_plain_is_literally_nnx_eval_shape() -> None:
    plain = _nnx.abstract_build_public(ex.bn_dropout_mlp, 3)
    reference = nnx.eval_shape(lambda: ex.bn_dropout_mlp(nnx.Rngs(3)))
    assert structure(plain) == structure(reference)


def test_partitioned_model_builds_without_mesh_and_keeps_annotations() -> None:
    assert jax.sharding.get_abstract_mesh().empty
    with pytest.raises(
        ValueError, match="An auto mesh context or metadata is required"
    ):
        nnx.eval_shape(lambda: ex.llama(PARTITIONED)(nnx.Rngs(0)))
    before = nnx.using_eager_sharding()
    model = abstract_model(ex.llama(PARTITIONED))
    assert nnx.using_eager_sharding() == before
    assert model.embed.embedding.get_metadata()["out_sharding"] == ("tp", "fsdp")
    assert model.lm_head.kernel.get_metadata()["out_sharding"] == ("fsdp", "tp")


def test_with_mesh_matches_plain_including_named_shardings() -> None:
    mesh = jax.make_mesh((2, 4), ("fsdp", "tp"))
    with jax.set_mesh(mesh):
        fast = abstract_model(ex.llama(PARTITIONED))
        plain = nnx.eval_shape(lambda: ex.llama(PARTITIONED)(nnx.Rngs(0)))
    assert structure(fast) == structure(plain)
    kernel = fast.layers[0].q.kernel.get_value()
    assert kernel.sharding.spec == jax.sharding.PartitionSpec("fsdp", "tp")


def test_numpy_counters_draw_the_same_keys() -> None:
    # The fast path's only change: RNG counters held in NumPy. Built concretely,
    # the model must be bitwise equal to one built from a plain nnx.Rngs.
    rngs = nnx.Rngs(7)
    assert _nnx._numpy_counters(rngs)
    a = ex.llama(SMALL)(rngs)
    b = ex.llama(SMALL)(nnx.Rngs(7))
    leaves_a = jax.tree.leaves(nnx.state(a, nnx.Param))
    leaves_b = jax.tree.leaves(nnx.state(b, nnx.Param))
    assert len(leaves_a) == len(leaves_b) == 1 + 2 * 9 + 2
    for x, y in zip(leaves_a, leaves_b, strict=True):
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes()


def test_counter_reads_are_copies_never_views() -> None:
    # Flax draws with `fold_in(key, self.count[...])`, then `self.count[...] += 1`
    # increments in place. What JAX receives must not share the counter's memory:
    # JAX's CPU backend wraps aligned host buffers without copying and runs
    # `fold_in` asynchronously, so a view could be read after the increment.
    rngs = nnx.Rngs(7)
    assert _nnx._numpy_counters(rngs)
    counter = rngs.params.count
    stored = counter.get_value()
    read = counter[...]
    assert not np.shares_memory(read, stored)
    rngs.params()
    assert int(read) == 0
    assert int(counter[...]) == 1


def _aligned_like(value: np.ndarray, align: int = 64) -> np.ndarray:
    """A copy of ``value`` (same array type) whose data is ``align``-byte aligned."""
    raw = np.zeros(value.nbytes + align, np.uint8)
    offset = (-raw.ctypes.data) % align
    out = raw[offset : offset + value.nbytes].view(value.dtype).reshape(value.shape)
    out[...] = value
    assert out.ctypes.data % align == 0
    return out.view(type(value))


def test_fast_counters_draw_plain_keys_behind_queued_work() -> None:
    # The flaky failure, made deterministic: the counter's memory is 64-byte aligned
    # (which malloc only sometimes gives) and every key feeds work that is queued
    # asynchronously. The keys must still be exactly those of a plain nnx.Rngs.
    rngs = nnx.Rngs(7)
    assert _nnx._numpy_counters(rngs)
    counter = rngs.params.count
    counter.set_value(_aligned_like(counter.get_value()))
    plain = nnx.Rngs(7)
    fast_draws = [jax.random.normal(rngs.params(), (128, 128)) for _ in range(100)]
    plain_draws = [jax.random.normal(plain.params(), (128, 128)) for _ in range(100)]
    for i, (x, y) in enumerate(zip(fast_draws, plain_draws, strict=True)):
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes(), f"draw {i}"


def test_fallback_when_internals_are_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    reference = structure(_nnx.abstract_build(ex.bn_dropout_mlp, 0))
    monkeypatch.delattr(nnx, "iter_graph")
    assert not _nnx._numpy_counters(nnx.Rngs(0))
    assert structure(_nnx.abstract_build(ex.bn_dropout_mlp, 0)) == reference


def test_nothing_is_patched_or_left_changed() -> None:
    set_value = nnx.Variable.set_value
    setitem = nnx.Variable.__setitem__
    call = nnx.RngStream.__call__
    eager = nnx.using_eager_sharding()

    def broken(rngs: nnx.Rngs) -> nnx.Module:
        ex.llama(PARTITIONED)(rngs)
        raise RuntimeError("factory failed")

    with pytest.raises(RuntimeError, match="factory failed"):
        abstract_model(broken)
    abstract_model(ex.llama(PARTITIONED))
    assert nnx.Variable.set_value is set_value
    assert nnx.Variable.__setitem__ is setitem
    assert nnx.RngStream.__call__ is call
    assert nnx.using_eager_sharding() == eager


def test_nothing_is_allocated_and_seed_is_used() -> None:
    model = abstract_model(lambda rngs: nnx.Linear(3, 2, rngs=rngs), seed=5)
    assert isinstance(model.kernel.get_value(), jax.ShapeDtypeStruct)
    assert model.kernel.shape == (3, 2)
    assert model.kernel.dtype == jnp.float32


def test_factory_errors_propagate_unchanged() -> None:
    def bad(rngs: nnx.Rngs) -> nnx.Module:
        raise ValueError("the model is broken")

    with pytest.raises(ValueError, match="the model is broken"):
        abstract_model(bad)


@pytest.mark.parametrize(
    ("returned", "shown"),
    [
        (3, "got 3 of type int"),
        (None, "got None of type NoneType"),
        ("x", "got 'x' of type str"),
        (jnp.ones(2), "of type ArrayImpl"),
    ],
    ids=["int", "None", "str", "array"],
)
def test_factory_must_return_a_graph_node(returned: Any, shown: str) -> None:
    # Before: `lambda rngs: 3` came back as a ShapeDtypeStruct, `None` as None.
    with pytest.raises(
        TypeError, match=rf"`factory` must return an nnx.Module .*{shown}\. Pass"
    ):
        abstract_model(lambda rngs: returned)


def test_other_graph_nodes_are_accepted() -> None:
    import optax

    def factory(rngs: nnx.Rngs) -> nnx.Optimizer[nnx.Linear]:
        return nnx.Optimizer(nnx.Linear(2, 3, rngs=rngs), optax.sgd(0.1), wrt=nnx.Param)

    optimizer = abstract_model(factory)
    assert isinstance(optimizer, nnx.Optimizer)
    leaves = jax.tree.leaves(nnx.state(optimizer))
    assert leaves and all(isinstance(x, jax.ShapeDtypeStruct) for x in leaves)


@pytest.mark.parametrize(
    "factory",
    [lambda: nnx.Linear(2, 3, rngs=nnx.Rngs(0)), lambda rngs, width: None],
    ids=["no-args", "two-args"],
)
def test_factory_must_take_rngs(factory: Any) -> None:
    with pytest.raises(
        TypeError, match=r"`factory` must take one positional argument, `rngs`"
    ):
        abstract_model(factory)


def _raise_plain(rngs: nnx.Rngs) -> nnx.Module:
    raise KeyError("the factory's own error")


def _raise_after_partitioned_build(rngs: nnx.Rngs) -> nnx.Module:
    ex.llama(PARTITIONED)(rngs)  # first attempt fails for want of a mesh
    raise KeyError("the factory's own error")


def _raise_mesh_error_then_own(rngs: nnx.Rngs) -> nnx.Module:
    if nnx.using_eager_sharding():
        raise ValueError("An auto mesh context or metadata is required")
    raise KeyError("the factory's own error")


@pytest.mark.parametrize(
    "factory",
    [_raise_plain, _raise_after_partitioned_build, _raise_mesh_error_then_own],
    ids=["plain", "after-partitioned-build", "on-the-retry"],
)
@pytest.mark.parametrize("gc_on", [True, False], ids=["gc-on", "gc-off"])
@pytest.mark.parametrize("eager", [True, False], ids=["eager", "lazy"])
def test_raising_factory_propagates_and_restores_global_state(
    factory: Callable[[nnx.Rngs], nnx.Module], gc_on: bool, eager: bool
) -> None:
    was_enabled = gc.isenabled()
    try:
        (gc.enable if gc_on else gc.disable)()
        with nnx.use_eager_sharding(eager):
            with pytest.raises(KeyError, match="the factory's own error"):
                abstract_model(factory)
            assert nnx.using_eager_sharding() is eager
            assert gc.isenabled() is gc_on
    finally:
        (gc.enable if was_enabled else gc.disable)()


def test_seed_errors() -> None:
    with pytest.raises(
        ValueError, match=r"`seed` must be a nonnegative integer, got -1"
    ):
        abstract_model(ex.two_layer, seed=-1)
    with pytest.raises(ValueError, match=r"`seed` must be .* non-integral value 1.5"):
        abstract_model(ex.two_layer, seed=1.5)
    with pytest.raises(TypeError, match="seed"):
        abstract_model(ex.two_layer, seed="0")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="factory"):
        abstract_model(3)  # type: ignore[arg-type]


def test_garbage_collector_state_is_restored() -> None:
    def broken(rngs: nnx.Rngs) -> nnx.Module:
        raise RuntimeError("factory failed")

    assert gc.isenabled()
    abstract_model(ex.two_layer)
    assert gc.isenabled()
    with pytest.raises(RuntimeError, match="factory failed"):
        abstract_model(broken)
    assert gc.isenabled()
    gc.disable()
    try:
        abstract_model(ex.two_layer)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_fast_path_never_asks_a_tracer_for_its_sharding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The quadratic cost of plain eval_shape: each RNG draw reads `.sharding` from a
    # tracer, whose error message (`_origin_msg`) scans the trace so far. Count how
    # often that message is built, instead of timing it.
    from jax._src.interpreters import partial_eval

    calls: list[int] = []
    original: Callable[[Any], str] = partial_eval.DynamicJaxprTracer._origin_msg

    def counting(self: Any) -> str:
        calls.append(1)
        return original(self)

    monkeypatch.setattr(partial_eval.DynamicJaxprTracer, "_origin_msg", counting)
    _nnx.abstract_build_public(ex.llama(SMALL), 0)
    draws = 1 + 2 * 9 + 2  # one RNG draw per initialized variable
    assert len(calls) >= draws
    calls.clear()
    _nnx.abstract_build(ex.llama(SMALL), 0)
    assert calls == []


def test_with_partitioning_initializers_build_without_mesh() -> None:
    def factory(rngs: nnx.Rngs) -> nnx.Linear:
        init = nnx.with_partitioning(nnx.initializers.lecun_normal(), ("data", None))
        return nnx.Linear(8, 6, kernel_init=init, rngs=rngs)

    model = abstract_model(factory)
    assert model.kernel.get_metadata()["out_sharding"] == ("data", None)
    mesh = jax.make_mesh((8,), ("data",))
    with jax.set_mesh(mesh):
        fast = abstract_model(factory)
        plain = nnx.eval_shape(lambda: factory(nnx.Rngs(0)))
    assert structure(fast) == structure(plain)


def test_a_factory_drawing_from_an_outer_rngs_is_a_value_error_naming_factory() -> None:
    outer_rngs = nnx.Rngs(0)
    with pytest.raises(
        ValueError, match=r"`factory`.*draw from the rngs you are given"
    ) as info:
        abstract_model(lambda rngs: nnx.Linear(2, 2, rngs=outer_rngs))
    # flax's own error stays reachable as the cause (the user's traceback).
    assert isinstance(info.value.__cause__, flax.errors.TraceContextError)
    # The outer Rngs is left as it was: still usable outside any trace.
    assert nnx.Linear(2, 2, rngs=outer_rngs).kernel.shape == (2, 2)

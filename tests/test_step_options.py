"""Step options: ``remat`` by class name and ``microbatches`` (issue 25, item 1).

Each is held against independent evidence: the model's own remat switch
compiled by XLA, and the one-shot step's gradients computed by JAX.
"""

import dataclasses
import json
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import Mesh

import nnx_introspect as ni
from nnx_introspect import examples
from nnx_introspect._step.loss import _objective
from nnx_introspect._step.spec import StepSpec
from nnx_introspect._step.train import _backward
from tests import llama_tiny_layers as tiny_layers

TINY = "nnx_introspect.examples:llama_tiny_sharded"
# the remat comparisons compile 2-layer Llamas of width 32 with
# llama_tiny_sharded's annotations (tests/llama_tiny_layers.py) at 64 tokens a
# row: the layer still repeats (a remat candidate per instance) and XLA:TPU's
# compiles are short; what they compare (remat by name against the model's
# own switch, a policy against another) is one traced program against another
SMALL = "tests.llama_tiny_layers:llama_small_sharded"
OWN_REMAT = "tests.test_step_options:llama_small_own_remat"
TOKENS = jax.ShapeDtypeStruct((8, 64), jnp.int32)
# the microbatch figures compile llama_tiny_sharded's widths (2 layers): at
# width 32 XLA:CPU combines the gradients' all-reduces differently
TWO_LAYERS = "tests.llama_tiny_layers:llama_tiny_2_layers_sharded"


def llama_small_own_remat(rngs: nnx.Rngs) -> examples.Llama:
    """``llama_small_sharded`` with the model's own remat switch on."""
    return examples.Llama(dataclasses.replace(tiny_layers.SMALL, remat=True), rngs=rngs)


def _step(target: str, **options: Any) -> ni.StepMemoryReport:
    return ni.step_memory_report(
        target, "fsdp=4,tp=2", (TOKENS,), loss="lm", optimizer="adamw", **options
    )


def _close(a: float, b: float, tolerance: float) -> bool:
    return abs(a - b) <= tolerance * max(abs(a), abs(b))


@pytest.fixture(scope="module")
def remat_by_name_on_cpu() -> ni.StepMemoryReport:
    """The step with ``LlamaLayer`` rematerialised by name, compiled by XLA:CPU.

    The remat comparison's XLA:CPU case and the policy test compile it alike.
    """
    return _step(SMALL, remat="LlamaLayer")


# XLA:CPU here, and XLA:TPU in a topology child: the remat is applied where the
# step is traced, the same for every target (XLA:GPU's child takes the same
# path). The child's case is slow: two XLA:TPU compiles for what the CPU case
# holds, the option reaching the child as its JSON
# (test_options_travel_to_a_child_compile)
@pytest.mark.parametrize(
    "topology", [None, pytest.param("v5e-8", marks=pytest.mark.slow)]
)
def test_remat_by_class_name_equals_the_models_own_switch(
    topology: Any, request: pytest.FixtureRequest
) -> None:
    by_name = (
        request.getfixturevalue("remat_by_name_on_cpu")
        if topology is None
        else _step(SMALL, remat="LlamaLayer", topology=topology)
    )
    own = _step(OWN_REMAT, topology=topology)
    for field in ("argument_bytes", "output_bytes"):
        assert getattr(by_name, field) == getattr(own, field), field
    assert _close(by_name.temp_bytes, own.temp_bytes, 0.01)
    assert _close(by_name.flops, own.flops, 0.01)
    assert by_name.remat == (("LlamaLayer", "nothing_saveable"),)
    if topology is None:  # it did something: recompute costs FLOPs (traced once
        # for every backend: the targets compile the same traced program)
        plain = _step(SMALL, topology=topology)
        assert by_name.flops > plain.flops * 1.05
        assert plain.remat == ()


def test_remat_never_patches_the_users_class_or_model() -> None:
    call = nnx.Linear.__call__
    model = examples.two_layer(nnx.Rngs(0))
    before = jax.tree.map(np.asarray, nnx.state(model))
    x = jax.ShapeDtypeStruct((8, 3), jnp.float32)
    plain = ni.step_memory_report(model, "data=8", x, optimizer="adamw")
    report = ni.step_memory_report(
        model, "data=8", x, optimizer="adamw", remat="Linear"
    )
    assert report.remat == (("Linear", "nothing_saveable"),)
    assert report.flops > plain.flops  # the forward of each Linear recomputed
    assert nnx.Linear.__call__ is call
    assert all(
        type(m).__call__ in (call, type(model).__call__)
        for _, m in nnx.iter_modules(model)
    )
    after = jax.tree.map(np.asarray, nnx.state(model))
    assert jax.tree.all(jax.tree.map(np.array_equal, before, after))


def test_a_policy_is_applied(remat_by_name_on_cpu: ni.StepMemoryReport) -> None:
    nothing = remat_by_name_on_cpu
    dots = _step(SMALL, remat={"LlamaLayer": "dots_saveable"})
    assert nothing.remat == (("LlamaLayer", "nothing_saveable"),)
    assert dots.remat == (("LlamaLayer", "dots_saveable"),)
    # saving the matmuls' outputs recomputes fewer FLOPs than saving nothing
    assert dots.flops < nothing.flops


def _replicated(tree: Any, mesh: Mesh) -> Any:
    where = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    return jax.device_put(tree, where)


def _concrete_step(k: int) -> tuple[Any, Any]:
    """The loss and gradients of a concrete two-layer step with k microbatches."""
    mesh = Mesh(np.array(jax.devices()[:2]), ("data",))
    x = jax.random.normal(jax.random.key(1), (16, 3), jnp.float32)
    spec = StepSpec("nnx_introspect.examples:two_layer", mesh, (x,), microbatches=k)
    request = spec.request()
    model = examples.two_layer(nnx.Rngs(0))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)  # type: ignore[misc]
    params, rest = _replicated((params, rest), mesh)
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    jitted = _backward(graphdef, _objective("mean"), params, rest, request, mesh)
    value, _, grads, _ = jitted(params, rest, (jax.device_put(x, sharding),))
    return value, grads


def test_microbatches_accumulate_the_one_shot_gradients() -> None:
    one_value, one_grads = _concrete_step(1)
    # independent: JAX's own gradient of the mean loss over the whole batch
    model = examples.two_layer(nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(1), (16, 3), jnp.float32)
    want_value, want_grads = nnx.value_and_grad(
        lambda m: jnp.mean(m(x).astype(jnp.float32))
    )(model)
    np.testing.assert_allclose(one_value, want_value, rtol=1e-6)
    for k in (2, 4):
        value, grads = _concrete_step(k)
        np.testing.assert_allclose(value, want_value, rtol=1e-5)
        for got, want in zip(
            jax.tree.leaves(grads), jax.tree.leaves(want_grads), strict=True
        ):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    del one_grads


def test_microbatches_update_equals_the_one_shot_update() -> None:
    """The full step's new parameters (adamw) equal the one-shot step's."""
    from nnx_introspect._step.train import _train

    mesh = Mesh(np.array(jax.devices()[:2]), ("data",))
    x = jax.random.normal(jax.random.key(2), (8, 3), jnp.float32)
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    results = []
    for k in (1, 4):
        spec = StepSpec(
            "nnx_introspect.examples:two_layer",
            mesh,
            (x,),
            optimizer="sgd",
            microbatches=k,
        )
        model = examples.two_layer(nnx.Rngs(0))
        graphdef, params, rest = nnx.split(model, nnx.Param, ...)  # type: ignore[misc]
        params, rest = _replicated((params, rest), mesh)
        tx = spec.tx
        opt_state = _replicated(tx.init(nnx.as_pure(params)), mesh)
        step = _replicated(jnp.zeros((), jnp.int32), mesh)
        abstract_step = jax.ShapeDtypeStruct(
            (),
            jnp.int32,
            sharding=jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()),
        )
        jitted = _train(
            graphdef,
            _objective("mean"),
            tx,
            (params, rest, opt_state, abstract_step),
            spec.request(),
        )
        out = jitted(params, rest, opt_state, step, (jax.device_put(x, sharding),))
        results.append(jax.tree.leaves(out[2]))
    for a, b in zip(*results, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_microbatches_compiled_figures() -> None:
    tokens = jax.ShapeDtypeStruct((32, 256), jnp.int32)

    def run(k: int) -> ni.StepMemoryReport:
        return ni.step_memory_report(
            TWO_LAYERS,
            "fsdp=8,tp=1",
            (tokens,),
            loss="lm",
            optimizer="adamw",
            microbatches=k,
            breakdown=True,
        )

    one, four = run(1), run(4)
    assert four.microbatches == 4 and one.microbatches == 1
    assert four.argument_bytes == one.argument_bytes
    assert _close(four.flops, one.flops, 0.02)
    assert one.breakdown is not None and four.breakdown is not None
    kept_one, kept_four = (
        sum(g.nbytes for g in b.by_kind() if g.label == "activation kept for backward")
        for b in (one.breakdown, four.breakdown)
    )
    assert kept_one > 0
    assert kept_four < kept_one / 2  # about 1/k, with the loop's own buffers
    # the collectives inside the microbatch loop run once per microbatch: on
    # XLA:CPU the weights' all-gathers are hoisted out of the loop (run once),
    # the gradients' all-reduces stay in it (x k)
    moved = {}
    for name, report in (("one", one), ("four", four)):
        assert report.program.collectives is not None
        rows = report.program.collectives.rows
        assert all(row.count == (4 if row.loops else 1) for row in rows), name
        moved[name] = {
            kind: sum(r.nbytes * r.count for r in rows if r.kind == kind)
            for kind in ("all-gather", "all-reduce")
        }
    assert _close(moved["four"]["all-reduce"], 4 * moved["one"]["all-reduce"], 0.01)
    assert _close(moved["four"]["all-gather"], moved["one"]["all-gather"], 0.01)
    data = json.loads(four.to_json())
    assert data["microbatches"] == 4 and data["remat"] == {}
    assert "gradients accumulated over 4 microbatches" in "\n".join(four.table().notes)
    assert "gradients accumulated over 4 microbatches" in four.to_markdown()
    assert "gradients accumulated over 4 microbatches" in four.to_html()


@pytest.mark.parametrize(
    ("options", "argument", "words"),
    [
        ({"remat": "Block"}, "remat", "its module classes are ["),
        ({"remat": {"LlamaLayer": "some_policy"}}, "remat", "'some_policy'"),
        ({"remat": {}}, "remat", "empty mapping"),
        ({"microbatches": 0}, "microbatches", "positive integer"),
        ({"microbatches": 3}, "microbatches", "does not divide"),
        ({"microbatches": 8}, "microbatches", "do not divide over its 4 devices"),
        ({"microbatches": 2.5}, "microbatches", "2.5"),
        ({"microbatches": float("nan")}, "microbatches", "nan"),
    ],
)
def test_bad_options_are_refused_before_any_compile(
    options: dict[str, Any], argument: str, words: str
) -> None:
    with pytest.raises(ValueError, match=None) as caught:
        StepSpec(TINY, "fsdp=4,tp=2", (TOKENS,), loss="lm", **options)
    assert words in str(caught.value)
    assert getattr(caught.value, "argument", argument) == argument


def test_microbatches_need_a_loss() -> None:
    with pytest.raises(ValueError, match="forward pass only") as caught:
        StepSpec(TINY, "fsdp=4,tp=2", (TOKENS,), loss=None, microbatches=2)
    assert caught.value.argument == "microbatches"  # type: ignore[attr-defined]


@pytest.mark.parametrize("bad", [1, ["LlamaLayer"], {"LlamaLayer": 3}, True])
def test_remat_of_a_wrong_type_is_a_type_error(bad: Any) -> None:
    with pytest.raises(TypeError):
        StepSpec(TINY, "fsdp=4,tp=2", (TOKENS,), loss="lm", remat=bad)


def test_options_travel_to_a_child_compile() -> None:
    spec = StepSpec(
        TINY,
        "fsdp=4,tp=2",
        (TOKENS,),
        loss="lm",
        remat={"LlamaLayer": "dots_saveable"},
        microbatches=2,
    )
    back = StepSpec.from_json(spec.to_json())
    assert back.remat == (("LlamaLayer", "dots_saveable"),)
    assert back.microbatches == 2
    assert dataclasses.replace(spec, microbatches=1).remat == spec.remat

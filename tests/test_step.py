"""step_memory_report: XLA's own per-device accounting of one compiled step.

The reference numbers come from hand-written JAX in this file: the same step
written independently (specs by hand, ``nnx.value_and_grad``, ``nnx.Optimizer``)
and compiled with ``jax.jit(...).lower(...).compile()``.
"""

import dataclasses
import json
import math
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from nnx_introspect import _step, abstract_model
from nnx_introspect._inventory import inventory
from nnx_introspect._step import StepMemoryReport, parse_topology, step_memory_report
from nnx_introspect._xla import toolchain
from nnx_introspect.examples import LlamaConfig, llama
from tests.llama_tiny_layers import TINY_2_LAYERS_PLAIN

B, T = 8, 128
BASE = TINY_2_LAYERS_PLAIN
"""``llama_tiny``'s widths, 2 of its 8 layers and a vocabulary of 512: the same
step held against the same hand-written one, at half of each compile (the
layers' matmuls, not the embedding's lookup, still make most of ``6 N T``)."""
TINY = dataclasses.replace(BASE, partitioned=True)
MICRO = LlamaConfig(vocab=512, d_model=64, n_layers=2, n_heads=2, d_ff=128)
"""A Llama small enough that XLA:TPU compiles its step in seconds."""


def tokens(b: int = B, t: int = T) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct((b, t), jnp.int32)


# --- the hand-written reference ------------------------------------------------------

COL, ROW = P("fsdp", "tp"), P("tp", "fsdp")
HAND_SPECS = {
    "embedding": ROW,
    "q": COL,
    "k": COL,
    "v": COL,
    "gate": COL,
    "up": COL,
    "lm_head": COL,
    "o": ROW,
    "down": ROW,
}


def hand_spec(path: tuple[Any, ...], ndim: int) -> P:
    """The llama's annotations, written out: norms and scalars replicated."""
    if ndim < 2:
        return P()
    names = [str(k) for k in path if str(k) in HAND_SPECS]
    return HAND_SPECS[names[-1]]


def hand_compiled(mesh: Mesh, cfg: LlamaConfig = BASE, b: int = B, t: int = T) -> Any:
    """The Llama AdamW LM step, written the way a training script does.

    ``cfg`` carries no sharding metadata: the specs are :data:`HAND_SPECS`.
    """
    model = nnx.eval_shape(lambda: llama(cfg)(nnx.Rngs(0)))
    optimizer = nnx.eval_shape(
        lambda: nnx.Optimizer(llama(cfg)(nnx.Rngs(0)), optax.adamw(1e-3), wrt=nnx.Param)
    )
    graphdef, params = nnx.split(model, nnx.Param)
    opt_graphdef, opt_state = nnx.split(optimizer)

    def place(tree: Any) -> Any:
        def one(path: Any, x: Any) -> Any:
            keys = tuple(getattr(k, "key", getattr(k, "idx", k)) for k in path)
            spec = hand_spec(keys, len(x.shape))
            return jax.ShapeDtypeStruct(
                x.shape, x.dtype, sharding=NamedSharding(mesh, spec)
            )

        return jax.tree_util.tree_map_with_path(one, tree)

    params, opt_state = place(params), place(opt_state)
    batch = jax.ShapeDtypeStruct(
        (b, t), jnp.int32, sharding=NamedSharding(mesh, P("fsdp"))
    )

    def train_step(params: Any, opt_state: Any, toks: jax.Array) -> Any:
        model = nnx.merge(graphdef, params)
        optimizer = nnx.merge(opt_graphdef, opt_state)

        def loss_fn(model: Any) -> jax.Array:
            logits = model(toks)[:, :-1].astype(jnp.float32)
            losses: jax.Array = optax.softmax_cross_entropy_with_integer_labels(
                logits, toks[:, 1:]
            )
            return losses.mean()

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss, nnx.state(model, nnx.Param), nnx.state(optimizer)

    shardings = jax.tree.map(lambda s: s.sharding, (params, opt_state))
    jitted = jax.jit(
        train_step,
        out_shardings=(NamedSharding(mesh, P()), *shardings),
        donate_argnums=(0, 1),
    )
    return jitted.lower(params, opt_state, batch).compile()


@pytest.fixture(scope="module")
def cpu_mesh() -> Mesh:
    return Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("fsdp", "tp"))


@pytest.fixture(scope="module")
def tiny_report() -> StepMemoryReport:
    return step_memory_report(
        llama(TINY), "fsdp=4,tp=2", (tokens(),), loss="lm", optimizer="adamw"
    )


def test_llama_tiny_adamw_equals_hand_written_jax(
    tiny_report: StepMemoryReport, cpu_mesh: Mesh
) -> None:
    compiled = hand_compiled(cpu_mesh)
    memory = compiled.memory_analysis()
    report = tiny_report
    assert report.argument_bytes == memory.argument_size_in_bytes
    assert report.output_bytes == memory.output_size_in_bytes
    assert report.temp_bytes == memory.temp_size_in_bytes
    assert report.alias_bytes == memory.alias_size_in_bytes
    assert report.flops == compiled.cost_analysis()["flops"]
    assert report.peak_bytes == (
        memory.argument_size_in_bytes
        + memory.output_size_in_bytes
        + memory.temp_size_in_bytes
        - memory.alias_size_in_bytes
    )
    assert report.num_devices == 8 and report.backend == "cpu"


def test_argument_bytes_are_the_shards_by_arithmetic(
    tiny_report: StepMemoryReport,
) -> None:
    """Params + mu + nu sharded 8 ways (norms replicated), 2 counters, the batch."""
    cfg = BASE
    d, f, v, n = cfg.d_model, cfg.d_ff, cfg.vocab, cfg.n_layers
    sharded = 2 * v * d + n * (4 * d * d + 3 * d * f)
    replicated = n * 2 * d + d
    param_bytes = 4 * (sharded // 8 + replicated)
    counts = 4 + 4  # adam's count and the optimizer's step, int32
    batch = B // 4 * T * 4  # int32 tokens split 4 ways over fsdp
    assert tiny_report.argument_bytes == 3 * param_bytes + counts + batch
    assert tiny_report.plan.bytes_by_category["params"] == param_bytes
    # params, optimizer state and the counters are donated, the batch is not
    assert tiny_report.alias_bytes == tiny_report.argument_bytes - batch


def test_report_fields_and_rendering(tiny_report: StepMemoryReport) -> None:
    report = tiny_report
    assert report.step == "forward + backward + optimizer update"
    assert report.loss == "lm" and report.optimizer == "adamw"
    assert report.batch == ("int32[8,128]",)
    assert report.batch_specs == (P("fsdp"),)
    assert report.compiler.startswith("XLA:CPU (jaxlib ")
    assert report.compiled_in == "this process"
    assert report.fits(report.peak_bytes) and not report.fits(report.peak_bytes - 1)
    assert report.fits("1TiB")
    table = report.table()
    # the verdict comes first and names the compiler
    assert table.title.startswith("Peak ") and "XLA:CPU" in table.title
    assert any("many times over" in note for note in table.notes)
    markdown = report.to_markdown()
    assert markdown.index("Peak") < markdown.index("arguments")
    data = json.loads(report.to_json())
    assert data["schema"] == "nnx-introspect/step-memory" and data["version"] == 4
    assert data["peak_bytes"] == report.peak_bytes
    assert data["mesh"] == {"fsdp": 4, "tp": 2}
    assert "many times over" in data["temporaries_caveat"]
    assert "<table>" in report.to_html()
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.temp_bytes = 0  # type: ignore[assignment]


def test_flops_match_the_six_n_t_estimate(tiny_report: StepMemoryReport) -> None:
    """Dense Llama at T=128: flops x devices within 0.8-1.25 of 6 N T."""
    ratio = tiny_report.total_flops / (6 * tiny_report.plan.n_params * B * T)
    assert 0.8 <= ratio <= 1.25


# --- variants -------------------------------------------------------------------------


def mlp(rngs: nnx.Rngs) -> nnx.Sequential:
    return nnx.Sequential(
        nnx.Linear(16, 64, rngs=rngs), nnx.relu, nnx.Linear(64, 16, rngs=rngs)
    )


MLP_PARAM_BYTES = (16 * 64 + 64 + 64 * 16 + 16) * 4


def test_forward_only_and_gradients_against_hand_written_jax() -> None:
    mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
    x = jax.ShapeDtypeStruct((32, 16), jnp.float32)
    model = nnx.eval_shape(lambda: mlp(nnx.Rngs(0)))
    graphdef, params = nnx.split(model)
    rep = NamedSharding(mesh, P())
    params = jax.tree.map(
        lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=rep), params
    )
    xs = jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, P("data")))

    def forward(params: Any, x: jax.Array) -> jax.Array:
        out: jax.Array = nnx.merge(graphdef, params)(x)
        return out

    def grads(params: Any, x: jax.Array) -> Any:
        def loss(params: Any) -> jax.Array:
            out: jax.Array = jnp.mean(nnx.merge(graphdef, params)(x))
            return out

        return jax.value_and_grad(loss)(params)

    out = (rep, jax.tree.map(lambda s: s.sharding, params))
    cases: list[tuple[str | None, Any]] = [
        (None, jax.jit(forward)),
        ("mean", jax.jit(grads, out_shardings=out)),
    ]
    for loss, jitted in cases:
        memory = jitted.lower(params, xs).compile().memory_analysis()
        report = step_memory_report(mlp, {"data": 4}, x, loss=loss)
        assert report.argument_bytes == memory.argument_size_in_bytes
        assert report.output_bytes == memory.output_size_in_bytes
        assert report.temp_bytes == memory.temp_size_in_bytes
        assert report.alias_bytes == 0
    assert report.argument_bytes == MLP_PARAM_BYTES + 8 * 16 * 4
    assert report.step == "forward + backward"


def test_concrete_module_mesh_object_and_read_only(assert_readonly: Any) -> None:
    model = mlp(nnx.Rngs(0))
    mesh = Mesh(np.array(jax.devices()[4:8]), ("data",))
    x = jnp.ones((32, 16))
    report = assert_readonly(
        model, lambda: step_memory_report(model, mesh, x, optimizer=optax.sgd(0.1))
    )
    # sgd keeps no state: params, one quarter of x, the optimizer's step counter
    assert report.argument_bytes == MLP_PARAM_BYTES + 8 * 16 * 4 + 4
    assert report.optimizer == "optax object"


def test_callable_loss_rules_and_batch_spec() -> None:
    def loss(model: Any, batch: tuple[jax.Array, ...]) -> jax.Array:
        x, y = batch
        return jnp.mean((model(x) - y) ** 2)

    x = jax.ShapeDtypeStruct((32, 16), jnp.float32)
    report = step_memory_report(
        mlp,
        "data=2,model=4",
        (x, x),
        loss=loss,
        rules=[("layers/0/kernel", P(None, "model"))],
        batch_spec=(P("data"), P("data", "model")),
    )
    kernel0 = 16 * 64 * 4
    params = MLP_PARAM_BYTES - kernel0 + kernel0 // 4
    assert report.argument_bytes == params + 16 * 16 * 4 + 16 * 4 * 4
    assert report.loss == "loss"
    assert report.batch_specs == (P("data"), P("data", "model"))


def test_logical_rules_translate_metadata() -> None:
    def annotated(rngs: nnx.Rngs) -> nnx.Linear:
        return nnx.Linear(
            8, 16, rngs=rngs, kernel_metadata={"out_sharding": ("embed", "mlp")}
        )

    x = jax.ShapeDtypeStruct((8, 8), jnp.float32)
    report = step_memory_report(
        annotated,
        "model=8",
        x,
        loss=None,
        logical_rules=[("embed", None), ("mlp", "model")],
    )
    assert report.argument_bytes == 8 * 16 * 4 // 8 + 16 * 4 + 8 * 4


# --- bad input ------------------------------------------------------------------------


def two(rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(4, 6, rngs=rngs)


def raises(rngs: nnx.Rngs) -> nnx.Linear:
    raise RuntimeError("no weights today")


def embed(rngs: nnx.Rngs) -> nnx.Embed:
    return nnx.Embed(10, 4, rngs=rngs)


X = jax.ShapeDtypeStruct((8, 4), jnp.float32)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"target": nnx.State({})},
            TypeError,
            r"`target` must be an nnx.Module.*State",
        ),
        ({"target": 3}, TypeError, r"target"),
        ({"target": "nope"}, ValueError, r"`target` 'nope' cannot be built"),
        ({"target": raises}, ValueError, r"`target` factory 'raises' raised .*today"),
        ({"mesh": "data=x"}, ValueError, r"`mesh` must look like"),
        ({"batch": ()}, ValueError, r"`batch` must hold the model's positional"),
        ({"batch": (3,)}, TypeError, r"`batch\[0\]` must be a jax.ShapeDtypeStruct"),
        (
            {"batch": jax.ShapeDtypeStruct((8, 5), jnp.float32)},
            ValueError,
            r"`batch` \(float32\[8,5\]\) cannot be passed to the model: its forward raised \w+Error",
        ),
        (
            {"target": embed, "batch": X},
            ValueError,
            r"`batch` \(float32\[8,4\]\) cannot be passed to the model: its forward raised \w+Error",
        ),
        (
            {"batch": jax.ShapeDtypeStruct((6, 4), jnp.float32)},
            ValueError,
            r"`batch` leaf 0 \(float32\[6,4\]\).*does not divide over data",
        ),
        ({"loss": "bogus"}, ValueError, r"`loss` must be None, one of"),
        ({"loss": "nope_mod:f"}, ValueError, r"`loss` 'nope_mod:f' cannot be imp"),
        ({"loss": "lm"}, ValueError, r"`loss='lm'` needs `batch\[0\]` to be"),
        (
            {"loss": lambda m, b: m(*b)},
            ValueError,
            r"`loss` '<lambda>' failed: it must return a float scalar",
        ),
        (
            {"loss": lambda m, b: 1 / 0},
            ValueError,
            r"`loss` '<lambda>' failed: ZeroDivisionError",
        ),
        ({"optimizer": "adamx"}, ValueError, r"`optimizer` must be one of"),
        ({"optimizer": 3}, TypeError, r"optimizer"),
        (
            {"optimizer": "adamw", "loss": None},
            ValueError,
            r"`optimizer` 'adamw' needs a loss",
        ),
        ({"rules": [("(", P())]}, ValueError, r"`rules\[0\]` has an invalid"),
        ({"logical_rules": [3]}, TypeError, r"`logical_rules\[0\]` must be"),
        ({"batch_spec": (P(), P())}, ValueError, r"`batch_spec` must be one Partit"),
        ({"batch_spec": ("data",)}, TypeError, r"`batch_spec\[0\]` must be a Partit"),
        ({"batch_spec": P("model")}, ValueError, r"`batch_spec` leaf 0.*'model'"),
        ({"batch_spec": P(None, None, "data")}, ValueError, r"`batch_spec`.*rank 2"),
        ({"topology": "v9-4"}, ValueError, r"`topology` must name a Cloud TPU"),
        ({"topology": "v5e-3"}, ValueError, r"`topology` 'v5e-3': a v5e slice"),
        ({"topology": "v5p-6"}, ValueError, r"`topology` 'v5p-6'.*TensorCores"),
        ({"topology": "v5e-4"}, ValueError, r"`topology` 'v5e-4' has 4 chip.*8 dev"),
    ],
)
def test_bad_input_names_the_argument(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    args: dict[str, Any] = {"target": two, "mesh": "data=8", "batch": X} | kwargs
    target, mesh, batch = args.pop("target"), args.pop("mesh"), args.pop("batch")
    with pytest.raises(error, match=match):
        step_memory_report(target, mesh, batch, **args)


def test_every_kind_of_plan_problem_is_named_and_nothing_compiles() -> None:
    rules = [("kernel", P(None, "data")), ("bias", P("nope"))]
    with pytest.raises(ValueError, match=r"\(2 problems, nothing compiled\)"):
        step_memory_report(two, "data=4", X, rules=rules)
    try:
        step_memory_report(two, "data=4", X, rules=rules)
    except ValueError as error:
        text = str(error)
    assert (
        "1 dimension does not divide over its axes (e.g. `kernel` dimension 1, size 6, over data = 4)"
        in text
    )
    assert "1 leaf names axes the mesh lacks ('nope'; e.g. `bias`)" in text


def test_hundreds_of_problems_are_summarised_in_one_short_line() -> None:
    """A mesh whose axis names the 7B model does not use: 1 problem per
    kernel (226), summarised by kind in at most 300 characters, naming the
    flag, never repeating the fix per leaf."""
    from nnx_introspect.examples import llama_7b_sharded

    tokens = jax.ShapeDtypeStruct((8, 2048), jnp.int32)
    with pytest.raises(ValueError) as caught:
        step_memory_report(llama_7b_sharded, "data=2,model=4", tokens)
    text = str(caught.value)
    annotated = [r for r in inventory(abstract_model(llama_7b_sharded)) if r.sharding]
    # every annotated leaf names both missing axes, one problem each
    problems = sum(sum(a is not None for a in r.sharding) for r in annotated)
    assert f"({problems} problems, nothing compiled)" in text
    assert f"{len(annotated)} leaves name axes the mesh lacks ('fsdp', 'tp'" in text
    assert "--mesh" in text and text.count("logical_rules") == 1
    assert len(text) <= 300 and "\n" not in text


@pytest.mark.parametrize(
    ("value", "match"),
    [(-1, r"`max_device_bytes` must be"), ("lots", r"`max_device_bytes` must be")],
)
def test_fits_rejects_bad_budgets(
    tiny_report: StepMemoryReport, value: Any, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        tiny_report.fits(value)


# --- the child process ------------------------------------------------------------------

CHILD_TARGETS = textwrap.dedent(
    """
    from flax import nnx

    def wide(rngs):
        return nnx.Linear(32, 64, rngs=rngs)

    def squared(model, batch):
        return (model(*batch) ** 2).mean()
    """
)


@pytest.fixture
def child_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "step_child_targets.py").write_text(CHILD_TARGETS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "step_child_targets", raising=False)
    return tmp_path


def test_sixteen_devices_compile_in_a_child(child_dir: Path) -> None:
    assert jax.device_count() == 8
    x = jax.ShapeDtypeStruct((64, 32), jnp.float32)
    report = step_memory_report(
        "step_child_targets:wide",
        "data=16",
        x,
        loss="step_child_targets:squared",
        optimizer="sgd",
    )
    params = (32 * 64 + 64) * 4
    assert report.num_devices == 16
    assert report.compiled_in == "a child process with 16 virtual CPU devices"
    assert report.argument_bytes == params + 4 * 32 * 4 + 4  # + the step counter
    assert report.alias_bytes == params + 4
    assert report.backend == "cpu" and report.temp_bytes > 0


def test_child_errors_come_back_naming_the_argument(child_dir: Path) -> None:
    bad = jax.ShapeDtypeStruct((64, 31), jnp.float32)
    with pytest.raises(ValueError, match=r"`batch` \(float32\[64,31\]\) cannot be"):
        step_memory_report("step_child_targets:wide", "data=16", bad)


def test_child_compile_needs_names() -> None:
    x = jax.ShapeDtypeStruct((64, 4), jnp.float32)
    with pytest.raises(ValueError, match=r"`target` must be passed as 'package.mo"):
        step_memory_report(lambda rngs: two(rngs), "data=16", x)
    with pytest.raises(ValueError, match=r"`target` must be passed as 'package.mo"):
        step_memory_report(two(nnx.Rngs(0)), "data=16", x)
    with pytest.raises(ValueError, match=r"`loss` must be 'mean', 'lm', None or a f"):
        step_memory_report(
            "nnx_introspect.examples:two_layer",
            "data=16",
            jax.ShapeDtypeStruct((64, 3), jnp.float32),
            loss=lambda m, b: m(*b).mean(),
        )
    with pytest.raises(ValueError, match=r"`optimizer` must be a name, one of"):
        step_memory_report(
            "nnx_introspect.examples:two_layer",
            "data=16",
            jax.ShapeDtypeStruct((64, 3), jnp.float32),
            optimizer=optax.sgd(0.1),
        )
    cap = _step.MAX_CHILD_DEVICES
    with pytest.raises(ValueError, match=rf"more than the {cap} virtual CPU devices"):
        step_memory_report(
            "nnx_introspect.examples:two_layer",
            {"data": 2 * cap},
            jax.ShapeDtypeStruct((2 * cap, 3), jnp.float32),
        )


def test_a_module_level_factory_is_importable_by_name() -> None:
    from nnx_introspect.examples import llama_tiny

    assert _step.importable_name(llama_tiny) == "nnx_introspect.examples:llama_tiny"
    assert _step.importable_name(llama(TINY)) is None  # a closure
    assert _step.importable_name(lambda rngs: None) is None


# --- TPU topologies -------------------------------------------------------------------


def test_parse_topology() -> None:
    assert parse_topology("v5e-4") == ("v5e:2x2", 4)
    assert parse_topology("v5litepod-256") == ("v5e:16x16", 256)
    assert parse_topology("v6e-8") == ("v6e:2x4", 8)
    assert parse_topology("v5p-8") == ("v5:2x2x1", 4)
    assert parse_topology("v4-16") == ("v4:2x2x2", 8)
    assert parse_topology("v5p-128") == ("v5:4x4x4", 64)
    assert parse_topology("v4-4096") == ("v4:8x16x16", 2048)
    for name, (_, chips) in (("v5p-1024", ("", 512)), ("v5e-32", ("", 32))):
        libtpu_name = parse_topology(name)[0]
        dims = [int(d) for d in libtpu_name.split(":")[1].split("x")]
        assert math.prod(dims) == chips


def test_missing_libtpu_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(toolchain, "libtpu_version", lambda: None)
    with pytest.raises(
        ImportError, match=re.escape('pip install "nnx-introspect[tpu]"')
    ):
        step_memory_report(two, "data=4", X, topology="v5e-4")


def _libtpu_missing() -> bool:
    return _step.libtpu_version() is None


@pytest.mark.skipif(_libtpu_missing(), reason="libtpu is not installed (the tpu extra)")
def test_v5e_2x2_equals_hand_written_xla_tpu(monkeypatch: pytest.MonkeyPatch) -> None:
    report = step_memory_report(
        llama(dataclasses.replace(MICRO, partitioned=True)),
        "fsdp=2,tp=2",
        tokens(),
        loss="lm",
        optimizer="adamw",
        topology="v5e-4",
    )
    from jax.experimental import topologies

    # libtpu is already started by the report; these only keep a first start quiet
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    devices = topologies.get_topology_desc("v5e:2x2", "tpu").devices
    mesh = Mesh(np.array(devices).reshape(2, 2), ("fsdp", "tp"))
    compiled = hand_compiled(mesh, MICRO)
    memory = compiled.memory_analysis()
    assert report.backend == "tpu" and report.device_kind == "TPU v5 lite"
    assert report.compiler.startswith("XLA:TPU (libtpu ")
    assert report.argument_bytes == memory.argument_size_in_bytes
    assert report.output_bytes == memory.output_size_in_bytes
    assert report.temp_bytes == memory.temp_size_in_bytes
    assert report.alias_bytes == memory.alias_size_in_bytes
    assert not any("many times over" in n for n in report.table().notes)
    assert jax.default_backend() == "cpu"  # the process's own devices unchanged


def test_other_state_is_carried_and_donated(
    bn_dropout: Any, assert_readonly: Any
) -> None:
    """BatchNorm statistics and Dropout's RNG state: updated by the step, donated."""
    x = jax.ShapeDtypeStruct((4, 3), jnp.float32)
    report = assert_readonly(
        bn_dropout,
        lambda: step_memory_report(bn_dropout, "data=2", x, optimizer="adamw"),
    )
    cats = report.plan.bytes_by_category
    params, other = (3 * 5 + 5 + 5 + 5 + 5 * 2 + 2) * 4, cats["other state"]
    assert cats["params"] == params and other > 0
    # params, batch stats + RNG state, AdamW's mu and nu + 2 counters, 2 rows of x
    assert report.argument_bytes == params + other + 2 * params + 8 + 2 * 3 * 4
    assert report.alias_bytes == report.argument_bytes - 2 * 3 * 4


def test_model_built_under_a_mesh_plans_its_optimizer_step() -> None:
    # flax's default way of building a sharded model: each variable carries
    # `eager_sharding=True`, so an abstract nnx.Optimizer built outside the mesh
    # fails ("An auto mesh context or metadata is required"). The step derives the
    # optimizer state from `tx.init` instead, like the plan.
    mesh = jax.make_mesh((2,), ("data",), axis_types=(jax.sharding.AxisType.Explicit,))
    with jax.set_mesh(mesh):
        model = nnx.Linear(
            4, 8, rngs=nnx.Rngs(0), kernel_metadata={"out_sharding": (None, "data")}
        )
    report = step_memory_report(
        model, "data=2", jax.ShapeDtypeStruct((2, 4), jnp.float32), optimizer="adamw"
    )
    # Independent arithmetic: the kernel (4 x 8) split over data=2, the bias
    # replicated, each three times (params, mu, nu); adam's count and the step
    # counter; one row of the batch.
    kernel, bias = 4 * 8 // 2 * 4, 8 * 4
    assert report.argument_bytes == 3 * (kernel + bias) + 4 + 4 + 4 * 4
    assert report.alias_bytes == 3 * (kernel + bias) + 4 + 4

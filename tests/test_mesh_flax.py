"""The mesh plan agrees with what flax itself does, on 8 virtual CPU devices.

Logical-rule translation (tuple entries included), models built under a mesh with
eager sharding, and optimizer state: each plan is held against flax building the
same variables under a real mesh, or against the ``nnx.Optimizer`` the plan
replaced.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import optax
import pytest
from flax import nnx
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from nnx_introspect import abstract_model, mesh_config_report
from nnx_introspect._mesh import LeafShard, MeshConfigReport
from nnx_introspect.examples import LlamaConfig, llama

Rules = list[tuple[str, str | tuple[str, ...] | None]]
RULES: Rules = [("fsdp", "data"), ("sp", "seq"), ("tp", "model")]
MESH_STR = "data=2,seq=2,model=2"


def mesh3(kind: AxisType = AxisType.Explicit) -> Mesh:
    return jax.make_mesh((2, 2, 2), ("data", "seq", "model"), axis_types=(kind,) * 3)


def linear(annotation: tuple[Any, ...]) -> nnx.Linear:
    return nnx.Linear(
        8, 16, rngs=nnx.Rngs(0), kernel_metadata={"out_sharding": annotation}
    )


def by_path(report: MeshConfigReport) -> dict[str, LeafShard]:
    return {leaf.path: leaf for leaf in report.all_leaves}


# (annotation, does flax 0.12 place it under RULES on the 3-axis mesh?)
ANNOTATIONS = [
    (("fsdp", "tp"), True),
    ((None, "tp"), True),
    ((("fsdp", "sp"), "tp"), False),  # tunix with enable_sp: logical names in a tuple
    ((("data", "seq"), "tp"), True),  # mesh axes inside the tuple: nothing to translate
    ((("data", "sp"), None), False),
    (("fsdp", ("seq", "model")), True),
]


@pytest.mark.parametrize("kind", [AxisType.Explicit, AxisType.Auto])
@pytest.mark.parametrize(("annotation", "placeable"), ANNOTATIONS)
def test_plan_agrees_with_flax_eager_sharding(
    annotation: tuple[Any, ...], placeable: bool, kind: AxisType
) -> None:
    """Build the variable as flax does (under the mesh and the rules), then plan."""
    mesh = mesh3(kind)
    try:
        with jax.set_mesh(mesh), nnx.logical_axis_rules(RULES):
            built = linear(annotation)
    except ValueError as err:  # flax could not place the kernel
        assert not placeable, err
        assert "not found in mesh" in str(err)
        flax_spec = None
    else:
        assert placeable
        flax_spec = spec_of(built.kernel[...])
    with nnx.use_eager_sharding(False):
        model = linear(annotation)
    for report in (
        mesh_config_report(model, MESH_STR, logical_rules=RULES),
        _with_context_rules(model),
    ):
        kernel = by_path(report)["kernel"]
        if flax_spec is None:  # never green for a leaf flax cannot place
            assert not report.ok
            assert kernel.shard_shape is None
            problems = [p for p in report.errors if p.path == "kernel"]
            assert {p.kind for p in problems} == {"unknown-axis"}
            assert all("inside a tuple entry" in p.message for p in problems)
        else:
            assert report.ok
            assert kernel.spec == flax_spec
            shards = built.kernel[...].addressable_shards
            assert len(shards) == 8
            assert {tuple(s.data.shape) for s in shards} == {kernel.shard_shape}
            assert shards[0].data.nbytes == kernel.bytes_per_device


def _with_context_rules(model: nnx.Module) -> MeshConfigReport:
    with nnx.logical_axis_rules(RULES):
        return mesh_config_report(model, MESH_STR)


def test_tuple_entry_problem_names_each_logical_name() -> None:
    with nnx.use_eager_sharding(False):
        model = linear((("fsdp", "sp"), "tp"))
    report = mesh_config_report(model, MESH_STR, logical_rules=RULES)
    kernel = by_path(report)["kernel"]
    # Flax's spec: the whole entry "tp" is translated, the tuple is kept as written.
    assert kernel.spec == P(("fsdp", "sp"), "model")
    assert kernel.source == "metadata + logical rules"
    assert [(p.kind, p.axes) for p in report.errors] == [
        ("unknown-axis", ("fsdp",)),
        ("unknown-axis", ("sp",)),
    ]
    assert report.errors[0].message.startswith(
        "`kernel`: spec P(('fsdp', 'sp'), 'model') names 'fsdp' inside a tuple entry."
    )
    # The fix the message suggests works in flax: one logical name -> a tuple.
    rules: Rules = [("fsdp_sp", ("data", "seq")), ("tp", "model")]
    with nnx.use_eager_sharding(False):
        fixed = linear(("fsdp_sp", "tp"))
    plan = by_path(mesh_config_report(fixed, MESH_STR, logical_rules=rules))["kernel"]
    with jax.set_mesh(mesh3()), nnx.logical_axis_rules(rules):
        built = linear(("fsdp_sp", "tp"))
    assert plan.spec == spec_of(built.kernel[...]) == P(("data", "seq"), "model")
    assert plan.shard_shape == built.kernel[...].addressable_shards[0].data.shape


def test_plan_agrees_with_get_named_sharding() -> None:
    """``nnx.get_named_sharding`` (flax's lazy path) gives the plan's specs."""
    cfg = LlamaConfig(
        vocab=64, d_model=32, n_layers=2, n_heads=4, d_ff=48, partitioned=True
    )
    model = abstract_model(llama(cfg))
    rules: Rules = [("fsdp", "data"), ("tp", ("seq", "model"))]
    report = mesh_config_report(model, MESH_STR, logical_rules=rules)
    assert report.ok
    with nnx.logical_axis_rules(rules):
        shardings = nnx.get_named_sharding(nnx.state(model), mesh3())
    flat = {
        "/".join(map(str, path)): var.get_value()
        for path, var in nnx.to_flat_state(shardings)
    }
    assert set(flat) == {leaf.path for leaf in report.leaves}
    for leaf in report.leaves:
        assert leaf.spec == flax_spec(flat[leaf.path]), leaf.path
        assert leaf.shard_shape == flat[leaf.path].shard_shape(leaf.shape)


def spec_of(array: jax.Array) -> P:
    sharding = array.sharding
    assert isinstance(sharding, NamedSharding)
    return sharding.spec


def flax_spec(sharding: Any) -> P:
    """Flax writes unannotated leaves as ``P()``; drop trailing ``None``s to compare."""
    return trimmed(sharding.spec)


def trimmed(spec: P) -> P:
    """``spec`` without trailing ``None`` entries (the same placement)."""
    entries = list(spec)
    while entries and entries[-1] is None:
        entries.pop()
    return P(*entries)


# --- optimizer state: models built under a mesh (issue 8 #4) -----------------------


def test_optimizer_plan_for_model_built_under_a_mesh() -> None:
    mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Explicit,))
    with jax.set_mesh(mesh):
        model = nnx.Linear(
            4,
            16,
            rngs=nnx.Rngs(0),
            kernel_metadata={"out_sharding": (None, "data")},
        )
    assert model.kernel.get_metadata()["eager_sharding"] is True
    # Outside the mesh, where the old plan raised flax's "An auto mesh context or
    # metadata is required" (so does nnx.Optimizer itself).
    with pytest.raises(ValueError, match="An auto mesh context or metadata"):
        nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
    report = mesh_config_report(model, "data=8", optimizer="adamw")
    assert report.ok
    # Flax's real optimizer, built where it can be (under the mesh).
    with jax.set_mesh(mesh):
        optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
    real = {
        "optimizer/" + "/".join(map(str, path)): var[...]
        for path, var in nnx.to_flat_state(nnx.state(optimizer))
    }
    planned = by_path(report)
    assert list(real) == [leaf.path for leaf in report.optimizer_leaves]
    for path, array in real.items():
        leaf = planned[path]
        assert (leaf.shape, leaf.dtype) == (tuple(array.shape), str(array.dtype))
        assert leaf.spec == flax_spec(array.sharding)
        shards = array.addressable_shards
        assert {tuple(s.data.shape) for s in shards} == {leaf.shard_shape}
        assert shards[0].data.nbytes == leaf.bytes_per_device
    mu = planned["optimizer/opt_state/0/mu/kernel"]
    assert (mu.shard_shape, mu.bytes_per_device) == ((4, 2), 4 * 2 * 4)
    # The model is still usable and unchanged by planning.
    assert model.kernel.get_metadata()["eager_sharding"] is True


# --- optimizer state: identical to the nnx.Optimizer-based plan it replaced --------


def old_optimizer_plan(
    model: nnx.Module, tx: optax.GradientTransformation, report: MeshConfigReport
) -> list[tuple[Any, ...]]:
    """The previous implementation: an abstract ``nnx.Optimizer``, each leaf
    sharded like the parameter whose path ends its own and whose shape it has."""
    with nnx.use_eager_sharding(False):
        opt = nnx.eval_shape(lambda m: nnx.Optimizer(m, tx, wrt=nnx.Param), model)
    params = {leaf.path: leaf for leaf in report.leaves if leaf.category == "params"}
    out = []
    for path, var in nnx.to_flat_state(nnx.state(opt)):
        keys = [str(k) for k in path]
        value = var.get_value()
        if not hasattr(value, "shape"):  # optax.MaskedNode: no array, no leaf
            continue
        shape, dtype = tuple(value.shape), np.dtype(value.dtype)
        mirrored = next(
            (
                params["/".join(keys[i:])]
                for i in range(1, len(keys))
                if "/".join(keys[i:]) in params
                and params["/".join(keys[i:])].shape == shape
            ),
            None,
        )
        spec = P() if mirrored is None else mirrored.spec
        shard = shape if mirrored is None else mirrored.shard_shape
        assert shard is not None
        size = int(np.prod(shard, dtype=np.int64))
        out.append(
            (
                "optimizer/" + "/".join(keys),
                type(var).__name__,
                shape,
                str(dtype),
                spec,
                shard,
                int(np.prod(shape, dtype=np.int64)) * dtype.itemsize,
                size * dtype.itemsize,
            )
        )
    return out


def new_optimizer_plan(report: MeshConfigReport) -> list[tuple[Any, ...]]:
    return [
        (
            leaf.path,
            leaf.kind,
            leaf.shape,
            leaf.dtype,
            leaf.spec,
            leaf.shard_shape,
            leaf.global_bytes,
            leaf.bytes_per_device,
        )
        for leaf in report.optimizer_leaves
    ]


class Mixed(nnx.Module):
    """Params with and without specs, a BatchNorm (BatchStat is not optimized),
    a bf16 parameter and a raw array attribute."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(
            8, 16, rngs=rngs, kernel_metadata={"out_sharding": ("data", "model")}
        )
        self.bn = nnx.BatchNorm(16, rngs=rngs)
        self.half = nnx.Linear(16, 4, param_dtype=jax.numpy.bfloat16, rngs=rngs)


def _masked_adam() -> optax.GradientTransformation:
    return optax.masked(
        optax.adam(1e-3), lambda p: jax.tree.map(lambda x: x.ndim > 1, p)
    )


def _multi() -> optax.GradientTransformation:
    return optax.multi_transform(
        {"a": optax.adam(1e-3), "b": optax.sgd(1e-3, momentum=0.9)},
        lambda p: jax.tree.map(lambda x: "a" if x.ndim > 1 else "b", p),
    )


OPTIMIZERS: dict[str, Callable[[], optax.GradientTransformation]] = {
    "adamw": lambda: optax.adamw(1e-3),
    "sgd-momentum": lambda: optax.sgd(1e-3, momentum=0.9),
    "adafactor": lambda: optax.adafactor(1e-3, min_dim_size_to_factor=4),
    "chain": lambda: optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.scale_by_adam(),
        optax.add_decayed_weights(1e-4),
        optax.scale_by_learning_rate(1e-3),
    ),
    "inject-hyperparams": lambda: optax.inject_hyperparams(optax.adamw)(
        learning_rate=1e-3
    ),
    "masked": _masked_adam,
    "multi-transform": _multi,
    "schedule-free": lambda: optax.contrib.schedule_free_adamw(1e-3),
}


def _llama() -> nnx.Module:
    cfg = LlamaConfig(
        vocab=64, d_model=32, n_layers=2, n_heads=4, d_ff=48, partitioned=True
    )
    return abstract_model(llama(cfg))


def _mixed() -> nnx.Module:
    with nnx.use_eager_sharding(False):
        return Mixed(nnx.Rngs(0))


@pytest.mark.parametrize("which", sorted(OPTIMIZERS))
@pytest.mark.parametrize("model_name", ["llama", "mixed"])
def test_optimizer_plan_identical_to_nnx_optimizer(which: str, model_name: str) -> None:
    model = _llama() if model_name == "llama" else _mixed()
    tx = OPTIMIZERS[which]()
    logical = [("fsdp", "data"), ("tp", "model")]
    report = mesh_config_report(
        model, "data=2,model=4", logical_rules=logical, optimizer=tx
    )
    expected = old_optimizer_plan(model, tx, report)
    assert new_optimizer_plan(report) == expected
    assert len(expected) > 1
    # Gradients: one per parameter, as the parameter.
    params = [leaf for leaf in report.leaves if leaf.category == "params"]
    assert [(g.path, g.spec, g.bytes_per_device) for g in report.gradient_leaves] == [
        ("grads/" + p.path, p.spec, p.bytes_per_device) for p in params
    ]


def test_adafactor_factored_state_sizes() -> None:
    """Independent arithmetic: a factored (16, 32) kernel keeps rows + cols."""
    model = _mixed()
    tx = optax.adafactor(1e-3, min_dim_size_to_factor=4)
    report = mesh_config_report(model, "data=2,model=4", optimizer=tx)
    leaves = by_path(report)
    assert leaves["optimizer/opt_state/0/v_row/l1/kernel"].shape == (8,)
    assert leaves["optimizer/opt_state/0/v_col/l1/kernel"].shape == (16,)
    assert leaves["optimizer/opt_state/0/v/l1/kernel"].shape == (1,)
    assert leaves["optimizer/opt_state/0/v_row/l1/kernel"].source == "default"


def test_state_target_plans_the_same_optimizer() -> None:
    model = _mixed()
    a = mesh_config_report(model, "data=2,model=4", optimizer="adamw")
    b = mesh_config_report(nnx.state(model), "data=2,model=4", optimizer="adamw")
    assert a.optimizer_leaves == b.optimizer_leaves
    assert a.gradient_leaves == b.gradient_leaves


def test_failing_optimizer_init_is_a_value_error() -> None:
    def init(params: Any) -> Any:
        raise RuntimeError("boom")

    tx = optax.GradientTransformation(init, lambda u, s, p=None: (u, s))
    with pytest.raises(ValueError, match=r"`optimizer`'s init failed.*RuntimeError"):
        mesh_config_report(_mixed(), "data=2", optimizer=tx)


def test_optimizer_plan_leaves_no_state_behind() -> None:
    before = nnx.using_eager_sharding()
    model = _llama()
    report = mesh_config_report(model, "data=2,model=4", optimizer="adamw")
    assert nnx.using_eager_sharding() == before
    assert dataclasses.is_dataclass(report)


def test_factored_state_of_annotated_params_warns_as_flax_fails() -> None:
    """Flax's nnx.Optimizer gives adafactor's factored rows the kernel's rank-2
    out_sharding and fails under a mesh with eager sharding; the plan warns."""
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)
    tx = optax.adafactor(1e-3, min_dim_size_to_factor=4)
    with jax.set_mesh(mesh):
        model = nnx.Linear(
            16,
            32,
            rngs=nnx.Rngs(0),
            kernel_metadata={"out_sharding": ("data", "model")},
        )
        with pytest.raises(AssertionError):
            nnx.Optimizer(model, tx, wrt=nnx.Param)
    report = mesh_config_report(model, "data=2,model=4", optimizer=tx)
    assert report.ok  # the planned (replicated) placement itself is fine
    # The factored kernel: v_row (16,), v_col (32,) and v (1,) all differ in shape.
    (warning,) = [w for w in report.warnings if w.kind == "optimizer-metadata"]
    assert warning.message.startswith(
        "3 optimizer-state leaf/leaves differ in shape from the annotated parameter "
        "they belong to (first: `optimizer/opt_state/0/v/kernel`, shape (1,), "
        "of `kernel`)"
    )
    plain = mesh_config_report(model, "data=2,model=4", optimizer="adamw")
    assert not [w for w in plain.warnings if w.kind == "optimizer-metadata"]


class TunixStyle(nnx.Module):
    """Built the way tunix builds its models: under a mesh whose axes are the
    annotation names, eager sharding on, rank-3 einsum kernels and LoRA."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        init = nnx.initializers.lecun_normal()
        self.embed = nnx.Param(
            init(rngs.params(), (64, 16)), out_sharding=("tp", "fsdp")
        )
        self.qkv = nnx.Param(
            init(rngs.params(), (16, 4, 8)), out_sharding=("fsdp", "tp", None)
        )
        self.out = nnx.Param(
            init(rngs.params(), (4, 8, 16)), out_sharding=("tp", None, "fsdp")
        )
        self.norm = nnx.RMSNorm(16, rngs=rngs)
        self.lora = nnx.LoRA(16, 2, 16, rngs=rngs)


def test_tunix_style_model_built_under_the_mesh() -> None:
    mesh = jax.make_mesh((2, 4), ("fsdp", "tp"), axis_types=(AxisType.Explicit,) * 2)
    with jax.set_mesh(mesh):
        model = TunixStyle(nnx.Rngs(0))
        optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
    report = mesh_config_report(model, mesh, optimizer="adamw")
    assert report.ok
    planned = by_path(report)
    real = {
        "/".join(map(str, path)): var[...]
        for path, var in nnx.to_flat_state(nnx.state(model))
    }
    real.update(
        ("optimizer/" + "/".join(map(str, path)), var[...])
        for path, var in nnx.to_flat_state(nnx.state(optimizer))
    )
    assert set(real) == {leaf.path for leaf in report.leaves + report.optimizer_leaves}
    for path, array in real.items():
        leaf = planned[path]
        assert trimmed(leaf.spec) == flax_spec(array.sharding), path
        shards = array.addressable_shards
        assert {tuple(s.data.shape) for s in shards} == {leaf.shard_shape}, path
        assert shards[0].data.nbytes == leaf.bytes_per_device, path
    assert planned["qkv"].shard_shape == (8, 1, 8)
    assert planned["optimizer/opt_state/0/mu/lora/lora_a"].kind == "OptVariable"

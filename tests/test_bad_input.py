"""The bad-input sweep: every public name, one argument bad at a time.

Each case passes one bad argument (wrong type, wrong shape, NaN or infinity,
a non-integral float, a negative or out-of-range integer, a bool for an int, a
string) to a public function or method, all other arguments valid, and expects a
``TypeError`` or ``ValueError`` whose message names that argument: in backticks
(```seed```, ```filters[0]```), in one line: a type error too, never
jaxtyping's and beartype's many-line dump. Nothing else may escape: no
``AttributeError``, no flax or tensorstore internals, no C++ ``RuntimeError``.

Case ids read ``<public name>-<argument>-<what is bad>``; methods are named
``<Class>.<method>``. ``test_every_public_name_is_swept`` fails when a public name
(``nnx_introspect.__all__`` or an exercise entrypoint) has no case, so a new name
cannot ship without one.
"""

import concurrent.futures
import dataclasses
import functools
import inspect
import math
import os
import pathlib
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

import nnx_introspect
import nnx_introspect.exercises as exercises
from nnx_introspect import (
    CheckpointReport,
    MeshConfigReport,
    ModelSummary,
    ParamFingerprint,
    StateDiff,
    StepMemoryReport,
    abstract_model,
    check_checkpoint,
    check_reproducible_init,
    checkpoint_report,
    compare_states,
    count_active_params,
    count_params,
    count_state_leaves,
    fresh_init_forward,
    ideal_share,
    max_batch,
    mesh_config_report,
    param_fingerprint,
    param_sum,
    step_memory_report,
    summarize,
    verify_restore,
)
from nnx_introspect.examples import LlamaConfig, llama


@dataclasses.dataclass(frozen=True)
class World:
    """Valid arguments that every case starts from."""

    model: nnx.Linear
    checkpoint: pathlib.Path
    not_a_checkpoint: pathlib.Path
    summary: ModelSummary
    mesh_report: MeshConfigReport
    diff: StateDiff
    fingerprint: ParamFingerprint
    checkpoint_summary: CheckpointReport
    step_report: StepMemoryReport


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    root = tmp_path_factory.mktemp("bad_input")
    checkpoint = root / "ckpt"
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(checkpoint, nnx.state(model))
    empty = root / "empty"
    empty.mkdir()
    return World(
        model=model,
        checkpoint=checkpoint,
        not_a_checkpoint=empty,
        summary=summarize(model),
        mesh_report=mesh_config_report(model, "model=2"),
        diff=compare_states(model, model),
        fingerprint=param_fingerprint(model),
        checkpoint_summary=checkpoint_report(checkpoint),
        step_report=step_memory_report(model, "data=2", STEP_BATCH),
    )


def linear(rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(3, 2, rngs=rngs)


def returns_int(rngs: nnx.Rngs) -> Any:
    return 3


def no_rngs() -> nnx.Linear:
    return nnx.Linear(3, 2, rngs=nnx.Rngs(0))


X = jnp.ones((2, 3))
STEP_BATCH = jax.ShapeDtypeStruct((2, 3), jnp.float32)
NAN_X = X.at[0, 0].set(jnp.nan)
DELETED_X = jnp.ones((2, 3))
DELETED_X.delete()
INF_X = X.at[1, 2].set(jnp.inf)

Call = Callable[..., Any]  # called with the World; defaults bind loop values


@dataclasses.dataclass(frozen=True)
class Case:
    name: str  # the public name: a function, or Class.method
    arg: str
    what: str
    call: Call

    @property
    def id(self) -> str:
        return f"{self.name}-{self.arg}-{self.what}"


CASES: list[Case] = []


def case(name: str, arg: str, what: str, call: Call) -> None:
    CASES.append(Case(name, arg, what, call))


# Integer-valued scalars: the same bad values everywhere.
BAD_INTS: dict[str, Any] = {
    "negative": -1,
    "non-integral": 1.5,
    "nan": math.nan,
    "inf": math.inf,
    "bool": True,
    "str": "3",
    "array": np.ones(2),
    "none": None,
}
BAD_POSITIVE = {**BAD_INTS, "zero": 0}


def int_cases(
    name: str, arg: str, make: Callable[[World, Any], Any], positive: bool = False
) -> None:
    for what, value in (BAD_POSITIVE if positive else BAD_INTS).items():
        case(name, arg, what, lambda w, v=value: make(w, v))


BAD_TOLERANCES: dict[str, Any] = {
    "negative": -1e-3,
    "nan": math.nan,
    "inf": math.inf,
    "bool": True,
    "str": "0.1",
    "none": None,
    "array": np.ones(2),
}


def tolerance_cases(name: str, make: Callable[[World, str, Any], Any]) -> None:
    for arg in ("rtol", "atol"):
        for what, value in BAD_TOLERANCES.items():
            case(name, arg, what, lambda w, a=arg, v=value: make(w, a, v))


BAD_TARGETS: dict[str, Any] = {
    "int": 3,
    "str": "model",
    "none": None,
    "array": np.ones((2, 3)),
    "big-array": np.ones((40, 40)),  # numpy's repr of it runs over lines
}


def target_cases(name: str, arg: str, make: Callable[..., Any]) -> None:
    for what, value in BAD_TARGETS.items():
        case(name, arg, what, lambda w, v=value: make(w, v))


BAD_FILTERS: dict[str, Any] = {
    "int": 3,
    "float": 2.5,
    "object": object(),
    "dict": {"kernel": True},
    "nested-int": (nnx.Param, 3),
    "callable-arity": len,
    "np-bool": np.True_,
}


def filter_cases(name: str, fn: Callable[..., Any]) -> None:
    for what, value in BAD_FILTERS.items():
        case(name, "filters", what, lambda w, v=value: fn(w.model, v))


BAD_FACTORIES: dict[str, Any] = {
    "int": 3,
    "returns-int": returns_int,
    "no-rngs": no_rngs,
}


def factory_cases(name: str, make: Callable[[World, Any], Any]) -> None:
    for what, value in BAD_FACTORIES.items():
        case(name, "factory", what, lambda w, v=value: make(w, v))


BAD_PATHS: dict[str, Callable[[World], Any]] = {
    "int": lambda w: 3,
    # a directory of the test's own: /tmp's are other processes' to remove
    "bytes": lambda w: os.fsencode(w.not_a_checkpoint),
    "missing": lambda w: w.not_a_checkpoint / "nothing-here",
    "not-a-checkpoint": lambda w: w.not_a_checkpoint,
    "file": lambda w: w.checkpoint / "_CHECKPOINT_METADATA",
    "non-utf8": lambda w: w.not_a_checkpoint.as_posix() + "/\udcff",
}


def path_cases(name: str, make: Callable[[World, Any], Any]) -> None:
    for what, value in BAD_PATHS.items():
        case(name, "path", what, lambda w, v=value: make(w, v(w)))


# --- abstract_model ----------------------------------------------------------------
factory_cases("abstract_model", lambda w, f: abstract_model(f))
int_cases("abstract_model", "seed", lambda w, v: abstract_model(linear, seed=v))

# --- counting ----------------------------------------------------------------------
FILTERED: list[tuple[str, Callable[..., Any]]] = [
    ("count_params", count_params),
    ("count_state_leaves", count_state_leaves),
    ("param_sum", param_sum),
    ("param_fingerprint", param_fingerprint),
]
for _name, _fn in FILTERED:
    target_cases(_name, "target", lambda w, t, fn=_fn: fn(t))
    filter_cases(_name, _fn)
target_cases("count_active_params", "target", lambda w, t: count_active_params(t))


class _TooManyPicks(nnx.Module):
    """A router sending each token to 5 of its 4 experts."""

    def __init__(self) -> None:
        self.num_experts, self.top_k = 4, 5
        self.w = nnx.Param(np.ones((4, 3, 2), np.float32))


case(
    "count_active_params",
    "target",
    "top-k-over-experts",
    lambda w: count_active_params(_TooManyPicks()),
)
int_cases("ideal_share", "total", lambda w, v: ideal_share(v, 2))
int_cases("ideal_share", "num_shards", lambda w, v: ideal_share(10, v), positive=True)

# --- summarize ---------------------------------------------------------------------
target_cases("summarize", "target", lambda w, t: summarize(t))
int_cases("summarize", "depth", lambda w, v: summarize(w.model, depth=v), positive=True)
CASES.remove(next(c for c in CASES if c.id == "summarize-depth-none"))  # the default
for _what, _value in {
    "str": "l1",
    "int-item": ("kernel", 3),
    "none-item": [None],
    "empty-item": ["/"],
    "set": {"kernel"},
    "int": 3,
}.items():
    case(
        "summarize",
        "stacked",
        _what,
        lambda w, v=_value: summarize(w.model, stacked=v),
    )

# --- compare_states / check_reproducible_init / fresh_init_forward -----------------
target_cases("compare_states", "a", lambda w, t: compare_states(t, w.model))
target_cases("compare_states", "b", lambda w, t: compare_states(w.model, t))
case(
    "compare_states",
    "b",
    "str-leaf",
    lambda w: compare_states(w.model, {"kernel": "x", "bias": "y"}),
)
tolerance_cases(
    "compare_states", lambda w, a, v: compare_states(w.model, w.model, **{a: v})
)
factory_cases("check_reproducible_init", lambda w, f: check_reproducible_init(f, 0))
int_cases(
    "check_reproducible_init", "seed", lambda w, v: check_reproducible_init(linear, v)
)
factory_cases("fresh_init_forward", lambda w, f: fresh_init_forward(f, 0, X))
int_cases("fresh_init_forward", "seed", lambda w, v: fresh_init_forward(linear, v, X))
for _what, _value in {
    "nan": NAN_X,
    "inf": INF_X,
    "str": "x",
    "wrong-shape": jnp.ones((2, 5)),
    "none": None,
}.items():
    case(
        "fresh_init_forward",
        "x",
        _what,
        lambda w, v=_value: fresh_init_forward(linear, 0, v),
    )
for _what, _value in {"str": "yes", "int": 1, "none": None}.items():
    case(
        "fresh_init_forward",
        "compiled",
        _what,
        lambda w, v=_value: fresh_init_forward(linear, 0, X, compiled=v),
    )

# --- checkpoints -------------------------------------------------------------------
path_cases("checkpoint_report", lambda w, p: checkpoint_report(p))
path_cases("check_checkpoint", lambda w, p: check_checkpoint(p, w.model))
target_cases(
    "check_checkpoint", "target", lambda w, t: check_checkpoint(w.checkpoint, t)
)
path_cases("verify_restore", lambda w, p: verify_restore(p, w.model))
target_cases("verify_restore", "target", lambda w, t: verify_restore(w.checkpoint, t))
tolerance_cases(
    "verify_restore", lambda w, a, v: verify_restore(w.checkpoint, w.model, **{a: v})
)

# --- mesh_config_report ------------------------------------------------------------
target_cases(
    "mesh_config_report", "target", lambda w, t: mesh_config_report(t, "model=2")
)
for _what, _value in {
    "int": 8,
    "none": None,
    "garbage-str": "model",
    "zero-axis": {"model": 0},
    "negative-axis": "model=-2",
    "non-integral-axis": {"model": 1.5},
    "nan-axis": {"model": math.nan},
    "bool-axis": {"model": True},
    "str-size": {"model": "two"},
    "int-axis-name": {3: 2},
    "huge-axis": {"model": 2**31},
    "huge-product": "data=65536,model=65536",
    "astronomic-axis": {"model": 10**40},
    "empty": {},
}.items():
    case(
        "mesh_config_report",
        "mesh",
        _what,
        lambda w, v=_value: mesh_config_report(w.model, v),
    )
for _what, _value in {
    "int": 3,
    "str": "kernel",
    "int-item": [3],
    "bad-regex": [("kernel[", (None, "model"))],
    "unknown-axis-type": [("kernel", 3)],
    "not-a-pair": [("kernel",)],
}.items():
    case(
        "mesh_config_report",
        "rules",
        _what,
        lambda w, v=_value: mesh_config_report(w.model, "model=2", rules=v),
    )
for _what, _value in {
    "int": 3,
    "str": "embed",
    "int-item": [3],
    "not-a-pair": [("embed",)],
    "int-axis": [("embed", 3)],
}.items():
    case(
        "mesh_config_report",
        "logical_rules",
        _what,
        lambda w, v=_value: mesh_config_report(w.model, "model=2", logical_rules=v),
    )
for _what, _value in {"unknown-name": "adamz", "int": 3, "bool": True}.items():
    case(
        "mesh_config_report",
        "optimizer",
        _what,
        lambda w, v=_value: mesh_config_report(w.model, "model=2", optimizer=v),
    )

# --- step_memory_report ------------------------------------------------------------
target_cases(
    "step_memory_report",
    "target",
    lambda w, t: step_memory_report(t, "data=2", STEP_BATCH),
)
for _what, _value in {
    "int": 8,
    "zero-axis": {"data": 0},
    "huge-axis": {"data": 2**31},
    "negative-axis": {"data": -2},
    "garbage-string": "data=x",
}.items():
    case(
        "step_memory_report",
        "mesh",
        _what,
        lambda w, v=_value: step_memory_report(w.model, v, STEP_BATCH),
    )
for _what, _value in {
    "int-leaf": (3,),
    "string": "float32[2,3]",
    "wrong-width": (jax.ShapeDtypeStruct((2, 5), jnp.float32),),
    "wrong-rank": (jax.ShapeDtypeStruct((2, 3, 4, 5), jnp.float32),),
    "nan": (NAN_X,),
    "negative-dim": jax.ShapeDtypeStruct((-2, 3), jnp.float32),
    "float-dim": jax.ShapeDtypeStruct((2.5, 3), jnp.float32),
    "zero-size": jax.ShapeDtypeStruct((0, 3), jnp.float32),
    "exabytes": jax.ShapeDtypeStruct((10**12, 10**12), jnp.float32),
    "xla-overflow": jax.ShapeDtypeStruct((2**60, 3), jnp.float32),
    "object-dtype": jax.ShapeDtypeStruct((2, 3), np.dtype("O")),
    "prng-keys": jax.random.split(jax.random.key(0), 2),
    "deleted": DELETED_X,
    "bfloat16-nan": NAN_X.astype(jnp.bfloat16),
    "none-leaf": (STEP_BATCH, None),
}.items():
    case(
        "step_memory_report",
        "batch",
        _what,
        lambda w, v=_value: step_memory_report(w.model, "data=2", v),
    )
STEP_BAD: dict[str, dict[str, Any]] = {
    "loss": {
        "unknown-name": "bogus",
        "int": 3,
        "not-importable": "nope_module:f",
        "returns-vector": lambda model, batch: model(*batch),
        "raises": lambda model, batch: 1 / 0,
    },
    "optimizer": {
        "unknown-name": "adamx",
        "int": 3,
        "update-needs-unknown-args": optax.GradientTransformationExtraArgs(
            lambda params: optax.EmptyState(),
            lambda updates, state, params=None, *, temperature: (updates, state),
        ),
        "init-raises": optax.GradientTransformation(
            lambda params: 1 / 0, optax.identity().update
        ),
    },
    "batch_spec": {
        "unknown-axis": P("nope"),
        "int": 3,
        "duplicate-axis": P("data", "data"),
        "int-entry": P(1),
        "unconstrained": P(P.UNCONSTRAINED),
        "too-many-entries": P(None, None, "data"),
        "wrong-count": (P(), P()),
        "string-item": ("data",),
    },
    "topology": {"unknown-family": "v9-4", "chip-count": "v5e-3", "int": 4},
    "rules": {"int": 3, "bad-regex": [("(", P())], "spec-int": [("kernel", 3)]},
    "logical_rules": {"int": 3, "int-item": [3]},
    "remat": {
        "int": 3,
        "unknown-class": "Block",
        "unknown-policy": {"Linear": "nope"},
        "empty": {},
        "int-policy": {"Linear": 3},
    },
    "microbatches": {
        **{k: v for k, v in BAD_POSITIVE.items() if v is not None},
        "no-split": 2,  # 1 row per microbatch over data=2
        "not-dividing": 3,
    },
    "tokens_per_step": {
        **{k: v for k, v in BAD_POSITIVE.items() if v is not None},
        "str": "many",
    },
    "lora": {
        **{k: v for k, v in BAD_POSITIVE.items() if v is not None},
        "unknown": "adapters",
        "wider-than-a-layer": 4,  # two_layer's first Linear is 3 x 4
        "model-without-adapters": "model",
    },
}
for _arg, _bad in STEP_BAD.items():
    for _what, _value in _bad.items():
        case(
            "step_memory_report",
            _arg,
            _what,
            lambda w, a=_arg, v=_value: step_memory_report(
                w.model, "data=2", STEP_BATCH, **{a: v}
            ),
        )
for _what, _value in {
    "negative": -1,
    "non-integral": 1.5,
    "nan": math.nan,
    "bool": True,
    "not-a-size": "lots",
    "none": None,
}.items():
    case(
        "StepMemoryReport.fits",
        "max_device_bytes",
        _what,
        lambda w, v=_value: w.step_report.fits(v),
    )


for _what, _value in {
    "negative": -1,
    "non-integral": 1.5,
    "nan": math.nan,
    "bool": True,
    "not-a-size": "lots",
    "none": None,
}.items():
    case(
        "StepBudget.needed_fraction",
        "peak_bytes",
        _what,
        lambda w, v=_value: w.step_report.budget.needed_fraction(v),
    )


# --- max_batch ---------------------------------------------------------------------
def _search(w: World, **kwargs: Any) -> Any:
    return max_batch(
        w.model, "data=2", STEP_BATCH, **{"max_device_bytes": 10**6, **kwargs}
    )


target_cases(
    "max_batch",
    "target",
    lambda w, t: max_batch(t, "data=2", STEP_BATCH, max_device_bytes=10**6),
)
for _what, _value in {"int": 8, "zero-axis": {"data": 0}}.items():
    case(
        "max_batch",
        "mesh",
        _what,
        lambda w, v=_value: max_batch(w.model, v, STEP_BATCH, max_device_bytes=10**6),
    )
for _what, _value in {
    "int-leaf": (3,),
    "string": "float32[2,3]",
    "scalar": jax.ShapeDtypeStruct((), jnp.float32),
    "leading-sizes-differ": (STEP_BATCH, jax.ShapeDtypeStruct((4,), jnp.int32)),
    "nan": (NAN_X,),
}.items():
    case(
        "max_batch",
        "batch",
        _what,
        lambda w, v=_value: max_batch(w.model, "data=2", v, max_device_bytes=10**6),
    )
for _what, _value in {
    "none-without-topology": None,
    "negative": -1,
    "not-a-size": "lots",
    "bool": True,
    "nan": math.nan,
    "non-integral": 1.5,
}.items():
    case(
        "max_batch",
        "max_device_bytes",
        _what,
        lambda w, v=_value: _search(w, max_device_bytes=v),
    )
for _arg in ("lo", "hi"):
    for _what, _value in {
        "zero": 0,
        "negative": -2,
        "non-integral": 1.5,
        "bool": True,
        "nan": math.nan,
        "str": "2",
        "not-a-multiple-of-dp": 3,
    }.items():
        case("max_batch", _arg, _what, lambda w, a=_arg, v=_value: _search(w, **{a: v}))
case("max_batch", "hi", "below-lo", lambda w: _search(w, lo=4, hi=2))
case("max_batch", "progress", "int", lambda w: _search(w, progress=3))
SEARCH_BAD: dict[str, dict[str, Any]] = {
    "loss": {"unknown-name": "bogus", "int": 3},
    "optimizer": {"unknown-name": "adamx", "int": 3},
    "batch_spec": {"unknown-axis": P("nope"), "int": 3},
    "topology": {"unknown-family": "v9-4", "chip-count": "v5e-3", "int": 4},
    "rules": {"int": 3},
    "logical_rules": {"int": 3},
}
for _arg, _bad in SEARCH_BAD.items():
    for _what, _value in _bad.items():
        case("max_batch", _arg, _what, lambda w, a=_arg, v=_value: _search(w, **{a: v}))

# --- report methods ----------------------------------------------------------------
int_cases("MeshConfigReport.top_waste", "n", lambda w, v: w.mesh_report.top_waste(v))
int_cases(
    "MeshConfigReport.fits",
    "max_device_bytes",
    lambda w, v: w.mesh_report.fits(v),
)
for _what, _value in {"negative": -1, "str": "1GiB", "non-integral": 1.5}.items():
    case(
        "MeshConfigReport.to_html",
        "max_device_bytes",
        _what,
        lambda w, v=_value: w.mesh_report.to_html(max_device_bytes=v),
    )
case("StateDiff.at", "path", "int", lambda w: w.diff.at(3))
case("StateDiff.at", "path", "tuple", lambda w: w.diff.at(("kernel",)))
case(
    "ParamFingerprint.changed_paths",
    "other",
    "int",
    lambda w: w.fingerprint.changed_paths(3),
)
case(
    "ParamFingerprint.changed_paths",
    "other",
    "diff",
    lambda w: w.fingerprint.changed_paths(w.diff),
)


# --- breakdowns and mesh comparisons -----------------------------------------------
def _breakdown() -> Any:
    from nnx_introspect import Breakdown, BreakdownRow

    row = BreakdownRow(
        "parameter",
        "w",
        64,
        (4, 4),
        "f32",
        "w.1",
        "parameter",
        None,
        "w",
        None,
        0,
        None,
    )
    return Breakdown("cpu", "jit_f", 1, "dot", 64, 64, (row,))


for _what, _value in {**BAD_POSITIVE, "str": "3"}.items():
    case("Breakdown.top", "n", _what, lambda w, v=_value: _breakdown().top(v))
    if _value is not None:  # table(None): the breakdown's own top_n
        case("Breakdown.table", "top", _what, lambda w, v=_value: _breakdown().table(v))
    case(
        "BatchSearch.with_top",
        "n",
        _what,
        lambda w, v=_value: max_batch(
            w.model, "data=2", STEP_BATCH, max_device_bytes=10**6, hi=4
        ).with_top(v),
    )
for _what, _value in {"int": 3, "empty": "", "path": "a/b"}.items():
    case(
        "Breakdown.by_layer",
        "container",
        _what,
        lambda w, v=_value: _breakdown().by_layer(v),
    )


def _compare(w: World, **kwargs: Any) -> Any:
    from nnx_introspect import compare_meshes

    options: dict[str, Any] = {"executor": _ONE_THREAD}
    options.update(kwargs)
    meshes = options.pop("meshes", ["data=2", "data=1,model=2"])
    return compare_meshes("tests.test_bad_input:_linear", meshes, STEP_BATCH, **options)


def _linear(rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(3, 2, rngs=rngs)


_ONE_THREAD = concurrent.futures.ThreadPoolExecutor(1)
target_cases(
    "compare_meshes",
    "target",
    lambda w, t: nnx_introspect.compare_meshes(
        t, ["data=2", "data=1,model=2"], STEP_BATCH, executor=_ONE_THREAD
    ),
)
COMPARE_BAD: dict[str, dict[str, Any]] = {
    "meshes": {
        "empty": [],
        "int": 3,
        "duplicate": ["data=2", "data=2"],
        "sizes-differ": ["data=2", "data=4"],
        "bad-axis": ["data=0"],
    },
    "batch": {"int": 3, "no-shape": [1, 2]},
    "executor": {"str": "pool", "int": 2},
    "max_workers": {
        **{k: v for k, v in BAD_POSITIVE.items() if v is not None},  # None: default
        "with-executor": 2,
    },
    "timeout": {"negative": -1.0, "nan": math.nan, "str": "1", "bool": True},
    "loss": {"int": 3, "unknown": "nope"},
    "optimizer": {"int": 3, "unknown": "nope"},
    "topology": {"unknown-family": "v9-4", "int": 4},
    "max_device_bytes": {"negative": -1, "not-a-size": "lots", "bool": True},
    "network_bytes_per_second": {"no-topology": "50GB", "int-list": [1]},
}


def _compare_case(arg: str, what: str, value: Any) -> Callable[[World], Any]:
    """The call that passes ``value`` as ``arg`` to ``compare_meshes``."""
    if arg == "batch":
        return lambda w: nnx_introspect.compare_meshes(
            "tests.test_bad_input:_linear", ["data=2"], value, executor=_ONE_THREAD
        )
    if arg == "max_workers" and what == "with-executor":
        return lambda w: _compare(w, max_workers=2)
    if arg == "max_workers":  # the default pool, sized by max_workers
        return lambda w: _compare(w, executor=None, max_workers=value)
    return lambda w: _compare(w, **{arg: value})


for _arg, _bad in COMPARE_BAD.items():
    for _what, _value in _bad.items():
        case("compare_meshes", _arg, _what, _compare_case(_arg, _what, _value))


def _fit(w: World, **kwargs: Any) -> Any:
    options: dict[str, Any] = {"executor": _ONE_THREAD, "max_device_bytes": 10**6}
    options.update(kwargs)
    meshes = options.pop("meshes", "data=2")
    return nnx_introspect.fit_step(
        "tests.test_bad_input:_linear", meshes, STEP_BATCH, **options
    )


target_cases(
    "fit_step",
    "target",
    lambda w, t: nnx_introspect.fit_step(
        t, "data=2", STEP_BATCH, executor=_ONE_THREAD, max_device_bytes=10**6
    ),
)
FIT_BAD: dict[str, dict[str, Any]] = {
    "meshes": {"int": 3, "bad-axis": "data=0", "empty": []},
    "executor": {"str": "pool", "int": 2},
    "loss": {"int": 3, "unknown": "nope", "none": None},
    "optimizer": {"int": 3, "unknown": "nope"},
    "topology": {"unknown-family": "v9-4", "int": 4},
    "max_device_bytes": {"negative": -1, "not-a-size": "lots", "none": None},
    "remat": {"int": 3, "unknown-class": "Block"},
    "progress": {"int": 3},
}
for _arg, _bad in FIT_BAD.items():
    for _what, _value in _bad.items():
        case("fit_step", _arg, _what, lambda w, a=_arg, v=_value: _fit(w, **{a: v}))
case(
    "fit_step",
    "batch",
    "int",
    lambda w: nnx_introspect.fit_step(
        "tests.test_bad_input:_linear", "data=2", 3, executor=_ONE_THREAD
    ),
)
for _what, _value in {k: v for k, v in BAD_POSITIVE.items() if v is not None}.items():
    case(
        "fit_step",
        "max_workers",
        _what,
        lambda w, v=_value: _fit(w, executor=None, max_workers=v),
    )


# --- serving: serve_memory_report, max_sequences, max_context ------------------------
SERVE_MODEL = llama(
    LlamaConfig(vocab=64, d_model=32, n_layers=2, n_heads=4, d_ff=48, n_kv_heads=2)
)


def wrong_cache(model: Any, sequences: int, context: int, dtype: Any) -> Any:
    """A cache maker returning the wrong layout: context first."""
    return {"k": jnp.zeros((context, sequences, 2, 8), dtype)}


def _serve(w: World, **kwargs: Any) -> Any:
    options: dict[str, Any] = {"sequences": 2, "context": 8, "prompt": 4}
    options.update(kwargs)
    mesh = options.pop("mesh", "tp=2")
    return nnx_introspect.serve_memory_report(SERVE_MODEL, mesh, **options)


SERVE_BAD: dict[str, dict[str, Any]] = {
    "sequences": {
        "zero": 0,
        "negative": -2,
        "nan": math.nan,
        "str": "many",
        "float": 2.0,
    },
    "context": {"zero": 0, "nan": math.nan, "shorter-than-prompt": 3},
    "prompt": {"negative": -1, "longer-than-context": 9},
    "prefill_sequences": {"zero": 0, "more-than-sequences": 3},
    "kv_cache": {"unknown": "int4", "int": 3},
    "weights": {"unknown": "float16x"},
    "mesh": {"tp-not-dividing-kv-heads": "tp=4", "bad-axis": "tp=0"},
    "topology": {"unknown-family": "v9-4"},
    "max_device_bytes": {"negative": -1, "not-a-size": "lots"},
    "init_cache": {"not-importable": "no_such_pkg_xyz:f", "wrong-layout": wrong_cache},
    "decode": {"int": 3},
    "breakdown": {"str": "yes", "int": 1},
}
for _arg, _bad in SERVE_BAD.items():
    for _what, _value in _bad.items():
        case(
            "serve_memory_report",
            "prompt" if _what == "shorter-than-prompt" else _arg,
            _what,
            lambda w, a=_arg, v=_value: _serve(w, **{a: v}),
        )
target_cases(
    "serve_memory_report",
    "target",
    lambda w, t: nnx_introspect.serve_memory_report(t, "tp=2", sequences=2, context=8),
)
case(
    "serve_memory_report",
    "init_cache",
    "model-without-a-cache",
    lambda w: nnx_introspect.serve_memory_report(
        linear, "tp=2", sequences=2, context=8
    ),
)
for _what, _value in {"zero": 0, "nan": math.nan, "negative": -1}.items():
    case(
        "max_sequences",
        "context",
        _what,
        lambda w, v=_value: nnx_introspect.max_sequences(
            SERVE_MODEL, "tp=2", context=v, max_device_bytes=10**6
        ),
    )
    case(
        "max_context",
        "sequences",
        _what,
        lambda w, v=_value: nnx_introspect.max_context(
            SERVE_MODEL, "tp=2", sequences=v, max_device_bytes=10**6
        ),
    )
case(
    "max_sequences",
    "max_device_bytes",
    "none",
    lambda w: nnx_introspect.max_sequences(SERVE_MODEL, "tp=2", context=8),
)
case(
    "max_context",
    "kv_cache",
    "unknown",
    lambda w: nnx_introspect.max_context(
        SERVE_MODEL, "tp=2", sequences=2, kv_cache="int4", max_device_bytes=10**6
    ),
)


# --- RL: rl_memory_report -----------------------------------------------------------
def _rl(w: World, **kwargs: Any) -> Any:
    options: dict[str, Any] = {
        "batch": 1,
        "generations": 2,
        "prompt": 4,
        "completion": 4,
        "mesh": "data=2",
    }
    options.update(kwargs)
    mesh = options.pop("mesh")
    return nnx_introspect.rl_memory_report(SERVE_MODEL, mesh, **options)


RL_BAD: dict[str, dict[str, Any]] = {
    "batch": {"zero": 0, "nan": math.nan, "str": "many", "float": 2.0},
    "generations": {"zero": 0, "non-integral": 1.5},
    "prompt": {"negative": -1},
    "completion": {"zero": 0},
    "reference": {"str": "yes"},
    "cache": {"int": 1},
    "rollout_weights": {"unknown": "float16x"},
    "kv_cache": {"unknown": "int4"},
    "mesh": {"bad-axis": "data=0"},
    "topology": {"unknown-family": "v9-4"},
    "max_device_bytes": {"negative": -1, "not-a-size": "lots"},
    "lora": {"zero": 0, "wider-than-a-layer": 10**6, "unknown": "full"},
    "offload": {"str": "yes", "int": 1},
    "breakdown": {"str": "yes"},
    "critic": {"int": 3, "unbuildable": "no_such_module:critic"},
    "role_meshes": {
        "unknown-role": {"reward": "data=2"},
        "critic-without-one": {"critic": "data=2"},
        "more-than-the-devices": {"rollout": "data=8"},
        "not-a-mapping": "rollout",
    },
}
for _arg, _bad in RL_BAD.items():
    for _what, _value in _bad.items():
        case(
            "rl_memory_report",
            _arg,
            _what,
            lambda w, a=_arg, v=_value: _rl(w, **{a: v}),
        )


case(
    "measure_rl",
    "spec",
    "dict",
    lambda w: nnx_introspect.measure_rl({"batch": 1}),  # type: ignore[arg-type]
)
case("measure_rl", "spec", "none", lambda w: nnx_introspect.measure_rl(None))  # type: ignore[arg-type]
for _what, _value in {"str": "ep", "int": 3, "int-item": ("fsdp", 2)}.items():
    case(
        "expert_mesh_axis",
        "axis_names",
        _what,
        lambda w, v=_value: nnx_introspect.expert_mesh_axis(v),
    )


@functools.cache
def _rl_report() -> Any:
    return _rl(None)  # type: ignore[arg-type]


def _rl_search(**kwargs: Any) -> Any:
    options: dict[str, Any] = {
        "generations": 2,
        "prompt": 4,
        "completion": 4,
        "max_device_bytes": 10**6,
    }
    options.update(kwargs)
    return nnx_introspect.rl_max_batch(SERVE_MODEL, "data=2", **options)


RL_SEARCH_BAD: dict[str, dict[str, Any]] = {
    "generations": {"zero": 0, "str": "two"},
    "max_device_bytes": {"none-without-a-topology": None},
    "batch": {"given": 2},
}
for _arg, _bad in RL_SEARCH_BAD.items():
    for _what, _value in _bad.items():
        case(
            "rl_max_batch",
            _arg,
            _what,
            lambda w, a=_arg, v=_value: _rl_search(**{a: v}),
        )


def _rl_layouts(**kwargs: Any) -> Any:
    options: dict[str, Any] = {
        "batch": 1,
        "generations": 2,
        "prompt": 4,
        "completion": 4,
        "layouts": [("data=2", None)],
    }
    options.update(kwargs)
    layouts = options.pop("layouts")
    return nnx_introspect.compare_rl_layouts(SERVE_MODEL, layouts, **options)


RL_LAYOUTS_BAD: dict[str, dict[str, Any]] = {
    "layouts": {"str": "some", "empty": [], "not-a-pair": [("data=2",)]},
    "batch": {"zero": 0},
    "executor": {"int": 3},
}
for _arg, _bad in RL_LAYOUTS_BAD.items():
    for _what, _value in _bad.items():
        case(
            "compare_rl_layouts",
            _arg,
            _what,
            lambda w, a=_arg, v=_value: _rl_layouts(**{a: v}),
        )


def _rl_batch_search() -> Any:
    from nnx_introspect._accelerators.budget import Budget

    return nnx_introspect.RLBatchSearch(
        "m",
        (("data", 2),),
        None,
        2,
        4,
        4,
        1,
        1,
        ((1, 90, "train", True), (2, 120, "train", False)),
        Budget(100, "the budget given"),
    )


def _compare_serving(w: World, **kwargs: Any) -> Any:
    options: dict[str, Any] = {"sequences": 2, "context": 8, "topology": "h100-2"}
    options.update(kwargs)
    meshes = options.pop("meshes", ["tp=2", "data=2"])
    return nnx_introspect.compare_serving_meshes(SERVE_MODEL, meshes, **options)


SERVE_MESH_BAD: dict[str, dict[str, Any]] = {
    "meshes": {"str": "tp=2", "one": ["tp=2"], "sizes": ["tp=2", "data=4"]},
    "topology": {"none": None, "unknown-family": "v9-4"},
    "executor": {"str": "pool", "int": 2},
    "sequences": {"zero": 0, "nan": math.nan},
    "kv_cache": {"unknown": "int4"},
}
for _arg, _bad in SERVE_MESH_BAD.items():
    for _what, _value in _bad.items():
        case(
            "compare_serving_meshes",
            _arg,
            _what,
            lambda w, a=_arg, v=_value: _compare_serving(w, **{a: v}),
        )


@functools.cache
def _serve_report() -> Any:
    return _serve(None)  # type: ignore[arg-type]


@functools.cache
def _serve_search() -> Any:
    from nnx_introspect._accelerators.budget import Budget

    return nnx_introspect.ServeSearch(
        "context", 8, 1, ((2, 8, 9, True),), Budget(9, None)
    )


REPORTS: dict[str, Callable[[World], Any]] = {
    "CheckpointReport": lambda w: w.checkpoint_summary,
    "MeshConfigReport": lambda w: w.mesh_report,
    "ModelSummary": lambda w: w.summary,
    "ParamFingerprint": lambda w: w.fingerprint,
    "StateDiff": lambda w: w.diff,
    "StepMemoryReport": lambda w: w.step_report,
    "BatchSearch": lambda w: max_batch(
        w.model, "data=2", STEP_BATCH, max_device_bytes=10**6, hi=4
    ),
    "Breakdown": lambda w: _breakdown(),
    "MeshComparison": lambda w: _compare(w),
    "FitSearch": lambda w: _fit(w),
    "ServeMemoryReport": lambda w: _serve_report(),
    "RLMemoryReport": lambda w: _rl_report(),
    "RLBatchSearch": lambda w: _rl_batch_search(),
    "RLLayoutComparison": lambda w: nnx_introspect.RLLayoutComparison(
        (_rl_report(),), (), "in order"
    ),
    "ServeSearch": lambda w: _serve_search(),
    "ServeMeshComparison": lambda w: nnx_introspect.ServeMeshComparison(
        (_serve_report(),), (), "this process"
    ),
}
for _cls, _get in REPORTS.items():
    for _what, _value in {"str": "  ", "non-integral": 1.5, "negative": -1}.items():
        case(
            f"{_cls}.to_json",
            "indent",
            _what,
            lambda w, g=_get, v=_value: g(w).to_json(indent=v),
        )

# The searches' shared readings (`SizeSearch`): a point not tried, a name not given.
SEARCHES = {
    "BatchSearch": REPORTS["BatchSearch"],
    "RLBatchSearch": REPORTS["RLBatchSearch"],
    "ServeSearch": REPORTS["ServeSearch"],
}
BAD_POINTS: dict[str, Any] = {
    "str": "8",
    "int": 8,
    "none": None,
    "plain-tuple": (1, 90, True),
    "not-tried": nnx_introspect.SearchPoint(10**9, 0, True),
}
for _cls, _get in SEARCHES.items():
    for _what, _value in BAD_POINTS.items():
        case(f"{_cls}.role", "point", _what, lambda w, g=_get, v=_value: g(w).role(v))
    for _arg in ("noun", "plural"):
        for _what, _value in {"int": 3, "none": None, "empty": " "}.items():
            case(
                f"{_cls}.above_note",
                _arg,
                _what,
                lambda w, g=_get, a=_arg, v=_value: g(w).above_note(
                    **{"noun": "batch", "plural": "batches", a: v}
                ),
            )
for _what, _value in {"int": 3, "none": None, "empty": " "}.items():
    case(
        "Jump.words",
        "noun",
        _what,
        lambda w, v=_value: nnx_introspect.Jump(
            nnx_introspect.SearchPoint(16, 9, False),
            nnx_introspect.SearchPoint(24, 8, True),
        ).words(v),
    )

# --- the exercise entrypoints ------------------------------------------------------
ENTRYPOINTS: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {
    "mesh_init_simulate": (
        exercises.mesh_init_simulate,
        {"seed": 0, "x": X, "features": 4, "mesh_axes": 2},
    ),
    "orbax_save_count": (
        exercises.orbax_save_count,
        {"seed": 0, "x": X, "features": 4, "num_shards": 2},
    ),
    "graphdef_vs_state": (
        exercises.graphdef_vs_state,
        {"seed": 0, "x": jnp.ones(3), "features": 0, "hidden": 4},
    ),
    "orbax_load_simulate": (
        exercises.orbax_load_simulate,
        {"seed": 0, "x": X, "features": 4},
    ),
}
BAD_X: dict[str, Any] = {
    "nan": NAN_X,
    "inf": INF_X,
    "int-dtype": jnp.ones((2, 3), jnp.int32),
    "str": "x",
    "scalar": jnp.float32(1.0),
    "none": None,
}
for _name, (_fn, _good) in ENTRYPOINTS.items():
    for _arg in _good:
        if _arg == "features" and _name == "graphdef_vs_state":
            continue  # documented as accepted and ignored
        _bad = BAD_X if _arg == "x" else (BAD_INTS if _arg == "seed" else BAD_POSITIVE)
        if _arg == "x" and _name == "mesh_init_simulate":
            # only x's last dimension is read: its values cannot be bad
            _bad = {k: v for k, v in BAD_X.items() if k not in ("nan", "inf")}
        for _what, _value in _bad.items():
            case(
                f"exercises.{_name}",
                _arg,
                _what,
                lambda w, fn=_fn, good=_good, a=_arg, v=_value: fn(**{**good, a: v}),
            )


def names(arg: str) -> str:
    """A pattern for a message naming ``arg`` in backticks (maybe indexed): a type
    error too, never jaxtyping's or beartype's dump naming ``parameter 'arg'``."""
    return rf"`{arg}(\[[^\]]+\])*`"


@pytest.mark.parametrize("bad", CASES, ids=[c.id for c in CASES])
def test_bad_argument_raises_an_error_naming_it(bad: Case, world: World) -> None:
    with pytest.raises((TypeError, ValueError), match=names(bad.arg)) as raised:
        bad.call(world)
    assert "\n" not in str(raised.value).strip(), str(raised.value)[:400]


def test_case_ids_are_unique() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))


# Public classes none of whose public methods take an argument (beyond ``self``):
# nothing for the sweep to pass badly. `test_classes_without_arguments` keeps this
# list honest.
NO_ARGUMENT_METHODS = {
    "CheckpointLeaf",
    "DiffEntry",
    "KindTotal",
    "LeafFingerprint",
    "LeafShard",
    "MeshProblem",
    "RLPhase",
    "SummaryRow",
    "Table",
    "VarRecord",
}


def _methods_with_arguments(cls: type) -> set[str]:
    out = set()
    for attr, value in inspect.getmembers(cls):
        if attr.startswith("_") or not inspect.isfunction(value):
            continue
        params = list(inspect.signature(value).parameters.values())[1:]
        if params:
            out.add(attr)
    return out


def test_classes_without_arguments_really_have_none() -> None:
    for name in NO_ARGUMENT_METHODS:
        cls = getattr(nnx_introspect, name)
        assert _methods_with_arguments(cls) == set(), name


def test_every_public_name_and_method_is_swept() -> None:
    covered = {c.name for c in CASES}
    expected = {f"exercises.{n}" for n in exercises.__all__}
    for name in nnx_introspect.__all__:
        obj = getattr(nnx_introspect, name)
        if not isinstance(obj, type):
            expected.add(name)
        elif name not in NO_ARGUMENT_METHODS:
            expected.update(f"{name}.{m}" for m in _methods_with_arguments(obj))
    assert covered == expected

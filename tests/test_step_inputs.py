"""step_memory_report's inputs: batch leaves and specs checked, losses with aux,
integer parameters, optimizers with extra arguments, Explicit meshes, activation
sharding constraints, and models whose call takes None or a mask.

Reference numbers come from hand-written ``jax.jit(...).lower(...).compile()``
or from arithmetic on the shapes, never from the code under test.
"""

import re
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from jax.interpreters import pxla
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import nnx_introspect.examples as ex
from nnx_introspect import _step
from nnx_introspect._step import step_memory_report
from nnx_introspect._step.compile import compile_request
from nnx_introspect._xla.readings import XlaReadings


def lin(rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(4, 6, rngs=rngs)


LIN_BYTES = (4 * 6 + 6) * 4
X = jax.ShapeDtypeStruct((8, 4), jnp.float32)


def _deleted() -> jax.Array:
    x = jnp.ones((8, 4))
    x.delete()
    return x


# --- batch leaves ---------------------------------------------------------------------

BAD_LEAVES: list[tuple[str, Any, type[Exception], str]] = [
    (
        "negative-dim",
        jax.ShapeDtypeStruct((-2, 4), jnp.float32),
        ValueError,
        r"`batch\[0\]` dimension 0 must be a nonnegative integer, got -2",
    ),
    (
        "float-dim",
        jax.ShapeDtypeStruct((2.5, 4), jnp.float32),
        TypeError,
        r"`batch\[0\]` dimension 0 must be an integer, got 2.5",
    ),
    (
        "zero-size",
        jax.ShapeDtypeStruct((0, 128), jnp.int32),
        ValueError,
        r"`batch\[0\]` has shape \(0, 128\): a batch with no elements",
    ),
    (
        "exabytes",
        jax.ShapeDtypeStruct((10**12, 10**12), jnp.int32),
        ValueError,
        r"`batch\[0\]` has shape \(1000000000000, 1000000000000\).*more than the "
        r"4,611,686,018,427,387,904 \(2\*\*62\)",
    ),
    (
        "object-dtype",
        jax.ShapeDtypeStruct((8, 4), np.dtype("O")),
        TypeError,
        r"`batch\[0\]` has dtype dtype\('O'\), not a numeric dtype",
    ),
    (
        "string-array",
        np.array([["a"] * 4] * 8),
        TypeError,
        r"`batch\[0\]` has dtype dtype\('<U1'\), not a numeric dtype",
    ),
    (
        "prng-keys",
        jax.random.split(jax.random.key(0), 8),
        TypeError,
        r"`batch\[0\]` is an array of PRNG keys \(key<fry>\).*key_data",
    ),
    (
        "bfloat16-nan",
        jnp.ones((8, 4), jnp.bfloat16).at[1, 2].set(jnp.nan),
        ValueError,
        r"`batch\[0\]` must be finite, got 1 NaN",
    ),
    (
        "float8-nan",
        jnp.ones((8, 4), jnp.float8_e4m3fn).at[0, 0].set(jnp.nan),
        ValueError,
        r"`batch\[0\]` must be finite, got 1 NaN",
    ),
]


@pytest.mark.parametrize(
    ("leaf", "error", "match"),
    [case[1:] for case in BAD_LEAVES],
    ids=[case[0] for case in BAD_LEAVES],
)
def test_bad_batch_leaves_are_refused_naming_the_leaf(
    leaf: Any, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        step_memory_report(lin, "data=2", leaf, loss=None)


def test_a_deleted_array_is_refused_naming_the_leaf() -> None:
    with pytest.raises(ValueError, match=r"`batch\[1\]` is a deleted jax.Array"):
        step_memory_report(lin, "data=2", (X, _deleted()), loss=None)


def test_a_batch_past_2_62_bytes_in_total_is_refused() -> None:
    # each leaf alone is under the limit; together they are over it
    half = jax.ShapeDtypeStruct((2**59,), jnp.float32)  # 2**61 bytes
    with pytest.raises(ValueError, match=r"`batch` \(float32\[\d+\], .*2\*\*62"):
        step_memory_report(lin, "data=2", (half, half, half), loss=None)


# --- batch_spec entries ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "error", "match"),
    [
        (P("data", "data"), ValueError, r"`batch_spec` leaf 0.*'data' is used twice"),
        (P(("data", "data")), ValueError, r"`batch_spec` leaf 0.*'data' is used tw"),
        (P(1), TypeError, r"`batch_spec` entry 0 must be None, a mesh axis name"),
        (P(None, ("data", 2)), TypeError, r"`batch_spec` entry 1 must be None"),
        (P(P.UNCONSTRAINED), TypeError, r"`batch_spec` entry 0 is P.UNCONSTRAINED"),
        ([P(1)], TypeError, r"`batch_spec\[0\]` entry 0 must be None"),
    ],
    ids=["duplicate", "duplicate-in-tuple", "int", "int-in-tuple", "unconstr", "list"],
)
def test_bad_batch_spec_entries_are_refused(
    spec: Any, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        step_memory_report(lin, "data=2", X, loss=None, batch_spec=spec)


# --- losses ---------------------------------------------------------------------------


def mlp(rngs: nnx.Rngs) -> nnx.Sequential:
    return nnx.Sequential(
        nnx.Linear(16, 64, rngs=rngs), nnx.relu, nnx.Linear(64, 16, rngs=rngs)
    )


MLP_BYTES = (16 * 64 + 64 + 64 * 16 + 16) * 4


def mean_with_aux(model: Any, batch: tuple[jax.Array, ...]) -> Any:
    """The ``has_aux=True`` idiom: ``(loss, aux)``."""
    y = model(*batch)
    return jnp.mean(y), {"y": y}


def test_a_loss_returning_loss_and_aux_equals_hand_written_has_aux() -> None:
    mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
    x = jax.ShapeDtypeStruct((32, 16), jnp.float32)
    report = step_memory_report(mlp, mesh, x, loss=mean_with_aux)

    model = nnx.eval_shape(lambda: mlp(nnx.Rngs(0)))
    graphdef, params = nnx.split(model)
    rep = NamedSharding(mesh, P())
    params = jax.tree.map(
        lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=rep), params
    )
    xs = jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, P("data")))

    def step(params: Any, x: jax.Array) -> Any:
        model = nnx.merge(graphdef, params)
        (loss, aux), grads = nnx.value_and_grad(
            lambda m: mean_with_aux(m, (x,)), has_aux=True
        )(model)
        return loss, aux, grads

    shardings = (rep, None, jax.tree.map(lambda s: s.sharding, params))
    with jax.set_mesh(mesh):
        compiled = jax.jit(step, out_shardings=shardings).lower(params, xs).compile()
    memory: Any = compiled.memory_analysis()
    assert report.step == "forward + backward"
    assert report.argument_bytes == memory.argument_size_in_bytes
    assert report.output_bytes == memory.output_size_in_bytes
    assert report.temp_bytes == memory.temp_size_in_bytes
    # the loss, the aux (the output's quarter on each device), the gradients and
    # XLA:CPU's tuple of the 6 output buffers' pointers (8 bytes each)
    assert report.output_bytes == 4 + 8 * 16 * 4 + MLP_BYTES + 6 * 8


class Pair(nnx.Module):
    """Returns ``(logits, cache)``, as tunix's models do."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.embed = nnx.Embed(64, 8, rngs=rngs)

    def __call__(self, tokens: jax.Array) -> tuple[jax.Array, dict[str, Any]]:
        return self.embed(tokens), {"k": tokens}


@pytest.mark.parametrize("loss", ["mean", "lm"])
def test_mean_and_lm_refuse_a_tuple_output_saying_what_came_back(loss: str) -> None:
    tokens = jax.ShapeDtypeStruct((2, 16), jnp.int32)
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"`loss` '{loss}' failed: `loss={loss!r}` needs the model to return one "
            "array, but it returned a tuple of 2 (float32[2,16,8], dict); pass a "
            "loss callable that picks the logits"
        ),
    ):
        step_memory_report(Pair, "data=2", tokens, loss=loss)


def test_mean_of_more_than_2_31_elements_compiles() -> None:
    # jnp.mean's float count, not an int32 element count that overflows
    big = jax.ShapeDtypeStruct((2**31 // 4 + 2, 4), jnp.float32)
    report = step_memory_report(lin, "data=2", big)
    # the loss, the gradients and XLA:CPU's 3 output pointers (8 bytes each)
    assert report.output_bytes == 4 + LIN_BYTES + 3 * 8


class Broken(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.linear = nnx.Linear(4, 6, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        raise KeyError("no such head")


def picks_first(model: Any, batch: tuple[jax.Array, ...]) -> jax.Array:
    return jnp.mean(model(batch[0]))


def test_model_errors_name_the_forward_and_keep_the_cause() -> None:
    with pytest.raises(ValueError) as info:
        step_memory_report(Broken, "data=2", X, loss=None)
    assert re.match(
        r"`batch` \(float32\[8,4\]\) cannot be passed to the model: its forward "
        r"raised KeyError: 'no such head'",
        str(info.value),
    )
    assert isinstance(info.value.__cause__, KeyError)
    # through a callable loss: the model's forward failed, not the loss
    with pytest.raises(ValueError) as info:
        step_memory_report(Broken, "data=2", X, loss=picks_first)
    assert re.match(
        r"`loss` 'picks_first' called the model, whose forward on `batch` "
        r"\(float32\[8,4\]\) raised KeyError: 'no such head'",
        str(info.value),
    )
    assert isinstance(info.value.__cause__, KeyError)
    tb = info.value.__cause__.__traceback__
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert frames[-1] == "__call__"  # the user's own frame is kept


def test_loss_errors_keep_the_cause() -> None:
    def divides(model: Any, batch: Any) -> Any:
        return 1 / 0

    with pytest.raises(ValueError, match=r"`loss` 'divides' failed: ZeroDiv") as info:
        step_memory_report(lin, "data=2", X, loss=divides)
    assert isinstance(info.value.__cause__, ZeroDivisionError)


# --- integer parameters ---------------------------------------------------------------


class Quantized(nnx.Module):
    """A float32 Linear beside an int8 weight, as a quantized model holds them."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.linear = nnx.Linear(4, 6, rngs=rngs)
        self.qweight = nnx.Param(jnp.ones((4, 6), jnp.int8))

    def __call__(self, x: jax.Array) -> jax.Array:
        y: jax.Array = self.linear(x) + x @ self.qweight[...].astype(jnp.float32)
        return y


def test_integer_params_are_carried_not_differentiated() -> None:
    int8_bytes = 4 * 6
    batch = 4 * 4 * 4  # 4 of the 8 rows on each device
    report = step_memory_report(Quantized, "data=2", X)
    assert report.step == "forward + backward"
    assert report.argument_bytes == LIN_BYTES + int8_bytes + batch
    # the loss, the gradients of the float parameters only (kernel and bias) and
    # XLA:CPU's tuple of the 3 output buffers' pointers (8 bytes each)
    assert report.output_bytes == 4 + LIN_BYTES + 3 * 8
    trained = step_memory_report(Quantized, "data=2", X, optimizer="adamw")
    # params (the int8 one too), AdamW's mu and nu of the float ones, 2 counters
    assert trained.argument_bytes == (3 * LIN_BYTES + int8_bytes + 4 + 4 + batch)
    assert trained.alias_bytes == trained.argument_bytes - batch


# --- optimizers with extra arguments ---------------------------------------------------


def _nbytes(tree: Any) -> int:
    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree))


def test_lbfgs_gets_value_grad_and_value_fn() -> None:
    tx = optax.lbfgs()
    params = {
        "bias": jax.ShapeDtypeStruct((6,), jnp.float32),
        "kernel": jax.ShapeDtypeStruct((4, 6), jnp.float32),
    }
    state_bytes = _nbytes(jax.eval_shape(tx.init, params))  # optax's own init
    report = step_memory_report(lin, "data=2", X, optimizer=tx)
    batch = 4 * 4 * 4
    assert report.argument_bytes == LIN_BYTES + state_bytes + 4 + batch
    assert report.step == "forward + backward + optimizer update"


def needs_a_temperature() -> optax.GradientTransformationExtraArgs:
    def update(
        updates: Any, state: Any, params: Any = None, *, temperature: Any
    ) -> Any:
        return updates, state

    return optax.GradientTransformationExtraArgs(
        lambda params: optax.EmptyState(), update
    )


def test_an_update_needing_unknown_arguments_is_refused_naming_optimizer() -> None:
    with pytest.raises(
        ValueError,
        match=r"`optimizer`'s update failed in the step: TypeError: .*temperature.*"
        r"with value, grad and value_fn passed too",
    ) as info:
        step_memory_report(lin, "data=2", X, optimizer=needs_a_temperature())
    assert isinstance(info.value.__cause__, TypeError)


def test_optimizer_init_errors_keep_the_cause(monkeypatch: pytest.MonkeyPatch) -> None:
    def init(params: Any) -> Any:
        raise RuntimeError("no moments today")

    tx = optax.GradientTransformation(init, optax.identity().update)
    with pytest.raises(ValueError, match=r"`optimizer`'s init failed") as info:
        step_memory_report(lin, "data=2", X, optimizer=tx)
    assert isinstance(info.value.__cause__, RuntimeError)


# --- Explicit meshes ------------------------------------------------------------------


def _llama_forward_compiled(mesh: Mesh, tokens: jax.ShapeDtypeStruct) -> Any:
    model = nnx.eval_shape(lambda: ex.llama_tiny(nnx.Rngs(0)))
    graphdef, state = nnx.split(model)
    rep = NamedSharding(mesh, P())
    state = jax.tree.map(
        lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=rep), state
    )
    toks = jax.ShapeDtypeStruct(
        tokens.shape, tokens.dtype, sharding=NamedSharding(mesh, P("data"))
    )

    def forward(state: Any, toks: jax.Array) -> Any:
        return nnx.merge(graphdef, state)(toks)

    with jax.set_mesh(mesh):
        return jax.jit(forward).lower(state, toks).compile()


class Spy:
    """Keeps the readings ``compile_request`` returns."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.numbers: list[XlaReadings] = []

        def spy(*args: Any, **kwargs: Any) -> XlaReadings:
            numbers = compile_request(*args, **kwargs)
            self.numbers.append(numbers)
            return numbers

        monkeypatch.setattr("nnx_introspect._step.child.compile_request", spy)


def test_an_explicit_mesh_compiles_with_auto_axes_when_the_model_needs_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """jax.make_mesh's default axes are Explicit; llama_tiny's gather does not
    trace under them (not in a hand-written jit either), so the step compiles
    on the same devices with Auto axes and says so."""
    tok = jax.ShapeDtypeStruct((2, 16), jnp.int32)
    mesh = jax.make_mesh((2,), ("data",))
    assert mesh.axis_types == (AxisType.Explicit,)
    with pytest.raises(Exception, match="out_sharding"):  # the user's own jit
        _llama_forward_compiled(mesh, tok)
    spy = Spy(monkeypatch)
    report = step_memory_report(ex.llama_tiny, mesh, tok, loss=None)
    auto = Mesh(mesh.devices, mesh.axis_names, axis_types=(AxisType.Auto,))
    memory: Any = _llama_forward_compiled(auto, tok).memory_analysis()
    assert report.argument_bytes == memory.argument_size_in_bytes
    assert report.output_bytes == memory.output_size_in_bytes
    assert report.temp_bytes == memory.temp_size_in_bytes
    (numbers,) = spy.numbers
    assert numbers.explicit_axes_fallback is not None
    assert numbers.explicit_axes_fallback.startswith(
        "the step does not trace under the mesh's Explicit axes"
    )
    assert numbers.warnings[-1].startswith(
        "`mesh`: the step does not trace under the mesh's Explicit axes"
    )
    assert numbers.sharding_constraints == 0  # llama_tiny annotates none


class Resharded(nnx.Module):
    """A model written for Explicit axes: ``reshard`` refuses Auto ones."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.linear = nnx.Linear(4, 8, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        y: jax.Array = jax.sharding.reshard(self.linear(x), P(None, "data"))
        return y


def test_an_explicit_mesh_is_used_as_is_when_the_model_traces_under_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mesh = jax.make_mesh((2,), ("data",))
    spy = Spy(monkeypatch)
    report = step_memory_report(Resharded, mesh, X, loss=None)
    model = nnx.eval_shape(lambda: Resharded(nnx.Rngs(0)))
    graphdef, state = nnx.split(model)
    rep = NamedSharding(mesh, P())
    state = jax.tree.map(
        lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=rep), state
    )
    x = jax.ShapeDtypeStruct(X.shape, X.dtype, sharding=NamedSharding(mesh, P("data")))
    with jax.set_mesh(mesh):
        compiled = jax.jit(lambda s, x: nnx.merge(graphdef, s)(x)).lower(state, x)
        memory: Any = compiled.compile().memory_analysis()
    assert report.output_bytes == memory.output_size_in_bytes == 8 * 4 * 4
    assert report.temp_bytes == memory.temp_size_in_bytes
    assert spy.numbers[0].explicit_axes_fallback is None
    assert not any("Explicit" in w for w in spy.numbers[0].warnings)


# --- activation sharding constraints --------------------------------------------------


def shard(x: jax.Array, *spec: Any) -> jax.Array:
    """tunix's ``shard``: constrain only under the legacy ``with mesh:`` context."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        mesh = pxla.thread_resources.env.physical_mesh
    if mesh.empty:
        return x
    out: jax.Array = jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P(*spec)))
    return out


class Constrained(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.up = nnx.Linear(16, 256, rngs=rngs)
        self.down = nnx.Linear(256, 16, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        h = shard(self.up(x), None, "data")  # split the features, not the rows
        y: jax.Array = self.down(h)
        return y


def test_activation_constraints_under_the_legacy_mesh_context_are_compiled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
    x = jax.ShapeDtypeStruct((32, 16), jnp.float32)
    spy = Spy(monkeypatch)
    report = step_memory_report(Constrained, mesh, x, loss=None)
    assert (spy.numbers[0].sharding_constraints or 0) >= 1

    model = nnx.eval_shape(lambda: Constrained(nnx.Rngs(0)))
    graphdef, state = nnx.split(model)
    rep = NamedSharding(mesh, P())
    state = jax.tree.map(
        lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=rep), state
    )
    xs = jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, P("data")))
    jitted = jax.jit(lambda s, x: nnx.merge(graphdef, s)(x))
    with jax.set_mesh(mesh):  # no legacy context: the model skips its constraint
        plain = jitted.lower(state, xs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with mesh, jax.set_mesh(mesh):  # as a tunix trainer compiles
            legacy = jitted.lower(state, xs)
    assert "sharding_constraint" not in plain.as_text()
    assert "sdy.sharding_constraint" in legacy.as_text()
    with_constraint: Any = legacy.compile().memory_analysis()
    without: Any = plain.compile().memory_analysis()
    assert report.temp_bytes == with_constraint.temp_size_in_bytes
    assert report.temp_bytes != without.temp_size_in_bytes


# --- a model whose call takes None and a mask -----------------------------------------


class Masked(nnx.Module):
    """``model(tokens, positions, cache, mask) -> (logits, cache)``, tunix-style."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.embed = nnx.Embed(64, 16, rngs=rngs)
        self.pos = nnx.Embed(32, 16, rngs=rngs)
        self.head = nnx.Linear(16, 64, rngs=rngs)

    def __call__(
        self, tokens: jax.Array, positions: jax.Array, cache: Any, mask: jax.Array
    ) -> tuple[jax.Array, Any]:
        x = self.embed(tokens) + self.pos(positions)
        x = jnp.where(mask[..., None], x, 0.0)
        return self.head(x), cache


def masked(rngs: nnx.Rngs) -> Masked:
    return Masked(rngs)


def masked_lm_loss(model: Any, batch: tuple[jax.Array, ...]) -> jax.Array:
    """The docs' recipe: unpack the batch, call the model as it wants."""
    tokens, positions, mask = batch
    logits, _ = model(tokens, positions, None, mask)
    losses = optax.softmax_cross_entropy_with_integer_labels(
        logits[:, :-1].astype(jnp.float32), tokens[:, 1:]
    )
    weights = mask[:, 1:].astype(jnp.float32)
    out: jax.Array = (losses * weights).sum() / weights.sum()
    return out


MASKED_PARAMS = (64 * 16 + 32 * 16 + 16 * 64 + 64) * 4


def _masked_batch(b: int) -> tuple[jax.ShapeDtypeStruct, ...]:
    return (
        jax.ShapeDtypeStruct((b, 32), jnp.int32),
        jax.ShapeDtypeStruct((b, 32), jnp.int32),
        jax.ShapeDtypeStruct((b, 32), jnp.bool_),
    )


def test_the_none_and_mask_recipe_in_process() -> None:
    report = step_memory_report(
        masked, "data=2", _masked_batch(4), loss=masked_lm_loss, optimizer="sgd"
    )
    rows = 2 * 32  # 2 of the 4 rows on each device
    assert report.argument_bytes == MASKED_PARAMS + 4 + rows * (4 + 4 + 1)
    assert report.loss == "masked_lm_loss"


def test_the_none_and_mask_recipe_in_a_child() -> None:
    assert _step.importable_name(masked_lm_loss) == (f"{__name__}:masked_lm_loss")
    report = step_memory_report(
        f"{__name__}:masked", "data=16", _masked_batch(16), loss=masked_lm_loss
    )
    assert report.compiled_in == "a child process with 16 virtual CPU devices"
    rows = 32  # one row on each device
    assert report.argument_bytes == MASKED_PARAMS + rows * (4 + 4 + 1)
    # the loss, the 4 gradients and XLA:CPU's 5 output pointers (8 bytes each)
    assert report.output_bytes == 4 + MASKED_PARAMS + 5 * 8


# --- the docs page --------------------------------------------------------------------

"""compare_states, StateDiff and check_reproducible_init."""

import dataclasses
import io
import json
import math
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from nnx_introspect._compare import check_reproducible_init, compare_states
from tests.conftest import BNDropoutMLP, assert_unchanged, snapshot


def build(seed: int = 0) -> BNDropoutMLP:
    return BNDropoutMLP(nnx.Rngs(seed, dropout=1))


def flat(model: nnx.Module) -> dict[tuple[Any, ...], Any]:
    return {tuple(p): v for p, v in nnx.to_flat_state(nnx.state(model))}


def state_of(pairs: dict[tuple[Any, ...], Any]) -> nnx.State[Any, Any]:
    return nnx.from_flat_state(list(pairs.items()))


def problems(diff: Any) -> list[tuple[str, str]]:
    return [(e.path, e.problem) for e in diff.entries]


# --- clean pairs ------------------------------------------------------------------


def test_same_seed_builds_are_equal() -> None:
    diff = compare_states(build(0), build(0))
    assert diff.equal and diff.entries == () and diff.paths == ()
    assert diff.values_compared and diff.kinds_compared
    # 2 Linear x 2 + BatchNorm x 4 + dropout key and count = 10 leaves.
    assert (diff.n_paths_a, diff.n_paths_b, diff.n_common) == (10, 10, 10)


def test_a_model_equals_its_state_and_its_pure_dict() -> None:
    model = build(0)
    state = nnx.state(model)
    assert compare_states(model, state).equal
    pure = compare_states(model, nnx.to_pure_dict(state))
    assert pure.equal and not pure.kinds_compared
    assert any("Variable types were not compared" in n for n in pure.notes)


def test_abstract_against_concrete_compares_shapes_only_and_says_so(
    abstract_bn_dropout: Any,
) -> None:
    diff = compare_states(abstract_bn_dropout, build(5))  # other values: unseen
    assert diff.equal
    assert not diff.values_compared
    assert "structure, shapes and dtypes" in diff.table().title
    assert any("Values were not compared" in n for n in diff.notes)


# --- the corruption corpus ----------------------------------------------------------


def test_missing_and_extra_paths() -> None:
    pairs = flat(build(0))
    del pairs[("l1", "bias")]
    pairs[("l2", "extra")] = nnx.Param(jnp.ones(2))
    diff = compare_states(build(0), state_of(pairs))
    assert problems(diff) == [("l1/bias", "missing"), ("l2/extra", "extra")]
    assert diff.at("l1/bias")[0].a == "Param float32[5]"
    assert diff.at("l2/extra")[0].b == "Param float32[2]"
    assert (diff.n_paths_a, diff.n_paths_b, diff.n_common) == (10, 10, 9)


def test_shape_dtype_kind_and_value_are_all_reported_at_once() -> None:
    pairs = flat(build(0))
    pairs[("l2", "kernel")] = nnx.Param(jnp.zeros((6, 2)))
    pairs[("bn", "mean")] = nnx.BatchStat(jnp.zeros(5, jnp.bfloat16))
    pairs[("bn", "var")] = nnx.Param(jnp.ones(5))  # a BatchStat in the model
    kernel = pairs[("l1", "kernel")]
    pairs[("l1", "kernel")] = nnx.Param(-kernel[...])
    diff = compare_states(build(0), state_of(pairs))
    assert problems(diff) == [
        ("bn/mean", "dtype"),
        ("bn/var", "variable-type"),
        ("l1/kernel", "value"),
        ("l2/kernel", "shape"),
    ]
    assert diff.at("bn/var")[0].a == "BatchStat" and diff.at("bn/var")[0].b == "Param"
    assert diff.at("l2/kernel")[0].a == "(5, 2)"
    assert diff.at("bn/mean")[0].b == "bfloat16"
    flipped = diff.at("l1/kernel")[0]
    original = np.asarray(kernel[...])
    assert flipped.n_different == int(np.count_nonzero(original)) == 15
    assert flipped.n_elements == 3 * 5
    assert flipped.max_abs_diff == pytest.approx(2 * float(np.abs(original).max()))
    assert flipped.max_rel_diff == pytest.approx(2.0)


def test_a_different_seed_differs_exactly_in_the_random_kernels() -> None:
    # Biases start at zero and BatchNorm at 0/1 whatever the seed; the dropout
    # stream has its own seed, so only the two kernels change.
    diff = compare_states(build(0), build(1))
    assert problems(diff) == [("l1/kernel", "value"), ("l2/kernel", "value")]
    assert [e.n_different for e in diff.entries] == [15, 10]


def test_rng_keys_are_compared_by_their_key_data() -> None:
    a = BNDropoutMLP(nnx.Rngs(0, dropout=1))
    b = BNDropoutMLP(nnx.Rngs(0, dropout=2))
    assert problems(compare_states(a, b)) == [("drop/rngs/key", "value")]


# --- tolerances ---------------------------------------------------------------------


def test_tolerances_and_nan() -> None:
    a = {"w": jnp.array([1.0, 2.0, jnp.nan, jnp.inf])}
    b = {"w": jnp.array([1.0, 2.001, jnp.nan, jnp.inf])}
    exact = compare_states(a, b)
    entry = exact.at("w")[0]
    assert (entry.n_different, entry.n_elements) == (1, 4)
    assert entry.max_abs_diff == pytest.approx(0.001, rel=1e-3)
    assert entry.max_rel_diff == pytest.approx(0.0005, rel=1e-3)
    assert compare_states(a, b, atol=0.01).equal
    assert compare_states(a, b, rtol=1e-3).equal
    assert not compare_states(a, b, rtol=1e-4).equal
    nan_vs_number = compare_states({"w": jnp.array([jnp.nan])}, {"w": jnp.array([1.0])})
    assert nan_vs_number.entries[0].n_different == 1
    assert math.isnan(nan_vs_number.entries[0].max_abs_diff or 0.0)
    assert json.loads(nan_vs_number.to_json())["entries"][0]["max_abs_diff"] == "nan"


def test_integers_compare_exactly_whatever_the_tolerance() -> None:
    a = {"n": jnp.array([1, 2, 3], jnp.int32)}
    b = {"n": jnp.array([1, 2, 4], jnp.int32)}
    diff = compare_states(a, b, atol=10.0)
    assert diff.entries[0].n_different == 1 and diff.entries[0].max_abs_diff == 1.0


@settings(deadline=None, max_examples=25)
@given(
    values=st.lists(st.floats(-10, 10), min_size=1, max_size=12),
    data=st.data(),
)
def test_differing_count_matches_the_perturbed_elements(
    values: list[float], data: st.DataObject
) -> None:
    mask = data.draw(
        st.lists(st.booleans(), min_size=len(values), max_size=len(values))
    )
    x = np.asarray(values, np.float32)
    y = np.where(mask, x + np.float32(1.0), x)
    diff = compare_states({"x": x}, {"x": y}, atol=0.5)
    expected = sum(mask)
    assert diff.equal == (expected == 0)
    if expected:
        assert diff.entries[0].n_different == expected
        assert diff.entries[0].max_abs_diff == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"rtol": -1.0},
            ValueError,
            r"`rtol` must be a finite nonnegative float.*-1\.0",
        ),
        (
            {"atol": float("nan")},
            ValueError,
            r"`atol` must be a finite nonnegative.*nan",
        ),
        ({"atol": True}, TypeError, r"`atol` must be a nonnegative float.*True"),
    ],
)
def test_bad_tolerances(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        compare_states({"x": jnp.ones(1)}, {"x": jnp.ones(1)}, **kwargs)


def test_bad_operand_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"^`a` must be "):
        compare_states([jnp.ones(1)], {"x": jnp.ones(1)})  # type: ignore[arg-type]


# --- read-only, rendering -------------------------------------------------------------


def test_compare_does_not_touch_either_side(capsys: pytest.CaptureFixture[str]) -> None:
    a, b = build(0), build(1)
    before_a, before_b = snapshot(a), snapshot(b)
    compare_states(a, b)
    assert_unchanged(before_a, a)
    assert_unchanged(before_b, b)
    assert capsys.readouterr().out == ""


def test_renderers() -> None:
    diff = compare_states(build(0), build(1))
    md = diff.to_markdown()
    assert "| l1/kernel | value | values | values | 15/15 |" in md
    payload = json.loads(diff.to_json())
    assert payload["schema"] == "nnx-introspect/state-diff" and payload["version"] == 1
    assert payload["equal"] is False
    assert [e["path"] for e in payload["entries"]] == ["l1/kernel", "l2/kernel"]
    assert payload["entries"][0]["n_different"] == 15
    console = Console(file=io.StringIO(), width=200)
    console.print(diff)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "l2/kernel" in text and "2 difference(s) at 2 path(s)" in text
    assert "<table>" in diff._repr_html_()
    clean = compare_states(build(0), build(0)).table()
    assert clean.rows == () and "equal" in clean.title


# --- check_reproducible_init ----------------------------------------------------------


def test_reproducible_factory_is_equal_on_the_full_state() -> None:
    diff = check_reproducible_init(lambda rngs: BNDropoutMLP(rngs), 3)
    assert diff.equal and diff.values_compared
    assert (diff.a_label, diff.b_label) == ("build 1", "build 2")
    assert diff.n_common == 10


def test_a_shared_advancing_rngs_is_caught() -> None:
    shared = nnx.Rngs(0, dropout=1)

    def factory(rngs: nnx.Rngs) -> BNDropoutMLP:
        return BNDropoutMLP(shared)  # the mistake: ignores its argument

    diff = check_reproducible_init(factory, 0)
    assert "l1/kernel" in diff.paths and "l2/kernel" in diff.paths
    assert all(e.problem == "value" for e in diff.entries)


def test_a_zero_input_forward_would_miss_what_the_state_diff_finds() -> None:
    shared = nnx.Rngs(0)

    def factory(rngs: nnx.Rngs) -> nnx.Linear:
        return nnx.Linear(3, 2, rngs=shared)

    first, second = factory(shared), factory(shared)
    x = jnp.zeros((1, 3))
    assert bool(jnp.array_equal(first(x), second(x)))  # zero input hides kernels
    assert check_reproducible_init(factory, 0).paths == ("kernel",)


@pytest.mark.parametrize(
    ("seed", "error", "match"),
    [
        (-1, ValueError, r"`seed` must be a nonnegative integer, got -1"),
        (
            1.5,
            ValueError,
            r"`seed` must be a nonnegative integer, got the non-integral",
        ),
    ],
)
def test_bad_seed(seed: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        check_reproducible_init(lambda rngs: nnx.Linear(1, 1, rngs=rngs), seed)


def test_factory_must_return_a_module() -> None:
    with pytest.raises(
        TypeError, match=r"`factory` must return an nnx.Module, got dict"
    ):
        check_reproducible_init(lambda rngs: {"w": jax.numpy.ones(1)}, 0)  # type: ignore[arg-type, return-value]


def test_value_messages_name_the_tolerance_only_for_floats() -> None:
    floats = compare_states({"x": jnp.zeros(2)}, {"x": jnp.ones(2)}, atol=0.5)
    assert floats.entries[0].message == (
        "x: 2 of 2 element(s) differ beyond rtol=0, atol=0.5 (max |a-b| = 1)."
    )
    ints = compare_states({"n": jnp.zeros(3, jnp.int32)}, {"n": jnp.arange(3)})
    assert ints.entries[0].message == "n: 2 of 3 element(s) differ (max |a-b| = 2)."


# --- reversed -----------------------------------------------------------------------


def corrupted() -> nnx.State[Any, Any]:
    """A state with every kind of difference from ``build(0)``."""
    pairs = flat(build(0))
    del pairs[("l1", "bias")]  # missing
    pairs[("l2", "extra")] = nnx.Param(jnp.ones(2))  # extra
    pairs[("l2", "kernel")] = nnx.Param(jnp.zeros((6, 2)))  # shape
    pairs[("bn", "mean")] = nnx.BatchStat(jnp.zeros(5, jnp.bfloat16))  # dtype
    pairs[("bn", "var")] = nnx.Param(jnp.ones(5))  # variable type
    kernel = pairs[("l1", "kernel")][...]
    pairs[("l1", "kernel")] = nnx.Param(kernel.at[0].set(kernel[0] * -1.0))  # value
    return state_of(pairs)


@pytest.mark.parametrize("order", ["model first", "corrupted first"])
def test_reversed_equals_the_comparison_the_other_way(order: str) -> None:
    a: Any = build(0)
    b: Any = corrupted()
    if order == "corrupted first":
        a, b = b, a
    forward, backward = compare_states(a, b), compare_states(b, a)
    assert {e.problem for e in forward.entries} == {
        "missing",
        "extra",
        "shape",
        "dtype",
        "variable-type",
        "value",
    }
    back = forward.reversed()
    # compare_states labels its operands "a" and "b" by position, so the other
    # comparison says "a" where the reversed one says "b" (it is the old `a`).
    assert (back.a_label, back.b_label) == ("b", "a")
    relabelled = dataclasses.replace(backward, a_label="b", b_label="a")
    swap = {"a": "b", "b": "a"}
    expected = tuple(
        dataclasses.replace(
            e,
            message=re.sub(
                r"\b(in|not in) (a|b)\b",
                lambda m: f"{m[1]} {swap[m[2]]}",
                e.message,
            ),
        )
        for e in backward.entries
    )
    # The sign flip makes |a - b| / |a| = 2 = |b - a| / |b|: max_rel_diff is
    # symmetric here, so entry for entry every field must agree.
    assert back.entries == expected
    assert back == dataclasses.replace(relabelled, entries=expected)
    assert back.reversed() == forward
    assert forward == compare_states(a, b)  # `reversed` left `forward` as it was


def test_reversed_keeps_labels_notes_and_measured_figures() -> None:
    a = {"w": jnp.array([1.0, 4.0])}
    b = {"w": jnp.array([1.0, 2.0])}
    diff = compare_states(a, b, atol=0.5)
    back = diff.reversed()
    assert (back.a_label, back.b_label) == ("b", "a")
    assert (back.rtol, back.atol, back.notes) == (0.0, 0.5, diff.notes)
    # Measured with the original `a` as reference: |4 - 2| / 4, kept as is.
    assert diff.entries[0].max_rel_diff == back.entries[0].max_rel_diff == 0.5
    assert compare_states(b, a, atol=0.5).entries[0].max_rel_diff == 1.0
    assert back.table().columns[2:4] == ("b", "a")
    missing = compare_states({"x": jnp.ones(1), "y": jnp.ones(1)}, {"x": jnp.ones(1)})
    assert missing.entries[0].message == "y: in a (float32[1]), not in b."
    flipped = missing.reversed().entries[0]
    assert (flipped.problem, flipped.a, flipped.b) == ("extra", "-", "float32[1]")
    # Still the same fact, now read with `a` second: "in a, not in b".
    assert flipped.message == "y: in a (float32[1]), not in b."
    shape = compare_states({"x": jnp.ones(1)}, {"x": jnp.ones(2)}).reversed()
    assert shape.entries[0].message == "x: shape (2,) in b, (1,) in a."


# --- leaves that are not numbers --------------------------------------------------


@pytest.mark.parametrize(
    ("leaf", "shown", "path"),
    [
        ("x", r"'x' of type str", "kernel"),  # was "unexpected input: dtype=<U1"
        (None, "None", "kernel"),  # was silently reported as "missing"
        (b"x", r"b'x' of type bytes", "kernel"),
        (object(), r"<object object at .*> of type object", "kernel"),
        (np.array(["a", "b"]), "an array of dtype <U1", "kernel"),
        (np.array([object()]), "an array of dtype object", "kernel"),
        (np.datetime64("2020"), r"an array of dtype datetime64\[Y\]", "kernel"),
        (nnx.Param("s"), r"'s' of type str", "kernel"),
        (nnx.Param(None), "None", "kernel"),
        ({"x": "y"}, r"'y' of type str", "kernel/x"),
    ],
)
@pytest.mark.parametrize("side", ["a", "b"])
def test_a_non_numeric_leaf_names_the_side_and_the_path(
    side: str, leaf: Any, shown: str, path: str
) -> None:
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    bad = {"kernel": leaf, "bias": jnp.zeros(3)}
    args = (model, bad) if side == "b" else (bad, model)
    match = rf"`{side}` must hold numeric arrays, got {shown} at '{path}'\. Give"
    with pytest.raises(TypeError, match=match):
        compare_states(*args)


def test_a_factory_building_a_non_numeric_leaf_is_a_type_error() -> None:
    class Labelled(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.w = nnx.Param(jnp.ones(2))
            self.name = nnx.Variable("not a number")

    with pytest.raises(
        TypeError,
        match=r"`factory` must build numeric arrays, got 'not a number'.* at 'name'",
    ):
        check_reproducible_init(Labelled, 0)


def test_numbers_and_exotic_numeric_dtypes_are_accepted() -> None:
    a = {
        "i4": jnp.asarray([1, -2], jnp.int4),
        "f8": jnp.asarray([1.5], jnp.float8_e4m3fn),
        "py": 2.5,
        "b": np.bool_(True),
    }
    assert compare_states(a, dict(a)).equal
    diff = compare_states(a, {**a, "i4": jnp.asarray([1, 3], jnp.int4)})
    assert problems(diff) == [("i4", "value")] and diff.entries[0].max_abs_diff == 5.0


def test_no_value_compared_never_reads_as_values_compared() -> None:
    """Two states that share no path, or whose common paths all differ in shape,
    compared no value: the diff must not claim it did."""
    a = {"x": np.zeros((2,), np.float32)}
    disjoint = compare_states(a, {"y": np.zeros((2,), np.float32)})
    assert not disjoint.values_compared
    assert "compared values" not in disjoint.to_markdown()
    reshaped = compare_states(a, {"x": np.zeros((3,), np.float32)})
    assert not reshaped.values_compared
    same = compare_states(a, {"x": np.zeros((2,), np.float32)})
    assert same.values_compared and same.equal

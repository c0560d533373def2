"""param_fingerprint: per-leaf statistics and content hashes."""

import hashlib
import json
import math
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_introspect._fingerprint import param_fingerprint
from tests.conftest import BNDropoutMLP, assert_unchanged, snapshot


class Fixed(nnx.Module):
    """A module with known values."""

    def __init__(self, w: list[list[float]], stat: list[float]) -> None:
        self.w = nnx.Param(jnp.asarray(w, jnp.float32))
        self.stat = nnx.BatchStat(jnp.asarray(stat, jnp.float32))


def test_statistics_and_hash_from_independent_arithmetic() -> None:
    fp = param_fingerprint(Fixed([[1.0, 2.0], [3.0, -4.0]], [7.0]))
    assert [leaf.path for leaf in fp.leaves] == ["w"]  # Param only by default
    leaf = fp.leaves[0]
    assert (leaf.kind, leaf.shape, leaf.dtype) == ("Param", (2, 2), "float32")
    assert leaf.sum == 1 + 2 + 3 - 4
    assert leaf.l2_norm == pytest.approx(math.sqrt(1 + 4 + 9 + 16))
    assert (leaf.min, leaf.max) == (-4.0, 3.0)
    raw = np.asarray([1, 2, 3, -4], "<f4").tobytes()
    assert leaf.sha256 == hashlib.sha256(b"float32[2, 2]\0" + raw).hexdigest()


def test_equal_sums_are_not_equal_bytes() -> None:
    a = param_fingerprint(Fixed([[1.0, 3.0]], [0.0]))
    b = param_fingerprint(Fixed([[2.0, 2.0]], [0.0]))
    assert a.leaves[0].sum == b.leaves[0].sum == 4.0
    assert a.leaves[0].sha256 != b.leaves[0].sha256
    assert a.digest != b.digest
    assert a.changed_paths(b) == ("w",)


def test_the_hash_sees_dtype_and_shape() -> None:
    flat = param_fingerprint(Fixed([[1.0, 2.0, 3.0, 4.0]], [0.0]))
    square = param_fingerprint(Fixed([[1.0, 2.0], [3.0, 4.0]], [0.0]))
    assert flat.leaves[0].sha256 != square.leaves[0].sha256


def test_filters_select_kinds_and_keys_have_no_statistics() -> None:
    model = BNDropoutMLP(nnx.Rngs(0, dropout=1))
    everything = param_fingerprint(model, ...)
    assert len(everything.leaves) == 10
    stats = param_fingerprint(model, nnx.BatchStat)
    assert [leaf.path for leaf in stats.leaves] == ["bn/mean", "bn/var"]
    assert stats.leaves[1].sum == 5.0  # variances start at one
    key = next(leaf for leaf in everything.leaves if leaf.path == "drop/rngs/key")
    assert key.sum is None and key.min is None and len(key.sha256) == 64
    other_key = param_fingerprint(BNDropoutMLP(nnx.Rngs(0, dropout=2)), ...)
    assert everything.changed_paths(other_key) == ("drop/rngs/key",)


def test_same_seed_same_digest_and_changed_paths_across_structures() -> None:
    a = param_fingerprint(BNDropoutMLP(nnx.Rngs(0, dropout=1)))
    b = param_fingerprint(BNDropoutMLP(nnx.Rngs(0, dropout=1)))
    assert a.digest == b.digest and a.changed_paths(b) == ()
    lin = param_fingerprint(nnx.Linear(3, 5, rngs=nnx.Rngs(0)))
    assert set(a.changed_paths(lin)) == {
        "bn/bias", "bn/scale", "l1/bias", "l1/kernel", "l2/bias", "l2/kernel",
        "bias", "kernel",
    }  # fmt: skip


def test_abstract_target_is_rejected(abstract_bn_dropout: Any) -> None:
    with pytest.raises(ValueError, match=r"`target` is abstract at 6 leaf\(s\)"):
        param_fingerprint(abstract_bn_dropout)


def test_read_only_and_silent(capsys: pytest.CaptureFixture[str]) -> None:
    model = BNDropoutMLP(nnx.Rngs(0, dropout=1))
    before = snapshot(model)
    param_fingerprint(model, ...)
    assert_unchanged(before, model)
    assert capsys.readouterr().out == ""


def test_renderers_and_non_finite_json() -> None:
    fp = param_fingerprint(Fixed([[float("nan"), 1.0]], [0.0]))
    payload = json.loads(fp.to_json())
    assert payload["schema"] == "nnx-introspect/param-fingerprint"
    assert payload["leaves"][0]["sum"] == "nan"
    assert payload["digest"] == fp.digest
    md = fp.to_markdown()
    assert "| w | Param | (1, 2) | float32 | nan |" in md
    assert "Evidence, not proof" in md


@pytest.mark.parametrize(
    ("leaf", "shown"),
    [
        ("s", r"'s' of type str"),
        (None, "None"),  # an empty fingerprint before: a false green
        (np.array(["a"]), "an array of dtype <U1"),
        (np.array([object()]), "an array of dtype object"),
    ],
)
def test_a_non_numeric_leaf_is_a_type_error_naming_target_and_path(
    leaf: Any, shown: str
) -> None:
    state: nnx.State[Any, Any] = nnx.State({"l1": {"w": nnx.Param(leaf)}})
    with pytest.raises(
        TypeError, match=rf"`target` must hold numeric arrays, got {shown} at 'l1/w'"
    ):
        param_fingerprint(state)

"""``mesh --every-leaf``: the table lists every leaf and every problem.

By default a list of 32 identical layers folds into one row per leaf of a
layer (``layers/*/kernel x32``) and one note per problem; ``--every-leaf``
lists the 64 leaves and the 32 problems, as the JSON always does.
"""

import json
import re
import textwrap
from pathlib import Path

import pytest

from tests.cli_helpers import run

TARGETS = textwrap.dedent(
    """
    from flax import nnx

    def sharded(rngs):
        init = nnx.with_partitioning(nnx.initializers.lecun_normal(), (None, "tp"))
        return nnx.Linear(4, 6, kernel_init=init, rngs=rngs)

    class Stack(nnx.Module):
        def __init__(self, rngs):
            self.layers = nnx.List([sharded(rngs) for _ in range(32)])

    def stack32(rngs):
        return Stack(rngs)
    """
)
TARGET_MODULES = {"mesh_every_leaf_mod": TARGETS}
ARGS = ["mesh", "mesh_every_leaf_mod:stack32", "--mesh", "tp=4"]


def test_every_leaf_lists_each_layer_and_each_problem(
    targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run([*ARGS, "--format", "markdown", "--every-leaf"], capsys)
    assert code == 1 and "mesh plan has 32 problem(s)" in err
    rows = [line for line in out.splitlines() if line.startswith("| layers/")]
    assert len(rows) == 64 and "\u00d7" not in out
    # each layer's own rows, as the plan has them: kernel 4 x 6 float32 whole
    # on each device (the spec cannot be applied), bias 6 float32 replicated
    assert "| layers/0/bias | (6,) | P() | default | (6,) | tp | 24 B | 6 B |" in rows
    assert {r.split(" | ")[0] for r in rows} == {
        f"| layers/{i}/{leaf}" for i in range(32) for leaf in ("bias", "kernel")
    }
    kernels = [r for r in rows if "/kernel |" in r]
    assert all(r.endswith("| 96 B | 24 B |") for r in kernels)
    assert 4 * 6 * 4 == 96
    problems = [line for line in out.splitlines() if "does not divide" in line]
    assert len(problems) == 32
    layers = {re.findall(r"^- `layers/(\d+)/kernel`", p)[0] for p in problems}
    assert layers == {str(i) for i in range(32)}
    # the JSON is the same with and without it: every leaf
    _, folded, _ = run([*ARGS, "--format", "json"], capsys)
    _, every, _ = run([*ARGS, "--format", "json", "--every-leaf"], capsys)
    assert json.loads(folded) == json.loads(every)
    assert len(json.loads(every)["leaves"]) == 64


def test_by_default_the_layers_fold(
    targets_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = run([*ARGS, "--format", "markdown"], capsys)
    rows = [line for line in out.splitlines() if line.startswith("| layers/")]
    assert [r.split(" | ")[0] for r in rows] == [
        "| layers/*/bias \u00d732",
        "| layers/*/kernel \u00d732",
    ]

"""Which repeated module classes hold the kept activations, by their subtrees.

A three-block model whose ``__call__``s are wrapped in ``jax.named_scope`` (as
tunix wraps its layers', so ``inspect.getsourcefile`` names JAX's file) is
compiled on XLA:CPU with AdamW; each class's kept bytes are checked against
the kept rows picked by shape (each class's own hidden width), and the
ordering, ties and matching rules on hand-made rows.
"""

import inspect
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

import nnx_introspect._step.train as _train
from nnx_introspect import abstract_model, examples, step_memory_report
from nnx_introspect._breakdown.report import Breakdown, BreakdownRow
from nnx_introspect._breakdown.rows import row_from_json, row_json
from nnx_introspect._sweep.fit.layers import (
    KEPT,
    RematCandidate,
    layer_to_remat,
    remat_candidates,
)
from nnx_introspect._xla.dump import SourceLocation
from nnx_introspect._xla.hlo.frames import user_frames

D, A, F, BATCH, BLOCKS = 64, 96, 160, 256, 3


class Attn(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.up = nnx.Linear(D, A, rngs=rngs)
        self.down = nnx.Linear(A, D, rngs=rngs)

    @jax.named_scope("attn")
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.down(jnp.tanh(self.up(x)))


class Mlp(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.up = nnx.Linear(D, F, rngs=rngs)
        self.down = nnx.Linear(F, D, rngs=rngs)

    @jax.named_scope("mlp")
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.down(jax.nn.gelu(self.up(x)))


class Block(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.attn = Attn(rngs)
        self.mlp = Mlp(rngs)

    @jax.named_scope("block")
    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + self.attn(x)
        return x + self.mlp(jnp.sin(x))


class Net(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.blocks = nnx.List([Block(rngs) for _ in range(BLOCKS)])

    def __call__(self, x: jax.Array) -> jax.Array:
        for block in self.blocks:
            x = block(x)
        return x


@pytest.fixture(scope="module")
def model() -> Any:
    return abstract_model(lambda rngs: Net(rngs))


@pytest.fixture(scope="module")
def breakdown(model: Any) -> Breakdown:
    report = step_memory_report(
        model,
        "data=1",
        jax.ShapeDtypeStruct((BATCH, D), jnp.float32),
        optimizer="adamw",
        breakdown=True,
    )
    assert report.breakdown is not None
    return report.breakdown


def _kept(breakdown: Breakdown, width: int | None = None) -> int:
    return sum(
        row.nbytes
        for row in breakdown.rows
        if row.kind == KEPT and (width is None or width in row.shape)
    )


def test_the_decorator_hides_the_file() -> None:
    # the case a file-and-line match misses: the source file is JAX's
    assert inspect.getsourcefile(Block.__call__).endswith("source_info_util.py")  # type: ignore[union-attr]


def test_outermost_block_first_then_its_heaviest_children(
    breakdown: Breakdown, model: Any
) -> None:
    found = remat_candidates(breakdown, model)
    assert [c.name for c in found] == ["Block", "Mlp", "Attn"]
    assert all(c.instances == BLOCKS for c in found)
    by_name = {c.name: c for c in found}
    # each child's kept bytes are the kept rows of its own width, and the
    # block's are every kept row of the batch's leading dimension (the loss's
    # scalar is the only kept row outside the blocks)
    assert by_name["Mlp"].kept_bytes == _kept(breakdown, F) > 0
    assert by_name["Attn"].kept_bytes == _kept(breakdown, A) > 0
    assert by_name["Block"].kept_bytes == _kept(breakdown, BATCH)
    assert (
        by_name["Block"].kept_bytes
        > by_name["Mlp"].kept_bytes + by_name["Attn"].kept_bytes
    )
    assert found[0].basis.startswith(
        f"Block: {found[0].kept_bytes / 2**20:.2f} MiB of kept activations under its"
        f" {BLOCKS} instances"
    )
    assert "tie" not in " ".join(c.basis for c in found)


def test_layer_to_remat_takes_the_first_candidate(
    breakdown: Breakdown, model: Any
) -> None:
    first = remat_candidates(breakdown, model)[0]
    assert layer_to_remat(model, breakdown) == (first.name, first.basis)


def test_no_breakdown_no_candidates(model: Any) -> None:
    assert remat_candidates(None, model) == []
    name, basis = layer_to_remat(model, None)
    # Block, Attn and Mlp are each repeated 3 times with modules of their own
    assert name == "Block"
    assert basis.endswith("; a tie with Attn, Mlp, the outermost taken")


def test_the_stack_survives_json(breakdown: Breakdown) -> None:
    rows = [row for row in breakdown.rows if row.kind == KEPT and row.stack]
    assert rows and all(row_from_json(row_json(row)) == row for row in rows)
    assert Breakdown.from_json_data(breakdown.json_data()) == breakdown


def _frame(cls: type, line_only: bool = False) -> SourceLocation:
    call = inspect.unwrap(cls.__call__)
    file = inspect.getsourcefile(call)
    assert file is not None
    line = inspect.getsourcelines(call)[1] + 1
    return SourceLocation(file, line, "" if line_only else call.__qualname__)


def _row(nbytes: int, *stack: SourceLocation, kind: str = KEPT) -> BreakdownRow:
    return BreakdownRow(
        kind,
        "r",
        nbytes,
        (nbytes,),
        "u8",
        "r",
        "fusion",
        None,
        None,
        None,
        None,
        None,
        stack=stack,
    )


def _hand(*rows: BreakdownRow) -> Breakdown:
    return Breakdown("cpu", "jit_f", 0, "r", 100, 100, rows)


def test_a_tie_is_named_and_only_a_tie(model: Any) -> None:
    block, attn, mlp = _frame(Block), _frame(Attn), _frame(Mlp)
    tied = remat_candidates(_hand(_row(30, attn, block), _row(30, mlp, block)), model)
    assert [c.name for c in tied] == ["Block", "Attn", "Mlp"]
    assert [c.kept_bytes for c in tied] == [60, 30, 30]
    assert tied[1].basis.endswith("; a tie with Mlp (the same bytes)")
    assert tied[2].basis.endswith("; a tie with Attn (the same bytes)")
    assert "tie" not in tied[0].basis
    apart = remat_candidates(_hand(_row(31, attn, block), _row(30, mlp, block)), model)
    assert "tie" not in " ".join(c.basis for c in apart)


def test_which_frames_count(model: Any) -> None:
    block = _frame(Block)
    elsewhere = SourceLocation("/elsewhere/model.py", block.line, block.function)
    found = remat_candidates(
        _hand(
            _row(8, block),  # counts
            _row(4, _frame(Block, line_only=True)),  # no function: by its lines
            _row(2, elsewhere),  # the same name in another file: no
            _row(1, block, kind="temporary"),  # not kept: no
        ),
        model,
    )
    assert found == [
        RematCandidate(
            "Block",
            12,
            BLOCKS,
            "Block: 12 B of kept activations under its 3 instances (86% of the"
            " 14 B kept at the peak)",
        )
    ]


def test_the_examples_llama_is_model_code() -> None:
    """Frames of the examples' Llama (a public module) are the user's; the step's not.

    Without them no example Llama's breakdown names a remat candidate (its
    kept rows' stacks would hold no ``LlamaLayer.__call__`` frame).
    """
    model_file = inspect.getsourcefile(examples.LlamaLayer) or ""
    layer = SourceLocation(model_file, 300, "LlamaLayer.__call__")
    step = SourceLocation(_train.__file__, 10, "train_step")
    assert user_frames((step, layer, step)) == (layer,)

"""A mesh plan's table folds a list of identical layers (``layers/*/kernel x4``)."""

import dataclasses
import re

import jax.numpy as jnp
from flax import nnx

from nnx_introspect import (
    MeshConfigReport,
    abstract_model,
    mesh_config_report,
    summarize,
)

TP = nnx.with_partitioning(nnx.initializers.lecun_normal(), (None, "tp"))


class _Stack(nnx.Module):
    def __init__(self, widths: tuple[int, ...], rngs: nnx.Rngs) -> None:
        self.layers = nnx.List(
            [nnx.Linear(4, w, kernel_init=TP, rngs=rngs) for w in widths]
        )
        self.head = nnx.Linear(4, 4, rngs=rngs)


def Stack(widths: tuple[int, ...]) -> _Stack:  # noqa: N802
    """``len(widths)`` Linear(4, width) layers, kernels split over ``tp``; abstract."""
    return abstract_model(lambda rngs: _Stack(widths, rngs))


def _first_cells(report: MeshConfigReport) -> list[str]:
    return [row[0] for row in report.table().rows]


def test_identical_layers_fold_into_one_row_each_with_summed_bytes() -> None:
    plan = mesh_config_report(Stack((8,) * 4), "tp=4")
    rows = {row[0]: row for row in plan.table().rows}
    assert list(rows) == [
        "head/bias",
        "head/kernel",
        "layers/*/bias \u00d74",
        "layers/*/kernel \u00d74",
    ]
    # Four (4, 8) float32 kernels split 8 over tp=4: (4, 2) per device each.
    kernel = rows["layers/*/kernel \u00d74"]
    assert kernel[1:6] == ("(4, 8)", "P(None, 'tp')", "metadata", "(4, 2)", "-")
    assert kernel[6:] == (f"{4 * 4 * 2 * 4} B", f"{4 * 4 * 2 * 4} B")
    # Four replicated (8,) biases: each device holds all 4 x 8 float32.
    assert rows["layers/*/bias \u00d74"][6:] == (
        f"{4 * 8 * 4} B",
        f"{4 * 8 * 4 // 4} B",
    )
    # The totals, the attributes and the JSON keep every leaf.
    assert len(plan.leaves) == 4 * 2 + 2
    assert (
        plan.table().totals
        == mesh_config_report(Stack((8,) * 4), "tp=4").table().totals
    )


def test_the_fold_is_summarys_rule() -> None:
    # The same model, summarized with group_layers: the same paths fold.
    model = Stack((8,) * 4)
    folded = [
        re.sub(" \u00d7.*", "", cell)
        for cell in _first_cells(mesh_config_report(model, "tp=4"))
    ]
    summary = summarize(model, group_layers=True)
    assert folded == [row.path_str for row in summary.rows]


def test_a_differing_layer_is_never_hidden() -> None:
    # Layer 2 is wider: no run covers every index, so nothing folds.
    cells = _first_cells(mesh_config_report(Stack((8, 8, 12, 8)), "tp=4"))
    assert not any("*" in cell for cell in cells)
    assert "layers/2/kernel" in cells and len(cells) == 4 * 2 + 2


def test_identical_problems_fold_into_one_note() -> None:
    # Width 6 does not divide over tp=4: one problem per layer.
    plan = mesh_config_report(Stack((6,) * 5), "tp=4")
    assert len(plan.errors) == 5
    notes = [n for n in plan.table().notes if "does not divide" in n]
    assert notes == [
        "`layers/*/kernel` \u00d75 with shape (4, 6): dimension 1 (size 6) does not "
        "divide over tp (product 4). Pad the dimension to a multiple of 4 or choose "
        "axes whose product divides it."
    ]
    # A kernel that cannot be placed is held whole: 5 x 4 x 6 float32.
    row = next(r for r in plan.table().rows if r[0].startswith("layers/*/kernel"))
    assert row[6] == f"{5 * 4 * 6 * 4} B"


def test_problems_of_only_some_layers_keep_their_own_notes() -> None:
    # Layers 0 and 2 (width 6) fail, 1 and 3 (width 8) do not: nothing folds.
    plan = mesh_config_report(Stack((6, 8, 6, 8)), "tp=4")
    notes = [n for n in plan.table().notes if "does not divide" in n]
    assert [n.split(" ")[0] for n in notes] == [
        "`layers/0/kernel`",
        "`layers/2/kernel`",
    ]


def test_group_layers_false_and_the_html_list_every_leaf() -> None:
    plan = mesh_config_report(Stack((6,) * 3), "tp=4")
    every = dataclasses.replace(plan, group_layers=False)
    cells = _first_cells(every)
    assert cells == [leaf.path for leaf in plan.all_leaves]
    assert sum("does not divide" in n for n in every.table().notes) == 3
    page = plan.to_html()
    assert all(f"layers/{i}/kernel" in page for i in range(3))
    assert "layers/*/kernel \u00d73" in page  # the notes, folded


def test_the_waste_notes_name_the_folded_rows() -> None:
    # Replicated 4 x (4, 16) kernels: each device holds 4 x 256 B, ideal 1/4.
    model = Stack((16,) * 4)
    plan = mesh_config_report(model, "tp=4", rules=[("kernel", ())])
    waste = [n for n in plan.table().notes if n.startswith("Wastes")]
    assert waste[0] == (
        f"Wastes {4 * 4 * 16 * 4 * 3 // 4} B per device above their ideal share: "
        "layers/*/kernel \u00d74 (replicated over tp)."
    )
    assert jnp.dtype("float32").itemsize == 4

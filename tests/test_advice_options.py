"""Issue 24: "What to change" names options, says each fact once, nothing on a fit."""

import dataclasses

from flax import nnx

from nnx_introspect import mesh_config_report
from nnx_introspect._breakdown.advice import what_to_change
from nnx_introspect._breakdown.chart import advice_html, breakdown_html
from nnx_introspect._breakdown.report import Breakdown, BreakdownRow
from nnx_introspect._xla.dump import SourceLocation

MiB = 2**20
BLOCK = SourceLocation("/m/model.py", 120, "LlamaBlock.__call__")


def _row(
    kind: str,
    nbytes: int,
    shape: tuple[int, ...],
    *,
    source: SourceLocation | None = None,
    label: str = "x",
    opcode: str = "fusion",
) -> BreakdownRow:
    return BreakdownRow(
        kind, label, nbytes, shape, "f32", label, opcode, None, None, source, None, None
    )


def _breakdown(*rows: BreakdownRow, backend: str = "gpu") -> Breakdown:
    peak = sum(r.nbytes for r in rows)
    return Breakdown(backend, "jit_train", 5, "fusion", peak, peak, rows)


# attention probabilities in two layouts, from one line: 32 + 21 buffers of 16 MiB
ATTENTION = _breakdown(
    *(
        _row("activation kept for backward", 16 * MiB, (32, 2048, 2048), source=BLOCK)
        for _ in range(32)
    ),
    *(
        _row("activation kept for backward", 16 * MiB, (4, 8, 2048, 2048), source=BLOCK)
        for _ in range(21)
    ),
    _row("parameter", 200 * MiB, (50 * MiB,), label="w"),
    _row("temporary", 100 * MiB, (25 * MiB,), label="t"),
)


def test_nothing_on_a_step_that_fits() -> None:
    assert what_to_change(ATTENTION, fits=True) == ()
    assert advice_html(()) == ""
    page = breakdown_html(ATTENTION, 2**40, ())
    assert "What to change" not in page


FIT = (
    "try: `--fit` (`fit_step`) for all of them at once: it compiles the step with"
    " a layer rematerialised under each policy, with microbatches and on each"
    " mesh, and names the fastest configuration that fits."
)
"""The last option whenever there is one: the search that tries them all."""


def test_the_options_name_what_to_try() -> None:
    facts = what_to_change(ATTENTION, fits=False, fraction=0.93)
    options = [f for f in facts if f.startswith("try: ")]
    assert options == [
        "try: rematerialise `LlamaBlock.__call__` (wrap it in `nnx.remat`): the"
        " backward pass recomputes its activations instead of keeping them.",
        "try: fused attention (`jax.nn.dot_product_attention` with"
        " `implementation='cudnn'`): the largest kept activations,"
        " `f32[32,2048,2048]`, have the shape of attention probabilities"
        " (sequence \u00d7 sequence), which a fused kernel never stores.",
        "try: a smaller global batch (`--max-batch` finds the largest that fits):"
        " the activations and the batch shrink with it.",
        "try: a larger tp axis: the parameters and optimizer state split over more"
        " devices.",
        "try: `XLA_CLIENT_MEM_FRACTION=0.93`: the allocator's pool then holds the"
        " step.",
        FIT,
    ]
    # the options come after every fact
    assert facts[-len(options) :] == tuple(options)
    assert all(f.endswith(".") for f in facts)


def test_only_options_whose_trigger_is_present() -> None:
    # off GPU: no allocator fraction, and fused attention names cuDNN as GPU-only
    tpu = what_to_change(
        _breakdown(*ATTENTION.rows, backend="tpu"), fits=False, fraction=0.93
    )
    assert not any("XLA_CLIENT_MEM_FRACTION" in f for f in tpu)
    assert any("; on GPUs with `implementation='cudnn'`" in f for f in tpu)
    # activations not shaped like attention probabilities: no fused attention
    mlp = _breakdown(
        _row("activation kept for backward", 64 * MiB, (8, 2048, 4096), source=BLOCK),
        _row("temporary", 36 * MiB, (9 * MiB,)),
    )
    options = [f for f in what_to_change(mlp) if f.startswith("try: ")]
    assert [o.split(" (")[0].split(":")[1] for o in options] == [
        " rematerialise `LlamaBlock.__call__`",
        " a smaller global batch",
        " `--fit`",
    ]
    # temporaries alone trigger no option
    alone = _breakdown(_row("temporary", 100 * MiB, (25 * MiB,)))
    assert what_to_change(alone) == (
        "temporary is 100% of the peak (100 MiB in 1 buffer).",
    )


def _linked(rows: tuple[BreakdownRow, ...], pairs: int) -> tuple[BreakdownRow, ...]:
    """``rows`` with the first ``pairs`` of each shape's rows linked in pairs
    (one a copy of the other: each names the other in ``aliases``)."""
    out = list(rows)
    first = [i for i, r in enumerate(rows) if r.shape == (32, 2048, 2048)][:pairs]
    second = [i for i, r in enumerate(rows) if r.shape == (4, 8, 2048, 2048)][:pairs]
    for n, (a, b) in enumerate(zip(first, second, strict=True)):
        out[a] = dataclasses.replace(
            out[a], instruction=f"a{n}", aliases=(f"b{n}",), label=f"a{n}"
        )
        out[b] = dataclasses.replace(
            out[b], instruction=f"b{n}", aliases=(f"a{n}",), label=f"b{n}"
        )
    return tuple(out)


def test_one_tensor_in_two_layouts_only_by_lineage() -> None:
    # the same dtype, element count and line, but no row a copy of another:
    # different tensors (a matmul's outputs and a multiply's), no sentence
    assert not any("two layouts" in f for f in what_to_change(ATTENTION, fits=False))
    # 21 pairs linked by their lineage: one sentence, counting the linked rows
    linked = _breakdown(*_linked(ATTENTION.rows, 21))
    (layouts,) = [f for f in what_to_change(linked, fits=False) if "two layouts" in f]
    assert layouts == (
        "`f32[4,8,2048,2048]` \u00d721 and `f32[32,2048,2048]` \u00d721 (activation"
        " kept for backward) from line 120 of model.py are 21 tensors, each in two"
        " layouts (one a copy, bitcast or transpose of the other, both live at the"
        " peak): 42 buffers, 672 MiB, 59% of the peak."
    )
    # an alias to a row of another dtype is no layout change
    cast = _breakdown(
        *(
            dataclasses.replace(r, dtype="bf16") if r.instruction[0] == "b" else r
            for r in linked.rows
        )
    )
    assert not any("two layouts" in f for f in what_to_change(cast, fits=False))


def _phased(peak: int, backward: int | None, update: int | None) -> Breakdown:
    rows = (_row("gradient", 1024, (256,)), _row("optimizer state", 2**20, (2**18,)))
    total = sum(r.nbytes for r in rows)
    return Breakdown(
        "gpu",
        "jit_train",
        peak,
        "fusion",
        total,
        total,
        rows,
        backward_start=backward,
        optimizer_start=update,
    )


def test_why_few_gradients_follows_the_peaks_phase() -> None:
    class Two(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.w = nnx.Linear(256, 256, rngs=rngs)

    plan = mesh_config_report(Two(nnx.Rngs(0)), "fsdp=2,tp=4", optimizer="adamw")
    planned = plan.bytes_by_category["gradients"]
    assert planned > 0
    head = (
        "gradient buffers hold 1 KiB at the peak against the plan's"
        f" {_fmt(planned)} of gradients: "
    )

    def said(breakdown: Breakdown) -> list[str]:
        facts = what_to_change(breakdown, plan)
        return [f for f in facts if f.startswith("gradient buffers hold")]

    # the step: the peak 2 instructions into the backward pass
    assert said(_phased(1512, 1510, 3478)) == [
        head + "the peak is 2 instructions into the backward pass (program point"
        " 1512; the backward pass begins at 1510, the optimizer update at 3478),"
        " so most gradients are not made yet."
    ]
    assert said(_phased(3500, 1510, 3478)) == [
        head + "the optimizer update, begun at program point 3478 (the peak is at"
        " 3500), consumes each gradient as it is made, so they are never all live"
        " at once."
    ]
    assert said(_phased(900, 1510, 3478)) == [
        head + "the peak is in the forward pass (program point 900; the backward"
        " pass begins at 1510), before any gradient is made."
    ]
    # phases not read: nothing said
    assert said(_phased(3500, None, None)) == []
    # with a plan naming tp, the option says how large
    facts = what_to_change(_phased(3500, 1510, 3478), plan)
    assert any(
        f.startswith("try: a larger `tp` axis (`tp=8` with `fsdp=1`)") for f in facts
    )


def _fmt(n: int) -> str:
    from nnx_introspect._render.table import format_bytes

    return format_bytes(n)


def test_the_page_leads_with_what_to_change_as_code() -> None:
    facts = what_to_change(ATTENTION, fits=False)
    page = breakdown_html(ATTENTION, 900 * MiB, facts)
    assert page.startswith("<h2>What to change</h2>")
    assert (
        "<code>LlamaBlock.__call__</code>" in page
        and "`" not in page.split("<h2>What the peak is made of</h2>")[0]
    )
    assert page.index("What to change") < page.index("What the peak is made of")

"""Issue 24: "What to change" names options, says each fact once, nothing on a fit."""

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


def test_one_tensor_in_two_layouts_is_one_sentence() -> None:
    facts = what_to_change(ATTENTION, fits=False)
    (layouts,) = [f for f in facts if "two layouts" in f]
    assert layouts == (
        "`f32[32,2048,2048]` \u00d732 and `f32[4,8,2048,2048]` \u00d721 (activation"
        " kept for backward) from line 120 of model.py are one tensor in two"
        " layouts (the same dtype and element count): 53 buffers, 848 MiB, 74% of"
        " the peak."
    )


def test_gradients_consumed_before_the_peak_are_explained() -> None:
    class Two(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.w = nnx.Linear(256, 256, rngs=rngs)

    plan = mesh_config_report(Two(nnx.Rngs(0)), "fsdp=2,tp=4", optimizer="adamw")
    planned = plan.bytes_by_category["gradients"]
    assert planned > 0
    breakdown = _breakdown(
        _row("gradient", 1024, (256,)),
        _row("optimizer state", planned, (planned // 4,)),
    )
    facts = what_to_change(breakdown, plan)
    gradient = [f for f in facts if f.startswith("gradient buffers hold")]
    assert gradient == [
        "gradient buffers hold 1 KiB at the peak against the plan's"
        f" {_fmt(planned)} of gradients: the optimizer update consumes each"
        " gradient before the peak, so they are never all live at once."
    ]
    # with a plan naming tp, the option says how large
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

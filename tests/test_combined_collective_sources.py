"""Combined collectives keep their arrays' sources; ``"?"`` groups are explained
and counted in the step-time estimate.

Issue 28, item 6: XLA's combiners merge all-gathers and reduce-scatters into
one instruction without ``op_name`` or stack frame, so 36% of the wire bytes of
``llama_tiny_sharded`` (``fsdp=4,tp=2``, ``h100-8``) and 33% on ``v5e-8`` had
no source line. Each array's source is now read from its result's
``get-tuple-element`` (which keeps the replaced collective's metadata), the
result's users or the operand's producers. Hand-written HLO pins each rule,
where it holds and where it does not; a deviceless XLA:GPU compile checks the
weights' gathers against the lines of ``examples.py`` that call each layer,
found here by reading that file's text.
"""

import inspect
import os
import re
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import nnx_introspect
from nnx_introspect import StepMemoryReport, examples
from nnx_introspect._roofline.program import program_roofline
from nnx_introspect._xla.collectives import Collective, Collectives, read_collectives
from nnx_introspect._xla.hlo import parse_module
from nnx_introspect._xla.hlo.lineage import origin
from nnx_introspect._xla.toolchain import cuda_plugin_version
from tests.llama_tiny_layers import LAYERS

MESH = (("fsdp", 4),)
ALL = "replica_groups={{0,1,2,3}}, use_global_device_ids=true"


def meta(line: int) -> str:
    return f', metadata={{op_name="jit(f)/op" source_file="/m.py" source_line={line}}}'


def module(entry: str, *, partitions: int = 4) -> str:
    return (
        f"HloModule jit_t, num_partitions={partitions}\n\n"
        "%add (x: f32[], y: f32[]) -> f32[] {\n"
        "  %x = f32[] parameter(0)\n  %y = f32[] parameter(1)\n"
        "  ROOT %sum = f32[] add(%x, %y)\n}\n\n"
        "ENTRY %main (p0: f32[16], p1: f32[16], p2: f32[16]) -> f32[64] {\n"
        "  %p0 = f32[16]{0} parameter(0)\n"
        "  %p1 = f32[16]{0} parameter(1)\n"
        "  %p2 = f32[16]{0} parameter(2)\n"
        f"{entry}\n}}\n"
    )


# Three arrays gathered by one async all-gather without metadata: array 0's
# get-tuple-element keeps a frame (line 20, though its producer says 10);
# array 1's has none, but a user behind a bitcast does (30); array 2 has
# nothing on either side.
GATHER = module(
    f"  %w0 = f32[16]{{0}} negate(%p0){meta(10)}\n"
    "  %ags = ((f32[16]{0}, f32[16]{0}, f32[16]{0}), (f32[64]{0}, f32[64]{0}, "
    f"f32[64]{{0}})) all-gather-start(%w0, %p1, %p2), channel_id=1, {ALL}, "
    "dimensions={0}\n"
    "  %agd = (f32[64]{0}, f32[64]{0}, f32[64]{0}) all-gather-done(%ags)\n"
    f"  %g0 = f32[64]{{0}} get-tuple-element(%agd), index=0{meta(20)}\n"
    "  %g1 = f32[64]{0} get-tuple-element(%agd), index=1\n"
    "  %g2 = f32[64]{0} get-tuple-element(%agd), index=2\n"
    "  %b1 = f32[64]{0} bitcast(%g1)\n"
    f"  %u1 = f32[64]{{0}} multiply(%b1, %g0){meta(30)}\n"
    "  %u2 = f32[64]{0} add(%u1, %g2)\n"
    "  ROOT %o = f32[64]{0} copy(%u2)"
)


def combined(opcode: str, result: str) -> str:
    """One sync combined ``opcode`` of p0, p1 after ops at line 40; its results
    used by ops at line 50 (their get-tuple-elements without metadata)."""
    extra = "dimensions={0}, " if opcode == "all-gather" else ""
    extra += "to_apply=%add, " if opcode != "all-gather" else ""
    return module(
        f"  %a = f32[16]{{0}} negate(%p0){meta(40)}\n"
        f"  %b = f32[16]{{0}} negate(%p1){meta(40)}\n"
        f"  %c = ({result}, {result}) {opcode}(%a, %b), channel_id=1, "
        f"{extra}{ALL}\n"
        f"  %r0 = {result} get-tuple-element(%c), index=0\n"
        f"  %r1 = {result} get-tuple-element(%c), index=1\n"
        f"  ROOT %o = {result} add(%r0, %r1){meta(50)}"
    )


def one(text: str) -> Collective:
    (row,) = read_collectives(text, MESH).rows
    return row


def lines(row: Collective) -> list[int | None]:
    return [None if s is None else s.line for s in row.sources]


def test_each_array_of_a_combined_gather_gets_its_own_source() -> None:
    row = one(GATHER)
    assert (row.op_name, row.stack) == (None, ())  # the combiner left it none
    assert lines(row) == [20, 30, None]
    assert row.source is not None and row.source.line == 20  # first of a tie
    assert row.source_summary == "m.py:20 \u00d71, m.py:30 \u00d71, ? \u00d71"
    # the wire bytes of the array without a source: a third, each array 256 B
    assert row.unsourced_wire_bytes == Fraction(3, 4) * 256
    found = Collectives("jit_t", MESH, (row,))
    assert found.unsourced_wire_bytes == found.wire_bytes / 3


def test_a_gather_looks_at_users_first_a_reduction_at_producers() -> None:
    gather = one(combined("all-gather", "f32[64]{0}"))
    reduce = one(combined("all-reduce", "f32[16]{0}"))
    assert lines(gather) == [50, 50]  # the users of the gathered weights
    assert lines(reduce) == [40, 40]  # what made the summed gradients
    assert gather.source_summary == reduce.source_summary.replace("40", "50")
    assert gather.source_summary == "m.py:50"  # one source, not counted


def test_a_collective_with_its_own_frame_keeps_it() -> None:
    text = module(
        f"  %a = f32[16]{{0}} negate(%p0){meta(40)}\n"
        f"  ROOT %g = f32[64]{{0}} all-gather(%a), channel_id=1, {ALL}, "
        f"dimensions={{0}}{meta(7)}"
    )
    row = one(text)
    assert (lines(row), row.source is not None and row.source.line) == ([7], 7)
    assert row.unsourced_wire_bytes == 0


def test_a_collective_nothing_points_at_stays_without_a_source() -> None:
    text = module(
        f"  ROOT %g = f32[64]{{0}} all-gather(%p0), channel_id=1, {ALL}, "
        "dimensions={0}"
    )
    row = one(text)
    assert (row.sources, row.source, row.source_summary) == ((None,), None, "")
    assert row.unsourced_wire_bytes == row.total_wire_bytes == 192


def test_a_row_without_array_sources_counts_by_its_source() -> None:
    """A row rebuilt from JSON without ``sources`` counts whole or not at all."""
    row = one(GATHER)
    bare = Collective(**{**row.__dict__, "sources": ()})
    assert bare.unsourced_wire_bytes == 0  # its source (line 20) is kept
    lost = Collective(**{**row.__dict__, "sources": (), "source": None})
    assert lost.unsourced_wire_bytes == lost.total_wire_bytes
    assert Collectives("jit_t", MESH, (row,)).json_data()["rows"][0]["sources"] == [
        {"file": "/m.py", "line": 20, "function": ""},
        {"file": "/m.py", "line": 30, "function": ""},
        None,
    ]


# --- '?' groups: explained, and counted over the axes they lie in ---------------


IRREGULAR = (("fsdp", 4), ("tp", 2))
"""Positions p = 2 * fsdp + tp: {0,1,2,3} is fsdp 0..1 times tp 0..1."""


def irregular_rows() -> Collectives:
    text = module(
        "  ROOT %g = f32[64]{0} all-gather(%p0), channel_id=1, "
        "replica_groups={{0,1,2,3},{4,5,6,7}}, use_global_device_ids=true, "
        f"dimensions={{0}}{meta(465)}",
        partitions=8,
    )
    return read_collectives(text, IRREGULAR)


def test_irregular_groups_are_named_and_spanned() -> None:
    found = irregular_rows()
    (row,) = found.rows
    assert row.axes == ("?",)  # half of fsdp: not a whole axis
    # ring over 4 devices: 3/4 of 256 B; the groups lie inside fsdp x tp
    assert found.irregular_wire_bytes() == ((("fsdp", "tp"), 192),)
    note = found.irregular_note()
    assert note is not None and note in found.table().notes
    assert "192 B on the wire (100.0% of the collectives')" in note
    assert "{0,1,2,3}, {4,5,6,7}, inside fsdp+tp" in note
    assert "m.py:465" in note


def test_whole_axis_groups_have_no_irregular_note() -> None:
    found = read_collectives(GATHER, MESH)
    assert found.irregular_wire_bytes() == ()
    assert found.irregular_note() is None
    assert not any("'?'" in note for note in found.table().notes)


def test_the_roofline_counts_irregular_bytes_over_their_span() -> None:
    found = irregular_rows()
    wire = 450 * 10**6  # 1 ms on NVLink at 4.5e11 B/s
    kwargs = {
        "flops": 1e9,
        "bytes_accessed": 1e6,
        "mesh_axes": IRREGULAR,
        "wire_bytes_by_axes": ((("tp",), wire), (("?",), wire)),
    }
    left = program_roofline("h100-8", **kwargs)  # type: ignore[arg-type]
    assert [(t.axes, t.seconds) for t in left.comm] == [(("tp",), 0.001)]
    assert "left out" in left.assumptions[-1]
    spanned = ((("fsdp", "tp"), wire),)
    counted = program_roofline(
        "h100-8",
        irregular_wire_bytes=spanned,
        **kwargs,  # type: ignore[arg-type]
    )
    assert [(t.axes, t.seconds) for t in counted.comm] == [
        (("tp",), 0.001),
        (("fsdp", "tp"), 0.001),
    ]
    assert "counted over fsdp+tp" in counted.assumptions[-1]
    assert counted.high_seconds == pytest.approx(left.high_seconds + 0.001)
    # the span as the collectives give it: fsdp+tp
    assert found.irregular_wire_bytes()[0][0] == ("fsdp", "tp")


def test_irregular_bytes_on_axes_the_mesh_lacks_are_refused() -> None:
    with pytest.raises(ValueError, match=r"`irregular_wire_bytes` names axes"):
        program_roofline(
            "h100-8",
            flops=1e9,
            bytes_accessed=1e6,
            mesh_axes=IRREGULAR,
            wire_bytes_by_axes=((("?",), 10),),
            irregular_wire_bytes=((("data",), 10),),
        )


# --- a deviceless XLA:GPU compile of llama_tiny_sharded (2 of its 8 layers) -------


def calling_lines() -> dict[str, tuple[str, int]]:
    """``{"q": ("_attention.py", 96), ...}``: the file and line of the Llama's
    source that calls each layer: the attention's (``q``, ``k``, ``v``, ``o``,
    the method the layer inherits) or the layer's own (the MLP's)."""
    found: dict[str, tuple[str, int]] = {}
    layer = examples.LlamaLayer
    for method in (layer.attend, layer.__call__):
        file = os.path.basename(inspect.getsourcefile(method) or "")
        lines_, first = inspect.getsourcelines(method)
        for offset, text in enumerate(lines_):
            for name in re.findall(r"self\.(q|k|v|o|gate|up|down)\(", text):
                found.setdefault(name, (file, first + offset))
    assert sorted(found) == sorted(("q", "k", "v", "o", "gate", "up", "down"))
    return found


@pytest.fixture(scope="module")
def gpu(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[StepMemoryReport, str]]:
    """The report on h100-8 (fsdp=4, tp=2) and the compiler's dumped program."""
    if cuda_plugin_version() is None:
        pytest.skip("the CUDA PJRT plugin is absent")
    dump = tmp_path_factory.mktemp("dump")
    flags = os.environ.get("XLA_FLAGS", "")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(
            "XLA_FLAGS", f"{flags} --xla_dump_to={dump} --xla_dump_hlo_as_text"
        )
        report = nnx_introspect.step_memory_report(
            "tests.llama_tiny_layers:llama_tiny_2_layers_sharded",
            "fsdp=4,tp=2",
            jax.ShapeDtypeStruct((8, 128), jnp.int32),
            loss="lm",
            optimizer="adamw",
            topology="h100-8",
        )
    (path,) = Path(dump).glob("*jit_train*gpu_after_optimizations.txt")
    yield report, path.read_text()


def test_at_most_5_percent_of_the_wire_bytes_lack_a_source_on_h100_8(
    gpu: tuple[StepMemoryReport, str],
) -> None:
    report, text = gpu
    shown = report.program.collectives
    assert shown is not None
    found = read_collectives(text, shown.mesh_axes)
    assert found.wire_bytes == shown.wire_bytes  # the program the report read
    assert any(len(row.shapes) > 8 for row in found.rows)  # a combined one
    assert found.unsourced_wire_bytes <= found.wire_bytes / 20
    assert shown.unsourced_wire_bytes <= shown.wire_bytes / 20


def test_each_gathered_weight_points_at_the_line_that_calls_its_layer(
    gpu: tuple[StepMemoryReport, str],
) -> None:
    """Each array's origin (a parameter, named by JAX in its op_name) against
    the line of the Llama's source (``_llama.py``, or ``_attention.py`` for the
    attention's) that calls that layer, read from the file."""
    _, text = gpu
    expected = calling_lines()
    program = parse_module(text)
    found = read_collectives(text, (("fsdp", 4), ("tp", 2)))
    checked = 0
    for row in found.rows:
        if row.kind != "all-gather" or len(row.shapes) < 2:
            continue
        named = program.instructions[row.name]
        for operand, source in zip(named.operands, row.sources, strict=True):
            name = origin(program, operand).op_name or ""
            layer = re.search(r"\['(q|k|v|o|gate|up|down)'\]\['kernel'\]", name)
            if layer is None:
                continue
            assert source is not None, name
            assert (os.path.basename(source.file), source.line) == expected[layer[1]], (
                name
            )
            checked += 1
    assert checked >= 7 * LAYERS  # 7 kernels in each layer, at least once


# --- a gather inside a loop counts once per trip, in the estimate too ---------------


def test_a_gather_repeated_in_a_loop_is_timed_once_per_trip() -> None:
    """Issue 28, item 8: XLA:GPU gathers the weights inside the accumulation
    loop; each trip's gather is on the wire, and in the communication term."""
    body = (
        "%body (bp: (s32[], f32[16])) -> (s32[], f32[16]) {\n"
        "  %bp = (s32[], f32[16]{0}) parameter(0)\n"
        "  %i = s32[] get-tuple-element(%bp), index=0\n"
        "  %w = f32[16]{0} get-tuple-element(%bp), index=1\n"
        f"  %g = f32[64]{{0}} all-gather(%w), channel_id=1, {ALL}, "
        f"dimensions={{0}}{meta(9)}\n"
        "  %one = s32[] constant(1)\n  %next = s32[] add(%i, %one)\n"
        "  ROOT %t = (s32[], f32[16]{0}) tuple(%next, %w)\n}\n\n"
        "%cond (cp: (s32[], f32[16])) -> pred[] {\n"
        "  %cp = (s32[], f32[16]{0}) parameter(0)\n"
        "  %ci = s32[] get-tuple-element(%cp), index=0\n"
        "  %n = s32[] constant(3)\n"
        "  ROOT %lt = pred[] compare(%ci, %n), direction=LT\n}\n\n"
    )
    text = module(
        "  %z = s32[] constant(0)\n  %init = (s32[], f32[16]{0}) tuple(%z, %p0)\n"
        "  ROOT %loop = (s32[], f32[16]{0}) while(%init), condition=%cond, "
        'body=%body, backend_config={"known_trip_count":{"n":"3"}}'
    ).replace("ENTRY", body + "ENTRY")
    found = read_collectives(text, MESH)
    (row,) = found.rows
    assert (row.count, row.loops) == (3, ("loop",))
    assert row.wire_bytes == 192
    wire = [(axes, round(t.wire_bytes)) for axes, t in found.by_axis().items()]
    assert wire == [(("fsdp",), 3 * 192)]
    estimate = program_roofline(
        "h100-8",
        flops=1e9,
        bytes_accessed=1e6,
        wire_bytes_by_axes=wire,
        mesh_axes=(("fsdp", 8),),
    )
    assert estimate.comm[0].wire_bytes == 3 * 192


# XLA:TPU's async collective fusion, as libtpu writes it: the start fusion's
# AsyncCollectiveStart tuple (operand, result, state), a continuation fusion
# that multiplies something else (line 60) while carrying the result to its
# output element 1, the done fusion, and the gathered weight's user (line 70).
TPU = (
    "%start_c (sp: f32[16]) -> (f32[16], f32[64], u32[]) {\n"
    "  %sp = f32[16]{0} parameter(0)\n"
    f"  %g = f32[64]{{0}} all-gather(%sp), channel_id=1, {ALL}, dimensions={{0}}\n"
    "  ROOT %cs = (f32[16]{0}, f32[64]{0}, u32[]) custom-call(%g), "
    'custom_call_target="AsyncCollectiveStart"\n}\n\n'
    "%cont_c (k0: f32[64], k1: f32[16]) -> (f32[16], f32[64]) {\n"
    "  %k0 = f32[64]{0} parameter(0)\n  %k1 = f32[16]{0} parameter(1)\n"
    "  %m = f32[16]{0} multiply(%k1, %k1)\n"
    "  ROOT %kt = (f32[16]{0}, f32[64]{0}) tuple(%m, %k0)\n}\n\n"
    "%done_c (dp: f32[64]) -> f32[64] {\n"
    "  %dp = f32[64]{0} parameter(0)\n"
    "  ROOT %cd = f32[64]{0} custom-call(%dp), "
    'custom_call_target="AsyncCollectiveDone"\n}\n\n'
)
TPU_ENTRY = (
    "  %st = (f32[16]{0}, f32[64]{0}, u32[]) fusion(%p0), kind=kCustom, calls=%start_c\n"
    "  %r = f32[64]{0} get-tuple-element(%st), index=1\n"
    "  %ct = (f32[16]{0}, f32[64]{0}) fusion(%r, %p1), kind=kCustom, calls=%cont_c, "
    'backend_config={"continuation_config":{}}' + meta(60) + "\n"
    "  %c1 = f32[64]{0} get-tuple-element(%ct), index=1\n"
    "  %dn = f32[64]{0} fusion(%c1), kind=kCustom, calls=%done_c\n"
    f"  ROOT %use = f32[64]{{0}} multiply(%dn, %dn){meta(70)}"
)


def test_a_tpu_async_gather_points_at_its_user_not_the_overlapped_op() -> None:
    text = module(TPU_ENTRY).replace("ENTRY", TPU + "ENTRY")
    row = one(text)
    assert (row.kind, row.form) == ("all-gather", "TPU async collective fusion")
    assert lines(row) == [70]  # not 60, the multiply run while it was in flight
    # the same continuation computing with the gathered value is its user
    computing = text.replace("tuple(%m, %k0)", "tuple(%m, %k2)").replace(
        "  %m = f32[16]{0} multiply(%k1, %k1)\n",
        "  %m = f32[16]{0} multiply(%k1, %k1)\n  %k2 = f32[64]{0} negate(%k0)\n",
    )
    assert lines(one(computing)) == [60]


# --- the step report shows and times the "?" groups ----------------------------------


@pytest.fixture(scope="module")
def microbatched() -> StepMemoryReport:
    """2 microbatches on h100-8: the loss's take_along_axis makes "?" groups."""
    if cuda_plugin_version() is None:
        pytest.skip("the CUDA PJRT plugin is absent")
    return nnx_introspect.step_memory_report(
        "tests.llama_tiny_layers:llama_tiny_2_layers_sharded",
        "fsdp=4,tp=2",
        jax.ShapeDtypeStruct((8, 128), jnp.int32),
        loss="lm",
        optimizer="adamw",
        topology="h100-8",
        microbatches=2,
    )


def test_the_step_report_explains_the_irregular_groups(
    microbatched: StepMemoryReport,
) -> None:
    collectives = microbatched.program.collectives
    assert collectives is not None
    note = collectives.irregular_note()
    assert note is not None and note.startswith("Axes '?'")
    assert note in microbatched.to_markdown()


def test_the_estimate_counts_the_irregular_bytes_over_the_axes_they_lie_in(
    microbatched: StepMemoryReport,
) -> None:
    """Each communication term = the whole axes' wire bytes + the "?" groups'
    bytes lying inside those axes (left out before issue 28, item 6)."""
    collectives = microbatched.program.collectives
    roofline = microbatched.roofline
    assert collectives is not None and roofline is not None
    regular = {
        axes: wire for axes, _, wire in microbatched.program.collective_wire_bytes or ()
    }
    irregular = dict(collectives.irregular_wire_bytes())
    assert irregular  # the case has some
    for term in roofline.comm:
        expected = regular.get(term.axes, 0) + irregular.get(term.axes, 0)
        assert term.wire_bytes == expected, term.axes
    assert sum(irregular.values()) > 0
    assert any("not whole mesh axes" in line for line in roofline.assumptions)

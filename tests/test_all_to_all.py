"""All-to-all and ragged all-to-all: their bytes, worst-case buffers and time.

Issue 43: tunix's Qwen3 MoE dispatches its tokens to the experts' devices with
``jax.lax.ragged_all_to_all`` inside a ``shard_map`` on TPU; the reader refused
the program ("not one of the collectives this code counts"), so the step had
no collectives, no time estimate and no MFU. Here, without tunix: hand-written
HLO pins each form XLA writes a ragged all-to-all in (sync, XLA:GPU's
``-start``/``-done`` pair, XLA:TPU's ``async-start`` wrapper, a loop), then a
small MoE-like dispatch and combine, written as tunix writes them, compiled
deviceless for ``v5p-16`` and held against hand arithmetic:

* a dispatch sends each token's ``top_k`` rows: ``tokens x top_k x d_model x
  4`` bytes per device (f32), received into a buffer sized statically for the
  worst case, ``min(top_k, local experts) x tokens x devices`` rows, as tunix
  sizes it;
* the combine sends the rows back, into a buffer of ``tokens x top_k`` rows;
* an all-to-all of a block sends ``(n-1)/n`` of it.
"""

import math
from fractions import Fraction
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from nnx_introspect._roofline.program import program_roofline
from nnx_introspect._step.step_records import collectives_from_json
from nnx_introspect._xla.collectives import (
    Collective,
    Collectives,
    compiled_hlo_text,
    read_collectives,
    wire_factor,
)
from nnx_introspect._xla.dump import dump_options, module_text
from nnx_introspect._xla.toolchain import (
    cuda_plugin_version,
    libtpu_version,
    topology_mesh,
)

needs_libtpu = pytest.mark.skipif(
    libtpu_version() is None, reason="libtpu is not installed (the tpu extra)"
)
needs_plugin = pytest.mark.skipif(
    cuda_plugin_version() is None,
    reason="the CUDA PJRT plugin is not installed (the gpu extra)",
)

DEVICES, TOKENS, TOP_K, D_MODEL, EXPERTS = 8, 128, 2, 256, 8
"""One expert per device (``fsdp=8``), 128 tokens per device, top-2, f32."""
DISPATCH = TOKENS * TOP_K * D_MODEL * 4  # 262,144 B sent per device
WORST = min(TOP_K, EXPERTS // DEVICES) * TOKENS * DEVICES * D_MODEL * 4  # 1 MiB
AXES = (("fsdp", DEVICES),)


# --- hand-written HLO: every form ------------------------------------------------


def module(body: str, before: str = "") -> str:
    """A module of 8 partitions whose ENTRY holds ``body``: ``%x`` the send
    buffer f32[256,256], ``%buf`` a receive buffer f32[1024,256], ``%o`` s32[8]
    offsets and sizes."""
    return (
        "HloModule jit_moe, num_partitions=8\n\n"
        f"{before}"
        "ENTRY %main (x: f32[256,256], o: s32[8]) -> f32[1024,256] {\n"
        "  %x = f32[256,256]{1,0} parameter(0)\n"
        "  %o = s32[8]{0} parameter(1)\n"
        "  %zero = f32[] constant(0)\n"
        "  %buf = f32[1024,256]{1,0} broadcast(%zero), dimensions={}\n"
        f"{body}\n}}\n"
    )


GROUPS = "replica_groups={{0,1,2,3,4,5,6,7}}"
RAGGED = f"ragged-all-to-all(%x, %buf, %o, %o, %o, %o), channel_id=1, {GROUPS}"


def one(text: str) -> Collective:
    (row,) = read_collectives(text, AXES).rows
    return row


def test_a_dispatch_counts_its_payload_and_states_its_worst_case_buffer() -> None:
    row = one(module(f"  ROOT %r = f32[1024,256]{{1,0}} {RAGGED}"))
    assert (row.kind, row.form, row.axes, row.group_size) == (
        "ragged-all-to-all",
        "sync",
        ("fsdp",),
        8,
    )
    assert row.nbytes == DISPATCH == 262_144  # the send buffer, all of it sent
    assert row.worst_case_receive_bytes == row.result_bytes == WORST == 1 << 20
    assert (row.dtypes, row.shapes) == (("f32",), ((256, 256),))
    # send and receive buffers, then four s32[8]
    assert row.operand_bytes == DISPATCH + WORST + 4 * 32
    assert row.wire_bytes == Fraction(7, 8) * DISPATCH  # 1/8 stays on the device


def test_a_combine_sends_at_most_what_its_buffer_receives() -> None:
    """The combine's send buffer is the dispatch's 1 MiB receive buffer; what
    it sends back fits the 256 KiB each device receives into, so on average a
    device sends 256 KiB: the smaller buffer."""
    body = (
        "  %back = f32[256,256]{1,0} broadcast(%zero), dimensions={}\n"
        "  ROOT %r = f32[256,256]{1,0} ragged-all-to-all(%buf, %back, %o, %o, %o, "
        f"%o), channel_id=1, {GROUPS}"
    )
    row = one(module(body))
    assert row.nbytes == DISPATCH and row.shapes == ((256, 256),)
    assert row.worst_case_receive_bytes == DISPATCH


def test_xla_gpu_start_done_pair_is_one_row() -> None:
    body = (
        "  %s = ((f32[256,256]{1,0}, f32[1024,256]{1,0}, s32[8]{0}, s32[8]{0}, "
        "s32[8]{0}, s32[8]{0}), f32[1024,256]{1,0}) ragged-all-to-all-start(%x, "
        f"%buf, %o, %o, %o, %o), channel_id=1, {GROUPS}\n"
        "  ROOT %d = f32[1024,256]{1,0} ragged-all-to-all-done(%s)"
    )
    row = one(module(body))
    assert (row.name, row.form, row.nbytes) == ("s", "async", DISPATCH)
    assert row.worst_case_receive_bytes == WORST


def test_xla_tpu_async_wrapper_in_a_loop_counts_each_trip() -> None:
    """XLA:TPU wraps it in an ``async-start`` of a computation (tunix's step);
    a while loop of 3 trips runs it 3 times."""
    wrapped = (
        "%wrapped (a: f32[256,256], b: f32[1024,256], c: s32[8]) -> f32[1024,256] {\n"
        "  %a = f32[256,256]{1,0} parameter(0)\n"
        "  %b = f32[1024,256]{1,0} parameter(1)\n"
        "  %c = s32[8]{0} parameter(2)\n"
        "  ROOT %rag = f32[1024,256]{1,0} ragged-all-to-all(%a, %b, %c, %c, %c, "
        f"%c), channel_id=1, {GROUPS}\n"
        "}\n\n"
        "%body (t: (f32[256,256], f32[1024,256], s32[8])) -> "
        "(f32[256,256], f32[1024,256], s32[8]) {\n"
        "  %t = (f32[256,256]{1,0}, f32[1024,256]{1,0}, s32[8]{0}) parameter(0)\n"
        "  %a = f32[256,256]{1,0} get-tuple-element(%t), index=0\n"
        "  %b = f32[1024,256]{1,0} get-tuple-element(%t), index=1\n"
        "  %c = s32[8]{0} get-tuple-element(%t), index=2\n"
        "  %s = ((f32[256,256]{1,0}, f32[1024,256]{1,0}, s32[8]{0}), "
        "f32[1024,256]{1,0}, u32[]) async-start(%a, %b, %c), calls=%wrapped\n"
        "  %d = f32[1024,256]{1,0} async-done(%s)\n"
        "  ROOT %out = (f32[256,256]{1,0}, f32[1024,256]{1,0}, s32[8]{0}) "
        "tuple(%a, %d, %c)\n"
        "}\n\n"
        "%cond (u: (f32[256,256], f32[1024,256], s32[8])) -> pred[] {\n"
        "  %u = (f32[256,256]{1,0}, f32[1024,256]{1,0}, s32[8]{0}) parameter(0)\n"
        "  ROOT %p = pred[] constant(true)\n"
        "}\n\n"
    )
    body = (
        "  %init = (f32[256,256]{1,0}, f32[1024,256]{1,0}, s32[8]{0}) "
        "tuple(%x, %buf, %o)\n"
        "  %w = (f32[256,256]{1,0}, f32[1024,256]{1,0}, s32[8]{0}) while(%init), "
        'condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"3"}}\n'
        "  ROOT %r = f32[1024,256]{1,0} get-tuple-element(%w), index=1"
    )
    found = read_collectives(module(body, before=wrapped), AXES)
    (row,) = found.rows
    assert (row.name, row.form, row.count) == ("rag", "async wrapper", 3)
    assert row.total_bytes == 3 * DISPATCH
    assert found.by_kind()["ragged-all-to-all"].wire_bytes == 3 * row.wire_bytes


def test_the_report_says_the_worst_case_buffer_and_round_trips_json() -> None:
    dispatch = one(module(f"  ROOT %r = f32[1024,256]{{1,0}} {RAGGED}"))
    found = Collectives("jit_moe", AXES, (dispatch,))
    markdown = found.to_markdown()
    assert "ragged-all-to-all" in markdown
    assert "statically for the worst case" in markdown
    assert "1 MiB for a 256 KiB payload (4.0x; 1 run)" in markdown
    data = found.json_data()
    assert data["rows"][0]["worst_case_receive_bytes"] == WORST
    assert data["rows"][0]["bytes"] == DISPATCH
    back = collectives_from_json(data)
    assert back is not None
    assert back.rows[0].worst_case_receive_bytes == WORST
    assert back.json_data() == data
    # a plain all-to-all has no such buffer
    assert wire_factor("ragged-all-to-all", 8) == wire_factor("all-to-all", 8)


# --- a real compile: an MoE dispatch and combine on XLA:TPU ----------------------

SOURCE = Path(__file__).read_text().splitlines()


def line_of(marker: str) -> int:
    (found,) = [i + 1 for i, line in enumerate(SOURCE) if line.endswith(marker)]
    return found


def moe_exchange(x: jax.Array, experts: jax.Array) -> jax.Array:
    """One device's tokens to the experts' devices and back, as tunix's
    ``MoELayer`` writes its Megablox path (one expert per device): each token
    repeated ``TOP_K`` times and sorted by expert, the send sizes gathered from
    every device, a ragged all-to-all into a worst-case buffer, the expert
    (here a scale) and a ragged all-to-all back."""
    me = jax.lax.axis_index("fsdp")
    rows = jnp.repeat(x, TOP_K, axis=0)  # [tokens * top_k, d_model]
    chosen = experts.reshape(-1)
    order = jnp.argsort(chosen)
    rows = rows[order]
    sizes = jnp.bincount(chosen, length=EXPERTS).astype(jnp.int32)
    every = jax.lax.all_gather(sizes, "fsdp")  # [devices, devices]
    in_offsets = jnp.cumsum(every, axis=1) - every
    out_offsets = jnp.cumsum(every, axis=0) - every
    buffer = jnp.zeros((WORST // (D_MODEL * 4), D_MODEL), x.dtype)
    received = jax.lax.ragged_all_to_all(  # dispatch
        rows,
        buffer,
        in_offsets[me],
        every[me],
        out_offsets[me],
        every[:, me],
        axis_name="fsdp",
    )
    done = received * 2.0
    back = jnp.zeros_like(rows)
    returned = jax.lax.ragged_all_to_all(  # combine
        done,
        back,
        out_offsets.T[me],
        every[:, me],
        in_offsets.T[me],
        every[me],
        axis_name="fsdp",
    )
    mixed: jax.Array = jax.lax.all_to_all(x, "fsdp", 0, 0, tiled=True)  # all-to-all
    tokens = returned[jnp.argsort(order)].reshape(TOKENS, TOP_K, D_MODEL)
    out: jax.Array = tokens.sum(1) + mixed
    return out


def compile_exchange(topology: str, dump_to: Path | None = None) -> str:
    """The optimized program, printed by jaxlib or (``dump_to``) as the
    compiler dumped it. XLA:TPU offloads the sort's scatter to v5p's SparseCore
    with an ``async-update`` of four operands that jaxlib 0.10.2 cannot read
    back to print (as in tunix's step), so there the text is read from the
    compile's dump, as a step report with ``breakdown=True`` reads it."""
    mesh, _ = topology_mesh(topology, AXES)
    split = NamedSharding(mesh, P("fsdp"))
    x = jax.ShapeDtypeStruct((DEVICES * TOKENS, D_MODEL), jnp.float32, sharding=split)
    experts = jax.ShapeDtypeStruct((DEVICES * TOKENS, TOP_K), jnp.int32, sharding=split)
    step = jax.jit(
        jax.shard_map(
            moe_exchange,
            mesh=mesh,
            in_specs=(P("fsdp"), P("fsdp")),
            out_specs=P("fsdp"),
        )
    )
    if dump_to is None:
        return compiled_hlo_text(step.lower(x, experts).compile())
    step.lower(x, experts).compile(compiler_options=dump_options(dump_to))
    return module_text(dump_to, backend=str(mesh.devices.flat[0].platform))


def check_exchange(found: Collectives) -> None:
    """Two ragged all-to-alls and one all-to-all, each by hand, at its line."""
    ragged = [row for row in found.rows if row.kind == "ragged-all-to-all"]
    plain = [row for row in found.rows if row.kind == "all-to-all"]
    assert len(ragged) == 2 and len(plain) == 1
    lines = {
        line_of("# dispatch"): ("dispatch", WORST),
        line_of("# combine"): ("combine", DISPATCH),
    }
    seen = set()
    for row in ragged:
        assert row.source is not None and row.source.file == __file__
        what, buffer = lines[row.source.line]
        seen.add(what)
        assert row.axes == ("fsdp",) and row.count == 1
        # tokens x top_k x d_model x 4 bytes, both ways
        assert row.nbytes == DISPATCH == TOKENS * TOP_K * D_MODEL * 4, what
        assert row.worst_case_receive_bytes == buffer, what
        assert row.wire_bytes == Fraction(DEVICES - 1, DEVICES) * DISPATCH
    assert seen == {"dispatch", "combine"}
    (row,) = plain
    assert row.source is not None and row.source.line == line_of("# all-to-all")
    assert (row.axes, row.nbytes) == (("fsdp",), TOKENS * D_MODEL * 4)
    assert row.wire_bytes == Fraction(7, 8) * TOKENS * D_MODEL * 4


@needs_libtpu
def test_moe_exchange_on_xla_tpu_v5p_16_moves_what_hand_arithmetic_says(
    tmp_path: Path,
) -> None:
    text = compile_exchange("v5p-16", tmp_path)
    assert "ragged-all-to-all(" in text
    found = read_collectives(text, AXES)
    check_exchange(found)
    # the step-time estimate counts them: every fsdp byte over v5p-16's 2x2x2
    # torus, fsdp on all three dims of 2 chips (no wraparound): 3 links
    wire = found.by_axis()[("fsdp",)].wire_bytes
    # and the sizes' all-gather, which XLA:TPU runs as an all-reduce
    assert {row.kind for row in found.rows} == {
        "ragged-all-to-all",
        "all-to-all",
        "all-reduce",
    }
    est = program_roofline(
        "v5p-16",
        flops=1e6,
        bytes_accessed=1e6,
        wire_bytes_by_axes=[
            (axes, round(total.wire_bytes)) for axes, total in found.by_axis().items()
        ],
        mesh_axes=AXES,
    )
    (term,) = est.comm
    assert term.links == 3
    assert math.isclose(term.seconds, round(wire) / (3 * 100e9), rel_tol=1e-12)
    # the ragged ones' share: two payloads, 7/8 of each
    ragged = found.by_kind()["ragged-all-to-all"].wire_bytes
    assert ragged == 2 * Fraction(7, 8) * DISPATCH


@needs_plugin
def test_moe_exchange_on_deviceless_xla_gpu_h100_8_is_read_at_its_starts(
    tmp_path: Path,
) -> None:
    """jaxlib prints XLA:GPU's async pairs as ``ragged-all-to-all-start`` /
    ``-done``, the compiler's dump as ``async-start`` wrappers: each is one
    row, and the same one."""
    for text, form in (
        (compile_exchange("h100-8"), "async"),
        (compile_exchange("h100-8", tmp_path), "async wrapper"),
    ):
        found = read_collectives(text, AXES)
        ragged = [row for row in found.rows if row.kind == "ragged-all-to-all"]
        assert {row.form for row in ragged} == {form}
        assert sorted(row.worst_case_receive_bytes or 0 for row in ragged) == [
            DISPATCH,
            WORST,
        ]
        assert all(row.nbytes == DISPATCH for row in ragged)
        # XLA:GPU keeps no metadata on them: the source is the line that uses
        # the result (the user's, in moe_exchange)
        assert all(
            row.source is not None
            and (row.source.file, row.source.function) == (__file__, "moe_exchange")
            for row in ragged
        )

"""The collectives of compiled SPMD steps: bytes, wire bytes, mesh axes, counts.

Two halves. Hand-written HLO text pins every form of replica groups, async
pair, wrapper, XLA:TPU fusion and while loop that the reader must know, each
against groups, bytes and trip counts derived by hand from XLA's documented
semantics. Then real compiles: an MLP with hand-chosen shardings on XLA:CPU
(8 virtual devices), a deviceless XLA:GPU (``h100-8``) and XLA:TPU (``v5e-4``),
and ``llama_tiny`` under FSDP on XLA:CPU, each against a hand derivation of
what the step must move; every byte XLA moves differently is explained where
it is asserted.
"""

import json
import math
from fractions import Fraction
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from nnx_introspect._xla.collectives import (
    Collective,
    CollectiveFormatError,
    Collectives,
    compiled_hlo_text,
    read_collectives,
    wire_factor,
)
from nnx_introspect._xla.toolchain import (
    cuda_plugin_version,
    libtpu_version,
    topology_mesh,
)
from nnx_introspect.examples import llama_tiny

needs_plugin = pytest.mark.skipif(
    cuda_plugin_version() is None,
    reason="the CUDA PJRT plugin is not installed (the gpu extra)",
)
needs_libtpu = pytest.mark.skipif(
    libtpu_version() is None, reason="libtpu is not installed (the tpu extra)"
)

MESH = (("data", 2), ("fsdp", 4))
"""Positions p = 4 * data + fsdp: the data=0 row is 0..3, the data=1 row 4..7."""
FSDP_GROUPS = ((0, 1, 2, 3), (4, 5, 6, 7))
DATA_GROUPS = ((0, 4), (1, 5), (2, 6), (3, 7))

ADD = """%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %sum = f32[] add(%x, %y)
}
"""


def hlo(entry: str, *, before: str = "", partitions: int = 8, tail: str = "") -> str:
    """A module as XLA prints one: header, ``tail`` (stack-frame tables), then
    the computations and ENTRY."""
    return (
        f"HloModule jit_t, is_scheduled=true, num_partitions={partitions}\n\n"
        f"{tail}{ADD}\n{before}ENTRY %main (p: f32[8], q: f32[64]) -> f32[64] {{\n"
        "  %p = f32[8]{0} parameter(0)\n"
        "  %q = f32[64]{0} parameter(1)\n"
        f"{entry}\n}}\n"
    )


def one(text: str, mesh: tuple[tuple[str, int], ...] = MESH) -> Collective:
    rows = read_collectives(text, mesh).rows
    assert len(rows) == 1, [row.name for row in rows]
    return rows[0]


# --- replica groups in every form --------------------------------------------


@pytest.mark.parametrize(
    ("groups", "expected", "axes"),
    [
        # explicit lists, as written
        ("{{0,1,2,3},{4,5,6,7}}", FSDP_GROUPS, ("fsdp",)),
        ("{{0,4},{1,5},{2,6},{3,7}}", DATA_GROUPS, ("data",)),
        # iota: arange(8).reshape(2, 4) cut into 2 groups of 4: the rows
        ("[2,4]<=[8]", FSDP_GROUPS, ("fsdp",)),
        # arange(8).reshape(2, 4).T = [[0,4],[1,5],[2,6],[3,7]]: the columns
        ("[4,2]<=[2,4]T(1,0)", DATA_GROUPS, ("data",)),
        # XLA's mesh form: its axis_1 (size 4) varies within a group: the rows
        ("mesh['axis_0'=2,'axis_1'=4] {'axis_1'}", FSDP_GROUPS, ("fsdp",)),
        ("mesh['axis_0'=2,'axis_1'=4] {'axis_0'}", DATA_GROUPS, ("data",)),
        # XLA:CPU's line for an FSDP all-gather on this mesh: the devices are
        # arange(8).reshape(2,4).T laid out as (4,1,2), [[0,4],[1,5],[2,6],[3,7]];
        # grouping axis_0 (size 4) keeps axis_2: {0,1,2,3} and {4,5,6,7}. XLA's
        # axis_0 is the mesh's second axis: the names are not positional.
        (
            "mesh['axis_0'=4,'axis_1'=1,'axis_2'=2], device_ids=([2,4]T(1,0)) "
            "{'axis_0'}",
            FSDP_GROUPS,
            ("fsdp",),
        ),
        (
            "mesh['axis_0'=4,'axis_1'=1,'axis_2'=2], device_ids=([2,4]T(1,0)) "
            "{'axis_2'}",
            DATA_GROUPS,
            ("data",),
        ),
        # device ids listed: [[0,4],[1,5],[2,6],[3,7]]; axis_0 varies: columns
        (
            "mesh['axis_0'=4,'axis_1'=2], device_ids=(0,4,1,5,2,6,3,7) {'axis_0'}",
            FSDP_GROUPS,
            ("fsdp",),
        ),
        # sub-axes of an 8-device axis: (1)2 is the major half (reshape [1,2,4],
        # group the 2), (2)4 the minor four, (2)2 the middle pair
        ("mesh['axis_0'=8] {'axis_0':(1)2}", DATA_GROUPS, ("data",)),
        ("mesh['axis_0'=8] {'axis_0':(2)4}", FSDP_GROUPS, ("fsdp",)),
        ("mesh['axis_0'=8] {'axis_0':(2)2}", ((0, 2), (1, 3), (4, 6), (5, 7)), ("?",)),
        # every device, in one group: both axes
        ("{}", (tuple(range(8)),), ("data", "fsdp")),
        (
            "mesh['axis_0'=8,'axis_1'=1] {'axis_0'}",
            (tuple(range(8)),),
            ("data", "fsdp"),
        ),
        # pairs inside the fsdp rows: half an axis, not a whole one
        ("{{0,1},{2,3},{4,5},{6,7}}", ((0, 1), (2, 3), (4, 5), (6, 7)), ("?",)),
        # groups that span different axes
        ("{{0,1,2,3},{4},{5},{6},{7}}", ((0, 1, 2, 3), (4,), (5,), (6,), (7,)), ("?",)),
    ],
)
def test_replica_groups_in_any_form_map_back_to_mesh_axes(
    groups: str, expected: tuple[tuple[int, ...], ...], axes: tuple[str, ...]
) -> None:
    row = one(
        hlo(
            f"  ROOT %ar = f32[64]{{0}} all-reduce(%q), channel_id=1, "
            f"replica_groups={groups}, use_global_device_ids=true, to_apply=%add"
        )
    )
    assert tuple(sorted(row.groups)) == tuple(sorted(expected))
    assert row.axes == axes
    assert row.group_size == max(len(g) for g in expected)


def test_sub_axes_listed_minor_first_are_grouped_in_that_order() -> None:
    """``{'axis_0':(4)2,'axis_0':(1)2}`` on 8 devices: [8] splits into [2,2,2];
    both outer halves are grouped, the middle one kept, and members follow the
    listed order (the minor pair first): 0,4,1,5 (as XLA's explicit list for
    ``all_gather(x, ("c", "a"))`` on a 2x2x2 mesh reads)."""
    row = one(
        hlo(
            "  ROOT %ar = f32[64]{0} all-reduce(%q), channel_id=1, replica_groups="
            "mesh['axis_0'=8] {'axis_0':(4)2,'axis_0':(1)2}, "
            "use_global_device_ids=true, to_apply=%add"
        ),
        (("a", 2), ("b", 2), ("c", 2)),
    )
    assert row.groups == ((0, 4, 1, 5), (2, 6, 3, 7))
    assert row.axes == ("a", "c")


# --- bytes and wire bytes -------------------------------------------------------


def test_bytes_and_wire_bytes_of_each_kind() -> None:
    """Groups of all 8 devices (``{}``), f32 (4 bytes an element):

    * all-gather f32[8] -> f32[64]: bytes = result = 256, wire 7/8 * 256 = 224;
    * reduce-scatter f32[64] -> f32[8]: bytes = operand = 256, wire 224;
    * all-reduce f32[64]: 256, wire 2 * 7/8 * 256 = 448;
    * all-to-all f32[64]: 256, wire 224;
    * collective-permute f32[8] along fsdp: its 32 bytes, sent once.
    """
    text = hlo(
        "  %ag = f32[64]{0} all-gather(%p), channel_id=1, replica_groups={}, "
        "dimensions={0}, use_global_device_ids=true\n"
        "  %rs = f32[8]{0} reduce-scatter(%q), channel_id=2, replica_groups={}, "
        "dimensions={0}, use_global_device_ids=true, to_apply=%add\n"
        "  %ar = f32[64]{0} all-reduce(%q), channel_id=3, replica_groups={}, "
        "use_global_device_ids=true, to_apply=%add\n"
        "  %a2a = f32[64]{0} all-to-all(%q), channel_id=4, replica_groups={}, "
        "dimensions={0}\n"
        "  %cp = f32[8]{0} collective-permute(%p), channel_id=5, "
        "source_target_pairs={{0,1},{1,2},{2,3},{3,0},{4,5},{5,6},{6,7},{7,4}}\n"
        "  ROOT %r = f32[64]{0} add(%ar, %a2a)"
    )
    found = read_collectives(text, MESH)
    by_name = {row.name: row for row in found.rows}
    expected = {
        "ag": ("all-gather", 256, 224, 256, 32),
        "rs": ("reduce-scatter", 256, 224, 32, 256),
        "ar": ("all-reduce", 256, 448, 256, 256),
        "a2a": ("all-to-all", 256, 224, 256, 256),
        "cp": ("collective-permute", 32, 32, 32, 32),
    }
    for name, (kind, nbytes, wire, result, operand) in expected.items():
        row = by_name[name]
        assert (row.kind, row.nbytes, row.wire_bytes) == (kind, nbytes, Fraction(wire))
        assert (row.result_bytes, row.operand_bytes) == (result, operand), name
        assert row.count == 1 and row.form == "sync"
    permute = by_name["cp"]
    assert permute.source_target_pairs == (
        (0, 1), (1, 2), (2, 3), (3, 0), (4, 5), (5, 6), (6, 7), (7, 4),
    )  # fmt: skip
    # the ring along each fsdp row connects that row: the fsdp axis
    assert permute.groups == FSDP_GROUPS and permute.axes == ("fsdp",)
    assert found.nbytes == 256 * 4 + 32
    assert found.wire_bytes == 224 * 3 + 448 + 32
    assert found.by_kind()["all-reduce"].wire_bytes == 448
    assert found.by_axis()[("data", "fsdp")].nbytes == 256 * 4


def test_wire_factor_is_the_ring_models() -> None:
    for n in (1, 2, 3, 8, 256):
        one_way = Fraction(n - 1, n)
        assert wire_factor("all-gather", n) == one_way
        assert wire_factor("reduce-scatter", n) == one_way
        assert wire_factor("all-to-all", n) == one_way
        assert wire_factor("all-reduce", n) == 2 * one_way
        assert wire_factor("collective-permute", n) == 1


def test_an_all_reduce_whose_bytes_do_not_divide_keeps_exact_wire_bytes() -> None:
    """f32[7] over 3 devices: 28 bytes, 2 * 2/3 * 28 = 112/3, kept exact; JSON
    gives the nearest float."""
    text = hlo(
        "  %r7 = f32[7]{0} slice(%q), slice={[0:7]}\n"
        "  ROOT %ar = f32[7]{0} all-reduce(%r7), channel_id=1, "
        "replica_groups={{0,1,2}}, use_global_device_ids=true, to_apply=%add",
        partitions=3,
    )
    row = one(text, (("x", 3),))
    assert row.wire_bytes == Fraction(112, 3)
    data = json.loads(read_collectives(text, (("x", 3),)).to_json())
    assert data["rows"][0]["wire_bytes"] == pytest.approx(112 / 3)
    assert data["rows"][0]["bytes"] == 28


def test_element_sizes_and_packed_sub_byte_types() -> None:
    """bf16: 2 bytes; s4 unpacked: a byte each; s4 with E(4): two a byte; pred: 1."""
    text = hlo(
        "  %b = bf16[64]{0} convert(%q)\n"
        "  %agb = bf16[512]{0} all-gather(%b), channel_id=1, replica_groups={}, "
        "dimensions={0}, use_global_device_ids=true\n"
        "  %i = s4[64]{0} convert(%q)\n"
        "  %agi = s4[512]{0} all-gather(%i), channel_id=2, replica_groups={}, "
        "dimensions={0}, use_global_device_ids=true\n"
        "  %k = s4[64]{0:E(4)} convert(%q)\n"
        "  %agk = s4[512]{0:E(4)} all-gather(%k), channel_id=3, replica_groups={}, "
        "dimensions={0}, use_global_device_ids=true\n"
        "  %m = pred[64]{0} convert(%q)\n"
        "  %agm = pred[512]{0} all-gather(%m), channel_id=4, replica_groups={}, "
        "dimensions={0}, use_global_device_ids=true\n"
        "  ROOT %r = f32[64]{0} copy(%q)"
    )
    sizes = {row.name: row.nbytes for row in read_collectives(text, MESH).rows}
    assert sizes == {"agb": 1024, "agi": 512, "agk": 256, "agm": 512}


# --- async forms, wrappers and XLA:TPU's fusions ------------------------------


def test_an_async_pair_is_one_row_with_the_dones_result() -> None:
    """XLA:GPU's start's shape is (operands, results); the result is the done's."""
    text = hlo(
        "  %ags = ((f32[8]{0}, f32[8]{0}), (f32[64]{0}, f32[64]{0})) "
        "all-gather-start(%p, %p), channel_id=1, replica_groups=[2,4]<=[8], "
        "dimensions={0}, use_global_device_ids=true\n"
        "  %agd = (f32[64]{0}, f32[64]{0}) all-gather-done(%ags)\n"
        "  %rss = ((f32[64]{0}), f32[16]{0}) reduce-scatter-start(%q), channel_id=2, "
        "replica_groups=[2,4]<=[8], use_global_device_ids=true, dimensions={0}, "
        "to_apply=%add\n"
        "  %rsd = f32[16]{0} reduce-scatter-done(%rss)\n"
        "  %cps = (f32[8]{0}, f32[8]{0}, u32[], u32[]) collective-permute-start(%p), "
        "channel_id=3, source_target_pairs={{0,4},{4,0}}\n"
        "  %cpd = f32[8]{0} collective-permute-done(%cps)\n"
        "  ROOT %r = f32[64]{0} get-tuple-element(%agd), index=0"
    )
    rows = read_collectives(text, MESH).rows
    assert [(r.name, r.kind, r.form) for r in rows] == [
        ("ags", "all-gather", "async"),
        ("rss", "reduce-scatter", "async"),
        ("cps", "collective-permute", "async"),
    ]
    # two gathered f32[64]: 2 * 64 * 4; groups of 4: wire 3/4 of that
    assert (rows[0].nbytes, rows[0].wire_bytes) == (512, Fraction(384))
    assert rows[0].axes == ("fsdp",)
    assert rows[0].type_str == "(f32[64], f32[64])"
    # the reduce-scatter's input f32[64]: 256 bytes
    assert (rows[1].nbytes, rows[1].result_bytes) == (256, 64)
    # the permute swaps 0 and 4: one pair of the data axis; the other
    # positions are in no pair, so the one group is {0, 4}
    assert (rows[2].nbytes, rows[2].groups, rows[2].axes) == (32, ((0, 4),), ("data",))


def test_an_async_start_wrapping_a_computation_counts_the_collective_inside() -> None:
    wrapped = (
        "%wrapped (w: f32[8]) -> f32[64] {\n"
        "  %w = f32[8]{0} parameter(0)\n"
        "  ROOT %inner = f32[64]{0} all-gather(%w), channel_id=1, replica_groups={}, "
        "dimensions={0}, use_global_device_ids=true\n"
        "}\n\n"
    )
    text = hlo(
        "  %as = ((f32[8]{0}), f32[64]{0}, s32[]) async-start(%p), calls=%wrapped\n"
        "  %au = ((f32[8]{0}), f32[64]{0}, s32[]) async-update(%as), calls=%wrapped\n"
        "  ROOT %ad = f32[64]{0} async-done(%au), calls=%wrapped",
        before=wrapped,
    )
    row = one(text)
    assert (row.name, row.form, row.nbytes, row.count) == (
        "inner",
        "async wrapper",
        256,
        1,
    )


TPU_FUSION = """%start_c (a: f32[8]) -> (f32[8], f32[64], s32[2], u32[]) {
  %a = f32[8]{0} parameter(0)
  %ag.1 = f32[64]{0} all-gather(%a), channel_id=4, replica_groups={}, dimensions={0}, use_global_device_ids=true, frontend_attributes={chain_id="0"}, metadata={op_name="w[0]"}, backend_config={"async_collective_fusion_config":{"flag_start":"-1","flag_end":"-1"}}
  ROOT %cc.1 = (f32[8]{0}, f32[64]{0}, s32[2]{0}, u32[]) custom-call(%ag.1), custom_call_target="AsyncCollectiveStart"
}

%cont_c (b: f32[8], c: f32[64]) -> (f32[64], f32[8], f32[64]) {
  %b = f32[8]{0} parameter(0)
  %c = f32[64]{0} parameter(1)
  %ag.2 = f32[64]{0} all-gather(%b), channel_id=4, replica_groups={}, dimensions={0}, use_global_device_ids=true, frontend_attributes={chain_id="0"}, backend_config={"async_collective_fusion_config":{"flag_start":"2","flag_end":"8"}}
  %twice = f32[64]{0} add(%c, %c)
  ROOT %t.2 = (f32[64]{0}, f32[8]{0}, f32[64]{0}) tuple(%twice, %b, %ag.2)
}

%done_c (d: f32[8], e: f32[64]) -> f32[64] {
  %d = f32[8]{0} parameter(0)
  %e = f32[64]{0} parameter(1)
  %ag.3 = f32[64]{0} all-gather(%d), channel_id=4, replica_groups={}, dimensions={0}, use_global_device_ids=true, frontend_attributes={chain_id="0"}
  ROOT %cc.3 = f32[64]{0} custom-call(%d, %ag.3, %e), custom_call_target="AsyncCollectiveDone"
}

%scatter_c (in: f32[64]) -> f32[8] {
  %in = f32[64]{0} parameter(0)
  %ar.s = f32[64]{0} all-reduce(%in), channel_id=1, replica_groups={{0,1,2,3,4,5,6,7}}, use_global_device_ids=true, to_apply=%add
  %pid = u32[] partition-id()
  %eight = u32[] constant(8)
  %off = u32[] multiply(%pid, %eight)
  ROOT %ds = f32[8]{0} dynamic-slice(%ar.s, %off), dynamic_slice_sizes={8}
}

"""

TPU_ENTRY = """  %s = (f32[8]{0}, f32[64]{0}, s32[2]{0}, u32[]) fusion(%p), kind=kCustom, calls=%start_c
  %s0 = f32[8]{0} get-tuple-element(%s), index=0
  %s1 = f32[64]{0} get-tuple-element(%s), index=1
  %k = (f32[64]{0}, f32[8]{0}, f32[64]{0}) fusion(%s0, %q), kind=kOutput, calls=%cont_c, backend_config={"continuation_config":{"output_tuple_original_start":"0"}}
  %k1 = f32[8]{0} get-tuple-element(%k), index=1
  %k2 = f32[64]{0} get-tuple-element(%k), index=2
  %dn = f32[64]{0} fusion(%k1, %k2), kind=kCustom, calls=%done_c
  %rs = f32[8]{0} fusion(%dn), kind=%KIND, calls=%scatter_c, metadata={op_name="jit(f)/psum_scatter"}
  ROOT %out = f32[64]{0} add(%dn, %q)"""


def test_tpu_async_collective_fusion_is_one_row_at_its_start() -> None:
    """The start, continuation and done fusions hold the same all-gather (one
    channel, one chain): one row; and a kCustom fusion that all-reduces and keeps
    this device's dynamic-slice is a reduce-scatter of its 256-byte input."""
    rows = read_collectives(
        hlo(TPU_ENTRY.replace("%KIND", "kCustom"), before=TPU_FUSION), MESH
    ).rows
    assert [(r.kind, r.name, r.form) for r in rows] == [
        ("all-gather", "ag.1", "TPU async collective fusion"),
        ("reduce-scatter", "rs", "TPU reduce-scatter fusion"),
    ]
    gather, scatter = rows
    assert (gather.nbytes, gather.op_name) == (256, "w[0]")
    assert (scatter.nbytes, scatter.result_bytes) == (256, 32)
    assert scatter.wire_bytes == 224
    assert scatter.op_name == "jit(f)/psum_scatter" and scatter.opcode == "fusion"


def test_an_all_reduce_in_a_loop_fusion_stays_an_all_reduce() -> None:
    rows = read_collectives(
        hlo(TPU_ENTRY.replace("%KIND", "kLoop"), before=TPU_FUSION), MESH
    ).rows
    assert [(r.kind, r.name, r.form, r.nbytes) for r in rows][1] == (
        "all-reduce",
        "ar.s",
        "fused",
        256,
    )


def test_a_start_fusion_without_its_done_is_a_format_error() -> None:
    """A done fusion whose root is not ``AsyncCollectiveDone``: one start, no
    done, so the pieces cannot be told apart and nothing is guessed."""
    computations = TPU_FUSION.replace(
        'custom_call_target="AsyncCollectiveDone"', 'custom_call_target="Other"'
    )
    entry = TPU_ENTRY.replace("%KIND", "kCustom")
    with pytest.raises(CollectiveFormatError, match=r"1 and 0.*jaxlib 0\.10\.2.*jit_t"):
        read_collectives(hlo(entry, before=computations), MESH)


# --- loops ------------------------------------------------------------------------


def counter_loop(
    name: str, start: int, bound: int, step: int, inner: str
) -> tuple[str, str]:
    """``for (i = start; i < bound; i += step)`` as XLA:TPU leaves it: no
    ``known_trip_count``, copies of the counter on the way. Returns the
    computations and the ENTRY's lines."""
    computations = (
        f"%cond.{name} (cp.{name}: (s32[], f32[64])) -> pred[] {{\n"
        f"  %cp.{name} = (s32[], f32[64]{{0}}) parameter(0)\n"
        f"  %ci.{name} = s32[] get-tuple-element(%cp.{name}), index=0\n"
        f"  %cn.{name} = s32[] constant({bound})\n"
        f"  ROOT %lt.{name} = pred[] compare(%ci.{name}, %cn.{name}), direction=LT\n"
        "}\n\n"
        f"%body.{name} (bp.{name}: (s32[], f32[64])) -> (s32[], f32[64]) {{\n"
        f"  %bp.{name} = (s32[], f32[64]{{0}}) parameter(0)\n"
        f"  %bi.{name} = s32[] get-tuple-element(%bp.{name}), index=0\n"
        f"  %bc.{name} = s32[] copy(%bi.{name})\n"
        f"  %step.{name} = s32[] constant({step})\n"
        f"  %next.{name} = s32[] add(%bc.{name}, %step.{name})\n"
        f"  %bx.{name} = f32[64]{{0}} get-tuple-element(%bp.{name}), index=1\n"
        f"{inner}"
        f"  ROOT %bt.{name} = (s32[], f32[64]{{0}}) tuple(%next.{name}, %ar.{name})\n"
        "}\n\n"
    )
    entry = (
        f"  %zero.{name} = s32[] constant({start})\n"
        f"  %zc.{name} = s32[] copy(%zero.{name})\n"
        f"  %init.{name} = (s32[], f32[64]{{0}}) tuple(%zc.{name}, %q)\n"
        f"  %w.{name} = (s32[], f32[64]{{0}}) while(%init.{name}), "
        f"condition=%cond.{name}, body=%body.{name}\n"
    )
    return computations, entry


def reduce_in(name: str) -> str:
    return (
        f"  %ar.{name} = f32[64]{{0}} all-reduce(%bx.{name}), channel_id=1, "
        "replica_groups={}, use_global_device_ids=true, to_apply=%add\n"
    )


@pytest.mark.parametrize(
    ("start", "bound", "step", "trips"),
    # i = 0..4; i = 1, 3; i = 0, 3; none
    [(0, 5, 1, 5), (1, 5, 2, 2), (0, 4, 3, 2), (5, 5, 1, 0)],
)
def test_a_counter_loop_without_a_stated_trip_count_is_counted(
    start: int, bound: int, step: int, trips: int
) -> None:
    computations, entry = counter_loop("a", start, bound, step, reduce_in("a"))
    row = one(hlo(entry + "  ROOT %o = f32[64]{0} copy(%q)", before=computations))
    assert (row.count, row.trip_count_known, row.loops) == (trips, True, ("w.a",))
    assert (
        read_collectives(
            hlo(entry + "  ROOT %o = f32[64]{0} copy(%q)", before=computations), MESH
        ).nbytes
        == trips * 256
    )


def test_nested_loops_multiply_stated_trip_counts() -> None:
    """An all-reduce in a loop of 3 inside a loop of 4: 12 per step."""
    inner = (
        "%icond (ic: (s32[], f32[64])) -> pred[] {\n"
        "  %ic = (s32[], f32[64]{0}) parameter(0)\n"
        "  ROOT %ict = pred[] constant(true)\n"
        "}\n\n"
        "%ibody (ib: (s32[], f32[64])) -> (s32[], f32[64]) {\n"
        "  %ib = (s32[], f32[64]{0}) parameter(0)\n"
        "  %ibi = s32[] get-tuple-element(%ib), index=0\n"
        "  %ibx = f32[64]{0} get-tuple-element(%ib), index=1\n"
        "  %deep = f32[64]{0} all-reduce(%ibx), channel_id=2, replica_groups={}, "
        "use_global_device_ids=true, to_apply=%add\n"
        "  ROOT %ibt = (s32[], f32[64]{0}) tuple(%ibi, %deep)\n"
        "}\n\n"
        "%ocond (oc: (s32[], f32[64])) -> pred[] {\n"
        "  %oc = (s32[], f32[64]{0}) parameter(0)\n"
        "  ROOT %oct = pred[] constant(true)\n"
        "}\n\n"
        "%obody (ob: (s32[], f32[64])) -> (s32[], f32[64]) {\n"
        "  %ob = (s32[], f32[64]{0}) parameter(0)\n"
        "  %obx = f32[64]{0} get-tuple-element(%ob), index=1\n"
        "  %shallow = f32[64]{0} all-gather(%obx), channel_id=3, "
        "replica_groups={{0},{1},{2},{3},{4},{5},{6},{7}}, dimensions={0}, "
        "use_global_device_ids=true\n"
        "  %w.in = (s32[], f32[64]{0}) while(%ob), condition=%icond, body=%ibody, "
        'backend_config={"known_trip_count":{"n":"3"}}\n'
        "  ROOT %obt = (s32[], f32[64]{0}) copy(%w.in)\n"
        "}\n\n"
    )
    text = hlo(
        "  %z = s32[] constant(0)\n"
        "  %i0 = (s32[], f32[64]{0}) tuple(%z, %q)\n"
        "  %w.out = (s32[], f32[64]{0}) while(%i0), condition=%ocond, body=%obody, "
        'backend_config={"known_trip_count":{"n":"4"}}\n'
        "  ROOT %o = f32[64]{0} copy(%q)",
        before=inner,
    )
    found = read_collectives(text, MESH)
    rows = {row.name: row for row in found.rows}
    assert (rows["deep"].count, rows["deep"].loops) == (12, ("w.out", "w.in"))
    assert (rows["shallow"].count, rows["shallow"].loops) == (4, ("w.out",))
    # groups of one device: no axes, nothing on the wire
    assert rows["shallow"].axes == () and rows["shallow"].wire_bytes == 0
    assert found.trip_counts_known
    assert found.nbytes == 12 * 256 + 4 * 256


def test_a_loop_of_unknown_trip_count_counts_once_and_says_so() -> None:
    computations, entry = counter_loop("u", 0, 5, 1, reduce_in("u"))
    computations = computations.replace("direction=LT", "direction=NE")
    found = read_collectives(
        hlo(entry + "  ROOT %o = f32[64]{0} copy(%q)", before=computations), MESH
    )
    (row,) = found.rows
    assert (row.count, row.trip_count_known) == (1, False)
    assert not found.trip_counts_known
    assert any("trip count" in note for note in found.table().notes)


# --- sources ---------------------------------------------------------------------


def test_source_lines_come_from_the_stack_frames_or_the_metadata() -> None:
    frames = (
        'FileNames\n1 "/src/model.py"\n\nFunctionNames\n1 "step"\n2 "layer"\n\n'
        "FileLocations\n1 {file_name_id=1 function_name_id=1 line=10 end_line=10}\n"
        "2 {file_name_id=1 function_name_id=2 line=42 end_line=42}\n\n"
        "StackFrames\n1 {file_location_id=1 parent_frame_id=1}\n"
        "2 {file_location_id=2 parent_frame_id=2}\n\n"
    )
    text = hlo(
        "  %ag = f32[64]{0} all-gather(%p), channel_id=1, replica_groups={}, "
        'dimensions={0}, use_global_device_ids=true, metadata={op_name="jit(f)/x" '
        "stack_frame_id=2}\n"
        "  ROOT %ar = f32[64]{0} all-reduce(%q), channel_id=2, replica_groups={}, "
        'use_global_device_ids=true, to_apply=%add, metadata={op_name="y" '
        'source_file="/src/old.py" source_line=7}',
        tail=frames,
    )
    gather, reduce = read_collectives(text, MESH).rows
    assert gather.op_name == "jit(f)/x"
    # frame 2 is layer (model.py:42), called from step (model.py:10): its
    # parent is printed as 2, the parent's id + 1
    assert [(s.function, s.line) for s in gather.stack] == [("layer", 42), ("step", 10)]
    assert gather.source is not None and gather.source.file == "/src/model.py"
    assert reduce.source is not None
    assert (reduce.source.file, reduce.source.line) == ("/src/old.py", 7)


# --- errors ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        (
            "  ROOT %ar = f32[64]{0} all-reduce(%q), channel_id=1, "
            "replica_groups=groups(0:8), use_global_device_ids=true, to_apply=%add",
            r"replica groups in a form this code does not read .*jaxlib 0\.10\.2.*"
            r"installed jaxlib .*groups\(0:8\)",
        ),
        (
            "  ROOT %ar = f32[64]{0} all-reduce(%q), channel_id=1, "
            "use_global_device_ids=true, to_apply=%add",
            r"replica_groups=",
        ),
        (
            "  ROOT %ar = f32[64]{0} all-reduce(%q), channel_id=1, "
            "replica_groups=mesh['axis_0'=8] {'axis_7'}, use_global_device_ids=true, "
            "to_apply=%add",
            r"a mesh's grouped axes",
        ),
        (
            "  ROOT %ar = f32[64]{0} all-reduce(%q), channel_id=1, "
            "replica_groups={{0,9}}, use_global_device_ids=true, to_apply=%add",
            r"partition ids below num_partitions=8",
        ),
        (
            "  ROOT %ar = q7[64]{0} all-reduce(%q), channel_id=1, "
            "replica_groups={}, use_global_device_ids=true, to_apply=%add",
            r"element type it knows \('q7'\)",
        ),
        (
            "  ROOT %cb = f32[64]{0} collective-broadcast(%q), channel_id=1, "
            "replica_groups={}",
            r"collective-broadcast \(not one of the collectives this code counts",
        ),
        (
            "  ROOT %rag = f32[64]{0} ragged-all-to-all(%q, %q, %p, %p, %p), "
            "channel_id=1, replica_groups={}",
            r"a ragged-all-to-all of six operands",
        ),
        (
            "  ROOT %ags = (f32[8]{0}, f32[64]{0}) all-gather-start(%p), "
            "channel_id=1, replica_groups={}, dimensions={0}, "
            "use_global_device_ids=true",
            r"one all-gather-done per all-gather-start \(found 1 and 0\)",
        ),
        (
            "  ROOT %cp = f32[8]{0} collective-permute(%p), channel_id=1, "
            "source_target_pairs=ring",
            r"source_target_pairs",
        ),
    ],
)
def test_a_collective_in_an_unknown_form_is_an_error_naming_jaxlib(
    entry: str, match: str
) -> None:
    with pytest.raises(CollectiveFormatError, match=match) as error:
        read_collectives(hlo(entry), MESH)
    assert "installed jaxlib" in str(error.value)
    assert "No collective is skipped" in str(error.value)


@pytest.mark.parametrize(
    ("text", "mesh", "match"),
    [
        ("not hlo", MESH, r"`hlo_text` must be an XLA HLO module.*'not hlo'"),
        (None, (("data", 4),), r"`mesh_axes` \{'data': 4\} has 4 devices but the "),
        (None, (), r"`mesh_axes` must name each mesh axis once"),
        (None, (("a", 2), ("a", 4)), r"`mesh_axes` must name each mesh axis once"),
        (None, (("a", 0), ("b", 8)), r"`mesh_axes` sizes must be positive.*\('a', 0\)"),
    ],
)
def test_bad_arguments_are_value_errors_naming_them(
    text: str | None, mesh: tuple[tuple[str, int], ...], match: str
) -> None:
    module = text or hlo("  ROOT %o = f32[64]{0} copy(%q)")
    with pytest.raises(ValueError, match=match):
        read_collectives(module, mesh)


def test_wire_factor_rejects_unknown_kinds_and_empty_groups() -> None:
    with pytest.raises(ValueError, match=r"`kind` must be one of .*'all-gather'"):
        wire_factor("broadcast", 2)
    with pytest.raises(ValueError, match=r"`group_size` must be a positive .*got 0"):
        wire_factor("all-gather", 0)


# --- the report -----------------------------------------------------------------


def test_the_report_renders_every_format_with_exact_totals() -> None:
    text = hlo(
        "  %ag = f32[64]{0} all-gather(%p), channel_id=1, replica_groups=[2,4]<=[8], "
        "dimensions={0}, use_global_device_ids=true\n"
        "  ROOT %ar = f32[64]{0} all-reduce(%q), channel_id=2, "
        "replica_groups=[4,2]<=[2,4]T(1,0), use_global_device_ids=true, to_apply=%add"
    )
    found = read_collectives(text, MESH)
    assert isinstance(found, Collectives)
    # all-gather over fsdp (4): 256 bytes, 3/4 sent; all-reduce over data (2):
    # 256 bytes, 2 * 1/2 sent
    assert {k: (t.nbytes, t.wire_bytes) for k, t in found.by_axis().items()} == {
        ("data",): (256, Fraction(256)),
        ("fsdp",): (256, Fraction(192)),
    }
    data = json.loads(found.to_json())
    assert (data["schema"], data["version"]) == ("nnx-introspect/collectives", 1)
    assert (data["bytes"], data["wire_bytes"]) == (512, 448)
    assert data["mesh_axes"] == [["data", 2], ["fsdp", 4]]
    assert [row["axes"] for row in data["rows"]] == [["fsdp"], ["data"]]
    assert data["by_axis"][0] == {
        "axes": ["data"],
        "label": "data",
        "instructions": 1,
        "count": 1,
        "bytes": 256,
        "wire_bytes": 256,
    }
    table = found.table()
    assert [row[0] for row in table.rows] == ["ar", "ag"]  # most sent first
    assert table.totals[-1][0] == "all collectives"
    assert "| ag | all-gather | fsdp | f32[64] | 1 | 256 B | 192 B |" in (
        found.to_markdown()
    )
    assert repr(found) == (
        "Collectives(module='jit_t', mesh_axes={'data': 2, 'fsdp': 4}, rows=2, "
        "nbytes=512, wire_bytes=448)"
    )


# --- real compiles: the MLP ---------------------------------------------------------

D, LAYERS, BATCH = 128, 3, 64
KERNEL_BYTES = D * D * 4
"""One float32 (D, D) kernel: 65,536 bytes."""


def mlp_step(mesh: Mesh, *, scan: bool) -> Any:
    """Lowered SGD step of a ``LAYERS``-deep tanh MLP, written for FSDP by hand.

    Every kernel is split over ``fsdp`` by rows, the batch over ``fsdp`` too
    (the ``data`` axis holds copies); inside the loss each kernel is constrained
    to be replicated, which is FSDP's all-gather, and the update's result is
    split like the kernels again, so each gradient (a sum over the batch's
    shards) is reduced over ``fsdp`` and cut to this device's rows: a
    reduce-scatter. ``precision=HIGHEST`` keeps XLA:TPU from converting the
    kernels to bfloat16 before gathering them (its default matmul precision).
    """
    whole = NamedSharding(mesh, P())
    x = jax.ShapeDtypeStruct(
        (BATCH, D), jnp.float32, sharding=NamedSharding(mesh, P("fsdp", None))
    )

    def layer(h: jax.Array, w: jax.Array) -> jax.Array:
        w = jax.lax.with_sharding_constraint(w, whole)
        return jnp.tanh(jnp.dot(h, w, precision=jax.lax.Precision.HIGHEST))

    if scan:
        spec = NamedSharding(mesh, P(None, "fsdp", None))
        ws: Any = jax.ShapeDtypeStruct((LAYERS, D, D), jnp.float32, sharding=spec)

        def loss(ws: Any, x: jax.Array) -> jax.Array:
            h, _ = jax.lax.scan(lambda h, w: (layer(h, w), None), x, ws)
            return jnp.sum(h**2)

        out: Any = spec
    else:
        spec = NamedSharding(mesh, P("fsdp", None))
        ws = [jax.ShapeDtypeStruct((D, D), jnp.float32, sharding=spec)] * LAYERS

        def loss(ws: Any, x: jax.Array) -> jax.Array:
            h = x
            for w in ws:
                h = layer(h, w)
            return jnp.sum(h**2)

        out = [spec] * LAYERS

    def step(ws: Any, x: jax.Array) -> Any:
        grads = jax.grad(loss)(ws, x)
        return jax.tree.map(lambda w, g: w - 0.1 * g, ws, grads)

    return jax.jit(step, out_shardings=out).lower(ws, x)


def check_fsdp_mlp(found: Collectives, fsdp: int, *, scan: bool) -> None:
    """What FSDP must move for the MLP, derived by hand, on any backend.

    Forward: each of the LAYERS kernels is gathered whole, LAYERS * D * D * 4 =
    196,608 bytes of all-gather results per device (the backward pass reuses
    them: XLA keeps the gathered kernels rather than gather again). Backward:
    each gradient is summed over the fsdp shards of the batch and split by
    rows: LAYERS * D * D * 4 bytes of reduce-scatter input. Every group is one
    fsdp row of the mesh, on every backend.
    """
    kinds = found.by_kind()
    gathered = LAYERS * KERNEL_BYTES
    assert kinds["all-gather"].nbytes == gathered == 196_608
    assert kinds["all-gather"].wire_bytes == Fraction(fsdp - 1, fsdp) * gathered
    assert set(kinds) in (
        {"all-gather", "reduce-scatter"},
        {"all-gather", "all-reduce"},
    )
    reduced = kinds.get("reduce-scatter") or kinds["all-reduce"]
    assert reduced.nbytes == LAYERS * KERNEL_BYTES
    for row in found.rows:
        assert row.axes == ("fsdp",), row
        assert row.group_size == fsdp
        # the groups are the mesh's rows, by position
        width = fsdp
        assert sorted(row.groups) == [
            tuple(range(r * width, (r + 1) * width)) for r in range(2)
        ]
        assert row.trip_count_known
        assert (row.count, len(row.loops)) == ((LAYERS, 1) if scan else (1, 0))
    assert found.by_axis()[("fsdp",)].nbytes == 2 * LAYERS * KERNEL_BYTES


@pytest.mark.parametrize("scan", [False, True])
def test_mlp_on_xla_cpu_moves_what_fsdp_must(scan: bool) -> None:
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("data", "fsdp"))
    text = compiled_hlo_text(mlp_step(mesh, scan=scan).compile())
    found = read_collectives(text, MESH)
    check_fsdp_mlp(found, 4, scan=scan)
    # XLA's mesh form is not this mesh: three axes for two, XLA's axis_0 (size
    # 4) is the mesh's fsdp, over devices arange(8).reshape(2, 4).T
    assert (
        "replica_groups=mesh['axis_0'=4,'axis_1'=1,'axis_2'=2], "
        "device_ids=([2,4]T(1,0)) {'axis_0'}"
    ) in text
    # XLA:CPU has no reduce-scatter: it all-reduces the whole gradients and
    # each device slices its rows afterwards. Same bytes, twice the ring's
    # wire bytes: 2 * 3/4 * 196,608.
    reduced = found.by_kind()["all-reduce"]
    assert reduced.wire_bytes == 2 * Fraction(3, 4) * LAYERS * KERNEL_BYTES
    if scan:
        # one gather and one reduction per layer, in the forward and the
        # backward loop: XLA's known_trip_count is 3
        assert [(r.kind, r.count) for r in found.rows] == [
            ("all-gather", 3),
            ("all-reduce", 3),
        ]
        assert found.rows[0].loops != found.rows[1].loops
    else:
        # three gathers; the three gradients reduced in one combined all-reduce
        assert [r.kind for r in found.rows] == ["all-gather"] * 3 + ["all-reduce"]
        assert found.rows[-1].shapes == ((D, D),) * 3


@needs_plugin
@pytest.mark.parametrize("scan", [False, True])
def test_mlp_on_deviceless_xla_gpu_h100_8_moves_what_fsdp_must(scan: bool) -> None:
    mesh, _ = topology_mesh("h100-8", MESH)
    compiled = mlp_step(mesh, scan=scan).compile()
    text = compiled_hlo_text(compiled)
    assert text == compiled.as_text()  # as_text() works for a deviceless GPU too
    found = read_collectives(text, MESH)
    check_fsdp_mlp(found, 4, scan=scan)
    # XLA:GPU reduce-scatters, asynchronously: start/done pairs, one row each
    assert {r.form for r in found.rows} == {"async"}
    scattered = found.by_kind()["reduce-scatter"]
    assert scattered.wire_bytes == Fraction(3, 4) * LAYERS * KERNEL_BYTES
    if not scan:
        # XLA:GPU combines the three gathers into one start, the three
        # reductions into another
        assert [(r.kind, len(r.shapes)) for r in found.rows] == [
            ("all-gather", 3),
            ("reduce-scatter", 3),
        ]


@needs_plugin
def test_pipelined_gathers_on_xla_gpu_still_gather_each_layer_once() -> None:
    """With pipelined all-gathers XLA:GPU gathers the next layer's kernel while
    this one computes: one gather peeled out before the loop, the rest in a
    loop of LAYERS - 1 trips. Per step, still each of the LAYERS kernels once."""
    mesh, _ = topology_mesh("h100-8", MESH)
    compiled = mlp_step(mesh, scan=True).compile(
        compiler_options={"xla_gpu_enable_pipelined_all_gather": True}
    )
    found = read_collectives(compiled_hlo_text(compiled), MESH)
    gathers = [r for r in found.rows if r.kind == "all-gather"]
    assert sorted((r.count, len(r.loops)) for r in gathers) == [
        (1, 0),
        (LAYERS - 1, 1),
    ]
    assert found.by_kind()["all-gather"].nbytes == LAYERS * KERNEL_BYTES
    assert found.by_kind()["reduce-scatter"].nbytes == LAYERS * KERNEL_BYTES


@needs_libtpu
@pytest.mark.parametrize("scan", [False, True])
def test_mlp_on_xla_tpu_v5e_4_moves_what_fsdp_must(scan: bool) -> None:
    axes = (("data", 2), ("fsdp", 2))
    mesh, _ = topology_mesh("v5e-4", axes)
    found = read_collectives(
        compiled_hlo_text(mlp_step(mesh, scan=scan).compile()), axes
    )
    check_fsdp_mlp(found, 2, scan=scan)
    # XLA:TPU reduce-scatters with its fusion (an all-reduce whose sum each
    # device slices, run as one reduce-scatter)
    assert "TPU reduce-scatter fusion" in {r.form for r in found.rows}
    assert found.by_kind()["reduce-scatter"].wire_bytes == LAYERS * KERNEL_BYTES // 2
    if scan:
        # XLA:TPU states no trip count: the loops' counters give 3
        assert all(r.count == LAYERS and r.trip_count_known for r in found.rows)
    else:
        # two of the three gathers run as async collective fusions (a start,
        # continuations and a done each), still one row apiece
        assert [r.kind for r in found.rows].count("all-gather") == 3
        assert "TPU async collective fusion" in {r.form for r in found.rows}


# --- replica-group ids are positions in the flat mesh ------------------------------


def psum_over(mesh: Mesh, axis: str) -> Any:
    return jax.jit(
        jax.shard_map(
            lambda x: jax.lax.psum(x, axis),
            mesh=mesh,
            in_specs=P(mesh.axis_names),
            out_specs=P(mesh.axis_names),
        )
    )


def test_group_ids_are_positions_in_the_flat_mesh_not_device_ids() -> None:
    """A mesh whose devices are out of order: (2, 2, 2) over devices 0,2,4,6,1,3,
    5,7. A psum over ``a`` pairs the positions p and p + 4; by device ids those
    positions hold (0,1), (2,3), (4,5), (6,7). XLA's groups are the positions,
    and running the program proves which devices it sums: position p holds p,
    so each sum is p + (p + 4)."""
    devices = np.array(jax.devices()[:8])[[0, 2, 4, 6, 1, 3, 5, 7]]
    mesh = Mesh(devices.reshape(2, 2, 2), ("a", "b", "c"))
    axes = (("a", 2), ("b", 2), ("c", 2))
    psum = psum_over(mesh, "a")
    compiled = psum.lower(
        jax.ShapeDtypeStruct(
            (8, 2), jnp.float32, sharding=NamedSharding(mesh, P(mesh.axis_names))
        )
    ).compile()
    (row,) = read_collectives(compiled_hlo_text(compiled), axes).rows
    assert row.groups == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert row.axes == ("a",)
    # the compiled program's partition p runs on mesh.devices.flat[p]
    executable: Any = compiled.runtime_executable()
    assert [d.id for d in executable.local_devices()] == [d.id for d in devices]
    x = jax.device_put(
        jnp.repeat(jnp.arange(8.0), 2).reshape(8, 2),
        NamedSharding(mesh, P(mesh.axis_names)),
    )
    # p + (p + 4) at positions 0..3, the same at their partners 4..7; device
    # ids would have paired positions 0 and 2 (devices 0 and 4), and so on
    assert np.asarray(psum(x))[:, 0].tolist() == [4, 6, 8, 10, 4, 6, 8, 10]


@needs_libtpu
def test_tpu_groups_are_positions_on_a_physically_ordered_mesh() -> None:
    """v5e-4's 2x2 chips laid out as a (data=2, fsdp=2) mesh hold devices
    0, 1, 3, 2: a psum over ``data`` groups positions {0, 2} and {1, 3}, which
    are devices {0, 3} and {1, 2}; XLA:TPU prints the positions."""
    axes = (("data", 2), ("fsdp", 2))
    mesh, _ = topology_mesh("v5e-4", axes)
    assert [d.id for d in mesh.devices.flat] == [0, 1, 3, 2]
    compiled = (
        psum_over(mesh, "data")
        .lower(
            jax.ShapeDtypeStruct(
                (4, 128), jnp.float32, sharding=NamedSharding(mesh, P(("data", "fsdp")))
            )
        )
        .compile()
    )
    (row,) = read_collectives(compiled_hlo_text(compiled), axes).rows
    assert (row.groups, row.axes) == (((0, 2), (1, 3)), ("data",))


def test_shard_map_collectives_on_three_axes_map_to_theirs() -> None:
    """Each collective named by its axes in a shard_map comes back with them,
    and its bytes by hand (a f32[16, 32] block per device, 2,048 bytes)."""
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 2, 2), ("a", "b", "c"))
    axes = (("a", 2), ("b", 2), ("c", 2))

    def f(x: jax.Array) -> jax.Array:
        parts = [
            jax.lax.psum(x, ("a", "c")),
            jax.lax.all_gather(x, "b", tiled=True),
            jax.lax.psum_scatter(x, "c", tiled=True),
            jax.lax.ppermute(x, "a", [(0, 1), (1, 0)]),
            jax.lax.all_to_all(x, "b", 0, 0, tiled=True),
        ]
        return jnp.stack([p.sum() for p in parts])[None]

    block = jax.ShapeDtypeStruct(
        (8 * 16, 32), jnp.float32, sharding=NamedSharding(mesh, P(("a", "b", "c")))
    )
    program = jax.jit(
        jax.shard_map(
            f, mesh=mesh, in_specs=P(("a", "b", "c")), out_specs=P(("a", "b", "c"))
        )
    )
    found = read_collectives(compiled_hlo_text(program.lower(block).compile()), axes)
    block_bytes = 16 * 32 * 4
    got = sorted((r.kind, r.axes, r.nbytes) for r in found.rows)
    assert got == sorted(
        [
            ("all-reduce", ("a", "c"), block_bytes),
            ("all-gather", ("b",), 2 * block_bytes),  # result: two blocks
            ("reduce-scatter", ("c",), block_bytes),  # input: the block
            ("collective-permute", ("a",), block_bytes),
            ("all-to-all", ("b",), block_bytes),
        ]
    )
    permute = next(r for r in found.rows if r.kind == "collective-permute")
    # positions differing in a: p and p + 4
    assert permute.source_target_pairs is not None
    assert sorted(permute.source_target_pairs) == sorted(
        [(p, p + 4) for p in range(4)] + [(p + 4, p) for p in range(4)]
    )


# --- real compiles: llama_tiny under FSDP ---------------------------------------------

VOCAB, WIDTH, LAYERS_LLAMA, FF, TOKENS = 8000, 256, 8, 688, (8, 128)


def llama_fsdp_grad_step(mesh: Mesh) -> Any:
    """llama_tiny's LM-loss gradient step with every parameter split by its
    first dimension over ``fsdp`` (all divide by 8) and the tokens by batch,
    as an FSDP training script writes it; the gradients come back split like
    the parameters."""
    model = nnx.eval_shape(lambda: llama_tiny(nnx.Rngs(0)))
    graphdef, params = nnx.split(model, nnx.Param)
    pure = nnx.to_pure_dict(params)
    split = NamedSharding(mesh, P("fsdp"))
    placed = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=split), pure
    )
    toks = jax.ShapeDtypeStruct(TOKENS, jnp.int32, sharding=split)

    def grad_step(p: Any, toks: jax.Array) -> Any:
        def loss_fn(p: Any) -> jax.Array:
            logits = nnx.merge(graphdef, nnx.State(p))(toks)[:, :-1]
            labels = toks[:, 1:]
            loss: jax.Array = optax.softmax_cross_entropy_with_integer_labels(
                logits, labels
            ).mean()
            return loss

        return jax.value_and_grad(loss_fn)(p)

    out = (NamedSharding(mesh, P()), jax.tree.map(lambda _: split, pure))
    return jax.jit(grad_step, out_shardings=out).lower(placed, toks)


def test_llama_tiny_fsdp_on_xla_cpu_moves_the_parameters_once_each_way() -> None:
    """Hand formula: each parameter all-gathered (n-1)/n of its bytes, each
    gradient reduced once. Per layer 4 (256, 256) attention kernels, 3
    (256, 688)/(688, 256) MLP kernels and 2 RMSNorm scales (256,); 8 layers, a
    final norm, an (8000, 256) embedding and a (256, 8000) head, all float32."""
    n = 8
    kernels = LAYERS_LLAMA * (4 * WIDTH * WIDTH + 3 * WIDTH * FF) * 4
    head = WIDTH * VOCAB * 4
    embedding = VOCAB * WIDTH * 4
    scales = (2 * LAYERS_LLAMA + 1) * WIDTH * 4
    parameters = kernels + head + embedding + scales
    assert parameters == 10_424_576 * 4  # llama_tiny's count, in bytes
    activations = math.prod(TOKENS) * WIDTH * 4  # one (8, 128, 256) float32
    token_ids = math.prod(TOKENS) * 4  # the (8, 128) int32 tokens

    mesh = Mesh(np.array(jax.devices()[:8]), ("fsdp",))
    compiled = llama_fsdp_grad_step(mesh).compile(
        compiler_options={  # LLVM's work only: the HLO is the same, faster
            "xla_backend_optimization_level": 0,
            "xla_llvm_disable_expensive_passes": True,
        }
    )
    found = read_collectives(compiled_hlo_text(compiled), (("fsdp", n),))
    kinds = found.by_kind()
    assert set(kinds) == {"all-gather", "all-reduce"}

    # All-gathers. Every kernel and the head once, in the forward pass: the
    # backward pass reuses them. The RMSNorm scales (17 x 1 KiB) twice: XLA
    # gathers them again in the backward pass rather than keep them. Not the
    # embedding: XLA looks tokens up in each device's 1,000 rows instead, so it
    # gathers the token ids (4 KiB) for that, and in the backward pass the
    # embedding's output gradient (8 x 128 x 256 floats, 1 MiB), from which
    # each device scatters into its own rows: that gradient needs no reduction.
    gathered = kernels + head + 2 * scales + token_ids + activations
    assert kinds["all-gather"].nbytes == gathered == 34_576_384
    # All-reduces. XLA:CPU reduces the gradients whole (no reduce-scatter): all
    # but the embedding's, in one combined all-reduce that also sums the loss
    # (one float32, 4 bytes); and the forward lookup's partial embeddings (each
    # device found the tokens of its rows), 1 MiB.
    reduced = (parameters - embedding) + 4 + activations
    assert kinds["all-reduce"].nbytes == reduced == 34_554_884
    combined = max(found.rows, key=lambda row: row.nbytes)
    assert combined.kind == "all-reduce"
    assert combined.nbytes == parameters - embedding + 4
    assert len(combined.shapes) == 9 * LAYERS_LLAMA + 2 + 1  # grads + the loss
    # the table sums the 75 arrays up rather than list them; it sends the most
    assert found.table().rows[0][:4] == (
        combined.name,
        "all-reduce",
        "fsdp",
        "(75 f32 arrays)",
    )

    one_way = Fraction(n - 1, n)
    assert kinds["all-gather"].wire_bytes == one_way * gathered
    assert kinds["all-reduce"].wire_bytes == 2 * one_way * reduced
    assert all(row.axes == ("fsdp",) and row.group_size == n for row in found.rows)
    assert all(row.count == 1 for row in found.rows)
    # every parameter gather points at the model's source (the user's frame),
    # and its stack still holds flax's frame beneath it
    sources = {r.source.function for r in found.rows if r.source is not None}
    assert "LlamaLayer.__call__" in sources
    assert "Linear.__call__" in {r.stack[0].function for r in found.rows if r.stack}

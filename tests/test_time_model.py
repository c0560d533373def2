"""The time model: a program's work read from its HLO, its time by hand arithmetic.

Every expected figure here is written out from the HLO text or the constants,
never taken from the code under test.
"""

import dataclasses
import math

import pytest

from nnx_introspect._accelerators.hardware import hardware_for
from nnx_introspect._roofline.timing import (
    CONSTANTS,
    DATA_SHEET,
    TimeConstants,
    constants_for,
    program_time,
    same_time,
)
from nnx_introspect._xla import OpWork, Work, analysis, program_work, work_from_json
from nnx_introspect._xla.hlo import parse_module
from nnx_introspect._xla.hlo.work import instruction_work

_LOOP = """HloModule jit_f

%body (p: (s32[], bf16[128,256])) -> (s32[], bf16[128,256]) {
  %p = (s32[], bf16[128,256]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = bf16[128,256]{1,0} get-tuple-element(%p), index=1
  %w = bf16[256,256]{1,0:S(1)} constant({...})
  %d = bf16[128,256]{1,0} dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, backend_config={"window_config":{"estimated_cycles":"1000"}}
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  ROOT %t = (s32[], bf16[128,256]{1,0}) tuple(%next, %d)
}

%cond (q: (s32[], bf16[128,256])) -> pred[] {
  %q = (s32[], bf16[128,256]{1,0}) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %n = s32[] constant(6)
  ROOT %lt = pred[] compare(%j, %n), direction=LT
}

ENTRY %main (a: bf16[128,256]) -> (s32[], bf16[128,256]) {
  %a = bf16[128,256]{1,0} parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], bf16[128,256]{1,0}) tuple(%zero, %a)
  ROOT %loop = (s32[], bf16[128,256]{1,0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"6"}}
}
"""


def test_a_loop_body_runs_once_per_trip_and_on_chip_operands_cross_no_hbm() -> None:
    work = program_work(parse_module(_LOOP))
    dots = [op for op in work.ops if op.kind == "matmul"]
    assert len(dots) == 1
    dot = dots[0]
    assert dot.count == 6  # the loop's 6 trips
    assert dot.matmul_flops == 2 * 128 * 256 * 256
    # reads x (128x256 bf16) from HBM, the weight lives in S(1); writes d
    assert dot.hbm_bytes == 128 * 256 * 2 + 128 * 256 * 2
    assert dot.cycles == 1000
    # the add of the counter is vector work, once a trip; each trip a launch
    loops = [op for op in work.ops if op.kind == "loop"]
    assert [op.count for op in loops] == [6]
    assert work.matmul_flops == 6 * 2 * 128 * 256 * 256


_BATCHED = """HloModule jit_g

%fused (p0: bf16[64,256,8,64], p1: bf16[64,256,8,64]) -> f32[64,8,256,256] {
  %p0 = bf16[64,256,8,64]{1,3,2,0} parameter(0)
  %p1 = bf16[64,256,8,64]{1,3,2,0} parameter(1)
  ROOT %c = f32[64,8,256,256]{2,3,1,0} convolution(%p0, %p1), window={size=64x8 stride=63x7 lhs_dilate=64x8}, dim_labels=0b1f_0o1i->01bf
}

ENTRY %main (a: bf16[64,256,8,64], b: bf16[64,256,8,64]) -> f32[64,8,256,256] {
  %a = bf16[64,256,8,64]{1,3,2,0} parameter(0)
  %b = bf16[64,256,8,64]{1,3,2,0} parameter(1)
  ROOT %f = f32[64,8,256,256]{2,3,1,0} fusion(%a, %b), kind=kOutput, calls=%fused, backend_config={"window_config":{"estimated_cycles":"9223372036854775807"}}
}
"""


def test_a_batched_matmul_written_as_a_convolution_counts_one_tap() -> None:
    (op,) = program_work(parse_module(_BATCHED)).ops
    # 64 x 8 batches of [256 x 64] @ [64 x 256]: 2 x 64 x 8 x 256 x 256 x 64
    assert op.matmul_flops == 2 * 64 * 8 * 256 * 256 * 64
    # XLA:TPU's cost model gave up on it (INT64_MAX cycles): its own kind
    assert op.kind == "uncosted" and op.cycles is None


# google-tunix Qwen3's query projection BTD,DNH->BTNH as XLA:TPU (libtpu
# 0.0.42.1) wrote it for v5e: the heads a spatial dimension over an input of
# one, padded 15 each side, so each output meets one of its 16 taps
_HEADS = """HloModule jit_prefill

%fused (p0: bf16[8,256,1024,1], p1: bf16[1024,16,128,1]) -> bf16[8,256,16,128] {
  %p0 = bf16[8,256,1024,1]{3,2,1,0} parameter(0)
  %p1 = bf16[1024,16,128,1]{3,2,1,0} parameter(1)
  ROOT %c = bf16[8,256,16,128]{1,3,2,0} convolution(%p0, %p1), window={size=1x16 pad=0_0x15_15 rhs_reversal=0x1}, dim_labels=0bf1_i1o0->0b1f
}

ENTRY %main (a: bf16[8,256,1024,1], b: bf16[1024,16,128,1]) -> bf16[8,256,16,128] {
  %a = bf16[8,256,1024,1]{3,2,1,0} parameter(0)
  %b = bf16[1024,16,128,1]{3,2,1,0} parameter(1)
  ROOT %f = bf16[8,256,16,128]{1,3,2,0} fusion(%a, %b), kind=kOutput, calls=%fused, backend_config={"window_config":{"estimated_cycles":"1000"}}
}
"""


def test_a_projection_into_heads_counts_the_taps_that_meet_data() -> None:
    (op,) = program_work(parse_module(_HEADS)).ops
    # 8 x 256 tokens of 1,024 into 16 heads of 128: 2 x B x T x D x N x H,
    # not 16 times that (the padded taps do no work)
    assert op.matmul_flops == 2 * 8 * 256 * 1024 * 16 * 128


@pytest.mark.parametrize(
    ("lhs", "rhs", "strides", "padding", "lhs_dilation", "rhs_dilation"),
    [
        ((8, 64, 1, 16), (32, 64, 1, 16), (1, 1), ((0, 0), (15, 15)), (1, 1), (1, 1)),
        ((2, 16, 10, 10), (8, 16, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1)),
        ((2, 16, 8, 5), (8, 16, 8, 2), (7, 1), ((0, 0), (1, 1)), (8, 1), (1, 1)),
        ((1, 4, 9, 7), (4, 4, 3, 2), (2, 3), ((2, 1), (0, 3)), (2, 1), (1, 2)),
    ],
)
def test_a_convolutions_flops_equal_xlas_cost_analysis(
    lhs: tuple[int, ...],
    rhs: tuple[int, ...],
    strides: tuple[int, int],
    padding: tuple[tuple[int, int], tuple[int, int]],
    lhs_dilation: tuple[int, int],
    rhs_dilation: tuple[int, int],
) -> None:
    import jax
    import jax.numpy as jnp

    def conv(a: jax.Array, b: jax.Array) -> jax.Array:
        return jax.lax.conv_general_dilated(
            a, b, strides, padding, lhs_dilation, rhs_dilation
        )

    a, b = jnp.ones(lhs, jnp.float32), jnp.ones(rhs, jnp.float32)
    compiled = jax.jit(conv).lower(a, b).compile()
    text = compiled.as_text()
    assert text is not None and "convolution(" in text  # one instruction on CPU
    cost = compiled.cost_analysis()
    assert cost is not None
    assert program_work(parse_module(text)).matmul_flops == cost["flops"]


# jax.lax.ragged_dot of x bf16[4096,512] by 16 groups of w bf16[512,1024], as
# XLA:TPU (libtpu 0.0.52) writes it for v5e: one convolution over every group
_RAGGED = """HloModule jit_f

%fused (p0: bf16[16,4096,512], p1: bf16[16,512,1024]) -> bf16[16,4096,1024] {
  %p0 = bf16[16,4096,512]{2,1,0} parameter(0)
  %p1 = bf16[16,512,1024]{2,1,0} parameter(1)
  ROOT %c = bf16[16,4096,1024]{2,1,0} convolution(%p0, %p1), window={size=16 stride=15 lhs_dilate=16}, dim_labels=0bf_0io->0bf, metadata={op_name="jit(f)/ragged_dot_general" stack_frame_id=2}
}

ENTRY %main (a: bf16[16,4096,512], b: bf16[16,512,1024]) -> bf16[16,4096,1024] {
  %a = bf16[16,4096,512]{2,1,0} parameter(0)
  %b = bf16[16,512,1024]{2,1,0} parameter(1)
  ROOT %f = bf16[16,4096,1024]{2,1,0} fusion(%a, %b), kind=kOutput, calls=%fused, backend_config={"window_config":{"estimated_cycles":"1000"}}
}
"""


def test_a_ragged_dot_counts_each_row_in_its_one_group() -> None:
    (op,) = program_work(parse_module(_RAGGED)).ops
    # 4,096 rows, each multiplied by its own group's [512 x 1024] only: the
    # dense convolution's figure (XLA's cost analysis: 6.87e10) over 16 groups
    assert op.matmul_flops == 2 * 4096 * 512 * 1024
    plain = _RAGGED.replace("ragged_dot_general", "conv_general_dilated")
    (dense,) = program_work(parse_module(plain)).ops
    assert dense.matmul_flops == 16 * op.matmul_flops


def test_the_cycles_count_at_most_the_instructions_roofline() -> None:
    v5e = hardware_for("v5e-1")
    c = _constants(program_seconds=0.0, launch_seconds=0.0, hbm_fraction=1.0)
    assert c.seconds_per_cycle is not None and c.cycles_cap is not None
    flops = 1e9  # 5.1 us at the bf16 peak; XLA:TPU says 1e6 cycles (~0.8 ms)
    work = Work((OpWork("matmul", flops, 0.0, 0, 10**6, 1),))
    t = program_time(work, v5e, constants=c)
    roof = flops / v5e.peak_flops_per_second("bf16")
    assert t.cycles_seconds == pytest.approx(c.cycles_cap * roof)
    uncapped = program_time(work, v5e, constants=_constants(cycles_cap=None))
    assert uncapped.cycles_seconds == pytest.approx(1e6 * c.seconds_per_cycle)


def test_the_work_round_trips_through_json() -> None:
    work = program_work(parse_module(_LOOP))
    assert work_from_json(work.json_data()) == work


def _constants(**changes: float | None) -> TimeConstants:
    return dataclasses.replace(CONSTANTS["v5e"], **changes)  # type: ignore[arg-type]


def test_each_instruction_takes_its_longest_term_plus_its_launch() -> None:
    v5e = hardware_for("v5e-1")
    peak, hbm = v5e.peak_flops_per_second("bf16"), v5e.hbm_bytes_per_second
    c = TimeConstants(
        version="test/1",
        calibrated=True,
        matmul_fraction=0.5,
        vector_flops_per_second=None,
        hbm_fraction=0.8,
        seconds_per_cycle=1e-9,
        launch_seconds=2e-6,
        async_share=0.25,
        error=0.1,
        program_seconds=1e-4,
    )
    work = Work(
        (
            # matmul-bound: 1e12 FLOPs at half the peak (no cycles stated)
            OpWork("matmul", 1e12, 0.0, 10**6, None, 3),
            # HBM-bound: 8e8 B at 0.8 x the bandwidth
            OpWork("vector", 0.0, 1e3, 8 * 10**8, 100, 2),
            # cycle-bound: 5e6 cycles at 1 ns
            OpWork("vector", 0.0, 1e3, 10, 5 * 10**6, 1),
            # an asynchronous copy: a quarter of its data-sheet HBM time shows
            OpWork("async", 0.0, 0.0, 4 * 10**9, None, 1),
        )
    )
    t = program_time(work, v5e, constants=c)
    matmul = 3 * 1e12 / (0.5 * peak)
    memory = 2 * 8e8 / (0.8 * hbm)
    cycles = 5e6 * 1e-9
    launch = (3 + 2 + 1) * 2e-6 + 1e-4
    unhidden = 0.25 * 4e9 / hbm  # the wait's share of the data sheet's time
    assert t.matmul_seconds == pytest.approx(matmul)
    assert t.memory_seconds == pytest.approx(memory)
    assert t.cycles_seconds == pytest.approx(cycles)
    assert t.launch_seconds == pytest.approx(launch)
    assert t.async_seconds == pytest.approx(unhidden)
    assert t.seconds == pytest.approx(matmul + memory + cycles + launch + unhidden)
    assert t.launches == 7


def test_stated_cycles_time_a_matmul_instead_of_its_flops() -> None:
    v5e = hardware_for("v5e-1")
    c = _constants(program_seconds=0.0, launch_seconds=0.0)
    assert c.seconds_per_cycle is not None
    # 1e12 FLOPs would take 5 ms at the peak; XLA:TPU says 1e6 cycles
    work = Work((OpWork("matmul", 1e12, 0.0, 0, 10**6, 1),))
    t = program_time(work, v5e, constants=c)
    assert t.matmul_seconds == 0.0
    assert t.cycles_seconds == pytest.approx(1e6 * c.seconds_per_cycle)


def test_an_uncosted_instruction_takes_its_fitted_rate() -> None:
    v5e = hardware_for("v5e-1")
    c = _constants(uncosted_flops_per_second=1e10, program_seconds=0.0)
    work = Work((OpWork("uncosted", 0.0, 2e9, 10, None, 4),))
    t = program_time(work, v5e, constants=c)
    assert t.uncosted_seconds == pytest.approx(4 * 2e9 / 1e10)


def test_a_calibrated_kind_states_its_error_and_an_uncalibrated_one_says_so() -> None:
    v5e, h100 = hardware_for("v5e-8"), hardware_for("h100-8")
    assert constants_for(v5e) is CONSTANTS["v5e"]
    assert constants_for(h100) is DATA_SHEET
    work = Work((OpWork("matmul", 1e12, 0.0, 0, 1000, 1),))
    calibrated = program_time(work, v5e)
    c = CONSTANTS["v5e"]
    assert c.calibrated and c.error is not None and c.programs >= 20
    assert calibrated.basis.startswith(f"±{c.error:.0%}, calibrated on TPU v5e")
    assert f"from {c.programs} programs" in calibrated.basis
    gpu = program_time(work, h100)
    assert gpu.error is None and gpu.basis.startswith("uncalibrated")
    # on the data sheet, 1e12 FLOPs at the H100's dense bf16 peak
    assert gpu.seconds == pytest.approx(1e12 / h100.peak_flops_per_second("bf16"))


def test_collectives_are_added_and_named_uncalibrated() -> None:
    t = program_time(
        Work((OpWork("matmul", 1e9, 0.0, 0, 100, 1),)),
        hardware_for("v5e-8"),
        comm_seconds=0.01,
    )
    assert t.comm_seconds == 0.01
    assert not t.calibrated
    assert "collectives are uncalibrated" in t.basis


@pytest.mark.parametrize(
    ("a", "b", "error", "tied"),
    [
        (0.100, 0.109, 0.10, True),  # 9 ms apart, 10% of 109 ms is 10.9 ms
        (0.100, 0.112, 0.10, False),  # 12 ms apart > 11.2 ms
        (0.100, 0.100, None, True),
        (0.100, 0.101, None, False),  # uncalibrated: only equal ties
    ],
)
def test_two_estimates_tie_within_the_error_bar(
    a: float, b: float, error: float | None, tied: bool
) -> None:
    assert same_time(a, b, error) is tied
    assert same_time(b, a, error) is tied


def test_the_shipped_constants_are_physical() -> None:
    c = CONSTANTS["v5e"]
    assert 0 < c.matmul_fraction <= 1 and 0 < c.hbm_fraction <= 1
    assert 0 <= c.async_share <= 1
    assert c.launch_seconds >= 0 and c.program_seconds >= 0
    assert c.seconds_per_cycle is None or 0 < c.seconds_per_cycle < 1e-8
    assert math.isfinite(c.error or 0.0)


# A decode step's write of one position into a cache whose sequence is its
# minor-most dimension, as XLA:TPU laid out the example's d384 cache
# (bf16[128,1024,6,64]{1,3,2,0:T(8,128)(2,1)}); on the chip it took 144 us.
_UPDATE = """HloModule jit_decode

ENTRY %main (c: bf16[128,1024,6,64], u: bf16[128,1,6,64], i: s32[]) -> bf16[128,1024,6,64] {
  %c = bf16[128,1024,6,64]{1,3,2,0:T(8,128)(2,1)} parameter(0)
  %u = bf16[128,1,6,64]{1,3,2,0:T(8,128)(2,1)} parameter(1)
  %i = s32[] parameter(2)
  %z = s32[] constant(0)
  ROOT %d = bf16[128,1024,6,64]{1,3,2,0:T(8,128)(2,1)} dynamic-update-slice(%c, %u, %z, %i, %z, %z)
}
"""


def test_an_unfused_update_moves_the_whole_tiles_it_touches() -> None:
    work = program_work(parse_module(_UPDATE))
    (op,) = work.ops
    assert op.kind == "update"
    # each of the 128 x 6 x (64 / 16) rows of 16 x 128 tiles has one tile
    # touched at the new position: 3,072 tiles of 4,096 B, read and written
    assert op.hbm_bytes == 2 * (128 * 6 * (64 // 16)) * (16 * 128 * 2)
    c = CONSTANTS["v5e"]
    v5e = hardware_for("v5e-1")
    t = program_time(work, v5e, constants=c)
    rate = c.update_fraction * v5e.hbm_bytes_per_second
    assert t.memory_seconds == pytest.approx(op.hbm_bytes / rate)
    # the same update laid out with the head dimension minor-most touches
    # 128 x 6 tiles (one per sequence and head, its 128 lanes whole)
    minor = _UPDATE.replace("{1,3,2,0:T(8,128)(2,1)}", "{3,1,2,0:T(8,128)(2,1)}")
    (op,) = program_work(parse_module(minor)).ops
    assert op.hbm_bytes == 2 * 128 * 6 * (16 * 128 * 2)


_TWO_UPDATES = """HloModule jit_prefill

%fused (p0: bf16[32,1024,8,128], p1: bf16[8,256,8,128], p2: s32[], p3: bf16[8,1024,8,128]) -> (bf16[32,1024,8,128], bf16[8,1024,8,128]) {
  %p0 = bf16[32,1024,8,128]{3,2,1,0} parameter(0)
  %p1 = bf16[8,256,8,128]{3,2,1,0} parameter(1)
  %p2 = s32[] parameter(2)
  %p3 = bf16[8,1024,8,128]{3,2,1,0} parameter(3)
  %z = s32[] constant(0)
  %a = bf16[32,1024,8,128]{3,2,1,0} dynamic-update-slice(%p0, %p1, %p2, %z, %z, %z)
  %b = bf16[8,1024,8,128]{3,2,1,0} dynamic-update-slice(%p3, %p1, %z, %z, %z, %z)
  ROOT %t = (bf16[32,1024,8,128]{3,2,1,0}, bf16[8,1024,8,128]{3,2,1,0}) tuple(%a, %b)
}

ENTRY %main (c: bf16[32,1024,8,128], u: bf16[8,256,8,128], i: s32[], s: bf16[8,1024,8,128]) -> (bf16[32,1024,8,128], bf16[8,1024,8,128]) {
  %c = bf16[32,1024,8,128]{3,2,1,0} parameter(0)
  %u = bf16[8,256,8,128]{3,2,1,0} parameter(1)
  %i = s32[] parameter(2)
  %s = bf16[8,1024,8,128]{3,2,1,0} parameter(3)
  ROOT %f = (bf16[32,1024,8,128]{3,2,1,0}, bf16[8,1024,8,128]{3,2,1,0}) fusion(%c, %u, %i, %s), kind=kLoop, calls=%fused
}
"""


def test_a_fusion_writing_two_caches_in_place_moves_its_updates_only() -> None:
    (op,) = program_work(parse_module(_TWO_UPDATES)).ops
    update = 8 * 256 * 8 * 128 * 2  # 4 MiB of new keys
    # reads the update and the index; writes the update into each cache
    assert op.hbm_bytes == update + 4 + 2 * update


def test_a_concat_bitcast_runs_nothing() -> None:
    text = """HloModule jit_h

ENTRY %main (a: f32[4,128]) -> f32[8,128] {
  %a = f32[4,128]{1,0} parameter(0)
  ROOT %c = f32[8,128]{1,0} custom-call(%a, %a), custom_call_target="ConcatBitcast", backend_config={"window_config":{"estimated_cycles":"1826"}}
}
"""
    assert program_work(parse_module(text)).ops == ()


# The weight gradient of a ragged dot (16 groups of 16,384 rows) as XLA:TPU
# wrote it for the example MoE's step: no ragged_dot name, its operands
# selected into their groups by a mask.
_MASKED = """HloModule jit_train

%sel_a (a: bf16[16384,1024], m: pred[16,16384]) -> bf16[16,16384,1024] {
  %a = bf16[16384,1024]{1,0} parameter(0)
  %m = pred[16,16384]{1,0} parameter(1)
  %mb = pred[16,16384,1024]{2,1,0} broadcast(%m), dimensions={0,1}
  %ab = bf16[16,16384,1024]{2,1,0} broadcast(%a), dimensions={1,2}
  %z = bf16[] constant(0)
  %zb = bf16[16,16384,1024]{2,1,0} broadcast(%z), dimensions={}
  ROOT %s = bf16[16,16384,1024]{2,1,0} select(%mb, %ab, %zb)
}

%sel_b (b: bf16[16384,1024], n: pred[16,16384]) -> bf16[16,16384,1024] {
  %b = bf16[16384,1024]{1,0} parameter(0)
  %n = pred[16,16384]{1,0} parameter(1)
  %nb = pred[16,16384,1024]{2,1,0} broadcast(%n), dimensions={0,1}
  %bb = bf16[16,16384,1024]{2,1,0} broadcast(%b), dimensions={1,2}
  %y = bf16[] constant(0)
  %yb = bf16[16,16384,1024]{2,1,0} broadcast(%y), dimensions={}
  ROOT %t = bf16[16,16384,1024]{2,1,0} select(%nb, %bb, %yb)
}

%grad (x: bf16[16384,1024], w: bf16[16384,1024], m: pred[16,16384]) -> bf16[16,1024,1024] {
  %x = bf16[16384,1024]{1,0} parameter(0)
  %w = bf16[16384,1024]{1,0} parameter(1)
  %m = pred[16,16384]{1,0} parameter(2)
  %fa = bf16[16,16384,1024]{2,1,0} fusion(%x, %m), kind=kLoop, calls=%sel_a
  %fb = bf16[16,16384,1024]{2,1,0} fusion(%w, %m), kind=kLoop, calls=%sel_b
  ROOT %c = bf16[16,1024,1024]{2,1,0} convolution(%fa, %fb), window={size=16 stride=15 lhs_dilate=16}, dim_labels=0fb_0io->0bf
}

ENTRY %main (x: bf16[16384,1024], w: bf16[16384,1024], m: pred[16,16384]) -> bf16[16,1024,1024] {
  %x = bf16[16384,1024]{1,0} parameter(0)
  %w = bf16[16384,1024]{1,0} parameter(1)
  %m = pred[16,16384]{1,0} parameter(2)
  ROOT %g = bf16[16,1024,1024]{2,1,0} fusion(%x, %w, %m), kind=kOutput, calls=%grad
}
"""


def test_a_masked_grouped_weight_gradient_counts_each_row_once() -> None:
    (op,) = program_work(parse_module(_MASKED)).ops
    # 16,384 rows, each in one group: 2 x 16,384 x 1,024 x 1,024 FLOPs, not
    # the dense figure over all 16 groups
    assert op.matmul_flops == 2 * 16384 * 1024 * 1024
    plain = _MASKED.replace("select(%mb, %ab, %zb)", "add(%ab, %zb)")
    plain = plain.replace("select(%nb, %bb, %yb)", "add(%bb, %yb)")
    (dense,) = program_work(parse_module(plain)).ops
    assert dense.matmul_flops == 16 * op.matmul_flops


# XLA:TPU's Mosaic grouped matmul, as it emitted the example MoE's dropless
# step (operands 5 and 6: the [M, K] rows and the [G, K, N] experts); on the
# chip each such kernel of 16,384 x 1,024 x 1,024 took 0.20 ms.
_RAGGED_KERNEL = """HloModule jit_train

ENTRY %main (g: s32[1], s: s32[17], a: s32[143], b: s32[143], x: bf16[16384,1024], w: bf16[16,1024,1024]) -> bf16[16384,1024] {
  %g = s32[1]{0} parameter(0)
  %s = s32[17]{0} parameter(1)
  %a = s32[143]{0} parameter(2)
  %b = s32[143]{0} parameter(3)
  %x = bf16[16384,1024]{1,0:T(8,128)(2,1)} parameter(4)
  %w = bf16[16,1024,1024]{2,1,0:T(8,128)(2,1)} parameter(5)
  ROOT %k = bf16[16384,1024]{1,0:T(8,128)(2,1)} custom-call(%g, %s, %a, %b, %g, %x, %w), custom_call_target="tpu_custom_call", frontend_attributes={mosaic_fusion_entry_point="true",ragged_dot_tiling="128,1024,1024"}
}
"""


def test_a_grouped_matmul_kernel_counts_each_row_through_one_expert() -> None:
    (op,) = program_work(parse_module(_RAGGED_KERNEL)).ops
    assert op.kind == "matmul"
    # 16,384 rows of 1,024, each through its expert's [1,024 x 1,024]
    assert op.matmul_flops == 2 * 16384 * 1024 * 1024
    # any other custom call of the same operands does no matmul
    other = _RAGGED_KERNEL.replace(
        'frontend_attributes={mosaic_fusion_entry_point="true",'
        'ragged_dot_tiling="128,1024,1024"}',
        'frontend_attributes={mosaic_fusion_entry_point="true"}',
    )
    (op,) = program_work(parse_module(other)).ops
    assert op.matmul_flops == 0.0


# An MoE's dispatch gradient: 16,384 rows of 1,024 added into zeros at their
# indices (a fusion of a scatter, no cycle estimate); on the chip 0.5 ms,
# where its 67 MB of HBM bytes at the chip's bandwidth say 0.1 ms.
_SCATTER = """HloModule jit_train

%add (l: bf16[], r: bf16[]) -> bf16[] {
  %l = bf16[] parameter(0)
  %r = bf16[] parameter(1)
  ROOT %s = bf16[] add(%l, %r)
}

%fused (p0: bf16[16384,1024], p1: s32[16384,1], p2: bf16[16384,1024]) -> bf16[16384,1024] {
  %p0 = bf16[16384,1024]{1,0} parameter(0)
  %p1 = s32[16384,1]{1,0} parameter(1)
  %p2 = bf16[16384,1024]{1,0} parameter(2)
  ROOT %sc = bf16[16384,1024]{1,0} scatter(%p0, %p1, %p2), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
}

ENTRY %main (a: bf16[16384,1024], i: s32[16384,1], u: bf16[16384,1024]) -> bf16[16384,1024] {
  %a = bf16[16384,1024]{1,0} parameter(0)
  %i = s32[16384,1]{1,0} parameter(1)
  %u = bf16[16384,1024]{1,0} parameter(2)
  ROOT %f = bf16[16384,1024]{1,0} fusion(%a, %i, %u), kind=kCustom, calls=%fused
}
"""


def test_a_scatter_reads_and_writes_each_updated_row_at_the_update_rate() -> None:
    work = program_work(parse_module(_SCATTER))
    (op,) = work.ops
    assert op.kind == "update"
    updates = 16384 * 1024 * 2
    # its HBM bytes (the operand updated in place; the indices and updates
    # read, the result written) exceed twice the updates' bytes: the larger
    hbm = 16384 * 4 + updates + updates
    assert op.hbm_bytes == max(hbm, 2 * updates)
    c = CONSTANTS["v5e"]
    v5e = hardware_for("v5e-1")
    t = program_time(work, v5e, constants=c)
    rate = c.update_fraction * v5e.hbm_bytes_per_second
    assert t.memory_seconds == pytest.approx(op.hbm_bytes / rate)
    # the same scatter with every operand and its result on chip (no HBM
    # bytes at all) still reads and writes each updated row
    on_chip = _SCATTER.replace("{1,0}", "{1,0:S(1)}")
    (op,) = program_work(parse_module(on_chip)).ops
    assert op.kind == "update" and op.hbm_bytes == 2 * updates


# An MoE's count of tokens per expert: 16,384 indices, each adding one int32
# into 16 counters (on the chip: 144 us, where its 64 KB of updates say 0.3 us).
_COUNT = """HloModule jit_train

%add (l: s32[], r: s32[]) -> s32[] {
  %l = s32[] parameter(0)
  %r = s32[] parameter(1)
  ROOT %s = s32[] add(%l, %r)
}

ENTRY %main (a: s32[16], i: s32[16384,1], u: s32[16384]) -> s32[16] {
  %a = s32[16]{0:S(1)} parameter(0)
  %i = s32[16384,1]{1,0:S(1)} parameter(1)
  %u = s32[16384]{0:S(1)} parameter(2)
  ROOT %sc = s32[16]{0:S(1)} scatter(%a, %i, %u), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
}
"""


def test_a_scatter_reads_and_writes_at_least_a_row_of_lanes_per_index() -> None:
    (op,) = program_work(parse_module(_COUNT)).ops
    assert op.kind == "update"
    # 16,384 indices, each a row of 128 lanes of 4 B read and written
    assert op.hbm_bytes == 2 * 16384 * 128 * 4


def test_a_scatter_of_another_backend_has_no_tpu_row_per_index() -> None:
    # the row of lanes is a TPU's: with no floor (XLA:GPU's and XLA:CPU's
    # programs) the count reads and writes its 16,384 int32 updates, twice
    (op,) = program_work(parse_module(_COUNT), scatter_row_bytes=0).ops
    assert op.kind == "update"
    assert op.hbm_bytes == 2 * 16384 * 4
    # the compile's reader gives the floor to XLA:TPU's programs only
    by_backend = {b: analysis._work(_COUNT, b) for b in ("tpu", "gpu", "cpu")}
    hbm = {b: work["ops"][0][3] for b, work in by_backend.items() if work}
    assert hbm == {
        "tpu": 2 * 16384 * 128 * 4,
        "gpu": 2 * 16384 * 4,
        "cpu": 2 * 16384 * 4,
    }


def test_cycles_of_an_instruction_with_no_roofline_count_at_their_fraction() -> None:
    v5e = hardware_for("v5e-1")
    c = _constants(program_seconds=0.0, launch_seconds=0.0, onchip_cycles_fraction=0.2)
    assert c.seconds_per_cycle is not None
    # a vector fusion over on-chip operands: no matmul, no HBM bytes
    work = Work((OpWork("vector", 0.0, 5e7, 0, 300_000, 1),))
    t = program_time(work, v5e, constants=c)
    assert t.cycles_seconds == pytest.approx(0.2 * 300_000 * c.seconds_per_cycle)
    # the same cycles with HBM bytes are capped at the roofline, not scaled
    hbm = 10**6
    work = Work((OpWork("vector", 0.0, 5e7, hbm, 300_000, 1),))
    t = program_time(work, v5e, constants=c)
    assert c.cycles_cap is not None
    roof = hbm / v5e.hbm_bytes_per_second
    assert t.seconds == pytest.approx(
        max(
            min(300_000 * c.seconds_per_cycle, c.cycles_cap * roof),
            hbm / (c.hbm_fraction * v5e.hbm_bytes_per_second),
        )
    )


def test_each_array_taken_or_returned_costs_its_buffer_time() -> None:
    # _LOOP's entry takes one array and returns a tuple of two
    work = program_work(parse_module(_LOOP))
    assert work.buffers == 1 + 2
    assert work_from_json(work.json_data()) == work
    v5e = hardware_for("v5e-1")
    c = _constants(buffer_seconds=3e-6)
    without = program_time(work, v5e, constants=_constants(buffer_seconds=0.0))
    t = program_time(work, v5e, constants=c)
    assert t.seconds - without.seconds == pytest.approx(3 * 3e-6)
    assert t.launch_seconds - without.launch_seconds == pytest.approx(3 * 3e-6)


# a transpose between two on-chip buffers, as XLA:TPU emits them in a
# prefill: no HBM bytes, and XLA:TPU's cycles say a tenth of its time
_ONCHIP_COPY = """HloModule jit_f

ENTRY %main (a: bf16[1024,8,128]) -> bf16[1024,8,128] {
  %a = bf16[1024,8,128]{2,1,0:T(8,128)(2,1)S(1)} parameter(0)
  ROOT %c = bf16[1024,8,128]{0,2,1:T(8,128)(2,1)S(1)} copy(%a), backend_config={"window_config":{"estimated_cycles":"1200"}}
}
"""


def test_an_on_chip_copy_writes_its_result_at_the_on_chip_rate() -> None:
    (op,) = program_work(parse_module(_ONCHIP_COPY)).ops
    assert (op.kind, op.hbm_bytes, op.cycles) == ("memory", 0, 1200)
    assert op.chip_bytes == 1024 * 8 * 128 * 2  # its result, tiles exactly filled
    v5e = hardware_for("v5e-1")
    rate = 7e11
    c = _constants(program_seconds=0.0, launch_seconds=0.0, buffer_seconds=0.0)
    timed = program_time(
        Work((op,)), v5e, constants=dataclasses.replace(c, onchip_bytes_per_second=rate)
    )
    assert timed.memory_seconds == pytest.approx(op.chip_bytes / rate)
    # without the rate, only its cycles (at the on-chip fraction) time it
    plain = program_time(
        Work((op,)), v5e, constants=dataclasses.replace(c, onchip_bytes_per_second=None)
    )
    assert plain.memory_seconds == 0.0
    assert c.seconds_per_cycle is not None
    assert plain.cycles_seconds == pytest.approx(
        1200 * c.seconds_per_cycle * c.onchip_cycles_fraction
    )


# the relayout XLA:TPU emits after a mixture of experts' dispatch gather:
# on-chip buffers both, a new tiling, and no cycles stated (a v5e chip ran
# it in 90 us); a tuple of no bytes beside it
_ONCHIP_RELAYOUT = """HloModule jit_f

ENTRY %main (a: bf16[16384,1024]) -> bf16[8,1024,2,1024] {
  %a = bf16[16384,1024]{1,0:T(8,128)(2,1)S(1)} parameter(0)
  %t = () tuple()
  ROOT %r = bf16[8,1024,2,1024]{3,2,1,0:T(2,128)(2,1)S(1)} reshape(%a)
}
"""


def test_an_on_chip_relayout_without_cycles_is_timed_not_dropped() -> None:
    found = [
        (inst.name, op)
        for inst, op in instruction_work(parse_module(_ONCHIP_RELAYOUT))
        if inst is not None
    ]
    assert [name for name, _ in found] == ["r"]  # the empty tuple runs nothing
    ((_, op),) = found
    assert (op.kind, op.hbm_bytes, op.cycles) == ("memory", 0, None)
    assert op.chip_bytes == 16384 * 1024 * 2
    c = _constants(program_seconds=0.0, launch_seconds=0.0, buffer_seconds=0.0)
    assert c.onchip_bytes_per_second is not None
    timed = program_time(Work((op,)), hardware_for("v5e-1"), constants=c)
    assert timed.memory_seconds == pytest.approx(
        16384 * 1024 * 2 / c.onchip_bytes_per_second
    )


def test_a_table_written_before_chip_bytes_reads_back_without_them() -> None:
    old = {"ops": [["memory", 0.0, 0.0, 0, 1200, 3]], "buffers": 2}
    (op,) = work_from_json(old).ops
    assert (op.count, op.chip_bytes) == (3, 0)
    new = program_work(parse_module(_ONCHIP_COPY))
    assert work_from_json(new.json_data()) == new

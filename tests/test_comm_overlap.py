"""Collectives overlapped as the compiled schedule runs them (issue 54, item 2).

An asynchronous collective hides behind the compute scheduled between its
start and its done; what no compute hides is added to the step's estimate.
Hand-written scheduled modules check the windows read and the time hidden
against hand arithmetic (every compute instruction an ``exponential`` of
``f32[1024]``: 4 KiB read and 4 KiB written, at the data sheet's HBM
bandwidth with no launch cost, ``T`` seconds); a deviceless XLA:TPU compile of
an FSDP step checks the windows read against its text.
"""

import dataclasses
import os
import re
from typing import Any

import pytest

from nnx_introspect._accelerators.hardware import hardware_for
from nnx_introspect._roofline.estimate import CommTerm
from nnx_introspect._roofline.overlap import hidden_comm_seconds
from nnx_introspect._roofline.program import program_roofline
from nnx_introspect._roofline.timing import DATA_SHEET, program_time
from nnx_introspect._xla.collectives import KINDS, read_collectives
from nnx_introspect._xla.collectives.overlap import async_pairs, windowed_work
from nnx_introspect._xla.hlo import parse_module
from nnx_introspect._xla.hlo.work import Work, work_from_json
from nnx_introspect._xla.toolchain import cuda_plugin_version, libtpu_version

H100 = hardware_for("h100-8")
T = 2 * 4096 / H100.hbm_bytes_per_second  # one exponential of f32[1024]
AG_WIRE = 4096 * 3 // 4  # an all-gather to f32[1024] over 4 devices
AR_WIRE = 2 * 4096 * 3 // 4  # an all-reduce of f32[1024] over 4 devices

HEAD = [
    "HloModule jit_f, num_partitions=4",
    "",
    "%add (a: f32[], b: f32[]) -> f32[] {",
    "  %a = f32[] parameter(0)",
    "  %b = f32[] parameter(1)",
    "  ROOT %s = f32[] add(%a, %b)",
    "}",
    "",
]
AG = (
    "channel_id=1, replica_groups=[1,4]<=[4], dimensions={0}, "
    "use_global_device_ids=true"
)
AR = "channel_id=2, replica_groups=[1,4]<=[4], to_apply=%add"


def _module(*body: str, params: str = "p: f32[256], q: f32[1024]") -> str:
    return "\n".join(
        [
            *HEAD,
            f"ENTRY %main ({params}) -> f32[1024] {{",
            "  %p = f32[256]{0} parameter(0)",
            "  %q = f32[1024]{0} parameter(1)",
            *(f"  {line}" for line in body),
            "}",
        ]
    )


def _term(seconds_of_ag: float) -> CommTerm:
    """The ``('x',)`` term at the rate that takes the all-gather that long."""
    rate = AG_WIRE / seconds_of_ag
    return CommTerm(("x",), 4, 0, "nvlink", 1, rate, 0.0)


def _overlap(text: str, ag_seconds: float) -> tuple[Work, Any]:
    work = windowed_work(parse_module(text), read_collectives(text, (("x", 4),)))
    return work, hidden_comm_seconds(work, [_term(ag_seconds)], H100, DATA_SHEET)


def test_each_collective_hides_behind_the_compute_in_its_own_window() -> None:
    text = _module(
        f"%ags = (f32[256]{{0}}, f32[1024]{{0}}) all-gather-start(%p), {AG}",
        "%e1 = f32[1024]{0} exponential(%q)",
        "%e2 = f32[1024]{0} exponential(%e1)",
        "%agd = f32[1024]{0} all-gather-done(%ags)",
        f"%ars = f32[1024]{{0}} all-reduce-start(%e2), {AR}",
        "%e3 = f32[1024]{0} exponential(%agd)",
        "%ard = f32[1024]{0} all-reduce-done(%ars)",
        "ROOT %r = f32[1024]{0} add(%ard, %e3)",
    )
    # the all-gather takes 3T over a window of 2T, the all-reduce (twice the
    # bytes) 6T over a window of T: 2T + T hidden of 9T
    work, found = _overlap(text, 3 * T)
    assert [(w.collective, w.wire_bytes) for w in work.windows] == [
        ("ags", AG_WIRE),
        ("ars", AR_WIRE),
    ]
    assert [sum(op.count for op in s) for s in work.stretches] == [2, 0, 1]
    assert found.windows == 2
    assert found.windowed_seconds == pytest.approx(9 * T)
    assert found.hidden_seconds == pytest.approx(3 * T)
    # the collective shorter than its window: all of it hidden
    assert _overlap(text, 0.5 * T)[1].hidden_seconds == pytest.approx(0.5 * T + T)


def test_collectives_in_flight_together_share_the_compute_first_started_first() -> None:
    text = _module(
        f"%ags = (f32[256]{{0}}, f32[1024]{{0}}) all-gather-start(%p), {AG}",
        "%e1 = f32[1024]{0} exponential(%q)",
        f"%ars = f32[1024]{{0}} all-reduce-start(%e1), {AR}",
        "%e2 = f32[1024]{0} exponential(%q)",
        "%agd = f32[1024]{0} all-gather-done(%ags)",
        "%e3 = f32[1024]{0} exponential(%q)",
        "%ard = f32[1024]{0} all-reduce-done(%ars)",
        "ROOT %r = f32[1024]{0} add(%ard, %agd)",
    )
    # the all-gather (1.5T) hides behind e1 (T) and half of e2; the
    # all-reduce (3T) behind e2's other half and e3: 1.5T + 1.5T. Each alone
    # would hide 1.5T and 2T: e2 is not counted twice.
    work, found = _overlap(text, 1.5 * T)
    assert [(w.first, w.last) for w in work.windows] == [(0, 2), (1, 3)]
    assert found.windowed_seconds == pytest.approx(4.5 * T)
    assert found.hidden_seconds == pytest.approx(3 * T)


def test_synchronous_collectives_hide_nothing() -> None:
    text = _module(
        "%e1 = f32[1024]{0} exponential(%q)",
        f"%ag = f32[1024]{{0}} all-gather(%p), {AG}",
        "%e2 = f32[1024]{0} exponential(%e1)",
        "ROOT %r = f32[1024]{0} add(%ag, %e2)",
    )
    work, found = _overlap(text, T)
    assert work.windows == () and work.stretches == ()
    assert found.hidden_seconds == 0.0 and found.windows == 0
    assert "windows" not in work.json_data()  # as before windows were read


def test_a_loop_bodys_collective_overlaps_within_the_body_each_trip() -> None:
    lines = [
        *HEAD,
        "%body (s: (s32[], f32[256], f32[1024])) -> (s32[], f32[256], f32[1024]) {",
        "  %s = (s32[], f32[256]{0}, f32[1024]{0}) parameter(0)",
        "  %i = s32[] get-tuple-element(%s), index=0",
        "  %p = f32[256]{0} get-tuple-element(%s), index=1",
        "  %q = f32[1024]{0} get-tuple-element(%s), index=2",
        f"  %ags = (f32[256]{{0}}, f32[1024]{{0}}) all-gather-start(%p), {AG}",
        "  %e1 = f32[1024]{0} exponential(%q)",
        "  %agd = f32[1024]{0} all-gather-done(%ags)",
        "  %r = f32[1024]{0} add(%agd, %e1)",
        "  ROOT %t = (s32[], f32[256]{0}, f32[1024]{0}) tuple(%i, %p, %r)",
        "}",
        "",
        "%cond (s: (s32[], f32[256], f32[1024])) -> pred[] {",
        "  %s = (s32[], f32[256]{0}, f32[1024]{0}) parameter(0)",
        "  ROOT %c = pred[] constant(true)",
        "}",
        "",
        "ENTRY %main (p: f32[256], q: f32[1024]) -> f32[1024] {",
        "  %p0 = f32[256]{0} parameter(0)",
        "  %q0 = f32[1024]{0} parameter(1)",
        "  %z = s32[] constant(0)",
        "  %init = (s32[], f32[256]{0}, f32[1024]{0}) tuple(%z, %p0, %q0)",
        "  %w = (s32[], f32[256]{0}, f32[1024]{0}) while(%init), condition=%cond,"
        ' body=%body, backend_config={"known_trip_count":{"n":"4"}}',
        "  ROOT %out = f32[1024]{0} get-tuple-element(%w), index=2",
        "}",
    ]
    text = "\n".join(lines)
    # per trip: 2T of all-gather over a window of T (e1): 4 x T hidden of 4 x 2T
    work, found = _overlap(text, 2 * T)
    (window,) = work.windows
    assert window.wire_bytes == 4 * AG_WIRE
    assert [op.count for op in work.stretches[0]] == [4]
    assert found.windowed_seconds == pytest.approx(8 * T)
    assert found.hidden_seconds == pytest.approx(4 * T)


def test_an_async_wrapped_reduce_scatter_has_a_window() -> None:
    lines = [
        *HEAD,
        "%rs (x: f32[1024]) -> f32[256] {",
        "  %x = f32[1024]{0} parameter(0)",
        "  ROOT %reduce-scatter = f32[256]{0} reduce-scatter(%x), channel_id=3,"
        " replica_groups=[1,4]<=[4], dimensions={0}, to_apply=%add",
        "}",
        "",
        "ENTRY %main (q: f32[1024]) -> f32[1024] {",
        "  %q = f32[1024]{0} parameter(0)",
        "  %st = ((f32[1024]{0}), f32[256]{0}) async-start(%q), calls=%rs",
        "  %e1 = f32[1024]{0} exponential(%q)",
        "  %e2 = f32[1024]{0} exponential(%e1)",
        "  %dn = f32[256]{0} async-done(%st)",
        "  ROOT %r = f32[1024]{0} exponential(%e2)",
        "}",
    ]
    text = "\n".join(lines)
    (pair,) = async_pairs(parse_module(text))
    assert pair.collective == "reduce-scatter" and pair.names == ("st", "dn")
    # its operand's 4 KiB x 3/4 on the wire, as the all-gather's: 3T over 2T
    work, found = _overlap(text, 3 * T)
    assert [w.wire_bytes for w in work.windows] == [AG_WIRE]
    assert found.hidden_seconds == pytest.approx(2 * T)


def test_a_done_out_of_its_starts_computation_leaves_the_collective_exposed() -> None:
    text = _module(
        f"%ags = (f32[256]{{0}}, f32[1024]{{0}}) all-gather-start(%p), {AG}",
        "%e1 = f32[1024]{0} exponential(%q)",
        "%t = ((f32[256]{0}, f32[1024]{0})) tuple(%ags)",
        "%g = (f32[256]{0}, f32[1024]{0}) get-tuple-element(%t), index=0",
        "%agd = f32[1024]{0} all-gather-done(%g)",
        "ROOT %r = f32[1024]{0} add(%agd, %e1)",
    )
    (pair,) = async_pairs(parse_module(text))
    assert pair.done is None
    work, found = _overlap(text, T)
    assert work.windows == () and found.hidden_seconds == 0.0


def test_the_estimate_adds_only_the_exposed_communication() -> None:
    text = _module(
        f"%ags = (f32[256]{{0}}, f32[1024]{{0}}) all-gather-start(%p), {AG}",
        "%e1 = f32[1024]{0} exponential(%q)",
        "%agd = f32[1024]{0} all-gather-done(%ags)",
        "ROOT %r = f32[1024]{0} add(%agd, %e1)",
    )
    work = windowed_work(parse_module(text), read_collectives(text, (("x", 4),)))
    unread = dataclasses.replace(work, windows=(), stretches=())
    figures: dict[str, Any] = {
        "flops": 1e6,
        "bytes_accessed": 1e6,
        "wire_bytes_by_axes": ((("x",), 10**9),),  # 10 ms over 4 NVLink GPUs
        "mesh_axes": (("x", 4),),
    }
    plain = program_roofline("h100-4", **figures, work=unread).time
    timed = program_roofline("h100-4", **figures, work=work.json_data()).time
    assert plain is not None and timed is not None
    assert plain.comm_seconds == timed.comm_seconds == pytest.approx(1e9 / 450e9)
    # the window's one exponential hides its time of the all-gather's bytes
    assert timed.comm_hidden_seconds == pytest.approx(T)
    assert timed.seconds == pytest.approx(plain.seconds - T)
    data = timed.json_data()
    assert data["comm_exposed_seconds"] == pytest.approx(timed.comm_seconds - T)
    assert data["comm_windows"] == 1
    assert plain.json_data()["comm_windows"] == 0
    assert work_from_json(work.json_data()) == work


def test_words_say_what_was_hidden_and_what_was_exposed() -> None:
    v5e = hardware_for("v5e-8")
    work = Work(())
    timed = program_time(work, v5e, comm_seconds=3e-3, comm_hidden=(1e-3, 2))
    assert timed.seconds == pytest.approx(program_time(work, v5e).seconds + 2e-3)
    assert timed.basis.endswith(
        "its 3 ms of collectives are uncalibrated (data-sheet links, 1 ms hidden "
        "behind the compute scheduled while they are in flight, 2 ms exposed)"
    )
    plain = program_time(work, v5e, comm_seconds=3e-3)
    assert plain.basis.endswith("(data-sheet links, not overlapped)")
    # uncalibrated (a GPU): the collectives are said where some were hidden
    h100 = hardware_for("h100-8")
    gpu = program_time(work, h100, comm_seconds=3e-3, comm_hidden=(1e-3, 2))
    assert gpu.basis == (
        "uncalibrated: data-sheet peaks, no chip of this kind measured; its 3 ms "
        "of collectives are uncalibrated (data-sheet links, 1 ms hidden behind the "
        "compute scheduled while they are in flight, 2 ms exposed)"
    )
    none = program_time(work, h100, comm_seconds=3e-3, comm_hidden=(0.0, 2))
    assert (
        none.basis
        == program_time(work, h100, comm_seconds=3e-3).basis
        == ("uncalibrated: data-sheet peaks, no chip of this kind measured")
    )
    # one device: no communication, its data as before
    alone = program_time(work, v5e).json_data()
    assert not any(key.startswith("comm_") and key != "comm_seconds" for key in alone)


# --- deviceless XLA:TPU and XLA:GPU compiles ---------------------------------------

needs_libtpu = pytest.mark.skipif(
    libtpu_version() is None, reason="libtpu is not installed"
)
needs_plugin = pytest.mark.skipif(
    cuda_plugin_version() is None or os.environ.get("JAX_PLATFORMS") != "cpu",
    reason="the CUDA plugin's compile-only devices need it and JAX_PLATFORMS=cpu",
)

_BOOKKEEPING = ("get-tuple-element", "bitcast", "parameter", "constant", "tuple")
_LINE = re.compile(r"^\s*(?:ROOT )?%(\S+) = .*?\s([a-z][a-z0-9-]*)\((%\S+?)?[,)]")


def _fsdp_text(topology: str) -> str:
    """A step of four ``bf16[1024, 1024]`` layers, weights and batch over 8 devices."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from nnx_introspect._xla.toolchain import topology_mesh

    mesh, _ = topology_mesh(topology, (("fsdp", 8),))

    def loss(ws: list[Any], x: Any) -> Any:
        for w in ws:
            x = jnp.tanh(x @ w)
        return jnp.mean(x**2)

    def step(ws: list[Any], x: Any) -> Any:
        value, grads = jax.value_and_grad(loss)(ws, x)
        return value, [w - 0.1 * g for w, g in zip(ws, grads, strict=True)]

    spec = NamedSharding(mesh, P("fsdp", None))
    ws = [jax.ShapeDtypeStruct((1024, 1024), jnp.bfloat16, sharding=spec)] * 4
    x = jax.ShapeDtypeStruct((256, 1024), jnp.bfloat16, sharding=spec)
    out = (NamedSharding(mesh, P()), [spec] * 4)
    compiled = jax.jit(step, out_shardings=out).lower(ws, x).compile()
    text = compiled.as_text()
    assert isinstance(text, str)
    return text


def _pairs_in_text(listed: list[tuple[str, str, str | None]]) -> list[tuple[int, int]]:
    """Each asynchronous collective's (start, done) positions, read from the text.

    An ``X-done`` names its ``X-start``; XLA:TPU's async collective fusions
    are named ``async-collective-start``/``-done`` and must alternate.
    """
    names = [name for name, _, _ in listed]
    pairs = [
        (names.index(operand.lstrip("%")), i)
        for i, (_, opcode, operand) in enumerate(listed)
        if opcode.endswith("-done") and not opcode.startswith("copy") and operand
    ]
    fusions = [
        (i, name.startswith("async-collective-start"))
        for i, name in enumerate(names)
        if name.startswith(("async-collective-start", "async-collective-done"))
    ]
    assert [is_start for _, is_start in fusions] == [True, False] * (len(fusions) // 2)
    pairs += [
        (a, b) for (a, _), (b, _) in zip(fusions[::2], fusions[1::2], strict=True)
    ]
    return sorted(pairs)


@pytest.mark.parametrize(
    "topology",
    [
        pytest.param("v5e-8", marks=needs_libtpu),
        pytest.param("h100-8", marks=needs_plugin),
    ],
)
def test_an_fsdp_steps_windows_are_the_instructions_between_start_and_done(
    topology: str,
) -> None:
    text = _fsdp_text(topology)
    found = read_collectives(text, (("fsdp", 8),))
    work = windowed_work(parse_module(text), found)
    entry = text[text.index("\nENTRY ") :].splitlines()[1:]
    listed: list[tuple[str, str, str | None]] = [
        (m[1], m[2], m[3]) for m in map(_LINE.match, entry) if m is not None
    ]
    starts = [i for i, (_, op, _) in enumerate(listed) if op.endswith("-start")]
    starts += [i for i, (n, _, _) in enumerate(listed) if "collective-start" in n]
    dones = [i for i, (_, op, _) in enumerate(listed) if op.endswith("-done")]
    dones += [i for i, (n, _, _) in enumerate(listed) if "collective-done" in n]
    copies = [i for i, (_, op, _) in enumerate(listed) if op.startswith("copy-")]
    assert len(set(starts) - set(copies)) == len(set(dones) - set(copies))
    pairs = _pairs_in_text(listed)
    assert len(pairs) == len(set(starts) - set(copies)) >= 1
    forms = ("async", "async wrapper", "TPU async collective fusion")
    asynchronous = [r.name for r in found.rows if r.form in forms]
    assert [w.collective for w in work.windows] == asynchronous
    assert len(work.windows) == len(pairs)
    for (start, done), window in zip(pairs, work.windows, strict=True):
        compute = [
            name
            for name, opcode, _ in listed[start + 1 : done]
            if opcode not in _BOOKKEEPING
            and not opcode.endswith(("-start", "-done"))
            and opcode not in KINDS
            and "collective" not in name
        ]
        ops = [op for s in work.stretches[window.first : window.last] for op in s]
        # each instruction listed between is one run of the window's compute
        assert sum(op.count for op in ops) == len(compute), window
        row = next(r for r in found.rows if r.name == window.collective)
        assert window.wire_bytes == float(row.total_wire_bytes)
    # the schedule puts matmuls in some windows (on XLA:TPU, the continuation
    # fusions of its async collective fusions are fused with them)
    assert any(op.kind == "matmul" for s in work.stretches for op in s)
    est = program_roofline(
        topology,
        flops=1e9,
        bytes_accessed=1e9,
        wire_bytes_by_axes=tuple(
            (axes, round(total.wire_bytes)) for axes, total in found.by_axis().items()
        ),
        mesh_axes=(("fsdp", 8),),
        work=work,
    )
    assert est.time is not None
    t = est.time
    assert t.comm_windows == len(pairs)
    assert 0 < t.comm_hidden_seconds < t.comm_seconds


def test_windows_are_timed_at_their_own_terms_rate_and_irregular_ones_exposed() -> None:
    from nnx_introspect._xla import DCN_MARK
    from nnx_introspect._xla.hlo.work import CommWindow, OpWork

    stretch = (OpWork("vector", 0.0, 0.0, 4 * 8192, None, 1),)  # 4T of compute
    windows = (
        CommWindow("ici", ("x",), 1000.0, 0, 1),  # 1 s at 1000 B/s: 4T hidden
        CommWindow("dcn", (f"x{DCN_MARK}",), 10.0, 1, 2),  # T at 10/T B/s
        CommWindow("odd", ("?",), 1000.0, 2, 3),  # no term: all exposed
    )
    work = Work((), windows=windows, stretches=(stretch,) * 3)
    terms = [
        CommTerm(("x",), 4, 0, "nvlink", 1, 1000.0, 0.0),
        CommTerm(("x",), 2, 0, "dcn", 1, 10.0 / T, 0.0),
    ]
    found = hidden_comm_seconds(work, terms, H100, DATA_SHEET)
    assert found.windows == 2
    assert found.windowed_seconds == pytest.approx(1.0 + T)
    assert found.hidden_seconds == pytest.approx(4 * T + T)

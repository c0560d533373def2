"""The serving time estimate against arithmetic on the data sheet's figures."""

import pytest

from nnx_introspect import ServeMemoryReport, serve_memory_report
from nnx_introspect._serve.timing import ServeTime
from nnx_introspect.examples import LlamaConfig, llama

CFG = LlamaConfig(vocab=256, d_model=128, n_layers=2, n_heads=8, d_ff=256, n_kv_heads=4)
TINY = llama(CFG)
S, T, PROMPT = 8, 64, 16
H100_HBM = 3.35e12  # B/s, the H100 SXM5 data sheet
NVLINK = 450e9  # B/s per GPU per direction (NVLink 4: 900 GB/s both ways)
PEAKS = {"bf16": 989.5e12, "f32": 494.5e12}  # dense FLOP/s (TF32 for f32)


@pytest.fixture(scope="module")
def report() -> ServeMemoryReport:
    return serve_memory_report(
        TINY, "data=2,tp=4", sequences=S, context=T, prompt=PROMPT, topology="h100-8"
    )


def _time(report: ServeMemoryReport) -> ServeTime:
    assert report.time is not None
    return report.time


@pytest.mark.parametrize("name", ["prefill", "decode"])
def test_terms_are_the_programs_figures_on_the_data_sheet(
    report: ServeMemoryReport, name: str
) -> None:
    program = getattr(report, name)
    est = getattr(_time(report), name)
    assert program.flops and program.bytes_accessed and program.matmul_dtype
    assert est.flops == program.flops
    peak = PEAKS[program.matmul_dtype]
    assert est.compute_seconds == pytest.approx(program.flops / peak)
    # both programs: XLA's bytes accessed at the HBM bandwidth
    assert est.memory_seconds == pytest.approx(program.bytes_accessed / H100_HBM)
    # the tensor-parallel all-reduces, over NVLink within the host
    assert program.wire_bytes and {axes for axes, _ in program.wire_bytes} == {("tp",)}
    wire = sum(w for _, w in program.wire_bytes)
    assert wire > 0
    assert sum(t.seconds for t in est.comm) == pytest.approx(wire / NVLINK)
    terms = [est.compute_seconds, est.memory_seconds, wire / NVLINK]
    assert est.low_seconds == pytest.approx(max(terms))
    assert est.high_seconds == pytest.approx(sum(terms))


def test_tokens_per_second_by_arithmetic(report: ServeMemoryReport) -> None:
    time = _time(report)
    low, high = time.decode.low_seconds, time.decode.high_seconds
    assert time.seconds_per_token == (low, high)
    assert time.tokens_per_second == pytest.approx((S / high, S / low))
    assert time.tokens_per_second_per_device == pytest.approx(
        (S / high / 8, S / low / 8)
    )
    # two replicas (data=2) of tp=4
    assert time.tokens_per_second_per_replica == pytest.approx(
        (S / high / 2, S / low / 2)
    )
    assert time.time_to_first_token == (
        time.prefill.low_seconds,
        time.prefill.high_seconds,
    )
    assert time.prefill.tokens == S * PROMPT and time.decode.tokens == S


def test_the_read_floor_is_weights_and_cache(report: ServeMemoryReport) -> None:
    time = _time(report)
    # bf16 KV cache: k,v x layers x (4 heads / tp 4) x head dim 16 x 2 B per position
    per_position = 2 * 2 * 1 * 16 * 2
    assert report.kv_bytes_per_token == per_position
    # and the cache's write index, an int32 every device holds
    kv = per_position * (S // 2) * T + 4
    assert report.decode.kv_cache_bytes == kv
    assert time.read_bytes == report.decode.weights_bytes + kv
    assert time.read_floor_seconds == pytest.approx(time.read_bytes / H100_HBM)
    # the floor is shown beside the estimate's memory term, never in its place
    accessed = report.decode.bytes_accessed
    assert accessed is not None and accessed >= time.read_bytes
    assert time.decode.memory_seconds == pytest.approx(accessed / H100_HBM)
    assert time.over_floor == pytest.approx(accessed / time.read_bytes)
    text = " ".join(str(report).split())
    assert (
        f"({time.read_bytes:,} B)" in text
        and f"{time.over_floor:.2f}x its floor" in text
    )


def test_labelled_an_estimate_with_its_basis(report: ServeMemoryReport) -> None:
    text = " ".join(str(report).split())
    assert "time (estimate)" in text and "tokens/s per device (est.)" in text
    assert "not a measurement" in text
    assert "HBM 3.35 TB/s" in text
    dtype = report.decode.matmul_dtype
    peak = f"matmul peak {PEAKS[dtype or 'bf16'] / 1e12:.4g} TFLOP/s"
    assert peak in text
    # the bf16 peak named beside another dtype's, not repeated beside bf16's
    assert ("bf16 dense peak is 989.5 TFLOP/s" in text) == (dtype != "bf16")
    data = report.json_data()["time"]
    assert data["seconds_per_token"] == list(_time(report).seconds_per_token)


def test_no_estimate_without_a_topology() -> None:
    cpu = serve_memory_report(TINY, "tp=4", sequences=2, context=16, prompt=4)
    assert cpu.time is None
    assert "time (estimate)" not in str(cpu)
    assert cpu.json_data()["time"] is None


def test_one_device_has_no_communication_term() -> None:
    one = serve_memory_report(
        TINY, "tp=1", sequences=2, context=16, prompt=4, topology="h100-1"
    )
    time = _time(one)
    assert time.decode.comm == ()
    assert time.decode.high_seconds == pytest.approx(
        time.decode.compute_seconds + time.decode.memory_seconds
    )


def test_extra_traffic_is_named_only_over_the_threshold() -> None:
    """Over 1.5x its floor the decode step's largest movers are named, by line."""
    from nnx_introspect._roofline.program import program_roofline
    from nnx_introspect._serve.timing import EXTRA

    def timed(accessed: float) -> ServeTime:
        step = program_roofline(
            "h100-8",
            flops=0.0,
            bytes_accessed=accessed,
            wire_bytes_by_axes=(),
            mesh_axes=(("tp", 8),),
        )
        row = {
            "op": "transpose",
            "instructions": 16,
            "bytes": 2**30,
            "hbm_bytes": 2**30,
            "shape": "bf16[64,1,64,8192]{3,2,1,0}",
            "source": {"file": "/m/model.py", "line": 42, "function": "Attn.__call__"},
        }
        return ServeTime(
            step,
            step,
            64,
            1,
            read_bytes=10**9,
            traffic={"by_source": [row], "rows": []},
        )

    under = timed(EXTRA * 10**9)  # at the threshold: nothing named
    assert under.extra == ()
    over = timed(2 * 10**9)
    (line,) = over.extra
    assert (
        line == "1 GiB: transpose bf16[64,1,64,8192] x16 at model.py:42 (Attn.__call__)"
    )
    assert any("Over 1.5x its floor" in b and line in b for b in over.basis)

"""breakdown=True for serving: the buffers at each program's peak, KV cache a kind."""

import json
import math

import pytest

from nnx_introspect import ArgumentError, ServeMemoryReport, serve_memory_report
from nnx_introspect._breakdown.rows import KINDS
from nnx_introspect.cli import main
from nnx_introspect.examples import LlamaConfig, llama

CFG = LlamaConfig(vocab=256, d_model=128, n_layers=2, n_heads=8, d_ff=256, n_kv_heads=4)
TINY = llama(CFG)
S, T, PROMPT, DP, TP = 8, 64, 16, 2, 4


@pytest.fixture(scope="module")
def report() -> ServeMemoryReport:
    return serve_memory_report(
        TINY,
        {"data": DP, "tp": TP},
        sequences=S,
        context=T,
        prompt=PROMPT,
        topology="h100-8",
        breakdown=True,
    )


def test_kinds_of_serving() -> None:
    assert {"weights", "KV cache"} <= set(KINDS)


@pytest.mark.parametrize("name", ["prefill", "decode"])
def test_the_weights_at_the_peak_are_their_shards(
    report: ServeMemoryReport, name: str
) -> None:
    program = getattr(report, name)
    assert program.breakdown is not None and program.breakdown_error is None
    rows = {r.path: r for r in program.breakdown.rows if r.kind == "weights"}
    # the embedding and the lm head: bf16, by arithmetic
    embed = rows["embed/embedding"]
    assert embed.nbytes == math.prod(embed.shape) * 2
    assert math.prod(embed.shape) * TP in (256 * 128, 256 * 128 * TP)
    assert sum(r.nbytes for r in rows.values()) <= program.weights_bytes
    # every buffer live at the peak is in a row, the rows add up to the peak
    total = sum(r.nbytes for r in program.breakdown.rows)
    assert total == program.breakdown.live_peak_bytes


def test_decode_holds_the_kv_cache_at_its_peak(report: ServeMemoryReport) -> None:
    breakdown = report.decode.breakdown
    assert breakdown is not None
    cache = [r for r in breakdown.rows if r.kind == "KV cache"]
    assert cache, [(r.kind, r.label) for r in breakdown.rows]
    # the cache's write index (an int32) is a cache buffer too
    cache = [r for r in cache if not r.label.endswith("index")]
    # each a layer's k or v, its per-device shard: sequences/dp x context x
    # kv heads/tp x head dim, bf16
    shard = (S // DP) * T * (4 // TP) * (CFG.d_model // CFG.n_heads)  # 4 KV heads
    assert all(r.nbytes == shard * 2 for r in cache)
    # the cache's own leaves by path (as taken, or updated in place)
    assert all(
        r.path is not None and r.path.split("/")[-1] in ("k", "v") for r in cache
    )
    assert all(r.label.startswith(r.path) for r in cache if r.path is not None)
    # the new cache's layers, written in place into the donated buffers: the
    # cache kind too, never an output or an empty buffer
    assert any("(updated in place)" in r.label for r in cache)
    outputs = [r.label for r in breakdown.rows if r.kind in ("output", "empty buffer")]
    assert not any("KV cache" in label for label in outputs), outputs
    assert {r.kind for r in breakdown.rows} <= set(KINDS)


def test_in_json_and_none_unless_asked(report: ServeMemoryReport) -> None:
    data = json.loads(report.to_json())
    assert data["decode"]["breakdown"]["live_peak_bytes"] == (
        report.decode.breakdown.live_peak_bytes  # type: ignore[union-attr]
    )
    plain = serve_memory_report(TINY, "tp=4", sequences=2, context=8)
    assert plain.decode.breakdown is None and plain.prefill.breakdown is None
    with pytest.raises(ArgumentError, match="`breakdown` must be True or False"):
        serve_memory_report(TINY, "tp=4", sequences=2, context=8, breakdown="yes")


def test_cli_breakdown(capsys: pytest.CaptureFixture[str]) -> None:
    target = "tests.llama_tiny_layers:llama_small"  # 2 layers of width 32
    argv = ["serve", target, "--mesh", "tp=4", "--sequences", "2", "--context", "8"]
    assert main([*argv, "--breakdown", "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert out.count("Buffers live at XLA's peak") == 2
    assert "| weights |" in out
    assert main([*argv, "--breakdown", "--max-context"]) == 2
    assert "argument --breakdown:" in capsys.readouterr().err

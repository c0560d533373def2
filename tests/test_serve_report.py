"""serve_memory_report against a hand-written compile of the same programs."""

import json
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from nnx_introspect import ServeMemoryReport, serve_memory_report
from nnx_introspect.examples import LlamaConfig, llama

CFG = LlamaConfig(vocab=64, d_model=32, n_layers=2, n_heads=4, d_ff=48, n_kv_heads=2)
TINY = llama(CFG)
S, T, PROMPT = 4, 16, 8
MESH = {"data": 2, "tp": 2}
CPU: dict[str, Any] = {  # XLA:CPU's options, as the library compiles with
    "xla_backend_optimization_level": 0,
    "xla_llvm_disable_expensive_passes": True,
}


@pytest.fixture(scope="module")
def report() -> ServeMemoryReport:
    return serve_memory_report(
        TINY, MESH, sequences=S, context=T, prompt=PROMPT, max_device_bytes="1GiB"
    )


def _by_hand(name: str) -> Any:
    """The program written out: bf16 weights replicated, cache P(data, -, tp, -)."""
    mesh = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("data", "tp"))
    model = nnx.eval_shape(lambda: TINY(nnx.Rngs(0)))
    graphdef, state = nnx.split(model)
    rep = NamedSharding(mesh, PartitionSpec())
    weights = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, jnp.bfloat16, sharding=rep), state
    )
    kv = NamedSharding(mesh, PartitionSpec("data", None, "tp", None))
    leaf = jax.ShapeDtypeStruct((S, T, 2, 8), jnp.bfloat16, sharding=kv)
    cache: dict[str, Any] = {f"layer_{i}": {"k": leaf, "v": leaf} for i in range(2)}
    cache["index"] = jax.ShapeDtypeStruct((), jnp.int32, sharding=rep)  # next slot
    shardings = jax.tree.map(lambda x: x.sharding, cache)
    rows = NamedSharding(mesh, PartitionSpec("data", None))
    length = 1 if name == "decode" else PROMPT
    tokens = jax.ShapeDtypeStruct((S, length), jnp.int32, sharding=rows)

    def program(w: Any, c: Any, tok: Any, pos: Any, *slot: Any) -> Any:
        mask = jnp.arange(T)[None, None, :] <= pos[:, :, None]
        logits, c = nnx.merge(graphdef, w)(tok, pos, c, mask)
        return logits[:, -1], jax.lax.with_sharding_constraint(c, shardings)

    args = [weights, cache, tokens, tokens]
    if name == "prefill":
        args.append(jax.ShapeDtypeStruct((), jnp.int32, sharding=rep))
    with jax.set_mesh(mesh), nnx.use_eager_sharding(False):
        lowered = jax.jit(program, donate_argnums=(1,)).lower(*args)
    return lowered.compile(compiler_options=CPU).memory_analysis()


@pytest.mark.parametrize("name", ["prefill", "decode"])
def test_figures_equal_a_hand_written_compile(
    report: ServeMemoryReport, name: str
) -> None:
    hand = _by_hand(name)
    program = getattr(report, name)
    assert program.argument_bytes == hand.argument_size_in_bytes
    assert program.output_bytes == hand.output_size_in_bytes
    assert program.temp_bytes == hand.temp_size_in_bytes
    assert program.alias_bytes == hand.alias_size_in_bytes
    # the donated cache is aliased: its bytes are in place in the output
    assert program.alias_bytes == program.kv_cache_bytes


def test_cache_and_weights_by_arithmetic(report: ServeMemoryReport) -> None:
    per_token = 2 * 2 * (2 // 2) * 8 * 2  # k,v x layers x heads/tp x dim x bf16
    assert report.kv_bytes_per_token == per_token
    # and the cache's write index, an int32 on every device
    assert report.decode.kv_cache_bytes == per_token * (S // 2) * T + 4
    params = 2 * 64 * 32 + 2 * (2 * 32 * 32 + 2 * 32 * 16 + 3 * 32 * 48 + 64) + 32
    assert report.decode.weights_bytes == params * 2  # replicated bfloat16
    # arguments: weights, cache, tokens and positions (int32) on one device
    tokens = 2 * (S // 2) * 1 * 4
    assert (
        report.decode.argument_bytes
        == params * 2 + per_token * (S // 2) * T + 4 + tokens
    )


def test_the_verdict_both_ways(report: ServeMemoryReport) -> None:
    assert report.fits() is True and report.verdict.startswith("fits")
    tight = serve_memory_report(
        TINY,
        MESH,
        sequences=S,
        context=T,
        prompt=PROMPT,
        max_device_bytes=report.peak_bytes - 1,
    )
    assert tight.fits() is False and "NOT" in tight.verdict
    exact = serve_memory_report(
        TINY,
        MESH,
        sequences=S,
        context=T,
        prompt=PROMPT,
        max_device_bytes=report.peak_bytes,
    )
    assert exact.fits() is True
    none = serve_memory_report(TINY, MESH, sequences=S, context=T, prompt=PROMPT)
    assert none.fits() is None


def test_renderings(report: ServeMemoryReport) -> None:
    data = json.loads(report.to_json())
    assert data["decode"]["peak_bytes"] == report.decode.peak_bytes
    assert data["kv_bytes_per_token"] == report.kv_bytes_per_token
    assert data["fits"] is True
    text = report.to_markdown()
    assert "| KV cache |" in text and f"\n{report.verdict}\n" in text
    assert text.index(report.verdict) < text.index("| KV cache |")  # verdict first
    page = report.to_html()
    assert '<p class="verdict ok">' + report.verdict in page
    from rich.console import Console

    console = Console(width=120, record=True)
    console.print(report)
    assert "decode" in console.export_text()


def test_prefilling_fewer_sequences(report: ServeMemoryReport) -> None:
    fewer = serve_memory_report(
        TINY, MESH, sequences=S, context=T, prompt=PROMPT, prefill_sequences=2
    )
    assert fewer.prefill.sequences == 2
    assert fewer.prefill.kv_cache_bytes == report.prefill.kv_cache_bytes
    assert fewer.prefill.flops is not None and report.prefill.flops is not None
    assert fewer.prefill.flops < report.prefill.flops
    assert fewer.decode.memory == report.decode.memory

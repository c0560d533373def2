"""Serving a model written as tunix writes its models (issue 35, items 1-6).

``tests/tunix_shaped.py`` copies what the audit found on google-tunix 0.1.7's
own models: the cache's layout and shared ``end_index``, tunix's attention
einsums, ``fsdp``/``tp`` annotations and activation constraints off the CPU,
float32 keys and values (Qwen3), sliding-window layers (Gemma 2/3). Compiled
for ``h100-2`` with no GPU. Where tunix is installed, its own Llama is tried too.
"""

import json
from pathlib import Path
from typing import Any

import pytest

from nnx_introspect import ArgumentError, max_sequences, serve_memory_report
from tests.cli_helpers import run
from tests.shared_compiles import cache_in
from tests.tunix_shaped import GEMMA_LIKE

CACHE = "tests.tunix_shaped:init_cache"
MESH = {"fsdp": 1, "tp": 2}
S, T, PROMPT = 4, 64, 16


def _report(name: str, mesh: Any = MESH, **options: Any) -> Any:
    return serve_memory_report(
        f"tests.tunix_shaped:{name}",
        mesh,
        sequences=S,
        context=T,
        prompt=PROMPT,
        topology="h100-2",
        init_cache=CACHE,
        **options,
    )


@pytest.fixture(scope="module")
def broken_down() -> Any:
    return _report("llama_like", breakdown=True)


def test_kv_cache_is_the_donated_buffers_and_copies_are_named(broken_down: Any) -> None:
    """Item 1: XLA's copies of the cache are "KV cache copy", never "KV cache"."""
    rows = broken_down.decode.breakdown.rows
    cache = [r for r in rows if r.kind == "KV cache"]
    copies = [r for r in rows if r.kind == "KV cache copy"]
    # the cache: its own leaves, as the program took them or updated in place
    assert cache and all(r.parameter is not None or r.output_index for r in cache)
    per_leaf = (S * T * 1 * 8 * 2, S * 4)  # k or v (1 KV head a device), end_index
    assert all(r.nbytes <= max(per_leaf) for r in cache)
    # tunix's einsum BHGTS,BSHD->BTHGD: XLA:GPU copies v into another layout
    assert copies, [(r.kind, r.label) for r in rows]
    assert all(r.label.startswith("copy of layer_") for r in copies)
    big = [r for r in copies if r.nbytes == S * T * 1 * 8 * 2]
    assert big and all(r.label.split(":")[0].endswith("/v") for r in big)
    assert all(r.parameter is None for r in copies)
    # every layer's leaf is one row of the table
    text = broken_down.decode.breakdown.to_markdown()
    assert "layer_*/k (updated in place) \N{MULTIPLICATION SIGN}2" in text


def test_a_kv_dtype_mismatch_names_kv_cache_and_the_models_dtype() -> None:
    """Item 2: Qwen3's float32 keys and values into a bfloat16 cache."""
    with pytest.raises(ArgumentError) as error:
        _report("qwen_like")
    assert error.value.argument == "kv_cache"
    message = str(error.value)
    assert "the model writes its keys and values in float32" in message
    assert "kv_cache='float32'" in message and ".." not in message
    assert _report("qwen_like", kv_cache="float32").fits()


@pytest.fixture(scope="module")
def completed(module_cache: Path) -> Any:
    """The report on tp=2, its compile kept in this module's own cache: the
    command line's test asks for the same programs and reads them back."""
    with cache_in(module_cache):
        return _report("llama_like", mesh="tp=2")


def test_a_mesh_lacking_an_axis_the_model_constrains_gets_it_at_size_one(
    broken_down: Any, completed: Any
) -> None:
    """Item 3: tp=2 for a model whose activations name fsdp: compiled on fsdp=1."""
    report = completed
    assert report.decode.cached is None  # compiled for this test, not read back
    assert report.mesh_axes == (("tp", 2), ("fsdp", 1))
    (note,) = [n for n in report.notes if "leaves out fsdp" in n]
    assert "compiled on tp=2,fsdp=1" in note
    # the same program as on fsdp=1,tp=2 given whole
    assert report.decode.peak_bytes == broken_down.decode.peak_bytes
    assert note in report.to_markdown()


def test_the_cli_completes_the_mesh_too(
    completed: Any, module_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with cache_in(module_cache):
        code, out, err = run(
            [
                "serve",
                "tests.tunix_shaped:llama_like",
                "--mesh",
                "tp=2",
                "--sequences",
                "4",
                "--context",
                "64",
                "--prompt",
                "16",
                "--topology",
                "h100-2",
                "--init-cache",
                CACHE,
                "--format",
                "json",
            ],
            capsys,
        )
    assert code == 0, err
    data = json.loads(out)
    assert data["mesh"] == [["tp", 2], ["fsdp", 1]]
    assert any("leaves out fsdp" in n for n in data["notes"])
    # the command line sent the API's request: both programs read back from it
    assert "cached" in data["prefill"] and "cached" in data["decode"]
    assert data["decode"]["peak_bytes"] == completed.decode.peak_bytes


def test_the_searchs_answer_is_the_reports(tmp_path: Path) -> None:
    """Item 4: max_sequences with prompt and prefill_sequences, both programs.

    On this process's CPU devices (the search's logic is the same anywhere).
    The compile cache is on, in this test's own directory: the reports at the
    answer and a step past it are programs the search compiled, read back
    when the report asks for the same program (the same key), compiled anew
    when the search's request differs from the report's.
    """
    common: dict[str, Any] = {
        "context": T,
        "prompt": PROMPT,
        "prefill_sequences": 2,
        "init_cache": CACHE,
        "max_device_bytes": 1_000_000,
    }
    with cache_in(tmp_path):
        found = max_sequences("tests.tunix_shaped:llama_like", "fsdp=1,tp=2", **common)

        def fits(n: int) -> bool | None:
            return serve_memory_report(
                "tests.tunix_shaped:llama_like", "fsdp=1,tp=2", sequences=n, **common
            ).fits()

        step = found.step
        assert found.value > 0 and fits(found.value) is True
        assert fits(found.value + step) is False


def test_sliding_window_layers_are_named_with_a_bounded_cache() -> None:
    """Item 5: half the layers look back 16 positions; the cache holds all 64."""
    report = _report("gemma_like")
    (note,) = [n for n in report.notes if "sliding window" in n]
    assert "2 of 4 attention layers" in note and "(16 positions)" in note
    # per layer and position: 1 KV head a device x 8 dims x k,v x 2 B
    per = 1 * 8 * 2 * 2
    full = per * GEMMA_LIKE.num_layers * T * S
    bounded = per * (2 * T + 2 * 16) * S
    assert f"{bounded // 1024} KiB per device instead of {full // 1024} KiB" in note
    assert "not compiled" in note


def test_serve_help_names_one_default_target(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Item 6, and the help of every size flag (item 8)."""
    code, out, _ = run(["serve", "--help"], capsys)
    assert code == 0
    text = " ".join(out.split())
    assert text.count("default: nnx_introspect.examples:llama_7b_sharded") == 1
    assert "llama_7b)" not in text
    assert "default: the whole --context" in text
    assert "bf16 (default), f32, fp8 or int8" in text


def test_tunix_own_llama_with_a_mesh_lacking_fsdp() -> None:
    """Where tunix is installed: its Llama 3 on tp=2 completes the mesh too."""
    pytest.importorskip("tunix")
    report = serve_memory_report(
        "tests.tunix_lm:tiny_llama3",
        "tp=2",
        sequences=4,
        context=64,
        prompt=16,
        topology="h100-2",
        init_cache="tests.tunix_lm:tunix_cache",
    )
    assert ("fsdp", 1) in report.mesh_axes

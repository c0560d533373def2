"""The step report's HTML page: what was compiled, the peak and budget in bold, a bar.

One small CPU step of a Llama with llama_tiny_sharded's annotations on 2 layers
of width 32 (``tests/llama_tiny_layers.py``; 8 virtual devices, fsdp=2,tp=4),
with and without a budget.
"""

import json
import re

import jax
import jax.numpy as jnp
import pytest

from nnx_introspect import StepMemoryReport, step_memory_report

_TARGET = "tests.llama_tiny_layers:llama_small_sharded"

_SCHEMA_V4_KEYS = [
    "schema", "version", "ok", "fits", "max_device_bytes", "device_memory_bytes",
    "out_of_memory", "verdict", "num_devices", "mesh", "peak_bytes", "peak_basis",
    "xla_peak_bytes", "remat_limit_bytes", "remat_reduced_to_bytes",
    "argument_bytes", "output_bytes", "temp_bytes", "alias_bytes", "flops",
    "backend", "compiler", "device_kind", "topology", "compiled_in",
    "compile_seconds", "compiler_message", "compiler_required_bytes",
    "compiler_available_bytes", "warnings", "device_order", "sharding_constraints",
    "budget_basis", "allocator_fraction", "needed_fraction", "traced_platform",
    "bytes_accessed", "matmul_dtype", "collective_wire_bytes", "collectives",
    "roofline", "breakdown", "what_to_change", "step", "loss", "optimizer", "batch",
    "batch_specs", "temporaries_caveat", "plan",
]  # fmt: skip
"""The keys of the step JSON before the page changed, in order (schema v4)."""


@pytest.fixture(scope="module")
def report() -> StepMemoryReport:
    return step_memory_report(
        _TARGET,
        "fsdp=2,tp=4",
        jax.ShapeDtypeStruct((8, 64), jnp.int32),
        loss="lm",
        optimizer="adamw",
        max_device_bytes="1GiB",
    )


def _compiled(page: str) -> dict[str, str]:
    block = re.search(r'<dl class="compiled">(.*?)</dl>', page)
    assert block is not None
    pairs = re.findall(r"<dt>(.*?)</dt><dd>(.*?)</dd>", block.group(1))
    return dict(pairs)


def test_the_page_names_what_was_compiled(report: StepMemoryReport) -> None:
    page = report.to_html()
    facts = _compiled(page)
    assert facts["loss"] == "lm"
    assert facts["optimizer"] == "adamw"
    assert facts["batch"] == "int32[8,64] split as P(&#x27;fsdp&#x27;)"
    assert facts["mesh"] == "fsdp=2, tp=4 (8 devices)"
    n = report.plan.n_params
    assert facts["model"].startswith(f"{_TARGET} ({n:,} parameters")
    assert "options" not in facts  # none applied
    assert facts["step"] == "forward + backward + optimizer update"
    assert facts["topology"].startswith("none")
    # right under the verdict, before the table
    assert page.index('class="verdict') < page.index("<dl") < page.index("<table>")


def test_only_the_peak_and_the_budget_are_bold(report: StepMemoryReport) -> None:
    page = report.to_html()
    bold = re.findall(r'<tr class="total"><td>(.*?)</td>', page)
    assert bold == ["budget per device", "peak per device"]
    plain = re.findall(r'<tr class="total plain"><td>(.*?)</td>', page)
    assert "device memory" not in plain  # no device memory on CPU
    assert any(name.startswith("plan: ") for name in plain)
    markdown = report.to_markdown()
    bold_md = re.findall(r"^\| \*\*(.*?)\*\* \|", markdown, flags=re.M)
    assert bold_md == ["budget per device", "peak per device"]
    assert "| plan: params |" in markdown
    table = report.table()
    assert table.emphasis is not None
    assert [row[0] for row in table.totals if row[0] in table.emphasis] == bold


def test_the_page_draws_the_peak_against_the_budget(report: StepMemoryReport) -> None:
    assert report.breakdown is None
    page = report.to_html()
    assert page.count("<svg") == 1
    assert "arguments: " in page and "temporaries: " in page
    assert "against the budget (dashed)" in page
    memory = report.memory
    parts = re.findall(r"<title>[^<:]+: ([^<]+)</title>", page)
    assert len(parts) >= 3
    assert (
        memory.argument_bytes
        + memory.output_bytes
        - memory.alias_bytes
        + memory.temp_bytes
        == memory.peak_bytes
    )


def test_without_a_budget_the_bar_has_no_budget(report: StepMemoryReport) -> None:
    import dataclasses

    from nnx_introspect._step.step_records import StepBudget

    free = dataclasses.replace(report, budget=StepBudget())
    page = free.to_html()
    assert page.count("<svg") == 1
    assert "against the budget" not in page
    bold = re.findall(r'<tr class="total"><td>(.*?)</td>', page)
    assert bold == ["peak per device"]


_ADDED_KEYS = [
    "remat", "microbatches", "tokens_per_step", "lora", "compiler_flags", "measured",
]  # fmt: skip
"""Keys added since (issue 25's step options, issue 24's tokens, issue 36's
LoRA, issue 54's compiler flags), after ``optimizer``: every earlier key keeps
its place."""


def test_the_json_only_adds_keys(report: StepMemoryReport) -> None:
    keys = list(json.loads(report.to_json()))
    assert [k for k in keys if k not in _ADDED_KEYS] == _SCHEMA_V4_KEYS
    after = keys.index("optimizer") + 1
    assert keys[after : after + 5] == _ADDED_KEYS[:5]
    assert keys[-1] == "measured"  # issue 34's, last

"""``fit_step`` and ``step --fit`` (issue 25, item 2), on XLA:CPU.

The chosen configuration is held against a separate ``step_memory_report``
with the same options; the ranking against the rows' own figures.
"""

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jax
import jax.numpy as jnp
import pytest

import nnx_introspect as ni

# programs asked for again (a report of a search's answer, a command line's
# of an API call's): the module's cache compiles each once
pytestmark = pytest.mark.usefixtures("one_compile_per_program")

TINY = "nnx_introspect.examples:llama_tiny_sharded"
# the searches compile 2 of its 8 layers: the same ladders and verdicts at about
# half of each compile (the step as given peaks at about 188 MiB)
TWO_LAYERS = "tests.llama_tiny_layers:llama_tiny_2_layers_sharded"
TOKENS = jax.ShapeDtypeStruct((32, 256), jnp.int32)
MESH = "fsdp=8,tp=1"


def _fit(**options: Any) -> ni.FitSearch:
    with ThreadPoolExecutor(2) as pool:
        return ni.fit_step(
            TWO_LAYERS,
            MESH,
            (TOKENS,),
            loss="lm",
            optimizer="adamw",
            executor=pool,
            **options,
        )


@pytest.fixture(scope="module")
def tight() -> ni.FitSearch:
    """A budget the step as given misses (its peak is about 188 MiB)."""
    return _fit(max_device_bytes="100MB")


def test_the_chosen_configuration_fits_and_equals_its_own_report(
    tight: ni.FitSearch,
) -> None:
    chosen = tight.chosen
    assert chosen is not None and tight.ok
    assert chosen.status == "fits"
    alone = ni.step_memory_report(
        TWO_LAYERS,
        dict(chosen.mesh),
        (TOKENS,),
        loss="lm",
        optimizer="adamw",
        remat=chosen.remat or None,
        microbatches=chosen.microbatches,
    )
    assert alone.peak_bytes == chosen.peak_bytes
    assert alone.fits(tight.max_device_bytes)
    assert alone.flops == chosen.flops
    # the given step did not fit: something had to change
    given = [r for r in tight.rows if not r.remat and r.microbatches == 1]
    assert given[0].status == "does not fit"
    assert given[0].peak_bytes is not None
    assert given[0].peak_bytes > tight.max_device_bytes


def test_no_compiled_fitting_row_is_faster(tight: ni.FitSearch) -> None:
    chosen = tight.chosen
    assert chosen is not None and chosen.flops is not None
    for row in tight.rows:
        if row.status == "fits" and row is not chosen:
            assert row.flops is not None and row.flops >= chosen.flops


def test_compiles_are_few_and_every_other_row_says_why(tight: ni.FitSearch) -> None:
    assert tight.compiles <= 12
    compiled = [r for r in tight.rows if r.peak_bytes is not None]
    assert len(compiled) == tight.compiles
    for row in tight.rows:
        if row.status == "not compiled":
            assert row.why, row
    assert tight.layer == "LlamaLayer"
    # chosen from the breakdown: the kept bytes under its instances
    assert tight.layer_basis.startswith("LlamaLayer: ")
    assert "of kept activations under its 2 instances" in tight.layer_basis


def test_the_change_is_written_as_code(tight: ni.FitSearch) -> None:
    chosen = tight.chosen
    assert chosen is not None and tight.change is not None
    if chosen.microbatches > 1:
        rows = 32 // chosen.microbatches
        assert f"over {chosen.microbatches} microbatches of {rows}" in tight.change
    for cls, policy in chosen.remat:
        assert f"wrap `{cls}.__call__` in `nnx.remat(policy=" in tight.change
        assert f"jax.checkpoint_policies.{policy})`" in tight.change


def test_every_format_carries_the_verdict(tight: ni.FitSearch) -> None:
    data = json.loads(tight.to_json())
    assert data["ok"] is True and data["verdict"] == tight.verdict
    assert data["chosen"]["peak_bytes"] == tight.chosen.peak_bytes  # type: ignore[union-attr]
    assert len(data["rows"]) == len(tight.rows)
    assert tight.verdict in tight.to_markdown()
    page = tight.to_html()
    assert "Fits:" in page and "<table>" in page


def test_a_step_that_fits_as_given_needs_one_compile() -> None:
    search = _fit(max_device_bytes="2GB")
    assert search.compiles == 1
    assert search.chosen is not None and search.chosen.microbatches == 1
    assert search.change == f"nothing: the step fits as it is (on mesh {MESH})"


def test_state_over_the_budget_is_rejected_before_any_compile() -> None:
    search = _fit(max_device_bytes="1MB")
    assert search.compiles == 0 and not search.ok
    assert search.rows[0].status == "not compiled"
    assert "rejected by the planner" in (search.rows[0].why or "")
    assert search.verdict.startswith("Nothing fits")


@pytest.mark.parametrize(
    ("options", "argument"),
    [
        ({"loss": None, "optimizer": None, "max_device_bytes": "1GB"}, "loss"),
        ({"max_device_bytes": None}, "max_device_bytes"),
        ({"max_device_bytes": "1GB", "remat": "Block"}, "remat"),
    ],
)
def test_bad_arguments_name_themselves(options: dict[str, Any], argument: str) -> None:
    kwargs = {"loss": "lm", "optimizer": "adamw"} | options
    with pytest.raises(ValueError) as caught:
        ni.fit_step(TINY, MESH, (TOKENS,), **kwargs)
    assert caught.value.argument == argument  # type: ignore[attr-defined]


def test_a_wrong_executor_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="executor"):
        ni.fit_step(TINY, MESH, (TOKENS,), max_device_bytes="1GB", executor=3)


@pytest.mark.parametrize(
    "flags",
    [
        ["--fit", "--max-batch"],
        ["--fit", "--microbatches", "2"],
        ["--fit", "--remat", "LlamaLayer:dots_saveable"],
        ["--fit", "--breakdown"],
        ["--remat", ":x"],
        ["--microbatches", "0"],
    ],
)
def test_cli_refuses_before_compiling(flags: list[str]) -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "nnx_introspect",
            "step",
            TINY,
            "--mesh",
            MESH,
            "--batch",
            "int32[32,256]",
            "--loss",
            "lm",
            "--max-device-bytes",
            "1GB",
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    flag = next(f for f in flags if f.startswith("--") and f != "--fit")
    assert f"argument {flag}" in lines[0]

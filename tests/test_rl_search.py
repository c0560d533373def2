"""rl_max_batch: the most prompts per GRPO step that fit, with the compiled edge."""

import json
from typing import Any

import pytest

from nnx_introspect import ArgumentError, RLBatchSearch, rl_max_batch, rl_memory_report
from nnx_introspect._rl.size_search import _unit
from nnx_introspect.examples import LlamaConfig, llama
from tests.cli_helpers import run

# one layer: the search's claim (the answer fits, one prompt more does not)
# holds at any depth, and each compile is a whole GRPO step
SMALL = llama(LlamaConfig(vocab=64, d_model=32, n_layers=1, n_heads=2, d_ff=64))
SIZES: dict[str, Any] = {"generations": 2, "prompt": 8, "completion": 8}
# between the step at 1 prompt and at 2 (about 360 KB and 369 KB per device on
# XLA:CPU): the search compiles 1, 2 and the one probe, 3 (a budget that 2 also
# fits costs a fourth step). The test compares the search with the reports, so
# it holds wherever the budget falls, as long as 1 prompt fits.
BUDGET = 364_000

# the reports at the answer and past it, and the searches at 1 KiB, ask for
# steps the search compiled: each is compiled once
pytestmark = pytest.mark.usefixtures("one_compile_per_program")


def small(rngs: Any) -> Any:
    """The small Llama by name, for the command line."""
    return SMALL(rngs)


@pytest.fixture(scope="module")
def found() -> RLBatchSearch:
    # one probe past the edge (each compile is a whole GRPO step)
    return rl_max_batch(SMALL, "data=2", max_device_bytes=BUDGET, probes=1, **SIZES)


def test_the_answer_fits_and_one_step_more_does_not(found: RLBatchSearch) -> None:
    assert found.unit == 1  # 2 generations split over data=2 at any batch
    assert found.batch >= 1
    # each side as a user would ask for it (the search's own program: the
    # same key, so the module's cache reads the search's compile back)
    at = rl_memory_report(
        SMALL, "data=2", batch=found.batch, max_device_bytes=BUDGET, **SIZES
    )
    above = rl_memory_report(
        SMALL, "data=2", batch=found.batch + 1, max_device_bytes=BUDGET, **SIZES
    )
    assert at.fits() is True and at.peak_bytes <= BUDGET
    assert above.fits() is False and above.peak_bytes > BUDGET
    assert found.answer is not None and found.edge is not None
    assert found.answer.peak_bytes == at.peak_bytes
    assert found.edge.peak_bytes == above.peak_bytes
    points = {b: (peak, fits) for b, peak, _, fits in found.points}
    assert points[found.batch] == (at.peak_bytes, True)
    assert points[found.batch + 1] == (above.peak_bytes, False)
    # `most` is the answer, `batch` its older name; one probe past the edge
    assert found.most == found.batch and found.edge_size == found.batch + 1
    # past the edge: batches compiled too (the one probe, or one the search
    # compiled already), none fits
    assert found.past_edge and found.also_fits == ()
    assert not any(p.fits for p in found.tried if p.size > found.edge_size)


def test_the_report_says_the_answer_and_the_edge(found: RLBatchSearch) -> None:
    assert found.verdict.startswith(f"Most prompts per step that fit: {found.batch}")
    assert f"{found.batch + 1} does not fit" in found.verdict
    data = json.loads(found.to_json())
    assert data["batch"] == found.batch and data["ok"] is True
    assert len(data["points"]) == found.compiles
    assert str(found.batch) in found.to_markdown()


def test_the_unit_keeps_the_sequences_split_over_the_data_axes() -> None:
    # batch x generations must divide over every axis but tp
    assert _unit("data=4,tp=2", 1) == 4
    assert _unit("data=4,tp=2", 2) == 2
    assert _unit("data=2,fsdp=2", 8) == 1
    assert _unit("tp=8", 3) == 1


def test_nothing_fits_is_an_answer_of_zero_not_an_error() -> None:
    none = rl_max_batch(SMALL, "data=2", max_device_bytes="1KiB", **SIZES)
    assert none.batch == 0 and not none.ok and none.answer is None
    assert none.verdict.startswith("No batch fits: even 1 prompts")


@pytest.mark.parametrize(
    ("options", "argument"),
    [
        ({}, "max_device_bytes"),
        ({"max_device_bytes": BUDGET, "batch": 2}, "batch"),
        ({"max_device_bytes": BUDGET, "generations": 0}, "generations"),
    ],
)
def test_bad_input_is_refused_before_any_compile(
    options: dict[str, Any], argument: str
) -> None:
    with pytest.raises(ArgumentError) as caught:
        rl_max_batch(SMALL, "data=2", **(SIZES | options))
    assert caught.value.argument == argument


def test_cli_max_batch(capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "rl",
        "tests.test_rl_search:small",
        "--mesh",
        "data=2",
        "--generations",
        "2",
        "--prompt",
        "8",
        "--completion",
        "8",
        "--max-device-bytes",
        "1KiB",
        "--format",
        "json",
    ]
    code, out, err = run([*args, "--max-batch"], capsys)
    assert code == 1  # nothing fits 1 KiB: the verdict says so, exit 1
    data = json.loads(out)
    assert data["batch"] == 0 and data["edge"]["fits"] is False
    assert "No batch fits" in err
    code, _, err = run([*args, "--max-batch", "--batch", "2"], capsys)
    assert code == 2 and "--batch" in err
    code, _, err = run(args, capsys)
    assert code == 2 and "--batch" in err

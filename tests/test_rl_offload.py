"""rl_memory_report(offload=True): the idle roles in host memory, the bytes moved."""

import json
from typing import Any

import pytest

from nnx_introspect import RLMemoryReport, rl_memory_report
from nnx_introspect._rl.assemble import host_time as _host_time
from nnx_introspect.examples import LlamaConfig, llama
from tests.cli_helpers import run

SMALL = llama(LlamaConfig(vocab=64, d_model=32, n_layers=2, n_heads=2, d_ff=64))
KW: dict[str, Any] = {
    "batch": 2,
    "generations": 2,
    "prompt": 8,
    "completion": 8,
    "max_device_bytes": "64MiB",
}


def small(rngs: Any) -> Any:
    """The small Llama by name, for the command line."""
    return SMALL(rngs)


@pytest.fixture(scope="module")
def both() -> tuple[RLMemoryReport, RLMemoryReport]:
    kept = rl_memory_report(SMALL, "data=2", **KW)
    offloaded = rl_memory_report(SMALL, "data=2", offload=True, **KW)
    return kept, offloaded


def test_each_phase_is_its_program_alone(
    both: tuple[RLMemoryReport, RLMemoryReport],
) -> None:
    kept, offloaded = both
    for a, b in zip(kept.phases, offloaded.phases, strict=True):
        assert b.program_peak_bytes == a.program_peak_bytes
        assert b.resident == () and b.peak_bytes == b.program_peak_bytes
        assert b.host == a.resident  # what stayed on the devices is on the host
    assert offloaded.peak_bytes < kept.peak_bytes


def test_the_bytes_moved_per_step(
    both: tuple[RLMemoryReport, RLMemoryReport],
) -> None:
    _, offloaded = both
    roles = dict(offloaded.roles)
    # prefill, decode, reference, train in turn: the actor's parameters and
    # optimizer state are idle from prefill to the reference (one run), the
    # reference's from train round to decode (one run, across the step's
    # end), the bfloat16 rollout copy over reference and train (one run):
    # each out and back in once
    expected = 2 * (
        roles["actor parameters"]
        + roles["actor optimizer state"]
        + roles["reference parameters"]
        + roles["rollout weights"]
    )
    assert offloaded.offload_bytes == expected
    assert offloaded.offload_seconds is None  # no topology, no host link
    assert json.loads(offloaded.to_json())["offload_bytes"] == expected
    assert "in host memory" in offloaded.to_markdown()


def test_the_host_link_time_is_the_data_sheets() -> None:
    # an H100's PCIe Gen5 host link: 64 GB/s one way
    span, words = _host_time("h100-8", 64 * 10**9)
    assert span == (1.0, 1.0) and "PCIe Gen5" in words
    span, words = _host_time("v5e-8", 10**9)
    assert span is None and "not in the data sheets" in words


def test_cli_offload(capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "rl",
        "tests.test_rl_offload:small",
        "--mesh",
        "data=2",
        "--batch",
        "2",
        "--generations",
        "2",
        "--prompt",
        "8",
        "--completion",
        "8",
        "--offload",
        "--format",
        "json",
    ]
    code, out, _ = run(args, capsys)
    assert code == 0
    assert json.loads(out)["offload_bytes"] > 0

"""rl_memory_report(offload=True): the idle models in host memory, the bytes moved.

As tunix's ``offload_to_cpu`` does (google-tunix 0.1.7, ``rl/rl_cluster.py``,
``_put_model_on_memory_kind``: ``nnx.variables(model)`` only): each idle
model's variables wait on the host, the trainer's optimizer state stays on the
device in every phase.
"""

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


def test_each_phase_is_its_program_and_the_optimizer_state(
    both: tuple[RLMemoryReport, RLMemoryReport],
) -> None:
    kept, offloaded = both
    state = dict(offloaded.roles)["actor optimizer state"]
    for a, b in zip(kept.phases, offloaded.phases, strict=True):
        assert b.program_peak_bytes == a.program_peak_bytes
        if b.name == "train":  # the optimizer's state is the step's argument
            assert b.resident == () and b.peak_bytes == b.program_peak_bytes
        else:  # the optimizer's state stays on the devices
            assert b.resident == (("actor optimizer state", state),)
            assert b.peak_bytes == b.program_peak_bytes + state
        # the models that stayed on the devices are on the host
        assert b.host == tuple(r for r in a.resident if r not in b.resident)
    assert offloaded.peak_bytes < kept.peak_bytes


def test_the_bytes_moved_per_step(
    both: tuple[RLMemoryReport, RLMemoryReport],
) -> None:
    _, offloaded = both
    roles = dict(offloaded.roles)
    # prefill, decode, reference, train in turn: the actor's parameters are
    # idle in the reference's phase (the rollout decodes on them: one run),
    # the reference's from train round to decode (one run, across the step's
    # end): each out and back in once; the optimizer's state never moves
    expected = 2 * (roles["actor parameters"] + roles["reference parameters"])
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

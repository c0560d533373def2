"""The step report's collectives and roofline estimate, end to end.

llama_tiny_sharded (2 of its 8 layers: every collective of a layer repeats, at
about half of XLA:GPU's compile) compiles for two hosts of H100s (``h100-16``,
``fsdp=2`` across the hosts, ``tp=8`` within one): the report's wire bytes per axis must be the sum
of its own collective rows, ``tp`` must ride NVLink and ``fsdp`` the network, and
each term's time must be its wire bytes over the data-sheet bandwidth, computed
here by hand. The estimate is labelled an estimate in every format.
"""

import dataclasses
import json
from typing import Any

import jax
import jax.numpy as jnp
import pytest

from nnx_introspect import step_memory_report
from nnx_introspect._xla.toolchain import cuda_plugin_version

TARGET = "tests.llama_tiny_layers:llama_tiny_2_layers_sharded"
TOKENS = jax.ShapeDtypeStruct((16, 64), jnp.int32)
NVLINK = 450e9  # H100 SXM5: 900 GB/s bidirectional, per direction
NETWORK = 50e9  # DGX H100: one 400 Gb/s NIC per GPU

needs_plugin = pytest.mark.skipif(
    cuda_plugin_version() is None, reason="the CUDA PJRT plugin is not installed"
)


@pytest.fixture(scope="module")
def two_hosts() -> Any:
    return step_memory_report(
        TARGET,
        "fsdp=2,tp=8",
        TOKENS,
        loss="lm",
        optimizer="adamw",
        topology="h100-16",
    )


@needs_plugin
def test_wire_bytes_are_the_rows(two_hosts: Any) -> None:
    rows = two_hosts.collectives_data["rows"]
    assert rows, "the sharded step has collectives"
    by_axes: dict[tuple[str, ...], float] = {}
    for row in rows:
        key = tuple(row["axes"])
        by_axes[key] = by_axes.get(key, 0) + row["wire_bytes"] * row["count"]
    assert {axes: wire for axes, _, wire in two_hosts.collective_wire_bytes} == {
        axes: round(wire) for axes, wire in by_axes.items()
    }
    assert {("fsdp",), ("tp",)} <= set(by_axes)


@needs_plugin
def test_links_and_times_by_hand(two_hosts: Any) -> None:
    estimate = two_hosts.roofline
    assert estimate is not None
    wire = {axes: w for axes, _, w in two_hosts.collective_wire_bytes}
    # the "?" groups' bytes count over the axes their groups lie inside
    for axes, w in two_hosts.program.collectives.irregular_wire_bytes():
        wire[axes] = wire.get(axes, 0) + w
    terms = {term.axes: term for term in estimate.comm}
    assert terms[("tp",)].link == "nvlink"
    assert terms[("fsdp",)].link == "network"
    assert terms[("tp",)].seconds == pytest.approx(wire[("tp",)] / NVLINK)
    assert terms[("fsdp",)].seconds == pytest.approx(wire[("fsdp",)] / NETWORK)
    assert estimate.compute_seconds == pytest.approx(
        two_hosts.flops / estimate.peak_flops_per_second
    )
    assert estimate.memory_seconds == pytest.approx(two_hosts.bytes_accessed / 3.35e12)
    all_terms = [estimate.compute_seconds, estimate.memory_seconds] + [
        t.seconds for t in estimate.comm
    ]
    assert estimate.low_seconds == pytest.approx(max(all_terms))
    assert estimate.high_seconds == pytest.approx(sum(all_terms))
    # MFU counts 6 N FLOPs per token of the training step
    tokens = 16 * 64
    assert estimate.tokens == tokens
    assert estimate.model_flops == 6 * two_hosts.plan.n_params * tokens


@needs_plugin
def test_network_override_moves_only_the_cross_host_axis(two_hosts: Any) -> None:
    slower = dataclasses.replace(two_hosts, network_bytes_per_second=25 * 10**9)
    before = {t.axes: t.seconds for t in two_hosts.roofline.comm}
    after = {t.axes: t.seconds for t in slower.roofline.comm}
    assert after[("fsdp",)] == pytest.approx(2 * before[("fsdp",)])
    assert after[("tp",)] == before[("tp",)]


@needs_plugin
def test_every_format_says_estimate(two_hosts: Any) -> None:
    text = " ".join(str(two_hosts).split())  # the words, at any terminal width
    assert "Step time, estimated" in text and "not a measurement" in text
    assert "Collectives on the wire per device and step" in text
    data = json.loads(two_hosts.to_json())
    assert data["roofline"]["estimate"] is True
    assert data["roofline"]["measured"] is False
    assert data["roofline"]["label"].startswith("Estimate from the compiled program")
    assert data["collective_wire_bytes"]
    assert "not a measurement" in two_hosts.to_markdown()


def test_cpu_has_collectives_and_no_estimate() -> None:
    report = step_memory_report(
        TARGET, "fsdp=2,tp=4", jax.ShapeDtypeStruct((8, 64), jnp.int32), loss="lm"
    )
    assert report.roofline is None
    assert report.collective_wire_bytes
    assert json.loads(report.to_json())["roofline"] is None


@pytest.mark.parametrize(
    ("topology", "value", "words"),
    [
        ("v5e-8", "50GB", "GPU topology"),
        (None, "50GB", "GPU topology"),
        ("h100-8", "0B", "must be positive"),
    ],
)
def test_network_bandwidth_bad_input(
    topology: str | None, value: str, words: str
) -> None:
    with pytest.raises(ValueError, match="network_bytes_per_second") as info:
        step_memory_report(
            TARGET,
            "fsdp=2,tp=4",
            jax.ShapeDtypeStruct((8, 64), jnp.int32),
            topology=topology,
            network_bytes_per_second=value,
        )
    assert words in str(info.value)


def test_a_program_xla_cannot_print_is_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """libtpu 0.0.52 writes a v5p-4096 7B step jaxlib cannot read back to print.

    Its words are quoted in a warning; the report is whole, without collectives
    or an estimate (which would leave the communication out).
    """
    import nnx_introspect._xla.collectives as collectives

    said = (
        "INTERNAL: RET_CHECK failure (external/xla/xla/hlo/ir/hlo_instruction.cc:390)"
        " proto.operand_ids_size() == *arity async-update instruction should have 1"
        " operands but sees 3"
    )

    class Refused(jax.stages.Compiled):  # a compiled step whose text XLA refuses
        def __init__(self) -> None:
            pass

        def as_text(self) -> str:
            raise RuntimeError(said)

        def runtime_executable(self) -> Any:
            raise RuntimeError(said)

    with pytest.raises(collectives.CollectiveFormatError, match="async-update"):
        collectives.compiled_hlo_text(Refused())

    def refuse(compiled: Any) -> str:
        raise RuntimeError(said)

    monkeypatch.setattr(collectives, "compiled_hlo_text", refuse)
    report = step_memory_report(
        TARGET, "fsdp=2,tp=4", jax.ShapeDtypeStruct((8, 64), jnp.int32), loss="lm"
    )
    assert report.collective_wire_bytes is None and report.roofline is None
    (warning,) = [w for w in report.warnings if "collectives" in w]
    assert f"RuntimeError: {said}" in warning
    assert report.argument_bytes > 0 and report.temp_bytes > 0

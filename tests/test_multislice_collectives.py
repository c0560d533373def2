"""Collectives across TPU slices: megascale host transfers read as DCN rows.

A program over several slices is partitioned per slice (``num_partitions``
is one slice's devices); what crosses the data-center network is a
``send``/``recv`` pair of the megascale runtime, one row per ``send``, and the
step-time estimate costs it at the chip's DCN bandwidth (data sheet).
"""

import importlib.util
from fractions import Fraction

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from nnx_introspect._roofline.program import program_roofline
from nnx_introspect._typing import ArgumentError
from nnx_introspect._xla.collectives import (
    CollectiveFormatError,
    compiled_hlo_text,
    read_collectives,
)

needs_libtpu = pytest.mark.skipif(
    importlib.util.find_spec("libtpu") is None, reason="needs libtpu (the tpu extra)"
)

V5E_DCN = 3.125e9
"""The v5e data sheet's DCN bandwidth per chip: 6.4 Tbps over 256 chips."""


def _transfer(kind: str, name: str, channel: int, shape: str, target: str) -> str:
    handler = '_xla_host_transfer_handler_name="xla_megascale_runtime"'
    attributes = (
        f'{handler},_xla_host_transfer_rendezvous="{kind.lower()}_0",'
        f"_xla_megascale_target={target},"
        f'_xla_megascale_transfer_type="{kind}"'
    )
    return (
        f"  %{name} = ({shape}, u32[], token[]) send(%p, %t), channel_id={channel}, "
        f"is_host_transfer=true, frontend_attributes={{{attributes}}}"
    )


def _module(kind: str, sent: str, received: str, target: str) -> str:
    """A per-slice program of 4 partitions with one megascale transfer, as libtpu
    0.0.52 writes it (the send, the recv of the same rendezvous, both dones)."""
    send = _transfer(kind, "send", 2, sent, target)
    recv = (
        send.replace("%send = ", "%recv = ")
        .replace(f"({sent},", f"({received},")
        .replace("send(%p, %t), channel_id=2", "recv(%t), channel_id=1")
    )
    return "\n".join(
        [
            "HloModule jit_f, num_partitions=4",
            "",
            f"ENTRY %main (p: {sent}) -> {received} {{",
            f"  %p = {sent} parameter(0)",
            '  %t = token[] after-all(), frontend_attributes={MegascaleRendezvousKeyName="x"}',
            send,
            recv,
            "  %send-done = token[] send-done(%send), channel_id=2, is_host_transfer=true, "
            'frontend_attributes={_xla_host_transfer_handler_name="xla_megascale_runtime"}',
            f"  %recv-done = ({received}, token[]) recv-done(%recv), channel_id=1, "
            "is_host_transfer=true, frontend_attributes="
            '{_xla_host_transfer_handler_name="xla_megascale_runtime"}',
            f"  ROOT %r = {received} get-tuple-element(%recv-done), index=0",
            "}",
        ]
    )


PER_SLICE = (("data", 1), ("fsdp", 4))
DCN = (("data", 2), ("fsdp", 1))


@pytest.mark.parametrize(
    ("kind", "sent", "received", "expected_kind", "nbytes", "wire"),
    [
        # an all-reduce of 64x128 f32 over 2 slices: 2(2-1)/2 of its bytes
        (
            "ALL_REDUCE",
            "f32[64,128]{1,0}",
            "f32[64,128]{1,0}",
            "all-reduce",
            32768,
            32768,
        ),
        # an all-gather: its bytes are the gathered (received) buffer, (2-1)/2 sent
        (
            "ALL_GATHER",
            "bf16[8,256]{1,0}",
            "bf16[16,256]{1,0}",
            "all-gather",
            8192,
            4096,
        ),
        (
            "ALL_TO_ALL",
            "f32[32,2,128]{2,1,0}",
            "f32[32,2,128]{2,1,0}",
            "all-to-all",
            32768,
            16384,
        ),
    ],
)
def test_a_megascale_send_is_one_dcn_row(
    kind: str, sent: str, received: str, expected_kind: str, nbytes: int, wire: int
) -> None:
    text = _module(kind, sent, received, '"{1,2}x{0:3}"')
    found = read_collectives(text, PER_SLICE, dcn_axes=DCN, network="ICI")
    (row,) = found.rows  # the send only: not its recv nor the dones
    assert (row.kind, row.network, row.axes, row.group_size) == (
        expected_kind,
        "DCN",
        ("data",),
        2,
    )
    assert row.nbytes == nbytes and row.wire_bytes == wire
    assert list(found.by_axis()) == [("data@DCN",)]
    assert found.json_data()["rows"][0]["network"] == "DCN"
    assert found.json_data()["dcn_axes"] == [["data", 2], ["fsdp", 1]]


def test_a_one_to_one_transfer_is_a_permute_of_its_buffer() -> None:
    target = "{{100001->200000},{200000->100003}}"
    text = _module("ONE_TO_ONE", "bf16[8,256]{1,0}", "bf16[8,256]{1,0}", target)
    (row,) = read_collectives(text, PER_SLICE, dcn_axes=DCN).rows
    assert row.kind == "collective-permute" and row.network == "DCN"
    assert row.source_target_pairs == ((100001, 200000), (200000, 100003))
    assert row.wire_bytes == 8 * 256 * 2  # the buffer, once


def test_a_megascale_transfer_needs_the_axes_over_slices() -> None:
    text = _module("ALL_REDUCE", "f32[8]{0}", "f32[8]{0}", '"{1,2}x{0:3}"')
    with pytest.raises(CollectiveFormatError, match="one slice"):
        read_collectives(text, PER_SLICE)


def test_a_plain_send_is_still_refused() -> None:
    text = _module("ALL_REDUCE", "f32[8]{0}", "f32[8]{0}", '"{1,2}x{0:3}"')
    plain = text.replace("xla_megascale_runtime", "someone_else")
    with pytest.raises(CollectiveFormatError, match="send"):
        read_collectives(plain, PER_SLICE, dcn_axes=DCN)


def test_dcn_bytes_are_costed_at_the_data_sheet_bandwidth() -> None:
    wire = 25 * 10**8
    est = program_roofline(
        "2xv5e-4",
        flops=1e9,
        bytes_accessed=1e6,
        wire_bytes_by_axes=((("data@DCN",), wire), (("fsdp",), 10**6)),
        mesh_axes=(("data", 2), ("fsdp", 4)),
    )
    links = {term.link: term for term in est.comm}
    assert links["dcn"].axes == ("data",) and links["dcn"].seconds == wire / V5E_DCN
    # the ICI term lies on one slice's 2x2 torus: fsdp=4 spans both dims, 1 link each
    assert links["ici"].seconds == 10**6 / (2 * 50e9)
    words = " ".join(est.assumptions)
    assert "DCN bandwidth of 3.125e+09 B/s per chip" in words
    assert "uncalibrated" in words and "cloud.google.com/tpu/docs/v5e" in words


def test_a_family_without_a_dcn_figure_names_its_bytes_uncosted() -> None:
    est = program_roofline(
        "2xv4-8",
        flops=1e9,
        bytes_accessed=1e6,
        wire_bytes_by_axes=((("data@DCN",), 2**20),),
        mesh_axes=(("data", 2), ("fsdp", 4)),
    )
    assert [term.link for term in est.comm] == []
    assert any(
        "1 MiB on the wire across slices (over data) are not costed" in text
        for text in est.assumptions
    )


def test_one_slice_keys_are_unmarked() -> None:
    text = "\n".join(
        [
            "HloModule jit_f, num_partitions=4",
            "",
            "ENTRY %main (p: f32[8]) -> f32[32] {",
            "  %p = f32[8]{0} parameter(0)",
            "  ROOT %ag = f32[32]{0} all-gather(%p), channel_id=1, replica_groups="
            "[1,4]<=[4], dimensions={0}, use_global_device_ids=true",
            "}",
        ]
    )
    found = read_collectives(text, (("fsdp", 4),))
    assert found.rows[0].network is None and list(found.by_axis()) == [("fsdp",)]
    assert "dcn_axes" not in found.json_data()
    assert "Network" not in found.table().columns
    # a TPU program's own collectives are ICI; a GPU's name their hosts' link
    tpu = read_collectives(text, (("fsdp", 4),), network="ICI")
    assert tpu.rows[0].network == "ICI" and "Network" not in tpu.table().columns
    one_host = read_collectives(text, (("fsdp", 4),), hosts=(0, 0, 0, 0))
    two_hosts = read_collectives(text, (("fsdp", 4),), hosts=(0, 0, 1, 1))
    assert one_host.rows[0].network == "NVLink"
    assert two_hosts.rows[0].network == "network"


@needs_libtpu
def test_a_gradient_over_two_slices_reads_its_dcn_all_reduce() -> None:
    from nnx_introspect._xla.analysis import mesh_dcn_axes
    from nnx_introspect._xla.toolchain import topology_mesh

    mesh, _ = topology_mesh("2xv5e-4", (("data", 2), ("fsdp", 4)))
    assert mesh_dcn_axes(mesh) == (("data", 2), ("fsdp", 1))
    x = jax.ShapeDtypeStruct(
        (64, 512), jnp.float32, sharding=NamedSharding(mesh, P(("data", "fsdp")))
    )
    w = jax.ShapeDtypeStruct(
        (512, 256), jnp.float32, sharding=NamedSharding(mesh, P("fsdp"))
    )
    grad = jax.jit(
        jax.grad(lambda w, x: jnp.sum((x @ w) ** 2)),
        out_shardings=NamedSharding(mesh, P("fsdp")),
    )
    text = compiled_hlo_text(grad.lower(w, x).compile())
    with pytest.raises(ArgumentError, match="partitioned for 4"):
        read_collectives(text, (("data", 2), ("fsdp", 4)))
    found = read_collectives(text, PER_SLICE, dcn_axes=DCN, network="ICI")
    dcn = [row for row in found.rows if row.network == "DCN"]
    ici = [row for row in found.rows if row.network == "ICI"]
    # the gradient's fsdp shard, 512/4 x 256 f32, is summed across the 2 slices
    assert [(row.kind, row.axes, row.nbytes) for row in dcn] == [
        ("all-reduce", ("data",), 512 // 4 * 256 * 4)
    ]
    assert dcn[0].wire_bytes == Fraction(2 * (2 - 1), 2) * 512 // 4 * 256 * 4
    # within a slice: w gathered over fsdp, its gradient scattered back
    assert ici and {row.axes for row in ici} == {("fsdp",)}
    assert {row.kind for row in ici} >= {"all-gather"}


@needs_libtpu
def test_a_step_on_two_slices_lists_and_costs_its_dcn_rows() -> None:
    import nnx_introspect as ni

    report = ni.step_memory_report(
        "nnx_introspect.examples:llama_tiny",
        "data=2,fsdp=4",
        jax.ShapeDtypeStruct((8, 64), jnp.int32),
        loss="lm",
        optimizer="adamw",
        topology="2xv5e-4",
        batch_spec=P(("data", "fsdp")),
    )
    assert "could not be read" not in str(report)
    found = report.program.collectives
    assert found is not None
    networks = {row.network for row in found.rows}
    assert networks == {"DCN", "ICI"}
    assert {row.axes for row in found.rows if row.network == "DCN"} == {("data",)}
    # independent arithmetic: each DCN row over 2 slices, the ring's factors
    factor = {"all-reduce": Fraction(1), "all-gather": Fraction(1, 2)}
    factor["reduce-scatter"] = factor["all-to-all"] = Fraction(1, 2)
    factor["collective-permute"] = Fraction(1)
    wire = sum(
        row.nbytes * row.count * factor[row.kind]
        for row in found.rows
        if row.network == "DCN"
    )
    assert wire > 0
    estimate = report.roofline
    assert estimate is not None
    (term,) = [term for term in estimate.comm if term.link == "dcn"]
    assert term.axes == ("data",)
    assert term.seconds == pytest.approx(round(wire) / V5E_DCN)
    assert any("DCN bandwidth of 3.125e+09" in text for text in estimate.assumptions)
    table = found.table()
    assert "Network" in table.columns
    # the report's JSON keeps each row's network and the axes over slices
    from nnx_introspect._step.step_records import collectives_from_json

    back = collectives_from_json(found.json_data())
    assert back is not None and back.json_data() == found.json_data()
    assert back.dcn_axes == (("data", 2), ("fsdp", 1))

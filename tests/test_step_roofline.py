"""Hardware figures and the roofline estimate, against hand arithmetic.

Every expected value is written from the data-sheet numbers (dense = the
sheet's sparse figure / 2, one direction = a bidirectional figure / 2, a NIC's
bytes = its bits / 8), never by calling the library a second time. No compiles.
"""

import dataclasses
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nnx_introspect._accelerators.hardware import DTYPES, Hardware, hardware_for
from nnx_introspect._accelerators.topology import _FAMILIES
from nnx_introspect._roofline.estimate import LABEL, Roofline, roofline

# --- The table -------------------------------------------------------------------


def test_every_family_of_the_topology_table_has_figures_and_sources() -> None:
    for family in _FAMILIES:
        hw = hardware_for(f"{family.name}-16")
        assert hw.family == family.name
        assert hw.platform == family.platform
        sources = dict(hw.sources)
        for dtype, peak in hw.peak_flops:
            assert dtype in DTYPES
            assert peak > 0
            assert sources[f"peak_flops.{dtype}"]
        assert {"bf16", "f32", "f32_highest"} <= {d for d, _ in hw.peak_flops}
        assert hw.hbm_bytes_per_second > 0
        assert sources["hbm_bytes_per_second"]
        if hw.platform == "tpu":
            assert hw.ici_bytes_per_second_per_link
            assert sources["ici_bytes_per_second_per_link"]
        else:
            assert hw.nvlink_bytes_per_second and hw.network_bytes_per_second
            assert sources["nvlink_bytes_per_second"]
            assert sources["network_bytes_per_second"]


def test_h100_figures_from_the_data_sheet() -> None:
    hw = hardware_for("h100-8")
    assert hw.peak_flops_per_second("bf16") == 1979e12 / 2  # sparse 1,979 TFLOPS
    assert hw.peak_flops_per_second("fp8") == 3958e12 / 2
    assert hw.peak_flops_per_second("f32") == 989e12 / 2  # TF32 tensor core, dense
    assert hw.peak_flops_per_second("f32_highest") == 67e12  # FP32 CUDA cores
    assert hw.hbm_bytes_per_second == 3.35e12
    assert hw.nvlink_bytes_per_second == 900e9 / 2  # 900 GB/s bidirectional
    assert hw.network_bytes_per_second == 400e9 / 8  # 400 Gb/s NDR per GPU
    assert "H100 SXM" in hw.source("peak_flops.bf16")
    assert "sparsity" in hw.source("peak_flops.bf16")


def test_other_gpu_figures_from_their_data_sheets() -> None:
    a100 = hardware_for("a100-8")
    assert a100.peak_flops_per_second("bfloat16") == 624e12 / 2
    assert a100.peak_flops_per_second("float32") == 312e12 / 2  # TF32
    assert a100.peak_flops_per_second("f32_highest") == 19.5e12
    assert a100.hbm_bytes_per_second == 2039e9
    assert a100.nvlink_bytes_per_second == 600e9 / 2
    assert a100.network_bytes_per_second == 200e9 / 8  # HDR InfiniBand per GPU
    h200 = hardware_for("h200-8")
    assert h200.peak_flops_per_second("bf16") == 1979e12 / 2
    assert h200.hbm_bytes_per_second == 4.8e12
    b200 = hardware_for("b200-8")
    assert b200.peak_flops_per_second("bf16") == 4.5e15 / 2
    assert b200.peak_flops_per_second("fp8") == 9e15 / 2
    assert b200.peak_flops_per_second("f32") == 2.2e15 / 2
    assert b200.hbm_bytes_per_second == 7.7e12
    assert b200.nvlink_bytes_per_second == 1.8e12 / 2


def test_tpu_figures_from_the_cloud_tpu_pages() -> None:
    v5e = hardware_for("v5e-4")
    assert v5e.peak_flops_per_second("bf16") == 197e12
    assert v5e.peak_flops_per_second("int8") == 393e12
    assert v5e.peak_flops_per_second("f32") == 197e12  # one bf16 pass
    assert v5e.peak_flops_per_second("f32_highest") == 197e12 / 6
    assert v5e.hbm_bytes_per_second == 819e9
    assert v5e.ici_bytes_per_second_per_link == 400e9 / 4 / 2  # 4 ports, 1 way
    v5p = hardware_for("v5p-8")
    assert v5p.peak_flops_per_second("bf16") == 459e12
    assert v5p.hbm_bytes_per_second == 2765e9
    assert v5p.ici_bytes_per_second_per_link == 1200e9 / 6 / 2
    v6e = hardware_for("v6e-8")
    assert v6e.peak_flops_per_second("bf16") == 918e12
    assert v6e.hbm_bytes_per_second == 1640e9
    assert v6e.ici_bytes_per_second_per_link == 800e9 / 4 / 2
    v4 = hardware_for("v4-8")
    assert v4.peak_flops_per_second("bf16") == 275e12
    assert v4.hbm_bytes_per_second == 1200e9
    assert v4.ici_bytes_per_second_per_link == 45e9
    assert "derived" in v4.source("ici_bytes_per_second_per_link")


@pytest.mark.parametrize(
    ("topology", "dims", "wrap"),
    [
        ("v5e-4", (2, 2), (False, False)),
        ("v5e-128", (8, 16), (False, True)),
        ("v5e-256", (16, 16), (True, True)),
        ("v6e-256", (16, 16), (True, True)),
        ("v5p-8", (2, 2, 1), (False, False, False)),
        ("v4-16", (2, 2, 2), (False, False, False)),
        ("v5p-128", (4, 4, 4), (True, True, True)),
    ],
)
def test_torus_dims_and_wraparound(
    topology: str, dims: tuple[int, ...], wrap: tuple[bool, ...]
) -> None:
    hw = hardware_for(topology)
    assert (hw.torus_dims, hw.wraparound) == (dims, wrap)
    assert math.prod(dims) == hw.devices
    assert hw.hosts is None and hw.nvlink_bytes_per_second is None


def test_gpu_hosts() -> None:
    one = hardware_for("h100-8")
    assert (one.hosts, one.gpus_per_host, one.devices) == (1, 8, 8)
    many = hardware_for("h100-256")
    assert (many.hosts, many.gpus_per_host, many.devices) == (32, 8, 256)
    small = hardware_for("h100-4")
    assert (small.hosts, small.gpus_per_host) == (1, 4)


def test_network_override() -> None:
    hw = hardware_for("h100-16", network_bytes_per_second=800 * 10**9 // 8)
    assert hw.network_bytes_per_second == 100e9
    assert hw.source("network_bytes_per_second").startswith("given")


def test_hardware_is_frozen_and_json_ready() -> None:
    hw = hardware_for("v5e-256")
    with pytest.raises(dataclasses.FrozenInstanceError):
        hw.devices = 1  # type: ignore[misc]
    data = json.loads(json.dumps(hw.json_data()))
    assert data["peak_flops"]["bf16"] == 197e12
    assert data["wraparound"] == [True, True]


# --- GPUs: NVLink within a host, the network between hosts -----------------------


def _links(
    topology: str, mesh: tuple[tuple[str, int], ...]
) -> dict[tuple[str, ...], str]:
    names = [name for name, _ in mesh]
    keys = [(n,) for n in names] + [tuple(names)]
    est = roofline(
        flops=1.0,
        bytes_accessed=0.0,
        comm_bytes_by_axis={key: 10**9 for key in keys},
        mesh_axes=mesh,
        hardware=hardware_for(topology),
    )
    return {term.axes: term.link for term in est.comm}


def test_one_host_is_all_nvlink() -> None:
    assert _links("h100-8", (("fsdp", 2), ("tp", 4))) == {
        ("fsdp",): "nvlink",
        ("tp",): "nvlink",
        ("fsdp", "tp"): "nvlink",
    }


def test_h100_256_fsdp_32_tp_8() -> None:
    assert _links("h100-256", (("fsdp", 32), ("tp", 8))) == {
        ("fsdp",): "network",
        ("tp",): "nvlink",
        ("fsdp", "tp"): "network",
    }


def test_h100_256_tp_16_fsdp_16() -> None:
    # The trailing axis has 16 GPUs: two hosts. The leading one strides by 16.
    assert _links("h100-256", (("tp", 16), ("fsdp", 16))) == {
        ("tp",): "network",
        ("fsdp",): "network",
        ("tp", "fsdp"): "network",
    }


def test_h100_256_three_axes() -> None:
    assert _links("h100-256", (("data", 32), ("fsdp", 4), ("tp", 2))) == {
        ("data",): "network",
        ("fsdp",): "nvlink",
        ("tp",): "nvlink",
        ("data", "fsdp", "tp"): "network",
    }


def test_gpu_times_by_hand() -> None:
    est = roofline(
        flops=0.0,
        bytes_accessed=0.0,
        comm_bytes_by_axis={("fsdp",): 10**9, ("tp",): 9 * 10**9},
        mesh_axes=(("fsdp", 32), ("tp", 8)),
        hardware=hardware_for("h100-256"),
    )
    fsdp, tp = est.comm
    assert fsdp.seconds == pytest.approx(1e9 / (400e9 / 8))  # 0.02 s, network
    assert tp.seconds == pytest.approx(9e9 / (900e9 / 2))  # 0.02 s, NVLink
    faster = roofline(
        flops=0.0,
        bytes_accessed=0.0,
        comm_bytes_by_axis={("fsdp",): 10**9},
        mesh_axes=(("fsdp", 32), ("tp", 8)),
        hardware=hardware_for("h100-256", network_bytes_per_second=10**11),
    )
    assert faster.comm[0].seconds == pytest.approx(1e9 / 1e11)


# --- TPUs: ICI links along the torus ---------------------------------------------


def _ici(
    topology: str, mesh: tuple[tuple[str, int], ...], keys: list[tuple[str, ...]]
) -> Roofline:
    return roofline(
        flops=1.0,
        bytes_accessed=0.0,
        comm_bytes_by_axis={key: 10**10 for key in keys},
        mesh_axes=mesh,
        hardware=hardware_for(topology),
    )


def test_v5e_4_one_axis_spans_both_dims_without_wraparound() -> None:
    (term,) = _ici("v5e-4", (("data", 4),), [("data",)]).comm
    assert (term.torus_dims, term.links) == ((0, 1), 2)  # 1 + 1, no wraparound
    assert term.seconds == pytest.approx(1e10 / (2 * 400e9 / 4 / 2))


def test_v5e_4_two_axes_one_link_each() -> None:
    est = _ici("v5e-4", (("a", 2), ("b", 2)), [("a",), ("b",)])
    assert [(t.torus_dims, t.links) for t in est.comm] == [((1,), 1), ((0,), 1)]
    assert est.comm[0].seconds == pytest.approx(1e10 / (400e9 / 4 / 2))


def test_v5e_256_wraparound_doubles_the_links() -> None:
    est = _ici(
        "v5e-256",
        (("fsdp", 16), ("tp", 16)),
        [("fsdp",), ("tp",), ("fsdp", "tp")],
    )
    fsdp, tp, both = est.comm
    assert (tp.torus_dims, tp.links) == ((0,), 2)  # the last axis goes first
    assert (fsdp.torus_dims, fsdp.links) == ((1,), 2)
    assert (both.torus_dims, both.links) == ((0, 1), 4)
    assert tp.seconds == pytest.approx(1e10 / (2 * 50e9))
    assert both.seconds == pytest.approx(1e10 / (4 * 50e9))


def test_v5e_256_mesh_off_the_torus_counts_one_link() -> None:
    est = _ici("v5e-256", (("fsdp", 32), ("tp", 8)), [("fsdp",), ("tp",)])
    assert [t.links for t in est.comm] == [1, 1]
    assert any("plain device order" in text for text in est.assumptions)


def test_v5p_8_and_v5p_128() -> None:
    (term,) = _ici("v5p-8", (("data", 4),), [("data",)]).comm
    assert (term.torus_dims, term.links) == ((0, 1), 2)
    assert term.seconds == pytest.approx(1e10 / (2 * 1200e9 / 6 / 2))
    est = _ici("v5p-128", (("data", 4), ("fsdp", 16)), [("data",), ("fsdp",)])
    data, fsdp = est.comm
    assert fsdp.links == 2 + 2  # two wrapped dims of 4
    assert data.links == 2


# --- The range, MFU and tokens ---------------------------------------------------


def test_range_mfu_and_tokens_by_hand() -> None:
    hw = hardware_for("v5e-4")
    est = roofline(
        flops=197e12 * 0.5,  # 0.5 s at 197 TFLOP/s
        bytes_accessed=819e9 * 0.25,  # 0.25 s at 819 GB/s
        comm_bytes_by_axis={("data",): 10**10},  # 1e10 / (2 x 50 GB/s) = 0.1 s
        mesh_axes=(("data", 4),),
        hardware=hw,
        tokens=1000,
    )
    assert est.compute_seconds == pytest.approx(0.5)
    assert est.memory_seconds == pytest.approx(0.25)
    assert est.comm_seconds == pytest.approx(0.1)
    assert est.low_seconds == pytest.approx(0.5)
    assert est.high_seconds == pytest.approx(0.85)
    assert est.bound == "compute"
    # flops x devices / (low x peak x devices) = 0.5 / 0.5
    assert est.mfu_ceiling == pytest.approx(1.0)
    assert est.mfu_no_overlap == pytest.approx(0.5 / 0.85)
    assert est.tokens_per_second_high == pytest.approx(1000 / 0.5)
    assert est.tokens_per_second_low == pytest.approx(1000 / 0.85)
    with_model = roofline(
        flops=197e12 * 0.5,
        bytes_accessed=819e9 * 0.25,
        comm_bytes_by_axis={("data",): 10**10},
        mesh_axes=(("data", 4),),
        hardware=hw,
        model_flops=197e12,
    )
    assert with_model.mfu_ceiling == pytest.approx(197e12 / (0.5 * 197e12 * 4))
    assert with_model.model_flops_basis == "given"


def test_memory_and_communication_bound() -> None:
    est = roofline(
        flops=1e12,
        bytes_accessed=3.35e12,  # 1 s on an H100
        comm_bytes_by_axis={("data",): 100 * 10**9},  # 2 s over 50 GB/s
        mesh_axes=(("data", 2), ("tp", 8)),
        hardware=hardware_for("h100-16"),
    )
    assert est.memory_seconds == pytest.approx(1.0)
    assert est.low_seconds == pytest.approx(2.0)
    assert est.bound == "communication over ('data',)"


def test_dtype_changes_the_peak() -> None:
    common = {
        "flops": 1979e12 / 2,
        "bytes_accessed": 0.0,
        "comm_bytes_by_axis": {},
        "mesh_axes": (("data", 8),),
        "hardware": hardware_for("h100-8"),
    }
    assert roofline(**common).compute_seconds == pytest.approx(1.0)  # type: ignore[arg-type]
    fp8 = roofline(**common, dtype="float8_e4m3fn")  # type: ignore[arg-type]
    assert fp8.compute_seconds == pytest.approx(0.5)
    assert fp8.dtype == "fp8"


def test_label_and_json_say_estimate() -> None:
    est = roofline(
        flops=1e12,
        bytes_accessed=1e9,
        comm_bytes_by_axis={},
        mesh_axes=(("data", 8),),
        hardware=hardware_for("h100-8"),
    )
    assert est.label.startswith(LABEL)
    assert "not a measurement" in est.label
    data = json.loads(json.dumps(est.json_data()))
    assert data["estimate"] is True and data["measured"] is False
    assert data["assumptions"] == list(est.assumptions)
    assert est.to_text().splitlines()[0] == est.label


@settings(deadline=None, max_examples=40)
@given(
    flops=st.floats(0, 1e18),
    bytes_accessed=st.floats(0, 1e15),
    fsdp=st.integers(0, 10**12),
    tp=st.integers(0, 10**12),
)
def test_low_is_at_most_high(
    flops: float, bytes_accessed: float, fsdp: int, tp: int
) -> None:
    if flops == bytes_accessed == fsdp == tp == 0:
        return
    est = roofline(
        flops=flops,
        bytes_accessed=bytes_accessed,
        comm_bytes_by_axis={("fsdp",): fsdp, ("tp",): tp},
        mesh_axes=(("fsdp", 2), ("tp", 8)),
        hardware=hardware_for("h100-16"),
    )
    terms = [est.compute_seconds, est.memory_seconds] + [t.seconds for t in est.comm]
    assert est.low_seconds == max(terms)
    assert est.high_seconds == pytest.approx(sum(terms))
    assert est.low_seconds <= est.high_seconds
    assert est.mfu_no_overlap <= est.mfu_ceiling


# --- Bad input -------------------------------------------------------------------


def _call(**changes: object) -> Roofline:
    args: dict[str, object] = {
        "flops": 1e12,
        "bytes_accessed": 1e9,
        "comm_bytes_by_axis": {("data",): 10**6},
        "mesh_axes": (("data", 8),),
        "hardware": hardware_for("h100-8"),
    }
    args.update(changes)
    return roofline(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"flops": -1.0}, r"`flops` must be a finite number >= 0, got -1.0"),
        ({"bytes_accessed": math.nan}, r"`bytes_accessed` must be .*, got nan"),
        ({"model_flops": math.inf}, r"`model_flops` must be .*, got inf"),
        ({"mesh_axes": (("data", 4),)}, r"`mesh_axes` \{'data': 4\} has 4 devices"),
        ({"mesh_axes": (("data", 8), ("data", 1))}, r"names the axis 'data' twice"),
        ({"mesh_axes": (("data", 0),)}, r"axis 'data' must have a positive size"),
        ({"comm_bytes_by_axis": {("tp",): 1}}, r"must name distinct axes .*\('tp',\)"),
        ({"comm_bytes_by_axis": {(): 1}}, r"must name distinct axes"),
        ({"comm_bytes_by_axis": {("data",): -5}}, r"must be >= 0 bytes, got -5"),
        ({"tokens": 0}, r"`tokens` must be a positive number .*, got 0"),
    ],
)
def test_bad_numbers(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _call(**changes)


def test_every_problem_is_listed() -> None:
    with pytest.raises(
        ValueError, match=r"`flops`.*`bytes_accessed`.*`tokens`.*`dtype` 'tf32'"
    ):
        _call(flops=-1.0, bytes_accessed=math.inf, tokens=0, dtype="tf32")


def test_dtype_the_chip_lacks() -> None:
    with pytest.raises(ValueError, match=r"`dtype` 'fp8' has no peak on NVIDIA A100"):
        _call(hardware=hardware_for("a100-8"), dtype="fp8")
    with pytest.raises(ValueError, match=r"`dtype` 'f16' has no peak"):
        _call(dtype="f16")


def test_all_zero_is_refused() -> None:
    with pytest.raises(ValueError, match=r"all zero: there is no step to estimate"):
        _call(flops=0.0, bytes_accessed=0.0, comm_bytes_by_axis={})


def test_wrong_types() -> None:
    with pytest.raises(TypeError, match=r"`flops` must be a number, got the bool"):
        _call(flops=True)
    # beartype samples one item of a tuple or mapping; the function checks
    # every item, so one of the two names the argument either way.
    # whichever item beartype samples (it checks one per call, and jaxtyping,
    # naming the parameter, samples again): the error names the argument
    for _ in range(100):
        with pytest.raises(TypeError, match=r"mesh_axes"):
            _call(mesh_axes=(("data", 4), ("tp", "2")))
    with pytest.raises(TypeError, match=r"comm_bytes_by_axis"):
        _call(comm_bytes_by_axis={("data",): 1.5})


def test_bytes_over_a_one_device_axis() -> None:
    with pytest.raises(ValueError, match=r"span one device"):
        _call(mesh_axes=(("data", 8), ("one", 1)), comm_bytes_by_axis={("one",): 1})


def test_hardware_for_errors() -> None:
    with pytest.raises(ValueError, match=r"`topology` must name"):
        hardware_for("h300-8")
    with pytest.raises(ValueError, match=r"h100-N counts GPUs"):
        hardware_for("h100-12")
    with pytest.raises(
        ValueError, match=r"`network_bytes_per_second` must be a positive"
    ):
        hardware_for("h100-16", network_bytes_per_second=0)
    with pytest.raises(ValueError, match=r"applies to GPU targets"):
        hardware_for("v5e-4", network_bytes_per_second=10**9)
    with pytest.raises(ValueError, match=r"`figure` 'nope' is not a figure"):
        hardware_for("v5e-4").source("nope")


def test_hardware_type_is_public() -> None:
    assert isinstance(hardware_for("v6e-4"), Hardware)

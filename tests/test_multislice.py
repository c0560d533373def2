"""Several TPU slices joined by the data-center network: ``2xv5e-256``.

A multi-slice target is one slice's compiler topology with libtpu's
``num_slices``; the mesh's leading axes cross the slices (MaxText's
``dcn_*_parallelism``), the rest of each axis stays on the slice's ICI.
"""

import importlib.util

import numpy as np
import pytest

from nnx_introspect._accelerators import (
    dcn_split,
    hardware_for,
    parse_topology,
    resolve_topology,
    step_budget,
)
from nnx_introspect._typing import ArgumentError

needs_libtpu = pytest.mark.skipif(
    importlib.util.find_spec("libtpu") is None, reason="needs libtpu (the tpu extra)"
)


@pytest.mark.parametrize(
    ("name", "one", "slices"),
    [
        ("2xv5e-256", "v5e-256", 2),
        ("4xv5e-4", "v5e-4", 4),
        ("2xv5p-128", "v5p-128", 2),
        ("32xv5litepod-256", "v5litepod-256", 32),
    ],
)
def test_slices_multiply_one_slice(name: str, one: str, slices: int) -> None:
    many, single = resolve_topology(name), resolve_topology(one)
    assert many.slices == slices and single.slices == 1
    assert many.devices == slices * single.devices
    assert many.compiler_topology == single.compiler_topology
    assert dict(many.options)["num_slices"] == slices
    assert {k: v for k, v in many.options if k != "num_slices"} == {
        k: v for k, v in single.options if k != "num_slices"
    }
    assert parse_topology(name) == (single.compiler_topology, slices * single.devices)


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("2xh100-8", "TPU target"),
        ("0xv5e-4", "1 to 64"),
        ("65xv5e-4", "1 to 64"),
        ("2xv5e-3", "chips, got 3"),
    ],
)
def test_a_bad_multi_slice_name_is_one_line(name: str, fragment: str) -> None:
    with pytest.raises(ArgumentError) as caught:
        resolve_topology(name)
    assert caught.value.argument == "topology"
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


def test_the_leading_axes_take_the_slices() -> None:
    two = resolve_topology("2xv5e-256")
    assert dcn_split(two, (("data", 2), ("fsdp", 256))) == ((1, 256), (2, 1))
    # an axis larger than the slices keeps the rest on ICI
    assert dcn_split(two, (("fsdp", 512),)) == ((256,), (2,))
    four = resolve_topology("4xv5e-4")
    assert dcn_split(four, (("data", 2), ("fsdp", 8))) == ((1, 4), (2, 2))
    one = resolve_topology("v5e-8")
    assert dcn_split(one, (("data", 2), ("fsdp", 4))) == ((2, 4), (1, 1))
    with pytest.raises(ArgumentError) as caught:
        dcn_split(four, (("tp", 3), ("fsdp", 5)))
    assert caught.value.argument == "mesh" and "leave 4 unplaced" in str(caught.value)


def test_the_data_sheet_network_per_chip() -> None:
    # Cloud TPU's pages: v5e 6.4 Tbps per 256-chip pod; v5p 50 Gbps per chip
    v5e = hardware_for("2xv5e-256")
    assert v5e.slices == 2 and v5e.devices == 512
    assert v5e.dcn_bytes_per_second == 6.4e12 / 256 / 8
    assert hardware_for("v5p-8").dcn_bytes_per_second == 50e9 / 8
    assert "6.4 Tbps" in v5e.source("dcn_bytes_per_second")
    # a family whose page gives no figure has none, never a guess
    assert hardware_for("v6e-8").dcn_bytes_per_second is None


def test_the_budget_names_the_chip_not_the_slices() -> None:
    assert "on a v5e chip;" in str(step_budget(None, "2xv5e-256").basis)


@needs_libtpu
def test_the_mesh_crosses_slices_on_its_leading_axis() -> None:
    from nnx_introspect._xla.toolchain import topology_mesh

    mesh, order = topology_mesh("2xv5e-4", (("data", 2), ("fsdp", 4)))
    slices = np.vectorize(lambda d: d.slice_index)(mesh.devices)
    # every device of one `data` index lies in one slice, the two indices apart
    assert (slices == np.array([[0] * 4, [1] * 4])).all()
    assert "2 slices over the data-center network (data=2)" in order

"""Where a program compiles: ``place_for``, the one choice a step and serving share.

Each branch against what it must give: this process's devices as JAX lists
them, a concrete mesh kept as it is, a child's request made only where a
child compiles, and a named topology's compile-only devices made here only
when the request cannot be named.
"""

from typing import Any

import jax
import numpy as np
import pytest
from jax.sharding import Mesh

from nnx_introspect._step import libtpu_version, place_for
from nnx_introspect._typing import ArgumentError
from nnx_introspect._xla import topology_mesh


def _never() -> dict[str, Any]:
    raise AssertionError("a child's request was made for a compile here")


def _unnamed() -> dict[str, Any]:
    raise ArgumentError("target", "`target` must be passed by name")


def test_a_measured_run_compiles_on_the_first_present_devices() -> None:
    place = place_for(
        4, None, {"data": 2, "tp": 2}, (("data", 2), ("tp", 2)), 3, _never
    )
    assert (place.where, place.payload, place.order) == (
        "this process",
        None,
        "the present devices'",
    )
    assert place.mesh is not None
    assert dict(place.mesh.shape) == {"data": 2, "tp": 2}
    assert list(place.mesh.devices.flat) == jax.devices()[:4]


def test_a_measured_run_keeps_a_concrete_mesh_even_with_a_topology() -> None:
    mesh = Mesh(np.array(jax.devices()[4:6]), ("tp",))
    place = place_for(2, "v5e-2", mesh, (("tp", 2),), 1, _never)
    assert place.mesh is mesh and place.payload is None


def test_a_concrete_mesh_compiles_on_its_own_devices() -> None:
    mesh = Mesh(np.array(jax.devices()[2:4]), ("data",))
    place = place_for(2, None, mesh, (("data", 2),), None, _never)
    assert (place.mesh, place.order, place.where) == (
        mesh,
        "the mesh's",
        "this process",
    )


def test_a_mesh_this_process_holds_compiles_here_in_plain_order() -> None:
    axes = (("data", 2), ("tp", 4))
    place = place_for(8, None, dict(axes), axes, None, _never)
    assert place.order is None and place.payload is None
    assert place.mesh is not None and dict(place.mesh.shape) == dict(axes)
    assert list(place.mesh.devices.flat) == jax.devices()[:8]


def test_more_devices_than_this_process_has_go_to_a_child() -> None:
    made: list[int] = []

    def payload() -> dict[str, Any]:
        made.append(1)
        return {"request": 16}

    n = jax.device_count() * 2
    place = place_for(n, None, {"data": n}, (("data", n),), None, payload)
    assert (place.payload, place.devices, place.mesh) == ({"request": 16}, n, None)
    assert place.where == f"a child process with {n} virtual CPU devices"
    assert made == [1]


def test_a_request_that_cannot_be_named_for_a_child_is_raised() -> None:
    n = jax.device_count() * 2
    with pytest.raises(ArgumentError) as caught:
        place_for(n, None, {"data": n}, (("data", n),), None, _unnamed)
    assert caught.value.argument == "target"


def test_a_named_topology_compiles_in_a_child() -> None:
    place = place_for(8, "h100-8", {"tp": 8}, (("tp", 8),), None, lambda: {"r": 1})
    assert (place.where, place.payload, place.devices) == (
        "a child process (h100-8)",
        {"r": 1},
        8,
    )


@pytest.mark.skipif(libtpu_version() is None, reason="libtpu is not installed")
def test_an_unnamed_request_for_a_topology_compiles_here_on_its_devices() -> None:
    axes = (("data", 2), ("tp", 2))
    place = place_for(4, "v5e-4", dict(axes), axes, None, _unnamed)
    assert place.where == "this process" and place.payload is None
    expected, order = topology_mesh("v5e-4", axes)
    assert place.mesh is not None and place.order == order
    assert [d.id for d in place.mesh.devices.flat] == [
        d.id for d in expected.devices.flat
    ]
    assert {d.platform for d in place.mesh.devices.flat} == {"tpu"}

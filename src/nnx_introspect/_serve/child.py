"""Serving compiles in a child process, as a step's: :func:`serve_readings`.

A named topology compiles in a child process (``python -m
nnx_introspect._serve``) whose environment is the training step's child's
(``JAX_PLATFORMS=cpu``, so the CUDA plugin makes compile-only devices; one
CPU device, or the mesh's count of virtual CPU devices for a mesh larger
than this process's): the same :func:`~nnx_introspect._step.child.run_child_json`
starts it and the same :func:`~nnx_introspect._step.child.answer` writes its
one JSON line. The request is the :class:`ServeSpec` by names (the target,
``init_cache`` and ``decode`` as ``"package.module:name"``); the answer is
:class:`~nnx_introspect._serve.compile.ServeReadings`' JSON data.
"""

import dataclasses
import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from jax.sharding import Mesh

from nnx_introspect._serve.compile import (
    PROGRAMS,
    ServeReadings,
    compile_serving,
    compiled_in_children,
)
from nnx_introspect._serve.programs import check_cache_path
from nnx_introspect._serve.spec import ServeOptions, ServeSpec
from nnx_introspect._step import answer, child_why, importable_name, place_for
from nnx_introspect._typing import ArgumentError

__all__ = ["Served", "main", "missing_axes", "serve_readings", "serve_request"]


def _name(value: Any, argument: str, why: str) -> str | None:
    if value is None:
        return None
    name = importable_name(value)
    if name is None:
        raise ArgumentError(
            argument,
            f"`{argument}` must be passed as 'package.module:name' (or a "
            f"function importable by that name), not a lambda or closure: {why}.",
        )
    return name


def serve_request(
    spec: ServeSpec,
    names: Sequence[str] = PROGRAMS,
    *,
    breakdown: bool = False,
    cache: bool = False,
) -> dict[str, Any]:
    """The JSON a serving child needs: the spec by names, what to compile.

    Raises:
        ArgumentError: If the target, ``init_cache`` or ``decode`` has no
            name to import it by, or the mesh is too large for a child.
    """
    why = child_why(spec.num_devices, spec.topology, "serving program")
    options = spec.options
    return {
        "target": _name(spec.target, "target", why),
        "mesh": [list(axis) for axis in spec.mesh_axes],
        "sequences": spec.sequences,
        "context": spec.context,
        "prompt": spec.prompt,
        "prefill_sequences": spec.prefill_sequences,
        "topology": spec.topology,
        "max_device_bytes": spec.max_device_bytes,
        "weights": options.weights,
        "kv_cache": options.kv_cache,
        "init_cache": _name(options.init_cache, "init_cache", why),
        "decode": _name(options.decode, "decode", why),
        "programs": list(names),
        "breakdown": breakdown,
        "cache": cache,
        "compiler_flags": [list(pair) for pair in spec.compiler_flags],
    }


def serve_spec_from_json(data: Mapping[str, Any]) -> ServeSpec:
    """The :class:`ServeSpec` :func:`serve_request` sent."""
    options = ServeOptions(
        data["weights"], data["kv_cache"], data["init_cache"], data["decode"]
    )
    return ServeSpec(
        data["target"],
        {str(a): int(s) for a, s in data["mesh"]},
        data["sequences"],
        data["context"],
        data["prompt"],
        data["prefill_sequences"],
        data["topology"],
        data["max_device_bytes"],
        options,
        data.get("compiler_flags"),
    )


def _answer(data: Mapping[str, Any]) -> dict[str, Any]:
    """Compile a :func:`serve_request` (in the child); the readings' JSON data."""
    spec = serve_spec_from_json(data)
    readings = compile_serving(
        spec,
        tuple(data["programs"]),
        breakdown=bool(data["breakdown"]),
        cache=bool(data["cache"]),
    )
    return readings.json_data()


def main() -> int:
    """Serve one serving request from stdin (``python -m nnx_introspect._serve``)."""
    return answer(_answer)


@dataclasses.dataclass(frozen=True)
class Served:
    """The serving programs compiled: the spec they compiled as, XLA's readings, where.

    ``spec`` is the request's, its mesh completed with any axis the model's
    own constraints name (``readings.added_axes``); ``where`` the report's
    words for where they compiled.
    """

    spec: ServeSpec
    readings: ServeReadings
    where: str


def serve_readings(
    spec: ServeSpec,
    names: Sequence[str] = PROGRAMS,
    *,
    breakdown: bool = False,
    cache: bool = False,
    runs: int | None = None,
) -> Served:
    """XLA's readings of the programs ``names``, compiled where their devices are.

    The place is the training step's
    (:func:`~nnx_introspect._step.child.place_for`): with ``runs``, this
    process's devices, where the programs then run; a named topology in a
    child process (``python -m nnx_introspect._serve``), or here when the spec
    cannot be named and this process can make the topology's devices; a
    mesh of this process's devices here; a larger mesh in a child with enough
    virtual CPU devices. The model's cache path and the cache's split are
    checked first, so a bad request starts no child.

    A mesh given by its axes that lacks an axis the model's own activation
    constraints name is compiled again with that axis of size 1 (it shards
    nothing), as a training step's ``--mesh`` is completed; the readings'
    ``added_axes`` say which. A concrete ``Mesh`` is the user's: its missing
    axis is an error naming ``mesh``.
    """
    added: tuple[str, ...] = ()
    while True:
        try:
            readings, where = _readings(spec, names, breakdown, cache, runs)
        except ArgumentError as error:
            axes = missing_axes(error)
            if not axes or added or isinstance(spec.mesh, Mesh):
                raise
            added = axes
            spec = spec.replace(mesh=dict(spec.mesh_axes) | {a: 1 for a in axes})
            continue
        if added:
            readings = dataclasses.replace(readings, added_axes=added)
        return Served(spec, readings, where)


_MISSING = re.compile(r"^`mesh` \S+ has no '(\w+)' axis, which the model's own")


def missing_axes(error: ArgumentError) -> tuple[str, ...]:
    """The mesh axes a failed trace says the mesh lacks, or ``()``.

    Read from a :class:`~nnx_introspect._serve.programs.MissingMeshAxesError`, or
    from its message when it came back from a child process.
    """
    axes = getattr(error, "axes", None)
    if axes:
        return tuple(axes)
    found = _MISSING.match(str(error)) if error.argument == "mesh" else None
    return () if found is None else (found[1],)


def _readings(
    spec: ServeSpec,
    names: Sequence[str],
    breakdown: bool,
    cache: bool,
    runs: int | None,
) -> tuple[ServeReadings, str]:
    """:func:`serve_readings` of a mesh as given."""
    check_cache_path(spec)
    request = functools.partial(
        serve_request, spec, names, breakdown=breakdown, cache=cache
    )
    place = place_for(
        spec.num_devices, spec.topology, spec.mesh, spec.mesh_axes, runs, request
    )
    if place.payload is not None:
        apart = spec.parameters >= SIDE_BY_SIDE_PARAMS
        return compiled_in_children(place.payload, place.devices, apart), place.where
    assert place.mesh is not None  # a place here has its mesh
    # traced as on the target where its compile-only devices are made here
    named = spec.topology is not None and runs is None
    trace = list(place.mesh.devices.flat) if named else None
    readings = compile_serving(
        spec,
        names,
        breakdown=breakdown,
        cache=cache,
        mesh=(place.mesh, trace),
        runs=runs,
    )
    return readings, place.where


SIDE_BY_SIDE_PARAMS = 100_000_000
"""From this many parameters, each serving program compiles in a child of its own,
the children side by side: a large model's compiles outlast a child's start
(about 2 s: importing JAX, building the model abstractly); a small model's do
not, and one child for both programs spends half the processes."""

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

import concurrent.futures
import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from jax.sharding import Mesh

from nnx_introspect._counting import count_params
from nnx_introspect._serve.compile import (
    PROGRAMS,
    ServeReadings,
    compile_serving,
    in_this_process,
)
from nnx_introspect._serve.programs import check_cache_path
from nnx_introspect._serve.spec import ServeOptions, ServeSpec
from nnx_introspect._step import (
    answer,
    child_why,
    importable_name,
    run_child_json,
    topology_mesh_here,
)
from nnx_introspect._typing import ArgumentError

__all__ = ["completed", "main", "missing_axes", "serve_readings", "serve_request"]


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


def serve_readings(
    spec: ServeSpec,
    names: Sequence[str] = PROGRAMS,
    *,
    breakdown: bool = False,
    cache: bool = False,
) -> tuple[ServeReadings, str]:
    """XLA's readings of the programs ``names``, and where they were compiled.

    A mesh given by its axes that lacks an axis the model's own activation
    constraints name is compiled again with that axis of size 1 (it shards
    nothing), as a training step's ``--mesh`` is completed; the readings'
    ``added_axes`` say which (:func:`completed`). A concrete ``Mesh`` is the
    user's: its missing axis is an error naming ``mesh``.
    """
    try:
        return _readings(spec, names, breakdown=breakdown, cache=cache)
    except ArgumentError as error:
        axes = missing_axes(error)
        if not axes or isinstance(spec.mesh, Mesh):
            raise
    readings, where = _readings(
        completed(spec, axes), names, breakdown=breakdown, cache=cache
    )
    return dataclasses.replace(readings, added_axes=axes), where


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


def completed(spec: ServeSpec, axes: Sequence[str]) -> ServeSpec:
    """``spec`` with each of ``axes`` added to its mesh at size 1."""
    return spec.replace(mesh=dict(spec.mesh_axes) | {axis: 1 for axis in axes})


def _readings(
    spec: ServeSpec,
    names: Sequence[str] = PROGRAMS,
    *,
    breakdown: bool = False,
    cache: bool = False,
) -> tuple[ServeReadings, str]:
    """:func:`serve_readings` of a mesh as given.

    A named topology compiles in a child process (or here, when the spec
    cannot be named and this process can make the topology's devices); a mesh
    of this process's devices compiles here; a larger mesh in a child with
    enough virtual CPU devices. The model's cache path and the cache's split
    are checked here first, so a bad request starts no child.
    """
    check_cache_path(spec)
    if in_this_process(spec):
        readings = compile_serving(spec, names, breakdown=breakdown, cache=cache)
        return readings, "this process"
    try:
        payload = serve_request(spec, names, breakdown=breakdown, cache=cache)
    except ArgumentError as unnamed:
        if spec.topology is None:
            raise
        built, _ = topology_mesh_here(spec.topology, spec.mesh_axes, unnamed)
        here = (built, list(built.devices.flat))  # traced as on the target
        readings = compile_serving(
            spec, names, breakdown=breakdown, cache=cache, mesh=here
        )
        return readings, "this process"
    where = (
        f"a child process ({spec.topology})"
        if spec.topology is not None
        else f"a child process with {spec.num_devices} virtual CPU devices"
    )
    apart = count_params(spec.model) >= SIDE_BY_SIDE_PARAMS
    return _children(payload, spec.num_devices, apart), where


SIDE_BY_SIDE_PARAMS = 100_000_000
"""From this many parameters, each serving program compiles in a child of its own,
the children side by side: a large model's compiles outlast a child's start
(about 2 s: importing JAX, building the model abstractly); a small model's do
not, and one child for both programs spends half the processes."""


def _children(payload: dict[str, Any], n: int, apart: bool) -> ServeReadings:
    """The programs of ``payload`` compiled in one child, or one child each.

    With ``apart``, the programs (independent) compile in children side by
    side: on the 7B example on ``h100-8``, both in 12.2 s against 17.0 s in
    one child (``benchmarks/serve_overhead.py``). The first error, in the
    programs' order, is raised.
    """
    names = list(payload["programs"])
    if len(names) == 1 or not apart:
        data, _ = run_child_json(payload, n, "nnx_introspect._serve")
        return ServeReadings.from_json_data(data)
    with concurrent.futures.ThreadPoolExecutor(len(names)) as pool:
        futures = [
            pool.submit(
                run_child_json,
                payload | {"programs": [name]},
                n,
                "nnx_introspect._serve",
            )
            for name in names
        ]
        concurrent.futures.wait(futures)
    answers = [ServeReadings.from_json_data(f.result()[0]) for f in futures]
    first = answers[0]
    for other in answers[1:]:
        same = (other.weights_bytes, other.kv_cache_bytes, other.kv_bytes_per_token)
        if same != (
            first.weights_bytes,
            first.kv_cache_bytes,
            first.kv_bytes_per_token,
        ):
            raise RuntimeError(  # pragma: no cover - one spec, one build
                "the serving children built different inputs from one request; "
                "make the target's factory deterministic."
            )
    programs = tuple(pair for answer in answers for pair in answer.programs)
    return dataclasses.replace(first, programs=programs)

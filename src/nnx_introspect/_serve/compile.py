"""The serving programs compiled, here or in child processes: :func:`compile_serving`.

Prefill and decode go through the training step's pipeline after they are
built and lowered (:mod:`~nnx_introspect._serve.programs`, serving's own
builders): :func:`~nnx_introspect._step.compile.compile_or_recall` compiles
them (or recalls them from the cache of compile results) and reads XLA's
analyses and, with a breakdown, the buffers at the peak. Where they compile
is the step's choice too (:func:`~nnx_introspect._step.child.place_for`); a
child process is started by :func:`~nnx_introspect._step.child.run_child_json`
(``python -m nnx_introspect._serve``, answered by
:mod:`~nnx_introspect._serve.child`) in :func:`compiled_in_children`.
"""

import concurrent.futures
import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import Any

from jax.sharding import Mesh

from nnx_introspect._serve.programs import (
    lower_program,
    program_args,
    programs,
    serve_inputs,
    serve_leaves,
    serve_mesh,
    serve_outputs,
)
from nnx_introspect._serve.spec import ServeSpec
from nnx_introspect._step import ProgramNames, compile_or_recall, run_child_json
from nnx_introspect._xla import XlaReadings

__all__ = ["PROGRAMS", "ServeReadings", "compile_serving", "compiled_in_children"]

PROGRAMS = ("prefill", "decode")
"""The serving programs, in the order a server runs them."""


@dataclasses.dataclass(frozen=True)
class ServeReadings:
    """XLA's readings of the serving programs, and the inputs' own figures.

    Attributes:
        weights_bytes: One device's share of the served weights.
        kv_cache_bytes: One device's share of the KV cache.
        kv_bytes_per_token: One position of one sequence, one device, all
            layers.
        programs: ``(name, readings)`` of each program compiled, in order.
        added_axes: Mesh axes of size 1 added to the request's mesh because
            the model's own constraints name them
            (:func:`~nnx_introspect._serve.child.serve_readings`).

    Example:
        >>> readings = ServeReadings(10, 20, 2, ())
        >>> ServeReadings.from_json_data(readings.json_data()) == readings
        True
    """

    weights_bytes: int
    kv_cache_bytes: int
    kv_bytes_per_token: int
    programs: tuple[tuple[str, XlaReadings], ...]
    added_axes: tuple[str, ...] = ()

    def program(self, name: str) -> XlaReadings:
        """The readings of program ``name``.

        Raises:
            KeyError: If ``name`` was not compiled.
        """
        return dict(self.programs)[name]

    def json_data(self) -> dict[str, Any]:
        """JSON data (:meth:`from_json_data` reads it back)."""
        return {
            "weights_bytes": self.weights_bytes,
            "kv_cache_bytes": self.kv_cache_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "programs": [[name, r.json_data()] for name, r in self.programs],
            "added_axes": list(self.added_axes),
        }

    @classmethod
    def from_json_data(cls, data: Mapping[str, Any]) -> "ServeReadings":
        """The readings :meth:`json_data` wrote."""
        return cls(
            int(data["weights_bytes"]),
            int(data["kv_cache_bytes"]),
            int(data["kv_bytes_per_token"]),
            tuple(
                (str(name), XlaReadings.from_json_data(readings))
                for name, readings in data["programs"]
            ),
            tuple(str(a) for a in data.get("added_axes", ())),
        )


def compile_serving(
    spec: ServeSpec,
    names: Sequence[str] = PROGRAMS,
    *,
    breakdown: bool = False,
    cache: bool = False,
    mesh: tuple[Mesh, list[Any] | None] | None = None,
    runs: int | None = None,
) -> ServeReadings:
    """Build, lower and compile the programs ``names`` of ``spec`` in this process.

    ``mesh`` is the mesh and the devices the model is traced as seeing
    (:func:`~nnx_introspect._serve.programs.serve_mesh`'s, made here when
    ``None``). Every problem of the cache's split is raised before anything
    is lowered. With ``runs``, each program is run on the mesh's devices
    (this process's) after its compile.
    """
    built, trace_devices = serve_mesh(spec) if mesh is None else mesh
    inputs = serve_inputs(spec, built)
    jitted = programs(inputs, spec)
    found = []
    for name in names:
        start = time.perf_counter()
        args = program_args(inputs, spec, built, name)
        lowered = lower_program(jitted[name], args, built, trace_devices, spec)
        labels = ProgramNames(
            serve_leaves(inputs, name), serve_outputs(inputs), frozenset()
        )
        readings = compile_or_recall(
            lowered,
            built,
            start,
            labels,
            spec.topology,
            cache,
            breakdown=breakdown,
            runs=runs,
            flags=spec.compiler_flags,
        )
        found.append((name, readings))
    return ServeReadings(
        inputs.weights_bytes,
        inputs.kv_cache_bytes,
        inputs.kv_bytes_per_token,
        tuple(found),
    )


def compiled_in_children(payload: dict[str, Any], n: int, apart: bool) -> ServeReadings:
    """The programs of ``payload`` compiled in one child, or one child each.

    With ``apart``, the programs (independent) compile in children side by
    side: on the 7B example on ``h100-8``, both in 12.2 s against 17.0 s in
    one child (``benchmarks/speed/serve_overhead.py``). The first error, in the
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

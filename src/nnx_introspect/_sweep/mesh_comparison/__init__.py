"""Meshes compared: one compiled step per candidate, fanned out over an executor.

:func:`compare_meshes` checks every candidate mesh before anything compiles,
plans each one in this process (:func:`~nnx_introspect.mesh_config_report`: a
mesh the plan cannot apply, or whose state alone exceeds the budget, is
rejected with no compile), submits one :func:`step_memory_report` call per
remaining candidate to a ``concurrent.futures.Executor`` (a local process pool
by default, or any executor given: Dask's ``Client.get_executor()``...) and
returns a :class:`MeshComparison`, best mesh first.

The modules: ``arguments`` (the arguments checked before anything compiles:
what a worker can rebuild from names and pickles, the executor, the timeout),
``candidates`` (the meshes listed or enumerated for ``"auto"``, each planned
here: what the planner rejects is never compiled), ``pool`` (the default
executor: spawned workers on the CPU platform, each its own process group, and
stopping them), ``run`` (the compiles submitted and collected as rows, in
order, cancelled on interrupt), ``report`` (:class:`MeshComparison`, its
:class:`MeshCandidate` rows, their order and renderers), ``chart`` (peak bytes
per mesh as an inline SVG) and ``api`` (:func:`compare_meshes`, composing
them).
"""

from nnx_introspect._sweep.mesh_comparison.api import compare_meshes as compare_meshes
from nnx_introspect._sweep.mesh_comparison.candidates import (
    MAX_AUTO_MESHES as MAX_AUTO_MESHES,
)
from nnx_introspect._sweep.mesh_comparison.report import (
    MeshComparison as MeshComparison,
)
from nnx_introspect._sweep.mesh_comparison.rows import MeshAxes as MeshAxes
from nnx_introspect._sweep.mesh_comparison.rows import MeshCandidate as MeshCandidate
from nnx_introspect._sweep.mesh_comparison.rows import Outcome as Outcome
from nnx_introspect._sweep.mesh_comparison.rows import sort_key as sort_key

__all__ = [
    "MAX_AUTO_MESHES",
    "MeshAxes",
    "MeshCandidate",
    "MeshComparison",
    "Outcome",
    "compare_meshes",
]

"""Serving memory: prefill and decode compiled for a target, the KV cache, the fit.

Modules: ``spec`` (the checked request), ``programs`` (the two programs'
arguments, builders and compile), ``report`` (records and rendering), ``api``
(:func:`serve_memory_report`), ``search`` (:func:`max_sequences`,
:func:`max_context`), ``frontier`` (the chart of sequences against context
a search draws), ``timing`` (:class:`ServeTime`, the time estimate),
``meshes`` (:func:`compare_serving_meshes`).
"""

from nnx_introspect._serve.api import measure_serve as measure_serve
from nnx_introspect._serve.api import serve_memory_report as serve_memory_report
from nnx_introspect._serve.mesh_comparison import (
    ServeMeshComparison as ServeMeshComparison,
)
from nnx_introspect._serve.mesh_comparison import (
    compare_serving_meshes as compare_serving_meshes,
)
from nnx_introspect._serve.mesh_comparison import fan_out as fan_out
from nnx_introspect._serve.report import ServeMemoryReport as ServeMemoryReport
from nnx_introspect._serve.report import ServeProgram as ServeProgram
from nnx_introspect._serve.size_search import ServeSearch as ServeSearch
from nnx_introspect._serve.size_search import max_context as max_context
from nnx_introspect._serve.size_search import max_sequences as max_sequences
from nnx_introspect._serve.spec import TENSOR_PARALLEL_AXES as TENSOR_PARALLEL_AXES
from nnx_introspect._serve.spec import ServeOptions as ServeOptions
from nnx_introspect._serve.spec import ServeSpec as ServeSpec
from nnx_introspect._serve.timing import ServeTime as ServeTime

__all__ = [
    "TENSOR_PARALLEL_AXES",
    "ServeMemoryReport",
    "ServeMeshComparison",
    "ServeOptions",
    "ServeProgram",
    "ServeSearch",
    "ServeSpec",
    "ServeTime",
    "compare_serving_meshes",
    "fan_out",
    "max_context",
    "max_sequences",
    "measure_serve",
    "serve_memory_report",
]

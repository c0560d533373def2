"""nnx-introspect: exact, read-only introspection of Flax NNX models.

Count state leaves and parameters, plan per-device memory over a mesh, and check
that two states really match, for concrete or abstract (``nnx.eval_shape``)
models alike.
"""

import importlib
import sys
import typing

from nnx_introspect._xla.native_log import native_stderr_filtered

if typing.TYPE_CHECKING:  # the explicit re-exports, for type checkers and IDEs
    from nnx_introspect._abstract import abstract_model as abstract_model
    from nnx_introspect._breakdown.report import Breakdown as Breakdown
    from nnx_introspect._breakdown.report import BreakdownRow as BreakdownRow
    from nnx_introspect._checkpoint import CheckpointLeaf as CheckpointLeaf
    from nnx_introspect._checkpoint import CheckpointReport as CheckpointReport
    from nnx_introspect._checkpoint import check_checkpoint as check_checkpoint
    from nnx_introspect._checkpoint import checkpoint_report as checkpoint_report
    from nnx_introspect._checkpoint import verify_restore as verify_restore
    from nnx_introspect._compare import DiffEntry as DiffEntry
    from nnx_introspect._compare import StateDiff as StateDiff
    from nnx_introspect._compare import (
        check_reproducible_init as check_reproducible_init,
    )
    from nnx_introspect._compare import compare_states as compare_states
    from nnx_introspect._counting import count_params as count_params
    from nnx_introspect._counting import count_state_leaves as count_state_leaves
    from nnx_introspect._counting import ideal_share as ideal_share
    from nnx_introspect._counting import param_sum as param_sum
    from nnx_introspect._fingerprint import LeafFingerprint as LeafFingerprint
    from nnx_introspect._fingerprint import ParamFingerprint as ParamFingerprint
    from nnx_introspect._fingerprint import param_fingerprint as param_fingerprint
    from nnx_introspect._init import fresh_init_forward as fresh_init_forward
    from nnx_introspect._inventory import VarRecord as VarRecord
    from nnx_introspect._mesh import LeafShard as LeafShard
    from nnx_introspect._mesh import MeshConfigReport as MeshConfigReport
    from nnx_introspect._mesh import MeshProblem as MeshProblem
    from nnx_introspect._mesh import mesh_config_report as mesh_config_report
    from nnx_introspect._render.table import Table as Table
    from nnx_introspect._roofline.estimate import Roofline as Roofline
    from nnx_introspect._search.batch import BatchSearch as BatchSearch
    from nnx_introspect._search.batch import max_batch as max_batch
    from nnx_introspect._search.fit import FitRow as FitRow
    from nnx_introspect._search.fit import FitSearch as FitSearch
    from nnx_introspect._search.fit import fit_step as fit_step
    from nnx_introspect._search.meshes import MeshCandidate as MeshCandidate
    from nnx_introspect._search.meshes import MeshComparison as MeshComparison
    from nnx_introspect._search.meshes import compare_meshes as compare_meshes
    from nnx_introspect._serve import ServeMemoryReport as ServeMemoryReport
    from nnx_introspect._serve import ServeMeshComparison as ServeMeshComparison
    from nnx_introspect._serve import ServeProgram as ServeProgram
    from nnx_introspect._serve import ServeSearch as ServeSearch
    from nnx_introspect._serve import ServeTime as ServeTime
    from nnx_introspect._serve import compare_serving_meshes as compare_serving_meshes
    from nnx_introspect._serve import max_context as max_context
    from nnx_introspect._serve import max_sequences as max_sequences
    from nnx_introspect._serve import serve_memory_report as serve_memory_report
    from nnx_introspect._step import StepBudget as StepBudget
    from nnx_introspect._step import StepCompilation as StepCompilation
    from nnx_introspect._step import StepMemory as StepMemory
    from nnx_introspect._step import StepMemoryReport as StepMemoryReport
    from nnx_introspect._step import StepOptions as StepOptions
    from nnx_introspect._step import StepProgram as StepProgram
    from nnx_introspect._step import StepSpec as StepSpec
    from nnx_introspect._step import step_memory_report as step_memory_report
    from nnx_introspect._summary import KindTotal as KindTotal
    from nnx_introspect._summary import ModelSummary as ModelSummary
    from nnx_introspect._summary import SummaryRow as SummaryRow
    from nnx_introspect._summary import summarize as summarize
    from nnx_introspect._typing import ArgumentError as ArgumentError

__version__ = "0.1.0"

__all__ = [
    "ArgumentError",
    "BatchSearch",
    "Breakdown",
    "BreakdownRow",
    "CheckpointLeaf",
    "CheckpointReport",
    "DiffEntry",
    "FitRow",
    "FitSearch",
    "KindTotal",
    "LeafFingerprint",
    "LeafShard",
    "MeshCandidate",
    "MeshComparison",
    "MeshConfigReport",
    "MeshProblem",
    "ModelSummary",
    "ParamFingerprint",
    "Roofline",
    "ServeMemoryReport",
    "ServeMeshComparison",
    "ServeProgram",
    "ServeSearch",
    "ServeTime",
    "StateDiff",
    "StepBudget",
    "StepCompilation",
    "StepMemory",
    "StepMemoryReport",
    "StepOptions",
    "StepProgram",
    "StepSpec",
    "SummaryRow",
    "Table",
    "VarRecord",
    "abstract_model",
    "check_checkpoint",
    "check_reproducible_init",
    "checkpoint_report",
    "compare_meshes",
    "compare_serving_meshes",
    "compare_states",
    "count_params",
    "count_state_leaves",
    "fit_step",
    "fresh_init_forward",
    "ideal_share",
    "max_batch",
    "max_context",
    "max_sequences",
    "mesh_config_report",
    "param_fingerprint",
    "param_sum",
    "serve_memory_report",
    "step_memory_report",
    "summarize",
    "verify_restore",
]

# Public name -> private module defining it. Importing `nnx_introspect` stays
# cheap (no JAX, no flax): each module is imported the first time one of its names
# is used (PEP 562). Every name here is also imported above for type checkers.
_LAZY: dict[str, str] = {
    "ArgumentError": "nnx_introspect._typing",
    "BatchSearch": "nnx_introspect._search.batch",
    "MeshCandidate": "nnx_introspect._search.meshes",
    "MeshComparison": "nnx_introspect._search.meshes",
    "compare_meshes": "nnx_introspect._search.meshes",
    "FitRow": "nnx_introspect._search.fit",
    "FitSearch": "nnx_introspect._search.fit",
    "fit_step": "nnx_introspect._search.fit",
    "Roofline": "nnx_introspect._roofline.estimate",
    "Breakdown": "nnx_introspect._breakdown.report",
    "BreakdownRow": "nnx_introspect._breakdown.report",
    "CheckpointLeaf": "nnx_introspect._checkpoint",
    "CheckpointReport": "nnx_introspect._checkpoint",
    "DiffEntry": "nnx_introspect._compare",
    "KindTotal": "nnx_introspect._summary",
    "LeafFingerprint": "nnx_introspect._fingerprint",
    "LeafShard": "nnx_introspect._mesh",
    "MeshConfigReport": "nnx_introspect._mesh",
    "MeshProblem": "nnx_introspect._mesh",
    "ModelSummary": "nnx_introspect._summary",
    "ParamFingerprint": "nnx_introspect._fingerprint",
    "StateDiff": "nnx_introspect._compare",
    "ServeMemoryReport": "nnx_introspect._serve",
    "ServeMeshComparison": "nnx_introspect._serve",
    "compare_serving_meshes": "nnx_introspect._serve",
    "ServeProgram": "nnx_introspect._serve",
    "ServeSearch": "nnx_introspect._serve",
    "ServeTime": "nnx_introspect._serve",
    "max_context": "nnx_introspect._serve",
    "max_sequences": "nnx_introspect._serve",
    "serve_memory_report": "nnx_introspect._serve",
    "StepBudget": "nnx_introspect._step",
    "StepCompilation": "nnx_introspect._step",
    "StepMemory": "nnx_introspect._step",
    "StepMemoryReport": "nnx_introspect._step",
    "StepOptions": "nnx_introspect._step",
    "StepProgram": "nnx_introspect._step",
    "StepSpec": "nnx_introspect._step",
    "SummaryRow": "nnx_introspect._summary",
    "Table": "nnx_introspect._render.table",
    "VarRecord": "nnx_introspect._inventory",
    "abstract_model": "nnx_introspect._abstract",
    "check_checkpoint": "nnx_introspect._checkpoint",
    "check_reproducible_init": "nnx_introspect._compare",
    "checkpoint_report": "nnx_introspect._checkpoint",
    "compare_states": "nnx_introspect._compare",
    "count_params": "nnx_introspect._counting",
    "count_state_leaves": "nnx_introspect._counting",
    "fresh_init_forward": "nnx_introspect._init",
    "ideal_share": "nnx_introspect._counting",
    "max_batch": "nnx_introspect._search.batch",
    "mesh_config_report": "nnx_introspect._mesh",
    "param_fingerprint": "nnx_introspect._fingerprint",
    "param_sum": "nnx_introspect._counting",
    "step_memory_report": "nnx_introspect._step",
    "summarize": "nnx_introspect._summary",
    "verify_restore": "nnx_introspect._checkpoint",
}


# Hidden from type checkers, which see the imports above: to them a misspelt name
# stays an error instead of `Any`.
if not typing.TYPE_CHECKING:

    def __getattr__(name: str) -> typing.Any:
        """Import the module defining ``name`` on first use, then cache ``name``."""
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        if "jax" in sys.modules:
            value = getattr(importlib.import_module(module), name)
        else:  # JAX's first import here: its plugins' native noise kept off
            with native_stderr_filtered():
                value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})

"""nnx-introspect: exact, read-only introspection of Flax NNX models.

Count state leaves and parameters, plan per-device memory over a mesh, and check
that two states really match, for concrete or abstract (``nnx.eval_shape``)
models alike.
"""

import typing

from nnx_introspect._lazy import lazy_getattr, lazy_names
from nnx_introspect._xla import native_stderr_filtered

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
    from nnx_introspect._counting import count_active_params as count_active_params
    from nnx_introspect._counting import count_params as count_params
    from nnx_introspect._counting import count_state_leaves as count_state_leaves
    from nnx_introspect._counting import ideal_share as ideal_share
    from nnx_introspect._counting import param_sum as param_sum
    from nnx_introspect._experts import ExpertGroup as ExpertGroup
    from nnx_introspect._experts import ExpertLeaf as ExpertLeaf
    from nnx_introspect._fingerprint import LeafFingerprint as LeafFingerprint
    from nnx_introspect._fingerprint import ParamFingerprint as ParamFingerprint
    from nnx_introspect._fingerprint import param_fingerprint as param_fingerprint
    from nnx_introspect._init import fresh_init_forward as fresh_init_forward
    from nnx_introspect._inventory import VarRecord as VarRecord
    from nnx_introspect._mesh import LeafShard as LeafShard
    from nnx_introspect._mesh import MeshConfigReport as MeshConfigReport
    from nnx_introspect._mesh import MeshProblem as MeshProblem
    from nnx_introspect._mesh import expert_mesh_axis as expert_mesh_axis
    from nnx_introspect._mesh import mesh_config_report as mesh_config_report
    from nnx_introspect._render.table import Table as Table
    from nnx_introspect._rl.api import measure_rl as measure_rl
    from nnx_introspect._rl.api import rl_memory_report as rl_memory_report
    from nnx_introspect._rl.layouts import RLLayoutComparison as RLLayoutComparison
    from nnx_introspect._rl.layouts import compare_rl_layouts as compare_rl_layouts
    from nnx_introspect._rl.report import RLMemoryReport as RLMemoryReport
    from nnx_introspect._rl.report import RLPhase as RLPhase
    from nnx_introspect._rl.size_search import RLBatchSearch as RLBatchSearch
    from nnx_introspect._rl.size_search import rl_max_batch as rl_max_batch
    from nnx_introspect._rl.spec import RLSpec as RLSpec
    from nnx_introspect._roofline.estimate import Roofline as Roofline
    from nnx_introspect._serve import ServeMemoryReport as ServeMemoryReport
    from nnx_introspect._serve import ServeMeshComparison as ServeMeshComparison
    from nnx_introspect._serve import ServeProgram as ServeProgram
    from nnx_introspect._serve import ServeSearch as ServeSearch
    from nnx_introspect._serve import ServeTime as ServeTime
    from nnx_introspect._serve import compare_serving_meshes as compare_serving_meshes
    from nnx_introspect._serve import max_context as max_context
    from nnx_introspect._serve import max_sequences as max_sequences
    from nnx_introspect._serve import serve_memory_report as serve_memory_report
    from nnx_introspect._size_search import Jump as Jump
    from nnx_introspect._size_search import PeakAt as PeakAt
    from nnx_introspect._size_search import SearchPoint as SearchPoint
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
    from nnx_introspect._sweep.batch.search import BatchSearch as BatchSearch
    from nnx_introspect._sweep.batch.search import max_batch as max_batch
    from nnx_introspect._sweep.fit import FitRow as FitRow
    from nnx_introspect._sweep.fit import FitSearch as FitSearch
    from nnx_introspect._sweep.fit import fit_step as fit_step
    from nnx_introspect._sweep.mesh_comparison import MeshCandidate as MeshCandidate
    from nnx_introspect._sweep.mesh_comparison import MeshComparison as MeshComparison
    from nnx_introspect._sweep.mesh_comparison import compare_meshes as compare_meshes
    from nnx_introspect._typing import ArgumentError as ArgumentError

__version__ = "0.1.0"


# Importing `nnx_introspect` stays cheap (no JAX, no flax): each module is
# imported the first time one of its names is used (PEP 562).
_LAZY = lazy_names(__file__)
__all__ = sorted(_LAZY)


# Hidden from type checkers, which see the imports above: to them a misspelt name
# stays an error instead of `Any`.
if not typing.TYPE_CHECKING:
    __getattr__ = lazy_getattr(__name__, _LAZY, globals(), native_stderr_filtered)

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})

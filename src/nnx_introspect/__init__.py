"""nnx-introspect: exact, read-only introspection of Flax NNX models.

Count state leaves and parameters, plan per-device memory over a mesh, and check
that two states really match, for concrete or abstract (``nnx.eval_shape``)
models alike.
"""

from nnx_introspect._abstract import abstract_model as abstract_model
from nnx_introspect._checkpoint import CheckpointLeaf as CheckpointLeaf
from nnx_introspect._checkpoint import CheckpointReport as CheckpointReport
from nnx_introspect._checkpoint import check_checkpoint as check_checkpoint
from nnx_introspect._checkpoint import checkpoint_report as checkpoint_report
from nnx_introspect._checkpoint import verify_restore as verify_restore
from nnx_introspect._compare import DiffEntry as DiffEntry
from nnx_introspect._compare import StateDiff as StateDiff
from nnx_introspect._compare import check_reproducible_init as check_reproducible_init
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
from nnx_introspect._inventory import inventory as _inventory_impl
from nnx_introspect._mesh import LeafShard as LeafShard
from nnx_introspect._mesh import MeshConfigReport as MeshConfigReport
from nnx_introspect._mesh import MeshProblem as MeshProblem
from nnx_introspect._mesh import mesh_config_report as mesh_config_report
from nnx_introspect._render import Table as Table
from nnx_introspect._summary import KindTotal as KindTotal
from nnx_introspect._summary import ModelSummary as ModelSummary
from nnx_introspect._summary import SummaryRow as SummaryRow
from nnx_introspect._summary import summarize as summarize

__version__ = "0.1.0"

__all__ = [
    "CheckpointLeaf",
    "CheckpointReport",
    "DiffEntry",
    "KindTotal",
    "LeafFingerprint",
    "LeafShard",
    "MeshConfigReport",
    "MeshProblem",
    "ModelSummary",
    "ParamFingerprint",
    "StateDiff",
    "SummaryRow",
    "Table",
    "VarRecord",
    "abstract_model",
    "check_checkpoint",
    "check_reproducible_init",
    "checkpoint_report",
    "compare_states",
    "count_params",
    "count_state_leaves",
    "fresh_init_forward",
    "ideal_share",
    "mesh_config_report",
    "param_fingerprint",
    "param_sum",
    "summarize",
    "verify_restore",
]

del _inventory_impl

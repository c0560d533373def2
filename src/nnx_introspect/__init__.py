"""nnx-introspect: exact, read-only introspection of Flax NNX models.

Count state leaves and parameters, plan per-device memory over a mesh, and check
that two states really match, for concrete or abstract (``nnx.eval_shape``)
models alike.
"""

from nnx_introspect._counting import count_params as count_params
from nnx_introspect._counting import count_state_leaves as count_state_leaves
from nnx_introspect._counting import ideal_share as ideal_share
from nnx_introspect._counting import param_sum as param_sum
from nnx_introspect._init import fresh_init_forward as fresh_init_forward
from nnx_introspect._inventory import VarRecord as VarRecord
from nnx_introspect._inventory import inventory as _inventory_impl
from nnx_introspect._mesh import LeafShard as LeafShard
from nnx_introspect._mesh import MeshConfigReport as MeshConfigReport
from nnx_introspect._mesh import MeshProblem as MeshProblem
from nnx_introspect._mesh import mesh_config_report as mesh_config_report
from nnx_introspect._render import Table as Table

__version__ = "0.1.0"

__all__ = [
    "LeafShard",
    "MeshConfigReport",
    "MeshProblem",
    "Table",
    "VarRecord",
    "count_params",
    "count_state_leaves",
    "fresh_init_forward",
    "ideal_share",
    "mesh_config_report",
    "param_sum",
]

del _inventory_impl

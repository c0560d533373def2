"""Mesh configuration reports: how each state leaf would split over a device mesh.

All shard arithmetic is JAX's own: an ``AbstractMesh`` built from the proposed
axes, a ``NamedSharding`` per leaf, and ``NamedSharding.shard_shape``. No device
is needed, so a 2,048-device proposal can be planned on one CPU.

Each leaf's partition spec comes from, in order: the user's ``rules`` (regular
expressions searched in the leaf's ``/``-joined path, first match wins), the
variable's NNX sharding metadata (``nnx.with_partitioning``), translated through
logical-axis rules where names are logical; otherwise the leaf is replicated.
Optimizer state mirrors the parameter it belongs to; gradients copy the
parameters' sharding and dtype.

Modules: ``parse`` (arguments), ``specs`` (partition-spec entries), ``plan``
(each leaf's spec and problems), ``optimizer`` (the optimizer-state mirror),
``records`` (each leaf's placement, a problem), ``report`` (totals, table,
JSON, the HTML page) and ``api``
(:func:`mesh_config_report`, composing them).
"""

from nnx_introspect._mesh.api import mesh_config_report as mesh_config_report
from nnx_introspect._mesh.api import planned_axes as planned_axes
from nnx_introspect._mesh.parse import MAX_MESH_DEVICES as MAX_MESH_DEVICES
from nnx_introspect._mesh.parse import OPTIMIZER_NAMES as OPTIMIZER_NAMES
from nnx_introspect._mesh.parse import LogicalRulesLike as LogicalRulesLike
from nnx_introspect._mesh.parse import MeshLike as MeshLike
from nnx_introspect._mesh.parse import RulesLike as RulesLike
from nnx_introspect._mesh.parse import SpecLike as SpecLike
from nnx_introspect._mesh.parse import as_abstract_mesh as as_abstract_mesh
from nnx_introspect._mesh.parse import as_logical_rules as as_logical_rules
from nnx_introspect._mesh.parse import check_rules as check_rules
from nnx_introspect._mesh.parse import load_rules_file as load_rules_file
from nnx_introspect._mesh.parse import optimizer_from_name as optimizer_from_name
from nnx_introspect._mesh.parse import parse_bytes as parse_bytes
from nnx_introspect._mesh.records import CATEGORIES as CATEGORIES
from nnx_introspect._mesh.records import LeafShard as LeafShard
from nnx_introspect._mesh.records import MeshProblem as MeshProblem
from nnx_introspect._mesh.report import MeshConfigReport as MeshConfigReport
from nnx_introspect._mesh.report import mesh_str as mesh_str
from nnx_introspect._mesh.specs import EXPERT_AXIS as EXPERT_AXIS
from nnx_introspect._mesh.specs import entry_axes as entry_axes
from nnx_introspect._mesh.specs import expert_mesh_axis as expert_mesh_axis

__all__ = [
    "CATEGORIES",
    "EXPERT_AXIS",
    "MAX_MESH_DEVICES",
    "OPTIMIZER_NAMES",
    "LeafShard",
    "LogicalRulesLike",
    "MeshConfigReport",
    "MeshLike",
    "MeshProblem",
    "RulesLike",
    "as_abstract_mesh",
    "as_logical_rules",
    "check_rules",
    "entry_axes",
    "expert_mesh_axis",
    "load_rules_file",
    "mesh_config_report",
    "mesh_str",
    "optimizer_from_name",
    "parse_bytes",
    "planned_axes",
]

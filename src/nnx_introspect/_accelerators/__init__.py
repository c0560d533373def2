"""Accelerators as data: named TPU and GPU slices, their hardware figures and budgets.

``topology`` holds one row per family (how a name such as ``v5e-256`` or
``h100-8`` becomes a slice: device count, shape, memory, the compiler's
topology and config); ``hardware`` the roofline figures of each chip (peak
FLOP/s per dtype, HBM and link bandwidths), each with its source; ``budget``
the memory a run really gets there (a GPU's allocator share, a TPU's usable
HBM). Adding a family is adding data, not code; nothing here imports jax at
module level or starts a compiler.
"""

from nnx_introspect._accelerators.budget import (
    MAX_ADVISED_FRACTION as MAX_ADVISED_FRACTION,
)
from nnx_introspect._accelerators.budget import Budget as Budget
from nnx_introspect._accelerators.budget import step_budget as step_budget
from nnx_introspect._accelerators.hardware import DTYPE_ALIASES as DTYPE_ALIASES
from nnx_introspect._accelerators.hardware import NETWORK_OVERRIDE as NETWORK_OVERRIDE
from nnx_introspect._accelerators.hardware import Hardware as Hardware
from nnx_introspect._accelerators.hardware import hardware_for as hardware_for
from nnx_introspect._accelerators.hardware import host_link as host_link
from nnx_introspect._accelerators.topology import GPU_FAMILIES as GPU_FAMILIES
from nnx_introspect._accelerators.topology import TPU_FAMILIES as TPU_FAMILIES
from nnx_introspect._accelerators.topology import Topology as Topology
from nnx_introspect._accelerators.topology import dcn_split as dcn_split
from nnx_introspect._accelerators.topology import parse_topology as parse_topology
from nnx_introspect._accelerators.topology import resolve_topology as resolve_topology
from nnx_introspect._accelerators.topology import slice_of as slice_of
from nnx_introspect._accelerators.topology import (
    topology_of_devices as topology_of_devices,
)

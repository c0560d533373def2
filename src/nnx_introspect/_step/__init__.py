"""Step memory: what XLA's own compile says one step needs on each device.

:func:`step_memory_report` compiles the real step (forward, backward, optimizer
update) with ``jax.jit(...).lower(...).compile()`` on a mesh, with every input a
``jax.ShapeDtypeStruct`` carrying its ``NamedSharding``: nothing is allocated.
Each leaf's partition spec comes from :func:`~nnx_introspect.mesh_config_report`
(one resolution of rules, metadata and logical rules), and the report reads
``memory_analysis()`` and ``cost_analysis()`` of the compiled executable.

Where the compile runs:

* in this process, when it has enough devices (the first ``prod(mesh)`` of
  ``jax.devices()``, or the devices of a concrete ``Mesh``);
* in a child Python process with enough virtual CPU devices
  (``--xla_force_host_platform_device_count``) otherwise; the child rebuilds
  the model from a ``"package.module:factory"`` name and returns plain numbers;
* with XLA:TPU for a named TPU topology (``topology="v5e-4"``, the ``libtpu``
  package) or XLA:GPU for named NVIDIA GPUs (``topology="h100-8"``, the CUDA
  PJRT plugin), via ``jax.experimental.topologies.get_topology_desc``:
  compile-only devices, no TPU or GPU needed; in a child process with a
  controlled environment (``JAX_PLATFORMS=cpu``, the libtpu variables) that
  receives every leaf's resolved spec and returns plain numbers.

What the serving programs share with the step's pipeline (compile or
recall, the child runner, the measured run, the records) is imported from
this package, never from its modules.

The modules: ``inputs`` (the arguments' checks), ``spec`` (:class:`StepSpec`,
the step they describe, checked once where it is built; its request and its
plan), ``loss`` and ``compile`` (the step, lowered with the target's devices
as the model sees them while tracing, and compiled), ``child`` (where a
program compiles: here, or in a child process; ``python -m nnx_introspect._step``
is the child), ``report`` (:class:`StepMemoryReport`), ``assemble`` (the report
from XLA's readings, :class:`~nnx_introspect._xla.readings.XlaReadings`) and
``measure`` (:func:`step_memory_report`, composing them;
:func:`~nnx_introspect._step.measure.measure_step` measures a spec, one stage
after another).
"""

from nnx_introspect._accelerators import GPU_FAMILIES as GPU_FAMILIES
from nnx_introspect._accelerators import TPU_FAMILIES as TPU_FAMILIES
from nnx_introspect._accelerators import parse_topology as parse_topology
from nnx_introspect._step.child import CHILD_TIMEOUT_SECONDS as CHILD_TIMEOUT_SECONDS
from nnx_introspect._step.child import MAX_CHILD_DEVICES as MAX_CHILD_DEVICES
from nnx_introspect._step.child import Place as Place
from nnx_introspect._step.child import answer as answer
from nnx_introspect._step.child import child_why as child_why
from nnx_introspect._step.child import compiled_where as compiled_where
from nnx_introspect._step.child import place_for as place_for
from nnx_introspect._step.child import present_mesh as present_mesh
from nnx_introspect._step.child import run_child_json as run_child_json
from nnx_introspect._step.child import run_child_request as run_child_request
from nnx_introspect._step.child import topology_mesh_here as topology_mesh_here
from nnx_introspect._step.compile import ProgramNames as ProgramNames
from nnx_introspect._step.compile import compile_or_recall as compile_or_recall
from nnx_introspect._step.compile import devices_seen_as as devices_seen_as
from nnx_introspect._step.inputs import LOSSES as LOSSES
from nnx_introspect._step.inputs import BatchLike as BatchLike
from nnx_introspect._step.inputs import LossLike as LossLike
from nnx_introspect._step.inputs import SpecsLike as SpecsLike
from nnx_introspect._step.inputs import as_model as as_model
from nnx_introspect._step.inputs import built_once as built_once
from nnx_introspect._step.inputs import parse_batch as parse_batch
from nnx_introspect._step.logprobs import LOGPROBS as LOGPROBS
from nnx_introspect._step.lora import as_lora as as_lora
from nnx_introspect._step.measure import devices_measured as devices_measured
from nnx_introspect._step.measure import measure_step as measure_step
from nnx_introspect._step.measure import step_memory_report as step_memory_report
from nnx_introspect._step.measured import Measured as Measured
from nnx_introspect._step.measured import as_measure as as_measure
from nnx_introspect._step.measured import duration as duration
from nnx_introspect._step.measured import measured_topology as measured_topology
from nnx_introspect._step.options import as_remat as as_remat
from nnx_introspect._step.program import ProgramKind as ProgramKind
from nnx_introspect._step.report import StepMemoryReport as StepMemoryReport
from nnx_introspect._step.report_render import cached_date as cached_date
from nnx_introspect._step.report_render import compiled_words as compiled_words
from nnx_introspect._step.spec import StepOptions as StepOptions
from nnx_introspect._step.spec import StepSpec as StepSpec
from nnx_introspect._step.spec import as_step_spec as as_step_spec
from nnx_introspect._step.spec import blame as blame
from nnx_introspect._step.spec import importable_name as importable_name
from nnx_introspect._step.spec import plan_problems as plan_problems
from nnx_introspect._step.spec import plan_step as plan_step
from nnx_introspect._step.spec import step_names as step_names
from nnx_introspect._step.step_records import StepBudget as StepBudget
from nnx_introspect._step.step_records import StepCompilation as StepCompilation
from nnx_introspect._step.step_records import StepMemory as StepMemory
from nnx_introspect._step.step_records import StepProgram as StepProgram
from nnx_introspect._step.step_records import (
    memory_from_readings as memory_from_readings,
)
from nnx_introspect._step.step_records import step_kind as step_kind
from nnx_introspect._step.train import TRAIN as TRAIN
from nnx_introspect._step.train import (
    TRAIN_OPTIMIZER_DONATED as TRAIN_OPTIMIZER_DONATED,
)
from nnx_introspect._step.values import VALUES as VALUES
from nnx_introspect._step.values import token_values as token_values
from nnx_introspect._xla import libtpu_version as libtpu_version

__all__ = [
    "GPU_FAMILIES",
    "LOGPROBS",
    "LOSSES",
    "MAX_CHILD_DEVICES",
    "TPU_FAMILIES",
    "TRAIN",
    "TRAIN_OPTIMIZER_DONATED",
    "VALUES",
    "Measured",
    "Place",
    "ProgramKind",
    "ProgramNames",
    "StepBudget",
    "StepCompilation",
    "StepMemory",
    "StepMemoryReport",
    "StepOptions",
    "StepProgram",
    "StepSpec",
    "answer",
    "as_lora",
    "as_measure",
    "as_model",
    "as_remat",
    "as_step_spec",
    "blame",
    "built_once",
    "cached_date",
    "child_why",
    "compile_or_recall",
    "compiled_where",
    "compiled_words",
    "devices_measured",
    "devices_seen_as",
    "duration",
    "importable_name",
    "measure_step",
    "measured_topology",
    "memory_from_readings",
    "parse_batch",
    "parse_topology",
    "place_for",
    "plan_problems",
    "plan_step",
    "present_mesh",
    "run_child_json",
    "step_kind",
    "step_memory_report",
    "step_names",
    "token_values",
    "topology_mesh_here",
]

"""The step memory report: XLA's bytes per device beside the plan, and its renderers."""

import dataclasses
import math
from typing import Any

from jax.sharding import PartitionSpec

from nnx_introspect._mesh import MeshConfigReport, parse_bytes
from nnx_introspect._render import Report, Table, format_bytes
from nnx_introspect._step.formats import _spec_json, _spec_str
from nnx_introspect._typing import IntLike, typechecked

_CPU_CAVEAT = (
    "XLA:CPU produced these numbers: its temporaries (buffer assignment, fusion, "
    "layouts) can differ from an accelerator's many times over; argument, output "
    "and alias bytes are exact on any backend. For TPU numbers pass a TPU "
    "`topology` (XLA:TPU compiles here without a TPU)."
)


@dataclasses.dataclass(frozen=True)
class StepMemoryReport(Report):
    """What XLA's compile of one step says each device needs, beside the plan.

    Per-device figures are XLA's own accounting of the compiled SPMD program
    (``compiled.memory_analysis()``): the arguments each device holds (its
    shards of the parameters, optimizer state and batch), the outputs, the
    temporaries of the step (activations kept for the backward pass, gradients,
    the logits' softmax...), and the bytes of outputs that reuse a donated
    argument's buffer (``alias_bytes``). ``peak_bytes`` is
    ``argument + output + temp - alias``.

    Attributes:
        num_devices: Devices in the mesh.
        argument_bytes: Bytes of the step's arguments on one device.
        output_bytes: Bytes of the step's outputs on one device.
        temp_bytes: Bytes of temporaries on one device.
        alias_bytes: Output bytes that reuse donated argument buffers.
        flops: Floating-point operations of one device's program
            (``cost_analysis()["flops"]``; ``nan`` when XLA gives none).
        plan: The :class:`MeshConfigReport` of the same model, mesh and rules
            (with the optimizer's state and the gradients when ``optimizer``
            is given).
        backend: The platform that compiled (``"cpu"``, ``"tpu"``...).
        compiler: The compiler and its version, e.g. ``"XLA:CPU (jaxlib
            0.10.2)"`` or ``"XLA:TPU (libtpu 0.0.52, TPU v5 lite)"``.
        device_kind: The devices' kind (``"cpu"``, ``"TPU v5 lite"``).
        compile_seconds: Wall time of lowering and compiling (in the child
            process when there was one).
        step: What was compiled: ``"forward"``, ``"forward + backward"`` or
            ``"forward + backward + optimizer update"``.
        loss: The loss's name (``"mean"``, ``"lm"``, a callable's name) or
            ``None`` for forward only.
        optimizer: The optimizer's name, or ``None``.
        batch: Each batch leaf as ``"int32[8,128]"``.
        batch_specs: Each batch leaf's partition spec.
        topology: The TPU topology name, or ``None``.
        compiled_in: ``"this process"`` or ``"a child process with N virtual
            CPU devices"``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from flax import nnx
        >>> from nnx_introspect import step_memory_report
        >>> batch = jax.ShapeDtypeStruct((8, 4), jnp.float32)
        >>> report = step_memory_report(
        ...     lambda rngs: nnx.Linear(4, 6, rngs=rngs), "data=8", batch
        ... )
        >>> report.argument_bytes  # kernel + bias replicated, 1 of 8 rows of x
        136
        >>> report.peak_bytes == (
        ...     report.argument_bytes + report.output_bytes + report.temp_bytes
        ...     - report.alias_bytes
        ... )
        True
        >>> report.fits(1024**2), report.backend
        (True, 'cpu')
    """

    SCHEMA = "nnx-introspect/step-memory"
    SCHEMA_VERSION = 1

    num_devices: int
    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    alias_bytes: int
    flops: float
    plan: MeshConfigReport
    backend: str
    compiler: str
    device_kind: str
    compile_seconds: float
    step: str
    loss: str | None
    optimizer: str | None
    batch: tuple[str, ...]
    batch_specs: tuple[PartitionSpec, ...]
    topology: str | None = None
    compiled_in: str = "this process"

    @property
    def peak_bytes(self) -> int:
        """``argument + output + temp - alias`` bytes on one device."""
        return (
            self.argument_bytes + self.output_bytes + self.temp_bytes - self.alias_bytes
        )

    @property
    def total_flops(self) -> float:
        """``flops * num_devices``: the whole step's floating-point operations."""
        return self.flops * self.num_devices

    @typechecked
    def fits(self, max_device_bytes: IntLike | str) -> bool:
        """Whether ``peak_bytes`` is at most ``max_device_bytes`` per device.

        Args:
            max_device_bytes: A byte count (``>= 0``) or a size such as
                ``"16GiB"``.

        Raises:
            ValueError: If ``max_device_bytes`` is negative or not a size.
        """
        return self.peak_bytes <= _budget(max_device_bytes)

    def table(self) -> Table:
        """The report as a :class:`~nnx_introspect.Table`, the verdict first."""
        cats = self.plan.bytes_by_category
        rows: list[tuple[str, str, str]] = [
            ("arguments", format_bytes(self.argument_bytes), _n(self.argument_bytes)),
            ("outputs", format_bytes(self.output_bytes), _n(self.output_bytes)),
            ("temporaries", format_bytes(self.temp_bytes), _n(self.temp_bytes)),
            (
                "aliased (donated)",
                "-" + format_bytes(self.alias_bytes),
                _n(-self.alias_bytes),
            ),
        ]
        totals = (
            ("peak per device", format_bytes(self.peak_bytes), _n(self.peak_bytes)),
        )
        plan_rows = tuple(
            (f"plan: {cat}", format_bytes(cats[cat]), _n(cats[cat]))
            for cat in cats
            if cats[cat]
        )
        notes = [
            f"Compiled in {self.compiled_in}, "
            f"{self.compile_seconds:.1f} s; step: {self.step}; batch: "
            f"{', '.join(self.batch)} split as "
            f"{', '.join(_spec_str(s) for s in self.batch_specs)}."
        ]
        if self.backend == "cpu":
            notes.append(_CPU_CAVEAT)
        if math.isfinite(self.flops):
            notes.append(
                f"{self.flops:.4g} FLOPs per device, {self.total_flops:.4g} in all."
            )
        notes.append(
            "Plan rows: the exact bytes per device of parameters, other state, "
            "optimizer state and gradients under the same mesh and rules; XLA's "
            "arguments hold the parameters, state and batch shards."
        )
        return Table(
            title=self.verdict,
            columns=("", "per device", "bytes"),
            rows=tuple(rows),
            totals=totals + plan_rows,
            notes=tuple(notes),
        )

    @property
    def verdict(self) -> str:
        """One line: the peak per device, the mesh and the compiler."""
        return (
            f"Peak {format_bytes(self.peak_bytes)} per device for one step on "
            f"{self.num_devices} devices ({_mesh_str(self.plan)}; "
            f"{self.device_kind}), by {self.compiler}"
        )

    def json_data(self) -> dict[str, Any]:
        """Exact figures for JSON output."""
        return {
            "num_devices": self.num_devices,
            "mesh": dict(zip(self.plan.axis_names, self.plan.axis_sizes, strict=True)),
            "peak_bytes": self.peak_bytes,
            "argument_bytes": self.argument_bytes,
            "output_bytes": self.output_bytes,
            "temp_bytes": self.temp_bytes,
            "alias_bytes": self.alias_bytes,
            "flops": self.flops if math.isfinite(self.flops) else None,
            "backend": self.backend,
            "compiler": self.compiler,
            "device_kind": self.device_kind,
            "topology": self.topology,
            "compiled_in": self.compiled_in,
            "compile_seconds": self.compile_seconds,
            "step": self.step,
            "loss": self.loss,
            "optimizer": self.optimizer,
            "batch": list(self.batch),
            "batch_specs": [_spec_json(s) for s in self.batch_specs],
            "temporaries_caveat": _CPU_CAVEAT if self.backend == "cpu" else None,
            "plan": {
                "bytes_per_device": self.plan.bytes_per_device,
                "bytes_per_device_by_category": self.plan.bytes_by_category,
                "n_params": self.plan.n_params,
                "ok": self.plan.ok,
            },
        }


def _n(value: int) -> str:
    return f"{value:,}"


def _mesh_str(plan: MeshConfigReport) -> str:
    return ", ".join(
        f"{n}={s}" for n, s in zip(plan.axis_names, plan.axis_sizes, strict=True)
    )


def _budget(value: Any) -> int:
    return parse_bytes(value)

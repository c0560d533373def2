"""The step report's grouped records: kinds, not prose; collectives once; the roofline.

The report holds :class:`StepMemory`, :class:`StepBudget`, :class:`StepProgram`
and :class:`StepCompilation`; the flat attributes of schema v4 read through to
them, and the words they show are derived from kinds that must give back the
words the budget and the compile gave.
"""

import dataclasses
import json

import jax
import jax.numpy as jnp
import pytest
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from nnx_introspect import step_memory_report
from nnx_introspect._accelerators.budget import step_budget
from nnx_introspect._step.step_records import (
    StepBudget,
    StepMemory,
    StepProgram,
    collectives_from_json,
    compiled_in_kind,
    compiled_in_words,
)
from nnx_introspect._xla.collectives import compiled_hlo_text, read_collectives

X = jax.ShapeDtypeStruct((8, 4), jnp.float32)


def linear(rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(4, 6, rngs=rngs)


@pytest.mark.parametrize(
    ("max_device_bytes", "topology", "environ", "basis"),
    [
        (2**30, None, {}, "given"),
        (2**30, "h100-8", {}, "given"),
        (None, "v5e-8", {}, "tpu usable hbm"),
        (None, "v5p-16", {}, "tpu usable hbm"),
        (None, "h100-8", {}, "gpu allocator pool"),
        (None, "h100-8", {"XLA_CLIENT_MEM_FRACTION": ".9"}, "gpu allocator pool"),
        (
            None,
            "a100-8",
            {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5"},
            "gpu allocator pool",
        ),
        (None, None, {}, None),
    ],
)
def test_budget_words_are_the_budgets_own(
    max_device_bytes: int | None,
    topology: str | None,
    environ: dict[str, str],
    basis: str | None,
) -> None:
    """The words derived from the kind are, byte for byte, what step_budget says."""
    budget = step_budget(max_device_bytes, topology, environ)
    record = StepBudget.from_budget(budget, topology)
    assert record.basis == basis
    assert record.basis_words == budget.basis
    assert record.max_device_bytes == budget.bytes
    assert record.needed_fraction(2**40) == budget.needed_fraction(2**40)


@pytest.mark.parametrize(
    ("words", "devices", "topology", "kind"),
    [
        ("this process", 8, None, "this process"),
        ("this process", 8, "v5e-8", "this process"),
        ("a child process with 16 virtual CPU devices", 16, None, "virtual CPU child"),
        ("a child process (h100-8)", 8, "h100-8", "target child"),
    ],
)
def test_compiled_in_is_a_kind_with_its_words(
    words: str, devices: int, topology: str | None, kind: str
) -> None:
    found = compiled_in_kind(words, devices, topology)
    assert found == kind
    assert compiled_in_words(found, devices, topology) == words
    with pytest.raises(AssertionError, match="unknown place of compile"):
        compiled_in_kind("a child process somewhere", devices, topology)


def test_peak_is_the_larger_complete_figure() -> None:
    memory = StepMemory(100, 40, 60, 40, xla_peak_bytes=190)
    assert memory.held_bytes == 160 and memory.peak_bytes == 190
    assert memory.peak_basis.startswith("XLA's peak_memory_in_bytes, above")
    cpu = dataclasses.replace(memory, xla_peak_complete=False)
    assert cpu.peak_bytes == 160
    assert cpu.peak_basis == "arguments + outputs + temporaries - aliased"
    assert not memory.refused
    assert StepMemory(1, 0, 2, 0, compiler_message="RESOURCE_EXHAUSTED").refused


def test_collectives_are_read_once_and_their_json_round_trips() -> None:
    """The typed collectives give back their JSON and the per-axis wire figures."""
    mesh = Mesh(jax.devices()[:8], ("data",))

    def step(w: jax.Array) -> jax.Array:
        return jnp.sum(w * 2.0)  # a sharded sum: an all-reduce over "data"

    w = jax.ShapeDtypeStruct(
        (64, 16), jnp.float32, sharding=NamedSharding(mesh, P("data"))
    )
    compiled = jax.jit(step).lower(w).compile()
    found = read_collectives(compiled_hlo_text(compiled), (("data", 8),))
    assert found.rows, "expected at least one collective"
    data = json.loads(json.dumps(found.json_data()))
    typed = collectives_from_json(data)
    assert typed is not None
    assert typed.json_data() == data
    program = StepProgram(1.0, collectives=typed)
    assert program.collective_wire_bytes == tuple(
        (axes, total.nbytes, round(total.wire_bytes))
        for axes, total in found.by_axis().items()
    )
    assert collectives_from_json(None) is None
    assert StepProgram(1.0).collective_wire_bytes is None


def test_report_is_grouped_and_reads_flat() -> None:
    report = step_memory_report(linear, "data=8", X, max_device_bytes="1MiB")
    assert report.temp_bytes == report.memory.temp_bytes
    assert report.peak_bytes == report.memory.peak_bytes
    assert report.max_device_bytes == report.budget.max_device_bytes == 2**20
    assert report.budget.basis == "given" and report.budget_basis == "the budget given"
    assert report.flops == report.program.flops
    assert report.compiled_in == "this process"
    assert report.compilation.compiled_in == "this process"
    assert report.backend == report.compilation.backend == "cpu"
    assert report.collectives_data == (
        None
        if report.program.collectives is None
        else report.program.collectives.json_data()
    )
    assert report.roofline is None  # no topology
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.memory.temp_bytes = 0  # type: ignore[misc]
    with pytest.raises(AttributeError):
        report.temp_bytes = 0  # type: ignore[assignment]
    # the fields other code replaces stay fields
    warned = dataclasses.replace(report, warnings=("a warning",))
    assert warned.warnings == ("a warning",) and "Warning: a warning" in str(warned)
    assert dataclasses.replace(report, breakdown=None) == report
    # the verdict and the peak lead the repr (issue 28.14), before the cut
    assert repr(report).startswith(
        f"StepMemoryReport(ok={report.ok!r}, peak_bytes={report.peak_bytes}, "
        f"max_device_bytes={report.max_device_bytes!r}, out_of_memory=False, "
        "num_devices=8, argument_bytes="
    )
    assert repr(report).count("peak_bytes=") == 1


def test_roofline_is_computed_once_with_the_report() -> None:
    report = step_memory_report(  # a small Llama: the roofline's plumbing, not its size
        "tests.llama_tiny_layers:llama_small_sharded",
        "fsdp=2,tp=4",
        jax.ShapeDtypeStruct((8, 64), jnp.int32),
        loss="lm",
        optimizer="adamw",
        topology="v5e-8",
    )
    assert "roofline" in {f.name for f in dataclasses.fields(report)}
    assert report.roofline is not None and report.roofline is report.roofline
    assert report.roofline.topology == "v5e-8"
    assert report.roofline.model_flops == 6 * report.plan.n_params * 8 * 64
    data = json.loads(report.to_json())
    assert data["roofline"] == json.loads(json.dumps(report.roofline.json_data()))
    assert data["budget_basis"] == report.budget_basis
    assert report.budget.basis == "tpu usable hbm" and report.budget.chip == "v5e"
    # a new report is estimated anew: the same inputs give the same estimate
    again = dataclasses.replace(report, warnings=())
    assert again.roofline == report.roofline and again.roofline is not report.roofline
    with pytest.raises(ValueError, match="init=False"):
        dataclasses.replace(report, roofline=None)

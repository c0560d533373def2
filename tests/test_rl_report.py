"""rl_memory_report: one GRPO step's programs, each its own report's, added up."""

import dataclasses
import json
from typing import Any

import jax
import jax.numpy as jnp
import pytest

from nnx_introspect import (
    ArgumentError,
    RLMemoryReport,
    rl_memory_report,
    serve_memory_report,
    step_memory_report,
)
from nnx_introspect._rl import programs as rl_programs
from nnx_introspect._rl.loss import grpo_loss
from nnx_introspect._step import (
    LOGPROBS,
    TRAIN_OPTIMIZER_DONATED,
    StepSpec,
    measure_step,
)
from nnx_introspect.examples import LlamaConfig, llama
from tests.cli_helpers import run
from tests.llama_tiny_layers import llama_small_sharded

# programs asked for again (a report of a search's answer, a command line's
# of an API call's): the module's cache compiles each once
pytestmark = pytest.mark.usefixtures("one_compile_per_program")

CFG = LlamaConfig(vocab=64, d_model=32, n_layers=2, n_heads=2, d_ff=64)
SMALL = llama(CFG)


def small(rngs: Any) -> Any:
    """The small Llama by name, for the command line."""
    return SMALL(rngs)


B, G, P, C = 2, 2, 8, 8
S = B * G


@pytest.fixture(scope="module")
def report() -> RLMemoryReport:
    return rl_memory_report(
        SMALL,
        "data=2",
        batch=B,
        generations=G,
        prompt=P,
        completion=C,
        max_device_bytes="64MiB",
        cache=False,
    )


def test_each_phase_is_its_programs_own_report(report: RLMemoryReport) -> None:
    """Each program equals the one its own report compiles, by hand here."""
    # the rollout in the model's own dtypes (tunix's): float32 weights and cache
    rollout = serve_memory_report(
        SMALL,
        "data=2",
        sequences=S,
        context=P + C,
        prompt=P,
        weights=None,
        kv_cache="float32",
        cache=False,
    )
    phases = {p.name: p for p in report.phases}
    assert phases["prefill"].program_peak_bytes == rollout.prefill.peak_bytes
    assert phases["decode"].program_peak_bytes == rollout.decode.peak_bytes
    ids = jax.ShapeDtypeStruct((S, P + C), jnp.int32)
    ref = measure_step(
        StepSpec(SMALL, "data=2", ids, loss=None), cache=False, program=LOGPROBS
    )
    assert phases["reference"].program_peak_bytes == ref.peak_bytes
    # the reference's output: a float32 log-probability per next token
    assert ref.output_bytes == S * (P + C - 1) * 4 // 2
    f32 = jnp.float32
    batch = (
        jax.ShapeDtypeStruct((S, P), jnp.int32),
        jax.ShapeDtypeStruct((S, C), jnp.int32),
        jax.ShapeDtypeStruct((S, C), f32),
        jax.ShapeDtypeStruct((S,), f32),
        jax.ShapeDtypeStruct((S, C), f32),
        jax.ShapeDtypeStruct((S, C), f32),
    )
    # the step donating only its optimizer's state (tunix's trainer)
    spec = StepSpec(SMALL, "data=2", batch, loss=grpo_loss, optimizer="adamw")
    train = measure_step(spec, cache=False, program=TRAIN_OPTIMIZER_DONATED)
    assert phases["train"].program_peak_bytes == train.peak_bytes
    everything = step_memory_report(
        SMALL, "data=2", batch, loss=grpo_loss, optimizer="adamw", cache=False
    )
    assert (
        train.alias_bytes
        == everything.alias_bytes - everything.plan.bytes_by_category["params"]
    )


def test_the_peak_is_the_largest_phases_resident_and_transient(
    report: RLMemoryReport,
) -> None:
    roles = dict(report.roles)
    train = report.programs["train"].plan.bytes_by_category
    assert roles["actor parameters"] == train["params"]
    assert roles["actor optimizer state"] == train["optimizer state"]
    assert roles["reference parameters"] == train["params"]  # a copy of the actor
    # colocated, the rollout decodes on the actor's own parameters: no copy
    assert "rollout weights" not in roles
    phases = {p.name: p for p in report.phases}
    decode = phases["decode"]
    assert decode.resident_bytes == (
        roles["actor optimizer state"] + roles["reference parameters"]
    )
    assert report.programs["rollout"].decode.weights_bytes == train["params"]
    assert phases["train"].resident_bytes == roles["reference parameters"]
    assert report.peak_bytes == max(
        p.program_peak_bytes + p.resident_bytes for p in report.phases
    )
    assert report.fits() is True and report.verdict.startswith("fits")
    data = json.loads(report.to_json())
    assert data["peak_phase"] == report.peak_phase.name
    assert data["peak_bytes"] == report.peak_bytes


def test_without_a_reference_its_parameters_are_not_resident() -> None:
    alone = rl_memory_report(
        SMALL,
        "data=2",
        batch=B,
        generations=G,
        prompt=P,
        completion=C,
        reference=False,
        max_device_bytes="64MiB",
    )
    assert [p.name for p in alone.phases] == ["prefill", "decode", "train"]
    assert "reference parameters" not in dict(alone.roles)


def test_a_budget_below_the_peak_does_not_fit(report: RLMemoryReport) -> None:
    budget = dataclasses.replace(report.budget, bytes=report.peak_bytes - 1)
    tight = dataclasses.replace(report, budget=budget)
    assert tight.fits() is False and not tight.ok
    assert tight.verdict.startswith("does NOT fit")


@pytest.mark.parametrize(
    ("argument", "value"),
    [("generations", 0), ("completion", 0), ("batch", -1), ("prompt", 1.5)],
)
def test_bad_sizes_are_refused_before_any_compile(
    argument: str, value: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def compiled(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a program was compiled for a refused size")

    monkeypatch.setattr(rl_programs, "measure_serve", compiled)
    monkeypatch.setattr(rl_programs, "measure_step", compiled)
    sizes: dict[str, Any] = {"batch": B, "generations": G, "prompt": P, "completion": C}
    with pytest.raises(ArgumentError) as error:
        rl_memory_report(SMALL, "data=2", **(sizes | {argument: value}))
    assert error.value.argument == argument


@pytest.mark.parametrize("argument", ["batch", "generations", "prompt", "completion"])
def test_a_float_size_is_refused_even_when_whole(
    argument: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def compiled(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a program was compiled for a refused size")

    monkeypatch.setattr(rl_programs, "measure_serve", compiled)
    monkeypatch.setattr(rl_programs, "measure_step", compiled)
    sizes: dict[str, Any] = {"batch": B, "generations": G, "prompt": P, "completion": C}
    with pytest.raises(
        ArgumentError,
        match=rf"^`{argument}` must be an integer \(a count\), got the float "
        r"2\.0\. Pass 2\.$",
    ) as error:
        rl_memory_report(SMALL, "data=2", **(sizes | {argument: 2.0}))
    assert error.value.argument == argument


def test_the_rollouts_argument_errors_name_this_functions_arguments() -> None:
    sizes: dict[str, Any] = {"batch": B, "generations": G, "prompt": P, "completion": C}
    with pytest.raises(ArgumentError, match="`rollout_weights`") as error:
        rl_memory_report(SMALL, "data=2", rollout_weights="float16x", **sizes)
    assert error.value.argument == "rollout_weights"
    assert "weights=" not in str(error.value).replace("rollout_weights=", "")


def test_a_mesh_leaving_out_an_axis_the_actor_names_gets_it_at_size_1() -> None:
    # llama_tiny_sharded's annotations (on 2 layers of width 32) name tp and
    # fsdp; the mesh gives tp only.
    done = rl_memory_report(
        llama_small_sharded,
        "tp=2",
        batch=1,
        generations=2,
        prompt=4,
        completion=4,
        reference=False,
        max_device_bytes="1GiB",
    )
    assert dict(done.mesh_axes) == {"tp": 2, "fsdp": 1}
    assert any("leaves out fsdp" in note for note in done.notes)
    assert any("leaves out fsdp" in n for n in json.loads(done.to_json())["notes"])
    train = done.programs["train"]
    assert (train.plan.axis_names, train.plan.axis_sizes) == (("tp", "fsdp"), (2, 1))


def test_cli(capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "rl",
        "tests.test_rl_report:small",
        "--mesh",
        "data=2",
        "--batch",
        "1",
        "--generations",
        "2",
        "--prompt",
        "8",
        "--completion",
        "8",
        "--max-device-bytes",
        "1KiB",
        "--format",
        "json",
    ]
    code, out, err = run(args, capsys)
    assert code == 1 and json.loads(out)["fits"] is False
    assert err.startswith("nnx-introspect: does NOT fit")
    code, _, err = run([*args[:-2], "--generations", "0"], capsys)
    assert code == 2 and "argument --generations:" in err

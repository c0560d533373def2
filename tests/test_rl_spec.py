"""RLSpec: an RL step's request checked once; measure_rl measures it."""

import dataclasses
import json
from types import SimpleNamespace
from typing import Any

import pytest

from nnx_introspect import (
    ArgumentError,
    RLSpec,
    measure_rl,
    rl_max_batch,
    rl_memory_report,
)
from nnx_introspect._accelerators.budget import Budget
from nnx_introspect._rl import programs as rl_programs
from nnx_introspect._rl import size_search as rl_search
from nnx_introspect._targets import build_target
from nnx_introspect.examples import LlamaConfig, llama, llama_critic

CFG = LlamaConfig(vocab=64, d_model=32, n_layers=1, n_heads=2, d_ff=64)
SMALL = llama(CFG)
SIZES: dict[str, Any] = {"batch": 2, "generations": 2, "prompt": 8, "completion": 8}

# measure_rl and rl_memory_report ask for the same programs: compiled once
pytestmark = pytest.mark.usefixtures("one_compile_per_program")


def small(rngs: Any) -> Any:
    """The small Llama by name (a string target is built by its name)."""
    return SMALL(rngs)


@pytest.mark.parametrize(
    ("changes", "argument", "message"),
    [
        ({"batch": 0}, "batch", r"^`batch` must be"),
        ({"prompt": 1.5}, "prompt", r"^`prompt` must be an integer"),
        ({"reference": "yes"}, "reference", r"^`reference` must be True or False"),
        ({"offload": 1}, "offload", r"^`offload` must be True or False, got 1\.$"),
        ({"donate": "params"}, "donate", r"^`donate` must be one of 'optimizer', "),
        ({"optimizer": 3}, "optimizer", r"^`optimizer` must be a name such as"),
        ({"topology": 8}, "topology", r"^`topology` must be a name such as"),
        ({"measure": 0}, "measure", r"^`measure` must be a positive integer"),
        (
            {"measure": 2, "role_meshes": {"rollout": "data=2"}},
            "measure",
            r"^`measure` runs a colocated step",
        ),
        (
            {"role_meshes": {"reward": "tp=2"}},
            "role_meshes",
            r"names the role 'reward'",
        ),
        (
            {"batch": 3, "generations": 1},
            "batch",
            r"^`batch` 3 x `generations` 1 = 3 sequences do not split over the 2 "
            r"data-parallel devices of the mesh data=2 .* multiple of 2\.$",
        ),
        (
            {"critic": llama_critic(CFG)},
            "generations",
            r"^`generations` must be 1 with a `critic`, got 2",
        ),
        ({"critic": 7, "generations": 1}, "critic", r"`critic`"),
        ({"lora": 99}, "lora", r"^`lora` rank 99 is wider than the nnx\.Linear"),
        ({"lora": "all"}, "lora", r"^`lora` must be a rank"),
    ],
)
def test_a_bad_request_is_refused_where_it_is_built_naming_its_argument(
    changes: dict[str, Any], argument: str, message: str
) -> None:
    with pytest.raises(ArgumentError, match=message) as error:
        RLSpec(SMALL, "data=2", **(SIZES | changes))
    assert error.value.argument == argument
    # the public face refuses it the same way, before anything compiles
    with pytest.raises(ArgumentError, match=message) as again:
        rl_memory_report(SMALL, "data=2", **(SIZES | changes))
    assert again.value.argument == argument


def test_the_checks_run_in_the_functions_order() -> None:
    # a bad size is found before a bad flag, a bad flag before a bad mesh
    with pytest.raises(ArgumentError) as error:
        RLSpec(SMALL, "nope", **(SIZES | {"batch": 0, "offload": "x"}))
    assert error.value.argument == "batch"
    with pytest.raises(ArgumentError) as error:
        RLSpec(SMALL, "nope", **(SIZES | {"offload": "x"}))
    assert error.value.argument == "offload"
    with pytest.raises(ArgumentError) as error:
        RLSpec(SMALL, "nope", **SIZES)
    assert error.value.argument == "mesh"


def test_a_spec_keeps_its_values_normalised_and_varies_with_replace() -> None:
    spec = RLSpec(SMALL, "data=2", **(SIZES | {"measure": True, "lora": 4}))
    assert (spec.batch, spec.sequences, spec.measure, spec.lora) == (2, 4, 5, 4)
    assert spec.layout.colocated and spec.own_kv_cache == "float32"
    # the LoRA rank leaves no module holding weights unadapted in this model
    # but its embedding (nnx.Embed, left alone) and its norms (1-D)
    assert spec.chosen.unadapted == ()
    bigger = dataclasses.replace(spec, batch=4)
    assert bigger.sequences == 8 and bigger.model is spec.model  # built once
    assert bigger == dataclasses.replace(bigger)  # its fields are its request


def _figures(report: Any) -> dict[str, Any]:
    """Every figure of a report but how long its compiles took and where from."""
    data: dict[str, Any] = json.loads(report.to_json())
    for phase in data["phases"]:
        for key in ("compile_seconds", "cached", "compiled_in"):
            phase.pop(key, None)  # absent where not compiled from the cache
    del data["compile_seconds"]
    return data


def test_measure_rl_of_a_spec_is_the_report_of_the_same_arguments() -> None:
    budget = {"max_device_bytes": "64MiB"}
    spec = RLSpec(SMALL, "data=2", **SIZES, **budget)
    measured = measure_rl(spec)
    report = rl_memory_report(SMALL, "data=2", **SIZES, **budget)
    assert _figures(measured) == _figures(report)
    assert [p.name for p in measured.phases] == [
        "prefill",
        "decode",
        "reference",
        "train",
    ]
    # the step's peak is its largest phase's, against the budget given
    assert measured.peak_bytes == max(p.peak_bytes for p in measured.phases)
    assert measured.budget.bytes == 64 * 2**20


class _StopError(Exception):
    """Raised where the first program would compile."""


def test_a_named_actor_is_built_once_for_the_checks_and_the_programs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[str] = []

    def counted(name: str) -> Any:
        built.append(name)
        return build_target(name)

    def first_compile(*args: Any, **kwargs: Any) -> Any:
        raise _StopError

    monkeypatch.setattr("nnx_introspect._step.inputs.build_target", counted)
    monkeypatch.setattr(rl_programs, "measure_serve", first_compile)
    spec = RLSpec("tests.test_rl_spec:small", "data=2", **SIZES)
    with pytest.raises(_StopError):  # the rollout's request planned on the same model
        measure_rl(spec)
    assert built == ["tests.test_rl_spec:small"]


def test_the_search_varies_one_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[RLSpec] = []

    def measured(spec: RLSpec) -> Any:  # a stand-in step: 3 prompts fit, 4 do not
        seen.append(spec)
        peak = 100 * spec.batch
        train = SimpleNamespace(
            memory=SimpleNamespace(temp_bytes=1),
            compilation=SimpleNamespace(cached=None),
        )
        return SimpleNamespace(
            target="small",
            mesh_axes=(("data", 2),),
            topology=None,
            prompt=8,
            completion=8,
            budget=Budget(350, "the budget given"),
            peak_bytes=peak,
            peak_phase=SimpleNamespace(name="train"),
            fits=lambda: peak <= 350,
            programs={"train": train},
            breakdowns={},
        )

    monkeypatch.setattr(rl_search, "measure_rl", measured)
    sizes = {k: v for k, v in SIZES.items() if k != "batch"}
    found = rl_max_batch(
        SMALL, "data=2", max_device_bytes=350, probes=0, lora=4, **sizes
    )
    assert found.most == 3 and found.edge_size == 4
    first = seen[0]
    assert [s.batch for s in seen[:4]] == [1, 2, 4, 3]
    for spec in seen:  # the one request, its batch varied: the model built once
        assert spec.model is first.model
        assert dataclasses.replace(spec, batch=1, breakdown=False) == first
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        rl_max_batch(SMALL, "data=2", max_device_bytes=350, colour=1, **sizes)

"""Issue 43, items 3-5: the step's reports of a mixture of experts.

- **MFU basis**: ``6·N_active·tokens``, ``N_active`` counted here by hand from
  the example ``moe_tiny``'s sizes (and tunix's Qwen3 MoE when installed).
- **Breakdown kinds**: ``moe_tiny_sharded``'s step on ``v5e-8`` over an expert
  axis; the rows of kind ``expert dispatch`` and ``expert combine`` are those
  made at the lines of ``_moe.py`` that sort the token copies by expert and
  unsort them (found in the file's text here), never the experts' own
  matmuls; the dropless note gives the experts' input, tokens x top_k rows of
  d_model. The capacity variant's note gives ``ceil(T k / E x 1.25)``.
- **A TPU kernel on a GPU target**: a model calling a Pallas kernel written
  for TPU, compiled for ``h100-8``: one line naming the kernel, its line and
  the way to the model's CPU path.
- **Meshes**: ``"auto"`` enumerates ``fsdp, ep, tp`` for a model with an
  expert axis; a mesh whose ``ep`` does not divide the 8 experts is rejected
  by the planner in one line, with the sizes that do.
"""

import inspect
import math
import os
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from nnx_introspect import (
    StepSpec,
    abstract_model,
    count_params,
    mesh_config_report,
    step_memory_report,
)
from nnx_introspect._step.compile import devices_seen_as
from nnx_introspect._step.step_estimate import active_params, step_roofline
from nnx_introspect._step.step_records import StepMemory, StepProgram
from nnx_introspect._sweep.mesh_comparison.candidates import (
    auto_meshes,
    pick_auto_axes,
    plan_check,
)
from nnx_introspect._typing import ArgumentError
from nnx_introspect._xla.collectives import Collectives
from nnx_introspect._xla.toolchain import cuda_plugin_version, libtpu_version
from nnx_introspect.examples import MOE_TINY, MoeBlock, moe_tiny, moe_tiny_sharded

ROOT = Path(__file__).resolve().parent.parent
MOE_PY = Path(inspect.getsourcefile(MoeBlock) or "").read_text().splitlines()

# moe_tiny by hand: vocab 512, width 64, 2 layers of 4 query and 2 KV heads of
# 16; 8 experts of width 32 (top 2) and a shared expert of width 64.
V, D, L, HD, KV, E, K, F, FS = 512, 64, 2, 16, 2, 8, 2, 32, 64
ATTENTION = D * 4 * HD * 2 + D * KV * HD * 2  # q and o, k and v
LAYER_DENSE = ATTENTION + 2 * D + D * E + 3 * D * FS  # + norms, router, shared
N = 2 * V * D + D + L * (LAYER_DENSE + 3 * E * D * F)
N_ACTIVE = 2 * V * D + D + L * (LAYER_DENSE + 3 * K * D * F)


@pytest.fixture(autouse=True)
def _child_imports_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child process rebuilds this module's models by name."""
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))


# --- the MFU basis ------------------------------------------------------------


def test_moe_tiny_counts_by_hand() -> None:
    model = abstract_model(moe_tiny)
    plan = mesh_config_report(model, "data=1")
    assert (N, N_ACTIVE) == (214_336, 140_608)
    assert count_params(model) == N == plan.n_params
    assert active_params(plan) == N_ACTIVE


def test_the_mfu_counts_six_n_active_tokens() -> None:
    model = abstract_model(moe_tiny)
    plan = mesh_config_report(model, "data=8")
    program = StepProgram(
        1e12, bytes_accessed=1e9, collectives=Collectives("jit_f", (), ())
    )
    est = step_roofline(
        "v5e-8",
        plan,
        StepMemory(1, 0, 0, 0),
        program,
        step="forward + backward + optimizer update",
        loss="lm",
        batch=("int32[8,128]",),
        active_params=active_params(plan),
    )
    assert est is not None
    assert est.model_flops == 6 * N_ACTIVE * 8 * 128
    assert est.mfu_basis == (
        "6·N_active·tokens, N_active = 140,608 of 214,336 parameters, "
        "attention not counted"
    )
    dense = step_roofline(
        "v5e-8",
        plan,
        StepMemory(1, 0, 0, 0),
        program,
        step="forward",
        loss=None,
        batch=("int32[8,128]",),
    )
    assert dense is not None and dense.model_flops == 2 * N * 8 * 128
    assert dense.mfu_basis == "2·N·tokens, attention not counted"


def test_tunix_qwen3_moe_active_parameters() -> None:
    """The issue's tiny tunix Qwen3 MoE: 1,316,352 of 2,496,000, by hand.

    2 layers, d 256, 4 query and 2 KV heads of 64, 8 experts of 128, top-2,
    vocabulary 1,024 (untied embedding and head).
    """
    pytest.importorskip("tunix.models.qwen3.model")
    import dataclasses

    import flax

    from tests.test_all_to_all_tunix import TINY, qwen3  # type: ignore[attr-defined]

    config = dataclasses.replace(TINY, vocab_size=1024)

    def factory(rngs: nnx.Rngs) -> Any:
        before = flax.config.flax_always_shard_variable
        flax.config.update("flax_always_shard_variable", False)
        try:
            return qwen3.Qwen3(config, rngs=rngs)
        finally:
            flax.config.update("flax_always_shard_variable", before)

    model = abstract_model(factory)
    plan = mesh_config_report(model, {"fsdp": 8, "tp": 1})
    v, d, f, e, k, layers = 1024, 256, 128, 8, 2, 2
    attention = d * 4 * 64 * 2 + d * 2 * 64 * 2 + 2 * 64  # q, o, k, v, q/k norms
    layer = attention + 2 * d + d * e + 3 * e * d * f  # + norms, router, experts
    total = 2 * v * d + d + layers * layer
    unused = layers * 3 * d * f * (e - k)
    assert plan.n_params == total == 2_496_000
    assert active_params(plan) == total - unused == 1_316_352


# --- the breakdown's kinds ----------------------------------------------------


def _line(text: str) -> int:
    """The 1-based line of ``_moe.py`` that holds ``text`` (exactly one)."""
    found = [i + 1 for i, line in enumerate(MOE_PY) if text in line]
    assert len(found) == 1, (text, found)
    return found[0]


needs_libtpu = pytest.mark.skipif(
    libtpu_version() is None, reason="libtpu is not installed (the tpu extra)"
)


B_V5E, T_V5E = 8, 128


@pytest.fixture(scope="module")
def on_v5e() -> Any:
    """``moe_tiny_sharded``'s step on ``v5e-8`` over an expert axis, broken down:
    the kinds' test and the active parameters' read the one compile."""
    return step_memory_report(
        "nnx_introspect.examples:moe_tiny_sharded",
        "fsdp=2,ep=4,tp=1",
        jax.ShapeDtypeStruct((B_V5E, T_V5E), jnp.int32),
        loss="lm",
        optimizer="adamw",
        topology="v5e-8",
        breakdown=True,
    )


@needs_libtpu
def test_dispatch_and_combine_kinds_on_v5e_over_an_expert_axis(on_v5e: Any) -> None:
    b, t = B_V5E, T_V5E
    report = on_v5e
    found = report.breakdown
    assert found is not None
    dispatch = _line("rows = x.reshape(b * s, d)[order // k]")
    unsort = _line("unsorted = out[jnp.argsort(order)]")
    weigh = _line('return jnp.einsum("bskd,bsk->bsd", unsorted')
    matmuls = {i + 1 for i, line in enumerate(MOE_PY) if "jax.lax.ragged_dot(" in line}
    lines: dict[str, set[int]] = {}
    for row in found.rows:
        here = (
            row.source.line if row.source and row.source.file.endswith("_moe.py") else 0
        )
        lines.setdefault(row.kind, set()).add(here)
        if here in matmuls:  # the experts' own values are not dispatch or combine
            assert not row.kind.startswith("expert")
    assert lines["expert dispatch"] == {dispatch}
    assert lines["expert combine"] <= {unsort, weigh} and lines["expert combine"]
    # each token's two copies of d_model, as the traced program holds them
    rows = b * t * MOE_TINY.top_k
    assert any(f"f32[{rows},{D}] as traced" in n for n in found.expert_notes)
    count = sum(1 for r in found.rows if r.kind.startswith("expert"))
    assert any(f"at the peak: {count} buffers" in n for n in found.expert_notes)
    assert "expert dispatch" in {g.label for g in found.by_kind()}
    assert "Dropless" in found.to_markdown()


def test_capacity_dispatch_states_its_capacity() -> None:
    b, t = 8, 32
    report = step_memory_report(
        "nnx_introspect.examples:moe_tiny_capacity",
        "data=8",
        jax.ShapeDtypeStruct((b, t), jnp.int32),
        loss="lm",
        optimizer="adamw",
        breakdown=True,
    )
    found = report.breakdown
    assert found is not None
    capacity = math.ceil(t * K / E * 1.25)  # 10 of a sequence's 32 tokens
    assert capacity == MOE_TINY.capacity(t) == 10
    assert any(
        f"at most {capacity} token copies (its input f32[{b},{E},{capacity},{D}]"
        in note
        for note in found.expert_notes
    )
    # the notes travel with the breakdown's JSON (a child process's compile)
    again = type(found).from_json_data(found.json_data())
    assert again.expert_notes == found.expert_notes


# --- a TPU kernel on a GPU target ---------------------------------------------


def _double_kernel(x_ref: Any, o_ref: Any) -> None:
    o_ref[...] = x_ref[...] * 2


def tpu_double(x: jax.Array) -> jax.Array:
    """A Pallas kernel written for TPU (Mosaic compiler parameters)."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    out: jax.Array = pl.pallas_call(
        _double_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltpu.CompilerParams(),
    )(x)
    return out


class _PallasMlp(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs) -> None:
        self.lin = nnx.Linear(16, 16, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return tpu_double(self.lin(x))


def pallas_mlp(rngs: nnx.Rngs) -> _PallasMlp:
    return _PallasMlp(rngs=rngs)


@pytest.mark.skipif(cuda_plugin_version() is None, reason="no CUDA PJRT plugin")
@pytest.mark.parametrize("as_target", [True, False])
def test_a_tpu_kernel_on_a_gpu_target_is_one_line(as_target: bool) -> None:
    with pytest.raises(ArgumentError) as raised:
        step_memory_report(
            "tests.test_moe_reports:pallas_mlp",
            {"data": 8},
            jax.ShapeDtypeStruct((8, 16), jnp.float32),
            loss=None,
            topology="h100-8",
            trace_as_target=as_target,
        )
    error = raised.value
    text = str(error)
    assert error.argument == "topology" and "\n" not in text
    assert text.startswith(
        "`topology` 'h100-8': the model calls the Pallas kernel `tpu_double` of "
    )
    line = next(
        i + 1
        for i, s in enumerate(Path(__file__).read_text().splitlines())
        if "out: jax.Array = pl.pallas_call(" in s
    )
    assert f"test_moe_reports.py:{line}" in text
    assert "a TPU (Mosaic) kernel JAX cannot lower for GPU" in text
    assert "install jaxlib" not in text
    if as_target:
        assert text.endswith("trace_as_target=False (--trace-as-cpu).")
    else:
        assert "traced as on CPU (trace_as_target=False) and still calls it" in text


def test_every_program_traced_as_on_a_target_says_so() -> None:
    """Serving and RL lower in the same block: JAX's error becomes the line."""

    class Gpu:
        platform = "gpu"
        device_kind = "NVIDIA H100 80GB HBM3"

    said = r"^`topology` \(NVIDIA H100 80GB HBM3\): the model calls a Pallas kernel"
    with pytest.raises(ArgumentError, match=said), devices_seen_as([Gpu()] * 8):
        raise ValueError(
            "Cannot lower pallas_call on platform: gpu. To use Pallas on GPU, "
            "install jaxlib GPU."
        )
    with pytest.raises(ValueError, match="another"), devices_seen_as([Gpu()]):
        raise ValueError("another")


# --- meshes -------------------------------------------------------------------


def test_auto_proposes_expert_parallel_layouts() -> None:
    model = abstract_model(moe_tiny_sharded)
    axes = pick_auto_axes(model, None, None, None)
    assert axes == ("fsdp", "ep", "tp")
    meshes = auto_meshes(axes, 8)
    # ordered triples of sizes whose product is 8: C(3 + 2, 2) = 10
    assert len(meshes) == 10 and (("fsdp", 2), ("ep", 4), ("tp", 1)) in meshes
    # a dense model gets none
    from nnx_introspect.examples import llama_tiny_sharded

    assert "ep" not in pick_auto_axes(
        abstract_model(llama_tiny_sharded), None, None, None
    )


def test_a_mesh_that_does_not_divide_the_experts_is_one_line() -> None:
    batch = jax.ShapeDtypeStruct((16, 64), jnp.int32)
    spec = StepSpec(
        "nnx_introspect.examples:moe_tiny_sharded",
        "fsdp=1,ep=16,tp=1",
        batch,
        loss="lm",
        optimizer="adamw",
    )
    reason, state = plan_check(spec, None)
    assert state is None and reason is not None and "\n" not in reason
    # 2 layers x (gate, up, down): 6 leaves of 8 experts, none splits in 16
    assert reason.endswith(
        "its 8 experts (dimension 0) do not split over ep=16. Choose `mesh` "
        "(--mesh) with ep dividing 8: 1, 2, 4 or 8. (and 5 more leaves alike)"
    )
    fine = StepSpec(
        "nnx_introspect.examples:moe_tiny_sharded",
        "fsdp=2,ep=8,tp=1",
        batch,
        loss="lm",
        optimizer="adamw",
    )
    assert plan_check(fine, None)[0] is None


@needs_libtpu
def test_the_step_report_counts_the_active_parameters(on_v5e: Any) -> None:
    """The report's own estimate: 6·N_active·tokens, named as such.

    ``moe_tiny_sharded`` has ``moe_tiny``'s parameters (counted by hand above).
    """
    assert count_params(abstract_model(moe_tiny_sharded)) == N
    b, t = B_V5E, T_V5E
    report = on_v5e
    assert report.active_params == N_ACTIVE
    assert report.roofline is not None
    assert report.roofline.model_flops == 6 * N_ACTIVE * b * t
    assert report.roofline.mfu_basis.startswith(
        "6·N_active·tokens, N_active = 140,608 of 214,336 parameters"
    )

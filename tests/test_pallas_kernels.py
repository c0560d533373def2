"""JAX's Pallas TPU kernels in a compiled program: read whole, and costed.

The programs are ``tests/data/hlo/kernels/*.hlo``, XLA:TPU's text of small
programs calling each kernel JAX ships for TPU that a model would use
(``make_fixtures.py`` there writes them). XLA prints a Pallas kernel's
``kernel_metadata`` attribute as JSON over several lines; the reader must
read such an instruction whole, and any JSON in a configuration. Each
kernel's FLOPs are held against arithmetic over the fixtures' shapes (and,
for splash attention's masks, JAX's own mask arrays), not against the rule.
"""

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nnx_introspect._accelerators.hardware import hardware_for
from nnx_introspect._roofline.timing import program_time
from nnx_introspect._xla.collectives import read_collectives
from nnx_introspect._xla.hlo import Module, instruction, parse_module
from nnx_introspect._xla.hlo.kernels import kernel_cost
from nnx_introspect._xla.hlo.work import (
    program_work,
    ruled_kernel_flops,
    work_from_json,
)
from nnx_introspect._xla.loop_costs import per_trip_costs
from nnx_introspect._xla.toolchain import libtpu_version

FIXTURES = Path(__file__).parent / "data" / "hlo" / "kernels"
HEADS, SEQ, DIM, BLOCK = 2, 256, 128, 128
"""make_fixtures.py's attention shapes; splash's default block is 128."""
QKD = HEADS * SEQ * SEQ * DIM


def _module(name: str) -> Module:
    return parse_module((FIXTURES / f"{name}.hlo").read_text())


def _kernel_flops(name: str) -> dict[str, float | None]:
    module = _module(name)
    out = {}
    for inst in module.instructions.values():
        found = kernel_cost(module, inst)
        if found is not None:
            out[inst.name] = found.flops
    return out


def _by_part(flops: dict[str, float | None]) -> dict[str, float | None]:
    """Each kernel's FLOPs by its part: ``fwd``, ``dq`` or ``dkv``."""
    out = {}
    for name, value in flops.items():
        part = next(p for p in ("dkv", "dq", "fwd", "flash_attention") if p in name)
        out["fwd" if part == "flash_attention" else part] = value
    return out


def _causal_share() -> float:
    """The share of 128 x 128 blocks of JAX's causal mask holding a True."""
    from jax.experimental.pallas.ops.tpu.splash_attention import (
        splash_attention_mask as masks,
    )

    mask = np.asarray(masks.CausalMask((SEQ, SEQ))[:, :])
    n = SEQ // BLOCK
    blocks = mask.reshape(n, BLOCK, n, BLOCK).any(axis=(1, 3))
    return float(blocks.sum()) / blocks.size


def test_every_fixture_reads_whole() -> None:
    for path in sorted(FIXTURES.glob("*.hlo")):
        text = path.read_text()
        module = parse_module(text)
        # every instruction line of the text is one instruction, no more
        starts = len(re.findall(r"^\s*(?:ROOT )?%\S+ = ", text, re.MULTILINE))
        assert len(module.instructions) == starts, path.name
        for inst in module.instructions.values():
            if "kernel_metadata={\n" not in inst.text:
                continue
            value = inst.attributes["frontend_attributes"]
            meta = value[value.index("kernel_metadata=") + 16 : -1]
            found = json.loads(meta)
            if inst.name.startswith("splash_"):  # splash's block sizes
                sizes = json.loads(found["xprof_metadata"])
                assert BLOCK in sizes.values() and "q_layout" in sizes
            if inst.opcode == "custom-call":
                assert inst.attributes["custom_call_target"] == '"tpu_custom_call"'
                assert "metadata" in inst.attributes  # the attributes after it


@pytest.mark.parametrize("heads", ["mha", "gqa"])
def test_splash_causal_counts_the_computed_blocks(heads: str) -> None:
    share = _causal_share()
    assert share == 0.75  # two blocks a side: the one above the diagonal skipped
    fwd = _by_part(_kernel_flops(f"splash_{heads}_causal_fwd"))
    assert fwd == {"fwd": 4 * QKD * share}
    grad = _by_part(_kernel_flops(f"splash_{heads}_causal_grad"))
    assert grad == {
        "fwd": 4 * QKD * share,
        "dq": 6 * QKD * share,
        "dkv": 8 * QKD * share,
    }


def test_a_scanned_kernels_mask_is_read_through_its_loop() -> None:
    # the block mask reaches the kernels through the loops' tuples
    share, layers = _causal_share(), 4  # make_fixtures.LAYERS
    assert _by_part(_kernel_flops("splash_scan_grad")) == {
        "fwd": 4 * QKD * share,
        "dq": 6 * QKD * share,
        "dkv": 8 * QKD * share,
    }
    module = _module("splash_scan_grad")
    work = program_work(module)
    assert work.bounded_kernels == ()
    assert ruled_kernel_flops(module) == layers * 18 * QKD * share


def test_a_scanned_kernels_loops_are_cut_whole_for_xla() -> None:
    """Each loop body, cut from the text with its kernels, reads in XLA's parser."""
    import importlib

    hlo = importlib.import_module("jaxlib._hlo")  # what analysis._loops_of uses
    cut: list[str] = []

    def analyse(module_text: str) -> tuple[float, float]:
        cut.append(module_text)
        hlo.hlo_module_from_text(module_text)  # raises on a broken instruction
        return 1.0, 1.0

    text = (FIXTURES / "splash_scan_grad.hlo").read_text()
    found = per_trip_costs(text, analyse)
    assert found.unknown is None and [t for _, t in found.loops] == [4, 4]
    assert sum("kernel_metadata={\n" in module for module in cut) >= 2


def test_a_mask_xla_does_not_print_counts_every_block_and_says_so() -> None:
    seq = 2048  # 16 x 16 blocks: XLA prints no constant of more than ten
    text = (FIXTURES / "splash_long_causal_fwd.hlo").read_text()
    assert re.search(r"s8\[1,16,16\]\S* constant\(\{\.\.\.\}\)", text)
    work = program_work(parse_module(text))
    assert work.matmul_flops == 4 * HEADS * seq * seq * DIM
    assert work.bounded_kernels == work.kernels == ("splash_mha_fwd_no_residuals.1",)
    time = program_time(work, hardware_for("v5e-8"))
    assert "splash_mha_fwd_no_residuals.1 an upper bound" in time.words
    assert "timed at the rate measured on the chip (calibrated on" in time.words
    assert "uncalibrated for kernels" in program_time(work, hardware_for("v4-8")).words
    assert time.json_data()["bounded_kernels"] == list(work.bounded_kernels)


def test_splash_full_mask_counts_every_block() -> None:
    assert _by_part(_kernel_flops("splash_mha_full_fwd")) == {"fwd": 4 * QKD}
    grad = _by_part(_kernel_flops("splash_mha_full_grad"))
    assert grad == {"fwd": 4 * QKD, "dq": 6 * QKD, "dkv": 8 * QKD}


@pytest.mark.parametrize("mask", ["causal", "full"])
def test_flash_attention(mask: str) -> None:
    found = _by_part(_kernel_flops(f"flash_{mask}_grad"))
    # the forward carries its own estimate (the reference's einsums and softmax)
    assert found["fwd"] == pytest.approx(4 * QKD, rel=0.01)
    assert found["fwd"] != 4 * QKD
    assert (found["dq"], found["dkv"]) == (6 * QKD, 8 * QKD)


def test_megablox_gmm_and_tgmm_use_their_own_estimates() -> None:
    m, k, n = 512, 256, 384  # make_fixtures.gmm_program
    found = _kernel_flops("megablox_gmm_grad")
    assert sorted(found) == [
        "jvp_jit_gmm__.2",
        "transpose_jvp_jit_gmm___.2",
        "transpose_jvp_jit_tgmm___.2",
    ]
    assert set(found.values()) == {2.0 * m * k * n}
    work = program_work(_module("megablox_gmm_grad"))
    assert work.matmul_flops >= 3 * 2.0 * m * k * n
    assert work.uncosted_kernels == ()


def test_ragged_paged_attention_counts_at_most_every_page() -> None:
    tokens, heads, page, per_seq = 16, 4, 16, 8  # make_fixtures.ragged_paged_program
    work = program_work(_module("ragged_paged_attention"))
    assert work.bounded_kernels == ("ragged_paged_attention_kernel.1",)
    found = _kernel_flops("ragged_paged_attention")
    assert found == {
        "ragged_paged_attention_kernel.1": 4.0 * tokens * heads * DIM * page * per_seq
    }


def test_paged_attention_counts_at_most_every_page() -> None:
    batch, heads, page, per_seq = 4, 4, 16, 8  # make_fixtures.paged_program
    found = _kernel_flops("paged_attention")
    assert found == {"paged_attention.1": 4.0 * batch * heads * DIM * page * per_seq}
    work = program_work(_module("paged_attention"))
    assert work.bounded_kernels == ("paged_attention.1",)


def test_program_work_counts_the_kernels() -> None:
    work = program_work(_module("splash_mha_causal_grad"))
    share = _causal_share()
    kernels = (4 + 6 + 8) * QKD * share
    assert work.matmul_flops >= kernels
    assert work.matmul_flops - kernels < 0.01 * kernels  # the rest: no matmul
    assert len(work.kernels) == 3 and work.uncosted_kernels == ()
    assert work_from_json(json.loads(json.dumps(work.json_data()))) == work


_UNKNOWN = "\n".join(
    [
        "HloModule jit_f",
        "ENTRY %main (a: f32[8,128]) -> f32[8,128] {",
        "  %a = f32[8,128]{1,0} parameter(0)",
        "  ROOT %my_kernel.3 = f32[8,128]{1,0} custom-call(%a),"
        ' custom_call_target="tpu_custom_call", frontend_attributes={kernel_metadata={',
        '"xprof_metadata":"{\\"block\\": 8}"',
        '}}, backend_config={"custom_call_config":{"body":"TUzv"}}',
        "}",
    ]
)


def test_a_kernel_without_estimate_or_rule_is_named() -> None:
    work = program_work(parse_module(_UNKNOWN))
    assert work.uncosted_kernels == ("my_kernel.3",)
    assert work.kernels == () and work.matmul_flops == 0.0
    assert work_from_json(work.json_data()).uncosted_kernels == ("my_kernel.3",)
    words = program_time(work, hardware_for("v5e-8")).words
    assert "Pallas kernel my_kernel.3 is not costed" in words
    assert "FLOPs are left out" in words


def test_xlas_own_mosaic_kernels_are_no_pallas_kernels() -> None:
    # jax.lax.ragged_dot's metadata kernel, as XLA:TPU emits it (a v5e MoE step)
    text = "\n".join(
        [
            "HloModule jit_f",
            "ENTRY %main (a: s32[16]) -> (s32[17], s32[1]) {",
            "  %a = s32[16]{0} parameter(0)",
            "  ROOT %ragged-dot-metadata.5 = (s32[17]{0}, s32[1]{0}) custom-call(%a),"
            ' custom_call_target="tpu_custom_call",'
            ' metadata={op_name="ragged-dot-metadata"},'
            ' backend_config={"custom_call_config":{"body":"TUzv"}}',
            "}",
        ]
    )
    work = program_work(parse_module(text))
    assert work.kernels == work.uncosted_kernels == ()


def test_a_program_without_kernels_has_the_same_time_and_words() -> None:
    work = program_work(parse_module(_UNKNOWN.replace("tpu_custom_call", "Sharding")))
    time = program_time(work, hardware_for("v5e-8"))
    assert "kernel" not in time.words
    assert not any(key.endswith("kernels") for key in time.json_data())
    assert not any("kernel" in key for key in time.json_data()["constants"])


def test_a_program_without_kernels_writes_no_kernel_keys() -> None:
    work = program_work(parse_module(_UNKNOWN.replace("tpu_custom_call", "Sharding")))
    assert set(work.json_data()) == {"columns", "ops", "unknown_trips", "buffers"}


def test_collectives_around_a_sharded_kernel_are_read() -> None:
    text = (FIXTURES / "splash_shard_map_fsdp8.hlo").read_text()
    found = read_collectives(text, (("fsdp", 8),))
    kinds = {row.kind for row in found.rows}
    assert kinds == {"all-gather", "all-reduce"}
    assert all(row.axes == ("fsdp",) for row in found.rows)
    # the three projections' weights, (256, 256) bf16 each, gathered whole
    gathered = [row.nbytes for row in found.rows if row.kind == "all-gather"]
    assert sorted(gathered) == [2 * 128 * 256 * 2] * 3


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(deadline=None, max_examples=200)
@given(_JSON, _JSON)
def test_any_json_in_a_configuration_reads(config: object, meta: object) -> None:
    """A ``backend_config`` of any JSON (strings of JSON in it, escaped) reads."""
    backend = json.dumps({"custom_call_config": {"body": "x", "m": json.dumps(config)}})
    kernel = json.dumps({"xprof_metadata": json.dumps(meta)}, indent=1)
    line = (
        "  %k.1 = f32[8]{0} custom-call(f32[8]{0} %a, %b), "
        'custom_call_target="tpu_custom_call", '
        f"frontend_attributes={{kernel_metadata={kernel}}}, "
        f"backend_config={backend}, "
        'metadata={op_name="jit(f)/pallas_call"}'
    )
    module = parse_module(
        "\n".join(
            [
                "HloModule jit_f",
                "ENTRY %main (a: f32[8], b: f32[8]) -> f32[8] {",
                "  %a = f32[8]{0} parameter(0)",
                "  %b = f32[8]{0} parameter(1)",
                line,
                "  ROOT %n = f32[8]{0} negate(%k.1)",
                "}",
            ]
        )
    )
    found = module.instructions["k.1"]
    assert found == instruction(line, "main")
    assert (found.opcode, found.operands) == ("custom-call", ("a", "b"))
    assert json.loads(found.attributes["backend_config"]) == json.loads(backend)
    said = json.loads(found.attributes["backend_config"])["custom_call_config"]["m"]
    assert json.loads(said) == config
    value = found.attributes["frontend_attributes"]
    assert json.loads(value[len("{kernel_metadata=") : -1]) == json.loads(kernel)
    assert module.instructions["n"].operands == ("k.1",)
    assert math.isfinite(program_work(module).matmul_flops)


# --- end to end: a model whose attention is splash attention under shard_map ---

BATCH, WIDTH = 8, 256


def _two_layers(rngs: Any) -> Any:
    """Two attention layers, each calling splash attention as MaxText does."""
    import jax
    import jax.numpy as jnp
    from flax import nnx
    from jax.experimental.pallas.ops.tpu.splash_attention import (
        splash_attention_kernel as splash,
    )
    from jax.experimental.pallas.ops.tpu.splash_attention import (
        splash_attention_mask as masks,
    )
    from jax.sharding import PartitionSpec as P

    class Attention(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            kw: dict[str, Any] = {"use_bias": False, "rngs": rngs}
            kw |= {"param_dtype": jnp.bfloat16, "dtype": jnp.bfloat16}
            self.qkv = nnx.Linear(WIDTH, 3 * HEADS * DIM, **kw)
            self.out = nnx.Linear(HEADS * DIM, WIDTH, **kw)

        def __call__(self, x: jax.Array) -> jax.Array:
            b, s, _ = x.shape
            qkv = self.qkv(x).reshape(b, s, 3 * HEADS, DIM).transpose(0, 2, 1, 3)
            q, k, v = jnp.split(qkv, 3, axis=1)
            mask = masks.MultiHeadMask([masks.CausalMask((s, s))] * HEADS)
            kernel = splash.make_splash_mha(mask, head_shards=1, q_seq_shards=1)
            attend = jax.shard_map(
                jax.vmap(kernel),
                in_specs=(P("fsdp"),) * 3,
                out_specs=P("fsdp"),
                check_vma=False,
            )
            o = attend(q, k, v).transpose(0, 2, 1, 3).reshape(b, s, HEADS * DIM)
            return x + self.out(o)

    class Model(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.layers = nnx.List([Attention(rngs) for _ in range(2)])

        def __call__(self, x: jax.Array) -> jax.Array:
            for layer in self.layers:
                x = layer(x)
            return x

    return Model(rngs)


def _loss(model: Any, batch: Any) -> Any:
    import jax.numpy as jnp

    (x,) = batch
    return jnp.mean(model(x).astype(jnp.float32) ** 2)


@pytest.mark.skipif(libtpu_version() is None, reason="libtpu is not installed")
def test_a_splash_attention_model_gets_flops_time_and_collectives() -> None:
    import jax
    import jax.numpy as jnp

    from nnx_introspect import step_memory_report

    x = jax.ShapeDtypeStruct((BATCH, SEQ, WIDTH), jnp.bfloat16)
    report = step_memory_report(_two_layers, "fsdp=8", x, loss=_loss, topology="v5e-8")
    text = str(report)
    assert "could not be" not in text and "not costed" not in text
    # per device: one batch row; each layer's kernels 4 + 6 + 8 QKD on 3 of 4
    # blocks; its projections 2 x 256 x 256 x (768 + 256) FLOPs a pass, three
    # passes (forward, input and weight gradients) but no input gradient of the
    # first layer's projection
    kernels = 2 * 18 * QKD * _causal_share()
    projection = 2 * SEQ * WIDTH * 3 * HEADS * DIM
    dense = 2 * 3 * (projection + 2 * SEQ * WIDTH * HEADS * DIM) - projection
    assert report.flops is not None
    assert kernels + dense <= report.flops <= 1.02 * (kernels + dense)
    roofline = report.roofline
    assert roofline is not None and roofline.seconds is not None
    assert roofline.seconds > 0
    assert "6 Pallas kernels" in roofline.label
    assert "kernel programs of a v5e chip at 512-wide blocks; held-out median" in (
        roofline.label
    )
    assert "±" not in roofline.label  # no error bar for a program with kernels
    # the parameters (replicated: no sharding rules) have their gradients
    # all-reduced over fsdp: two layers of 256 x 1024 bfloat16 (and the loss)
    assert report.collective_wire_bytes is not None
    assert report.collectives_data is not None
    ((axes, nbytes, _),) = report.collective_wire_bytes
    params = 2 * WIDTH * 4 * HEADS * DIM * 2
    assert axes == ("fsdp",) and params <= nbytes <= params + 64
    kinds = {row["kind"] for row in report.collectives_data["rows"]}
    assert kinds == {"all-reduce"}


@pytest.mark.skipif(libtpu_version() is None, reason="libtpu is not installed")
def test_a_splash_attention_forward_counts_its_kernels() -> None:
    import jax
    import jax.numpy as jnp

    from nnx_introspect import step_memory_report

    x = jax.ShapeDtypeStruct((BATCH, SEQ, WIDTH), jnp.bfloat16)
    report = step_memory_report(_two_layers, "fsdp=8", x, loss=None, topology="v5e-8")
    # XLA:TPU's analysis counts no FLOP of a kernel without an estimate: here
    # the projections' only, 2 x 256 x 256 x 1024 a layer; the kernels add
    # 4 QKD a layer on 3 of 4 blocks
    kernels = 2 * 4 * QKD * _causal_share()
    dense = 2 * 2 * SEQ * WIDTH * 4 * HEADS * DIM
    assert report.flops is not None
    assert kernels + dense <= report.flops <= 1.02 * (kernels + dense)
    assert report.roofline is not None
    assert "2 Pallas kernels" in report.roofline.label

"""XLA:GPU step reports for named NVIDIA targets (``h100-8``...), no GPU present.

The compile tests need the ``gpu`` extra (the CUDA PJRT plugin and ptxas) and
are skipped without it; the nox tests session installs it. Each compares the
report with a hand-written deviceless XLA:GPU compile of the same step, written
as a user would from JAX's and flax's own APIs, or with hand-counted FLOPs.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from nnx_introspect import step_memory_report
from nnx_introspect._step import StepMemoryReport, parse_topology
from nnx_introspect._xla import analysis, costs, toolchain
from tests.llama_tiny_layers import llama_tiny_2_layers_sharded

_PLUGIN = toolchain.cuda_plugin_version() is not None
needs_plugin = pytest.mark.skipif(
    not _PLUGIN,
    reason='the CUDA PJRT plugin is not installed (pip install "nnx-introspect[gpu]")',
)

# NVIDIA H100 SXM 80GB as XLA's published target spec describes it
# (openxla/xla xla/backends/gpu/target_config/specs/h100_sxm.txtpb), written
# out by hand: the hand-written compiles below do not read the package's table.
H100_CONFIG = """
gpu_device_info {
  threads_per_block_limit: 1024 threads_per_warp: 32
  shared_memory_per_block: 49152 shared_memory_per_core: 233472
  threads_per_core_limit: 2048 core_count: 132 fpus_per_core: 128
  block_dim_limit_x: 2147483647 block_dim_limit_y: 65535 block_dim_limit_z: 65535
  memory_bandwidth: 3352320000000 l2_cache_size: 52428800 clock_rate_ghz: 1.98
  device_memory_size: 84942979072 shared_memory_per_block_optin: 232448
  cuda_compute_capability { major: 9 }
  registers_per_core_limit: 65536 registers_per_block_limit: 65536
  thread_dim_limit_x: 1024 thread_dim_limit_y: 1024 thread_dim_limit_z: 64
}
platform_name: "CUDA"
dnn_version_info { major: 9 minor: 10 }
device_description_str: "NVIDIA H100 80GB HBM3"
"""
H100_BYTES = 84_942_979_072
TOKENS = jax.ShapeDtypeStruct((8, 128), jnp.int32)


def h100_devices(n: int) -> list[Any]:
    from jax.experimental import topologies

    shape = f"1x1x{n}" if n <= 8 else f"1x{n // 8}x8"
    return list(
        topologies.get_topology_desc(
            platform="cuda", target_config=H100_CONFIG, topology=shape
        ).devices
    )


# --- Names (no plugin needed) -------------------------------------------------


def test_gpu_names_follow_the_host_rule() -> None:
    assert parse_topology("h100-1") == ("1x1x1", 1)
    assert parse_topology("h100-4") == ("1x1x4", 4)
    assert parse_topology("h100-8") == ("1x1x8", 8)
    assert parse_topology("a100-16") == ("1x2x8", 16)
    assert parse_topology("h200-256") == ("1x32x8", 256)
    assert parse_topology("B200-2048") == ("1x256x8", 2048)


@pytest.mark.parametrize(
    ("topology", "match"),
    [
        ("h100-3", r"`topology` 'h100-3': h100-N counts GPUs.*got 3"),
        ("h100-12", r"`topology` 'h100-12': h100-N counts GPUs.*got 12"),
        ("h100-0", r"`topology` 'h100-0'.*got 0"),
        ("h300-8", r"`topology` must name a Cloud TPU slice.*'h100', 'h200'"),
        ("h100-" + "9" * 5000, r"`topology` h100-N: the device count N has 5000 dig"),
        ("v5e-" + "4" * 5000, r"`topology` v5e-N: the device count N has 5000 dig"),
    ],
)
def test_bad_gpu_names_are_value_errors_naming_topology(
    topology: str, match: str
) -> None:
    x = jax.ShapeDtypeStruct((8, 3), jnp.float32)
    with pytest.raises(ValueError, match=match):
        step_memory_report(
            "nnx_introspect.examples:two_layer", "data=8", x, topology=topology
        )


def test_mesh_must_match_the_gpus() -> None:
    x = jax.ShapeDtypeStruct((8, 3), jnp.float32)
    with pytest.raises(ValueError, match=r"`topology` 'h100-8' has 8 GPUs but `mesh`"):
        step_memory_report(
            "nnx_introspect.examples:two_layer", "data=4", x, topology="h100-8"
        )


def test_missing_plugin_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(toolchain, "cuda_plugin_version", lambda: None)
    x = jax.ShapeDtypeStruct((8, 3), jnp.float32)
    with pytest.raises(
        ImportError, match=r"`topology='h100-8'`.*nnx-introspect\[gpu\]"
    ):
        step_memory_report(
            "nnx_introspect.examples:two_layer", "data=8", x, topology="h100-8"
        )


def test_rematerialization_warning_is_read_from_the_compiler_log() -> None:
    # XLA's HloRematerialization wording (xla/service/hlo_rematerialization.cc)
    log = (
        "W0101 hlo_rematerialization.cc:3170] Can't reduce memory use below "
        "60.13GiB (64567591812 bytes) by rematerialization; only reduced to "
        "77.27GiB (82970500376 bytes), down from 77.27GiB (82970500376 bytes) "
        "originally\n"
    )
    (statement,) = analysis.remat_statements(log)
    assert statement.quote == log[log.index("Can't") :].strip()
    assert (statement.limit, statement.reduced_to, statement.original) == (
        64567591812,
        82970500376,
        82970500376,
    )


# --- Compiles -------------------------------------------------------------------


@pytest.fixture(scope="module")
def h100_report() -> StepMemoryReport:
    return step_memory_report(
        "tests.llama_tiny_layers:llama_tiny_2_layers_sharded",
        "fsdp=2,tp=4",
        TOKENS,
        loss="lm",
        optimizer="adamw",
        topology="h100-8",
    )


def hand_compiled_llama(mesh: Mesh) -> Any:
    """The AdamW LM step of llama_tiny_sharded (2 of its 8 layers: XLA:GPU compiles
    it twice, here and in the report's child), as a training script writes it."""
    with jax.set_mesh(mesh):
        model = nnx.eval_shape(lambda: llama_tiny_2_layers_sharded(nnx.Rngs(0)))
    graphdef, params = nnx.split(model, nnx.Param)
    specs = nnx.get_partition_spec(params)
    tx = optax.adamw(1e-3)

    def placed(tree: Any, spec_tree: Any) -> Any:
        return jax.tree.map(
            lambda x, s: jax.ShapeDtypeStruct(
                x.shape, x.dtype, sharding=NamedSharding(mesh, s)
            ),
            tree,
            spec_tree,
        )

    pure = nnx.to_pure_dict(params)
    pure_specs = nnx.to_pure_dict(specs)
    params_in = placed(pure, pure_specs)
    opt = jax.eval_shape(tx.init, pure)
    opt_specs = jax.tree.map(lambda _: P(), opt)
    # AdamW's mu and nu mirror the parameters' specs; the counts replicate
    opt_specs = (
        opt[0]._replace(mu=pure_specs, nu=pure_specs, count=P()),
        *opt_specs[1:],
    )
    opt_in = placed(opt, opt_specs)
    toks = jax.ShapeDtypeStruct(
        TOKENS.shape, TOKENS.dtype, sharding=NamedSharding(mesh, P("fsdp"))
    )

    def train(params: Any, opt_state: Any, toks: jax.Array) -> Any:
        def loss_fn(p: Any) -> Any:
            m = nnx.merge(graphdef, nnx.State(p))
            logits = m(toks)[:, :-1].astype(jnp.float32)
            return optax.softmax_cross_entropy_with_integer_labels(
                logits, toks[:, 1:]
            ).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return loss, optax.apply_updates(params, updates), opt_state

    shard = jax.tree.map(lambda s: s.sharding, (params_in, opt_in))
    jitted = jax.jit(
        train,
        out_shardings=(NamedSharding(mesh, P()), *shard),
        donate_argnums=(0, 1),
    )
    with jax.set_mesh(mesh):
        return jitted.lower(params_in, opt_in, toks).compile()


@needs_plugin
def test_h100_8_equals_hand_written_xla_gpu(h100_report: StepMemoryReport) -> None:
    devices = h100_devices(8)
    mesh = Mesh(np.array(devices).reshape(2, 4), ("fsdp", "tp"))
    memory = hand_compiled_llama(mesh).memory_analysis()
    report = h100_report
    assert report.backend == "gpu" and report.device_kind == "NVIDIA H100 80GB HBM3"
    assert report.compiler.startswith("XLA:GPU (jaxlib ")
    assert report.compiled_in == "a child process (h100-8)"
    # the report's step also carries two step counters (nnx.Optimizer's and
    # AdamW's): 4 bytes each beside the hand-written step's one
    assert report.argument_bytes == memory.argument_size_in_bytes + 4
    assert report.temp_bytes == pytest.approx(memory.temp_size_in_bytes, rel=0.05)
    # the budget is the pool JAX's allocator takes: 75% of the device
    assert report.device_memory_bytes == H100_BYTES
    assert report.max_device_bytes == H100_BYTES * 3 // 4
    assert report.allocator_fraction == 0.75
    assert report.fits() and report.ok and not report.out_of_memory
    assert report.verdict.startswith("Fits in ")
    assert report.verdict.endswith(
        "59.33 GiB per device (the 75% of the device's 79.11 GiB that JAX's GPU "
        "allocator takes (JAX's default)): one step on 8 devices "
        "(fsdp=2, tp=4; NVIDIA H100 80GB HBM3), by "
        f"{report.compiler}"
    )
    assert any("without autotuning" in w for w in report.warnings)
    assert report.device_order == "physical (topologies.make_mesh)"
    data = json.loads(report.to_json())
    assert (data["ok"], data["fits"], data["max_device_bytes"]) == (
        True,
        True,
        H100_BYTES * 3 // 4,
    )
    assert (
        data["budget_basis"] == report.budget_basis and data["traced_platform"] == "gpu"
    )


@needs_plugin
def test_dense_lm_flops_are_six_n_tokens(h100_report: StepMemoryReport) -> None:
    """FLOPs of the whole step within 0.5-2x of 6 * N * tokens (N without the
    embedding table, whose lookup is no matmul)."""
    cfg = h100_report.plan
    n = cfg.n_params - 8000 * 256
    tokens = 8 * 128
    assert 0.5 <= h100_report.total_flops / (6 * n * tokens) <= 2.0


def _matmul_report(devices: int, x: jax.ShapeDtypeStruct) -> StepMemoryReport:
    return step_memory_report(
        lambda rngs: nnx.Linear(256, 512, use_bias=False, rngs=rngs),
        {"data": devices},
        x,
        loss=None,
        topology=f"h100-{devices}",
    )


@needs_plugin
def test_single_matmul_flops_are_exact() -> None:
    """One (64, 256) @ (256, 512) matmul split 8 ways: 2*8*256*512 per device.

    The target is a lambda, so this compiles in this process (pytest started
    JAX with JAX_PLATFORMS=cpu, which the CUDA plugin's devices need).
    """
    report = _matmul_report(8, jax.ShapeDtypeStruct((64, 256), jnp.float32))
    assert report.compiled_in == "this process"
    assert report.flops == 2 * 8 * 256 * 512


def _batch_report(rows: int) -> StepMemoryReport:
    return step_memory_report(
        lambda rngs: nnx.Linear(4096, 1, use_bias=False, rngs=rngs),
        {"data": 1},
        jax.ShapeDtypeStruct((rows, 4096), jnp.float32),
        loss=None,
        topology="h100-1",
    )


@needs_plugin
def test_a_peak_above_jaxs_allocator_share_does_not_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A step that fits the H100's 79.11 GiB but not the 75% JAX's GPU
    allocator takes by default does not fit; the verdict names the fraction
    it needs, and with that fraction in the environment it fits."""
    monkeypatch.delenv("XLA_CLIENT_MEM_FRACTION", raising=False)
    monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)
    rows = 3_932_160  # a float32[rows, 4096] batch: exactly 60 GiB
    assert rows * 4096 * 4 == 60 * 2**30
    report = _batch_report(rows)
    memory = report.device_memory_bytes
    assert memory == H100_BYTES  # CUDA's figure for an H100 SXM5 80GB
    assert 0.75 * memory < report.peak_bytes <= memory
    assert not report.fits() and not report.ok and not report.out_of_memory
    # the smallest two-decimal fraction whose pool holds the peak
    needed = next(
        f / 100 for f in range(76, 96) if report.peak_bytes <= memory * f / 100
    )
    assert needed == 0.76 and report.needed_fraction == needed
    assert report.verdict.startswith("Does not fit: needs 60.01 GiB per device, the ")
    assert (
        "the budget is 59.33 GiB (the 75% of the device's 79.11 GiB that JAX's GPU "
        "allocator takes (JAX's default)); it fits with XLA_CLIENT_MEM_FRACTION=0.76"
    ) in report.verdict
    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", ".76")
    raised = _batch_report(rows)
    assert raised.fits() and raised.max_device_bytes == int(memory * 0.76)
    assert "(XLA_PYTHON_CLIENT_MEM_FRACTION=.76)" in raised.verdict


@needs_plugin
def test_no_fraction_above_95_percent_is_advised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("XLA_CLIENT_MEM_FRACTION", raising=False)
    monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)
    rows = 5_000_000  # 81.92e9 B of batch: above 95% of the device, within it
    assert 0.95 * H100_BYTES < rows * 4096 * 4 < H100_BYTES
    report = _batch_report(rows)
    assert 0.95 * H100_BYTES < report.peak_bytes <= H100_BYTES
    assert report.needed_fraction is None and not report.fits()
    assert "no allocator fraction up to 0.95 makes it fit" in report.verdict


@needs_plugin
def test_library_matmul_flops_are_counted() -> None:
    """With cuBLAS instead of Triton the generic cost analysis misses the
    matmul (a custom call); the count adds it back."""
    mesh = Mesh(np.array(h100_devices(1)), ("data",))
    x = jax.ShapeDtypeStruct((64, 256), jnp.float32, sharding=NamedSharding(mesh, P()))
    w = jax.ShapeDtypeStruct((256, 512), jnp.float32, sharding=NamedSharding(mesh, P()))
    lowered = jax.jit(jnp.matmul).lower(x, w)
    compiled = lowered.compile(compiler_options={"xla_gpu_enable_triton_gemm": False})
    executable: Any = compiled.runtime_executable()
    text = executable.hlo_modules()[0].to_string()
    assert "__cublas$" in text  # the library call this test is about
    assert costs.gpu_flops(compiled) == 2 * 64 * 256 * 512


# --- ptxas from the gpu extra, with the system's CUDA toolkit hidden ----------

_HIDDEN_SCRIPT = """
import jax, jax.numpy as jnp
from nnx_introspect import step_memory_report
r = step_memory_report("nnx_introspect.examples:two_layer", "data=2",
                       jax.ShapeDtypeStruct((4, 3), jnp.float32), topology="h100-2")
print("ARGUMENTS", r.argument_bytes, r.backend)
"""


def _system_ptxas() -> list[str]:
    """The toolkit paths a compile could find ptxas in, besides the wheel."""
    found = []
    ptxas = shutil.which("ptxas")
    if ptxas is not None and "site-packages" not in ptxas:
        found.append(os.path.realpath(ptxas))
        found.append(ptxas)
    for root in Path("/usr/local").glob("cuda*"):
        found.append(str(root.resolve()))
    return sorted(set(found))


@needs_plugin
@pytest.mark.skipif(shutil.which("unshare") is None, reason="no `unshare` command")
def test_compiles_with_the_system_cuda_toolkit_hidden(tmp_path: Path) -> None:
    """A user's machine has no CUDA toolkit: the ptxas of the gpu extra's
    ``nvidia-cuda-nvcc-cu12`` wheel must do. A private mount namespace hides
    every system ptxas (``/dev/null`` over files, an empty folder over
    toolkits); the child runs from a plain environment (no JAX_PLATFORMS)."""
    if importlib.util.find_spec("nvidia.cuda_nvcc") is None:
        pytest.skip("nvidia-cuda-nvcc-cu12 (part of the gpu extra) is not installed")
    empty = tmp_path / "empty"
    empty.mkdir()
    mounts = []
    for path in _system_ptxas():
        source = "/dev/null" if os.path.isfile(path) else str(empty)
        mounts.append(f"mount --bind {source} {path}")
    hide = " && ".join(mounts) or "true"
    check = "! ptxas --version >/dev/null 2>&1"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    script = tmp_path / "hidden.py"
    script.write_text(_HIDDEN_SCRIPT)
    command = f"{hide} && {check} && exec {sys.executable} {script}"
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", command],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    if done.returncode != 0 and "Operation not permitted" in done.stderr:
        pytest.skip(f"unshare -m is not permitted here: {done.stderr.strip()[:200]}")
    assert done.returncode == 0, done.stderr[-2000:]
    # (3*4 + 4 + 4*4 + 4) float32 parameters and 2 of the 4 rows of x
    assert f"ARGUMENTS {36 * 4 + 2 * 3 * 4} gpu" in done.stdout, done.stdout

"""A named target's step is traced as on that target.

``tests/platform_models.py`` reproduces tunix's idiom: activations are
constrained only when ``jax.devices()[0].platform != "cpu"`` under ``with
mesh:``. Compiled for ``h100-8`` or ``v5e-4`` in the child process, the model
must see the target's platform and compile its constraints, as on the real
machine; ``trace_as_target=False`` traces it as CPU code. The figures are held
against a hand-written deviceless compile that applies the constraints.
"""

import os
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from nnx_introspect import step_memory_report
from nnx_introspect._step.compile import devices_seen_as
from nnx_introspect._xla import toolchain
from tests.platform_models import HIDDEN, WIDTH, cpu_shy_mlp
from tests.shared_compiles import cache_in

ROOT = Path(__file__).resolve().parent.parent
TARGET = "tests.platform_models:cpu_shy_mlp"
X = jax.ShapeDtypeStruct((64, WIDTH), jnp.float32)
MESH = {"fsdp": 2, "tp": 4}

needs_plugin = pytest.mark.skipif(
    toolchain.cuda_plugin_version() is None,
    reason='the CUDA PJRT plugin is not installed (pip install "nnx-introspect[gpu]")',
)
needs_libtpu = pytest.mark.skipif(
    toolchain.libtpu_version() is None, reason="libtpu is not installed"
)


@pytest.fixture(autouse=True)
def _child_imports_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child process rebuilds ``tests.platform_models`` by name."""
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))


def _report(topology: str, **kwargs: Any) -> Any:
    return step_memory_report(TARGET, MESH, X, topology=topology, **kwargs)


def hand_compiled_grad_step(devices: list[Any], constrain: bool) -> Any:
    """The forward + backward of the model with the mean loss, written by hand:
    the constraints applied (as on a GPU) or not (as on a CPU)."""
    mesh = Mesh(np.array(devices).reshape(2, 4), ("fsdp", "tp"))
    up = jax.ShapeDtypeStruct(
        (WIDTH, HIDDEN), jnp.float32, sharding=NamedSharding(mesh, P("fsdp", "tp"))
    )
    down = jax.ShapeDtypeStruct(
        (HIDDEN, WIDTH), jnp.float32, sharding=NamedSharding(mesh, P("tp", "fsdp"))
    )
    x = jax.ShapeDtypeStruct(X.shape, X.dtype, sharding=NamedSharding(mesh, P("fsdp")))

    def c(a: jax.Array, spec: P) -> jax.Array:
        return jax.lax.with_sharding_constraint(a, spec) if constrain else a

    def loss(params: tuple[jax.Array, jax.Array], x: jax.Array) -> jax.Array:
        h = c(x @ params[0], P("fsdp", "tp"))
        y = c(jax.nn.relu(h) @ params[1], P("fsdp", None))
        return jnp.mean(y.astype(jnp.float32))

    jitted = jax.jit(
        jax.value_and_grad(loss),
        out_shardings=(NamedSharding(mesh, P()), (up.sharding, down.sharding)),
        keep_unused=True,
    )
    with jax.set_mesh(mesh):
        return jitted.lower((up, down), x).compile().memory_analysis()


@pytest.fixture(scope="module")
def on_gpu(module_cache: Path) -> Any:
    """The step for ``h100-8``, its compile kept in this module's own cache: the
    command line's test asks for the same program and reads it back."""
    with cache_in(module_cache):
        return _report("h100-8", loss="mean")


@needs_plugin
def test_gpu_target_traces_the_model_as_on_a_gpu(on_gpu: Any) -> None:
    from tests.test_step_gpu import h100_devices

    assert on_gpu.compilation.cached is None  # compiled here, not read back
    as_cpu = _report("h100-8", loss="mean", trace_as_target=False)
    assert on_gpu.traced_platform == "gpu" and as_cpu.traced_platform == "cpu"
    # two constraints in the forward, two transposed in the backward
    assert on_gpu.sharding_constraints == 4 and as_cpu.sharding_constraints == 0
    for report, constrain in ((on_gpu, True), (as_cpu, False)):
        hand = hand_compiled_grad_step(h100_devices(8), constrain)
        assert report.argument_bytes == hand.argument_size_in_bytes
        assert report.output_bytes == hand.output_size_in_bytes
        assert report.temp_bytes == hand.temp_size_in_bytes
    assert on_gpu.temp_bytes != as_cpu.temp_bytes  # the constraints matter here
    assert "the model saw the platform 'gpu'" in on_gpu.to_markdown()
    # a verdict not traced as on its target says so in its first line
    assert "traced as on 'cpu', not as on its target" in as_cpu.verdict
    assert "traced as on" not in on_gpu.verdict
    assert str(as_cpu).splitlines()[0] == as_cpu.verdict  # the first line, whole


@needs_libtpu
def test_tpu_target_traces_the_model_as_on_a_tpu() -> None:
    report = _report("v5e-8", loss="mean")
    assert report.traced_platform == "tpu" and report.sharding_constraints == 4
    assert (
        _report("v5e-8", loss="mean", trace_as_target=False).sharding_constraints == 0
    )


def test_an_in_process_cpu_compile_sees_the_cpu() -> None:
    report = step_memory_report(cpu_shy_mlp, MESH, X, loss="mean")
    assert report.compiled_in == "this process"
    assert report.traced_platform == "cpu" and report.sharding_constraints == 0
    assert any("no activation sharding constraint" in w for w in report.warnings)


def test_device_lookups_are_restored_after_an_error() -> None:
    class Fake:
        platform = "tpu"

    real = (jax.devices, jax.device_count, jax.default_backend, jax.local_devices)
    with pytest.raises(RuntimeError, match="inside"), devices_seen_as([Fake()] * 4):
        assert jax.devices()[0].platform == "tpu" and jax.local_device_count() == 4
        assert jax.devices("cpu")[0].platform == "cpu"  # an explicit backend
        raise RuntimeError("inside")
    assert (
        jax.devices,
        jax.device_count,
        jax.default_backend,
        jax.local_devices,
    ) == real
    assert jax.default_backend() == "cpu"
    with pytest.raises(ValueError, match="at least one device"), devices_seen_as([]):
        pass


@needs_plugin
def test_cli_traces_as_the_target_unless_told_and_debug_shows_the_log(
    on_gpu: Any, module_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from nnx_introspect.cli import main

    argv = ["step", TARGET, "--mesh", "fsdp=2,tp=4", "--batch", "float32[64,256]"]
    argv += ["--topology", "h100-8", "--format", "json"]
    with cache_in(module_cache):
        assert main(argv) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert (data["traced_platform"], data["sharding_constraints"]) == ("gpu", 4)
    assert err == ""
    # the command line sent the API's request (the mean loss): read back from it
    assert "cached" in data and data["temp_bytes"] == on_gpu.temp_bytes
    # asked anew (the cache off again), traced as CPU code, with the child's log
    assert main([*argv, "--trace-as-cpu", "--debug"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert (data["traced_platform"], data["sharding_constraints"]) == ("cpu", 0)
    # --debug: the child's and the compiler's own lines, kept off stderr otherwise
    assert "cudart_stub.cc" in err

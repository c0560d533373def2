"""``step_memory_report(..., breakdown=True)`` end to end, on every backend and path.

llama_tiny (2 of its 8 layers and a vocabulary of 512: parameters and optimizer
state still live at every compiler's peak, at about half of each compile) with
AdamW on ``fsdp=2 x tp=4`` compiles with XLA:CPU in this process,
and for ``h100-8`` (deviceless XLA:GPU) and ``v5e-8`` (deviceless XLA:TPU) in a
child process. Each breakdown is held against XLA's own figure, read here with
a regular expression from a dump of the same compile (not through the reader
under test), and every argument buffer must map to a state path of the plan or
to the batch. The public path also finds the two-layer MLP's kept activation
with its exact bytes and its source line.
"""

import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh

from nnx_introspect import Breakdown, max_batch, step_memory_report
from nnx_introspect._step import compile as compile_module
from nnx_introspect._step import libtpu_version
from nnx_introspect._step.compile import _lower
from nnx_introspect._step.inputs import Request
from nnx_introspect._xla.analysis import compile_lowered
from nnx_introspect._xla.dump import DumpFormatError
from nnx_introspect._xla.toolchain import cuda_plugin_version
from nnx_introspect.cli import main

ROOT = Path(__file__).resolve().parent.parent
TARGET = "tests.llama_tiny_layers:llama_tiny_2_layers_512"
MESH = "fsdp=2,tp=4"
TOKENS = jax.ShapeDtypeStruct((8, 64), jnp.int32)

needs_plugin = pytest.mark.skipif(
    cuda_plugin_version() is None, reason="the CUDA PJRT plugin is not installed"
)
needs_libtpu = pytest.mark.skipif(
    libtpu_version() is None, reason="libtpu is not installed"
)


@pytest.fixture(autouse=True)
def _child_imports_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child process rebuilds ``tests.platform_models`` by name."""
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))


def _llama(topology: str | None) -> Any:
    return step_memory_report(
        TARGET,
        MESH,
        TOKENS,
        loss="lm",
        optimizer="adamw",
        topology=topology,
        breakdown=True,
    )


@pytest.fixture(
    scope="module",
    params=[
        None,
        pytest.param("h100-8", marks=needs_plugin),
        pytest.param("v5e-8", marks=needs_libtpu),
    ],
    ids=["cpu", "h100-8", "v5e-8"],
)
def llama(request: pytest.FixtureRequest) -> Any:
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    return _llama(request.param)


def _stated_peak(directory: str) -> int:
    """XLA's "Stack trace breakdown for peak usage" of the entry module, by regex."""
    (path,) = [p for p in Path(directory).glob("*jit_train*-live-range.txt")]
    match = re.search(
        r"Stack trace breakdown for peak usage: ([\d ]+) bytes", path.read_text()
    )
    assert match is not None
    return int(match[1].replace(" ", ""))


def _constants_live(directory: str, point: int | None) -> int:
    """Bytes of the constants XLA's live-range list counts at ``point``, by regex."""
    (stem,) = [
        str(p)[: -len("-live-range.txt")]
        for p in Path(directory).glob("*jit_train*-live-range.txt")
    ]
    constants, kind = set(), ""
    for line in Path(stem + "-buffer-assignment.txt").read_text().splitlines():
        if line.startswith("allocation "):
            kind = line
        elif line.startswith(" value: ") and re.search(r", constant:$", kind):
            constants.add(line.split()[2])
    text = Path(stem + "-live-range.txt").read_text()
    ranges = re.findall(r"^    (\S+?)\{\}:(\d+)-(\d+)$", text, re.M)
    live = {name for name, a, b in ranges if int(a) <= (point or 0) <= int(b)}
    sizes = re.findall(r"^    (\S+?)\{\}: (\d+) bytes \(cumulative", text, re.M)
    return sum(int(n) for name, n in sizes if name in constants & live)


@pytest.mark.parametrize("llama", [None], indirect=True, ids=["cpu"])
def test_cpu_peak_is_xlas_own(llama: Any) -> None:
    """The same step compiled here with a dump: XLA's stated peak is the breakdown's.

    Or the breakdown's peak is higher, at another point, and XLA's own list at
    its point is kept beside it.
    """
    from nnx_introspect._step.inputs import as_loss, as_model, as_optimizer

    model = as_model(TARGET)
    tx, _ = as_optimizer("adamw")
    request = Request(
        model=model,
        target_name=TARGET,
        mesh_axes=(("fsdp", 2), ("tp", 4)),
        batch=(TOKENS,),
        batch_specs=llama.batch_specs,
        loss=as_loss("lm", (TOKENS,)),
        loss_name="lm",
        tx=tx,
        optimizer_name="adamw",
        rules=None,
        logical_rules=None,
    )
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("fsdp", "tp"))
    lowered, _, _ = _lower(request, mesh, llama.plan)
    with tempfile.TemporaryDirectory() as directory:
        compile_lowered(lowered, mesh, time.perf_counter(), dump_to=directory)
        stated = _stated_peak(directory)
        constants = _constants_live(directory, llama.breakdown.xla_peak_time)
    breakdown = llama.breakdown
    assert breakdown.xla_peak_bytes == stated
    if breakdown.xla_peak_time == breakdown.peak_time:
        # the constants are in the executable, not in the memory the step
        # holds, so not in the breakdown (issue 24); nothing here is shared
        assert breakdown.live_peak_bytes == stated - constants
    else:
        assert breakdown.live_peak_bytes > stated


def test_rows_add_up_and_arguments_map_to_paths(llama: Any) -> None:
    breakdown: Breakdown = llama.breakdown
    assert breakdown is not None, llama.warnings
    assert sum(row.nbytes for row in breakdown.rows) == breakdown.live_peak_bytes
    planned = {leaf.path for leaf in llama.plan.leaves + llama.plan.optimizer_leaves}
    planned |= {"optimizer/step", "batch[0]"}
    arguments = [row for row in breakdown.rows if row.parameter is not None]
    assert arguments, "no argument is live at the peak"
    for row in arguments:
        assert row.path in planned, row
        assert row.kind in ("parameter", "optimizer state", "batch"), row
    kinds = {row.kind for row in arguments}
    assert {"parameter", "optimizer state"} <= kinds
    # held = arguments + outputs + temp - aliased, from memory_analysis()
    held = (
        llama.argument_bytes + llama.output_bytes + llama.temp_bytes - llama.alias_bytes
    )
    assert breakdown.held_bytes == held
    assert breakdown.gap_bytes == held - breakdown.live_peak_bytes


def test_curve_meets_the_peak(llama: Any) -> None:
    curve = llama.breakdown.curve
    assert curve is not None
    at = curve.times.index(llama.breakdown.peak_time)
    assert curve.live_bytes[at] == llama.breakdown.live_peak_bytes
    assert curve.highest_bytes == max(curve.live_bytes)
    assert curve.highest_bytes >= llama.breakdown.live_peak_bytes
    assert len(curve.times) <= 2000
    assert list(curve.times) == sorted(set(curve.times))


def test_renderers_and_json(llama: Any) -> None:
    text = str(llama)
    assert text.splitlines()[0] == llama.verdict
    assert text.index("Buffers live at XLA's peak") > text.index(llama.verdict)
    page = llama.to_html()
    if llama.max_device_bytes is not None:  # a target's budget, which it fits
        assert llama.fits() and llama.what_to_change == ()  # nothing to change
        assert "What to change" not in text and "What to change" not in page
    else:  # no budget: the facts, right under the verdict on the page
        assert llama.what_to_change and "What to change, from the breakdown:" in text
        verdict = page.index('class="verdict')
        assert verdict < page.index("<h2>What to change</h2>") < page.index("<table")
        assert "`" not in page[page.index('<ul class="advice">') :].split("</ul>")[0]
    markdown = llama.to_markdown()
    assert "Buffers live at XLA's peak" in markdown
    assert page.index('class="verdict') < page.index("What the peak is made of")
    assert "program point (XLA's schedule)" in page and "the peak by kind" in page
    data = json.loads(llama.to_json())
    assert data["version"] == 4
    again = Breakdown.from_json_data(data["breakdown"])
    assert again == llama.breakdown
    assert data["what_to_change"] == list(llama.what_to_change)
    assert data["breakdown"]["live_peak_bytes"] == sum(
        row["bytes"] for row in data["breakdown"]["rows"]
    )


def test_what_to_change_names_replicated_state(llama: Any) -> None:
    """llama_tiny has no sharding metadata: its parameters are replicated over both."""
    facts = llama.what_to_change
    parameter = [f for f in facts if f.startswith("parameter is ")]
    if parameter:
        assert "100% of it replicated over `fsdp`" in parameter[0]
        assert "100% of it replicated over `tp`" in parameter[0]
    assert all(f.endswith(".") for f in facts)


def test_a_breakdown_that_fails_is_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    def drifted(directory: Any, *, backend: str) -> Any:
        raise DumpFormatError("XLA's dump file x-live-range.txt does not hold y")

    monkeypatch.setattr(compile_module, "read_peak", drifted)
    report = step_memory_report(
        "tests.platform_models:two_layer_mlp",
        "data=1",
        jax.ShapeDtypeStruct((8, 512), jnp.float32),
        breakdown=True,
    )
    assert report.breakdown is None
    assert report.what_to_change == ()
    (warning,) = [w for w in report.warnings if w.startswith("No breakdown")]
    assert "does not hold y" in warning
    assert report.argument_bytes > 0  # the report itself is whole


def test_no_dump_is_left_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[str] = []
    real = tempfile.mkdtemp

    def tracked(*args: Any, **kwargs: Any) -> str:
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(tempfile, "mkdtemp", tracked)
    report = step_memory_report(
        "tests.platform_models:two_layer_mlp",
        "data=1",
        jax.ShapeDtypeStruct((8, 512), jnp.float32),
        breakdown=True,
    )
    assert report.breakdown is not None
    assert made and not any(os.path.exists(d) for d in made)


@needs_plugin
def test_mlp_kept_activation_has_its_bytes_and_line() -> None:
    """On one H100 the hidden layer's f32[1024,4096] is kept for the backward pass."""
    report = step_memory_report(
        "tests.platform_models:two_layer_mlp",
        "data=1",
        jax.ShapeDtypeStruct((1024, 512), jnp.float32),
        topology="h100-1",
        breakdown=True,
    )
    assert report.breakdown is not None
    kept = [
        row
        for row in report.breakdown.rows
        if row.kind == "activation kept for backward"
    ]
    lines = (ROOT / "tests" / "platform_models.py").read_text().splitlines()
    call = 1 + next(
        i for i, line in enumerate(lines) if "self.l2(jax.nn.relu(self.l1(x)))" in line
    )
    assert [(r.nbytes, r.type_str) for r in kept] == [
        (1024 * 4096 * 4, "f32[1024,4096]")
    ]
    # the model's own line, not flax's Linear.__call__ inside it
    assert kept[0].source is not None
    assert kept[0].source.file.endswith("platform_models.py")
    assert kept[0].source.line == call
    assert kept[0].source.function == "TwoLayerMLP.__call__"
    # outputs are named by the step's output groups and the state's paths
    outputs = [r for r in report.breakdown.rows if r.kind == "output"]
    assert outputs
    for row in outputs:
        group = row.label.split(" (")[0]
        assert group in ("loss", "output") or group.startswith("gradients l"), row
        assert not group.endswith("/value")


def test_max_batch_keeps_both_breakdowns() -> None:
    search = max_batch(
        "tests.platform_models:two_layer_mlp",
        "data=1",
        jax.ShapeDtypeStruct((64, 512), jnp.float32),
        max_device_bytes="40MiB",
        breakdown=True,
    )
    assert search.report is not None and search.failing_report is not None
    assert search.report.breakdown is not None
    assert search.failing_report.breakdown is not None
    assert search.failing_report.peak_bytes > 40 * 2**20 >= search.report.peak_bytes
    text = str(search.with_top(3))
    assert f"The peak at batch {search.best} (fits)" in text
    assert "(does not fit)" in text
    data = json.loads(search.to_json())
    assert data["version"] == 3
    assert data["failing_report"]["breakdown"] is not None


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


CLI = [
    "step",
    "tests.platform_models:two_layer_mlp",
    "--mesh",
    "data=1",
    "--batch",
    "float32[8,512]",
]


@pytest.mark.parametrize("top", ["0", "-1", "2.5", "many"])
def test_cli_bad_top(top: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli([*CLI, "--breakdown", "--top", top], capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "--top" in err and repr(top) in err and "positive integer" in err


def test_cli_top_needs_breakdown(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli([*CLI, "--top", "3"], capsys)
    assert code == 2 and out == ""
    assert "argument --top" in err and "--breakdown" in err


def test_cli_breakdown_top(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli([*CLI, "--breakdown", "--top", "2"], capsys)
    assert code == 0, err
    assert err == ""
    section = out[out.index("Buffers live at XLA's peak") :]
    assert "smaller buffers not shown" in section
    code, out, _ = _cli([*CLI, "--breakdown", "--format", "json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["breakdown"]["rows"]


@needs_plugin
@pytest.mark.parametrize("llama", ["h100-8"], indirect=True, ids=["h100-8"])
def test_gpu_peak_meets_xlas_peak_memory(llama: Any) -> None:
    """On XLA:GPU the most bytes live by the live ranges is XLA's own peak figure.

    ``memory_analysis().peak_memory_in_bytes`` comes from XLA's heap simulation
    of the same schedule; the live ranges' highest point agrees with it to a
    few kilobytes of scalars and index tables (measured: 1,828 of 199,061,260
    bytes on the 8-layer llama_tiny, 504 of 39,352,828 on this one), while
    XLA's live-range dump names a lower point its peak.
    """
    assert llama.backend == "gpu" and llama.xla_peak_bytes is not None
    gap = abs(llama.breakdown.live_peak_bytes - llama.xla_peak_bytes)
    assert gap <= llama.xla_peak_bytes // 10_000

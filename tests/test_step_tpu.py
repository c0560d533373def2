"""XLA:TPU step reports: out of memory as a verdict, the child compile, device order.

Needs the ``tpu`` extra (libtpu); skipped without it. The compiler's
out-of-memory wording is pinned here, so a libtpu that changes it fails loudly
instead of turning a refused step into an error or, worse, a pass.
"""

import json
import re
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from nnx_introspect import _step, step_memory_report
from nnx_introspect.examples import two_layer

needs_libtpu = pytest.mark.skipif(
    _step.libtpu_version() is None, reason="libtpu is not installed (the tpu extra)"
)

V5E_HBM = 16 * 2**30
V5E_AVAILABLE = round(15.75 * 2**30)  # what libtpu 0.0.52 says a program may use

# libtpu 0.0.52's words when a program's temporaries exceed the chip's HBM
OOM_MESSAGE = re.compile(
    r"RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: Ran out of memory on HBM, the "
    r"total memory required for HLO temporaries \((?P<need>[0-9.]+)G\) exceeds "
    r"available HBM \(15\.75G\)\. HLO module: jit_forward\."
)


def _wide(rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(1024, 65536, use_bias=False, rngs=rngs)


@pytest.fixture(scope="module")
def oom_report() -> Any:
    # the forward's float32[65536, 65536] output alone is 16 GiB: more than HBM
    x = jax.ShapeDtypeStruct((65536, 1024), jnp.float32)
    return step_memory_report(_wide, "data=1", x, loss=None, topology="v5e-1")


@needs_libtpu
def test_out_of_memory_is_a_verdict_with_the_compilers_figures(oom_report: Any) -> None:
    report = oom_report
    match = OOM_MESSAGE.search(report.compiler_message or "")
    assert match is not None, report.compiler_message  # libtpu changed its words?
    need = round(float(match.group("need")) * 2**30)
    assert report.out_of_memory and not report.fits() and not report.ok
    assert report.compiler_required_bytes == need >= 65536**2 * 4
    assert report.compiler_available_bytes == round(15.75 * 2**30)
    # the arguments: the kernel and the batch, each 1024 x 65536 float32
    assert report.argument_bytes == 2 * 1024 * 65536 * 4
    # XLA:TPU's "HLO temporaries" hold the arguments: the 16 GiB output and
    # the 0.5 GiB of arguments, to the compiler's two decimals; counted once
    assert need == round((65536**2 * 4 + report.argument_bytes) / 2**30, 2) * 2**30
    assert report.temp_bytes == need - report.argument_bytes
    assert report.peak_bytes == need > V5E_HBM
    assert report.device_memory_bytes == V5E_HBM
    assert report.max_device_bytes == V5E_AVAILABLE == report.compiler_available_bytes
    assert not report.fits("1TiB")  # the compiler refused it: no budget helps
    assert report.verdict.startswith(
        "Out of memory (the compiler refused the step): needs 16.50 GiB per device, "
        "the compiler has 15.75 GiB of the device's 16 GiB; one step on 1 device"
    )


@needs_libtpu
def test_out_of_memory_verdict_is_the_same_in_every_format(oom_report: Any) -> None:
    data = json.loads(oom_report.to_json())
    assert data["version"] == 4
    assert (data["ok"], data["fits"], data["out_of_memory"]) == (False, False, True)
    assert data["device_memory_bytes"] == V5E_HBM
    assert data["max_device_bytes"] == V5E_AVAILABLE
    assert OOM_MESSAGE.search(data["compiler_message"])
    markdown = oom_report.to_markdown()
    assert markdown.startswith("**Out of memory (the compiler refused the step)")
    assert "| outputs | not given | - |" in markdown
    html = oom_report.to_html()
    assert "Out of memory (the compiler refused the step)" in html
    for text in (markdown, html, data["verdict"]):
        assert not re.search(r"(^|[>*])\s*OK", text)


@needs_libtpu
def test_named_target_compiles_in_a_child_like_in_process() -> None:
    x = jax.ShapeDtypeStruct((8, 3), jnp.float32)
    kwargs: dict[str, Any] = {"optimizer": "adamw", "topology": "v5e-8"}
    child = step_memory_report(
        "nnx_introspect.examples:two_layer", "data=4,model=2", x, **kwargs
    )
    here = step_memory_report(
        lambda rngs: two_layer(rngs), "data=4,model=2", x, **kwargs
    )
    assert child.compiled_in == "a child process (v5e-8)"
    assert here.compiled_in == "this process"
    for field in ("argument_bytes", "output_bytes", "temp_bytes", "alias_bytes"):
        assert getattr(child, field) == getattr(here, field), field
    assert child.flops == here.flops
    assert child.device_order == here.device_order == "physical (topologies.make_mesh)"
    assert child.fits() and child.verdict.startswith("Fits in ")
    # the budget is the HBM the compiler lets a program use, and says so
    assert child.max_device_bytes == V5E_AVAILABLE
    assert "of 15.75 GiB per device (the 15.75 GiB of HBM XLA:TPU lets a" in (
        child.verdict
    )
    assert jax.default_backend() == "cpu"


@needs_libtpu
def test_device_order_says_when_make_mesh_could_not_lay_the_mesh() -> None:
    """(32, 8) on a 16x16 v5e-256: ``topologies.make_mesh`` refuses it and the
    devices are taken in plain order; the report says which order compiled."""
    x = jax.ShapeDtypeStruct((32, 3), jnp.float32)
    report = step_memory_report(
        "nnx_introspect.examples:two_layer",
        "data=32,model=8",
        x,
        loss=None,
        topology="v5e-256",
    )
    assert report.device_order.startswith(
        "plain device order (make_mesh could not lay (32, 8) onto 16x16"
    )
    assert any(n.startswith("Device order: plain") for n in report.table().notes)
    assert json.loads(report.to_json())["device_order"] == report.device_order

"""The step report's budget and verdict: ``fits()``, ``ok`` and every format agree."""

import json
import re

import jax
import jax.numpy as jnp
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from nnx_introspect import step_memory_report

X = jax.ShapeDtypeStruct((8, 4), jnp.float32)


def linear(rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(4, 6, rngs=rngs)


# kernel + bias replicated (4*6 + 6 floats) and one of 8 rows of x
ARGUMENTS = (4 * 6 + 6) * 4 + 4 * 4


def test_budget_argument_sets_the_verdict() -> None:
    report = step_memory_report(linear, "data=8", X, max_device_bytes=100)
    assert report.argument_bytes == ARGUMENTS
    assert report.max_device_bytes == 100 and report.device_memory_bytes is None
    assert report.peak_bytes > 100
    assert not report.fits() and not report.ok and not report.out_of_memory
    assert report.fits(10**6) and report.fits("1MiB")
    assert report.verdict.startswith(
        f"Does not fit: needs {report.peak_bytes} B per device, the budget is 100 B"
    )
    data = json.loads(report.to_json())
    assert data["version"] == 4
    assert (data["ok"], data["fits"], data["max_device_bytes"]) == (False, False, 100)
    assert data["device_memory_bytes"] is None and data["out_of_memory"] is False
    markdown = report.to_markdown()
    assert markdown.startswith("**Does not fit: needs ")
    assert "| **budget per device** | **100 B** | **100** |" in markdown
    assert "Does not fit: needs " in report.to_html()
    for text in (markdown, report.to_html()):
        assert not re.search(r"(^|[>*])\s*OK", text)


def test_budget_as_a_size_string_fits() -> None:
    report = step_memory_report(linear, "data=8", X, max_device_bytes="1MiB")
    assert report.max_device_bytes == 2**20 and report.fits() and report.ok
    assert report.verdict.startswith(f"Fits in {report.peak_bytes} B of 1 MiB")
    assert json.loads(report.to_json())["fits"] is True


def test_no_budget_fits_needs_one() -> None:
    report = step_memory_report(linear, "data=8", X)
    assert report.max_device_bytes is None and report.ok
    assert json.loads(report.to_json())["fits"] is None
    with pytest.raises(ValueError, match=r"`max_device_bytes` must be given"):
        report.fits()


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        (-1, ValueError, r"`max_device_bytes`"),
        ("lots", ValueError, r"`max_device_bytes` must be a size like"),
        (1.5, ValueError, r"`max_device_bytes`"),
    ],
)
def test_bad_budget_is_named(value: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        step_memory_report(linear, "data=8", X, max_device_bytes=value)  # type: ignore[arg-type]


def test_no_negative_zero_in_the_donated_row() -> None:
    """Issue 14: a forward step donates nothing, and the row read "-0 B"."""
    report = step_memory_report(linear, "data=8", X, loss=None)
    assert report.alias_bytes == 0
    markdown = report.to_markdown()
    assert "| aliased (donated) | 0 B | 0 |" in markdown
    assert "-0" not in markdown


def test_a_sharded_step_with_no_activation_constraint_says_so() -> None:
    """Parameters split over 8 devices, no activation constrained: the report
    counts 0 constraints and warns that XLA chose every activation's layout;
    a model that constrains its activations gets no such warning."""
    from tests.platform_models import WIDTH, cpu_shy_mlp
    from tests.test_step_inputs import Constrained

    # traced on the CPU in this process, the model constrains nothing
    x = jax.ShapeDtypeStruct((8, WIDTH), jnp.float32)
    report = step_memory_report(cpu_shy_mlp, "fsdp=2,tp=4", x, loss=None)
    assert report.sharding_constraints == 0
    assert any("no activation sharding constraint" in w for w in report.warnings)
    assert report.json_data()["sharding_constraints"] == 0
    constrained = step_memory_report(
        Constrained,
        "data=4",
        jax.ShapeDtypeStruct((32, 16), jnp.float32),
        loss=None,
        rules=[("kernel", P(None, "data"))],
    )
    assert constrained.sharding_constraints is not None
    assert constrained.sharding_constraints >= 1
    assert not any(
        "no activation sharding constraint" in w for w in constrained.warnings
    )

"""A model's experts are read from it once per step: where the plan is made.

The plan (``MeshConfigReport.experts``) carries them to every later reader:
the breakdown's expert roles and notes, the MFU's ``N_active``.
"""

from typing import Any

import jax
import jax.numpy as jnp
import pytest

import nnx_introspect._experts as experts_module
from nnx_introspect import (
    abstract_model,
    count_active_params,
    count_params,
    mesh_config_report,
    step_memory_report,
)
from nnx_introspect.examples import moe_tiny, two_layer

TOKENS = jax.ShapeDtypeStruct((4, 16), jnp.int32)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Each read of a model's routers, in order.

    Counted where every read goes, however a caller imported
    :func:`~nnx_introspect._experts.expert_groups`: its module's router scan.
    """
    seen: list[Any] = []
    real = experts_module._routers

    def counted(modules: Any) -> Any:
        seen.append(modules)
        return real(modules)

    monkeypatch.setattr(experts_module, "_routers", counted)
    return seen


def test_the_plan_carries_the_groups_read_from_the_model() -> None:
    model = abstract_model(moe_tiny)
    plan = mesh_config_report(model, "data=1")
    routers = [(g.path, g.experts, g.top_k) for g in plan.experts]
    assert routers == [(("layers", i, "moe"), 8, 2) for i in range(2)]
    assert mesh_config_report(abstract_model(two_layer), "data=1").experts == ()


def test_a_breakdown_step_reads_the_experts_once(reads: list[Any]) -> None:
    report = step_memory_report(
        moe_tiny, "data=2", TOKENS, loss="lm", breakdown=True, cache=False
    )
    assert len(reads) == 1  # the plan's read; the compile and N_active reuse it
    model = abstract_model(moe_tiny)
    assert report.active_params == count_active_params(model) < count_params(model)
    assert report.breakdown is not None
    kinds = {row.kind for row in report.breakdown.rows}
    assert kinds & {"expert dispatch", "expert combine"}

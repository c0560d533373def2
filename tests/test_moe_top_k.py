"""Issue 55, item 3: a router sending each token to more experts than it has.

The example ``moe_tiny`` (two layers, each routing to 2 of its 8 experts), its
routers' ``top_k`` set to 9 after it is built (its config refuses 9). Every
command says the same one cause: ``summary`` and ``step`` refuse the model
(exit 2, ``step`` before anything is traced or compiled, never blaming
``--batch`` with JAX's ``top_k`` error), ``mesh`` reports it as a problem
(exit 1).
"""

import pathlib

import pytest

from nnx_introspect import count_active_params
from nnx_introspect.examples import MOE_TINY
from tests.cli_helpers import run

TOP_K = MOE_TINY.n_experts + 1
CAUSE = (
    f"TARGET's module `layers/0/moe` (MoeBlock) routes each token to {TOP_K} of its "
    f"{MOE_TINY.n_experts} experts; a router picks 1 to {MOE_TINY.n_experts} of them."
)


@pytest.fixture
def target(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "top_k_targets.py").write_text(
        "from nnx_introspect.examples import moe_tiny\n\n\n"
        "def too_many(rngs):\n"
        "    model = moe_tiny(rngs)\n"
        "    for layer in model.layers:\n"
        f"        layer.moe.top_k = {TOP_K}\n"
        "    return model\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return "top_k_targets:too_many"


def test_the_count_refuses_it(target: str) -> None:
    from nnx_introspect import abstract_model
    from nnx_introspect._targets import resolve_factory

    with pytest.raises(ValueError, match=r"routes each token to 9 of its 8 experts"):
        count_active_params(abstract_model(resolve_factory(target)))


def test_summary_says_the_routers_cause(
    target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["summary", target], capsys)
    assert (code, out) == (2, "")
    assert f"error: argument TARGET: {CAUSE}" in err
    assert "a state holds no router" not in err


def test_mesh_reports_it_as_a_problem(
    target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(["mesh", target, "--mesh", "data=8"], capsys)
    assert code == 1
    assert CAUSE.replace("TARGET's", "") in out.replace("TARGET's", "")


def test_step_refuses_it_before_compiling(
    target: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("traced or compiled")

    monkeypatch.setattr("nnx_introspect._step.measure.compiled_where", never)
    argv = ["step", target, "--mesh", "data=8", "--batch", "int32[8,16]"]
    code, out, err = run([*argv, "--loss", "lm"], capsys)
    assert (code, out) == (2, "")
    assert err.startswith(f"nnx-introspect step: error: argument TARGET: {CAUSE}")
    assert "--batch" not in err and "k argument to top_k" not in err

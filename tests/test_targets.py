"""The CLI's target resolver: building sharding-annotated models concretely."""

import pathlib
import sys

import jax
import numpy as np
import pytest
from flax import nnx

from nnx_introspect._targets import TargetError, build_target
from nnx_introspect.examples import llama_tiny
from tests.cli_helpers import run


def _flat(model: nnx.Module) -> dict[tuple[object, ...], nnx.Variable[jax.Array]]:
    return dict(nnx.to_flat_state(nnx.state(model)))


def test_a_sharded_model_builds_concretely_without_a_mesh() -> None:
    assert jax.sharding.get_abstract_mesh().empty  # no mesh: flax would refuse
    with pytest.raises(ValueError, match="mesh context or metadata is required"):
        nnx_llama_tiny_sharded_plain()
    sharded = build_target("nnx_introspect.examples:llama_tiny_sharded", abstract=False)
    plain = llama_tiny(nnx.Rngs(0))  # flax's own build of the unannotated model
    a, b = _flat(plain), _flat(sharded)
    assert a.keys() == b.keys()
    for path, variable in a.items():
        np.testing.assert_array_equal(np.asarray(variable[...]), b[path][...])
    # The annotations are kept as metadata, and eager sharding is back on.
    kernel = sharded.layers[0].q.kernel
    assert kernel.get_metadata()["out_sharding"] == ("fsdp", "tp")
    with pytest.raises(ValueError, match="mesh context or metadata is required"):
        nnx_llama_tiny_sharded_plain()


def nnx_llama_tiny_sharded_plain() -> nnx.Module:
    from nnx_introspect.examples import llama_tiny_sharded

    return llama_tiny_sharded(nnx.Rngs(0))


def test_other_factory_errors_are_not_retried(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []

    def factory(rngs: nnx.Rngs) -> nnx.Module:
        calls.append(1)
        raise ValueError("not about meshes")

    import nnx_introspect._targets as targets

    monkeypatch.setattr(targets, "resolve_factory", lambda spec: factory)
    with pytest.raises(TargetError, match="not about meshes"):
        build_target("x:y", abstract=False)
    assert calls == [1]


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("raise RuntimeError('import failed')\n", "RuntimeError: import failed"),
        (
            "if True:\n    raise RuntimeError('import failed')\n\ndef g():\n    pass\n",
            "RuntimeError: import failed",
        ),
        (
            "import no_such_package_of_the_tests\n",
            "ModuleNotFoundError: No module named 'no_such_package_of_the_tests'",
        ),
    ],
)
def test_a_module_that_fails_to_import_is_said_so_not_a_missing_name(
    source: str,
    said: str,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Python never reaches `f`: the import's own error is the cause
    (tmp_path / "raising_target_mod.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "raising_target_mod", raising=False)
    code, out, err = run(["summary", "raising_target_mod:f"], capsys)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "has no attribute" not in err
    assert (
        "cannot import module 'raising_target_mod' of target "
        f"'raising_target_mod:f': {said}" in err
    )

"""The CLI's target resolver: building sharding-annotated models concretely."""

import jax
import numpy as np
import pytest
from flax import nnx

from nnx_introspect._targets import TargetError, build_target
from nnx_introspect.examples import llama_tiny


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

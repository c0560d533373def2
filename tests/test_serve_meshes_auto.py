"""``meshes="auto"`` / ``--mesh auto``: every ``tp`` of the topology, the rest replicas.

The candidates a request cannot split over (a ``tp`` that does not divide the
KV heads, replicas that do not divide the sequences) are rejected with the
reason before any compile, and listed.
"""

import json

import pytest

import nnx_introspect._serve.mesh_comparison as serve_meshes_module
from nnx_introspect import ArgumentError, ServeMeshComparison, compare_serving_meshes
from nnx_introspect._serve.mesh_comparison import serving_meshes
from nnx_introspect.cli import main
from nnx_introspect.examples import LlamaConfig, llama

# two KV heads: tp=4 cannot split them
KV2 = llama(
    LlamaConfig(vocab=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48)
)
TINY = "nnx_introspect.examples:llama_tiny"  # four KV heads


@pytest.mark.parametrize("devices", [1, 2, 8, 12])
def test_one_candidate_per_divisor_the_most_tensor_parallel_first(
    devices: int,
) -> None:
    found = serving_meshes(devices)
    divisors = [t for t in range(devices, 0, -1) if devices % t == 0]
    assert len(found) == len(divisors)
    for mesh, tp in zip(found, divisors, strict=True):
        sizes = dict(part.split("=") for part in mesh.split(","))
        assert int(sizes.get("tp", 1)) == tp
        assert int(sizes.get("data", 1)) == devices // tp
        # no data axis of size 1; a tp axis of size 1 only beside data
        assert sizes.get("data") != "1"
        assert sizes["tp"] != "1" or devices == 1 or "data" in sizes
    assert serving_meshes(8) == ["tp=8", "data=2,tp=4", "data=4,tp=2", "data=8,tp=1"]


@pytest.fixture(scope="module")
def compiled() -> list[tuple[tuple[str, int], ...]]:
    return []


@pytest.fixture(scope="module")
def found(
    compiled: list[tuple[tuple[str, int], ...]],
) -> ServeMeshComparison:
    from nnx_introspect._serve.api import measure_serve as real

    def recording(spec: object, **kwargs: object) -> object:
        compiled.append(spec.mesh_axes)  # type: ignore[attr-defined]
        return real(spec, **kwargs)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(serve_meshes_module, "measure_serve", recording)
        # 2 sequences on 4 devices: tp=4 (2 KV heads) and data=4 (2
        # sequences) are rejected, data=2,tp=2 alone is compiled
        return compare_serving_meshes(
            KV2, "auto", sequences=2, context=32, topology="h100-4"
        )


def test_rejected_before_any_compile_with_the_reason(
    found: ServeMeshComparison, compiled: list[tuple[tuple[str, int], ...]]
) -> None:
    assert compiled == [(("data", 2), ("tp", 2))]
    assert [r.mesh_axes for r in found.reports] == compiled
    reasons = dict(found.rejected)
    assert sorted(reasons) == ["data=4,tp=1", "tp=4"]
    assert "tp=4 does not divide the 2 KV heads" in reasons["tp=4"]
    assert "does not split over the 4 data-parallel devices" in reasons["data=4,tp=1"]


def test_the_rejected_are_listed_in_every_format(found: ServeMeshComparison) -> None:
    notes = found.table().notes
    assert any(n.startswith("Not compiled: tp=4: `mesh` tp=4") for n in notes)
    assert "Not compiled: data=4,tp=1: `sequences` 2" in found.to_markdown()
    data = json.loads(found.to_json())
    assert {r["mesh"] for r in data["rejected"]} == {"tp=4", "data=4,tp=1"}


def test_auto_needs_a_topology_and_one_mesh_that_splits() -> None:
    with pytest.raises(ArgumentError, match=r"`meshes='auto'` takes its device") as e:
        compare_serving_meshes(KV2, "auto", sequences=2, context=32)
    assert e.value.argument == "topology"
    with pytest.raises(ArgumentError, match=r"no serving mesh of the 4 devices") as e:
        compare_serving_meshes(KV2, "AUTO", sequences=1, context=32, topology="h100-4")
    assert e.value.argument == "meshes"
    assert "tp=4: `mesh` tp=4 does not divide" in str(e.value)
    with pytest.raises(ArgumentError, match=r"or 'auto', got 'tp=4'") as e:
        compare_serving_meshes(KV2, "tp=4", sequences=2, context=32, topology="h100-4")


def test_cli_mesh_auto_compares_every_tp(capsys: pytest.CaptureFixture[str]) -> None:
    """On a model whose weights name `tp` (annotated, as the 7B example): the
    all-data candidate keeps a tp axis of 1, or its weights have no place.
    llama_tiny_sharded's annotations on a small Llama (2 layers of width 32)."""
    sharded = "tests.llama_tiny_layers:llama_small_sharded"
    argv = ["serve", sharded, "--mesh", "auto", "--sequences", "2", "--context", "32"]
    assert main([*argv, "--topology", "h100-2", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    meshes = sorted(",".join(f"{a}={n}" for a, n in r["mesh"]) for r in data["reports"])
    assert meshes == ["data=2,tp=1", "tp=2"] and data["rejected"] == []


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ([], "--mesh auto needs --topology"),
        (["--topology", "h100-2", "--mesh", "tp=2"], "--mesh auto stands alone"),
        (["--topology", "h100-2", "--max-context"], "not with --max-sequences"),
        (["--topology", "h100-2", "--breakdown"], "not with --max-sequences"),
        # one sequence on 8 devices of a model with 4 KV heads: nothing splits
        (["--topology", "h100-8", "--sequences", "1"], "--mesh auto: no serving mesh"),
    ],
)
def test_cli_mesh_auto_mistakes_exit_2_in_one_line(
    capsys: pytest.CaptureFixture[str], extra: list[str], words: str
) -> None:
    argv = ["serve", TINY, "--mesh", "auto", "--sequences", "2", "--context", "32"]
    assert main([*argv, *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("nnx-introspect") and "argument --mesh: " in err[-1]
    assert words in err[-1]

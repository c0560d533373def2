"""Serving meshes ranked by estimated tokens/s per device; ties called ties."""

import concurrent.futures

import pytest

from nnx_introspect import (
    ArgumentError,
    ServeMeshComparison,
    compare_serving_meshes,
)
from nnx_introspect._serve.meshes import _ties
from nnx_introspect.cli import main
from nnx_introspect.examples import LlamaConfig, llama

CFG = LlamaConfig(vocab=256, d_model=128, n_layers=2, n_heads=8, d_ff=256, n_kv_heads=4)
TINY = llama(CFG)
MESHES = ["data=4", "tp=4", "data=2,tp=2"]
S, T = 8, 64


@pytest.fixture(scope="module")
def found() -> ServeMeshComparison:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return compare_serving_meshes(
            TINY,
            MESHES,
            sequences=S,
            context=T,
            prompt=16,
            topology="h100-4",
            executor=pool,
        )


def _rate(report: object) -> tuple[float, float]:
    """Tokens/s per device by hand: sequences over the decode step, 4 devices."""
    time = report.time  # type: ignore[attr-defined]
    est = time.decode
    return S / est.high_seconds / 4, S / est.low_seconds / 4


def test_ranked_by_tokens_per_second_per_device(found: ServeMeshComparison) -> None:
    assert sorted(str(r.mesh_axes) for r in found.reports) == sorted(
        str(r.mesh_axes) for r in found.reports
    )
    assert len(found.reports) == 3 and all(r.ok for r in found.reports)
    rates = [_rate(r) for r in found.reports]
    middles = [(a + b) / 2 for a, b in rates]
    assert middles == sorted(middles, reverse=True)
    for report, rate in zip(found.reports, rates, strict=True):
        assert report.time is not None
        assert report.time.tokens_per_second_per_device == pytest.approx(rate)
    assert found.executor == "ThreadPoolExecutor"


def test_ties_are_exactly_the_overlapping_ranges(found: ServeMeshComparison) -> None:
    rates = [_rate(r) for r in found.reports]
    expected = {
        (i, j)
        for i in range(3)
        for j in range(i + 1, 3)
        if rates[i][0] <= rates[j][1] and rates[j][0] <= rates[i][1]
    }
    assert set(found.ties) == expected
    # a tie by construction, and its absence
    a, b = found.reports[0], found.reports[1]
    assert _ties([a, a]) == ((0, 1),)
    if (0, 1) not in expected:
        assert _ties([a, b]) == ()


def test_rendered_with_the_verdict_first(found: ServeMeshComparison) -> None:
    text = str(found)
    assert text.splitlines()[0] == found.verdict
    best = ",".join(f"{k}={v}" for k, v in found.reports[0].mesh_axes)
    assert found.verdict.startswith(f"best: {best}")
    assert "(estimate)" in found.verdict
    assert '<p class="verdict ok">' in found.to_html()
    assert found.json_data()["reports"][0]["mesh"] == [
        list(a) for a in found.reports[0].mesh_axes
    ]


@pytest.mark.parametrize(
    ("meshes", "kwargs", "argument", "words"),
    [
        (["tp=4", "data=4"], {"topology": None}, "topology", "is None"),
        (["tp=4"], {}, "meshes", "two or more"),
        (["tp=4", "data=2"], {}, "meshes", r"have \[2, 4\] devices"),
        (["tp=8", "data=8"], {"topology": "h100-8"}, "meshes", r"meshes\[0\]"),
        (["tp=4", "data=4"], {"executor": "pool"}, "executor", "Executor"),
    ],
)
def test_bad_input_names_the_argument(
    meshes: list[str], kwargs: dict[str, object], argument: str, words: str
) -> None:
    options: dict[str, object] = {"topology": "h100-4", "sequences": 8, "context": 16}
    with pytest.raises(ArgumentError, match=words) as error:
        compare_serving_meshes(TINY, meshes, **(options | kwargs))
    assert error.value.argument == argument


def test_cli_compares_repeated_meshes(capsys: pytest.CaptureFixture[str]) -> None:
    target = "tests.llama_tiny_layers:llama_small"  # llama_tiny's shape, 2 layers
    argv = ["serve", target, "--sequences", "8", "--context", "64"]
    meshes = ["--mesh", "tp=4", "--mesh", "data=2,tp=2"]
    assert main([*argv, *meshes, "--topology", "h100-4", "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "| tp=4 |" in out and "| data=2,tp=2 |" in out
    assert main([*argv, *meshes]) == 2
    assert "argument --topology:" in capsys.readouterr().err
    assert main([*argv, *meshes, "--topology", "h100-4", "--max-context"]) == 2
    assert "argument --mesh:" in capsys.readouterr().err

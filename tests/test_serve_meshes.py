"""Serving meshes ranked by estimated tokens/s per device; ties called ties."""

import concurrent.futures
import dataclasses
import types
from typing import Any

import pytest

from nnx_introspect import (
    ArgumentError,
    ServeMeshComparison,
    compare_serving_meshes,
)
from nnx_introspect._accelerators.hardware import hardware_for
from nnx_introspect._roofline.estimate import roofline
from nnx_introspect._roofline.timing import DATA_SHEET, ProgramTime
from nnx_introspect._serve.mesh_comparison import _order, _ties
from nnx_introspect._serve.timing import ServeTime
from nnx_introspect.cli import main
from nnx_introspect.examples import LlamaConfig, llama
from tests.test_range_words import bound_words

# programs asked for again (a report of a search's answer, a command line's
# of an API call's): the module's cache compiles each once
pytestmark = pytest.mark.usefixtures("one_compile_per_program")

CFG = LlamaConfig(vocab=256, d_model=128, n_layers=2, n_heads=8, d_ff=256, n_kv_heads=4)
TINY = llama(CFG)
MESHES = ["data=4", "tp=4", "data=2,tp=2"]
S, T = 8, 64


def tiny(rngs: Any) -> Any:
    """The module's model by name, for the command line."""
    return TINY(rngs)


@pytest.fixture(scope="module")
def found() -> ServeMeshComparison:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return compare_serving_meshes(
            "tests.test_serve_meshes:tiny",  # by name, as the command line asks
            MESHES,
            sequences=S,
            context=T,
            prompt=16,
            topology="h100-4",
            executor=pool,
        )


def _rate(report: object) -> float:
    """Tokens/s per device by hand: sequences over the decode step's point
    estimate, 4 devices."""
    time = report.time  # type: ignore[attr-defined]
    assert time.decode.time is not None
    return float(S / time.decode.time.seconds / 4)


def _bounds(report: object) -> tuple[float, float]:
    """The roofline's tokens/s per device by hand: sequences over its bounds."""
    est = report.time.decode  # type: ignore[attr-defined]
    return S / est.high_seconds / 4, S / est.low_seconds / 4


def test_ranked_by_tokens_per_second_per_device(found: ServeMeshComparison) -> None:
    assert len(found.reports) == 3 and all(r.ok for r in found.reports)
    rates = [_rate(r) for r in found.reports]
    assert rates == sorted(rates, reverse=True)
    for report, rate in zip(found.reports, rates, strict=True):
        assert report.time is not None
        assert report.time.tokens_per_second_estimate / 4 == pytest.approx(rate)
        assert report.time.tokens_per_second_per_device == pytest.approx(
            _bounds(report)
        )
    assert found.executor == "ThreadPoolExecutor"


def test_ties_are_exactly_the_estimates_within_the_error(
    found: ServeMeshComparison,
) -> None:
    rates = [_rate(r) for r in found.reports]
    errors = [r.time.decode.error for r in found.reports]  # type: ignore[union-attr]
    expected = set()
    for i in range(3):
        for j in range(i + 1, 3):
            known = [e for e in (errors[i], errors[j]) if e is not None]
            gap = abs(rates[i] - rates[j])
            if gap <= max(known) * max(rates[i], rates[j]) if known else gap == 0:
                expected.add((i, j))
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
    assert "(estimate, " in found.verdict and "roofline range" in found.verdict
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
    # the module's model and sizes: the programs `found` compiled, read back
    target = "tests.test_serve_meshes:tiny"
    argv = ["serve", target, "--sequences", "8", "--context", "64", "--prompt", "16"]
    meshes = ["--mesh", "tp=4", "--mesh", "data=2,tp=2"]
    assert main([*argv, *meshes, "--topology", "h100-4", "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "| tp=4 |" in out and "| data=2,tp=2 |" in out
    assert main([*argv, *meshes]) == 2
    assert "argument --topology:" in capsys.readouterr().err
    assert main([*argv, *meshes, "--topology", "h100-4", "--max-context"]) == 2
    assert "argument --mesh:" in capsys.readouterr().err


def _time(seconds: float, error: float | None, bounds: tuple[float, float]) -> Any:
    """A decode (and prefill) step on h100-4 with a point estimate and bounds.

    The bounds come from bytes at the HBM bandwidth (the low bound) and a
    collective on NVLink taking ``high - low`` (no longer than the bytes); the
    point estimate is ``seconds`` with the error bar ``error``.
    """
    hardware = hardware_for("h100-4")
    assert hardware.nvlink_bytes_per_second is not None
    low, high = bounds
    step = roofline(
        flops=0.0,
        bytes_accessed=low * hardware.hbm_bytes_per_second,
        comm_bytes_by_axis={
            ("tp",): round((high - low) * hardware.nvlink_bytes_per_second)
        },
        mesh_axes=(("tp", 4),),
        hardware=hardware,
    )
    constants = dataclasses.replace(DATA_SHEET, calibrated=True, error=error)
    point = ProgramTime(seconds, error, constants, 0, 0, seconds, 0, 0, 0, 0, 1)
    step = dataclasses.replace(step, time=point)
    return ServeTime(step, step, sequences=S, replicas=1, read_bytes=1)


def _stand_in(mesh: str, time: Any, ok: bool = True) -> Any:
    """What the comparison reads of a mesh's report, with no compile."""
    program = types.SimpleNamespace(cached=None)
    return types.SimpleNamespace(
        ok=ok,
        time=time,
        peak_bytes=2**20,
        mesh_axes=tuple(
            (a, int(n)) for a, n in (p.split("=") for p in mesh.split(","))
        ),
        prefill=program,
        decode=program,
    )


def test_stand_ins_rank_by_the_point_estimate_and_tie_within_its_error() -> None:
    # 8 sequences over 4 devices: 1 ms a token is 2,000 tokens/s per device,
    # 1.05 ms 1,905, 1.2 ms 1,667. Within 10%: |1.05 - 1.0| = 0.05 <= 0.105
    # (a tie); |1.2 - 1.0| = 0.2 > 0.12 and |1.2 - 1.05| = 0.15 > 0.12 (apart).
    # By the ranges' middles c would lead (0.1-0.2 ms: 10,000-20,000 tokens/s).
    a = _stand_in("tp=4", _time(1.0e-3, 0.10, (0.5e-3, 1e-3)))
    b = _stand_in("data=2,tp=2", _time(1.05e-3, 0.10, (0.5e-3, 1e-3)))
    c = _stand_in("data=4", _time(1.2e-3, 0.10, (0.1e-3, 0.2e-3)))
    refused = _stand_in("data=4,tp=1", _time(0.1e-3, 0.10, (0.1e-3, 0.2e-3)), False)
    ranked = sorted([c, refused, b, a], key=_order)
    assert ranked == [a, b, c, refused]
    assert _ties(ranked) == ((0, 1),)
    found = ServeMeshComparison(tuple(ranked), _ties(ranked), "one mesh after another")
    assert found.verdict == (
        "best: tp=4 (tied with data=2,tp=2: their estimates are within ±10%), "
        "2,000 tokens/s per device at 1 ms per token (estimate, ±10%; roofline "
        "range 2,000-4,000 tokens/s at 500 us-1 ms); peak 1 MiB per device"
    )
    table = found.table()
    assert [r[1] for r in table.rows] == ["1 (tie)", "2 (tie)", "3", "-"]
    assert [r[2] for r in table.rows] == ["2,000 ±10%", "1,905 ±10%", "1,667 ±10%", "-"]
    assert table.rows[0][3:5] == ("1 ms", "1 ms")
    assert table.columns[5] == "roofline range" and "roofline range" in table.optional
    assert (
        table.rows[0][5]
        == "2,000-4,000 tok/s; 500 us-1 ms per token; 500 us-1 ms first"
    )
    assert "a range, not a bound: the program's bytes accessed" in table.notes[0]
    assert bound_words(" ".join(str(found).split())) == []
    # uncalibrated: a tie only when the estimates are the same
    same = [_stand_in("tp=4", _time(1e-3, None, (1e-4, 2e-4))) for _ in range(2)]
    assert _ties(same) == ((0, 1),)
    other = _stand_in("data=4", _time(1.001e-3, None, (1e-4, 2e-4)))
    assert _ties([same[0], other]) == ()

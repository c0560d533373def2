"""A comparison's progress names the meshes compiling and the time left (issue 24).

"0 of 9 meshes compiled (47s)" said nothing for a whole first compile: the
line now names the meshes compiling and, once one finished, how long is left
(the mean compile time over the parallel jobs). The line is tested on a fake
clock; the collecting side (``Run``'s ``compiling`` callback) on a thread
pool whose compiles wait for the test's word.
"""

import concurrent.futures
import threading
from typing import Any

import pytest

from nnx_introspect._sweep.mesh_comparison import MeshAxes, MeshCandidate
from nnx_introspect._sweep.mesh_comparison import run as run_module
from nnx_introspect._sweep.mesh_comparison.run import Run
from nnx_introspect.cli.progress import CompareLine, _left


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_line_names_the_meshes_compiling_before_any_finished() -> None:
    clock = Clock()
    line = CompareLine("Comparing 9 meshes...", clock)
    line.progress(0, 9, None)
    line.compiling(("fsdp=8", "fsdp=4,tp=2"), ())
    clock.now += 47
    assert line.left() is None  # nothing finished: no mean to go by
    assert line.text() == (
        "0 of 9 meshes compiled (47s); compiling fsdp=8, fsdp=4,tp=2"
    )


def test_the_time_left_is_the_mean_compile_over_the_jobs() -> None:
    clock = Clock()
    line = CompareLine("Comparing 9 meshes...", clock)
    line.progress(0, 9, None)
    line.compiling(("fsdp=8", "fsdp=4,tp=2"), ())
    clock.now += 60
    line.compiling(("fsdp=4,tp=2", "fsdp=2,tp=4"), (60.0,))
    # fsdp=4,tp=2 has had its 60 s, fsdp=2,tp=4 needs 60 more, then 6 more
    # compiles of 60 s on 2 jobs: 3 rounds after it, 240 s in all
    assert line.left() == pytest.approx(240.0)
    assert line.text() == (
        "1 of 9 meshes compiled (1m 00s, about 4m left); "
        "compiling fsdp=4,tp=2, fsdp=2,tp=4"
    )
    clock.now += 30  # the clock moves between the calls: so does the estimate
    assert line.left() == pytest.approx(210.0)
    row = MeshCandidate((("fsdp", 8),), "rejected", "too big")
    line.progress(1, 9, row)
    assert line.text() == (
        "1 of 9 meshes compiled (1m 30s, about 4m left); compiling fsdp=4,tp=2, "
        "fsdp=2,tp=4; fsdp=8: rejected by the planner"
    )


def test_finished_out_of_order_counts_as_compiled() -> None:
    clock = Clock()
    line = CompareLine("Comparing 3 meshes...", clock)
    line.progress(0, 3, None)
    line.compiling(("a=8", "b=8", "c=8"), ())
    clock.now += 10
    line.compiling(("a=8",), (9.0, 10.0))  # b and c done, a (first) is not
    assert line.text().startswith("2 of 3 meshes compiled (10s, under 1m left)")


def test_many_meshes_compiling_are_counted_past_three() -> None:
    line = CompareLine("Comparing...", Clock())
    line.progress(0, 16, None)
    line.compiling(tuple(f"data={n}" for n in (1, 2, 4, 8, 16)), ())
    assert line.text() == (
        "0 of 16 meshes compiled (0s); compiling data=1, data=2, data=4 and 2 more"
    )


def test_left_is_coarse() -> None:
    assert [_left(s) for s in (0, 59, 90, 150, 7200)] == [
        "under 1m left",
        "under 1m left",
        "about 2m left",
        "about 2m left",
        "about 2h 00m left",
    ]


def test_the_run_tells_which_meshes_compile_now(monkeypatch: Any) -> None:
    release = {name: threading.Event() for name in ("a", "b", "c")}

    def measure(spec: Any, mesh: dict[str, int], cache: bool = True) -> str:
        (name,) = mesh
        assert release[name].wait(30)
        return "not a report"

    monkeypatch.setattr(run_module, "_measure_on", measure)
    heard: list[tuple[tuple[str, ...], int]] = []
    progress: list[tuple[int, int]] = []

    def compiling(names: tuple[str, ...], seconds: tuple[float, ...]) -> None:
        heard.append((names, len(seconds)))
        assert all(s >= 0 for s in seconds)
        if len(heard) == 1:
            release["b"].set()  # the second finishes first
        elif len(seconds) == 1:
            release["a"].set()
            release["c"].set()

    to_compile: list[tuple[int, MeshAxes, int]] = [
        (k, ((name, 8),), 0) for k, name in enumerate("abc")
    ]
    spec: Any = None
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        rows = Run(
            pool, None, None, lambda d, t, r: progress.append((d, t)), None, compiling
        ).all(spec, to_compile)
    assert heard[0] == (("a=8", "b=8"), 0)  # two workers: the first two
    assert heard[1] == (("a=8", "c=8"), 1)  # b done: c took its worker
    assert heard[-1][1] >= 2
    assert progress[0] == (0, 3) and progress[-1] == (3, 3)
    assert [rows[k].outcome for k in range(3)] == ["failed"] * 3


def test_a_timeout_still_holds_with_the_callback(monkeypatch: Any) -> None:
    release = threading.Event()

    def measure(spec: Any, mesh: dict[str, int], cache: bool = True) -> str:
        assert release.wait(30)
        return "not a report"

    monkeypatch.setattr(run_module, "_measure_on", measure)
    heard: list[tuple[str, ...]] = []
    to_compile: list[tuple[int, MeshAxes, int]] = [
        (k, ((name, 1),), 0) for k, name in enumerate("ab")
    ]
    spec: Any = None
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        rows = Run(pool, None, 0.2, None, None, lambda n, s: heard.append(n)).all(
            spec, to_compile
        )
    finally:
        release.set()
        pool.shutdown(wait=True)
    assert [rows[k].outcome for k in range(2)] == ["timed out", "timed out"]
    assert heard[0] == ("a=1",)


def test_no_callback_no_change(monkeypatch: Any) -> None:
    monkeypatch.setattr(run_module, "_measure_on", lambda spec, mesh, cache=True: "no")
    spec: Any = None
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        rows = Run(pool, None, None, None, None).all(spec, [(0, (("a", 1),), 0)])
    assert rows[0].outcome == "failed"

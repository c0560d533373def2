"""``compare_meshes``: one compiled step per mesh, fanned out over an executor.

Rows are held against direct ``step_memory_report`` calls (the same numbers)
and against arithmetic (the argument bytes of each mesh, the factorisations of
8 devices written out by hand). Most tests submit to one worker thread, which
compiles in this process; the default process pool, a Dask cluster and the
command line each get one real run.
"""

import argparse
import concurrent.futures
import json
import multiprocessing
import re
import types
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import optax
import pytest
from distributed import Client, LocalCluster
from flax import nnx
from jax.sharding import PartitionSpec as P

from nnx_introspect._step import step_memory_report
from nnx_introspect._sweep.mesh_comparison import (
    MAX_AUTO_MESHES,
    MeshCandidate,
    MeshComparison,
    compare_meshes,
)
from nnx_introspect.cli.errors import UsageError
from nnx_introspect.cli.mesh_comparison import CompareLine, jobs_arg, run_compare
from nnx_introspect.cli.parser import build_parser

# up: (256, 2048) over (fsdp, tp); down: (2048, 256) over (tp, fsdp); no biases.
TARGET = "tests.platform_models:cpu_shy_mlp"
X = jax.ShapeDtypeStruct((8, 256), jnp.float32)
MESHES = ["fsdp=8,tp=1", "fsdp=2,tp=4", "fsdp=4,tp=2"]
BUDGET = 8 * 2**20
KERNELS = 2 * 256 * 2048 * 4 // 8  # both float32 kernels, split 8 ways on any mesh
COUNTERS = 8  # adamw's count and the optimizer's step, int32 each

# 3 -> 4 -> 4 linears, no sharding metadata: 144 bytes of parameters.
SMALL = "nnx_introspect.examples:two_layer"
SMALL_X = jax.ShapeDtypeStruct((8, 3), jnp.float32)


@pytest.fixture
def one_thread() -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        yield pool


@pytest.fixture(scope="module")
def pooled() -> MeshComparison:
    """The default process pool's comparison of three 8-device meshes."""
    return compare_meshes(TARGET, MESHES, X, optimizer="adamw", max_device_bytes=BUDGET)


def by_name(comparison: MeshComparison) -> dict[str, MeshCandidate]:
    return {c.name: c for c in comparison.candidates}


def test_each_row_is_a_direct_step_memory_report(pooled: MeshComparison) -> None:
    assert pooled.executor == "a spawn process pool of 2 workers"
    assert pooled.compiles == 3 and pooled.num_devices == 8
    for row in pooled.candidates:
        assert row.report is not None
        direct = step_memory_report(
            TARGET, dict(row.mesh), X, optimizer="adamw", max_device_bytes=BUDGET
        )
        fields = ("peak_bytes", "argument_bytes", "output_bytes", "temp_bytes")
        for field in (*fields, "alias_bytes", "num_devices", "step"):
            assert getattr(row.report, field) == getattr(direct, field), field
        # a worker of the default pool has the mesh's 8 devices: no child process
        assert row.report.compiled_in == "this process"
        fsdp = dict(row.mesh)["fsdp"]  # the batch's rows split over fsdp
        assert row.report.argument_bytes == 3 * KERNELS + 8 // fsdp * 256 * 4 + 8
        assert row.plan_bytes == 3 * KERNELS + COUNTERS


def test_fitting_meshes_come_first_lowest_peak_first(pooled: MeshComparison) -> None:
    peaks = [c.peak_bytes for c in pooled.candidates]
    assert [c.outcome for c in pooled.candidates] == ["fits"] * 3
    assert all(p is not None and p <= BUDGET for p in peaks)
    assert peaks == sorted(peaks)  # type: ignore[type-var]
    assert {c.name for c in pooled.candidates} == set(MESHES)
    assert pooled.best is pooled.candidates[0] and pooled.ok and pooled.fits()
    assert pooled.verdict.startswith(f"Best mesh: {pooled.best.name}, peak ")
    assert "(3 of 3 fit)" in pooled.verdict


def test_rows_sort_by_estimated_seconds_when_they_have_one(
    pooled: MeshComparison,
) -> None:
    from nnx_introspect._sweep.mesh_comparison import sort_key

    rows = list(pooled.candidates)
    timed = [
        MeshCandidate(r.mesh, r.outcome, None, r.report, r.plan_bytes, (s, s + 1))
        for r, s in zip(rows, (3.0, 1.0, 2.0), strict=True)
    ]
    ordered = sorted(enumerate(timed), key=lambda item: sort_key(*item))
    assert [r.estimated_seconds for _, r in ordered] == [(1, 2), (2, 3), (3, 4)]
    timed_comparison = MeshComparison(
        **{**pooled.__dict__, "candidates": tuple(r for _, r in ordered)}
    )
    table = timed_comparison.table()
    assert "step seconds (est.)" in table.columns
    assert table.rows[0][2] == "1-2"
    # the HTML plots each mesh's peak against its estimated time, as a segment
    # from perfect overlap to none
    page = timed_comparison.to_html()
    assert "peak per device against the estimated step time" in page
    assert page.count("per step (estimated)</title>") == 3
    best = timed_comparison.candidates[0]
    assert f"{best.name}: " in page and "1-2 s per step (estimated)" in page


def test_json_markdown_and_html(pooled: MeshComparison) -> None:
    data = json.loads(pooled.to_json())
    assert (data["schema"], data["version"]) == ("nnx-introspect/mesh-comparison", 1)
    assert data["ok"] is True and data["best"] == pooled.candidates[0].name
    assert data["max_device_bytes"] == BUDGET and data["auto_axes"] is None
    for row, entry in zip(pooled.candidates, data["candidates"], strict=True):
        assert entry["mesh"] == row.name and entry["outcome"] == "fits"
        assert entry["axis_names"] == ["fsdp", "tp"]
        assert entry["peak_bytes"] == row.peak_bytes
        assert entry["report"]["peak_bytes"] == row.peak_bytes
        assert entry["estimated_seconds"] is None  # XLA:CPU: no target to estimate
        # the wire bytes of the row's own compiled program, per axis
        assert row.report is not None and row.report.collective_wire_bytes
        assert entry["collective_bytes_by_axis"] == {
            ",".join(axes) or "one device": wire
            for axes, _, wire in row.report.collective_wire_bytes
            if wire
        }
    markdown = pooled.to_markdown()
    assert "| mesh | status | peak per device |" in markdown
    assert "collectives on the wire per device |" in markdown
    page = pooled.to_html()
    assert page.index('class="verdict ok"') < page.index("<svg") < page.index("<table")
    assert page.count("<rect ") == 3 and "budget 8 MiB" in page
    assert f"The step on {pooled.candidates[0].name}" in page


def test_a_dask_cluster_gives_the_same_rows(pooled: MeshComparison) -> None:
    # distributed's own annotations are partial (and absent without the extra)
    cluster = LocalCluster(  # type: ignore[no-untyped-call, unused-ignore]
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    )
    with cluster, Client(cluster) as client:  # type: ignore[no-untyped-call, unused-ignore]
        dask = compare_meshes(
            TARGET,
            MESHES,
            X,
            optimizer="adamw",
            max_device_bytes=BUDGET,
            executor=client.get_executor(),
        )
    assert dask.executor == "ClientExecutor"
    assert [c.name for c in dask.candidates] == [c.name for c in pooled.candidates]
    for mine, theirs in zip(dask.candidates, pooled.candidates, strict=True):
        assert mine.outcome == theirs.outcome and mine.plan_bytes == theirs.plan_bytes
        assert mine.report is not None and theirs.report is not None
        for field in ("argument_bytes", "output_bytes", "temp_bytes", "alias_bytes"):
            assert getattr(mine.report, field) == getattr(theirs.report, field)


def test_the_planner_rejects_before_compiling(
    one_thread: concurrent.futures.Executor,
) -> None:
    meshes = ["fsdp=8,tp=1", "data=8", "fsdp=1,tp=1,data=8", "fsdp=2,tp=4"]
    comparison = compare_meshes(
        TARGET,
        meshes,
        X,
        optimizer="adamw",
        max_device_bytes="4MiB",
        executor=one_thread,
    )
    rows = by_name(comparison)
    assert [c.name for c in comparison.candidates] == [
        "fsdp=2,tp=4",  # fits
        "fsdp=8,tp=1",  # compiled, over 4 MiB
        "data=8",  # rejected, in the order given
        "fsdp=1,tp=1,data=8",
    ]
    assert comparison.compiles == 2
    assert rows["fsdp=2,tp=4"].outcome == "fits"
    assert rows["fsdp=8,tp=1"].outcome == "does not fit"
    assert rows["fsdp=8,tp=1"].fits is False and rows["fsdp=2,tp=4"].fits is True
    unknown = rows["data=8"]
    assert unknown.outcome == "rejected" and unknown.report is None
    assert unknown.status.startswith("rejected by the planner: `down/kernel`: spec ")
    assert "which the mesh ('data',) lacks" in unknown.status
    replicated = rows["fsdp=1,tp=1,data=8"]  # 4 MiB of kernels on every device
    assert replicated.plan_bytes == 3 * 8 * KERNELS + COUNTERS
    assert replicated.status == (
        "rejected by the planner: the parameters, other state and optimizer state "
        "alone need 12 MiB per device, over the budget of 4 MiB"
    )
    assert "2 of 4 fit" not in comparison.verdict
    assert "(1 of 4 fit, 2 rejected by the planner)" in comparison.verdict
    notes = "\n".join(comparison.table().notes)
    assert "data=8: rejected by the planner: `down/kernel`" in notes


def test_auto_enumerates_every_factorisation(
    one_thread: concurrent.futures.Executor,
) -> None:
    # down/kernel (tp, fsdp) is the plan's first leaf, so tp appears first; fsdp,
    # a data-parallel name, goes first (outermost). The batch of 2 splits over
    # it, so fsdp=4 and fsdp=8 cannot take it.
    small = jax.ShapeDtypeStruct((2, 256), jnp.float32)
    comparison = compare_meshes(TARGET, "auto", small, executor=one_thread)
    assert comparison.auto_axes == ("fsdp", "tp")
    by_hand = {
        (("fsdp", 1), ("tp", 8)),
        (("fsdp", 2), ("tp", 4)),
        (("fsdp", 4), ("tp", 2)),
        (("fsdp", 8), ("tp", 1)),
    }
    assert {c.mesh for c in comparison.candidates} == by_hand
    rows = by_name(comparison)
    assert comparison.compiles == 2 and comparison.max_device_bytes is None
    for name in ("fsdp=4,tp=2", "fsdp=8,tp=1"):
        assert rows[name].outcome == "rejected"
        assert "does not divide over fsdp" in rows[name].status
    compiled = [c for c in comparison.candidates if c.report is not None]
    assert [c.outcome for c in compiled] == ["compiled", "compiled"]
    assert compiled[0].peak_bytes <= compiled[1].peak_bytes  # type: ignore[operator]
    assert comparison.ok  # no budget: the lowest peak is the answer
    assert comparison.verdict.startswith(f"Lowest peak: {compiled[0].name}, ")


def test_auto_axes_follow_batch_spec_then_logical_rules() -> None:
    # 1 byte: every plan is over the budget, so nothing compiles.
    comparison = compare_meshes(
        TARGET,
        "auto",
        X,
        batch_spec=P("data"),
        logical_rules=[("tp", "model"), ("fsdp", "shard")],
        max_device_bytes="1B",
    )
    assert comparison.auto_axes == ("data", "model", "shard")
    triples = {
        (a, b, c)
        for a in (1, 2, 4, 8)
        for b in (1, 2, 4, 8)
        for c in (1, 2, 4, 8)
        if a * b * c == 8
    }
    assert len(triples) == 10
    assert {tuple(s for _, s in c.mesh) for c in comparison.candidates} == triples
    assert all(c.outcome == "rejected" for c in comparison.candidates)
    assert comparison.compiles == 0 and not comparison.ok
    assert comparison.verdict == (
        "No mesh fits: none compiled (0 of 10 fit, 10 rejected by the planner)"
    )
    assert comparison.executor.startswith("nothing")


class Scripted(concurrent.futures.Executor):
    """Runs each call here, or answers for it as ``script`` says, by mesh."""

    def __init__(self, script: dict[str, Any]) -> None:
        self.script = script
        self.futures: list[concurrent.futures.Future[Any]] = []

    def submit(
        self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.futures.append(future)
        mesh = ",".join(f"{a}={s}" for a, s in args[1].items())
        answer = self.script.get(mesh, "run")
        if answer == "run":
            future.set_result(fn(*args, **kwargs))
        elif isinstance(answer, BaseException):
            future.set_exception(answer)
        # "pending": never answered
        return future


def test_a_failing_or_hung_candidate_becomes_a_row() -> None:
    executor = Scripted(
        {
            "data=4,x=2": RuntimeError("The child compile failed (exit code -9)"),
            "data=2,x=4": ValueError("`batch` is wrong somehow"),
            "data=1,x=8": "pending",
        }
    )
    comparison = compare_meshes(
        SMALL,
        ["data=1,x=8", "data=4,x=2", "data=8", "data=2,x=4"],
        SMALL_X,
        max_device_bytes="1MiB",
        executor=executor,
        timeout=0.2,
    )
    assert [(c.name, c.status) for c in comparison.candidates] == [
        ("data=8", "fits"),  # then the rest in the order given
        ("data=1,x=8", "timed out after 0.2 s"),
        ("data=4,x=2", "failed: RuntimeError: The child compile failed (exit code -9)"),
        ("data=2,x=4", "failed: ValueError: `batch` is wrong somehow"),
    ]
    assert executor.futures[0].cancelled()  # the hung one, not left to run
    assert comparison.ok and "2 failed, 1 timed out" in comparison.verdict
    data = json.loads(comparison.to_json())
    assert [c["outcome"] for c in data["candidates"]] == [
        "fits",
        "timed out",
        "failed",
        "failed",
    ]
    assert "<svg" in comparison.to_html()


def test_the_same_bad_input_error_from_every_compile_is_raised(
    one_thread: concurrent.futures.Executor,
) -> None:
    five = jax.ShapeDtypeStruct((8, 5), jnp.float32)  # the model takes 3 features
    with pytest.raises(ValueError, match=r"^`batch` \(float32\[8,5\]\) cannot be"):
        compare_meshes(SMALL, ["data=8", "data=4,x=2"], five, executor=one_thread)
    # one compile's ValueError among answers is that mesh's row, not the sweep's
    executor = Scripted({"data=4,x=2": ValueError("`batch` is wrong somehow")})
    comparison = compare_meshes(
        SMALL, ["data=8", "data=4,x=2"], SMALL_X, executor=executor
    )
    assert [c.outcome for c in comparison.candidates] == ["compiled", "failed"]


def test_interrupted_the_pending_compiles_are_cancelled() -> None:
    executor = Scripted({"data=8": "pending", "data=4,x=2": "pending"})

    def interrupt(done: int, total: int, row: object) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        compare_meshes(
            SMALL,
            ["data=8", "data=4,x=2"],
            SMALL_X,
            executor=executor,
            progress=interrupt,
        )
    assert all(f.cancelled() for f in executor.futures)


def test_interrupted_the_default_pool_leaves_no_process() -> None:
    before = set(multiprocessing.active_children())
    started: list[set[Any]] = []

    def interrupt(done: int, total: int, row: object) -> None:
        started.append(set(multiprocessing.active_children()) - before)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        compare_meshes(SMALL, ["data=8", "data=4,x=2"], SMALL_X, progress=interrupt)
    assert len(started) == 1 and started[0]  # the pool's workers were running
    assert set(multiprocessing.active_children()) - before == set()
    assert not any(process.is_alive() for process in started[0])


@pytest.mark.parametrize(
    ("meshes", "kwargs", "error", "match"),
    [
        ([], {}, ValueError, r"`meshes` must list at least one mesh, got an empty"),
        ("data=8", {}, ValueError, r"Wrap one mesh in a list: \['data=8'\]"),
        (["data=8", "data=0"], {}, ValueError, r"`meshes\[1\]\['data'\]` must be"),
        (
            ["data=8", "data=4", "data=2,x=2"],
            {},
            ValueError,
            r"`meshes` must all have the same number of devices \(candidates for "
            r"one machine\), got 8 \(meshes\[0\]\); 4 \(meshes\[1\], meshes\[2\]\)",
        ),
        (
            ["data=8", {"x": 8}, {"data": 8}, "data = 8"],
            {},
            ValueError,
            r"`meshes\[2\]` \(data=8\) repeats `meshes\[0\]`; `meshes\[3\]` "
            r"\(data=8\) repeats `meshes\[0\]`",
        ),
        (
            ["data=8", "data=4"],
            {"topology": "v5e-4"},
            ValueError,
            r"`meshes\[0\]` \(data=8\) has 8 devices, but `topology` 'v5e-4' has 4",
        ),
        (["data=8"], {"executor": 4}, TypeError, r"`executor` must be a concurrent"),
        (
            ["data=8"],
            {"executor": concurrent.futures.ThreadPoolExecutor(1), "max_workers": 2},
            ValueError,
            r"`max_workers` \(2\) sizes the default process pool",
        ),
        (["data=8"], {"max_workers": 0}, ValueError, r"`max_workers` must be a pos"),
        (["data=8"], {"timeout": 0}, ValueError, r"`timeout` must be a positive"),
        (["data=8"], {"timeout": float("nan")}, ValueError, r"`timeout` must be"),
        (
            ["data=8"],
            {"loss": lambda model, batch: model(batch[0]).sum()},
            ValueError,
            r"`loss` must be 'mean', 'lm', None or a function importable",
        ),
        (
            ["data=8"],
            {"optimizer": optax.adamw(1e-3)},
            ValueError,
            r"`optimizer` must be a name, one of \['adafactor'",
        ),
        (
            ["data=8"],
            {"loss": None, "optimizer": "adamw"},
            ValueError,
            r"`optimizer` 'adamw' needs a loss",
        ),
        (
            ["data=8"],
            {"rules": types.MappingProxyType({"kernel": P()})},
            ValueError,
            r"`rules` must be picklable: each candidate's step compiles in a worker",
        ),
        (
            "auto",
            {},
            ValueError,
            r"`meshes='auto'` found no mesh axis: the model's variables carry no",
        ),
        (
            "auto",
            {"batch_spec": P(("a", "b", "c", "d", "e")), "topology": "h100-2048"},
            ValueError,
            rf"gives 1365 candidates \(2048 devices over the axes a, b, c, d, e\), "
            rf"more than {MAX_AUTO_MESHES}",
        ),
    ],
)
def test_bad_input_is_refused_before_any_compile(
    meshes: Any, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    never = Scripted({})  # would compile: nothing may reach it
    if "executor" not in kwargs and "max_workers" not in kwargs:
        kwargs = {**kwargs, "executor": never}
    with pytest.raises(error, match=match):
        compare_meshes(SMALL, meshes, SMALL_X, **kwargs)
    assert never.futures == []


@pytest.mark.parametrize(
    ("target", "match"),
    [
        (lambda rngs: nnx.Linear(3, 4, rngs=rngs), "`target` must be passed as"),
        (nnx.Linear(3, 4, rngs=nnx.Rngs(0)), "`target` must be passed as"),
        ("tests.platform_models:nothing", r"`target` 'tests\.platform_models:nothing'"),
    ],
)
def test_a_target_must_be_named(target: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        compare_meshes(target, ["data=8"], SMALL_X, executor=Scripted({}))


def test_a_repeat_is_the_same_axes_sizes_and_order(
    one_thread: concurrent.futures.Executor,
) -> None:
    # "data=8,x=1" and "data=8" are two meshes; so are "data=2,x=4" and "x=4,data=2"
    meshes = ["data=8,x=1", "data=8", "data=2,x=4", "x=4,data=2"]
    comparison = compare_meshes(
        SMALL, meshes, SMALL_X, max_device_bytes="100B", executor=one_thread
    )
    assert sorted(c.name for c in comparison.candidates) == sorted(meshes)
    assert comparison.compiles == 0  # 144 bytes of parameters: over 100 B


@pytest.mark.parametrize("text", ["0", "-2", "2.5", "two", ""])
def test_jobs_must_be_a_positive_integer(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser(prog="nnx-introspect step")
    parser.add_argument("--jobs", type=jobs_arg)
    with pytest.raises(SystemExit):
        parser.parse_args(["--jobs", text])
    assert "argument --jobs: must be a positive integer" in capsys.readouterr().err
    assert parser.parse_args(["--jobs", "3"]).jobs == 3


def step_args(*extra: str) -> argparse.Namespace:
    """The ``step`` subcommand's arguments, as its parser gives them."""
    argv = ["step", SMALL, "--mesh", "data=8", "--batch", "float32[8,3]", *extra]
    return build_parser().parse_args(argv)


def test_cli_writes_the_comparison_and_exits_0(
    capfd: pytest.CaptureFixture[str],
) -> None:
    args = step_args("--format", "json", "--max-device-bytes", "1MiB")
    assert run_compare(args, ["data=8", "data=4,x=2"], 1) == 0
    out, err = capfd.readouterr()  # the workers' file descriptors too
    data = json.loads(out)
    assert data["schema"] == "nnx-introspect/mesh-comparison" and data["ok"]
    assert data["executor"] == "a spawn process pool of 1 worker"
    assert {c["mesh"] for c in data["candidates"]} == {"data=8", "data=4,x=2"}
    # stderr is no terminal: no worker noise, and plain progress lines only
    # when the run took longer than QUIET_SECONDS (each mesh as it compiles,
    # then the whole)
    lines = err.splitlines()
    assert all(line.startswith("nnx-introspect: ") for line in lines), err
    if lines:
        assert re.fullmatch(
            r"nnx-introspect: Comparing 2 meshes of nnx_introspect\.examples:"
            r"two_layer with XLA\.\.\. done \(\d+s\)",
            lines[-1],
        )
        assert all(
            re.match(r"nnx-introspect: [12] of 2 meshes compiled \(", line)
            for line in lines[:-1]
        )


def test_cli_exits_1_when_no_mesh_fits(capsys: pytest.CaptureFixture[str]) -> None:
    args = step_args("--format", "markdown", "--max-device-bytes", "100B")
    assert run_compare(args, ["data=8", "data=4,x=2"], None) == 1
    out, err = capsys.readouterr()
    assert out.startswith("**No mesh fits: none compiled")
    assert err == (
        "nnx-introspect: No mesh fits: none compiled (0 of 2 fit, 2 rejected by "
        "the planner).\n"
    )


@pytest.mark.parametrize(
    ("meshes", "extra", "match"),
    [
        (["auto", "data=8"], (), r"^argument --mesh: 'auto' compares every"),
        (["data=8", "data=4"], (), r"^argument --mesh: the meshes must all have"),
        (["data=8", "data=8"], (), r"^argument --mesh: the 2nd --mesh \(data=8\)"),
        (["data=8", "data=4,x=2"], ("--max-batch",), r"^argument --max-batch: "),
        (["data=8", "data=4,x=2"], ("--loss", "lm"), r"^argument --loss: "),
        (["data=8", "x=8"], ("--topology", "bogus-3"), r"^argument --topology: "),
    ],
)
def test_cli_bad_input_is_a_usage_error(
    meshes: list[str], extra: tuple[str, ...], match: str
) -> None:
    with pytest.raises(UsageError, match=match):
        run_compare(step_args(*extra), meshes, None)


def test_cli_progress_line() -> None:
    now = [100.0]
    line = CompareLine("Comparing 2 meshes...", clock=lambda: now[0])
    assert line.text() == "Comparing 2 meshes..."
    line.progress(0, 2, None)
    now[0] += 72
    assert line.text() == "0 of 2 meshes compiled (1m 12s)"
    row = MeshCandidate((("data", 8),), "rejected", "too big")
    line.progress(1, 2, row)
    assert line.text() == (
        "1 of 2 meshes compiled (1m 12s); data=8: rejected by the planner"
    )

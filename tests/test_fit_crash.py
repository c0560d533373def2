"""A crashed ``fit_step`` is a failure naming its cause, never "Nothing fits".

Each pool here breaks for real: a worker process dies (``os._exit`` while
building the target), or a script without the ``__main__`` guard re-runs
itself in every spawned worker.
"""

import json
import subprocess
import sys
import textwrap
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

import nnx_introspect as ni
from nnx_introspect._sweep.fit.crash import crash_cause, unguarded_main

DYING = textwrap.dedent(
    """
    import multiprocessing
    import os

    from nnx_introspect.examples import two_layer


    def model(rngs):
        if multiprocessing.parent_process() is not None:  # a pool's worker
            os._exit(7)
        return two_layer(rngs)
    """
)

FLAGS = ["--mesh", "data=8", "--batch", "float32[8,3]", "--max-device-bytes"]


def _run(
    args: list[str], cwd: Path, timeout: int = 300
) -> subprocess.CompletedProcess[str]:
    env = {**__import__("os").environ, "PYTHONPATH": f"{cwd}:" + ":".join(sys.path)}
    return subprocess.run(
        args, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env
    )


def test_a_worker_that_dies_is_a_failure_and_exit_code_3(tmp_path: Path) -> None:
    (tmp_path / "dying.py").write_text(DYING)
    run = _run(
        [
            sys.executable,
            "-m",
            "nnx_introspect",
            "step",
            "dying:model",
            *FLAGS,
            "1KiB",
            "--fit",
            "--jobs",
            "1",
            "--format",
            "json",
        ],
        tmp_path,
    )
    assert run.returncode == 3, run.stderr
    data = json.loads(run.stdout)
    assert data["ok"] is False
    assert data["failure"].startswith("the worker processes died (BrokenProcessPool")
    assert data["verdict"].startswith("The search failed: the worker processes died")
    assert "Nothing fits" not in run.stdout + run.stderr
    assert "__main__" not in data["failure"]  # the CLI has its guard
    assert all(r["status"] == "failed" for r in data["rows"])
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("nnx-introspect: The search failed"), run.stderr


def test_a_script_without_the_main_guard_is_named_with_its_fix(tmp_path: Path) -> None:
    script = tmp_path / "unguarded.py"
    script.write_text(
        textwrap.dedent(
            """
            import json
            import jax, jax.numpy as jnp
            import nnx_introspect as ni

            search = ni.fit_step(
                "nnx_introspect.examples:two_layer", "data=8",
                jax.ShapeDtypeStruct((8, 3), jnp.float32),
                max_device_bytes="1KiB", max_workers=1, topology=None,
            )
            print(json.dumps({"verdict": search.verdict, "failure": search.failure,
                              "notes": search.table().notes}))
            """
        )
    )
    run = _run([sys.executable, str(script)], tmp_path)
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout.strip().splitlines()[-1])
    assert data["failure"] is not None, data
    assert f"the script {script} has no `if __name__" in data["failure"]
    assert "put the script's calls under that guard" in data["failure"]
    assert data["verdict"].startswith("The search failed: the worker processes died")
    assert not any("Nothing fits" in n for n in [data["verdict"], *data["notes"]])


def test_the_guard_is_found_where_it_is_and_missed_where_it_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    main = sys.modules["__main__"]
    for source, unguarded in [
        ("x = 1\n", True),
        ("if __name__ == '__main__':\n    x = 1\n", False),
        ('if __name__ == "__main__":  # run\n    x = 1\n', False),
        ("# if __name__ == '__main__': in a comment only\n", True),
    ]:
        path = tmp_path / "script.py"
        path.write_text(source)
        monkeypatch.setattr(main, "__file__", str(path), raising=False)
        assert (unguarded_main() == str(path)) is unguarded, source
        cause = crash_cause(BrokenProcessPool("gone"), own_pool=True)
        assert ("has no `if __name__" in cause) is unguarded
        # a pool the caller passed in: its workers need not import the script
        assert "has no `if" not in crash_cause(BrokenProcessPool("x"), own_pool=False)


def test_a_failed_search_echoes_its_topology() -> None:
    row = ni.FitRow((("fsdp", 8),), (), 1, "failed", why="BrokenProcessPool: x")
    search = ni.FitSearch(
        "m:f",
        ("int32[8,512]",),
        "h100-8",
        2**30,
        "given",
        (row,),
        None,
        None,
        "",
        1,
        1.0,
        "a pool",
        failure="the worker processes died (x)",
    )
    text = search.to_markdown()
    assert (
        search.verdict == "The search failed on h100-8: the worker processes died (x)"
    )
    assert "No topology" not in text and "Nothing fits" not in text
    assert "Topology h100-8" in text
    plain = __import__("dataclasses").replace(search, topology=None, failure=None)
    assert "No topology, so no step-time estimate" in plain.to_markdown()
    assert plain.verdict.startswith("Nothing fits")

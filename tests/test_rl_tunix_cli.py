"""``rl`` as a newcomer meets it (issue 44, section 3): where its figures came
from, its flags' help, and mistakes caught before JAX starts."""

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from nnx_introspect import rl_memory_report
from nnx_introspect._xla.analysis import GPU_AUTOTUNE_WARNING
from nnx_introspect.examples import LlamaConfig, llama
from tests.cli_helpers import run

SMALL = llama(LlamaConfig(vocab=64, d_model=32, n_layers=2, n_heads=2, d_ff=64))
TINY = "tests.llama_tiny_layers:llama_small"
SIZES = ["--generations", "2", "--prompt", "8", "--completion", "8"]


def small(rngs: Any) -> Any:
    """The small Llama by name, for the command line."""
    return SMALL(rngs)


def test_the_report_says_where_its_figures_came_from(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compiler and its version, each program's time, the cache, the warning."""
    monkeypatch.setenv("NNX_INTROSPECT_CACHE", "on")
    monkeypatch.setenv("NNX_INTROSPECT_CACHE_DIR", str(tmp_path))
    kw: dict[str, Any] = {
        "batch": 1,
        "generations": 2,
        "prompt": 8,
        "completion": 8,
        "reference": False,
        "topology": "h100-2",
    }
    first = rl_memory_report(TINY, "tp=2", **kw)
    text = first.to_markdown()
    assert "on tp=2 (h100-2)" in text.splitlines()[0]
    assert "Compiled in a child process (h100-2) by XLA:GPU (jaxlib " in text
    for phase in ("prefill", "decode", "train"):
        assert f"{phase} " in text.split("Compiled in")[1]
    assert f"Warning: {GPU_AUTOTUNE_WARNING}" in text
    assert "from the cache" not in text
    data = json.loads(first.to_json())
    assert data["compiler"].startswith("XLA:GPU (jaxlib ")
    assert GPU_AUTOTUNE_WARNING in data["warnings"]
    assert all(p["compiled_in"] == "a child process (h100-2)" for p in data["phases"])
    again = rl_memory_report(TINY, "tp=2", **kw)
    assert all(p.cached is not None for p in again.phases)
    assert "from the cache (compiled on " in again.to_markdown()
    assert again.peak_bytes == first.peak_bytes


def test_without_a_topology_the_header_names_the_platform() -> None:
    found = rl_memory_report(
        SMALL,
        "data=2",
        batch=1,
        generations=2,
        prompt=4,
        completion=4,
        reference=False,
    )
    title = found.table().title
    assert "on data=2 (cpu)" in title and "this process's devices" not in title
    assert any(
        n.startswith("Compiled in this process by XLA:CPU (jaxlib ")
        for n in found.table().notes
    )


def _help(capsys: pytest.CaptureFixture[str]) -> str:
    code, out, _ = run(["rl", "--help"], capsys)
    assert code == 0
    return " ".join(out.split())


def test_the_help_says_what_each_flag_does(capsys: pytest.CaptureFixture[str]) -> None:
    words = _help(capsys)
    assert "every role on one mesh (colocated)" not in words
    assert "every role on --mesh (colocated) but those --role-mesh gives" in words
    assert "on the actor's devices unless --role-mesh critic=MESH" in words
    assert "run the compiled each" not in words
    assert "run the compiled program of each phase on this machine's" in words
    assert "adamw, lion, momentum, rmsprop, sgd (default adamw)" in words
    assert "--donate {optimizer,all}" in words
    assert "--rollout-weights DTYPE dtype of the rollout's weights: model" in words


def _cli(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``rl`` in a fresh process, and whether it imported JAX."""
    code = (
        "import sys\n"
        "from nnx_introspect.cli import main\n"
        f"code = main({argv!r})\n"
        "print('jax imported' if 'jax' in sys.modules else 'no jax')\n"
        "sys.exit(code)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)},
        check=False,
    )


def test_a_bad_optimizer_is_refused_before_jax() -> None:
    done = _cli(["rl", "tests.test_rl_tunix_cli:small", "--batch", "1", *SIZES,
                 "--optimizer", "adamx"])  # fmt: skip
    assert done.returncode == 2 and done.stdout.strip() == "no jax"
    assert "argument --optimizer: invalid choice: 'adamx'" in done.stderr
    assert "'adamw'" in done.stderr


def test_a_critic_with_several_generations_names_the_flag_before_jax() -> None:
    argv = ["rl", "tests.test_rl_tunix_cli:small", "--batch", "1", *SIZES]
    done = _cli([*argv, "--critic", "tests.test_rl_tunix_cli:small"])
    assert done.returncode == 2 and done.stdout.strip() == "no jax"
    assert done.stderr.count("\n") == 1
    assert "argument --generations:" in done.stderr
    assert "pass --generations 1, or no --critic" in done.stderr
    assert "generations=1" not in done.stderr


def test_sequences_that_do_not_split_name_rls_own_flags(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["rl", "tests.test_rl_tunix_cli:small", "--mesh", "fsdp=4"]
    code, _, err = run([*argv, "--batch", "2", "--generations", "3", *SIZES[2:]],
                       capsys)  # fmt: skip
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("nnx-introspect rl: error: argument --batch:")
    assert "--batch 2 x --generations 3 = 6 sequences" in err
    assert "Pass a --batch that is a multiple of 4." in err and "`" not in err
    assert "--prefill-sequences" not in err and "prefilled" not in err


def test_an_unknown_topology_is_refused_before_the_model(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[int] = []
    monkeypatch.setattr(sys.modules[__name__], "small", lambda rngs: built.append(1))
    argv = ["rl", "tests.test_rl_tunix_cli:small", "--batch", "1", *SIZES]
    code, _, err = run([*argv, "--topology", "h900-8"], capsys)
    assert code == 2 and "argument --topology:" in err and "'h900-8'" in err
    assert built == []

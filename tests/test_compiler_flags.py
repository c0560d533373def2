"""Compiler flags as a training run sets them reach the compile, and are listed.

``compiler_flags=`` (``--xla-flag``) is given to the compile as its options;
``LIBTPU_INIT_ARGS`` and ``XLA_FLAGS`` of the environment reach a child's
compile as they reach the user's own. The XLA:TPU checks compile
deviceless for a v5e-8 and hold the figures against the same program compiled
by hand with ``lowered.compile(compiler_options=...)``: turning
``xla_tpu_enable_async_collective_fusion`` off moves the program's bytes
accessed (the all-gathers are no longer fused with their consumers).
"""

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from nnx_introspect import (
    StepSpec,
    rl_memory_report,
    serve_memory_report,
    step_memory_report,
)
from nnx_introspect._step import ProgramNames, compile_or_recall
from nnx_introspect._typing import ArgumentError
from nnx_introspect._xla import (
    answer_key,
    as_compiler_flags,
    compile_key,
    libtpu_version,
)
from nnx_introspect._xla.analysis import compile_lowered
from nnx_introspect._xla.flags import CompilerFlag, flags_used
from tests.cli_helpers import run

X = jax.ShapeDtypeStruct((8, 3), jnp.float32)
TWO_LAYER = "nnx_introspect.examples:two_layer"
FUSION = "xla_tpu_enable_async_collective_fusion"
NO_TPU = pytest.mark.skipif(libtpu_version() is None, reason="libtpu is not installed")


# --- what a user may give, normalised ------------------------------------------


@pytest.mark.parametrize(
    "given",
    [
        {FUSION: False, "xla_tpu_x": 4},
        [f"--{FUSION}=false", "--xla_tpu_x=4"],
        [f"{FUSION}=false", ("xla_tpu_x", 4)],
        f"  --{FUSION}=false   --xla_tpu_x=4 ",  # as LIBTPU_INIT_ARGS spells them
        ((FUSION, "false"), ("xla_tpu_x", "4")),  # already normal
    ],
)
def test_every_form_is_the_same_pairs(given: Any) -> None:
    assert as_compiler_flags(given) == ((FUSION, "false"), ("xla_tpu_x", "4"))


def test_none_and_nothing_are_no_flags() -> None:
    assert (
        as_compiler_flags(None) == as_compiler_flags("") == as_compiler_flags({}) == ()
    )


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("--xla_a", "'--xla_a' has no value"),
        (["xla_a=1", "=2"], "'=2' names no flag"),
        ({"xla a": True}, "names no flag"),
        ({"xla_a": [1]}, "the value [1], a list"),
        ("--xla_a=1 --xla_a=2", "gives 'xla_a' twice ('1' and '2')"),
        ([3], "neither '--NAME=VALUE' nor a (name, value) pair"),
    ],
)
def test_a_malformed_entry_is_one_line_naming_compiler_flags(
    given: Any, said: str
) -> None:
    with pytest.raises(ArgumentError) as caught:
        as_compiler_flags(given)
    assert caught.value.argument == "compiler_flags"
    assert said in str(caught.value)
    assert "\n" not in str(caught.value)
    with pytest.raises(ArgumentError) as caught:  # where a spec is built, the same
        StepSpec(TWO_LAYER, "data=4", X, compiler_flags=given)
    assert caught.value.argument == "compiler_flags"


def test_the_spec_keeps_them_through_json() -> None:
    spec = StepSpec(TWO_LAYER, "data=4", X, compiler_flags={FUSION: False})
    assert spec.compiler_flags == ((FUSION, "false"),)
    assert StepSpec.from_json(spec.to_json()).compiler_flags == spec.compiler_flags
    assert spec.request().compiler_flags == spec.compiler_flags


# --- the environment's flags, listed -------------------------------------------


def test_the_environment_flags_and_the_given_ones_are_listed_with_their_sources() -> (
    None
):
    environ = {
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8 --xla_dump_to=/tmp/d",
        "LIBTPU_INIT_ARGS": f"--{FUSION}=true --xla_enable_async_all_gather",
    }
    assert flags_used([("xla_b", "1")], "tpu", environ) == (
        CompilerFlag("xla_dump_to", "/tmp/d", "XLA_FLAGS"),
        CompilerFlag(FUSION, "true", "LIBTPU_INIT_ARGS"),
        CompilerFlag("xla_enable_async_all_gather", "true", "LIBTPU_INIT_ARGS"),
        CompilerFlag("xla_b", "1", "compiler_flags"),
    )
    # libtpu's flags are a TPU compile's only
    assert [f.source for f in flags_used((), "gpu", environ)] == ["XLA_FLAGS"]


# --- on XLA:CPU: the flags reach the compile, a refusal is one line -------------


def test_the_report_lists_the_flags_it_compiled_with() -> None:
    report = step_memory_report(
        TWO_LAYER, "data=4", X, compiler_flags={"xla_cpu_enable_fast_math": True}
    )
    flag = CompilerFlag("xla_cpu_enable_fast_math", "true", "compiler_flags")
    assert report.compilation.compiler_flags == (flag,)
    text = str(report)
    assert "Compiler flags: xla_cpu_enable_fast_math=true (compiler_flags)." in text
    assert "xla_cpu_enable_fast_math=true (compiler_flags)" in report.to_markdown()
    data = json.loads(report.to_json())
    assert data["compiler_flags"] == [flag._asdict()]
    assert "xla_cpu_enable_fast_math=true (compiler_flags)" in report.to_html()


def test_without_flags_nothing_is_listed() -> None:
    report = step_memory_report(TWO_LAYER, "data=4", X)
    assert report.compilation.compiler_flags == ()
    assert "Compiler flags" not in str(report)
    assert json.loads(report.to_json())["compiler_flags"] == []


@pytest.mark.parametrize("mesh", ["data=4", "data=16"])  # here, and in a child
def test_an_unknown_flag_is_one_line_quoting_xla(mesh: str) -> None:
    batch = jax.ShapeDtypeStruct((16, 3), jnp.float32)
    with pytest.raises(ArgumentError) as caught:
        step_memory_report(
            TWO_LAYER, mesh, batch, compiler_flags="--not_a_flag_xyz=true"
        )
    assert caught.value.argument == "compiler_flags"
    said = str(caught.value)
    assert "No such compile option: 'not_a_flag_xyz'" in said
    assert "\n" not in said


def test_the_users_xla_flags_reach_a_child_beside_its_device_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # listed by the child from its own environment: kept, not overwritten by
    # the child's --xla_force_host_platform_device_count=16 (never listed)
    flags = "--xla_force_host_platform_device_count=8 --xla_cpu_enable_fast_math=true"
    monkeypatch.setenv("XLA_FLAGS", flags)
    batch = jax.ShapeDtypeStruct((16, 3), jnp.float32)
    report = step_memory_report(TWO_LAYER, "data=16", batch)
    assert report.compiled_in == "a child process with 16 virtual CPU devices"
    assert report.compilation.compiler_flags == (
        CompilerFlag("xla_cpu_enable_fast_math", "true", "XLA_FLAGS"),
    )


def test_a_value_xla_cannot_read_is_refused_in_its_words() -> None:
    # the value reached XLA: its own parser of the flag's type refused it
    with pytest.raises(ArgumentError) as caught:
        step_memory_report(
            TWO_LAYER, "data=4", X, compiler_flags={"xla_cpu_enable_fast_math": "x"}
        )
    assert caught.value.argument == "compiler_flags"
    assert "While setting option xla_cpu_enable_fast_math, 'x'" in str(caught.value)


def test_serving_lists_the_flags_of_both_programs() -> None:
    report = serve_memory_report(
        "nnx_introspect.examples:llama_tiny_sharded",
        "fsdp=2,tp=4",
        sequences=4,
        context=64,
        prompt=16,
        compiler_flags=["--xla_cpu_enable_fast_math=true"],
    )
    flag = CompilerFlag("xla_cpu_enable_fast_math", "true", "compiler_flags")
    assert report.prefill.compiler_flags == report.decode.compiler_flags == (flag,)
    assert "Compiler flags: xla_cpu_enable_fast_math=true" in str(report)
    assert json.loads(report.to_json())["decode"]["compiler_flags"] == [flag._asdict()]


# --- the cache never recalls a program compiled with other flags ----------------


def test_the_cache_key_holds_the_flags() -> None:
    mesh = jax.make_mesh((2,), ("data",))
    plain = compile_key("module @f {}", mesh)
    assert plain == compile_key("module @f {}", mesh, compiler_options={})
    assert plain != compile_key("module @f {}", mesh, compiler_options={FUSION: False})


def test_a_childs_answer_is_keyed_by_its_flags() -> None:
    spec = StepSpec(TWO_LAYER, "data=4", X)
    flagged = dataclasses.replace(spec, compiler_flags={FUSION: False})
    keys = {
        answer_key("nnx_introspect._step", s.json_data(), 4) for s in (spec, flagged)
    }
    assert len(keys) == 2


def test_a_program_compiled_with_other_flags_is_never_recalled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NNX_INTROSPECT_CACHE", "on")
    monkeypatch.setenv("NNX_INTROSPECT_CACHE_DIR", str(tmp_path))
    mesh = jax.make_mesh((2,), ("data",))
    lowered = jax.jit(jnp.sin).lower(jnp.ones((4, 4)))
    names = ProgramNames((), (), frozenset())
    fast = (("xla_cpu_enable_fast_math", "true"),)

    def compiled(flags: tuple[tuple[str, str], ...]) -> Any:
        start = time.perf_counter()
        return compile_or_recall(
            lowered, mesh, start, names, None, True, breakdown=False, flags=flags
        )

    assert compiled(()).cached is None
    assert compiled(()).cached is not None  # recalled
    other = compiled(fast)
    assert other.cached is None  # compiled anew, never the plain one's
    assert [tuple(f) for f in other.compiler_flags] == [
        ("xla_cpu_enable_fast_math", "true", "compiler_flags")
    ]
    assert compiled(fast).cached is not None
    assert compiled(()).compiler_flags == ()


# --- the command line --------------------------------------------------------------


def test_the_cli_flag_sets_them(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        [
            "step",
            TWO_LAYER,
            "--mesh",
            "data=4",
            "--batch",
            "float32[8,3]",
            "--xla-flag",
            "xla_cpu_enable_fast_math=true",
            "--format",
            "json",
        ],
        capsys,
    )
    assert code == 0
    assert json.loads(out)["compiler_flags"] == [
        {
            "name": "xla_cpu_enable_fast_math",
            "value": "true",
            "source": "compiler_flags",
        }
    ]


@pytest.mark.parametrize(
    ("flag", "said"),
    [
        ("xla_cpu_enable_fast_math", "must be NAME=VALUE"),
        ("not_a_flag_xyz=1", "No such compile option: 'not_a_flag_xyz'"),
    ],
)
def test_a_bad_cli_flag_exits_2_naming_it(
    flag: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["step", TWO_LAYER, "--mesh", "data=4", "--batch", "float32[8,3]"]
    code, _, err = run([*argv, "--xla-flag", flag], capsys)
    assert code == 2
    assert err.startswith("nnx-introspect step: error: argument --xla-flag: ")
    assert said in err
    assert "compiler_flags" not in err  # the flag's name, not the argument's


def test_serve_takes_the_cli_flag_for_one_report_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["serve", "nnx_introspect.examples:llama_tiny_sharded", "--mesh", "tp=2"]
    argv += ["--sequences", "4", "--max-context", "--max-device-bytes", "1GiB"]
    code, _, err = run([*argv, "--xla-flag", "xla_cpu_enable_fast_math=true"], capsys)
    assert code == 2
    assert "argument --xla-flag: compiles the two programs of one report" in err


# --- XLA:TPU, deviceless: the flag changes the program as a hand-written compile --


def _fsdp_gradient(mesh: Any) -> Any:
    """A small FSDP gradient: every weight all-gathered before its matmul."""

    def loss(weights: list[Any], x: Any) -> Any:
        for w in weights:
            x = jnp.tanh(x @ w)
        return x.sum()

    shard = NamedSharding(mesh, P("data", None))
    weights = [jax.ShapeDtypeStruct((1024, 1024), jnp.bfloat16, sharding=shard)] * 4
    x = jax.ShapeDtypeStruct((64, 1024), jnp.bfloat16, sharding=shard)
    return jax.jit(jax.grad(loss)).lower(weights, x)


@NO_TPU
def test_a_tpu_flag_compiles_as_the_hand_written_compile() -> None:
    from nnx_introspect._xla import topology_mesh

    mesh, _ = topology_mesh("v5e-8", (("data", 8),))
    lowered = _fsdp_gradient(mesh)
    by_hand = {
        options is not None: lowered.compile(compiler_options=options)
        .cost_analysis()
        .get("bytes accessed")
        for options in (None, {FUSION: False})
    }
    assert by_hand[True] != by_hand[False]  # the flag moves the program
    for flagged in (False, True):
        flags = ((FUSION, "false"),) if flagged else ()
        readings = compile_lowered(lowered, mesh, time.perf_counter(), flags=flags)
        assert readings.bytes_accessed == by_hand[flagged]
    with pytest.raises(ArgumentError, match="No such compile option: 'xla_nope'"):
        compile_lowered(lowered, mesh, time.perf_counter(), flags=(("xla_nope", "1"),))


_IN_PROCESS = textwrap.dedent(
    """
    import json, sys, time
    sys.path.insert(0, {root!r})
    from tests.test_compiler_flags import _fsdp_gradient
    from nnx_introspect._xla import topology_mesh
    from nnx_introspect._xla.analysis import compile_lowered

    mesh, _ = topology_mesh("v5e-8", (("data", 8),))
    readings = compile_lowered(_fsdp_gradient(mesh), mesh, time.perf_counter())
    print(json.dumps([readings.bytes_accessed, readings.compiler_flags]))
    """
)


@NO_TPU
def test_libtpu_init_args_reach_an_in_process_compile() -> None:
    """libtpu reads ``LIBTPU_INIT_ARGS`` when it loads: a process of its own."""
    from nnx_introspect._xla import topology_mesh

    mesh, _ = topology_mesh("v5e-8", (("data", 8),))
    by_hand = (
        _fsdp_gradient(mesh)
        .compile(compiler_options={FUSION: False})
        .cost_analysis()
        .get("bytes accessed")
    )
    root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, LIBTPU_INIT_ARGS=f"--{FUSION}=false")
    env["PYTHONPATH"] = os.pathsep.join([*sys.path, root])
    done = subprocess.run(
        [sys.executable, "-c", _IN_PROCESS.format(root=root)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    accessed, flags = json.loads(done.stdout.strip().splitlines()[-1])
    assert accessed == by_hand
    assert flags == [[FUSION, "false", "LIBTPU_INIT_ARGS"]]


@pytest.fixture(scope="module")
def tpu_step() -> Any:
    """A small Llama's FSDP step for v5e-8 (2 layers of width 32), compiled in a
    child as a user's is."""

    def report(**options: Any) -> Any:
        return step_memory_report(
            "tests.llama_tiny_layers:llama_small_sharded",
            "fsdp=8,tp=1",
            jax.ShapeDtypeStruct((8, 64), jnp.int32),
            loss="lm",
            optimizer="adamw",
            topology="v5e-8",
            cache=False,
            **options,
        )

    return report


@NO_TPU
def test_the_child_honours_libtpu_init_args_as_compiler_flags(
    tpu_step: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = tpu_step()
    given = tpu_step(compiler_flags={FUSION: False})
    monkeypatch.setenv("LIBTPU_INIT_ARGS", f"--{FUSION}=false")
    from_environment = tpu_step()
    assert plain.compiled_in == "a child process (v5e-8)"
    assert plain.compilation.compiler_flags == ()
    assert plain.temp_bytes != given.temp_bytes  # the flag moved the program
    assert given.temp_bytes == from_environment.temp_bytes
    assert given.program.bytes_accessed == from_environment.program.bytes_accessed
    assert given.compilation.compiler_flags == (
        CompilerFlag(FUSION, "false", "compiler_flags"),
    )
    assert from_environment.compilation.compiler_flags == (
        CompilerFlag(FUSION, "false", "LIBTPU_INIT_ARGS"),
    )
    assert f"Compiler flags: {FUSION}=false (LIBTPU_INIT_ARGS)." in (
        str(from_environment)
    )


def test_an_rl_step_compiles_every_program_with_the_flags() -> None:
    report = rl_memory_report(
        "nnx_introspect.examples:llama_tiny_sharded",
        "fsdp=2,tp=4",
        batch=2,
        generations=2,
        prompt=8,
        completion=8,
        compiler_flags=["--xla_cpu_enable_fast_math=true"],
    )
    flag = CompilerFlag("xla_cpu_enable_fast_math", "true", "compiler_flags")
    assert report.compiler_flags == (flag,)
    rollout = report.programs["rollout"]
    assert rollout.prefill.compiler_flags == rollout.decode.compiler_flags == (flag,)
    for name in ("train", "reference"):  # the learners' step reports, as compiled
        listed = json.loads(report.programs[name].to_json())["compiler_flags"]
        assert listed == [flag._asdict()], name
    assert "Compiler flags: xla_cpu_enable_fast_math=true (compiler_flags)." in str(
        report
    )
    assert json.loads(report.to_json())["compiler_flags"] == [flag._asdict()]


def test_rl_takes_the_cli_flag_for_one_step_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["rl", "nnx_introspect.examples:llama_tiny_sharded", "--mesh", "fsdp=2"]
    argv += ["--max-batch", "--generations", "2", "--prompt", "8"]
    argv += ["--completion", "8", "--max-device-bytes", "1GiB"]
    code, _, err = run([*argv, "--xla-flag", "xla_cpu_enable_fast_math=true"], capsys)
    assert code == 2
    assert "argument --xla-flag: compiles the programs of one step" in err

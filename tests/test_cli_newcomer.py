"""Issue 24's newcomer's list, "CLI errors": found early, said in the flags' words.

Flags that contradict each other fail before JAX is imported (a subprocess
shows ``jax`` never loaded); the library's Python spellings (``meshes[1]``,
``network_bytes_per_second``) reach the user as the flags they typed;
``--network-bandwidth`` takes bits per second; a misspelt mesh axis is a usage
error before anything compiles; ``--mesh Auto`` is refused.
"""

import argparse
import os
import subprocess
import sys
import time
from typing import Any

import pytest

import nnx_introspect._sweep as meshes_module  # the face the command line calls
from nnx_introspect._step.inputs import as_network
from nnx_introspect._sweep.mesh_comparison import compare_meshes
from nnx_introspect._sweep.mesh_comparison.candidates import named_axes
from nnx_introspect._typing import ArgumentError
from nnx_introspect.cli import main
from nnx_introspect.cli.checks import _cpu_devices
from nnx_introspect.cli.errors import SPELLINGS, in_flags, usage_error
from nnx_introspect.cli.preflight import check_axes_named
from nnx_introspect.cli.rates import rate_bytes
from tests.cli_helpers import run, usage

SMALL = "nnx_introspect.examples:two_layer"
STEP = ["step", SMALL, "--batch", "float32[8,3]"]
SHY = "tests.platform_models:cpu_shy_mlp"  # names fsdp and tp
SHY_STEP = ["step", SHY, "--batch", "float32[8,256]"]


# --- before JAX: each in a fresh process that never imports it -------------------

EARLY = [
    (
        ["--mesh", "data=8", "--top", "5"],
        "argument --top: shows the largest buffers of the breakdown; add --breakdown",
    ),
    (
        ["--mesh", "data=8", "--jobs", "2"],
        "argument --jobs: compiles several meshes at once; give --mesh more than "
        "once, or --mesh auto",
    ),
    (
        ["--mesh", "data=8", "--mesh", "data=4,x=2", "--breakdown"],
        "argument --breakdown: breaks down the peak of one step, not a comparison "
        "of several --mesh; compare first, then run the best mesh with --breakdown",
    ),
    (
        ["--mesh", "auto", "--breakdown"],
        "argument --breakdown: breaks down the peak of one step, not a comparison "
        "of several --mesh; compare first, then run the best mesh with --breakdown",
    ),
    (
        ["--mesh", "auto"],
        "argument --mesh: 'auto' factors the device count of a --topology (such as "
        "h100-8 or v5e-16), and this process has 1 CPU device; give a --topology, "
        "or list the meshes",
    ),
    (
        ["--mesh", "data=8", "--mesh", "data=8.0"],
        "argument --mesh: the 2nd --mesh (data=8.0) repeats the 1st; give each "
        "mesh once, with the same device count",
    ),
    (
        ["--mesh", "data=8", "--mesh", "data=4", "--mesh", "data=2,x=2"],
        "argument --mesh: every --mesh must have the same number of devices "
        "(candidates for one machine), got 8 (the 1st --mesh); 4 (the 2nd and 3rd "
        "--mesh); give each mesh once, with the same device count",
    ),
    (
        ["--mesh", "data=8", "--network-bandwidth", "400Gbps"],
        "argument --network-bandwidth: sets the network per GPU between the hosts "
        "of a GPU --topology, and no --topology was given; name one of several "
        "hosts (such as h100-16), or leave --network-bandwidth out",
    ),
    (
        ["--mesh", "data=8", "--mesh", "x=8", "--network-bandwidth", "50GB"],
        "argument --network-bandwidth: sets the network per GPU between the hosts "
        "of a GPU --topology, and no --topology was given; name one of several "
        "hosts (such as h100-16), or leave --network-bandwidth out",
    ),
]


def _early(argv: list[str]) -> tuple[int, str, list[str], float]:
    """``main(argv)`` in a fresh process: code, stderr, heavy modules, seconds."""
    code = (
        "import sys, time\n"
        "from nnx_introspect.cli import main\n"
        "began = time.perf_counter()\n"
        f"code = main({argv!r})\n"
        "seconds = time.perf_counter() - began\n"
        "heavy = [m for m in ('jax', 'jaxlib', 'flax', 'numpy') if m in sys.modules]\n"
        "print(code, heavy, seconds, sep='|')\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS",)}
    env["XLA_FLAGS"] = ""  # one CPU device, as a user's shell has
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True, text=True, check=True, timeout=120, env=env,
    )  # fmt: skip
    exit_code, heavy, seconds = result.stdout.strip().split("|")
    return int(exit_code), result.stderr, eval(heavy), float(seconds)


@pytest.mark.parametrize(("argv", "message"), EARLY)
def test_refused_before_jax_is_imported(argv: list[str], message: str) -> None:
    code, err, heavy, seconds = _early([*STEP, *argv])
    assert (code, heavy) == (2, [])
    assert err == usage("step", f"nnx-introspect: error: {message}\n")
    assert seconds < 1.0


def test_the_jax_free_check_runs_before_jax_in_process_too(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # a handler that would start JAX is never reached
    monkeypatch.setattr("nnx_introspect.cli.entry.start_jax_quietly", _never)
    code, out, err = run([*STEP, "--mesh", "data=8", "--top", "3"], capsys)
    assert (code, out) == (2, "")
    assert err.startswith("nnx-introspect step: error: argument --top: ")


def _never() -> None:
    raise AssertionError("JAX started")


def test_cpu_devices_are_predicted_as_jax_counts_them() -> None:
    flags = "--xla_force_host_platform_device_count=8"
    assert _cpu_devices({}) == 1
    assert _cpu_devices({"JAX_PLATFORMS": "cpu", "XLA_FLAGS": flags}) == 8
    assert _cpu_devices({"XLA_FLAGS": flags, "JAX_NUM_CPU_DEVICES": "2"}) == 2
    assert _cpu_devices({"JAX_PLATFORMS": "cuda", "XLA_FLAGS": flags}) is None
    assert _cpu_devices({"JAX_PLATFORMS": "cuda,cpu"}) is None  # JAX decides


def test_auto_with_devices_is_not_refused_early(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # this process has 8 CPU devices (XLA_FLAGS): the comparison starts
    called: list[Any] = []
    monkeypatch.setattr(meshes_module, "compare_meshes", _records(called))
    code, _, err = run([*STEP, "--mesh", "auto"], capsys)
    assert code == 2 and called and called[0][1] == "auto"
    assert err == usage("step", "nnx-introspect: error: argument --jobs: stop.\n")


def _records(called: list[Any]) -> Any:
    def compare(*args: Any, **kwargs: Any) -> None:
        called.append(args)
        raise ArgumentError("max_workers", "stop.")

    return compare


# --- the flags the user typed, not Python's names ----------------------------------


LIBRARY = {
    "kv cache choice": (
        "`kv_cache` must be one of bfloat16, float8_e4m3fn, int8, float32, got "
        "'f16'. Pass e.g. kv_cache='bfloat16'.",
        "--kv-cache must be one of bfloat16, float8_e4m3fn, int8, float32, got "
        "'f16'. Pass e.g. --kv-cache bf16.",
    ),
    "kv cache dtype": (
        "`kv_cache` 'bfloat16': the model writes its keys and values in float32 "
        "(TypeError: ...). Pass kv_cache='float32' (--kv-cache float32), or make "
        "the model compute its keys and values in bfloat16.",
        "--kv-cache bfloat16: the model writes its keys and values in float32 "
        "(TypeError: ...). Pass --kv-cache float32, or make the model compute its "
        "keys and values in bfloat16.",
    ),
    "sequences split": (
        "`sequences` 6 (prefilled 3 at a time) does not split over the 4 "
        "data-parallel devices of the mesh. Pass a multiple of 4.",
        "--sequences 6 (--prefill-sequences 3) does not split over the 4 "
        "data-parallel devices of the mesh. Pass a multiple of 4.",
    ),
    "prefill more": (
        "`prefill_sequences` 8 is more than `sequences` 4. Pass at most 4.",
        "--prefill-sequences 8 is more than --sequences 4. Pass at most 4.",
    ),
    "kv heads": (
        "`mesh` {'tp': 3} does not divide the 4 KV heads of the cache.",
        "--mesh tp=3 does not divide the 4 KV heads of the cache.",
    ),
    "no budget": (
        "the search needs a budget: pass a `topology` (its device's memory) or "
        "`max_device_bytes`.",
        "the search needs a budget: pass a --topology (its device's memory) or "
        "--max-device-bytes.",
    ),
    "topology": (
        "`meshes[0]` (data=8) has 8 devices, but `topology` 'v5e-4' has 4; "
        "`meshes[1]` (data=4,x=2) has 8 devices, but `topology` 'v5e-4' has 4. "
        "Give each candidate once, with the same device count as `topology` "
        "'v5e-4'.",
        "the 1st --mesh (data=8) has 8 devices, but --topology v5e-4 has 4; the 2nd "
        "--mesh (data=4,x=2) has 8 devices, but --topology v5e-4 has 4. Give each "
        "candidate once, with the same device count as --topology v5e-4.",
    ),
    "no axes": (
        "`meshes='auto'` found no mesh axis: the model's variables carry no sharding "
        "metadata, and neither `rules`, `logical_rules` nor `batch_spec` names one. "
        "List the meshes, or pass `rules` that shard the parameters.",
        "--mesh auto found no mesh axis: the model's variables carry no sharding "
        "metadata, and no --rules name one. List the meshes, or pass --rules that "
        "shard the parameters.",
    ),
    "too many": (
        "`meshes='auto'` gives 600 candidates (4096 devices over the axes a, b, c), "
        "more than 512. List the meshes to compare, or name fewer axes.",
        "--mesh auto gives 600 candidates (4096 devices over the axes a, b, c), more "
        "than 512. List the meshes to compare, or name fewer axes.",
    ),
    "different counts": (
        "`meshes` must all have the same number of devices (candidates for one "
        "machine), got 8 (meshes[0]); 4 (meshes[1]).",
        "the meshes must all have the same number of devices (candidates for one "
        "machine), got 8 (the 1st --mesh); 4 (the 2nd --mesh).",
    ),
    "cpu devices": (
        "`meshes` have 128 devices: more than the 64 virtual CPU devices a compile "
        "may use. Compare smaller meshes, or name a TPU or GPU `topology`.",
        "the meshes have 128 devices: more than the 64 virtual CPU devices a "
        "compile may use. Compare smaller meshes, or name a TPU or GPU --topology.",
    ),
    "network": (
        "`network_bytes_per_second` 50000000000 is the network between GPU hosts, "
        "but `topology` is 'v5e-8'. Pass a GPU topology such as 'h100-256', or "
        "leave it out.",
        "--network-bandwidth is the network between GPU hosts, but --topology is "
        "v5e-8. Pass a GPU --topology such as h100-256, or leave --network-bandwidth "
        "out.",
    ),
    "network, no topology": (
        "`network_bytes_per_second` '50GB' is the network between GPU hosts, but "
        "`topology` is None. Pass a GPU topology such as 'h100-256', or leave it "
        "out.",
        "--network-bandwidth is the network between GPU hosts, but no --topology "
        "was given. Pass a GPU --topology such as h100-256, or leave "
        "--network-bandwidth out.",
    ),
}


@pytest.mark.parametrize("case", LIBRARY)
def test_python_spellings_become_flags(case: str) -> None:
    python, cli = LIBRARY[case]
    assert in_flags(python) == cli
    args = argparse.Namespace(rules=None, topology="v5e-4")
    argument = "network_bytes_per_second" if "network" in case else "meshes"
    flag = "--network-bandwidth" if "network" in case else "--mesh"
    error = usage_error(ArgumentError(argument, python), args)
    assert str(error) == f"argument {flag}: {cli}"


def test_every_spelling_rewrites_a_library_message() -> None:
    used = {
        i
        for python, _ in LIBRARY.values()
        for i, (pattern, _) in enumerate(SPELLINGS)
        if pattern.search(python)
    }
    assert used == set(range(len(SPELLINGS)))


def test_the_library_messages_are_the_ones_rewritten() -> None:
    # the Python callers keep their words; the table matches them
    with pytest.raises(ValueError) as info:
        as_network("50GB", None)
    assert str(info.value) == LIBRARY["network, no topology"][0]
    with pytest.raises(ValueError) as info:
        as_network(50 * 10**9, "v5e-8")
    assert str(info.value) == LIBRARY["network"][0]
    with pytest.raises(ValueError) as info:
        compare_meshes(SMALL, "auto", _x())
    assert str(info.value) == LIBRARY["no axes"][0]


def _x() -> Any:
    import jax
    import jax.numpy as jnp

    return jax.ShapeDtypeStruct((8, 3), jnp.float32)


def test_topology_mismatch_names_the_meshes_as_typed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [*STEP, "--mesh", "data=8", "--mesh", "data=4,x=2", "--topology", "v5e-4"]
    code, out, err = run(argv, capsys)
    assert (code, out) == (2, "")
    assert err == usage(
        "step", f"nnx-introspect: error: argument --mesh: {LIBRARY['topology'][1]}\n"
    )


# --- --network-bandwidth: bits or bytes per second ----------------------------------

RATES = {
    "400Gbps": 50 * 10**9,
    "400Gb/s": 50 * 10**9,
    "400 Gbit/s": 50 * 10**9,
    "400gbps": 50 * 10**9,
    "100Mbps": 12_500_000,
    "1.6Tb/s": 200 * 10**9,
    "8bps": 1,
    "50GB": 50 * 10**9,
    "50GB/s": 50 * 10**9,
    "50GBps": 50 * 10**9,
    "46.5GiB": int(46.5 * 2**30),
    "1GiB/s": 2**30,
    "4096B": 4096,
}
BAD_RATES = ["400Gb", "50gb", "4096b", "50", "lots", "0GB", "0Gbps", "1bps", "1e400GB"]


@pytest.mark.parametrize(("text", "value"), RATES.items())
def test_rates_in_bits_and_bytes(text: str, value: int) -> None:
    assert rate_bytes(text) == value
    assert as_network(text, "h100-16") == value  # the library reads it the same
    code = main([*STEP, "--mesh", "data=8", "--network-bandwidth", text, "--help"])
    assert code == 0


@pytest.mark.parametrize("text", BAD_RATES)
def test_bad_rates_are_refused_by_both(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ValueError):
        rate_bytes(text)
    with pytest.raises(ValueError, match="network_bytes_per_second"):
        as_network(text, "h100-16")
    argv = [*STEP, "--mesh", "data=8", "--topology", "h100-16"]
    code, out, err = run([*argv, "--network-bandwidth", text], capsys)
    assert (code, out) == (2, "")
    assert err.startswith("nnx-introspect step: error: argument --network-bandwidth: ")


def test_an_ambiguous_rate_says_both_spellings() -> None:
    with pytest.raises(ValueError) as info:
        rate_bytes("400Gb")
    assert str(info.value) == (
        "'400Gb' may be bits or bytes: write 400Gb/s or 400Gbps for bits per "
        "second, 400GB or 400GB/s for bytes per second"
    )


def test_help_names_the_units(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["step", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "400Gb/s, 400Gbps, 100Mbps" in text
    assert "50GB, 50GB/s, 50GBps" in text


def test_network_bandwidth_on_one_host_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for meshes in (["data=8"], ["data=8", "x=8"]):
        argv = [*STEP, *(a for m in meshes for a in ("--mesh", m))]
        argv += ["--topology", "h100-8", "--network-bandwidth", "400Gbps"]
        began = time.perf_counter()
        code, out, err = run(argv, capsys)
        assert time.perf_counter() - began < 10  # nothing compiled
        assert (code, out) == (2, "")
        assert err == usage(
            "step",
            "nnx-introspect: error: argument --network-bandwidth: --topology h100-8 "
            "is one host of 8 GPUs, which talk over NVLink only: no byte crosses the "
            "network, so the bandwidth would change nothing; leave "
            "--network-bandwidth out, or name a topology of several hosts (such as "
            "h100-16, two hosts of 8)\n",
        )


# --- a misspelt mesh axis: a usage error before any compile -------------------------


def test_the_model_axes_are_read_without_compiling() -> None:
    assert set(named_axes(SHY)) == {"fsdp", "tp"}
    assert named_axes(SMALL) == ()


def test_a_misspelt_axis_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    called: list[Any] = []
    monkeypatch.setattr(meshes_module, "compare_meshes", _records(called))
    argv = [*SHY_STEP, "--mesh", "fsdp=2,tp=4", "--mesh", "fsdp=2,tpp=4"]
    code, out, err = run(argv, capsys)
    assert (code, out, called) == (2, "", [])
    named = ", ".join(named_axes(SHY))
    assert err == usage(
        "step",
        "nnx-introspect: error: argument --mesh: axis 'tpp' of the 2nd --mesh "
        "(fsdp=2,tpp=4) (did you mean 'tp'?) is named by nothing in the step: the "
        f"model's sharding and --rules name {named}, and the batch splits over "
        "each mesh's first axis; fix the spelling, or leave the axis out\n",
    )


def test_which_axes_count_as_misspelt() -> None:
    named = ("fsdp", "tp")
    check_axes_named(["fsdp=8", "fsdp=4,tp=2", "tp=8", "data=2,fsdp=4"], named)
    check_axes_named(["data=4,x=2", "x=4,data=2"], ())  # nothing named: no check
    for meshes, word in [
        (["fsdp=2,tpp=4"], "'tpp'"),
        (["fsdpp=4,tp=2"], "'fsdpp'"),  # the batch's axis, but fsdp misspelt
        (["fsdp=2,tp=2,x=2"], "'x'"),  # an axis nothing shards over
    ]:
        with pytest.raises(Exception, match=f"axis {word} of the 1st --mesh"):
            check_axes_named(meshes, named)


def test_python_callers_keep_their_rejected_row() -> None:
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        comparison = compare_meshes(
            SHY, ["fsdp=2,tpp=4"], _shy_x(), max_device_bytes="1B", executor=pool
        )
    assert [c.outcome for c in comparison.candidates] == ["rejected"]


def _shy_x() -> Any:
    import jax
    import jax.numpy as jnp

    return jax.ShapeDtypeStruct((8, 256), jnp.float32)


# --- --mesh auto, spelt so ----------------------------------------------------------


@pytest.mark.parametrize("text", ["Auto", "AUTO", " auto"])
def test_auto_in_another_case_is_refused(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run([*STEP, "--mesh", text], capsys)
    assert (code, out) == (2, "")
    assert err == (
        "nnx-introspect step: error: argument --mesh: write 'auto' (lower case) to "
        f"compare every factorisation of the devices, got {text!r} (see "
        "'nnx-introspect step --help')\n"
    )

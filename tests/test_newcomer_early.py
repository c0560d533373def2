"""Issue 44's newcomer's list, item 8: mistakes refused before JAX and the model load.

Each took 3-13 s (JAX's start, the model's build) to be refused; now each is
refused by :func:`nnx_introspect.cli.early.check_early` before either: run
in-process with JAX's start replaced by a failure (nothing past the check may
run), and once in a fresh process that never imports JAX. Each message names
the flag, and a misspelt target gets the closest name.
"""

import os
import pathlib
import re
import subprocess
import sys
from typing import Any

import pytest

from nnx_introspect._accelerators import resolve_topology
from nnx_introspect._targets import TargetError, check_target, resolve_factory
from nnx_introspect._typing import ArgumentError
from nnx_introspect.cli.dtypes import DTYPES
from nnx_introspect.cli.errors import in_flags
from nnx_introspect.cli.topology_names import topology_devices
from nnx_introspect.examples import two_layer
from tests.cli_helpers import run, usage

TWO = "nnx_introspect.examples:two_layer"
TINY = "nnx_introspect.examples:llama_tiny"
STEP = ["step", TWO, "--mesh", "data=8", "--batch", "float32[8,3]"]
SERVE = ["serve", TINY, "--sequences", "2", "--context", "16"]
RL = ["rl", TINY, "--batch", "2", "--generations", "2", "--prompt", "4"]
RL += ["--completion", "4"]

E = "nnx-introspect: error: "

CASES: dict[str, tuple[list[str], str]] = {
    "target without a colon": (
        ["summary", "llama_7b"],
        E + "TARGET must look like 'package.module:callable', got 'llama_7b'. For "
        "example: nnx_introspect.examples:llama_7b_sharded.\n",
    ),
    "target misspelt": (
        ["summary", "nnx_introspect.examples:lama_7b"],
        E + "module 'nnx_introspect.examples' has no attribute 'lama_7b' (TARGET "
        "'nnx_introspect.examples:lama_7b') (did you mean "
        "'nnx_introspect.examples:llama_7b'?).\n",
    ),
    "module misspelt": (
        ["step", "nnx_introspect.example:two_layer", *STEP[2:]],
        E + "cannot import module 'nnx_introspect.example' of TARGET "
        "'nnx_introspect.example:two_layer': ModuleNotFoundError: No module named "
        "'nnx_introspect.example' (did you mean 'nnx_introspect.examples'?)\n",
    ),
    "no such package": (
        ["serve", "no_such_pkg_xyz.models:llama", *SERVE[2:]],
        E + "cannot import module 'no_such_pkg_xyz.models' of TARGET "
        "'no_such_pkg_xyz.models:llama': ModuleNotFoundError: No module named "
        "'no_such_pkg_xyz'\n",
    ),
    "rl target misspelt": (
        ["rl", "nnx_introspect.examples:llama_tin", *RL[2:]],
        E + "module 'nnx_introspect.examples' has no attribute 'llama_tin' (TARGET "
        "'nnx_introspect.examples:llama_tin') (did you mean "
        "'nnx_introspect.examples:llama_tiny'?).\n",
    ),
    "loss misspelt": (
        [*STEP, "--loss", "json:lods"],
        E + "argument --loss: module 'json' has no attribute 'lods' (--loss "
        "'json:lods') (did you mean 'json:loads'?).\n",
    ),
    "checkpoint path": (
        ["checkpoint", "/no/such/checkpoint"],
        E + "PATH '/no/such/checkpoint' does not exist. Pass the directory an "
        "orbax checkpointer saved to (the one holding a _METADATA file).\n",
    ),
    "diff operand": (
        ["diff", "/no/such/checkpoint", TWO],
        E + "'/no/such/checkpoint' is neither an existing checkpoint directory nor "
        "a target like 'package.module:callable' (for example "
        "nnx_introspect.examples:llama_7b_sharded).\n",
    ),
    "step topology": (
        [*STEP, "--topology", "v5e-3"],
        E + "argument --topology: --topology v5e-3: a v5e slice has one of [1, 2, "
        "4, 8, 16, 32, 64, 128, 256] chips, got 3.\n",
    ),
    "serve topology": (
        [*SERVE, "--topology", "h1OO-8"],
        E + "argument --topology: --topology must name a Cloud TPU slice of the "
        "families ['v4', 'v5e', 'v5p', 'v6e'] such as 'v5e-4', 'v5e-256', 'v6e-8', "
        "'v5p-8' (4 chips) or 'v4-16' (8 chips), several slices such as "
        "'2xv5e-256', or NVIDIA GPUs of the families "
        "['a100', 'h100', 'h200', 'b200'] such as 'h100-8' or 'a100-64', got "
        "'h1OO-8'.\n",
    ),
    "rl topology": (
        [*RL, "--topology", "v4-6"],
        E + "argument --topology: --topology v4-6: v4-N counts TensorCores (2 per "
        "chip); N must be 8, 16, 32, ... (a power of two up to 8192), got 6.\n",
    ),
    "batch dtype": (
        ["step", TWO, "--mesh", "data=8", "--batch", "int33[4,128]"],
        E + "argument --batch: 'int33' is not a dtype (did you mean 'int32'?); use "
        "int32, float32, bfloat16, int8, float16, bool, ...\n",
    ),
    "step mesh size": (
        [*STEP, "--topology", "v5e-4"],
        E + "argument --topology: --topology v5e-4 has 4 chips (one JAX device "
        "each) but --mesh data=8 has 8 devices. Make the mesh's axis sizes multiply "
        "to the device count, or pick another topology.\n",
    ),
    "serve default mesh size": (
        [*SERVE, "--topology", "h100-4"],
        E + "argument --topology: --topology h100-4 has 4 GPUs but --mesh tp=8 "
        "has 8 devices. Make the mesh's axis sizes multiply to the device count, or "
        "pick another topology. --mesh tp=8 is the default (no --mesh was given).\n",
    ),
    "rl mesh size": (
        [*RL, "--mesh", "fsdp=2,tp=2", "--topology", "v5e-8"],
        E + "argument --topology: --topology v5e-8 has 8 chips (one JAX device "
        "each) but --mesh fsdp=2,tp=2 has 4 devices. Make the mesh's axis sizes "
        "multiply to the device count, or pick another topology.\n",
    ),
    "rl budget without unit": (  # read as serve and step read it: argparse's line
        [*RL, "--max-device-bytes", "12"],
        "nnx-introspect rl: error: argument --max-device-bytes: needs a unit, got "
        "'12': write 12GiB, 12GB, or 12B for bytes (see 'nnx-introspect rl --help')\n",
    ),
    "serve budget without unit": (
        [*SERVE, "--max-device-bytes", "12"],
        "nnx-introspect serve: error: argument --max-device-bytes: needs a unit, "
        "got '12': write 12GiB, 12GB, or 12B for bytes (see 'nnx-introspect serve "
        "--help')\n",
    ),
    "serve sequences with the search": (
        [*SERVE, "--max-sequences"],
        E + "argument --sequences: --max-sequences searches --sequences itself, so "
        "--sequences 2 would be ignored; leave --sequences out, or drop "
        "--max-sequences for the report at --sequences 2\n",
    ),
    "serve context with the search": (
        [*SERVE, "--max-context"],
        E + "argument --context: --max-context searches --context itself, so "
        "--context 16 would be ignored; leave --context out, or drop --max-context "
        "for the report at --context 16\n",
    ),
    "measure on more devices than the process has": (
        ["step", TWO, "--mesh", "data=16", "--batch", "float32[16,3]", "--measure"],
        E + "argument --measure: --measure 5 runs the step on this process's "
        "devices, but --mesh data=16 needs 16 and this process has 8 (cpu). "
        "Measure on a machine with the mesh's devices, or leave --measure out.\n",
    ),
    "measure for a topology": (
        [*SERVE, "--mesh", "tp=1", "--measure", "2", "--topology", "v5e-1"],
        E + "argument --measure: --measure 2 runs the programs on this process's "
        "devices, 8 x 'cpu', which are not --topology v5e-1. Run it where the "
        "topology's devices are, pass no --topology to measure on these, or leave "
        "--measure out.\n",
    ),
    "network for a TPU": (
        [*STEP, "--topology", "v5e-8", "--network-bandwidth", "50GB"],
        E + "argument --network-bandwidth: --network-bandwidth is the network "
        "between GPU hosts, but --topology is v5e-8. Pass a GPU --topology such as "
        "h100-256, or leave --network-bandwidth out.\n",
    ),
    "network for one host": (
        [*STEP, "--topology", "h100-8", "--network-bandwidth", "400Gbps"],
        E + "argument --network-bandwidth: --topology h100-8 is one host of 8 GPUs, "
        "which talk over NVLink only: no byte crosses the network, so the "
        "bandwidth would change nothing; leave --network-bandwidth out, or name a "
        "topology of several hosts (such as h100-16, two hosts of 8)\n",
    ),
    "sequences over the data-parallel devices": (
        ["serve", TINY, "--mesh", "data=4,tp=2", "--sequences", "6", "--context", "16"],
        E + "argument --sequences: --sequences 6 does not split over the 4 "
        "data-parallel devices of the mesh. Pass a multiple of 4.\n",
    ),
    "prefilled more than served": (
        [*SERVE, "--mesh", "tp=2", "--prefill-sequences", "4"],
        E + "argument --prefill-sequences: --prefill-sequences 4 is more than "
        "--sequences 2. Pass at most 2.\n",
    ),
}


def _never(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("JAX started: the mistake was not refused first")


@pytest.mark.parametrize("case", CASES)
def test_refused_before_jax_and_the_model(
    case: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv, message = CASES[case]
    # nothing past the checks may run: not JAX's start, not a model's build
    monkeypatch.setattr("nnx_introspect.cli.entry.start_jax_quietly", _never)
    monkeypatch.setattr("nnx_introspect._targets.resolve_factory", _never)
    code, out, err = run(argv, capsys)
    assert (code, out) == (2, "")
    assert err == usage(argv[0], message)


def test_in_a_fresh_process_jax_is_never_imported() -> None:
    """Every case, one process: none imports JAX, NumPy or flax."""
    code = (
        "import sys\n"
        "from nnx_introspect.cli import main\n"
        f"for argv in {[argv for argv, _ in CASES.values()]!r}:\n"
        "    assert main(argv) == 2, argv\n"
        "print([m for m in ('jax', 'jaxlib', 'flax', 'numpy') if m in sys.modules])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True, text=True, check=False, timeout=120, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"
    # one line each: the library's ("nnx-introspect: error: ") or argparse's
    # ("nnx-introspect rl: error: ")
    said = re.findall(r"^nnx-introspect(?: \w+)?: error: ", result.stderr, re.M)
    assert len(said) == len(CASES)


def test_a_right_target_passes_the_check(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # spelt right, the command goes on to JAX (here: stopped there)
    monkeypatch.setattr("nnx_introspect.cli.entry.start_jax_quietly", _never)
    code, _, err = run(["summary", TINY], capsys)
    assert code == 1 and "JAX started" in err


def test_a_module_whose_names_its_source_cannot_tell_is_imported(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a module __getattr__ may define any name: left to the import, which finds it
    (tmp_path / "lazy_names_mod.py").write_text(
        "from nnx_introspect.examples import two_layer\n\n"
        "def __getattr__(name):\n    return two_layer\n"
    )
    (tmp_path / "star_names_mod.py").write_text(
        "from nnx_introspect.examples import *  # noqa\n"
    )
    monkeypatch.chdir(tmp_path)
    for spec in ("lazy_names_mod:anything", "star_names_mod:two_layer"):
        check_target(spec)  # not refused
        assert resolve_factory(spec) is two_layer
    with pytest.raises(TargetError, match="has no attribute 'two_layr'"):
        resolve_factory("star_names_mod:two_layr")  # the import's own answer
    for name in ("lazy_names_mod", "star_names_mod"):
        sys.modules.pop(name, None)


# --- the JAX-free tables hold the library's -------------------------------------

NAMES = [
    f"{family}-{n}"
    for family in ("v4", "v5e", "v5litepod", "v5p", "v6e", "a100", "h100", "b200")
    for n in (*range(0, 40), 48, 64, 96, 128, 256, 512, 1000, 1024, 8192, 16384, 16392)
] + ["", "tpu-8", "V5E-4", " h100-8 ", "h100-0008", "v5e-1234567", "h200-8x"]
NAMES += ["2xv5e-256", "4xv5e-4", "0xv5e-4", "65xv5e-4", "2xh100-8", "2xv5e-3"]
NAMES += ["2xv5p-16", "32xv5litepod-256", "1234xv5e-4"]


@pytest.mark.parametrize("name", NAMES)
def test_topology_names_are_the_librarys(name: str) -> None:
    try:
        expected: int | str = resolve_topology(name).devices
    except ArgumentError as error:
        expected = in_flags(str(error), "step")
    try:
        found: int | str = topology_devices(name)
    except ValueError as error:
        found = str(error)
    assert found == expected


def test_every_dtype_name_is_one_jax_reads() -> None:
    import jax.numpy as jnp
    import ml_dtypes
    import numpy as np

    from nnx_introspect._step.inputs import parse_batch

    for name in DTYPES:
        try:
            dtype = jnp.dtype(name)
        except TypeError:
            # a narrow type of a newer ml_dtypes than the installed one (0.6.0
            # has no float8_e5m3fnu): the batch's own parse names it, in one line
            assert not hasattr(ml_dtypes, name), name
            with pytest.raises(ArgumentError, match=f"{name!r} is not a dtype"):
                parse_batch(name, (4, 128))
            continue
        # ml_dtypes' complex32 is of kind "c" from 0.7.0, "W" before
        assert dtype.kind in "biufcVW" or "float" in dtype.name, name
    # and every number type JAX has is among them
    for name in ("bfloat16", "float8_e4m3fn", "int4", "uint4", "float16", "bool"):
        assert name in DTYPES
    for code in np.typecodes["AllInteger"] + np.typecodes["AllFloat"]:
        assert code in DTYPES, code

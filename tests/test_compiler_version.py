"""An estimate names the compiler its constants were fitted on, and claims no
error bar for another's programs (issue 55 item 9).

The v5e constants were fitted on programs libtpu 0.0.42.1 wrote (the chip's);
the ``tpu`` extra installs a newer libtpu, whose programs were never timed on
a chip: its estimates say so in words and JSON, with both versions.
"""

import json

from nnx_introspect._accelerators import hardware_for
from nnx_introspect._roofline.program import compiler_of
from nnx_introspect._roofline.timing import CONSTANTS, program_time
from nnx_introspect._xla import OpWork, Work, libtpu_version

WORK = Work((OpWork("matmul", 1e12, 0.0, 10**9, None, 1),))
V5E = hardware_for("v5e-8")


def test_the_constants_name_their_compiler() -> None:
    assert CONSTANTS["v5e"].compiler == "libtpu 0.0.42.1"
    assert "libtpu 0.0.42.1" in CONSTANTS["v5e"].source  # the fit's own record
    assert CONSTANTS["v5e"].json_data()["compiler"] == "libtpu 0.0.42.1"


def test_the_fitted_compilers_programs_keep_their_error_bar() -> None:
    same = program_time(WORK, V5E, compiled_by="libtpu 0.0.42.1")
    unknown = program_time(WORK, V5E)
    assert same.error == unknown.error == CONSTANTS["v5e"].error
    assert same.words == unknown.words and "±10%" in same.words
    assert not same.other_compiler


def test_another_compilers_programs_get_no_error_bar() -> None:
    other = program_time(WORK, V5E, compiled_by="libtpu 0.0.52")
    same = program_time(WORK, V5E, compiled_by="libtpu 0.0.42.1")
    assert other.seconds == same.seconds  # the same rates: only the claim differs
    assert other.error is None and other.other_compiler
    assert "±" not in other.words
    assert "compiled by libtpu 0.0.42.1" in other.words
    assert "this program was compiled by libtpu 0.0.52" in other.words
    assert "no error bar is claimed" in other.words
    data = json.loads(json.dumps(other.json_data()))
    assert data["compiled_by"] == "libtpu 0.0.52"
    assert data["constants"]["compiler"] == "libtpu 0.0.42.1"
    assert data["error"] is None


def test_data_sheet_constants_name_no_compiler() -> None:
    h100 = program_time(WORK, hardware_for("h100-8"), compiled_by="anything")
    assert not h100.other_compiler and h100.error is None
    assert compiler_of("cuda") is None


def test_the_environment_names_its_libtpu() -> None:
    version = libtpu_version()
    assert compiler_of("tpu") == (None if version is None else f"libtpu {version}")


def test_collectives_stay_named_uncalibrated_without_an_error_bar() -> None:
    other = program_time(WORK, V5E, compiled_by="libtpu 0.0.52", comm_seconds=1e-3)
    assert "no error bar is claimed" in other.words
    assert "of collectives are uncalibrated" in other.words

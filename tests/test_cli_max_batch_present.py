"""``step --max-batch`` with no budget: refused at once on a CPU machine; on a
machine with a TPU or GPU the present devices' memory is the budget."""

from typing import Any

import pytest

from nnx_introspect.cli import checks
from tests.cli_helpers import run

ARGV = [
    "step", "nnx_introspect.examples:llama_tiny", "--mesh", "fsdp=1",
    "--batch", "int32[8,16]", "--loss", "lm", "--optimizer", "sgd", "--max-batch",
]  # fmt: skip


def _never(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("JAX started: the mistake was not refused first")


def test_with_no_accelerator_the_missing_budget_is_refused_before_jax(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(checks, "has_accelerator", lambda: False)
    monkeypatch.setattr("nnx_introspect.cli.entry.start_jax_quietly", _never)
    code, out, err = run(ARGV, capsys)
    assert (code, out) == (2, "")
    assert "argument --max-batch: needs --max-device-bytes SIZE" in err
    assert "the present devices' memory is the budget" in err
    assert err.count("\n") == 1


def test_with_an_accelerator_the_search_is_left_to_the_present_devices(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[bool] = []

    def stop(*args: Any, **kwargs: Any) -> None:
        started.append(True)
        raise KeyboardInterrupt  # stop the run here: the checks let it through

    monkeypatch.setattr(checks, "has_accelerator", lambda: True)
    monkeypatch.setattr("nnx_introspect.cli.entry.start_jax_quietly", stop)
    code, _, err = run(ARGV, capsys)
    assert started == [True] and code == 130  # past the checks
    assert "--max-batch" not in err


def test_this_machine_has_no_accelerator_files() -> None:
    # the CI and development machines are CPU-only: the probe must say so
    assert checks.has_accelerator() is False

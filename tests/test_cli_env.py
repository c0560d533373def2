"""The command line runs JAX on the CPU unless ``JAX_PLATFORMS`` names platforms.

An empty ``JAX_PLATFORMS`` is unset to JAX (it starts every backend it finds,
and the CUDA plugin prints a traceback on a machine without a GPU), so the
command line treats it as unset; the environment is restored afterwards.
"""

import os

import pytest

from nnx_introspect.cli.entry import _cpu_only


@pytest.mark.parametrize("given", [None, "", "  "])
def test_unset_or_empty_runs_on_the_cpu_and_is_restored(
    monkeypatch: pytest.MonkeyPatch, given: str | None
) -> None:
    if given is None:
        monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    else:
        monkeypatch.setenv("JAX_PLATFORMS", given)
    with _cpu_only():
        assert os.environ["JAX_PLATFORMS"] == "cpu"
    assert os.environ.get("JAX_PLATFORMS") == given


def test_named_platforms_are_the_users(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAX_PLATFORMS", "cuda,cpu")
    with _cpu_only():
        assert os.environ["JAX_PLATFORMS"] == "cuda,cpu"
    assert os.environ["JAX_PLATFORMS"] == "cuda,cpu"

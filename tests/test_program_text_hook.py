"""The program-text hook (``NNX_INTROSPECT_PROGRAM_TEXT_HOOK``): off unless set.

When the environment names a function, a compile hands it each compiled
program's text and the compiled program (the time model's calibration keeps
the texts so); unset, nothing is called; a hook that fails is a warning and
the compile's readings are the same as without it.
"""

import sys
import time
import types
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh

from nnx_introspect._xla import compile_lowered
from nnx_introspect._xla.text_hook import HOOK_VARIABLE

PROBE = "nnx_introspect_text_hook_probe"


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """A module the hook can name, which keeps what it is handed."""
    kept: list[tuple[str, Any]] = []
    probe = types.ModuleType(PROBE)
    probe.keep = lambda text, compiled: kept.append((text, compiled))  # type: ignore[attr-defined]

    def broken(text: str, compiled: Any) -> None:
        raise OSError("no room on the disk")

    probe.broken = broken  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, PROBE, probe)
    return kept


def _compile() -> Any:
    mesh = Mesh(np.array(jax.devices()[:1]), ("x",))
    start = time.perf_counter()
    lowered = jax.jit(lambda a: jnp.tanh(a @ a.T).sum()).lower(
        jax.ShapeDtypeStruct((8, 16), jnp.float32)
    )
    return compile_lowered(lowered, mesh, start)


def _figures(readings: Any) -> tuple[Any, ...]:
    return (
        readings.argument_bytes,
        readings.output_bytes,
        readings.temp_bytes,
        readings.flops,
        readings.work,
    )


def test_unset_nothing_is_called(
    seen: list[tuple[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(HOOK_VARIABLE, raising=False)
    _compile()
    assert seen == []


def test_the_hook_gets_each_compiled_programs_text(
    seen: list[tuple[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(HOOK_VARIABLE, raising=False)
    without = _compile()
    monkeypatch.setenv(HOOK_VARIABLE, f"{PROBE}:keep")
    readings = _compile()
    (text, compiled), *more = seen
    assert more == []
    # the text is JAX's own printing of the program the hook was handed
    assert isinstance(compiled, jax.stages.Compiled)
    assert text == compiled.as_text()
    assert text.startswith("HloModule jit_")
    assert _figures(readings) == _figures(without)


def test_a_failing_hook_is_a_warning_not_the_compiles_error(
    seen: list[tuple[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(HOOK_VARIABLE, raising=False)
    without = _compile()
    for name, error in (("broken", "OSError"), ("absent", "AttributeError")):
        monkeypatch.setenv(HOOK_VARIABLE, f"{PROBE}:{name}")
        with pytest.warns(RuntimeWarning, match=f"{HOOK_VARIABLE}=.*{error}"):
            readings = _compile()
        assert _figures(readings) == _figures(without)

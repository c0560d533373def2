"""A compile's readers share one parse of the program's text (speed, not figures).

The loops' costs, the collectives and the traffic each read the compiled
program's text; :func:`~nnx_introspect._xla.hlo.parsed_once` lets them share
one parse, and nothing of it outlives the compile.
"""

import contextlib
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

import nnx_introspect as ni
from nnx_introspect._xla import analysis
from nnx_introspect._xla.hlo import module as hlo_module
from nnx_introspect._xla.hlo import parse_module, parsed_once


def _mlp(rngs: nnx.Rngs) -> nnx.Sequential:
    return nnx.Sequential(nnx.Linear(16, 64, rngs=rngs), nnx.Linear(64, 16, rngs=rngs))


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    texts: list[str] = []
    parse = hlo_module._parse

    def counted(text: str) -> Any:
        texts.append(text)
        return parse(text)

    monkeypatch.setattr(hlo_module, "_parse", counted)
    return texts


def test_a_compile_parses_its_program_once(monkeypatch: pytest.MonkeyPatch) -> None:
    texts = _counting(monkeypatch)
    x = jax.ShapeDtypeStruct((32, 16), jnp.float32)
    report = ni.step_memory_report(
        _mlp, {"data": 4}, x, loss="mean", optimizer="adamw", cache=False
    )
    found = report.collectives_data  # read from the text: the gradients' all-reduce
    assert found is not None and found["rows"], found
    assert len(texts) == 1
    assert hlo_module._PARSED.get() is None  # nothing kept after the compile
    # without the shared parse, the collectives, the traffic and the work (the
    # time model's reading) parse it each
    monkeypatch.setattr(analysis, "parsed_once", contextlib.nullcontext)
    again = ni.step_memory_report(
        _mlp, {"data": 4}, x, loss="mean", optimizer="adamw", cache=False
    )
    assert len(texts) == 4 and texts[1] == texts[2] == texts[3]  # one text, 3 readers
    assert again.collectives_data == found


def test_the_shared_parse_ends_with_its_context_even_when_raising() -> None:
    text = "\n".join(
        [
            "HloModule jit_f",
            "ENTRY %main (p: f32[8]) -> f32[8] {",
            "  ROOT %p = f32[8]{0} parameter(0)",
            "}",
        ]
    )
    with pytest.raises(RuntimeError), parsed_once():
        first = parse_module(text)
        assert parse_module(text) is first
        raise RuntimeError
    assert hlo_module._PARSED.get() is None
    assert parse_module(text) is not parse_module(text)
    assert parse_module(text) == first  # the same module, parsed again

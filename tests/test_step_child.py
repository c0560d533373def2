"""The child-process compile compiles exactly the plan the report shows.

The child receives every leaf's resolved spec (never rules to resolve again), so
for every way of giving specs (a pattern string, a compiled regular expression
with flags, a mapping, logical rules, metadata) its figures equal the
in-process compile's, and its argument bytes equal the plan's shards plus the
batch's, computed here by hand.
"""

import re
import subprocess
import sys
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec as P

from nnx_introspect import _step, step_memory_report
from nnx_introspect.examples import LLAMA_TINY

MESH = {"data": 4, "model": 2}
TOKENS = jax.ShapeDtypeStruct((8, 16), jnp.int32)
VOCAB, WIDTH = LLAMA_TINY.vocab, LLAMA_TINY.d_model

# (target, keyword arguments) per way of giving specs: 2 of llama_tiny's 8
# layers (tests/llama_tiny_layers.py), the same kernels and embedding for the
# rules to match, at about half of each compile (here and in the child)
PLAIN = "tests.llama_tiny_layers:llama_tiny_2_layers"
SHARDED = "tests.llama_tiny_layers:llama_tiny_2_layers_sharded"
RULE_FORMS: dict[str, tuple[str, dict[str, Any]]] = {
    "str pattern": (
        PLAIN,
        {"rules": [("embed/embedding", P("data", "model"))]},
    ),
    "compiled regex with flags": (
        PLAIN,
        {"rules": [(re.compile("EMBEDDING", re.I), P("data", None))]},
    ),
    "mapping": (
        PLAIN,
        {"rules": {r"kernel$": P(None, "model"), "embedding": P("data")}},
    ),
    "logical rules": (
        SHARDED,
        {"logical_rules": [("fsdp", "data"), ("tp", "model")]},
    ),
    "metadata": (
        SHARDED,
        {"rules": None},
    ),
}


def _report(target: str, kwargs: dict[str, Any], *, child: bool) -> Any:
    mesh = MESH
    if "fsdp" not in str(kwargs) and "sharded" in target:
        mesh = {"fsdp": 4, "tp": 2}
    if not child:
        return step_memory_report(target, mesh, TOKENS, loss=None, **kwargs)
    with pytest.MonkeyPatch.context() as patch:
        # this process "has" one device: the compile goes to a child process
        patch.setattr(jax, "device_count", lambda *a: 1)
        return step_memory_report(target, mesh, TOKENS, loss=None, **kwargs)


@pytest.mark.parametrize("form", sorted(RULE_FORMS))
def test_child_compiles_the_plan_the_report_shows(form: str) -> None:
    target, kwargs = RULE_FORMS[form]
    here = _report(target, kwargs, child=False)
    there = _report(target, kwargs, child=True)
    assert here.compiled_in == "this process"
    assert there.compiled_in == "a child process with 8 virtual CPU devices"
    assert there.argument_bytes == here.argument_bytes
    assert there.output_bytes == here.output_bytes
    assert there.temp_bytes == here.temp_bytes
    # the plan's shards and one device's 2 of 8 rows of tokens: XLA's arguments
    batch_shard = 8 // 4 * 16 * 4
    assert there.argument_bytes == there.plan.bytes_per_device + batch_shard


def test_flagged_regex_reaches_the_child_as_its_resolved_spec() -> None:
    """Issue 14.1: only ``.pattern`` travelled, so ``re.I`` was lost in the child
    and the embedding compiled replicated (41,698,368 B instead of the plan's)."""
    tokens = jax.ShapeDtypeStruct((16, 16), jnp.int32)
    report = step_memory_report(
        PLAIN,
        {"data": 16},
        tokens,
        loss=None,
        rules=[(re.compile("EMBEDDING", re.I), P("data", None))],
    )
    assert report.compiled_in == "a child process with 16 virtual CPU devices"
    # llama_tiny's 10,424,576 parameters with 2 of its 8 layers: the embedding
    # and the LM head (V x W each), the final norm (W), and per layer the
    # attention (4 W x W), the MLP (3 W x 688) and two norms (2 W)
    layer = 4 * WIDTH * WIDTH + 3 * WIDTH * LLAMA_TINY.d_ff + 2 * WIDTH
    assert 2 * VOCAB * WIDTH + WIDTH + 8 * layer == 10_424_576
    params = (2 * VOCAB * WIDTH + WIDTH + 2 * layer) * 4
    embedding = VOCAB * WIDTH * 4
    # everything replicated but the embedding, split 16 ways; one row of tokens
    assert report.argument_bytes == params - embedding + embedding // 16 + 16 * 4


def test_child_refuses_a_target_that_rebuilds_differently() -> None:
    request = {"target": "nnx_introspect.examples:two_layer", "mesh": [["data", 1]]}
    request |= {"leaves": [["w", "Param", [2], "float32", []]]}
    answer = _serve(request)
    assert '"error": "ValueError"' in answer
    assert "rebuilt in the child process differs" in answer


def _serve(request: dict[str, Any]) -> str:
    import json

    done = subprocess.run(
        [sys.executable, "-m", "nnx_introspect._step"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        check=True,
        env=_step.child._child_env(1, None),
    )
    return done.stdout


def test_child_type_errors_stay_type_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 14.5: a TypeError subclass (JAX's TracerArrayConversionError...)
    in the child came back as a RuntimeError; bad input must stay a TypeError."""
    from nnx_introspect._step import child

    class TracerLikeError(TypeError):
        pass

    def boom(data: Any) -> Any:
        raise TracerLikeError("`loss` returned a tuple")

    monkeypatch.setattr(child, "run_child_request", boom)
    monkeypatch.setattr(sys, "stdin", _Stdin("{}"))
    out: list[str] = []
    monkeypatch.setattr(sys.stdout, "write", out.append)
    assert child.main() == 0
    assert out == ['{"error": "TypeError", "message": "`loss` returned a tuple"}\n']
    monkeypatch.undo()
    completed = subprocess.CompletedProcess([], 0, out[0], "")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: completed)
    with pytest.raises(TypeError, match="`loss` returned a tuple"):
        child.run_child({"topology": None}, 2)


class _Stdin:
    def __init__(self, text: str) -> None:
        self.text = text

    def read(self) -> str:
        return self.text


# --- a child that ends without an answer ----------------------------------------

_NOISE = (
    "WARNING: All log messages before absl::InitializeLog() is called are "
    "written to STDERR\n"
    "I0000 00:00:1796679589.194169    5075 cudart_stub.cc:31] Could not find cuda "
    "drivers on your machine, GPU will not be used.\n"
)


def _crashing_child(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, end: str) -> str:
    """A child module that writes absl's start-up lines, then ends with ``end``."""
    (tmp_path / "crashing_child_mod.py").write_text(
        "import os, signal, sys\n"
        f"sys.stderr.write({_NOISE!r})\n"
        "sys.stderr.flush()\n"
        f"{end}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))  # the child's PYTHONPATH holds it
    with pytest.raises(RuntimeError) as raised:
        _step.child.run_child_json({}, 2, module="crashing_child_mod")
    return str(raised.value)


def test_a_child_stopped_by_a_signal_names_the_signal(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    said = _crashing_child(
        tmp_path, monkeypatch, "os.kill(os.getpid(), signal.SIGTERM)"
    )
    assert said == (
        "The child compile on 2 virtual CPU devices was stopped by signal SIGTERM (15)"
    )


def test_a_child_log_line_is_never_the_cause(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    said = _crashing_child(tmp_path, monkeypatch, "sys.exit(3)")
    assert (
        said
        == "The child compile on 2 virtual CPU devices failed (exit code 3): no output"
    )
    said = _crashing_child(
        tmp_path, monkeypatch, "sys.stderr.write('Killed by the tests\\n'); sys.exit(3)"
    )
    assert said.endswith("failed (exit code 3): Killed by the tests")

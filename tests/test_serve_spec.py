"""Serving requests: every bad value an ArgumentError naming the argument, no compile."""

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_introspect import ArgumentError, serve_memory_report
from nnx_introspect._serve.programs import cache_problems, serve_inputs, serve_mesh
from nnx_introspect._serve.spec import ServeOptions, ServeSpec
from nnx_introspect.examples import (
    LlamaConfig,
    TwoLayer,
    llama,
    llama_7b,
    llama_7b_sharded,
    llama_tiny,
)

TINY = llama(LlamaConfig(vocab=64, d_model=32, n_layers=2, n_heads=4, d_ff=48))
GQA = llama(
    LlamaConfig(vocab=64, d_model=32, n_layers=2, n_heads=4, d_ff=48, n_kv_heads=2)
)


@pytest.mark.parametrize("value", [0, -3, math.nan, True, 2.5, "8"])
@pytest.mark.parametrize("name", ["sequences", "context"])
def test_counts_must_be_positive_integers(name: str, value: Any) -> None:
    given = {"sequences": 2, "context": 16} | {name: value}
    with pytest.raises(ArgumentError, match=rf"`{name}` must be") as error:
        ServeSpec(TINY, "tp=2", **given)
    assert error.value.argument == name


def test_good_counts_pass() -> None:
    spec = ServeSpec(TINY, "tp=2", sequences=np.int64(2), context=16, prompt=16)
    assert (spec.sequences, spec.context, spec.prompt) == (2, 16, 16)
    assert type(spec.sequences) is int


@pytest.mark.parametrize(
    "name", ["sequences", "context", "prompt", "prefill_sequences"]
)
def test_a_float_count_is_refused_even_when_whole(name: str) -> None:
    given = {"sequences": 2, "context": 16} | {name: 2.0}
    with pytest.raises(
        ArgumentError,
        match=rf"^`{name}` must be an integer \(a count\), got the float 2\.0\. "
        r"Pass 2\.$",
    ) as error:
        ServeSpec(TINY, "tp=2", **given)  # type: ignore[arg-type]
    assert error.value.argument == name


def test_prompt_longer_than_context() -> None:
    with pytest.raises(ArgumentError, match=r"`prompt` 17 is longer than `context` 16"):
        ServeSpec(TINY, "tp=2", sequences=2, context=16, prompt=17)


def test_prefill_sequences_at_most_sequences() -> None:
    with pytest.raises(ArgumentError, match=r"`prefill_sequences` 3 is more") as e:
        ServeSpec(TINY, "tp=2", sequences=2, context=16, prefill_sequences=3)
    assert e.value.argument == "prefill_sequences"


@pytest.mark.parametrize("dtype", ["int4", "float16", 3, "bf17"])
def test_unknown_cache_dtype(dtype: Any) -> None:
    with pytest.raises(ArgumentError, match=r"`kv_cache` must be one of bfloat16, "):
        ServeOptions(kv_cache=dtype)


@pytest.mark.parametrize(
    ("given", "name"),
    [("bf16", "bfloat16"), (jnp.int8, "int8"), ("float8_e4m3fn", "float8_e4m3fn")],
)
def test_cache_dtype_names(given: Any, name: str) -> None:
    assert ServeOptions(kv_cache=given).kv_cache == name


def test_unknown_weights_dtype_and_keep() -> None:
    with pytest.raises(ArgumentError, match=r"`weights` must be one of"):
        ServeOptions(weights="int3")
    assert ServeOptions(weights=None).weights is None


def test_unimportable_init_cache() -> None:
    with pytest.raises(ArgumentError, match=r"`init_cache` 'nowhere.at_all:fn'") as e:
        ServeOptions(init_cache="nowhere.at_all:fn")
    assert e.value.argument == "init_cache"


def test_tp_not_dividing_kv_heads_is_a_plan_problem() -> None:
    spec = ServeSpec(GQA, "tp=4", sequences=2, context=16)  # 2 KV heads
    with pytest.raises(
        ArgumentError, match=r"`mesh` tp=4 does not divide the 2 KV heads.*\[1, 2\]"
    ) as e:
        serve_inputs(spec, serve_mesh(spec)[0])
    assert e.value.argument == "mesh"
    fine = ServeSpec(GQA, "tp=2", sequences=2, context=16)
    assert serve_inputs(fine, serve_mesh(fine)[0]).kv_bytes_per_token > 0


def test_sequences_not_splitting_over_data_parallel() -> None:
    spec = ServeSpec(TINY, {"data": 4, "tp": 2}, sequences=6, context=16)
    cache = jax.eval_shape(lambda: spec.model.init_cache(6, 16, jnp.bfloat16))
    [problem] = cache_problems(cache, spec)
    assert problem.argument == "sequences" and "multiple of 4" in str(problem)
    ok = ServeSpec(TINY, {"data": 4, "tp": 2}, sequences=8, context=16)
    cache8 = jax.eval_shape(lambda: ok.model.init_cache(8, 16, jnp.bfloat16))
    assert cache_problems(cache8, ok) == []


def test_a_model_with_no_cache_path() -> None:
    with pytest.raises(ArgumentError, match=r"no KV cache path.*--init-cache") as e:
        serve_memory_report(
            lambda rngs: TwoLayer(4, 8, rngs=rngs), "tp=1", sequences=1, context=4
        )
    assert e.value.argument == "init_cache"


def wrong_layout(model: Any, sequences: int, context: int, dtype: Any) -> Any:
    return {"k": jnp.zeros((context, sequences), dtype)}


def no_cache_returned(model: Any, tokens: Any, positions: Any, cache: Any) -> Any:
    return model(tokens)


def test_an_init_cache_of_the_wrong_layout() -> None:
    with pytest.raises(
        ArgumentError, match=r"no array of shape \(sequences, context"
    ) as e:
        serve_memory_report(
            TINY, "tp=1", sequences=2, context=8, init_cache=wrong_layout
        )
    assert e.value.argument == "init_cache"


def test_a_decode_returning_no_cache() -> None:
    with pytest.raises(ArgumentError, match=r"KV-cache call failed to trace") as e:
        serve_memory_report(
            TINY, "tp=1", sequences=2, context=8, decode=no_cache_returned
        )
    assert e.value.argument == "decode"


def test_kv_bytes_per_token_of_the_7b_tp8_by_arithmetic() -> None:
    """2 (k, v) x 32 layers x 32/8 heads x 128 dims x 2 B = 65,536 B, no compile."""
    spec = ServeSpec(llama_7b, "tp=8", sequences=8, context=4096)
    inputs = serve_inputs(spec, serve_mesh(spec)[0])
    assert inputs.kv_bytes_per_token == 2 * 32 * (32 // 8) * 128 * 2 == 65_536
    assert inputs.kv_cache_bytes == 65_536 * 8 * 4096 + 4  # and the int32 index
    # float8 halves it; data parallelism splits sequences, not a position
    f8 = ServeSpec(
        llama_7b,
        "tp=8",
        sequences=8,
        context=4096,
        options=ServeOptions(kv_cache="float8_e4m3fn"),
    )
    assert serve_inputs(f8, serve_mesh(f8)[0]).kv_bytes_per_token == 32_768
    dp = ServeSpec(llama_7b, {"data": 2, "tp": 4}, sequences=8, context=4096)
    dp_inputs = serve_inputs(dp, serve_mesh(dp)[0])
    assert dp_inputs.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2
    assert dp_inputs.kv_cache_bytes == 2 * 32 * 8 * 128 * 2 * 4 * 4096 + 4
    # weights: a bfloat16 copy, replicated (llama_7b carries no annotations)
    assert inputs.weights_bytes == 6_738_415_616 * 2


def test_training_axes_the_serving_mesh_lacks_are_replicated() -> None:
    """llama_7b_sharded names fsdp and tp; served on tp=8 alone, tp splits all."""
    spec = ServeSpec(llama_7b_sharded, "tp=8", sequences=8, context=128)
    inputs = serve_inputs(spec, serve_mesh(spec)[0])
    d, f, v, layers = 4096, 11008, 32000, 32
    split = 2 * v * d + layers * (4 * d * d + 3 * d * f)  # every kernel over tp
    norms = (2 * layers + 1) * d  # replicated
    assert inputs.weights_bytes == (split // 8 + norms) * 2


def test_the_spec_counts_the_parameters_once_where_it_is_built() -> None:
    spec = ServeSpec(llama_tiny, "tp=2", sequences=4, context=64)
    params = nnx.state(spec.model, nnx.Param)
    assert spec.parameters == sum(math.prod(x.shape) for x in jax.tree.leaves(params))
    assert spec.parameters > 0
    assert spec == spec.replace(sequences=4)  # not part of the request's identity

"""max_sequences / max_context: the answer compiled, one step more compiled too."""

import pytest

from nnx_introspect import ArgumentError, ServeSearch, max_context, serve_memory_report
from nnx_introspect.examples import LlamaConfig, llama

TINY = llama(LlamaConfig(vocab=64, d_model=32, n_layers=2, n_heads=4, d_ff=48))
MESH = {"data": 2, "tp": 2}


@pytest.fixture(scope="module")
def found() -> ServeSearch:
    first = serve_memory_report(TINY, MESH, sequences=4, context=8)
    # a budget about 600 positions above the first report's decode peak
    per_position = first.kv_bytes_per_token * 2
    budget = first.decode.peak_bytes + 600 * per_position
    return max_context(TINY, MESH, sequences=4, max_device_bytes=budget)


def test_the_answer_fits_and_one_more_does_not(found: ServeSearch) -> None:
    fit = {t: (peak, ok) for _, t, peak, ok in found.points}
    budget = found.budget.bytes
    assert budget is not None and found.step == 1
    assert fit[found.value][1] and fit[found.value][0] <= budget
    assert not fit[found.value + 1][1] and fit[found.value + 1][0] > budget
    assert found.compiles <= 6
    # every point on the right side of the budget
    assert all(ok == (peak <= budget) for _, _, peak, ok in found.points)


def test_the_answer_by_a_report_of_its_own(found: ServeSearch) -> None:
    over = serve_memory_report(
        TINY,
        MESH,
        sequences=4,
        context=found.value + 1,
        max_device_bytes=found.budget.bytes,
    )
    assert over.decode.peak_bytes > (found.budget.bytes or 0)
    assert "| context |" in found.to_markdown()


def test_a_search_needs_a_budget() -> None:
    with pytest.raises(ArgumentError, match=r"needs a budget") as error:
        max_context(TINY, MESH, sequences=4)
    assert error.value.argument == "max_device_bytes"


def test_unknown_option() -> None:
    with pytest.raises(ArgumentError, match=r"`batch` is not an argument"):
        max_context(TINY, MESH, sequences=4, batch=3)

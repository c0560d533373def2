"""max_sequences / max_context: the answer compiled, one step more compiled too."""

import pytest

from nnx_introspect import (
    ArgumentError,
    ServeMemoryReport,
    ServeSearch,
    max_context,
    serve_memory_report,
)
from nnx_introspect.examples import LlamaConfig, llama

TINY = llama(LlamaConfig(vocab=64, d_model=32, n_layers=2, n_heads=4, d_ff=48))
MESH = {"data": 2, "tp": 2}

# the reports at the answer and one position past it are programs the search
# compiled (the same keys): the module's cache compiles each once
pytestmark = pytest.mark.usefixtures("one_compile_per_program")


@pytest.fixture(scope="module")
def found() -> ServeSearch:
    first = serve_memory_report(TINY, MESH, sequences=4, context=8)
    # a budget about 100 positions above the first report's decode peak: the
    # prefill (its scores grow with the context's square) sets the edge near
    # 22 positions, 8 compiles in all
    per_position = first.kv_bytes_per_token * 2
    budget = first.decode.peak_bytes + 100 * per_position
    return max_context(TINY, MESH, sequences=4, max_device_bytes=budget)


def test_the_answer_fits_and_one_more_does_not(found: ServeSearch) -> None:
    fit = {t: (peak, ok) for _, t, peak, ok in found.points}
    budget = found.budget.bytes
    assert budget is not None and found.step == 1
    assert fit[found.value][1] and fit[found.value][0] <= budget
    assert not fit[found.value + 1][1] and fit[found.value + 1][0] > budget
    # the prompt is the whole context (the report's default): the prefill sets
    # the peak, growing with the context's square; a handful of compiles, and
    # three past the edge (new, or compiled already): none fits
    assert found.compiles <= 10 + 3 and len(found.past_edge) >= 3
    assert found.also_fits == () and found.jumps == ()
    # the edge's program and what lifts it, named
    assert (
        found.verdict.startswith(f"Most context that fit: {found.value}, within ")
        and f"; {found.value + 1} does not: prefill's peak" in found.verdict
    )
    assert "`prefill_sequences` (--prefill-sequences) or `prompt` (--prompt)" in (
        found.verdict
    )
    assert set(found.limits) <= {"prefill", "decode"} and len(found.limits) == len(
        found.points
    )
    # every point on the right side of the budget
    assert all(ok == (peak <= budget) for _, _, peak, ok in found.points)


def test_the_answer_by_a_report_of_its_own(found: ServeSearch) -> None:
    def report(context: int) -> ServeMemoryReport:
        return serve_memory_report(
            TINY,
            MESH,
            sequences=4,
            context=context,
            max_device_bytes=found.budget.bytes,
        )

    # the search's answer is the report's: it fits, one position more does not
    at = report(found.value)
    assert at.fits() is True
    # its prefill as the report's default makes it (none was given)
    index = [t for _, t, _, _ in found.points].index(found.value)
    assert not found.prefill_given
    assert found.prefills[index] == (at.prefill.sequences, at.prefill.tokens)
    over = report(found.value + 1)
    assert over.fits() is False
    assert over.peak_bytes > (found.budget.bytes or 0)
    assert "| context |" in found.to_markdown()


def test_a_search_needs_a_budget() -> None:
    with pytest.raises(ArgumentError, match=r"needs a budget") as error:
        max_context(TINY, MESH, sequences=4)
    assert error.value.argument == "max_device_bytes"


def test_unknown_option() -> None:
    with pytest.raises(ArgumentError, match=r"`batch` is not an argument"):
        max_context(TINY, MESH, sequences=4, batch=3)

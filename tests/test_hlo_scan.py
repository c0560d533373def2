"""The HLO scanner's regex against the character-by-character scan it replaced.

:func:`~nnx_introspect._xla.hlo.text.structure_chars` finds brackets and
commas outside quoted strings with one regex; :func:`_stepwise` is the
scan the parser used before, one character at a time, kept here as the
reference. Both are held equal on any text made of the characters that
matter (quotes, escapes, brackets, commas, newlines) and on real programs.
"""

from collections.abc import Iterator

import jax
import jax.numpy as jnp
from hypothesis import given, settings
from hypothesis import strategies as st

from nnx_introspect._xla.hlo import parse_module
from nnx_introspect._xla.hlo.text import closing_bracket, structure_chars


def _stepwise(text: str, start: int) -> Iterator[tuple[int, str, int]]:
    """Every unquoted character, its index and the bracket depth after it."""
    depth, quote, at = 0, "", start
    while at < len(text):
        char = text[at]
        if quote:
            if char == "\\":
                at += 1
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        else:
            if char in "([{":
                depth += 1
            elif char in ")]}":
                depth -= 1
            yield at, char, depth
        at += 1


def _reference(text: str, start: int) -> list[tuple[int, str, int]]:
    return [found for found in _stepwise(text, start) if found[1] in "()[]{},"]


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="ab ,()[]{}\"'\\\n=%", max_size=60), st.integers(0, 60))
def test_equals_the_stepwise_scan(text: str, start: int) -> None:
    start = min(start, len(text))
    assert list(structure_chars(text, start)) == _reference(text, start)


def test_an_unterminated_quote_and_a_trailing_escape() -> None:
    for text in ['a(b, "c)', "a(b, 'c\\", 'x"\\"(', "(')'),", '"\\\n(",(']:
        assert list(structure_chars(text, 0)) == _reference(text, 0), text
    assert closing_bracket('(a, "b)")', 0) == 8


def test_a_real_program_parses_to_the_same_operands() -> None:
    """Every instruction of a compiled program: operands and attributes split
    at the commas the stepwise scan finds."""

    def f(x: jax.Array, y: jax.Array) -> jax.Array:
        return jnp.tanh(x @ y).sum(axis=0) + jnp.where(x[0] > 0, 1.0, -1.0)

    x = jnp.ones((8, 8))
    text = jax.jit(f).lower(x, x).compile().as_text()
    assert text is not None
    module = parse_module(text)
    assert module.instructions
    for found in module.instructions.values():
        rest = found.text.split(" = ", 1)[1]
        assert found.operand_text in rest
        for line_start in range(0, len(rest), 7):
            assert list(structure_chars(rest, line_start)) == _reference(
                rest, line_start
            )

"""The public surface: every name exported, documented and doctested."""

import inspect
import pathlib

import pytest

import nnx_introspect
import nnx_introspect.exercises

ROOT = pathlib.Path(__file__).resolve().parents[1]
API_DOC = (ROOT / "docs" / "api.rst").read_text()


def test_all_is_sorted_and_importable() -> None:
    names = nnx_introspect.__all__
    assert list(names) == sorted(names)
    for name in names:
        assert hasattr(nnx_introspect, name), name


@pytest.mark.parametrize("name", nnx_introspect.__all__)
def test_every_public_name_is_in_the_api_reference(name: str) -> None:
    assert name in API_DOC, f"{name} is missing from docs/api.rst"


@pytest.mark.parametrize(
    "obj",
    [getattr(nnx_introspect, n) for n in nnx_introspect.__all__]
    + [getattr(nnx_introspect.exercises, n) for n in nnx_introspect.exercises.__all__],
    ids=lambda o: getattr(o, "__name__", repr(o)),
)
def test_every_public_name_has_a_docstring_with_an_example(obj: object) -> None:
    doc = inspect.getdoc(obj) or ""
    assert doc, f"{obj} has no docstring"
    assert "Example" in doc and ">>>" in doc, f"{obj} has no doctested example"


def test_exercises_are_documented() -> None:
    assert "nnx_introspect.exercises" in API_DOC

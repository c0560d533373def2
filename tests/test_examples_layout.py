"""The example models are user code: a package of their own, seen only by name.

The library never names an example's file (its frames reader, for one, tells
the user's code from the library's by where a file lies, not by a list of
example files), and the examples import only what a user can:
``nnx_introspect``'s public names, besides JAX, flax and the like.
"""

import ast
import re
from pathlib import Path

import pytest

import nnx_introspect

PACKAGE = Path(nnx_introspect.__file__).parent
EXAMPLES = PACKAGE / "examples"
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.py"))
PRIVATE_EXAMPLES = [
    p for p in EXAMPLE_FILES if p.stem.startswith("_") and p.stem != "__init__"
]


def test_the_examples_are_a_package_with_their_models_in_it() -> None:
    assert (EXAMPLES / "__init__.py").is_file()
    assert {p.name for p in PRIVATE_EXAMPLES} >= {"_llama.py", "_moe.py"}
    assert not (PACKAGE / "examples.py").exists()


def _names_of(stem: str) -> re.Pattern[str]:
    """A mention of the example module ``stem``: its file, or its dotted name."""
    return re.compile(
        rf"(?<![\w.]){re.escape(stem)}\.py\b"
        rf"|\bexamples\.{re.escape(stem)}\b"
        rf"|\bnnx_introspect\.{re.escape(stem)}\b"
    )


@pytest.mark.parametrize("example", PRIVATE_EXAMPLES, ids=lambda p: p.name)
def test_no_library_module_names_an_example_file(example: Path) -> None:
    pattern = _names_of(example.stem)
    naming = [
        f"{path.relative_to(PACKAGE)}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if EXAMPLES not in path.parents
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert naming == []


def test_the_pattern_finds_a_mention() -> None:
    """The check above can fail: each way of naming an example is caught."""
    pattern = _names_of("_llama")
    for text in (
        '_MODEL_CODE = frozenset({"_llama.py", "_moe.py"})',
        "from nnx_introspect._llama import Llama",
        "import nnx_introspect.examples._llama as source",
    ):
        assert pattern.search(text), text
    assert not pattern.search("def tiny_llama() -> None:")
    assert not pattern.search("from nnx_introspect.examples import Llama")


def _nnx_introspect_imports(path: Path) -> list[tuple[str, str | None]]:
    """``(module, name)`` of each import of ``nnx_introspect`` in ``path``."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [
                (alias.name, None)
                for alias in node.names
                if alias.name.split(".")[0] == "nnx_introspect"
            ]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # a relative import: of the examples' own modules
                module = "nnx_introspect.examples" + ("." + module if module else "")
            if module.split(".")[0] == "nnx_introspect":
                found += [(module, alias.name) for alias in node.names]
    return found


def _is_public(module: str, name: str | None) -> bool:
    if module == "nnx_introspect.examples" or module.startswith(
        "nnx_introspect.examples."
    ):
        return True  # the examples' own modules
    if module == "nnx_introspect":
        return name is None or name in nnx_introspect.__all__
    return False


@pytest.mark.parametrize("example", EXAMPLE_FILES, ids=lambda p: p.name)
def test_the_examples_import_only_public_names(example: Path) -> None:
    private = [
        (module, name)
        for module, name in _nnx_introspect_imports(example)
        if not _is_public(module, name)
    ]
    assert private == []


def test_a_private_import_is_refused(tmp_path: Path) -> None:
    """The check above can fail: an internal module or name is caught."""
    source = tmp_path / "model.py"
    source.write_text(
        "from nnx_introspect import ArgumentError, _lazy\n"
        "from nnx_introspect._mesh import EXPERT_AXIS\n"
        "import nnx_introspect._typing\n"
        "from . import _llama\n"
    )
    found = _nnx_introspect_imports(source)
    assert [(m, n) for m, n in found if not _is_public(m, n)] == [
        ("nnx_introspect", "_lazy"),
        ("nnx_introspect._mesh", "EXPERT_AXIS"),
        ("nnx_introspect._typing", None),
    ]

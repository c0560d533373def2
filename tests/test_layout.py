"""The layout's rules, measured on the source with ``ast`` (every import counts).

``lint-imports`` (nox's lint session) holds the one-way flow between packages;
these tests hold what it does not: no import circle between files (deferred
imports inside functions and ``if TYPE_CHECKING:`` imports included), no
underscored name imported from another top-level package, and the sizes of
files, functions and packages.
"""

import ast
import functools
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "nnx_introspect"
MAX_FILE_LINES = 700
MAX_FUNCTION_LINES = 80
"""Lines of code of one function, its docstring not counted."""
MAX_PACKAGE_SHARE = 0.30


@functools.cache
def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _resolve(name: str) -> str:
    """The module a dotted name lives in: itself, or its nearest parent."""
    modules = _modules()
    while name not in modules:
        name = name.rpartition(".")[0]
    return name


@functools.cache
def _imports() -> dict[str, tuple[tuple[str, str | None], ...]]:
    """Per module: every (module imported, name taken from it or None)."""
    modules = _modules()
    out: dict[str, tuple[tuple[str, str | None], ...]] = {}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        found: list[tuple[str, str | None]] = []
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found += [
                    (_resolve(a.name), None)
                    for a in node.names
                    if a.name.split(".")[0] == "nnx_introspect"
                ]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[
                        : len(package.split(".")) - node.level + 1
                    ]
                    base = ".".join([*parts, base] if base else parts)
                if base.split(".")[0] != "nnx_introspect":
                    continue
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    if full in modules:  # a module imported by name
                        found.append((full, None))
                    else:
                        found.append((_resolve(base), alias.name))
        out[module] = tuple(found)
    return out


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _graph() -> dict[str, set[str]]:
    return {
        module: {m for m, _ in imported if m != module}
        for module, imported in _imports().items()
    }


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one file (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return out


def test_the_reader_sees_every_module() -> None:
    assert "nnx_introspect._step.measure" in _modules()
    assert ("nnx_introspect._accelerators.topology", "resolve_topology") in _imports()[
        "nnx_introspect._accelerators.budget"
    ]


def test_no_import_circle_between_files() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_circles_of_any_length() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_underscored_name_crosses_a_package() -> None:
    crossing = [
        f"{module} imports {name} from {source}"
        for module, imported in _imports().items()
        for source, name in imported
        if name is not None
        and name.startswith("_")
        and not name.startswith("__")
        and _top(source) != _top(module)
    ]
    assert crossing == []


def _exported(source: str) -> set[str]:
    """What module ``source`` offers other packages.

    Its ``__all__`` when written as a list, and a face's explicit re-exports
    (``from .m import x as x``, in a lazy face's ``TYPE_CHECKING`` block too).
    """
    tree = ast.parse(_modules()[source].read_text())
    exported: set[str] = {
        str(elt.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(getattr(t, "id", None) == "__all__" for t in node.targets)
        and isinstance(node.value, ast.List | ast.Tuple)
        for elt in node.value.elts
        if isinstance(elt, ast.Constant)
    }
    if _modules()[source].name == "__init__.py":
        exported |= {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
            if alias.asname == alias.name
        }
    return exported


def test_a_name_another_package_takes_is_in_its_modules_all() -> None:
    missing = []
    for module, imported in _imports().items():
        for source, name in imported:
            if name is None or _top(source) == _top(module) or not _top(source):
                continue
            if name not in _exported(source):
                missing.append(f"{module} takes {name} from {source}")
    assert sorted(set(missing)) == []


def test_another_package_is_entered_by_its_face() -> None:
    """A package's modules are its own business: others import from its face.

    ``from nnx_introspect._xla import compile_lowered``, never ``from
    nnx_introspect._xla.analysis import ...``; a top-level module (``_counting``)
    is its own face, and a module a face offers as a namespace (``from
    nnx_introspect._render import svg``) is taken whole. The package's own face (``nnx_introspect``) names where
    each public name is defined, so that it imports no more than the name's
    module.
    """
    deep = sorted(
        {
            f"{module} imports {name} from {source}"
            for module, imported in _imports().items()
            for source, name in imported
            if module != "nnx_introspect"
            and name is not None
            and _top(source) != _top(module)
            and _top(source)
            and len(source.split(".")) > 2
        }
    )
    assert deep == []


def test_the_face_rule_sees_a_deep_import() -> None:
    """The rule above can fail: the step's own modules do import each other."""
    step = _imports()["nnx_introspect._step.measure"]
    assert any(len(source.split(".")) > 2 for source, _ in step)
    assert ("nnx_introspect._xla", "compile_lowered") in _imports()[
        "nnx_introspect._step.compile"
    ]


def test_no_file_over_700_lines() -> None:
    long = {
        str(path.relative_to(SRC)): n
        for path in _modules().values()
        if (n := len(path.read_text().splitlines())) > MAX_FILE_LINES
    }
    assert long == {}


def test_no_function_over_80_lines() -> None:
    long = {}
    for path in _modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            assert node.end_lineno is not None
            lines = node.end_lineno - node.lineno + 1
            if ast.get_docstring(node) is not None:
                doc = node.body[0]
                assert doc.end_lineno is not None
                lines -= doc.end_lineno - doc.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                long[f"{path.relative_to(SRC)}:{node.name}"] = lines
    assert long == {}


def test_no_package_over_30_percent_of_the_code() -> None:
    sizes: dict[str, int] = defaultdict(int)
    for module, path in _modules().items():
        sizes[_top(module)] += len(path.read_text().splitlines())
    total = sum(sizes.values())
    assert total > 10_000  # the reader read the whole package
    big = {
        k: round(v / total, 3)
        for k, v in sizes.items()
        if v > MAX_PACKAGE_SHARE * total
    }
    assert big == {}


def test_each_package_opens_with_its_one_job() -> None:
    packages = sorted(p for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    assert len(packages) >= 10
    for package in packages:
        doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text()))
        assert doc, package.name
        first = doc.splitlines()[0]
        assert first.endswith(".") and len(first) <= 88, (package.name, first)

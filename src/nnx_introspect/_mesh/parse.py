"""Argument parsing: meshes, rules, logical rules, byte sizes, optimizer names."""

import json
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

import optax
from jax.sharding import AbstractMesh, Mesh, PartitionSpec

from nnx_introspect._mesh.specs import Entry, as_spec
from nnx_introspect._typing import ArgumentError, IntLike, as_int, typechecked

__all__ = [
    "as_logical_rules",
    "compile_rules",
]

# The containers' items are checked by the planner itself (not by beartype), so
# that a bad size or rule gets a message naming ``mesh['model']`` or ``rules[1]``.
MeshLike: TypeAlias = Mapping[Any, Any] | str | Mesh | AbstractMesh
"""A proposed mesh: ``{"data": 2, "model": 4}`` (sizes: integer-valued scalars),
``"data=2,model=4"``, a ``Mesh`` or an ``AbstractMesh``."""

SpecLike: TypeAlias = PartitionSpec | tuple[Any, ...] | list[Any] | None
"""A partition spec: a ``PartitionSpec``, a tuple/list of its entries, or ``None``
(replicated)."""

RulesLike: TypeAlias = Sequence[Any] | Mapping[Any, Any]
"""Ordered ``(regular expression, SpecLike)`` pairs, or a mapping in insertion order."""

LogicalRulesLike: TypeAlias = Sequence[Any] | Mapping[Any, Any]
"""``(logical name, mesh axis or axes or None)`` pairs, as in
``nnx.logical_axis_rules``."""


MAX_MESH_DEVICES = 2**31 - 1
"""The most devices a JAX mesh can describe: its size must fit a signed 32-bit
integer (jax 0.10: ``NamedSharding`` on a larger ``AbstractMesh`` raises
``RuntimeError: std::bad_cast`` from C++)."""


def as_abstract_mesh(mesh: Any, name: str = "mesh") -> AbstractMesh:
    """An ``AbstractMesh`` from a mapping, ``"a=2,b=4"``, Mesh or AbstractMesh.

    Every form is checked alike: an ``AbstractMesh((0,), ("data",))`` (which
    JAX builds without complaint) is as much an error as ``"data=0"``.

    Raises:
        TypeError: If ``mesh`` or an axis name or size has the wrong type.
        ValueError: If a size is not a positive integer (``0`` or negative, in
            any form), the string is malformed or the mesh has more than
            :data:`MAX_MESH_DEVICES` devices.
    """
    if isinstance(mesh, Mesh):
        device_axes = tuple(str(n) for n in mesh.axis_names)
        for axis, size in zip(device_axes, mesh.devices.shape, strict=True):
            # A Mesh of no device fails in `abstract_mesh` with an IndexError.
            as_int(size, f"{name}[{axis!r}]", minimum=1)
        mesh = mesh.abstract_mesh
    if isinstance(mesh, AbstractMesh):
        # JAX builds an AbstractMesh (and even a Mesh of no device) with any
        # sizes, 0 and negative ones included: check them as a mapping's.
        axis_names = tuple(str(n) for n in mesh.axis_names)
        axis_sizes = tuple(
            as_int(size, f"{name}[{axis!r}]", minimum=1)
            for axis, size in zip(axis_names, mesh.axis_sizes, strict=True)
        )
        _check_mesh_size(axis_names, axis_sizes, name)
        if axis_sizes != tuple(mesh.axis_sizes) or not all(
            type(s) is int for s in mesh.axis_sizes
        ):  # integral floats or NumPy integers: the sizes JAX expects
            return AbstractMesh(axis_sizes, mesh.axis_names, mesh.axis_types)
        return mesh
    if isinstance(mesh, str):
        mesh = _parse_mesh_str(mesh, name)
    if isinstance(mesh, Mapping):
        if not mesh:
            raise ArgumentError(
                name,
                f"`{name}` must name at least one axis, got {{}}. Pass e.g. "
                "{'data': 2, 'model': 4}.",
            )
        names: list[str] = []
        sizes: list[int] = []
        for axis, size in mesh.items():
            if not isinstance(axis, str) or not axis:
                raise TypeError(
                    f"`{name}` axis names must be nonempty strings, got {axis!r} "
                    f"in {dict(mesh)!r}."
                )
            names.append(axis)
            sizes.append(as_int(size, f"{name}[{axis!r}]", minimum=1))
        _check_mesh_size(tuple(names), tuple(sizes), name)
        return AbstractMesh(tuple(sizes), tuple(names))
    raise TypeError(  # pragma: no cover - beartype rejects these first
        f"`{name}` must be a mapping like {{'data': 2, 'model': 4}}, a string like "
        f"'data=2,model=4', a Mesh or an AbstractMesh, got {type(mesh).__name__}."
    )


def _check_mesh_size(names: tuple[str, ...], sizes: tuple[int, ...], name: str) -> None:
    total = math.prod(sizes)
    if total > MAX_MESH_DEVICES:
        shown = " x ".join(f"{n}={s}" for n, s in zip(names, sizes, strict=True))
        raise ArgumentError(
            name,
            f"`{name}` has {total} devices ({shown}); JAX meshes hold at most "
            f"2**31 - 1 = {MAX_MESH_DEVICES} devices (the product of the axis "
            "sizes must fit a 32-bit integer). Use smaller axes.",
        )


def _parse_mesh_str(text: str, name: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in text.split(","):
        axis, sep, size = part.partition("=")
        axis, size = axis.strip(), size.strip()
        if not sep or not axis or not axis.isidentifier():
            raise ArgumentError(
                name,
                f"`{name}` must look like 'data=2,model=4', got {text!r}: {part!r} "
                "is not 'axis=size'.",
            )
        if axis in out:
            raise ArgumentError(
                name, f"`{name}` names axis {axis!r} twice in {text!r}; each axis once."
            )
        try:
            number: float = int(size)
        except ValueError:
            try:
                number = float(size)
            except ValueError:
                raise ArgumentError(
                    name,
                    f"`{name}` must look like 'data=2,model=4', got {text!r}: the "
                    f"size {size!r} of axis {axis!r} is not a number.",
                ) from None
        out[axis] = as_int(number, f"{name}[{axis!r}]", minimum=1)
    return out


def _pairs(value: Any, name: str, example: str) -> list[tuple[str, Any]]:
    """``(label, item)`` for each item of a rules container, labelled for errors.

    Every item is checked by the caller (beartype samples only one).
    """
    if isinstance(value, str | bytes):
        raise TypeError(
            f"`{name}` must be a list of pairs or a mapping, got the string "
            f"{value!r}. Write e.g. [{example}]."
        )
    if isinstance(value, Mapping):
        return [(f"{name}[{key!r}]", (key, item)) for key, item in value.items()]
    return [(f"{name}[{i}]", item) for i, item in enumerate(value)]


def compile_rules(rules: Any) -> list[tuple[str, re.Pattern[str], PartitionSpec]]:
    if rules is None:
        return []
    out: list[tuple[str, re.Pattern[str], PartitionSpec]] = []
    for label, pair in _pairs(rules, "rules", "('kernel$', P(None, 'model'))"):
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise TypeError(
                f"`{label}` must be a (regular expression, PartitionSpec) pair, "
                f"got {pair!r}."
            )
        pattern, spec = pair
        if isinstance(pattern, re.Pattern):
            compiled = pattern
            if not isinstance(compiled.pattern, str):
                raise TypeError(
                    f"`{label}` must use a str regular expression, got the bytes "
                    f"pattern {compiled.pattern!r}."
                )
        elif isinstance(pattern, str):
            try:
                compiled = re.compile(pattern)
            except re.error as err:
                raise ArgumentError(
                    label,
                    f"`{label}` has an invalid regular expression {pattern!r}: "
                    f"{err}. Fix the pattern (rules are searched with re.search).",
                ) from err
        else:
            raise TypeError(
                f"`{label}` must start with a regular expression string, got "
                f"{pattern!r}."
            )
        out.append((compiled.pattern, compiled, as_spec(spec, label)))
    return out


def as_logical_rules(rules: Any) -> tuple[tuple[str, Entry], ...] | None:
    if rules is None:
        return None
    out: list[tuple[str, Entry]] = []
    for label, pair in _pairs(rules, "logical_rules", "('embed', 'model')"):
        ok = isinstance(pair, tuple | list) and len(pair) == 2
        if ok and isinstance(pair[0], str):
            target = pair[1]
            if target is None or isinstance(target, str):
                out.append((pair[0], target))
                continue
            if isinstance(target, tuple | list) and all(
                isinstance(a, str) for a in target
            ):
                out.append((pair[0], tuple(target)))
                continue
        raise TypeError(
            f"`{label}` must be a (logical name, mesh axis or tuple of axes or "
            f"None) pair, got {pair!r}. Write e.g. ('embed', 'model')."
        )
    return tuple(out)


def check_rules(rules: Any = None, logical_rules: Any = None) -> None:
    """Raise what :func:`mesh_config_report` raises for these rules, or nothing.

    Every pair is checked as the planner reads it (a regular expression that
    compiles, a spec of axis names; a logical name and its axes), so rules from
    a file can be refused, naming the rule, before a model is planned.

    Raises:
        TypeError: If ``rules`` or ``logical_rules``, or a pair or spec entry of
            them, has the wrong type.
        ValueError: If a rule's regular expression is invalid (an
            :class:`~nnx_introspect._typing.ArgumentError` naming ``rules``).

    Example:
        >>> check_rules([("kernel$", (None, "model"))], [("embed", "model")])
        >>> check_rules([("[", (None,))])
        Traceback (most recent call last):
        ...
        nnx_introspect._typing.ArgumentError: `rules[0]` has an invalid regular \
expression '[': ...
    """
    compile_rules(rules)
    as_logical_rules(logical_rules)


_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


@typechecked
def parse_bytes(text: str | IntLike, /) -> int:
    """Parse a byte size: ``"16GiB"``, ``"1.5 GB"``, ``"4096B"`` or a number.

    A string needs its unit: binary units (KiB, MiB, GiB, TiB) are powers of
    1024, decimal ones (kB, MB, GB, TB) powers of 1000, ``B`` is bytes; case
    does not matter. A number (``80``, ``4096.0``) is a count of bytes.

    Args:
        text: The size: a string with its unit, or an integer-valued number of
            bytes.

    Returns:
        The number of bytes, a Python ``int``.

    Raises:
        ValueError: If ``text`` is not a nonnegative size with a known unit (a
            string without one, such as ``"80"``, included: 80 bytes or 80
            GiB?), or names a fraction of a byte.

    Example:
        >>> parse_bytes("16GiB"), parse_bytes("1.5 kB"), parse_bytes(4096)
        (17179869184, 1500, 4096)
        >>> parse_bytes("80")
        Traceback (most recent call last):
        ...
        nnx_introspect._typing.ArgumentError: `max_device_bytes` needs a unit, got \
'80': ...
    """
    if not isinstance(text, str):
        return as_int(text, "max_device_bytes", minimum=0)
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is not None and not unit:
        number = match.group(1)
        raise ArgumentError(
            "max_device_bytes",
            f"`max_device_bytes` needs a unit, got {text!r}: write '{number}GiB', "
            f"'{number}GB', or '{number}B' for bytes (an int such as {number} is "
            "bytes).",
        )
    if match is None or unit not in _UNITS:
        raise ArgumentError(
            "max_device_bytes",
            "`max_device_bytes` must be a size like '16GiB', '500MB' or '4096B', "
            f"got {text!r}. Units: B, kB, MB, GB, TB, KiB, MiB, GiB, TiB.",
        )
    value = float(match.group(1)) * _UNITS[unit]
    return as_int(value, "max_device_bytes", minimum=0)


_OPTIMIZERS: dict[str, Callable[[], optax.GradientTransformation]] = {
    "adamw": lambda: optax.adamw(1e-3),
    "adam": lambda: optax.adam(1e-3),
    "sgd": lambda: optax.sgd(1e-3),
    "momentum": lambda: optax.sgd(1e-3, momentum=0.9),
    "adafactor": lambda: optax.adafactor(1e-3),
    "lion": lambda: optax.lion(1e-4),
    "adagrad": lambda: optax.adagrad(1e-3),
    "rmsprop": lambda: optax.rmsprop(1e-3),
}


OPTIMIZER_NAMES = tuple(sorted(_OPTIMIZERS))
"""The optimizer names :func:`optimizer_from_name` (and the CLI) know."""


def optimizer_from_name(name: str) -> optax.GradientTransformation:
    """An optax transformation for a CLI name (``"adamw"``, ``"sgd"``...).

    The learning rate does not change the state's shapes, so a default is used.
    """
    factory = _OPTIMIZERS.get(name.lower())
    if factory is None:
        raise ArgumentError(
            "optimizer",
            f"`optimizer` must be one of {sorted(_OPTIMIZERS)}, got {name!r}. "
            "Pass an optax transformation to the Python API for anything else.",
        )
    return factory()


def load_rules_file(
    path: str | os.PathLike[str],
) -> tuple[list[tuple[str, SpecLike]], list[tuple[str, Any]] | None]:
    """Read rules from a JSON file: ``[[regex, spec], ...]`` or an object.

    The object form is ``{"rules": [[regex, spec], ...], "logical_rules":
    [[name, axis], ...]}``. A spec is a list of entries: ``null``, an axis name,
    or a list of axis names.

    Returns:
        ``(rules, logical_rules)``; ``logical_rules`` is ``None`` when absent.

    Raises:
        ValueError: If the file is not valid JSON of that shape.
    """
    with open(path, encoding="utf-8") as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as err:
            raise ArgumentError(
                "path", f"`--rules` file {str(path)!r} is not JSON: {err}."
            ) from err
    logical: list[tuple[str, Any]] | None = None
    if isinstance(data, dict):
        raw_logical = data.get("logical_rules")
        if raw_logical is not None:
            if not isinstance(raw_logical, list):
                raise ArgumentError(
                    "path",
                    f"`--rules` file {str(path)!r}: 'logical_rules' must be a list of "
                    "[name, axis] pairs.",
                )
            logical = [
                (p[0], tuple(p[1]) if isinstance(p[1], list) else p[1])
                if isinstance(p, list) and len(p) == 2
                else p
                for p in raw_logical
            ]
        data = data.get("rules", [])
    if not isinstance(data, list):
        raise ArgumentError(
            "path",
            f"`--rules` file {str(path)!r} must hold a list of [regex, spec] pairs or "
            'an object {"rules": [...], "logical_rules": [...]}.',
        )
    rules: list[tuple[str, SpecLike]] = []
    for i, pair in enumerate(data):
        if not isinstance(pair, list) or len(pair) != 2:
            raise ArgumentError(
                "path",
                f"`--rules` file {str(path)!r}: entry {i} must be [regex, spec], got "
                f"{pair!r}.",
            )
        spec = pair[1]
        if isinstance(spec, list):
            spec = [tuple(e) if isinstance(e, list) else e for e in spec]
        rules.append((pair[0], spec))
    return rules, logical

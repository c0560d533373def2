"""The plan flags of ``mesh`` and ``step``, checked without JAX and read with it.

``--mesh``, ``--rules``, ``--optimizer`` and ``--max-device-bytes``; and what
``step`` compiles the plan with, ``--batch`` and ``--loss``, read with JAX.
"""

import argparse
import math
import os
import re
from typing import Any

from nnx_introspect.cli.errors import UsageError

OPTIMIZERS = (
    "adafactor",
    "adagrad",
    "adam",
    "adamw",
    "lion",
    "momentum",
    "rmsprop",
    "sgd",
)
"""``--optimizer`` choices: ``_mesh.OPTIMIZER_NAMES``, spelt out to keep JAX out of
``--help`` (a test holds the two equal)."""


def _integral(text: str) -> int | None:
    """``text`` as an integer (``"4"``, ``"4.0"``, ``"1e3"``), else ``None``."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if math.isfinite(value) and value.is_integer() else None


def mesh_arg(text: str) -> str:
    """Check the syntax of ``--mesh`` without JAX; the handler checks the rest.

    This accepts at least every string ``as_abstract_mesh`` accepts (a test holds
    them together); limits such as the largest axis are left to the library.
    """
    mesh_axes(text, check=True)
    return text


def mesh_axes(text: str, *, check: bool = False) -> tuple[tuple[str, int], ...]:
    """``"data=2, model=4"`` -> ``(("data", 2), ("model", 4))``, without JAX.

    The axes, sizes and order ``as_abstract_mesh`` reads (``4.0`` is 4); with
    ``check``, a text it would refuse raises ``argparse.ArgumentTypeError``.
    """
    seen: dict[str, int] = {}
    for part in text.split(","):
        axis, sep, size = (x.strip() for x in part.partition("="))
        if check and (not sep or not axis.isidentifier()):
            raise argparse.ArgumentTypeError(
                f"must look like 'data=2,model=4', got {text!r}: {part!r} is not "
                "'axis=size'"
            )
        if check and axis in seen:
            raise argparse.ArgumentTypeError(
                f"names axis {axis!r} twice in {text!r}; name each axis once"
            )
        number = _integral(size)
        if check and (number is None or number < 1):
            raise argparse.ArgumentTypeError(
                f"the size of axis {axis!r} must be a positive integer, got "
                f"{size!r} in {text!r}"
            )
        seen[axis] = number or 0
    return tuple(seen.items())


_SIZE = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([A-Za-z]*)\s*")
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_UNITS |= {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def bytes_arg(text: str) -> int:
    """``--max-device-bytes``: what ``_mesh.parse_bytes`` gives, without JAX.

    A size needs its unit: a bare ``80`` (80 bytes or 80 GiB?) is refused.
    A test holds the two equal (same value, or both reject).
    """
    match = _SIZE.fullmatch(text)
    unit = match.group(2).lower() if match else ""
    if match is not None and not unit:
        number = match.group(1)
        raise argparse.ArgumentTypeError(
            f"needs a unit, got {text!r}: write {number}GiB, {number}GB, or "
            f"{number}B for bytes"
        )
    if match is None or unit not in _UNITS:
        raise argparse.ArgumentTypeError(
            f"must be a size like '16GiB', '500MB' or '4096B', got {text!r} "
            "(units: B, kB, MB, GB, TB, KiB, MiB, GiB, TiB)"
        )
    value = float(match.group(1)) * _UNITS[unit]
    if not math.isfinite(value) or not value.is_integer():
        raise argparse.ArgumentTypeError(
            f"must be a whole number of bytes, got {text!r} ({value:g} bytes)"
        )
    return int(value)


def _rules_arg(text: str) -> str:
    """``--rules``: an existing file (its content is checked by the handler)."""
    if not os.path.isfile(text):
        what = "is a directory" if os.path.isdir(text) else "does not exist"
        raise argparse.ArgumentTypeError(
            f"the rules file {text!r} {what}; pass a JSON file of [regex, spec] pairs"
        )
    return text


def _step_mesh_arg(text: str) -> str:
    """``step --mesh``: a mesh as :func:`mesh_arg` checks it, or ``auto``.

    ``auto`` is spelt so exactly: ``Auto`` or ``AUTO`` is refused, saying so.
    """
    if text == "auto":
        return text
    if text.strip().lower() == "auto":
        raise argparse.ArgumentTypeError(
            f"write 'auto' (lower case) to compare every factorisation of the "
            f"devices, got {text!r}"
        )
    return mesh_arg(text)


def add_plan_args(
    parser: argparse.ArgumentParser,
    *,
    optimizer_help: str,
    budget_help: str,
    several_meshes: bool = False,
) -> None:
    """Add ``--mesh``, ``--rules``, ``--optimizer`` and ``--max-device-bytes``.

    With ``several_meshes`` (``step``), ``--mesh`` may be repeated or be
    ``auto``: the handler compares the meshes.
    """
    if several_meshes:
        parser.add_argument(
            "--mesh",
            required=True,
            action="append",
            type=_step_mesh_arg,
            help="the proposed mesh, e.g. 'data=2,model=4' (any size); repeat it "
            "to compare meshes, or 'auto' to compare every factorisation of the "
            "devices over the axes the model's sharding names",
        )
    else:
        parser.add_argument(
            "--mesh",
            required=True,
            type=mesh_arg,
            help="the proposed mesh, e.g. 'data=2,model=4' (any size)",
        )
    parser.add_argument(
        "--rules",
        metavar="FILE",
        type=_rules_arg,
        default=None,
        help='JSON file: [[regex, spec], ...] or {"rules": [...], '
        '"logical_rules": [[name, axis], ...]}; first matching regex wins',
    )
    parser.add_argument(
        "--optimizer", choices=OPTIMIZERS, default=None, help=optimizer_help
    )
    parser.add_argument(
        "--max-device-bytes",
        type=bytes_arg,
        default=None,
        metavar="SIZE",
        help=budget_help,
    )


def mesh_and_rules(
    args: argparse.Namespace, *, name_the_file: bool = False
) -> tuple[Any, Any, Any]:
    """The ``AbstractMesh`` and the rules of ``--mesh`` / ``--rules``.

    The library's own checks (such as the largest mesh) are usage errors naming
    the flag; so are rules the planner would refuse (see :func:`read_rules`).
    """
    from nnx_introspect._mesh import as_abstract_mesh

    try:
        mesh = as_abstract_mesh(args.mesh, "--mesh")
    except (TypeError, ValueError) as error:
        raise UsageError(f"argument --mesh: {error}") from error
    rules, logical = read_rules(args, name_the_file=name_the_file)
    return mesh, rules, logical


def read_rules(
    args: argparse.Namespace, *, name_the_file: bool = False
) -> tuple[Any, Any]:
    """``(rules, logical_rules)`` of ``--rules``, checked (``None`` without it).

    A file that is not JSON of the documented shape, or whose rules the planner
    refuses (a regular expression that does not compile, a spec that is not
    axis names), is a usage error naming ``--rules``; the planner's refusal is
    prefixed with the file's name when ``name_the_file``.
    """
    if args.rules is None:
        return None, None
    from nnx_introspect._mesh import check_rules, load_rules_file

    try:
        rules, logical = load_rules_file(args.rules)
    except (OSError, ValueError) as error:
        raise UsageError(f"argument --rules: {error}") from error
    try:
        check_rules(rules, logical)
    except (TypeError, ValueError) as error:
        where = f"{args.rules!r}: " if name_the_file else ""
        raise UsageError(f"argument --rules: {where}{error}") from error
    return rules, logical


def step_inputs(args: argparse.Namespace) -> tuple[tuple[Any, ...], Any]:
    """``(batch, loss)`` of ``step``'s ``--batch`` and ``--loss``.

    ``--batch`` becomes ``jax.ShapeDtypeStruct`` leaves (a dtype JAX does not
    know is a usage error naming the flag); ``--loss`` a name (``"mean"``
    when it was not given), ``None`` for ``none``, or the
    ``package.module:function`` as given.
    """
    from nnx_introspect._step import parse_batch

    try:
        batch = tuple(parse_batch(name, dims) for name, dims in args.batch)
    except ValueError as error:
        raise UsageError(f"argument --batch: {error}") from error
    given = "mean" if args.loss is None else args.loss  # None: not given
    loss: Any = None if given == "none" else given
    return batch, loss

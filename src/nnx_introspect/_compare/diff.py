"""The result of a comparison: the StateDiff report, its DiffEntry rows, their text."""

import dataclasses
import math
from typing import Any, Literal

from nnx_introspect._render import Report, Table

Problem = Literal["missing", "extra", "variable-type", "shape", "dtype", "value"]
_FLIPPED: dict[Problem, Problem] = {"missing": "extra", "extra": "missing"}


@dataclasses.dataclass(frozen=True)
class DiffEntry:
    """One difference at one path.

    Attributes:
        path: The leaf's path, keys joined by ``/``.
        problem: ``"missing"`` (in ``a``, not in ``b``), ``"extra"`` (in ``b``,
            not in ``a``), ``"variable-type"``, ``"shape"``, ``"dtype"`` or
            ``"value"``.
        a: What ``a`` holds there (a type name, shape or dtype; ``"-"`` if absent).
        b: What ``b`` holds there.
        n_different: For ``"value"``: elements outside the tolerance, exact.
        n_elements: For ``"value"``: elements compared.
        max_abs_diff: For ``"value"``: the largest ``|a - b|`` (``nan`` if a NaN
            faces a number).
        max_rel_diff: For ``"value"``: the largest ``|a - b| / |a|`` over the
            differing elements where ``a != 0``, or ``None`` if there are none.
        message: A sentence saying what differs.

    Example:
        >>> from flax import nnx
        >>> from nnx_introspect import compare_states
        >>> a = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
        >>> b = nnx.Linear(2, 3, rngs=nnx.Rngs(1))
        >>> entry = compare_states(a, b).entries[0]
        >>> entry.path, entry.problem, entry.n_different, entry.n_elements
        ('kernel', 'value', 6, 6)
    """

    path: str
    problem: Problem
    a: str
    b: str
    message: str
    n_different: int | None = None
    n_elements: int | None = None
    max_abs_diff: float | None = None
    max_rel_diff: float | None = None


@dataclasses.dataclass(frozen=True)
class StateDiff(Report):
    """Every difference between two states, per path; never first-error-only.

    ``a`` is the reference: ``"missing"`` means a path of ``a`` that ``b`` lacks,
    ``"extra"`` a path of ``b`` that ``a`` lacks.

    Attributes:
        a_label: What ``a`` is (``"a"``, ``"target"``, ``"build 1"``).
        b_label: What ``b`` is (``"b"``, ``"checkpoint"``, ``"build 2"``).
        entries: Every difference found, in path order.
        n_paths_a: Leaves in ``a``.
        n_paths_b: Leaves in ``b``.
        n_common: Paths present in both.
        values_compared: Whether values were compared for every common path whose
            shape and dtype match (``False`` when a side is abstract or is
            checkpoint metadata: then only structure, shapes and dtypes were).
        kinds_compared: Whether variable types were compared (both sides must
            carry NNX variable types; checkpoints and plain mappings do not).
        rtol: Relative tolerance used for values.
        atol: Absolute tolerance used for values.
        notes: Caveats, in sentences.

    Example:
        >>> from flax import nnx
        >>> from nnx_introspect import compare_states
        >>> a = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
        >>> b = nnx.Linear(2, 4, rngs=nnx.Rngs(0))
        >>> diff = compare_states(a, b)
        >>> diff.equal, [(e.path, e.problem) for e in diff.entries]
        (False, [('bias', 'shape'), ('kernel', 'shape')])
    """

    SCHEMA = "nnx-introspect/state-diff"
    SCHEMA_VERSION = 1

    a_label: str
    b_label: str
    entries: tuple[DiffEntry, ...]
    n_paths_a: int
    n_paths_b: int
    n_common: int
    values_compared: bool
    kinds_compared: bool
    rtol: float
    atol: float
    notes: tuple[str, ...] = ()

    @property
    def equal(self) -> bool:
        """Whether no difference was found (within what was compared)."""
        return not self.entries

    @property
    def paths(self) -> tuple[str, ...]:
        """The paths with at least one difference, in order, each once."""
        return tuple(dict.fromkeys(e.path for e in self.entries))

    def at(self, path: str) -> tuple[DiffEntry, ...]:
        """The differences found at ``path`` (``"l1/kernel"``)."""
        if not isinstance(path, str):
            raise TypeError(
                f"`path` must be a string of keys joined by '/' (such as "
                f"'l1/kernel'), got {path!r} of type {type(path).__name__}."
            )
        return tuple(e for e in self.entries if e.path == path)

    def reversed(self) -> "StateDiff":
        """The same comparison read the other way: ``b`` first, ``a`` second.

        Labels and path counts swap, each entry's ``a`` and ``b`` swap,
        ``"missing"`` becomes ``"extra"`` and back, and messages are reworded
        for the new order. Everything else is kept as measured: the value
        figures (``n_different``, ``max_abs_diff``, ``max_rel_diff``) and the
        tolerances still use the original ``a`` as the reference, so with
        tolerances or for ``max_rel_diff`` this is the original comparison
        relabelled, not a new one. Exact comparisons (the default) read the
        same both ways, so ``compare_states(a, b).reversed()`` then holds the
        entries of ``compare_states(b, a)``, except that ``max_rel_diff`` is
        still relative to the old ``a`` and the labels keep naming the old
        sides (the old ``a`` is now ``b_label``).

        Returns:
            A new :class:`StateDiff`; ``self`` is unchanged.

        Example:
            >>> from flax import nnx
            >>> from nnx_introspect import compare_states
            >>> a = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
            >>> diff = compare_states(a, {"kernel": a.kernel[...]})
            >>> [(e.path, e.problem, e.a, e.b) for e in diff.entries]
            [('bias', 'missing', 'Param float32[3]', '-')]
            >>> back = diff.reversed()
            >>> back.a_label, back.b_label, back.n_paths_a, back.n_paths_b
            ('b', 'a', 1, 2)
            >>> [(e.path, e.problem, e.a, e.b) for e in back.entries]
            [('bias', 'extra', '-', 'Param float32[3]')]
        """
        a_label, b_label = self.b_label, self.a_label
        entries = []
        for e in self.entries:
            problem = _FLIPPED.get(e.problem, e.problem)
            message = e.message
            if problem != "value":
                message = sentence(e.path, problem, e.b, e.a, a_label, b_label)
            entries.append(
                dataclasses.replace(e, problem=problem, a=e.b, b=e.a, message=message)
            )
        return dataclasses.replace(
            self,
            a_label=a_label,
            b_label=b_label,
            entries=tuple(entries),
            n_paths_a=self.n_paths_b,
            n_paths_b=self.n_paths_a,
        )

    def table(self) -> Table:
        """The diff as a :class:`~nnx_introspect.Table`."""
        rows = tuple(
            (
                e.path,
                e.problem,
                e.a,
                e.b,
                "" if e.n_different is None else f"{e.n_different}/{e.n_elements}",
                "" if e.max_abs_diff is None else f"{e.max_abs_diff:.3g}",
                "" if e.max_rel_diff is None else f"{e.max_rel_diff:.3g}",
            )
            for e in self.entries
        )
        verdict = (
            "equal"
            if self.equal
            else (f"{len(self.entries)} difference(s) at {len(self.paths)} path(s)")
        )
        what = "values" if self.values_compared else "structure, shapes and dtypes"
        totals = (
            (
                f"{self.n_common} common path(s)",
                f"{self.n_paths_a} in {self.a_label}, "
                f"{self.n_paths_b} in {self.b_label}",
                "",
                "",
                "",
                "",
                "",
            ),
        )
        return Table(
            title=f"State diff: {self.a_label} vs {self.b_label}: {verdict} "
            f"(compared {what})",
            columns=(
                "path",
                "problem",
                self.a_label,
                self.b_label,
                "differing",
                "max |a-b|",
                "max rel",
            ),
            rows=rows,
            totals=totals,
            notes=self.notes,
        )

    def json_data(self) -> dict[str, Any]:
        """Exact figures for JSON output (non-finite floats as strings)."""
        return {
            "equal": self.equal,
            "a_label": self.a_label,
            "b_label": self.b_label,
            "n_paths_a": self.n_paths_a,
            "n_paths_b": self.n_paths_b,
            "n_common": self.n_common,
            "values_compared": self.values_compared,
            "kinds_compared": self.kinds_compared,
            "rtol": self.rtol,
            "atol": self.atol,
            "entries": [
                {
                    **dataclasses.asdict(e),
                    "max_abs_diff": json_float(e.max_abs_diff),
                    "max_rel_diff": json_float(e.max_rel_diff),
                }
                for e in self.entries
            ],
            "notes": list(self.notes),
        }


def json_float(x: float | None) -> float | str | None:
    """``x`` as strict JSON allows: finite floats stay, NaN and inf become strings."""
    if x is None or math.isfinite(x):
        return x
    return str(x)


def sentence(
    path: str, problem: Problem, x: str, y: str, a_label: str, b_label: str
) -> str:
    """The message of a structural entry: ``x`` is what ``a`` holds, ``y`` ``b``."""
    if problem == "missing":
        return f"{path}: in {a_label} ({x}), not in {b_label}."
    if problem == "extra":
        return f"{path}: in {b_label} ({y}), not in {a_label}."
    what = {"variable-type": "", "shape": "shape ", "dtype": "dtype "}[problem]
    return f"{path}: {what}{x} in {a_label}, {y} in {b_label}."

"""State comparison: every difference between two states, per path.

Matching sums do not prove two models equal, and one forward output cannot prove
every parameter matches (a zero input hides every kernel). :func:`compare_states`
compares what does: the set of paths, each leaf's variable type, shape, dtype and
values (with a tolerance), collecting every difference instead of stopping at the
first. The checkpoint checks in ``_checkpoint/`` reuse the same engine.

Modules: ``inputs`` (what a comparison accepts, checked and turned into records),
``diff`` (the :class:`StateDiff` report), ``values`` (value comparison, across
processes too), ``records`` (the engine: two inventories path by path),
``states`` (:func:`compare_states`) and ``reproducible``
(:func:`check_reproducible_init`).
"""

from nnx_introspect._compare.diff import DiffEntry as DiffEntry
from nnx_introspect._compare.diff import Problem as Problem
from nnx_introspect._compare.diff import StateDiff as StateDiff
from nnx_introspect._compare.diff import json_float as json_float
from nnx_introspect._compare.inputs import Comparable as Comparable
from nnx_introspect._compare.inputs import Tolerance as Tolerance
from nnx_introspect._compare.inputs import check_leaves as check_leaves
from nnx_introspect._compare.inputs import check_tolerance as check_tolerance
from nnx_introspect._compare.inputs import is_key_dtype as is_key_dtype
from nnx_introspect._compare.inputs import keypath_str as keypath_str
from nnx_introspect._compare.inputs import leaf_dtype as leaf_dtype
from nnx_introspect._compare.inputs import records_of as records_of
from nnx_introspect._compare.records import diff_records as diff_records
from nnx_introspect._compare.reproducible import (
    check_reproducible_init as check_reproducible_init,
)
from nnx_introspect._compare.states import compare_states as compare_states
from nnx_introspect._compare.values import is_global as is_global
from nnx_introspect._compare.values import value_entry as value_entry

__all__ = [
    "Comparable",
    "DiffEntry",
    "StateDiff",
    "Tolerance",
    "check_leaves",
    "check_reproducible_init",
    "check_tolerance",
    "compare_states",
    "diff_records",
    "is_global",
    "is_key_dtype",
    "json_float",
    "keypath_str",
    "leaf_dtype",
    "records_of",
]

"""compare_states: every difference between two states, values included."""

from nnx_introspect._compare.diff import StateDiff
from nnx_introspect._compare.inputs import (
    Comparable,
    Tolerance,
    check_tolerance,
    records_of,
)
from nnx_introspect._compare.records import diff_records
from nnx_introspect._typing import typechecked


@typechecked
def compare_states(
    a: Comparable,
    b: Comparable,
    /,
    *,
    rtol: Tolerance = 0.0,
    atol: Tolerance = 0.0,
) -> StateDiff:
    """Compare two states path by path and report every difference.

    For each path: present in both (else ``"missing"`` / ``"extra"``), same
    variable type (when both sides record one), same shape, same dtype and, when
    both sides hold values, the same values within the tolerance. Nothing stops
    at the first difference. Exact by default (``rtol = atol = 0``): a restore
    or a rebuild from the same seed must match bitwise; pass tolerances to
    compare across devices or precisions. An abstract side (``nnx.eval_shape``)
    limits the comparison to structure, shapes and dtypes, and the result says
    so (``values_compared`` is ``False``). Neither side is modified; values are
    copied to the host one leaf at a time. Arrays sharded over several
    processes (``jax.distributed``) are compared where their shards live: each
    process reads its own shards and the processes exchange a few numbers per
    leaf, so every process gets the same diff and no array is gathered. Every
    process must then call ``compare_states`` on the same pair, as for any
    multi-process JAX computation.

    Args:
        a: The reference: an ``nnx.Module`` (or other graph node), an
            ``nnx.State``, concrete or abstract, or a nested mapping of arrays
            (``state.to_pure_dict()``).
        b: The state to check, of the same forms.
        rtol: Relative tolerance for floating values, ``>= 0``.
        atol: Absolute tolerance for floating values, ``>= 0``.

    Returns:
        A :class:`StateDiff`; ``diff.equal`` is ``True`` when nothing differs.

    Raises:
        TypeError: If ``a`` or ``b`` is not a module, state or mapping, holds a
            leaf that is not a numeric array (``None``, a string, an object; the
            message names the side and the path), or a tolerance is not a float.
        ValueError: If a tolerance is negative or not finite.

    Example:
        >>> from flax import nnx
        >>> a = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
        >>> compare_states(a, nnx.Linear(2, 3, rngs=nnx.Rngs(0))).equal
        True
        >>> diff = compare_states(a, nnx.Linear(2, 3, rngs=nnx.Rngs(1)))
        >>> [(e.path, e.problem, e.n_different) for e in diff.entries]
        [('kernel', 'value', 6)]
    """
    rtol_f = check_tolerance(rtol, "rtol")
    atol_f = check_tolerance(atol, "atol")
    return diff_records(
        records_of(a, "a"), records_of(b, "b"), rtol=rtol_f, atol=atol_f
    )

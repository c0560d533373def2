"""check_reproducible_init: build a model twice from one seed and diff the states."""

from collections.abc import Callable

from flax import nnx

from nnx_introspect._abstract import check_takes_rngs
from nnx_introspect._compare.diff import StateDiff
from nnx_introspect._compare.inputs import check_leaves
from nnx_introspect._compare.records import diff_records
from nnx_introspect._inventory import inventory
from nnx_introspect._typing import IntLike, as_int, typechecked


@typechecked
def check_reproducible_init(
    factory: Callable[[nnx.Rngs], nnx.Module], seed: IntLike
) -> StateDiff:
    """Build a model twice, each from a fresh ``nnx.Rngs(seed)``, and diff the states.

    Compares the full states (every parameter, batch statistic and RNG
    variable), not one forward output: a zero input would hide every kernel
    difference. The comparison is exact. It catches factories that do not use
    the ``rngs`` they are given: a closure over one shared ``nnx.Rngs`` advances
    between the builds, so the second build gets different keys. A seeded build
    recreates initial values only, never trained ones.

    Args:
        factory: A callable taking ``rngs`` and returning an ``nnx.Module``.
        seed: An integer-valued seed, ``>= 0``.

    Returns:
        The :class:`StateDiff` of build 1 against build 2; ``.equal`` means the
        initialization is reproducible.

    Raises:
        TypeError: If ``seed`` is not an integer-valued scalar or ``factory``
            does not return an ``nnx.Module`` of numeric arrays.
        ValueError: If ``seed`` is negative or non-integral.

    Example:
        >>> from flax import nnx
        >>> check_reproducible_init(lambda rngs: nnx.Linear(2, 3, rngs=rngs), 0).equal
        True
        >>> shared = nnx.Rngs(0)  # the classic mistake: one advancing Rngs
        >>> def factory(rngs):
        ...     return nnx.Linear(2, 3, rngs=shared)  # ignores the rngs it is given
        >>> diff = check_reproducible_init(factory, 0)
        >>> diff.equal, diff.paths
        (False, ('kernel',))
    """
    key = as_int(seed, "seed", minimum=0)
    check_takes_rngs(factory)
    builds = []
    for _ in range(2):
        module = factory(nnx.Rngs(key))
        if not isinstance(module, nnx.Module):
            raise TypeError(
                f"`factory` must return an nnx.Module, got {type(module).__name__}. "
                "Pass a callable such as `lambda rngs: nnx.Linear(3, 2, rngs=rngs)`."
            )
        check_leaves(nnx.state(module), "factory", "must build numeric arrays")
        builds.append(module)
    return diff_records(
        inventory(builds[0]),
        inventory(builds[1]),
        rtol=0.0,
        atol=0.0,
        a_label="build 1",
        b_label="build 2",
    )

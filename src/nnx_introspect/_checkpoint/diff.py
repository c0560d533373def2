"""Two checkpoints compared with each other (the CLI's ``diff`` of two directories)."""

from nnx_introspect._checkpoint.files import PathLike
from nnx_introspect._checkpoint.read import read_checkpoint
from nnx_introspect._checkpoint.restore import restore_all
from nnx_introspect._compare import (
    StateDiff,
    check_tolerance,
    diff_records,
    records_of,
)


def diff_checkpoints(
    path_a: PathLike,
    path_b: PathLike,
    *,
    values: bool = True,
    rtol: float = 0.0,
    atol: float = 0.0,
) -> StateDiff:
    """Compare two checkpoints per path (the CLI's ``diff`` of two directories).

    With ``values=False`` only their metadata is read and compared (structure,
    shapes, dtypes); otherwise both are restored to the default device and
    compared with :func:`~nnx_introspect.compare_states`. Layouts may differ.
    """
    a, b = read_checkpoint(path_a), read_checkpoint(path_b)
    if not values:
        return diff_records(
            a.records, b.records, rtol=rtol, atol=atol, compare_values=False
        )
    return diff_records(
        records_of(restore_all(a), "a"),
        records_of(restore_all(b), "b"),
        rtol=check_tolerance(rtol, "rtol"),
        atol=check_tolerance(atol, "atol"),
    )

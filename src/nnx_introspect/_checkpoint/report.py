"""checkpoint_report: a checkpoint's arrays described from its metadata alone."""

import dataclasses
from typing import Any

from nnx_introspect._checkpoint.files import PathLike
from nnx_introspect._checkpoint.read import Layout, read_checkpoint
from nnx_introspect._checkpoint.shardings import sharding_str
from nnx_introspect._render import Report, Table, format_bytes
from nnx_introspect._typing import typechecked


@dataclasses.dataclass(frozen=True)
class CheckpointLeaf:
    """One array of a checkpoint, as its metadata describes it.

    Attributes:
        path: The array's path, keys joined by ``/`` (without the ``value`` key
            of the ``"nnx-state"`` layout).
        shape: The global shape.
        dtype: The stored dtype's name.
        size: Number of elements, an exact Python ``int``.
        nbytes: Packed bytes of the array (not of its compressed files).
        sharding: How it was sharded when saved (``"P(None, 'model') on
            model=8"``, ``"single device cpu:0"``), or ``"-"`` if not recorded.

    Example:
        >>> import pathlib, shutil, tempfile
        >>> import orbax.checkpoint as ocp
        >>> from flax import nnx
        >>> from nnx_introspect import checkpoint_report
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "ckpt"
        >>> with ocp.StandardCheckpointer() as checkpointer:
        ...     checkpointer.save(path, nnx.state(nnx.Linear(4, 3, rngs=nnx.Rngs(0))))
        >>> leaf = checkpoint_report(path).leaves[1]
        >>> leaf.path, leaf.shape, leaf.dtype, leaf.nbytes
        ('kernel', (4, 3), 'float32', 48)
        >>> shutil.rmtree(path.parent)  # the example's checkpoint
    """

    path: str
    shape: tuple[int, ...]
    dtype: str
    size: int
    nbytes: int
    sharding: str


@dataclasses.dataclass(frozen=True)
class CheckpointReport(Report):
    """The contents of an orbax checkpoint, read from its metadata alone.

    Attributes:
        path: The checkpoint directory.
        layout: ``"nnx-state"`` or ``"pure-dict"`` (see the module docs).
        leaves: One :class:`CheckpointLeaf` per stored array, in tree order.

    Example:
        >>> import pathlib, shutil, tempfile
        >>> import orbax.checkpoint as ocp
        >>> from flax import nnx
        >>> from nnx_introspect import checkpoint_report
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "ckpt"
        >>> with ocp.StandardCheckpointer() as checkpointer:
        ...     checkpointer.save(path, nnx.state(nnx.Linear(4, 3, rngs=nnx.Rngs(0))))
        >>> report = checkpoint_report(path)
        >>> report.layout, [leaf.path for leaf in report.leaves]
        ('nnx-state', ['bias', 'kernel'])
        >>> shutil.rmtree(path.parent)  # the example's checkpoint
    """

    SCHEMA = "nnx-introspect/checkpoint"
    SCHEMA_VERSION = 1

    path: str
    layout: Layout
    leaves: tuple[CheckpointLeaf, ...]

    @property
    def n_elements(self) -> int:
        """Elements stored, over every array."""
        return sum(leaf.size for leaf in self.leaves)

    @property
    def nbytes(self) -> int:
        """Packed bytes of every array (uncompressed)."""
        return sum(leaf.nbytes for leaf in self.leaves)

    def table(self) -> Table:
        """The checkpoint as a :class:`~nnx_introspect.Table`."""
        rows = tuple(
            (
                leaf.path,
                str(leaf.shape),
                leaf.dtype,
                f"{leaf.size:,}",
                format_bytes(leaf.nbytes),
                leaf.sharding,
            )
            for leaf in self.leaves
        )
        totals = (
            (
                f"{len(self.leaves)} arrays",
                "",
                "",
                f"{self.n_elements:,}",
                format_bytes(self.nbytes),
                "",
            ),
        )
        return Table(
            title=f"Checkpoint {self.path} ({self.layout} layout)",
            columns=("path", "shape", "dtype", "elements", "bytes", "sharding"),
            rows=rows,
            totals=totals,
            notes=(
                ("Read from metadata only: no array was loaded.",)
                if self.leaves
                else (
                    "The checkpoint is empty: its metadata is intact and lists no "
                    "array (a damaged checkpoint raises an error instead).",
                )
            ),
        )

    def json_data(self) -> dict[str, Any]:
        """Exact figures for JSON output."""
        return {
            "path": self.path,
            "layout": self.layout,
            "n_arrays": len(self.leaves),
            "n_elements": self.n_elements,
            "nbytes": self.nbytes,
            "leaves": [
                {**dataclasses.asdict(leaf), "shape": list(leaf.shape)}
                for leaf in self.leaves
            ],
        }


@typechecked
def checkpoint_report(path: PathLike, /) -> CheckpointReport:
    """Describe an orbax checkpoint from its metadata, without loading any array.

    Reads the tree, shapes, dtypes and save-time shardings that orbax records
    beside the data, so a checkpoint of any size is described in milliseconds
    and nothing is allocated on any device.

    Args:
        path: The checkpoint directory (the one passed to ``save``; it holds
            ``_METADATA``).

    Returns:
        A :class:`CheckpointReport`.

    Raises:
        FileNotFoundError: If ``path`` does not exist (also a ``ValueError``).
        TypeError: If ``path`` is not a ``str``, ``bytes`` or ``os.PathLike``.
        ValueError: If ``path`` is not an orbax PyTree checkpoint (the message
            lists checkpoints found inside it, such as a step's ``default``),
            is not UTF-8, or is damaged: the message names the damaged file. A
            checkpoint that really holds no array gives a report with no leaves.

    Example:
        >>> import pathlib, shutil, tempfile
        >>> import orbax.checkpoint as ocp
        >>> from flax import nnx
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "ckpt"
        >>> with ocp.StandardCheckpointer() as checkpointer:
        ...     checkpointer.save(path, nnx.state(nnx.Linear(2, 3, rngs=nnx.Rngs(0))))
        >>> report = checkpoint_report(path)
        >>> report.layout, [(leaf.path, leaf.shape) for leaf in report.leaves]
        ('nnx-state', [('bias', (3,)), ('kernel', (2, 3))])
        >>> shutil.rmtree(path.parent)  # the example's checkpoint
    """
    ckpt = read_checkpoint(path)
    return CheckpointReport(
        path=str(ckpt.path),
        layout=ckpt.layout,
        leaves=tuple(
            CheckpointLeaf(
                path=r.path_str,
                shape=r.shape,
                dtype=str(getattr(r.dtype, "name", r.dtype)),
                size=r.size,
                nbytes=r.nbytes,
                sharding=sharding_str(r.sharding),
            )
            for r in ckpt.records
        ),
    )

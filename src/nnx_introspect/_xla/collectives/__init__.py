"""The collectives of a compiled, SPMD-partitioned step, read from its HLO text.

:func:`read_collectives` reads the optimized per-device module XLA compiled
(``compiled.as_text()``, or :func:`compiled_hlo_text`, which works for XLA:CPU,
a deviceless XLA:GPU and XLA:TPU compile alike) and lists every all-gather,
reduce-scatter, all-reduce, all-to-all, ragged all-to-all and
collective-permute with its bytes,
the mesh axes its groups span, its source line and how many times one step runs
it. Nothing is compiled or executed here.

What one row is, per backend (as the pinned jaxlib 0.10.2 and libtpu 0.0.52
write their programs):

* a synchronous collective (``all-gather``, XLA:CPU's and XLA:TPU's usual form);
* an asynchronous pair (``all-gather-start`` / ``all-gather-done``, XLA:GPU's
  form, its ``all-to-all-start`` and ``ragged-all-to-all-start`` too): one row,
  at the start;
* an ``async-start`` wrapping a computation that holds the collective (XLA:TPU's
  async all-to-all and ragged all-to-all): one row, the collective inside;
* XLA:TPU's async collective fusion: the same collective appears in three kinds
  of fusion, one whose root is ``custom-call(..., custom_call_target=
  "AsyncCollectiveStart")``, continuations (a ``continuation_config`` in their
  ``backend_config``) and one whose root is ``AsyncCollectiveDone``: one row,
  at the start;
* XLA:TPU's reduce-scatter fusion (a ``kCustom`` fusion whose computation
  all-reduces and keeps this device's ``dynamic-slice`` of the sum): one
  ``reduce-scatter`` row named after the fusion, since that is what it moves.
  XLA:CPU has no reduce-scatter: it all-reduces and slices afterwards, and the
  row is the all-reduce it runs.

Bytes (``Collective.nbytes``) are per device and execution, and logical:
elements times the element size, without a backend's tile padding; the
**result** of an all-gather (the gathered buffer), an all-reduce, an all-to-all
and a collective-permute, the **operand** (the input) of a reduce-scatter.
A ragged all-to-all's sizes are run-time values: its bytes are its payload,
the smaller of its send buffer and its receive buffer (what each device sends
on average when every row is sent, as a dropless MoE's dispatch and combine
do), and its receive buffer, which XLA sizes statically for the worst case, is
``Collective.worst_case_receive_bytes`` (``ragged``).
Wire bytes are what each device sends by the ring algorithms over groups of
``n``: ``(n-1)/n`` of the bytes for an all-gather, a reduce-scatter and an
all-to-all (ragged or not), ``2(n-1)/n`` for an all-reduce, the bytes for a
collective-permute (:func:`wire_factor`), kept exact as a
:class:`~fractions.Fraction`.

Replica-group ids are partition ids: positions in the flat mesh, in
``mesh.devices.flat`` order (the order ``jax.jit`` hands XLA its devices), so a
mesh laid out in any physical device order maps back to its axes. XLA's
``mesh['axis_0'=...]`` form names its own factoring of the devices, not the
mesh's axes (XLA:CPU prints ``mesh['axis_0'=8,'axis_1'=1]`` for a one-axis mesh,
XLA:GPU ``mesh['axis_0'=2,'axis_1'=1,'axis_2'=4]`` for a 2x4 one), so its groups
are expanded to ids first and mapped back to the mesh from there.

A collective inside while loops counts once per iteration: XLA's
``known_trip_count`` (XLA:CPU and XLA:GPU state it), else the trips of a counter
compared ``LT`` with a constant and stepped by a constant from a constant
(XLA:TPU states none); a pipelined collective XLA peels out of its loop is a
row of its own, outside.

A collective XLA's combiners made of many (one instruction, a tuple of
arrays, no ``op_name`` or stack frame) gets one source per array
(``Collective.sources``), from the ``get-tuple-element`` that takes the array
out of the result, the result's users or the operand's producers (``sources``).
A collective over device groups that are not whole mesh axes (axes ``"?"``)
is explained in a note and its bytes are keyed by the axes each group lies
inside for the step-time estimate (``irregular``).

The program's text is parsed by :mod:`nnx_introspect._xla.hlo` (instructions,
attributes, stack frames, shapes and bytes). The modules: ``errors``
(:class:`CollectiveFormatError`, the parser's errors turned into it),
``loops`` (how many times one step runs each computation: while loops and
their trip counts), ``sources`` (each array's source), ``irregular`` (the
``"?"`` groups' span and note), ``ragged`` (what a ragged all-to-all's bytes
are, and its note), ``groups`` (replica groups in every form, as partition
ids, then as mesh axes), ``report`` (:class:`Collectives`, its
:class:`Collective` rows and totals, :func:`wire_factor`) and ``read``
(:func:`compiled_hlo_text` and :func:`read_collectives`, composing them: each
collective read once, async pairs and XLA:TPU's fusions included) and
``megascale`` (a multi-slice TPU program's transfers across slices: the
megascale runtime's ``send``/``recv`` pairs, read as collectives over the
data-center network, ``Collective.network == "DCN"``) and ``overlap`` (each
asynchronous collective's window in the schedule: the compute between its
start and its done, which its time may hide behind).

Example:
    >>> import jax, jax.numpy as jnp, numpy as np
    >>> from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    >>> mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("data", "fsdp"))
    >>> w = jax.ShapeDtypeStruct((64, 32), jnp.float32,
    ...                          sharding=NamedSharding(mesh, P("fsdp")))
    >>> gather = jax.jit(lambda w: w * 2, out_shardings=NamedSharding(mesh, P()))
    >>> found = read_collectives(
    ...     compiled_hlo_text(gather.lower(w).compile()), (("data", 2), ("fsdp", 4))
    ... )
    >>> [(row.kind, row.axes, row.nbytes, row.wire_bytes) for row in found.rows]
    [('all-gather', ('fsdp',), 8192, Fraction(6144, 1))]
"""

from nnx_introspect._xla.collectives.errors import (
    CollectiveFormatError as CollectiveFormatError,
)
from nnx_introspect._xla.collectives.read import (
    compiled_hlo_text as compiled_hlo_text,
)
from nnx_introspect._xla.collectives.read import read_collectives as read_collectives
from nnx_introspect._xla.collectives.report import Collectives as Collectives
from nnx_introspect._xla.collectives.report import axes_key as axes_key
from nnx_introspect._xla.collectives.rows import DCN_MARK as DCN_MARK
from nnx_introspect._xla.collectives.rows import KINDS as KINDS
from nnx_introspect._xla.collectives.rows import Collective as Collective
from nnx_introspect._xla.collectives.rows import CollectiveTotal as CollectiveTotal
from nnx_introspect._xla.collectives.rows import wire_factor as wire_factor

__all__ = [
    "DCN_MARK",
    "KINDS",
    "Collective",
    "CollectiveFormatError",
    "CollectiveTotal",
    "Collectives",
    "axes_key",
    "compiled_hlo_text",
    "read_collectives",
    "wire_factor",
]

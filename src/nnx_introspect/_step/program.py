"""What a compiled program is, apart from how it compiles: :class:`Program`.

A *program kind* (:class:`ProgramKind`) is a name and a builder: the builder
takes the request, the mesh and the plan's spec of every leaf by path, and
returns a :class:`Program`: the jitted function, its abstract arguments (each
a ``jax.ShapeDtypeStruct`` with its ``NamedSharding``) and those arguments
grouped by role (:class:`ArgumentGroup`: parameters, other model state,
optimizer state, batch). :mod:`~nnx_introspect._step.compile` lowers and
compiles whatever a builder returns, under the mesh's contexts, through the
cache of compile results; the breakdown's argument kinds are the groups'
roles and its output names the program's ``outputs``. Nothing there knows
which program it compiles.

The kinds are listed in :mod:`~nnx_introspect._step.registry`, by name; the
child process's JSON request names one (``"program": "train"``) and the child
looks its builder up there, so every kind compiles in this process or in a
child, on CPU devices or a named topology, the same way.

The serving programs (prefill and decode) are not kinds here: their request
is a :class:`~nnx_introspect._serve.spec.ServeSpec`, which lives above this
package. They are lowered by :mod:`~nnx_introspect._serve.programs` and then
go through the same :func:`~nnx_introspect._step.compile.compile_or_recall`
(the cache, the breakdown) and the same child runner
(:func:`~nnx_introspect._step.child.run_child_json`).

How a new program kind of the training step's request plugs in:

1. One new file in ``_step/`` (``_step/decode.py``), holding the builder and
   its kind::

       def build(request, mesh, specs) -> Program:
           params, rest = sharded_model_state(request.model, specs, mesh)
           cache = ...  # the KV cache's abstract, sharded arrays
           jitted = jax.jit(decode_step, keep_unused=True)
           return Program(
               jitted,
               args=(params, rest, cache, tokens),
               groups=(
                   state_group("parameter", params),
                   state_group("other model state", rest),
                   ArgumentGroup("kv cache", cache_paths),
                   batch_group(tokens),
               ),
               outputs=("logits", "new kv cache"),
           )

       DECODE = ProgramKind("decode", build, "one decoding step")

   ``groups`` partition the arguments' leaves in ``jax.jit``'s flattening
   order; a role the breakdown does not know yet (``"kv cache"``) is added
   to :data:`~nnx_introspect._breakdown.kinds.ARGUMENT_KINDS` in the same
   change.
2. One line in :mod:`~nnx_introspect._step.registry`: the kind in
   ``PROGRAM_KINDS``.

The program is then compiled by
``compile_request(request, mesh, plan, program=DECODE)`` in this process, or
by a child whose request carries ``child_request(spec, plan,
program="decode")``; its options ride on the request (a new option is the
step options' own change, not this module's).
"""

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from nnx_introspect._breakdown import ArgumentLeaf
from nnx_introspect._inventory import inventory
from nnx_introspect._step.inputs import Request

__all__ = [
    "ArgumentGroup",
    "Program",
    "ProgramKind",
    "batch_group",
    "forward_program",
    "sharded_batch",
    "sharded_model_state",
    "state_group",
]


@dataclasses.dataclass(frozen=True)
class ArgumentGroup:
    """Arguments of one role, one path per flattened leaf in ``jax.jit``'s order.

    ``role`` is the breakdown's kind of each leaf (one of
    :data:`~nnx_introspect._breakdown.kinds.ARGUMENT_KINDS`).
    """

    role: str
    paths: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Program:
    """What a program lowers: the jitted function, its arguments by role.

    ``args`` are the abstract, sharded arguments in the order ``jitted`` takes
    them; ``groups`` partition their flattened leaves, in that order, by role;
    ``outputs`` name the top-level outputs in order (the breakdown's output
    labels); ``differentiated`` is the tree of parameters whose gradients the
    program computes (their types mark a backward value as a gradient), or
    ``None``.
    """

    jitted: Any
    args: tuple[Any, ...]
    groups: tuple[ArgumentGroup, ...]
    outputs: tuple[str, ...]
    differentiated: Any = None

    def argument_leaves(self) -> tuple[ArgumentLeaf, ...]:
        """Every flattened argument, numbered as XLA numbers the entry parameters.

        Raises:
            ValueError: If the groups do not name each leaf of ``args`` once.
        """
        paths = [(path, group.role) for group in self.groups for path in group.paths]
        count = len(jax.tree.leaves(self.args))
        if len(paths) != count:
            raise ValueError(
                f"the program's groups name {len(paths)} arguments and its "
                f"arguments have {count} leaves; a builder's groups must name "
                "each flattened argument once, in order."
            )
        return tuple(
            ArgumentLeaf(i, path, role) for i, (path, role) in enumerate(paths)
        )


Builder = Callable[[Request, Mesh, Mapping[str, PartitionSpec]], Program]
"""``build(request, mesh, specs)``: the program of ``request`` on ``mesh``,
``specs`` the plan's spec of every leaf by path."""


@dataclasses.dataclass(frozen=True)
class ProgramKind:
    """A kind of program: its name (in a child's request) and its builder."""

    name: str
    build: Builder
    describe: str


def _sharded(state: Any, specs: Mapping[str, PartitionSpec], mesh: Mesh) -> Any:
    """``state`` with each leaf a sharded ``ShapeDtypeStruct`` (specs by path)."""
    leaves, treedef = jax.tree.flatten(state)
    records = inventory(state)
    if len(records) != len(leaves):  # pragma: no cover - inventory's contract
        raise AssertionError("inventory and tree leaves disagree")
    out = []
    for leaf, record in zip(leaves, records, strict=True):
        if record.path_str not in specs:  # pragma: no cover - the plan has all
            raise AssertionError(f"the plan has no leaf {record.path_str!r}")
        sharding = NamedSharding(mesh, specs[record.path_str])
        out.append(jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding))
    return jax.tree.unflatten(treedef, out)


def sharded_model_state(
    model: Any, specs: Mapping[str, PartitionSpec], mesh: Mesh
) -> tuple[Any, Any, Any]:
    """``(graphdef, params, other state)`` of ``model``, the states sharded.

    As ``nnx.split(model, nnx.Param, ...)`` orders them; every leaf a
    ``ShapeDtypeStruct`` with the plan's spec of its path.
    """
    graphdef, *states = nnx.split(model, nnx.Param, ...)
    return graphdef, _sharded(states[0], specs, mesh), _sharded(states[1], specs, mesh)


def sharded_batch(
    batch: Sequence[Any], specs: Sequence[PartitionSpec], mesh: Mesh
) -> tuple[jax.ShapeDtypeStruct, ...]:
    """The batch's leaves as ``ShapeDtypeStruct`` s, each sharded by its spec."""
    return tuple(
        jax.ShapeDtypeStruct(b.shape, b.dtype, sharding=NamedSharding(mesh, s))
        for b, s in zip(batch, specs, strict=True)
    )


def state_group(role: str, state: Any, prefix: str = "") -> ArgumentGroup:
    """The group of an ``nnx.State``'s leaves, by their state paths."""
    return ArgumentGroup(role, tuple(prefix + r.path_str for r in inventory(state)))


def batch_group(batch: tuple[Any, ...]) -> ArgumentGroup:
    """The batch's group: ``batch[0]``, ``batch[1]``, ..."""
    return ArgumentGroup("batch", tuple(f"batch[{i}]" for i in range(len(batch))))


def forward_program(
    request: Request,
    mesh: Mesh,
    specs: Mapping[str, PartitionSpec],
    forward: Callable[[Any, tuple[Any, ...]], Any],
    output: str,
) -> Program:
    """A forward-only program of ``request``'s model: ``forward(model, batch)``.

    The builder of the forward program kinds (``LOGPROBS``, ``VALUES``): the
    model's state and the batch sharded as the plan says, jitted with every
    argument kept; ``output`` names what it returns.
    """
    graphdef, params, rest = sharded_model_state(request.model, specs, mesh)
    batch = sharded_batch(request.batch, request.batch_specs, mesh)

    def program(params: Any, rest: Any, batch: tuple[Any, ...]) -> Any:
        return forward(nnx.merge(graphdef, params, rest), batch)

    jitted = jax.jit(program, keep_unused=True)
    groups = (
        state_group("parameter", params),
        state_group("other model state", rest),
        batch_group(batch),
    )
    return Program(jitted, (params, rest, batch), groups, (output,))

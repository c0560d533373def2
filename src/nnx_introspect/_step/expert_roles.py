"""A mixture of experts' dispatch and combine, found in the traced program.

The breakdown labels a buffer by the user's source line that made it. Which
lines move tokens to their experts and back is not in XLA's program, but it is
in the traced one: :func:`expert_roles` follows the jaxpr's data flow from
the routed experts' weights (the parameters
:func:`~nnx_introspect._experts.expert_groups` finds).

1. **The experts' matmuls**: each ``dot_general``, ``ragged_dot_general`` or
   ``pallas_call`` that takes a value made from the experts' weights (the
   parameter itself, cast, sliced, gathered or laid out anew). Calls that take
   the weights (``jit``, ``checkpoint``, ``scan``, ``shard_map``,
   ``custom_vjp_call``) are followed inside; other calls are one step each,
   named by the line that calls them (``jnp.take``, tunix's ``_custom_permute``).
2. **The tokens**: the router's input (the other operand of the matmul by the
   router's kernel, ``d_model x experts``), and what only re-lays it out.
3. **Dispatch**: the steps that make a matmul's token operand, followed back
   from it through data movement (gathers, all-to-alls, ragged all-to-alls,
   one-hot einsums, casts, reshapes, sharding constraints, calls) until the
   tokens, an integer (indices, sizes, offsets), the weights or a step of
   another kind.
4. **Combine**: the steps that take an expert's output (one whose value feeds
   no further expert matmul) forward through the same data movement and the
   weighted sum, until a value of the tokens' shape; and the steps that make
   their other operands (a capacity model's combine mask), as dispatch's are.

Only the forward pass is read: a backward value carries its forward line, so
a gradient of a dispatch buffer is labelled with it. A line is given as the
user's frames of the step (innermost first, :data:`DEPTH` of them: a line of a
helper called from several places is told apart by its callers), and lines of
every other forward step are kept too, so a buffer made inside a one-step call
is labelled by its caller's line and never by an outer frame.
"""

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from jax.extend.core import ClosedJaxpr, Jaxpr, Var

from nnx_introspect._breakdown import BreakdownRow
from nnx_introspect._experts import ExpertGroup
from nnx_introspect._inventory import path_str
from nnx_introspect._render import format_bytes
from nnx_introspect._xla import Collectives, SourceLocation, user_frames

__all__ = [
    "DEPTH",
    "ExpertInput",
    "ExpertRoles",
    "ExpertTrace",
    "Key",
    "expert_notes",
    "expert_roles",
]

Key = tuple[tuple[str, int], ...]
"""A step's user frames as ``(file, line)``, innermost first, at most :data:`DEPTH`."""

DEPTH = 3
"""How many user frames name a step."""

_MATMULS = frozenset({"dot_general", "ragged_dot_general", "ragged_dot", "pallas_call"})

_MOVES = frozenset(
    {
        "all_gather",
        "all_to_all",
        "broadcast_in_dim",
        "concatenate",
        "convert_element_type",
        "copy",
        "copy_p",
        "custom_jvp_call",
        "custom_vjp_call",
        "dot_general",
        "dynamic_slice",
        "dynamic_update_slice",
        "empty",
        "expand_dims",
        "gather",
        "jit",
        "mul",
        "pad",
        "pjit",
        "ragged_all_to_all",
        "reduce_scatter",
        "reshape",
        "rev",
        "scatter",
        "scatter-add",
        "scatter_add",
        "select_n",
        "sharding_constraint",
        "slice",
        "squeeze",
        "transpose",
    }
)
"""Steps that move, lay out or select values: dispatch and combine are made of them."""

_SUMS = frozenset({"add", "add_any", "reduce_sum", "psum", "psum_scatter"})
"""Steps a combine may also take: summing the experts' weighted outputs."""

_WEIGHT_MOVES = frozenset(
    {
        "all_gather",
        "broadcast_in_dim",
        "convert_element_type",
        "copy",
        "copy_p",
        "dynamic_slice",
        "gather",
        "reshape",
        "sharding_constraint",
        "slice",
        "squeeze",
        "transpose",
    }
)
"""Steps whose result is still the weights (a cast, a slice, a gather)."""

_TOKEN_MOVES = frozenset(
    {"reshape", "convert_element_type", "sharding_constraint", "copy", "copy_p"}
)
"""Steps whose result is still the tokens, laid out anew."""


@dataclasses.dataclass(frozen=True)
class ExpertInput:
    """What one of the experts' matmuls takes as tokens.

    Attributes:
        how: ``"grouped matmul"`` (``ragged_dot``), ``"Pallas kernel"`` or
            ``"matmul"``.
        type_str: The token operand as ``f32[8,8,40,64]``.
        capacity: For an operand laid out ``[..., experts, capacity, ...]``,
            the capacity: how many token copies each expert takes.
    """

    how: str
    type_str: str
    capacity: int | None = None


@dataclasses.dataclass(frozen=True)
class ExpertRoles:
    """Each forward step's role by its user frames, and the experts' inputs.

    Attributes:
        steps: ``(key, kind)``: ``"expert dispatch"``, ``"expert combine"`` or
            ``None`` (another step); sorted.
        inputs: The experts' token operands, each once.
    """

    steps: tuple[tuple[Key, str | None], ...] = ()
    inputs: tuple[ExpertInput, ...] = ()


@dataclasses.dataclass(frozen=True)
class ExpertTrace:
    """A traced program of a mixture of experts, kept for its breakdown.

    What :func:`expert_roles` reads, from where the program is traced to
    where its compile is broken down: the roles are found only for a
    breakdown made (never for one the cache of compile results holds).

    Attributes:
        jaxpr: The traced program (``jax.jit(f).trace(*args).jaxpr``).
        paths: Each flattened argument's path, in the jaxpr's order of inputs.
        groups: The model's routers and experts, as its plan carries them
            (:attr:`~nnx_introspect.MeshConfigReport.experts`).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> traced = jax.jit(lambda x: x * 2).trace(jnp.zeros(3))
        >>> ExpertTrace(traced.jaxpr, ("x",), ()).roles()  # no experts: no roles
        ExpertRoles(steps=(), inputs=())
    """

    jaxpr: ClosedJaxpr
    paths: tuple[str, ...]
    groups: tuple[ExpertGroup, ...]

    def roles(self) -> ExpertRoles:
        """The roles of the program's forward steps (:func:`expert_roles`)."""
        return expert_roles(self.jaxpr, self.paths, self.groups)


@dataclasses.dataclass
class _Node:
    primitive: str
    inputs: list[int | None]
    outputs: list[int]
    key: Key
    backward: bool
    batch_dims: tuple[tuple[int, ...], ...] = ()
    """A ``dot_general``'s batch dimensions of each operand."""


@dataclasses.dataclass
class _Graph:
    """The program's steps with its values numbered across calls."""

    nodes: list[_Node] = dataclasses.field(default_factory=list)
    avals: dict[int, Any] = dataclasses.field(default_factory=dict)
    producer: dict[int, int] = dataclasses.field(default_factory=dict)
    consumers: dict[int, list[int]] = dataclasses.field(default_factory=dict)
    weights: set[int] = dataclasses.field(default_factory=set)
    router: set[int] = dataclasses.field(default_factory=set)
    shapes: dict[int, set[tuple[int, ...]]] = dataclasses.field(default_factory=dict)

    def new_value(self, aval: Any) -> int:
        number = len(self.avals)
        self.avals[number] = aval
        return number


def _key(eqn: Any) -> Key:
    traceback = eqn.source_info.traceback
    if traceback is None:
        return ()
    stack = [
        SourceLocation(f.file_name, f.line_num, f.function_name)
        for f in traceback.frames
    ]
    return tuple((f.file, f.line) for f in user_frames(stack)[:DEPTH])


def _inner(eqn: Any) -> Jaxpr | None:
    """The one jaxpr a call-like step runs, if its values map one to one."""
    found = [
        p.jaxpr if isinstance(p, ClosedJaxpr) else p
        for p in eqn.params.values()
        if isinstance(p, ClosedJaxpr | Jaxpr)
    ]
    if len(found) != 1:
        return None
    inner = found[0]
    if len(inner.invars) != len(eqn.invars) or len(inner.outvars) != len(eqn.outvars):
        return None
    return inner


def _read(graph: _Graph, jaxpr: Jaxpr, env: dict[Any, int], backward: bool) -> None:
    """Add ``jaxpr``'s steps to ``graph``; ``env`` numbers its inputs."""
    for var in jaxpr.constvars:
        env[var] = graph.new_value(var.aval)
    for eqn in jaxpr.eqns:
        ins = [env.get(v) if isinstance(v, Var) else None for v in eqn.invars]
        back = backward or "transpose(" in str(eqn.source_info.name_stack)
        inner = _inner(eqn)
        tainted = any(i in graph.weights or i in graph.router for i in ins)
        if inner is not None and tainted:
            scope: dict[Any, int] = {}
            for var, number in zip(inner.invars, ins, strict=True):
                scope[var] = graph.new_value(var.aval) if number is None else number
                graph.shapes.setdefault(scope[var], set()).add(_shape(var.aval))
            _read(graph, inner, scope, back)
            for var, out in zip(eqn.outvars, inner.outvars, strict=True):
                found = scope.get(out) if isinstance(out, Var) else None
                env[var] = graph.new_value(var.aval) if found is None else found
                graph.shapes.setdefault(env[var], set()).add(_shape(var.aval))
            continue
        outs = [graph.new_value(v.aval) for v in eqn.outvars]
        for var, number in zip(eqn.outvars, outs, strict=True):
            env[var] = number
            graph.shapes[number] = {_shape(var.aval)}
        index = len(graph.nodes)
        numbers = eqn.params.get("dimension_numbers")
        batch: tuple[tuple[int, ...], ...] = ()
        if eqn.primitive.name == "dot_general" and numbers is not None:
            batch = tuple(tuple(int(d) for d in dims) for dims in numbers[1])
        node = _Node(eqn.primitive.name, ins, outs, _key(eqn), back, batch)
        graph.nodes.append(node)
        for number in ins:
            if number is not None:
                graph.consumers.setdefault(number, []).append(index)
        for number in outs:
            graph.producer[number] = index
        name = eqn.primitive.name
        if name in _WEIGHT_MOVES:
            for taint in (graph.weights, graph.router):
                if any(i in taint for i in ins):
                    taint.update(outs)


def _shape(aval: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in getattr(aval, "shape", ()))


def _type_str(aval: Any) -> str:
    dtype = np.dtype(aval.dtype).name
    short = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "int32": "s32"}
    return f"{short.get(dtype, dtype)}[{','.join(map(str, _shape(aval)))}]"


def _integer(aval: Any) -> bool:
    dtype = getattr(aval, "dtype", None)
    return dtype is None or not np.issubdtype(np.dtype(dtype), np.floating)


class _Roles:
    """The walks of the module docstring over one graph."""

    def __init__(self, graph: _Graph) -> None:
        self.graph = graph
        self.kind: dict[int, str] = {}
        self.matmuls = [
            i
            for i, n in enumerate(graph.nodes)
            if n.primitive in _MATMULS
            and not n.backward
            and any(x in graph.weights for x in n.inputs)
        ]
        self.tokens = self._tokens()
        self.token_shapes = {
            shape for t in self.tokens for shape in graph.shapes.get(t, ())
        }

    def _tokens(self) -> set[int]:
        """The router's inputs and what only lays them out anew."""
        graph = self.graph
        found: set[int] = set()
        for node in graph.nodes:
            routed = any(x in graph.router for x in node.inputs)
            if node.primitive == "dot_general" and not node.backward and routed:
                found.update(
                    x for x in node.inputs if x is not None and x not in graph.router
                )
        todo = list(found)
        while todo:
            for index in graph.consumers.get(todo.pop(), ()):
                node = graph.nodes[index]
                if node.primitive in _TOKEN_MOVES and not node.backward:
                    new = [o for o in node.outputs if o not in found]
                    found.update(new)
                    todo += new
        return found

    def _token_shape(self, value: int) -> bool:
        return bool(self.graph.shapes.get(value, set()) & self.token_shapes)

    def back(self, value: int | None, kind: str) -> None:
        """Label the steps that make ``value``, back to the tokens."""
        graph, seen = self.graph, set()
        todo = [value]
        while todo:
            v = todo.pop()
            if v is None or v in seen or v in self.tokens or v in graph.weights:
                continue
            seen.add(v)
            if _integer(graph.avals[v]) or v not in graph.producer:
                continue
            index = graph.producer[v]
            node = graph.nodes[index]
            if node.backward or node.primitive not in _MOVES or index in self.kind:
                continue
            if any(x in graph.weights or x in graph.router for x in node.inputs):
                continue
            self.kind[index] = kind
            todo += node.inputs

    def forward(self, value: int) -> None:
        """Label the steps that take an expert's output, to the tokens' shape."""
        graph, seen = self.graph, set()
        todo = [value]
        while todo:
            v = todo.pop()
            if v in seen:
                continue
            seen.add(v)
            for index in graph.consumers.get(v, ()):
                node = graph.nodes[index]
                if node.backward or index in self.kind or index in self.matmuls:
                    continue
                if node.primitive not in _MOVES | _SUMS:
                    continue
                self.kind[index] = "expert combine"
                for other in node.inputs:
                    if other != v:
                        self.back(other, "expert combine")
                todo += [o for o in node.outputs if not self._token_shape(o)]

    def after_a_matmul(self, value: int, depth: int = 12) -> bool:
        """Whether ``value`` is made from an expert matmul's output (a hidden one)."""
        graph, todo, seen = self.graph, [(value, 0)], set()
        while todo:
            v, d = todo.pop()
            if v in seen or d > depth or v in self.tokens or v not in graph.producer:
                continue
            seen.add(v)
            index = graph.producer[v]
            if index in self.matmuls:
                return True
            node = graph.nodes[index]
            if not node.backward:
                todo += [(x, d + 1) for x in node.inputs if x is not None]
        return False

    def token_operands(self, index: int) -> list[int]:
        """A matmul's operands that carry tokens in: not weights, not hidden."""
        graph = self.graph
        return [
            x
            for x in graph.nodes[index].inputs
            if x is not None
            and x not in graph.weights
            and not _integer(graph.avals[x])
            and not self.after_a_matmul(x)
        ]

    def feeds_a_matmul(self, value: int, depth: int = 12) -> bool:
        """Whether ``value`` reaches another expert matmul forward."""
        graph, todo, seen = self.graph, [(value, 0)], set()
        while todo:
            v, d = todo.pop()
            if v in seen or d > depth:
                continue
            seen.add(v)
            for index in graph.consumers.get(v, ()):
                if index in self.matmuls:
                    return True
                node = graph.nodes[index]
                if not node.backward and not self._token_shape(v):
                    todo += [(o, d + 1) for o in node.outputs]
        return False


def _how(primitive: str) -> str:
    if primitive == "pallas_call":
        return "Pallas kernel"
    return "grouped matmul" if primitive.startswith("ragged_dot") else "matmul"


def _capacity(node: _Node, operand: int, shape: tuple[int, ...]) -> int | None:
    """The capacity of a matmul's token operand laid out ``[..., experts, C, ...]``.

    The operand's batch dimension that runs over the experts (the matmul's
    batch dimension paired with the weights' expert dimension) is followed by
    its capacity; a grouped matmul's rows have none.
    """
    if len(node.batch_dims) != 2:
        return None
    dims = node.batch_dims[operand]
    if not dims:
        return None
    after = dims[-1] + 1
    return shape[after] if after < len(shape) - 1 else None


def _inputs(roles: _Roles) -> tuple[ExpertInput, ...]:
    graph = roles.graph
    out: dict[ExpertInput, None] = {}
    for index in roles.matmuls:
        node = graph.nodes[index]
        for x in roles.token_operands(index):
            aval = graph.avals[x]
            capacity = _capacity(node, node.inputs.index(x), _shape(aval))
            out[ExpertInput(_how(node.primitive), _type_str(aval), capacity)] = None
    return tuple(out)


def _groups_params(
    groups: Sequence[ExpertGroup], paths: Sequence[str], avals: Sequence[Any]
) -> tuple[set[int], set[int]]:
    """The argument numbers of the routed experts' weights and the routers' kernels."""
    experts = {path_str(leaf.path) for g in groups for leaf in g.leaves}
    weights, router = set(), set()
    for number, (path, aval) in enumerate(zip(paths, avals, strict=True)):
        if path in experts:
            weights.add(number)
            continue
        for group in groups:
            under = path.startswith(group.path_str + "/")
            shape = _shape(aval)
            if under and len(shape) == 2 and shape[-1] == group.experts:
                router.add(number)
    return weights, router


def expert_roles(
    jaxpr: ClosedJaxpr,
    paths: Sequence[str],
    groups: Sequence[ExpertGroup],
) -> ExpertRoles:
    """The roles of a traced program's forward steps, for a mixture of experts.

    Args:
        jaxpr: The traced program (``jax.jit(f).trace(*args).jaxpr``).
        paths: Each flattened argument's path (the parameters' state paths),
            in the jaxpr's order of inputs.
        groups: The model's routers and their experts
            (:func:`~nnx_introspect._experts.expert_groups`).

    Returns:
        The roles; empty when ``groups`` is, or no matmul takes the experts'
        weights.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from nnx_introspect import abstract_model
        >>> from nnx_introspect._experts import expert_groups
        >>> from nnx_introspect.examples import moe_tiny
        >>> from flax import nnx
        >>> model = abstract_model(moe_tiny)
        >>> graphdef, params = nnx.split(model, nnx.Param)
        >>> paths = [path_str(p) for p, _ in nnx.to_flat_state(params)]
        >>> paths.append("batch[0]")
        >>> def forward(params, tokens):
        ...     return nnx.merge(graphdef, params)(tokens)
        >>> traced = jax.jit(forward).trace(params, jnp.zeros((2, 8), jnp.int32))
        >>> roles = expert_roles(traced.jaxpr, paths, expert_groups(model))
        >>> sorted({kind for _, kind in roles.steps if kind})
        ['expert combine', 'expert dispatch']
        >>> [(i.how, i.type_str) for i in roles.inputs]
        [('grouped matmul', 'f32[32,64]')]
    """
    if not groups:
        return ExpertRoles()
    inner = jaxpr.jaxpr
    if len(inner.invars) != len(paths):
        return ExpertRoles()
    graph = _Graph()
    env = {var: graph.new_value(var.aval) for var in inner.invars}
    for var, number in env.items():
        graph.shapes[number] = {_shape(var.aval)}
    weights, router = _groups_params(groups, paths, [v.aval for v in inner.invars])
    graph.weights = {env[inner.invars[i]] for i in weights}
    graph.router = {env[inner.invars[i]] for i in router}
    _read(graph, inner, dict(env), False)
    roles = _Roles(graph)
    if not roles.matmuls or not roles.tokens:
        return ExpertRoles()
    for index in roles.matmuls:
        for x in roles.token_operands(index):
            roles.back(x, "expert dispatch")
    for index in roles.matmuls:
        for out in graph.nodes[index].outputs:
            if not roles.feeds_a_matmul(out):
                roles.forward(out)
    return ExpertRoles(_steps(graph, roles.kind), _inputs(roles))


def _steps(
    graph: _Graph, kinds: Mapping[int, str]
) -> tuple[tuple[Key, str | None], ...]:
    """Each forward step's key and role; a key of two roles keeps the first found."""
    out: dict[Key, str | None] = {}
    for index, node in enumerate(graph.nodes):
        if node.backward or not node.key:
            continue
        kind = kinds.get(index)
        if kind is not None and out.get(node.key) is None:
            out[node.key] = kind
        else:
            out.setdefault(node.key, None)
    return tuple(sorted(out.items(), key=lambda item: (item[0], item[1] or "")))


def expert_notes(
    rows: Sequence[BreakdownRow],
    inputs: Sequence[ExpertInput],
    collectives: Collectives | None,
) -> tuple[str, ...]:
    """What a breakdown says of a mixture of experts' buffers, one sentence each.

    The dispatch and combine buffers live at the peak; what sizes them: each
    expert's capacity (an input laid out ``[..., experts, capacity, ...]``),
    or, dropless, every routed token copy; and each ragged all-to-all's
    receive buffer, which XLA sizes for the worst case whatever the routing
    (:attr:`~nnx_introspect._xla.Collective.worst_case_receive_bytes`).

    Example:
        >>> from nnx_introspect._breakdown import BreakdownRow
        >>> row = BreakdownRow("expert dispatch", "f moe.py:3", 4096, (16, 64),
        ...     "f32", "gather.1", "fusion", None, None, None, None, None)
        >>> for note in expert_notes(
        ...     [row], [ExpertInput("matmul", "f32[2,8,5,64]", 5)], None
        ... ):
        ...     print(note)  # doctest: +NORMALIZE_WHITESPACE
        Expert dispatch and combine at the peak: 1 buffer, 4 KiB (dispatch 4
        KiB, combine 0 B): the steps that move tokens to their experts and
        back, found in the traced program from the experts' matmuls; a
        backward value of such a step counts with it.
        Capacity: each expert takes at most 5 token copies (its input
        f32[2,8,5,64] as traced); the one-hot dispatch and combine tensors and the
        experts' inputs and outputs are that size whatever the routing, and a
        copy past it gets nothing from its expert.
    """
    notes = []
    mine = [r for r in rows if r.kind in ("expert dispatch", "expert combine")]
    if mine:
        total = sum(r.nbytes for r in mine)
        each = {
            kind: sum(r.nbytes for r in mine if r.kind == f"expert {kind}")
            for kind in ("dispatch", "combine")
        }
        count = f"{len(mine)} buffer{'s' * (len(mine) != 1)}"
        notes.append(
            f"Expert dispatch and combine at the peak: {count}, "
            f"{format_bytes(total)} (dispatch {format_bytes(each['dispatch'])}, "
            f"combine {format_bytes(each['combine'])}): the steps that move "
            "tokens to their experts and back, found in the traced program from "
            "the experts' matmuls; a backward value of such a step counts with it."
        )
    for found in inputs:
        if found.capacity is not None:
            notes.append(
                f"Capacity: each expert takes at most {found.capacity} token "
                f"copies (its input {found.type_str} as traced); the one-hot "
                "dispatch and "
                "combine tensors and the experts' inputs and outputs are that "
                "size whatever the routing, and a copy past it gets nothing from "
                "its expert."
            )
        elif found.how != "matmul":
            notes.append(
                f"Dropless: the experts' {found.how} takes every routed token "
                f"copy, {found.type_str} as traced, whatever the routing."
            )
    ragged = {
        (row.worst_case_receive_bytes, row.nbytes)
        for row in (collectives.rows if collectives is not None else ())
        if row.worst_case_receive_bytes is not None
    }
    if ragged:
        sizes = ", ".join(
            f"{format_bytes(worst)} for a {format_bytes(payload)} payload"
            + (f" ({worst / payload:.1f}x)" if payload else "")
            for worst, payload in sorted(ragged, reverse=True)
        )
        notes.append(
            "Ragged all-to-all: XLA sizes each receive buffer statically for the "
            f"worst case, whatever the routing: {sizes}, per device."
        )
    return tuple(notes)

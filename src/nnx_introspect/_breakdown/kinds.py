"""The kinds a buffer live at XLA's peak can have, and how one is chosen.

The kinds, in the order they are decided: what the slot holds at the peak
first, then the value's role (what it is for), by its opcode last.

0. ``empty buffer``: an argument's or output's allocation, held for the whole
   step, in which no value is live at the peak (a donated parameter's slot
   after its old value's last use and before its new value is written): its
   label names what it is held for and when that value is written.
0. ``collective in flight``: an asynchronous collective started before the
   peak and done after it (``all-gather-start`` ... ``all-gather-done``), its
   buffer live across the peak: a parameter's all-gather in flight is not a
   parameter of the plan but the gathered copy on its way. Its label names
   what it gathers (``all-gather of layers/0/w``) and the points it starts
   and is done.
1. ``parameter``, ``optimizer state``, ``other model state``, ``batch``: an entry
   parameter of the jitted step, by its ``ArgumentLeaf`` (XLA numbers the
   entry parameters as ``jax.jit`` flattens its arguments: the leaf index).
2. ``output``: (part of) the step's result (new parameters, new optimizer state,
   gradients, the loss), with its output index.
3. The same four argument kinds for a copy of an argument: a value whose op
   name is not JAX's (``jit(step)/...``) but an argument's path as JAX names
   the step's arguments (``params['layers'][0]['w'].value``,
   ``opt_state[0].mu['w']``), which XLA gives the copies it makes of that
   argument (a transposed or re-laid-out parameter). Its label is ``copy of``
   the argument's path; its ``path`` stays ``None`` (its shape is the copy's).
   A parameter's copy, cast or gathering is also found by its operands
   (``PeakBuffer.origin``: followed through copies, layout changes and
   collectives to an entry parameter): ``copy of`` or ``all-gather of`` its
   path, kind ``parameter``.
4. ``gradient``: a gradient or a partial sum of one, in flight or not:
   a value with exactly the per-device shape and element type of a
   differentiated parameter (``classify``'s ``gradient_types``) that is either
   made by a backward op (its op name contains ``transpose(``), or is the
   result of a reducing collective (all-reduce, reduce-scatter, their halves)
   that is no forward op and is live once the backward pass has begun (XLA's
   combined reduce-scatters carry no op name), or a reducing collective whose
   origin is a backward op and whose shape is a gradient's with some
   dimensions whole (a partial sum). A backward value of another
   shape stays a temporary; an activation that happens to share a
   parameter's shape and dtype would be counted here too (none does in the
   library's examples).
4b. ``expert dispatch``, ``expert combine``: in a mixture of experts, a value
   (not a gradient) made by a step that moves tokens to their experts or
   back: the dispatch's gathers, all-to-alls (ragged or not) and one-hot
   einsums, the combine's and the weighted sum of the experts' outputs, and
   the backward pass's values of the same steps. Which steps those are is not
   in XLA's program: the step finds them in the traced program (from the
   experts' matmuls, :mod:`~nnx_introspect._step.expert_roles`) and names
   each by its user frames; a buffer takes the role of the innermost of its
   frames that names a step. Decided before rules 5 to 7: a dispatch buffer
   kept for the backward pass, or an all-to-all's, is an ``expert dispatch``.
5. ``activation kept for backward``: a buffer made by the forward pass and still
   live once the backward pass has begun, whatever its opcode (a forward
   all-gather's result kept for the backward pass is an activation, not a
   collective buffer). JAX names every op under
   ``jax.value_and_grad`` by the transformation that made it: forward ops carry
   ``jvp(`` (``jit(step)/jvp()/dot_general``), backward ops ``transpose(``
   (``jit(step)/transpose(jvp())/dot_general``). The rule: the op name contains
   ``jvp(`` and no ``transpose(``, and at least one buffer live at the peak was
   made by a backward op, so the backward pass has begun by the peak and this
   forward value lives across it; a value's role is its origin's op name when
   it has one (a collective's result, a copy of a forward value). XLA may
   interleave the passes: on XLA:CPU a Llama's peak falls in the optimizer
   update of the last layers while the first layers' forward values still
   wait for their backward.
   At a peak inside the forward pass nothing proves a forward value is kept,
   so it stays a temporary (or a collective buffer). Under ``jax.checkpoint`` /
   ``nnx.remat`` the recomputed forward ops are backward ops by name
   (``transpose(jvp(jvp()))/checkpoint/rematted_computation/dot_general``), so
   only what the remat keeps (each checkpointed block's input) is "kept".
6. ``collective buffer``: the result of a collective the SPMD partitioner
   inserted (all-gather, all-reduce, reduce-scatter, all-to-all,
   collective-permute and their ``-start``/``-done`` halves) that is none of
   the above: a collective's own buffer in flight.
7. ``temporary``: everything else (XLA's copies, fusions of the optimizer
   update, index tables of tuples).

In a step without an optimizer the gradients are outputs; their output names
say so (``gradients layers/0/...``).
"""

from typing import Final

__all__ = ["ARGUMENT_KINDS", "EXPERT_KINDS", "KINDS"]

ARGUMENT_KINDS: Final = (
    "parameter",
    "optimizer state",
    "other model state",
    "batch",
    "weights",
    "KV cache",
)
"""The kinds of a program's arguments, as ``ArgumentLeaf`` names them: a
training step's four, then a serving program's served ``weights`` (a copy in
the serving dtype) and its ``KV cache`` (its tokens and positions are
``batch``)."""

KINDS: Final = (
    *ARGUMENT_KINDS,
    "KV cache copy",
    "reference",
    "rollout weights",
    "output",
    "gradient",
    "activation kept for backward",
    "collective in flight",
    "collective buffer",
    "empty buffer",
    "temporary",
)
"""Every kind a buffer live at the peak can have (and a mixture of experts'
:data:`EXPERT_KINDS`). ``KV cache`` is the donated
cache's own buffers only (as the program took them, or updated in place); a
copy XLA made of a cache leaf (another layout, a cast) is a ``KV cache copy``,
named by what it copies, its op and the model's line that made it. An RL
step's phases name two more: the reference model's parameters (``reference``)
and the rollout's copy of the weights (``rollout weights``)."""

EXPERT_KINDS: Final = ("expert dispatch", "expert combine")
"""A mixture of experts' two more kinds (rule 4b): the values that move tokens
to their experts, and their outputs back to the tokens."""

"""Each phase's program of an RL step, compiled through the library's pipelines.

The rollout through the serving report, the actor's and the critic's steps
through the step report, the reference's log-probabilities and the critic's
values as forward program kinds of the step's pipeline (``LOGPROBS``,
``VALUES``). :func:`~nnx_introspect.rl_memory_report` adds them up
(:mod:`~nnx_introspect._rl.assemble`).
"""

import contextlib
from collections.abc import Iterator
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, PartitionSpec

from nnx_introspect._mesh import as_abstract_mesh
from nnx_introspect._rl.layout import Layout
from nnx_introspect._rl.loss import grpo_loss
from nnx_introspect._rl.ppo import ppo_loss, value_loss
from nnx_introspect._search import named_axes
from nnx_introspect._serve import (
    TENSOR_PARALLEL_AXES,
    ServeOptions,
    serve_memory_report,
)
from nnx_introspect._step import (
    LOGPROBS,
    TRAIN,
    TRAIN_OPTIMIZER_DONATED,
    VALUES,
    ProgramKind,
    StepSpec,
    as_model,
    as_step_spec,
    devices_measured,
    measure_step,
)
from nnx_introspect._typing import ArgumentError

__all__ = [
    "DONATIONS",
    "Donate",
    "batch_spec",
    "completed",
    "critic_reports",
    "reference_report",
    "role_options",
    "rollout_cache_dtype",
    "rollout_report",
    "train_report",
]

Donate = Literal["optimizer", "all"]
"""What a training step donates: the optimizer's state alone, or all its state."""

DONATIONS: dict[str, ProgramKind] = {
    "optimizer": TRAIN_OPTIMIZER_DONATED,
    "all": TRAIN,
}
"""Each ``donate`` value and the program kind it compiles.

``"optimizer"`` is tunix's trainer (google-tunix 0.1.7, ``sft/peft_trainer.py``,
``jit_train_and_eval_step``: ``nnx.jit(train_step,
donate_argnames=("optimizer",))``, the actor's and the critic's alike, as
``rl/trainer.py``'s ``Trainer`` is a ``PeftTrainer``): the old parameters stay
live beside the new ones. ``"all"`` donates the parameters too (a loop that
passes its whole state in and gets it back).
"""


def role_options(
    found: tuple[Layout, Any, list[str]],
    role: str,
    models: tuple[Any, Any],
    shared: dict[str, Any],
) -> tuple[dict[str, int], dict[str, Any]]:
    """A role's mesh axes and its programs' options, on its slice.

    ``found`` is the layout, the rollout's report and the notes;
    ``models`` the actor and the role's model (the critic's, or the actor).
    The axes are the rollout's where the role shares its devices (as the
    rollout compiled them), else the slice's mesh completed with the axes the
    actor's and the model's shardings name.
    """
    layout, rollout, notes = found
    actor, model = models
    if layout.shared(role, "rollout"):
        axes = dict(rollout.mesh_axes)
    else:
        axes = completed(actor, layout.slice(role).mesh, notes)
    if model is not actor:  # and each axis the critic's sharding names
        axes = completed(model, axes, notes)
    return axes, shared | {
        "topology": layout.slice(role).topology,
        "batch_spec": batch_spec(tuple(dict(axes).items())),
    }


def batch_spec(mesh_axes: tuple[tuple[str, int], ...]) -> PartitionSpec:
    """The sequences over the data-parallel axes (every axis but ``tp``'s)."""
    dp = tuple(a for a, _ in mesh_axes if a not in TENSOR_PARALLEL_AXES)
    if not dp:
        return PartitionSpec()
    return PartitionSpec(dp if len(dp) > 1 else dp[0])


_RENAMED = {
    "weights": "rollout_weights",
    "sequences": "batch",
    "context": "completion",
}
"""The rollout's arguments as :func:`rl_memory_report` names them."""


@contextlib.contextmanager
def _renamed(sequences: int, length: int) -> Iterator[None]:
    """The rollout's argument errors re-raised naming this function's argument."""
    try:
        yield
    except ArgumentError as error:
        name = _RENAMED.get(error.argument)
        if name is None:
            raise
        text = str(error).replace(f"`{error.argument}`", f"`{name}`")
        text = text.replace(f"{error.argument}=", f"{name}=")
        where = {
            "batch": f" (the rollout's {sequences} sequences are batch x generations)",
            "completion": f" (the rollout context of {length} is prompt + completion)",
        }.get(name, "")
        raise ArgumentError(name, text + where) from None


def critic_reports(
    critic: Any,
    mesh_axes: dict[str, int],
    sizes: tuple[int, int, int],
    optimizer: Any,
    common: dict[str, Any],
) -> tuple[Any, Any]:
    """The critic's two programs: its values of the tokens, its training step.

    The values as :data:`~nnx_introspect._step.VALUES` computes them (forward
    only), the step on tunix's PPO value loss: prompt and completion ids,
    the completion mask, the returns and the old values; donating what
    ``common["donate"]`` says (tunix's critic trainer is a ``PeftTrainer``
    too).
    """
    sequences, p, c = sizes
    values = _forward(critic, mesh_axes, common, (sequences, p + c), VALUES)
    batch = (
        jax.ShapeDtypeStruct((sequences, p), jnp.int32),
        jax.ShapeDtypeStruct((sequences, c), jnp.int32),
        *(jax.ShapeDtypeStruct((sequences, c), jnp.float32) for _ in range(3)),
    )
    options = {k: v for k, v in common.items() if k != "lora"}
    step = _step(critic, mesh_axes, batch, value_loss, optimizer, sizes, options)
    return values, step


def _step(
    model: Any,
    mesh_axes: dict[str, int],
    batch: tuple[Any, ...],
    loss: Any,
    optimizer: Any,
    sizes: tuple[int, int, int],
    common: dict[str, Any],
) -> Any:
    """A training step on ``loss``, donating what ``common["donate"]`` says."""
    sequences, p, c = sizes
    skip = ("cache", "measure", "donate")
    options = {k: v for k, v in common.items() if k not in skip}
    options |= {"loss": loss, "optimizer": optimizer}
    options["tokens_per_step"] = sequences * (p + c)
    spec = as_step_spec(model, mesh_axes, batch, options)
    runs = common["measure"]
    if runs is not None:  # on this process's devices, their target named
        spec = devices_measured(spec, runs)
    kind = DONATIONS[common["donate"]]
    return measure_step(spec, cache=common["cache"], runs=runs, program=kind)


def rollout_report(
    actor: Any,
    layout: Layout,
    sizes: tuple[int, int, int],
    serving: dict[str, Any],
    notes: list[str],
) -> Any:
    """The rollout's prefill and decode on its slice (the serving report)."""
    sequences, p, c = sizes
    mesh = completed(actor, layout.slice("rollout").mesh, notes)
    with _renamed(sequences, p + c):
        rollout = serve_memory_report(
            actor,
            mesh,
            sequences=sequences,
            context=p + c,
            prompt=p,
            topology=layout.slice("rollout").topology,
            **serving,
        )
    notes += rollout.notes
    return rollout


def rollout_cache_dtype(actor: Any) -> str:
    """The KV cache dtype tunix's sampler gives the rollout: the model's own.

    google-tunix 0.1.7's ``generate/sampler.py`` (``Sampler.dtype``, passed to
    the model's ``init_cache``): the model config's ``dtype`` where the model
    has a ``config`` with one (``None`` is JAX's default float, float32, as
    ``jnp.zeros(..., dtype=None)`` makes it), else the dtype of the first
    leaf of the model's state.

    Raises:
        ArgumentError: Naming ``kv_cache`` when that dtype is not one a
            serving report's KV cache takes.

    Example:
        >>> from nnx_introspect.examples import LlamaConfig, llama
        >>> rollout_cache_dtype(llama(LlamaConfig(vocab=64, d_model=32,
        ...                                       n_layers=1, n_heads=2, d_ff=64)))
        'float32'
    """
    model = as_model(actor)
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "dtype"):
        dtype = np.dtype(config.dtype or jnp.float32)
    else:
        leaves = jax.tree.leaves(nnx.state(model))
        dtype = np.dtype(leaves[0].dtype if leaves else jnp.float32)
    try:
        ServeOptions(kv_cache=dtype.name)
    except ArgumentError as error:
        raise ArgumentError(
            "kv_cache",
            f"`kv_cache` None is the model's own dtype, as tunix's sampler takes "
            f"it ({dtype.name}), which a KV cache here cannot be: {error}",
        ) from None
    return str(dtype.name)


def completed(actor: Any, mesh: Any, notes: list[str]) -> Any:
    """``mesh`` with each axis the actor's sharding names added at size 1.

    A note says what was added (once); a concrete ``Mesh`` is the user's, as
    it is (its devices cannot grow an axis).
    """
    if isinstance(mesh, Mesh):
        return mesh
    abstract = as_abstract_mesh(mesh)
    axes = dict(zip(abstract.axis_names, map(int, abstract.axis_sizes), strict=True))
    missing = [a for a in named_axes(actor) if a not in axes]
    if missing:
        given = ",".join(f"{a}={n}" for a, n in axes.items())
        axes |= {axis: 1 for axis in missing}
        whole = ",".join(f"{a}={n}" for a, n in axes.items())
        note = (
            f"The mesh {given} leaves out {', '.join(missing)}, which the actor's "
            f"sharding names: compiled on {whole} (an axis of size 1 shards "
            "nothing)."
        )
        if note not in notes:
            notes.append(note)
    return axes


def train_report(
    actor: Any,
    mesh_axes: dict[str, int],
    sizes: tuple[int, int, int],
    optimizer: Any,
    common: dict[str, Any],
    *,
    ppo: bool = False,
) -> Any:
    """The actor's step on the GRPO loss, or with a critic PPO's policy loss.

    Its batch as :func:`grpo_loss` takes it: prompt ids, completion ids, mask,
    advantages, reference and old log-probabilities; as :func:`ppo_loss` does:
    prompt ids, completion ids, mask, per-token advantages, old
    log-probabilities. It donates what ``common["donate"]`` says
    (:data:`DONATIONS`).
    """
    sequences, p, c = sizes

    def ids(n: int) -> Any:
        return jax.ShapeDtypeStruct((sequences, n), jnp.int32)

    def floats(*shape: int) -> Any:
        return jax.ShapeDtypeStruct(shape, jnp.float32)

    tokens = floats(sequences, c)
    batch: tuple[Any, ...] = (
        (ids(p), ids(c), tokens, tokens, tokens)
        if ppo
        else (ids(p), ids(c), tokens, floats(sequences), tokens, tokens)
    )
    loss = ppo_loss if ppo else grpo_loss
    return _step(actor, mesh_axes, batch, loss, optimizer, sizes, common)


def reference_report(
    actor: Any,
    mesh_axes: dict[str, int],
    common: dict[str, Any],
    sizes: tuple[int, int],
) -> Any:
    """The reference's per-token log-probabilities (the step pipeline's LOGPROBS)."""
    return _forward(actor, mesh_axes, common, sizes, LOGPROBS)


def _forward(
    model: Any,
    mesh_axes: dict[str, int],
    common: dict[str, Any],
    sizes: tuple[int, int],
    program: Any,
) -> Any:
    """A forward program of the step pipeline (``LOGPROBS``, ``VALUES``)."""
    sequences, length = sizes
    skip = ("cache", "lora", "measure", "donate")
    options = {k: v for k, v in common.items() if k not in skip}
    tokens = jax.ShapeDtypeStruct((sequences, length), jnp.int32)
    spec = StepSpec(model, mesh_axes, tokens, loss=None, **options)
    runs = common["measure"]
    if runs is not None:  # on this process's devices, their target named
        spec = devices_measured(spec, runs)
    return measure_step(spec, cache=common["cache"], program=program, runs=runs)

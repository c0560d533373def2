"""What a request chose where google-tunix 0.1.7 does one thing: the report's words.

tunix's ``RLCluster`` and trainer decide four things a request may choose
otherwise (each default here is tunix's, and the report says when a request
left it):

* **the rollout's weights**: colocated (the actor's and the rollout's meshes
  equal), the rollout *is* the training actor, in its own dtypes
  (``rl/rl_cluster.py``, ``RLCluster.__init__``: ``self.rollout_actor =
  self.train_actor`` when ``_init_backbone_sharing_map`` put the rollout
  beside the actor); ``RolloutConfig.data_type`` (``rl/rollout/base_rollout.py``,
  ``None`` by default) casts only a rollout loaded on a mesh of its own
  (``_load_model``);
* **the KV cache's dtype**: the sampler's (``generate/sampler.py``,
  ``Sampler.dtype``: the model config's ``dtype``, else its first state
  leaf's), passed to the model's ``init_cache``;
* **donation**: the trainer jits its step as ``nnx.jit(train_step,
  donate_argnames=("optimizer",))`` (``sft/peft_trainer.py``,
  ``jit_train_and_eval_step``): the old parameters stay live beside the new;
* **offload**: ``offload_to_cpu`` moves ``nnx.variables(model)`` to host
  memory and back (``rl_cluster.py``, ``_put_model_on_memory_kind``): each
  model's variables, never a trainer's optimizer state
  (:mod:`~nnx_introspect._rl.assemble` keeps those on the device).

And one thing it does not do for a rank: LoRA adapters here go on
``nnx.Linear`` only, while tunix's models project attention with their own
``Einsum`` modules (tunix adapts those with qwix's ``apply_lora_to_model``).
"""

import dataclasses
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nnx_introspect._serve import ServeOptions
from nnx_introspect._step import (
    TRAIN,
    TRAIN_OPTIMIZER_DONATED,
    ProgramKind,
    as_model,
)
from nnx_introspect._typing import ArgumentError

__all__ = [
    "DONATIONS",
    "Chosen",
    "Donate",
    "choice_notes",
    "rollout_cache_dtype",
    "unadapted_modules",
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

_DONATION = 'nnx.jit(train_step, donate_argnames=("optimizer",)) in sft/peft_trainer.py'


@dataclasses.dataclass(frozen=True)
class Chosen:
    """What the request chose where tunix 0.1.7 has a way of its own.

    Attributes:
        rollout_weights: The rollout's weights dtype as given (``None``: the
            model's own, tunix's).
        kv_cache: The rollout's KV cache dtype compiled.
        own_kv_cache: The dtype tunix's sampler gives the cache (the model's).
        donate: What the training steps donate: ``"optimizer"`` (tunix's) or
            ``"all"``.
        unadapted: With a LoRA rank, ``(class name, count)`` of the modules
            that hold weights of two or more dimensions and are not
            ``nnx.Linear`` (no adapter goes on them).

    Example:
        >>> Chosen().tunix_default
        True
    """

    rollout_weights: str | None = None
    kv_cache: str = "float32"
    own_kv_cache: str = "float32"
    donate: str = "optimizer"
    unadapted: tuple[tuple[str, int], ...] = ()

    @property
    def tunix_default(self) -> bool:
        """Whether every choice is tunix's own."""
        return (
            self.rollout_weights is None
            and self.kv_cache == self.own_kv_cache
            and self.donate == "optimizer"
        )


def unadapted_modules(model: Any) -> tuple[tuple[str, int], ...]:
    """``(class name, count)`` of the modules a LoRA rank leaves without adapters.

    A module that holds a floating ``nnx.Param`` of two or more dimensions
    itself (not through a submodule) and is neither an ``nnx.Linear`` nor an
    ``nnx.Embed`` (a table LoRA leaves alone): tunix's ``Einsum`` projections
    and ``Embedder``, flax's ``nnx.Einsum``.

    Example:
        >>> class Proj(nnx.Module):
        ...     def __init__(self, rngs):
        ...         self.w = nnx.Param(jnp.zeros((4, 2, 2)))
        >>> class Block(nnx.Module):
        ...     def __init__(self, rngs):
        ...         self.q, self.o = Proj(rngs), Proj(rngs)
        ...         self.up = nnx.Linear(4, 8, rngs=rngs)
        >>> unadapted_modules(Block(nnx.Rngs(0)))
        (('Proj', 2),)
    """
    counts: dict[str, int] = {}
    for _, module in nnx.iter_modules(model):
        if isinstance(module, nnx.Linear | nnx.Embed):
            continue
        own = [v for v in vars(module).values() if isinstance(v, nnx.Param)]
        if any(_weight(v) for v in own):
            name = type(module).__name__
            counts[name] = counts.get(name, 0) + 1
    return tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _weight(variable: Any) -> bool:
    value = variable.get_value()
    dtype = getattr(value, "dtype", None)
    shape = getattr(value, "shape", ())
    return dtype is not None and jnp.issubdtype(dtype, jnp.inexact) and len(shape) >= 2


def choice_notes(
    chosen: Chosen, colocated: bool, copy: bool, lora: Any
) -> tuple[str, ...]:
    """The report's notes: each choice, and whether it is tunix's.

    ``copy``: whether the rollout holds weights of its own (another dtype,
    or devices of its own).

    Example:
        >>> notes = choice_notes(Chosen(donate="all"), True, False, None)
        >>> "not tunix's default" in notes[1]
        True
    """
    notes = [_rollout_note(chosen, colocated, copy)]
    if chosen.kv_cache != chosen.own_kv_cache:
        notes.append(
            f"The rollout's KV cache is {chosen.kv_cache} (kv_cache): not tunix's "
            f"default, whose sampler makes it in the model's dtype "
            f"({chosen.own_kv_cache}; generate/sampler.py, Sampler.dtype)."
        )
    if chosen.donate == "optimizer":
        notes.append(
            "Each training step donates only its optimizer's state, as tunix's "
            f"trainer does ({_DONATION}): the old parameters stay live beside the "
            "new ones (donate='all' donates them too)."
        )
    else:
        notes.append(
            "Each training step donates its parameters and its optimizer's "
            "state (donate='all'): not tunix's default; tunix's trainer donates "
            f"only the optimizer ({_DONATION})."
        )
    if isinstance(lora, int) and chosen.unadapted:
        modules = ", ".join(f"{n} {name}" for name, n in chosen.unadapted)
        total = sum(n for _, n in chosen.unadapted)
        notes.append(
            f"LoRA rank {lora} puts adapters on nnx.Linear modules only: {total} "
            f"other module{'s' if total != 1 else ''} holding weights ({modules}) "
            "get none and stay frozen, untrained. tunix's models project "
            "attention with Einsum modules, which tunix adapts with qwix's "
            "apply_lora_to_model: give the model its own adapters and pass "
            "lora='model'."
        )
    return tuple(notes)


def _rollout_note(chosen: Chosen, colocated: bool, copy: bool) -> str:
    """Where the rollout's weights come from, and whether tunix does so."""
    own = (
        "tunix 0.1.7's colocated rollout is the training actor itself, in its "
        "own dtypes (rl/rl_cluster.py, RLCluster.__init__: the rollout shares "
        "the actor's model when their meshes are equal)"
    )
    cache = f"a {chosen.kv_cache} KV cache"
    if colocated and not copy:
        return f"The rollout decodes on the actor's own parameters with {cache}: {own}."
    if colocated:
        return (
            f"The rollout decodes on its own {chosen.rollout_weights} copy of the "
            f"weights (rollout_weights), resident beside the actor's parameters, "
            f"with {cache}: not tunix's default; {own}, and "
            "RolloutConfig.data_type casts only a rollout on a mesh of its own."
        )
    if chosen.rollout_weights is None:
        return (
            f"The rollout's devices hold its weights in the model's own dtypes "
            f"and {cache}, as tunix loads a rollout on a mesh of its own "
            "(RolloutConfig.data_type None, its default)."
        )
    return (
        f"The rollout's devices hold its weights in {chosen.rollout_weights} "
        f"(rollout_weights: tunix's RolloutConfig.data_type, whose default None "
        f"keeps the model's dtypes) and {cache}."
    )


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

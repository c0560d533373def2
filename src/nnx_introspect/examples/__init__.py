"""Example models: factories ``(rngs) -> nnx.Module`` for docs, tests and the CLI.

Every factory takes an ``nnx.Rngs`` and returns a module, so each one works with
:func:`~nnx_introspect.fresh_init_forward`, abstract builds and the CLI's
``package.module:callable`` targets.
"""

import dataclasses

import jax
from flax import nnx
from jaxtyping import Array, Float, Int

from nnx_introspect.examples._llama import LLAMA3_8B as LLAMA3_8B
from nnx_introspect.examples._llama import LLAMA_7B as LLAMA_7B
from nnx_introspect.examples._llama import LLAMA_7B_F32 as LLAMA_7B_F32
from nnx_introspect.examples._llama import LLAMA_TINY as LLAMA_TINY
from nnx_introspect.examples._llama import KVCache as KVCache
from nnx_introspect.examples._llama import Llama as Llama
from nnx_introspect.examples._llama import LlamaConfig as LlamaConfig
from nnx_introspect.examples._llama import LlamaLayer as LlamaLayer
from nnx_introspect.examples._llama import llama as llama
from nnx_introspect.examples._llama import llama_critic as llama_critic
from nnx_introspect.examples._moe import MOE_400M as MOE_400M
from nnx_introspect.examples._moe import MOE_TINY as MOE_TINY
from nnx_introspect.examples._moe import QWEN3_30B_A3B as QWEN3_30B_A3B
from nnx_introspect.examples._moe import Dispatch as Dispatch
from nnx_introspect.examples._moe import MoeBlock as MoeBlock
from nnx_introspect.examples._moe import MoeConfig as MoeConfig
from nnx_introspect.examples._moe import MoeLayer as MoeLayer
from nnx_introspect.examples._moe import MoeLlama as MoeLlama
from nnx_introspect.examples._moe import moe as moe
from nnx_introspect.examples._moe_ep import ep_capacity as ep_capacity

__all__ = [
    "BNDropoutMLP",
    "Llama",
    "LlamaConfig",
    "MoeBlock",
    "MoeConfig",
    "MoeLayer",
    "MoeLlama",
    "TiedEmbedding",
    "TwoLayer",
    "bn_dropout_mlp",
    "ep_capacity",
    "llama",
    "llama3_8b",
    "llama3_8b_sharded",
    "llama_7b",
    "llama_7b_sharded",
    "llama_7b_sharded_f32",
    "llama_7b_sharded_remat",
    "llama_7b_sharded_remat_f32",
    "llama_critic",
    "llama_tiny",
    "llama_tiny_sharded",
    "moe",
    "moe_400m",
    "moe_tiny",
    "moe_tiny_capacity",
    "moe_tiny_expert_parallel",
    "moe_tiny_sharded",
    "qwen3_30b_a3b",
    "qwen3_30b_a3b_sharded",
    "tied_embedding",
    "two_layer",
]


class TwoLayer(nnx.Module):
    """Two ``nnx.Linear`` layers with no activation: the model of the specs.

    Args:
        in_features: Input width.
        hidden: Width of both layers' outputs.
        rngs: The RNG streams; ``l1`` is built before ``l2`` from the same ones.

    Example:
        >>> from flax import nnx
        >>> model = TwoLayer(3, 4, rngs=nnx.Rngs(0))
        >>> model.l1.kernel.shape, model.l2.kernel.shape
        ((3, 4), (4, 4))
    """

    def __init__(self, in_features: int, hidden: int, *, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(in_features, hidden, rngs=rngs)
        self.l2 = nnx.Linear(hidden, hidden, rngs=rngs)

    def __call__(self, x: Float[Array, "*batch d"]) -> Float[Array, "*batch h"]:
        """``l2(l1(x))``."""
        y: jax.Array = self.l2(self.l1(x))
        return y


def two_layer(rngs: nnx.Rngs) -> TwoLayer:
    """The spec's two-layer model with 3 inputs and 4 hidden units (36 parameters).

    Example:
        >>> from flax import nnx
        >>> from nnx_introspect import count_params
        >>> count_params(two_layer(nnx.Rngs(0)))
        36
    """
    return TwoLayer(3, 4, rngs=rngs)


class BNDropoutMLP(nnx.Module):
    """``Linear -> BatchNorm -> relu -> Dropout -> Linear``: every common variable kind.

    Holds ``Param`` (kernels, biases, BatchNorm scale and bias), ``BatchStat``
    (BatchNorm's running mean and variance) and, because the ``Dropout`` keeps
    its own stream, ``RngKey`` and ``RngCount`` state.

    Args:
        in_features: Input width.
        hidden: Hidden width.
        out_features: Output width.
        rngs: The RNG streams (``params``; ``dropout`` if given, else the default).

    Example:
        >>> from flax import nnx
        >>> model = BNDropoutMLP(3, 5, 2, rngs=nnx.Rngs(0))
        >>> model.bn.mean.shape
        (5,)
    """

    def __init__(
        self, in_features: int, hidden: int, out_features: int, *, rngs: nnx.Rngs
    ) -> None:
        self.l1 = nnx.Linear(in_features, hidden, rngs=rngs)
        self.bn = nnx.BatchNorm(hidden, rngs=rngs)
        self.drop = nnx.Dropout(0.5, rngs=rngs)
        self.l2 = nnx.Linear(hidden, out_features, rngs=rngs)

    def __call__(self, x: Float[Array, "batch d"]) -> Float[Array, "batch o"]:
        """``l2(drop(relu(bn(l1(x)))))``."""
        y: jax.Array = self.l2(self.drop(jax.nn.relu(self.bn(self.l1(x)))))
        return y


def bn_dropout_mlp(rngs: nnx.Rngs) -> BNDropoutMLP:
    """A :class:`BNDropoutMLP` with 3 inputs, 5 hidden units and 2 outputs.

    Parameters: ``3*5 + 5`` (l1) ``+ 5 + 5`` (BatchNorm scale, bias)
    ``+ 5*2 + 2`` (l2) ``= 42``; batch statistics: ``5 + 5 = 10``.

    Example:
        >>> from flax import nnx
        >>> from nnx_introspect import count_params
        >>> model = bn_dropout_mlp(nnx.Rngs(0))
        >>> count_params(model), count_params(model, nnx.BatchStat)
        (42, 10)
    """
    return BNDropoutMLP(3, 5, 2, rngs=rngs)


class TiedEmbedding(nnx.Module):
    """A token embedding whose table is also the output projection (weight tying).

    The ``nnx.Embed`` is reachable as ``embed`` and ``head``; the state holds its
    table once, so the parameter count is ``vocab * d_model``.

    Args:
        vocab: Vocabulary size.
        d_model: Embedding width.
        rngs: The RNG streams.

    Example:
        >>> from flax import nnx
        >>> model = TiedEmbedding(10, 4, rngs=nnx.Rngs(0))
        >>> model.head is model.embed
        True
    """

    def __init__(self, vocab: int, d_model: int, *, rngs: nnx.Rngs) -> None:
        self.embed = nnx.Embed(vocab, d_model, rngs=rngs)
        self.head = self.embed

    def __call__(
        self, tokens: Int[Array, "*batch seq"]
    ) -> Float[Array, "*batch seq v"]:
        """Embed ``tokens`` and score them against the same table."""
        y: jax.Array = self.head.attend(self.embed(tokens))
        return y


def tied_embedding(rngs: nnx.Rngs) -> TiedEmbedding:
    """A :class:`TiedEmbedding` with a 10-token vocabulary and width 4 (40 params).

    Example:
        >>> from flax import nnx
        >>> from nnx_introspect import count_params, count_state_leaves
        >>> model = tied_embedding(nnx.Rngs(0))
        >>> count_params(model), count_state_leaves(model)
        (40, 1)
    """
    return TiedEmbedding(10, 4, rngs=rngs)


def llama_tiny(rngs: nnx.Rngs) -> Llama:
    """A small Llama: 10,424,576 parameters in 75 leaves.

    Vocabulary 8000, width 256, 8 layers, 4 heads, MLP width 688.

    Example:
        >>> from nnx_introspect import abstract_model, count_params
        >>> count_params(abstract_model(llama_tiny))
        10424576
    """
    return Llama(LLAMA_TINY, rngs=rngs)


def llama_7b(rngs: nnx.Rngs) -> Llama:
    """Llama-2-7B shapes: 6,738,415,616 float32 parameters (25.1 GiB) in 291 leaves.

    Vocabulary 32000, width 4096, 32 layers, 32 heads, MLP width 11008. It
    computes in bfloat16 with float32 parameters (``LlamaConfig.dtype``), as
    7B models are trained: bfloat16 activations and matmuls, float32
    parameters, gradients and optimizer state.

    Build it abstractly (:func:`~nnx_introspect.abstract_model`): concretely it
    needs 25 GiB.

    Example:
        >>> from nnx_introspect import abstract_model, count_params
        >>> from nnx_introspect import count_state_leaves
        >>> model = abstract_model(llama_7b)
        >>> count_params(model), count_state_leaves(model)
        (6738415616, 291)
    """
    return Llama(LLAMA_7B, rngs=rngs)


def _sharded(cfg: LlamaConfig) -> LlamaConfig:
    return dataclasses.replace(cfg, partitioned=True, shard_activations=True)


def llama_tiny_sharded(rngs: nnx.Rngs) -> Llama:
    """:func:`llama_tiny` with sharding annotations on every kernel and the embedding.

    Column-parallel kernels (q, k, v, gate, up, lm_head) carry
    ``("fsdp", "tp")``, row-parallel ones (o, down) and the embedding
    ``("tp", "fsdp")``, as model zoos annotate them (tunix names its mesh axes
    the same way); the RMSNorm scales carry none and stay replicated. Plan it on
    a mesh with axes ``fsdp`` and ``tp``, or map the names with logical rules.

    Under a mesh with those axes (``jax.set_mesh``) its activations are
    constrained as trainers constrain them (``LlamaConfig.shard_activations``):
    the batch over ``data`` and ``fsdp``, heads, MLP units, vocabulary and the
    residual stream's sequence over ``tp``. With no mesh it computes exactly
    what :func:`llama_tiny` does.

    Example:
        >>> from nnx_introspect import abstract_model, mesh_config_report
        >>> model = abstract_model(llama_tiny_sharded)
        >>> report = mesh_config_report(model, "fsdp=2,tp=4")
        >>> report.ok, sum(1 for leaf in report.leaves if not leaf.replicated_over)
        (True, 58)
    """
    return Llama(_sharded(LLAMA_TINY), rngs=rngs)


def llama_7b_sharded(rngs: nnx.Rngs) -> Llama:
    """:func:`llama_7b` with sharding annotations (``fsdp``, ``tp``): a real split.

    The same annotations and activation constraints as
    :func:`llama_tiny_sharded`, and the same bfloat16 compute with float32
    parameters as :func:`llama_7b` (:func:`llama_7b_sharded_f32` computes in
    float32). On ``fsdp=2,tp=4`` the
    embedding, the head and the 224 layer kernels split 8 ways and the 65 norm
    scales stay replicated; on ``fsdp=3,tp=5`` nothing divides 4096 or 11008,
    and the plan lists 450 indivisible dimensions.

    Example:
        >>> from nnx_introspect import abstract_model, mesh_config_report
        >>> model = abstract_model(llama_7b_sharded)
        >>> good = mesh_config_report(model, "fsdp=2,tp=4")
        >>> good.ok, good.bytes_per_device
        (True, 3370139648)
        >>> bad = mesh_config_report(model, "fsdp=3,tp=5")
        >>> bad.ok, len(bad.errors)
        (False, 450)
    """
    return Llama(_sharded(LLAMA_7B), rngs=rngs)


def llama_7b_sharded_f32(rngs: nnx.Rngs) -> Llama:
    """:func:`llama_7b_sharded` computing in float32: activations and matmuls too.

    The example as it was before it computed in bfloat16
    (``LlamaConfig.dtype=None``): the same parameters, shardings and state
    bytes; only the step's activations (twice the bytes) and its matmuls'
    precision differ.

    Example:
        >>> from nnx_introspect import abstract_model, count_params
        >>> from nnx_introspect import mesh_config_report
        >>> model = abstract_model(llama_7b_sharded_f32)
        >>> count_params(model) == count_params(abstract_model(llama_7b_sharded))
        True
        >>> mesh_config_report(model, "fsdp=2,tp=4").bytes_per_device
        3370139648
    """
    return Llama(_sharded(LLAMA_7B_F32), rngs=rngs)


def llama_7b_sharded_remat(rngs: nnx.Rngs) -> Llama:
    """:func:`llama_7b_sharded` with each decoder layer rematerialised.

    ``LlamaConfig.remat``: the backward pass keeps each layer's input and
    recomputes its attention and MLP, instead of keeping their activations
    (the attention probabilities, ``f32[B, heads, T, T]`` per layer, above
    all). The same parameters and the same forward values; bfloat16 compute,
    float32 parameters, as :func:`llama_7b_sharded`.

    Example:
        >>> from nnx_introspect import abstract_model, count_params
        >>> count_params(abstract_model(llama_7b_sharded_remat))
        6738415616
    """
    return Llama(dataclasses.replace(_sharded(LLAMA_7B), remat=True), rngs=rngs)


def llama_7b_sharded_remat_f32(rngs: nnx.Rngs) -> Llama:
    """:func:`llama_7b_sharded_remat` computing in float32 (``LlamaConfig.dtype=None``).

    Example:
        >>> from nnx_introspect import abstract_model, count_params
        >>> model = abstract_model(llama_7b_sharded_remat_f32)
        >>> count_params(model) == count_params(abstract_model(llama_7b_sharded_remat))
        True
    """
    return Llama(dataclasses.replace(_sharded(LLAMA_7B_F32), remat=True), rngs=rngs)


def llama3_8b(rngs: nnx.Rngs) -> Llama:
    """Llama-3-8B shapes: 8,030,261,248 float32 parameters in 291 leaves.

    Vocabulary 128,256, width 4096, 32 layers, 32 query heads sharing 8 key
    and value heads (grouped-query attention: the k and v kernels are
    4096 x 1024), MLP width 14336; bfloat16 compute with float32 parameters,
    as :func:`llama_7b`. Its KV cache holds ``2 * 32 * 8 * 128`` values per
    position of a sequence, a quarter of the 7B's.

    Example:
        >>> from nnx_introspect import abstract_model, count_params
        >>> count_params(abstract_model(llama3_8b))
        8030261248
    """
    return Llama(LLAMA3_8B, rngs=rngs)


def llama3_8b_sharded(rngs: nnx.Rngs) -> Llama:
    """:func:`llama3_8b` with the sharding annotations of :func:`llama_7b_sharded`.

    Its 8 KV heads split over a ``tp`` of 1, 2, 4 or 8.

    Example:
        >>> from nnx_introspect import abstract_model, mesh_config_report
        >>> model = abstract_model(llama3_8b_sharded)
        >>> report = mesh_config_report(model, "fsdp=1,tp=8")
        >>> report.ok, report.bytes_per_device
        (True, 4016062464)
    """
    return Llama(_sharded(LLAMA3_8B), rngs=rngs)


def moe_tiny(rngs: nnx.Rngs) -> MoeLlama:
    """A small mixture of experts: 214,336 parameters, 140,608 of them per token.

    Vocabulary 512, width 64, 2 layers of 4 query and 2 KV heads; in each,
    8 experts of width 32 (a token goes to 2) and a shared expert of width
    64; dropless dispatch (``jax.lax.ragged_dot``).

    Example:
        >>> from nnx_introspect import abstract_model, count_active_params
        >>> from nnx_introspect import count_params
        >>> model = abstract_model(moe_tiny)
        >>> count_params(model), count_active_params(model)
        (214336, 140608)
        >>> model.layers[0].moe.w_gate.shape  # (experts, d_model, d_ff)
        (8, 64, 32)
    """
    return MoeLlama(MOE_TINY, rngs=rngs)


def moe_tiny_capacity(rngs: nnx.Rngs) -> MoeLlama:
    """:func:`moe_tiny` with capacity-factor dispatch (one-hot einsums).

    Each expert takes at most ``ceil(T * 2 / 8 * 1.25)`` of a sequence's
    ``T`` tokens (:meth:`MoeConfig.capacity`); the same parameters.

    Example:
        >>> from nnx_introspect import abstract_model
        >>> model = abstract_model(moe_tiny_capacity)
        >>> model.layers[0].moe.dispatch, MOE_TINY.capacity(128)
        ('capacity', 40)
    """
    return MoeLlama(dataclasses.replace(MOE_TINY, dispatch="capacity"), rngs=rngs)


def _moe_sharded(cfg: MoeConfig) -> MoeConfig:
    return dataclasses.replace(cfg, partitioned=True, shard_activations=True)


def moe_tiny_sharded(rngs: nnx.Rngs) -> MoeLlama:
    """:func:`moe_tiny` with sharding annotations: experts over an expert axis.

    Attention, the shared expert and the embedding are annotated as
    :func:`llama_tiny_sharded`'s, the router ``("fsdp", None)``, the stacked
    experts ``("expert", "fsdp", "tp")`` (gate, up) and ``("expert", "tp",
    "fsdp")`` (down). The plan splits the ``"expert"`` dimension over the
    mesh's ``ep`` axis (or ``expert``), else over ``fsdp`` (and the weight's
    ``fsdp`` dimension is then left whole).

    Its dispatch is :func:`moe_tiny`'s global, dense one (``"dropless"``):
    the whole batch's token copies sorted together, which XLA's sharding
    propagation computes with all-reduces and all-gathers of the global rows,
    not an all-to-all of each device's tokens; :func:`moe_tiny_expert_parallel`
    dispatches as expert-parallel trainers do.

    Example:
        >>> from nnx_introspect import abstract_model, mesh_config_report
        >>> model = abstract_model(moe_tiny_sharded)
        >>> report = mesh_config_report(model, "ep=4,fsdp=2,tp=1")
        >>> leaf = next(l for l in report.leaves if l.path.endswith("0/moe/w_gate"))
        >>> leaf.spec, leaf.shard_shape
        (P('ep', 'fsdp', 'tp'), (2, 32, 32))
        >>> over_fsdp = mesh_config_report(model, "fsdp=8,tp=1")
        >>> [l.spec for l in over_fsdp.leaves if l.path.endswith("0/moe/w_down")]
        [P('fsdp', 'tp', None)]
    """
    return MoeLlama(_moe_sharded(MOE_TINY), rngs=rngs)


def moe_tiny_expert_parallel(rngs: nnx.Rngs) -> MoeLlama:
    """:func:`moe_tiny_sharded` with expert-parallel dispatch: all-to-alls over ``ep``.

    Under a mesh with an expert axis (``ep``, ``expert``, else ``fsdp``), each
    device routes its own tokens and sends each token copy to the device that
    holds its expert with a ``jax.lax.all_to_all`` over that axis, at most
    ``ceil(copies / ep x 1.25)`` rows to each device (:func:`MoeBlock
    <nnx_introspect.examples.MoeBlock>`'s ``"expert_parallel"``); the results
    come back by a second all-to-all. The embedded tokens and the logits split
    over the expert axis too. Without an expert axis of more than one device,
    :func:`moe_tiny_sharded`'s dropless dispatch. The same parameters.

    Example:
        >>> from nnx_introspect import abstract_model
        >>> model = abstract_model(moe_tiny_expert_parallel)
        >>> model.layers[0].moe.dispatch, model.activation_batch_axes()
        ('expert_parallel', ('data', 'fsdp', 'expert', 'ep'))
    """
    cfg = dataclasses.replace(_moe_sharded(MOE_TINY), dispatch="expert_parallel")
    return MoeLlama(cfg, rngs=rngs)


def moe_400m(rngs: nnx.Rngs) -> MoeLlama:
    """A mixture of experts one v5e chip trains: 405,386,240 parameters.

    Vocabulary 32,000, width 1024, 6 layers of 8 query and 4 KV heads; in
    each, 16 experts of width 1024 (a token goes to 2) and a shared expert
    of width 1024: 141,145,088 parameters a token uses. bfloat16 compute,
    float32 parameters, dropless dispatch. On a v5e chip its training step
    (AdamW, next-token loss, int32[8,1024]) peaked at 10,697,829,376 bytes
    (9.96 GiB, XLA:TPU's ``peak_memory_in_bytes``) and took 92 ms (85 ms with
    capacity dispatch, ``MoeConfig.dispatch="capacity"``).

    Example:
        >>> from nnx_introspect import abstract_model, count_active_params
        >>> from nnx_introspect import count_params
        >>> model = abstract_model(moe_400m)
        >>> count_params(model), count_active_params(model)
        (405386240, 141145088)
    """
    return MoeLlama(MOE_400M, rngs=rngs)


def qwen3_30b_a3b(rngs: nnx.Rngs) -> MoeLlama:
    """Qwen3-30B-A3B's shapes: 30,532,110,336 parameters, 3,353,020,416 per token.

    Vocabulary 151,936, width 2048, 48 layers of 32 query and 4 KV heads of
    width 128; in each, 128 experts of width 768, of which a token goes to
    8, and no shared expert; dropless dispatch, bfloat16 compute with float32
    parameters. 114 GiB of float32 parameters: build it abstractly
    (:func:`~nnx_introspect.abstract_model`), for deviceless reports.

    Example:
        >>> from nnx_introspect import abstract_model, count_active_params
        >>> from nnx_introspect import count_params
        >>> model = abstract_model(qwen3_30b_a3b)
        >>> count_params(model), count_active_params(model)
        (30532110336, 3353020416)
    """
    return MoeLlama(QWEN3_30B_A3B, rngs=rngs)


def qwen3_30b_a3b_sharded(rngs: nnx.Rngs) -> MoeLlama:
    """:func:`qwen3_30b_a3b`, sharded and expert-parallel.

    :func:`moe_tiny_sharded`'s annotations; its 128 experts split over an
    ``ep`` (or ``fsdp``) axis of any size that divides 128, and its tokens
    reach them by all-to-alls over that axis (``"expert_parallel"``
    dispatch, capacity factor 1.25), the logits and the loss split over the
    batch axes and the expert axis alike.

    Example:
        >>> from nnx_introspect import abstract_model, mesh_config_report
        >>> model = abstract_model(qwen3_30b_a3b_sharded)
        >>> report = mesh_config_report(model, "ep=16,fsdp=4,tp=1")
        >>> report.ok, report.bytes_per_device
        (True, 3353616384)
    """
    cfg = dataclasses.replace(_moe_sharded(QWEN3_30B_A3B), dispatch="expert_parallel")
    return MoeLlama(cfg, rngs=rngs)

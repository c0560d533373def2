"""``--remat`` and ``--microbatches``: the step options, parsed without JAX."""

import argparse
import re
from typing import Any

__all__ = [
    "LORA_HELP",
    "MEASURE_HELP",
    "TOPOLOGY_HELP",
    "add_lora_arg",
    "add_measure_arg",
    "add_option_args",
    "add_xla_flag_arg",
    "lora_arg",
    "measure_arg",
    "microbatches_arg",
    "option_kwargs",
    "remat_arg",
    "xla_flag_arg",
    "xla_flags",
]

_XLA_FLAG = re.compile(r"^-*[A-Za-z_][A-Za-z0-9_]*=")


def remat_arg(text: str) -> tuple[str, str | None]:
    """``--remat CLASS[:POLICY]`` -> ``(class, policy or None)``.

    The library checks the class against the model and the policy against
    ``jax.checkpoint_policies`` before compiling; here only the shape.

    Example:
        >>> remat_arg("LlamaLayer"), remat_arg("LlamaLayer:dots_saveable")
        (('LlamaLayer', None), ('LlamaLayer', 'dots_saveable'))
        >>> remat_arg(":x")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: must be CLASS or CLASS:POLICY (a module class \
of the model, such as LlamaLayer:dots_saveable), got ':x'
    """
    name, colon, policy = text.partition(":")
    if not name.isidentifier() or (colon and not policy.isidentifier()):
        raise argparse.ArgumentTypeError(
            "must be CLASS or CLASS:POLICY (a module class of the model, such as "
            f"LlamaLayer:dots_saveable), got {text!r}"
        )
    return name, policy if colon else None


def microbatches_arg(text: str) -> int:
    """``--microbatches K``: a positive integer.

    Example:
        >>> microbatches_arg("4")
        4
        >>> microbatches_arg("0")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: must be a positive integer (how many \
microbatches one step accumulates gradients over), got '0'
    """
    need = (
        "must be a positive integer (how many microbatches one step accumulates "
        f"gradients over), got {text!r}"
    )
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(need) from None
    if value < 1:
        raise argparse.ArgumentTypeError(need)
    return value


def lora_arg(text: str) -> int | str:
    """``--lora RANK`` or ``--lora model``.

    Example:
        >>> lora_arg("16"), lora_arg("model")
        (16, 'model')
        >>> lora_arg("0")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: must be a rank (a positive integer: adapters \
on every nnx.Linear) or model (the model's own nnx.LoRAParam leaves), got '0'
    """
    if text == "model":
        return text
    need = (
        "must be a rank (a positive integer: adapters on every nnx.Linear) or "
        f"model (the model's own nnx.LoRAParam leaves), got {text!r}"
    )
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(need) from None
    if value < 1:
        raise argparse.ArgumentTypeError(need)
    return value


LORA_HELP = (
    "fine-tune with LoRA: RANK adds adapters (in x RANK, RANK x out) to every "
    "nnx.Linear of the step's copy of the model and trains only those; model "
    "trains the model's own nnx.LoRAParam leaves; the rest is frozen (no "
    "gradient, no optimizer state)"
)


def add_lora_arg(parser: argparse.ArgumentParser, help_text: str = LORA_HELP) -> None:
    """Add ``--lora RANK|model``."""
    parser.add_argument(
        "--lora", type=lora_arg, default=None, metavar="RANK|model", help=help_text
    )


def xla_flag_arg(text: str) -> list[str]:
    """``--xla-flag NAME=VALUE`` (or several, space-separated) -> its words.

    The names are XLA's and libtpu's, with or without their leading ``--``;
    the library checks them against the compiler.

    Example:
        >>> xla_flag_arg("xla_tpu_enable_async_collective_fusion=false")
        ['xla_tpu_enable_async_collective_fusion=false']
        >>> xla_flag_arg("--xla_a=true --xla_b=1")
        ['--xla_a=true', '--xla_b=1']
        >>> xla_flag_arg("xla_a")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: must be NAME=VALUE (an XLA or libtpu flag, such \
as xla_tpu_enable_async_collective_fusion=false), got 'xla_a'
    """
    words = text.split()
    bad = [w for w in words if not _XLA_FLAG.match(w)] or ([] if words else [text])
    if bad:
        raise argparse.ArgumentTypeError(
            "must be NAME=VALUE (an XLA or libtpu flag, such as "
            f"xla_tpu_enable_async_collective_fusion=false), got {bad[0]!r}"
        )
    return words


def add_xla_flag_arg(parser: argparse.ArgumentParser) -> None:
    """Add ``--xla-flag NAME=VALUE`` (repeatable)."""
    parser.add_argument(
        "--xla-flag",
        action="append",
        type=xla_flag_arg,
        default=None,
        metavar="NAME=VALUE",
        help="compile with this XLA or libtpu flag (xla_tpu_enable_async_"
        "collective_fusion=false), as a training run's LIBTPU_INIT_ARGS or "
        "XLA_FLAGS sets it; repeat for several. The flags of LIBTPU_INIT_ARGS "
        "(a TPU --topology) and XLA_FLAGS in the environment apply too; the "
        "report lists every flag it compiled with",
    )


def xla_flags(args: argparse.Namespace) -> list[str] | None:
    """``--xla-flag``'s words, every one given, or ``None`` for none."""
    given = getattr(args, "xla_flag", None)
    return None if not given else [word for words in given for word in words]


def add_option_args(parser: argparse.ArgumentParser) -> None:
    """Add the step options' flags: ``--remat`` to ``--no-cache``, ``--lora``."""
    parser.add_argument(
        "--remat",
        action="append",
        type=remat_arg,
        default=None,
        metavar="CLASS[:POLICY]",
        help="rematerialise every module of this class while the step is traced "
        "(nnx.remat around its __call__, on the step's own copy of the model), "
        "with a jax.checkpoint_policies policy: nothing_saveable (the default), "
        "dots_with_no_batch_dims_saveable, dots_saveable, everything_saveable or "
        "offload_dot_with_no_batch_dims; repeat for several classes",
    )
    parser.add_argument(
        "--tokens-per-step",
        type=_tokens_arg,
        default=None,
        metavar="N",
        help="the tokens one step trains on, for the MFU's 6·N·tokens where the "
        "batch does not tell (packed sequences, float inputs); default: B x T of "
        "the first integer [B, T] --batch",
    )
    parser.add_argument(
        "--microbatches",
        type=microbatches_arg,
        default=1,
        metavar="K",
        help="accumulate the gradients over K microbatches (a scan) and update "
        "once: each device's microbatch is a slice of its own rows; K must "
        "divide the batch, and a microbatch's rows the mesh's data axes "
        "(default: 1, the whole batch at once)",
    )
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="compile every program anew: neither read nor write the cache of "
        "compile results ($XDG_CACHE_HOME/nnx-introspect; the environment "
        "variable NNX_INTROSPECT_CACHE=off does the same)",
    )
    add_lora_arg(parser)
    add_xla_flag_arg(parser)


def option_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``remat=``, ``microbatches=``, ``tokens_per_step=``, ``lora=``, ``cache=``.

    With ``--xla-flag``, ``compiler_flags=`` too.
    """
    pairs = getattr(args, "remat", None) or []
    remat = {name: policy or "nothing_saveable" for name, policy in pairs}
    flags = xla_flags(args)
    return {
        "remat": remat or None,
        "microbatches": getattr(args, "microbatches", 1),
        "tokens_per_step": getattr(args, "tokens_per_step", None),
        "lora": getattr(args, "lora", None),
        "cache": not getattr(args, "no_cache", False),
    } | ({} if flags is None else {"compiler_flags": flags})


def _tokens_arg(text: str) -> int:
    """``--tokens-per-step N``: a positive integer.

    Example:
        >>> _tokens_arg("16384")
        16384
    """
    need = f"must be a positive integer (tokens per step), got {text!r}"
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(need) from None
    if value < 1:
        raise argparse.ArgumentTypeError(need)
    return value


MEASURE_HELP = (
    "run the compiled {what} on this machine's devices: one warm-up and N "
    "timed runs (default 5), the state fed back; the report shows the measured "
    "time, tokens/s, the MFU and the allocator's figures beside the estimate. "
    "The devices must be this machine's (no --topology, or the one they are: "
    "on one v5e chip, v5e-1); a warning comes first when the compiled program "
    "needs more memory than they have, and a run that fails exits with 1"
)
"""``--measure``'s help; ``{what}`` reads after "the compiled": ``step``,
``prefill and decode``, ``program of each phase``."""

TOPOLOGY_HELP = (
    "compile for this accelerator slice with its compiler, no device needed: a "
    'TPU slice (v5e-8, v6e-256, v5p-8 = 4 chips; pip install "nnx-introspect[tpu]") '
    'or NVIDIA GPUs (h100-8, a100-64; pip install "nnx-introspect[gpu]")'
)
"""``--topology``'s help where a command says no more: the names and the extras."""


def measure_arg(text: str) -> int:
    """``--measure N``: a positive integer, at most 1000.

    Example:
        >>> measure_arg("3")
        3
        >>> measure_arg("0")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: must be a number of timed runs from 1 to \
1000, got '0'
    """
    need = f"must be a number of timed runs from 1 to 1000, got {text!r}"
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(need) from None
    if not 1 <= value <= 1000:
        raise argparse.ArgumentTypeError(need)
    return value


def add_measure_arg(parser: argparse.ArgumentParser, what: str) -> None:
    """Add ``--measure [N]`` (5 when given alone)."""
    parser.add_argument(
        "--measure",
        nargs="?",
        const=5,
        default=None,
        type=measure_arg,
        metavar="N",
        help=MEASURE_HELP.format(what=what),
    )

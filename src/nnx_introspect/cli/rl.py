"""``nnx-introspect rl``: one GRPO step's programs on the devices they share."""

import argparse
import sys
from typing import Any

from nnx_introspect.cli.args import FORMATS, PROG, add_output_args, add_target_args
from nnx_introspect.cli.errors import UsageError, in_flags, usage_error
from nnx_introspect.cli.measuring import measure_failed
from nnx_introspect.cli.options import (
    TOPOLOGY_HELP,
    add_lora_arg,
    add_measure_arg,
    add_xla_flag_arg,
    xla_flags,
)
from nnx_introspect.cli.output import emit
from nnx_introspect.cli.plan_args import OPTIMIZERS, bytes_arg
from nnx_introspect.cli.progress import ClockLine, live_status
from nnx_introspect.cli.serve import (
    KV_CACHE_CHOICES,
    SERVE_TARGET,
    WEIGHT_CHOICES,
    dtype_arg,
    mesh_arg,
)

__all__ = ["add_rl_parser", "check_rl"]


def _positive(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


_SIZES = (
    ("--batch", "prompts per step (required unless --max-batch)"),
    ("--generations", "completions per prompt (GRPO's group size)"),
    ("--prompt", "tokens of each prompt"),
    ("--completion", "tokens of each completion"),
)


_ROLES = ("actor", "rollout", "reference", "critic")


def role_mesh_arg(text: str) -> tuple[str, str]:
    """``--role-mesh ROLE=MESH``: a role and its own mesh, spelled right (no JAX).

    Example:
        >>> role_mesh_arg("rollout=tp=4"), role_mesh_arg("actor=fsdp=2,tp=2")
        (('rollout', 'tp=4'), ('actor', 'fsdp=2,tp=2'))
        >>> role_mesh_arg("reward=tp=4")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: must be ROLE=MESH with ROLE one of actor, \
rollout, reference, critic (such as rollout=tp=4), got 'reward=tp=4'
    """
    role, _, mesh = text.partition("=")
    if role not in _ROLES or not mesh:
        raise argparse.ArgumentTypeError(
            f"must be ROLE=MESH with ROLE one of {', '.join(_ROLES)} (such as "
            f"rollout=tp=4), got {text!r}"
        )
    if mesh.strip().lower() == "auto":
        raise argparse.ArgumentTypeError(
            f"a role's mesh must be axis=size,... (not auto), got {text!r}"
        )
    return role, mesh_arg(mesh)


def add_rl_parser(subparsers: Any) -> None:
    """Adds the ``rl`` command to ``subparsers``."""
    parser = subparsers.add_parser(
        "rl",
        help="compile one GRPO step's programs and report the peak per device",
        description="Compile the programs of one GRPO step of TARGET (with "
        "--critic, PPO's) for --topology (no device needed) or this process's "
        "devices, every role on --mesh (colocated) but those --role-mesh gives "
        "devices of their own: the rollout's prefill and decode of --batch x "
        "--generations completions, the reference model's per-token "
        "log-probabilities, the actor's training step on tunix's GRPO loss. "
        "The defaults are google-tunix 0.1.7's: colocated, the rollout is the "
        "actor itself in its own dtypes (no copy), the trainer donates only its "
        "optimizer, --offload moves the models and never an optimizer's state. "
        "Each phase's peak is its program's own plus what the other roles keep "
        "resident; the step's is the largest. Exits with 1 when it does not "
        "fit, 2 on bad input.",
    )
    add_target_args(parser, seed=False, default=SERVE_TARGET)
    parser.add_argument(
        "--mesh",
        default="tp=8",
        type=mesh_arg,
        help="the mesh every role runs on (default tp=8), but those given "
        "--role-mesh; sequences split over every axis but tp; auto compares "
        "layouts of the --topology's devices (every role on fsdp=N or tp=N, the "
        "rollout on tp=N/2 beside the others on fsdp=N/2, ...) by step time",
    )
    parser.add_argument(
        "--role-mesh",
        action="append",
        type=role_mesh_arg,
        default=None,
        metavar="ROLE=MESH",
        help="run ROLE (actor, rollout, reference, or critic with --critic) on "
        "devices of its own with "
        "this mesh, the others on --mesh (tunix's disaggregated role_to_mesh); "
        "repeat for several roles; together the slices must fit the topology",
    )
    for flag, what in _SIZES:
        required = flag != "--batch"  # --max-batch searches for it
        parser.add_argument(
            flag, type=_positive, required=required, metavar="N", help=what
        )
    parser.add_argument(
        "--max-batch",
        action="store_true",
        help="instead of --batch: the most prompts per step that fit (each "
        "batch tried is the whole step compiled), with the compiled edge above",
    )
    _add_role_args(parser)
    _add_rollout_args(parser)
    add_measure_arg(parser, "program of each phase")
    add_xla_flag_arg(parser)
    add_output_args(parser, (*FORMATS, "html"))
    parser.set_defaults(handler=_run_rl, check=check_rl)


def _add_role_args(parser: argparse.ArgumentParser) -> None:
    """The roles' flags: the reference, the optimizer, the target and budget."""
    parser.add_argument(
        "--no-reference",
        action="store_true",
        help="no reference model (no KL term): its parameters are not resident",
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="classify every buffer live at each phase's peak by kind and "
        "source line (the report's notes list each phase's largest kinds)",
    )
    parser.add_argument(
        "--offload",
        action="store_true",
        help="hold the models a phase does not run on in host memory meanwhile "
        "(tunix's offload_to_cpu, which moves each model's variables): each "
        "phase's peak is its program's plus the optimizer states, which stay on "
        "the device; the bytes moved to and from the host per step are reported",
    )
    add_lora_arg(
        parser,
        "train LoRA adapters of this RANK on every nnx.Linear (or model: the "
        "model's own nnx.LoRAParam leaves), the backbone frozen; the reference "
        "is that backbone, no second copy",
    )
    parser.add_argument(
        "--critic",
        default=None,
        metavar="PKG.MOD:FN",
        help="a PPO step instead of GRPO: this critic (a model with a value head, "
        "[batch, sequence, 1] a call) computes values and trains on tunix's "
        "value loss beside the actor, on the actor's devices unless --role-mesh "
        "critic=MESH gives it its own; needs --generations 1",
    )
    parser.add_argument(
        "--optimizer",
        default="adamw",
        choices=OPTIMIZERS,
        metavar="NAME",
        help=f"the actor's optimizer (and the critic's): {', '.join(OPTIMIZERS)} "
        "(default adamw)",
    )
    parser.add_argument(
        "--donate",
        default="optimizer",
        choices=("optimizer", "all"),
        help="what each training step donates: optimizer (default: its "
        "optimizer's state alone, as tunix's trainer jits it, the old parameters "
        "live beside the new) or all (the parameters too)",
    )
    parser.add_argument(
        "--topology",
        default=None,
        metavar="NAME",
        help=TOPOLOGY_HELP,
    )
    parser.add_argument(
        "--max-device-bytes",
        type=bytes_arg,
        default=None,
        metavar="SIZE",
        help="a budget per device, with its unit: 16GiB (default: the "
        "topology's memory a run gets)",
    )
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="compile every program anew: neither read nor write the cache of "
        "compile results",
    )


def _add_rollout_args(parser: argparse.ArgumentParser) -> None:
    """The rollout's flags: its dtypes and its calling convention."""
    parser.add_argument(
        "--rollout-weights",
        default="model",
        type=dtype_arg(WEIGHT_CHOICES, "model, bf16, f32"),
        metavar="DTYPE",
        help="dtype of the rollout's weights: model (default: the actor's own "
        "parameters, no copy when colocated, as tunix's rollout is the actor), "
        "or bf16 or f32 (a copy cast to it, resident beside the actor's when "
        "colocated: not tunix's default)",
    )
    parser.add_argument(
        "--kv-cache",
        default="model",
        type=dtype_arg(
            KV_CACHE_CHOICES | {"model": "model"}, "model, bf16, f32, fp8, int8"
        ),
        metavar="DTYPE",
        help="dtype of the rollout's KV cache: model (default: the model's own, "
        "as tunix's sampler makes it), bf16, f32, fp8, int8",
    )
    parser.add_argument(
        "--init-cache",
        default=None,
        metavar="PKG.MOD:FN",
        help="the rollout makes its KV cache as fn(model, sequences, context, "
        "dtype) (default: the model's own init_cache)",
    )
    parser.add_argument(
        "--decode",
        default=None,
        metavar="PKG.MOD:FN",
        help="the rollout calls the model as fn(model, tokens, positions, cache) "
        "-> (logits, cache) (default: model(tokens, positions, cache, mask))",
    )


def _mistake(args: argparse.Namespace) -> str | None:
    """A combination of flags no run takes, in words, or ``None``."""
    if args.max_batch == (args.batch is not None):
        return (
            "argument --batch: pass --batch N or --max-batch (which searches for "
            "it), not both or neither"
        )
    auto = args.mesh.strip().lower() == "auto"
    if auto and (args.max_batch or args.role_mesh):
        return (
            "argument --mesh: auto compares layouts of its own; pass a mesh with "
            "--max-batch or --role-mesh"
        )
    if args.measure is not None and (auto or args.max_batch or args.role_mesh):
        return (
            "argument --measure: runs the programs of one colocated step; not "
            "with --mesh auto, --max-batch or --role-mesh (measure the answer "
            "alone, every role on one mesh)"
        )
    if xla_flags(args) and (auto or args.max_batch):
        return (
            "argument --xla-flag: compiles the programs of one step; not yet "
            "with --mesh auto or --max-batch (set the flags in LIBTPU_INIT_ARGS "
            "or XLA_FLAGS for those)"
        )
    if args.critic is not None and args.generations != 1:
        return (
            f"argument --generations: a PPO step (--critic) samples one "
            f"completion a prompt (tunix's PPOLearner), got --generations "
            f"{args.generations}; pass --generations 1, or no --critic for GRPO"
        )
    return None


def check_rl(args: argparse.Namespace) -> None:
    """Every check of ``rl``'s flags that needs no JAX, before it starts.

    Raises:
        UsageError: For flags no run takes together (:func:`_mistake`).
    """
    mistake = _mistake(args)
    if mistake is not None:
        raise UsageError(mistake)


def _run_rl(args: argparse.Namespace) -> int:
    from nnx_introspect import compare_rl_layouts, rl_max_batch, rl_memory_report

    check_rl(args)  # main checked it before JAX; again for direct callers
    where = f"XLA for {args.topology}" if args.topology else "XLA"
    auto = args.mesh.strip().lower() == "auto"
    what = (
        "the largest batch of a GRPO step"
        if args.max_batch
        else "GRPO step layouts"
        if auto
        else "one GRPO step"
    )
    message = f"Compiling {what} of {args.target} with {where}..."
    sizes = {} if args.max_batch else {"batch": args.batch}
    run: Any = rl_max_batch if args.max_batch else rl_memory_report
    layout: dict[str, Any] = {
        "role_meshes": dict(args.role_mesh) if args.role_mesh else None
    }
    if auto:
        run, layout = compare_rl_layouts, {}
    elif not args.max_batch:
        layout["measure"] = args.measure
        layout["compiler_flags"] = xla_flags(args)
    try:
        with live_status(ClockLine(message)):
            report = run(
                args.target,
                "auto" if auto else args.mesh,
                **sizes,
                **layout,
                generations=args.generations,
                prompt=args.prompt,
                completion=args.completion,
                reference=not args.no_reference,
                lora=args.lora,
                critic=args.critic,
                offload=args.offload,
                breakdown=args.breakdown,
                optimizer=args.optimizer,
                rollout_weights=_dtype(args.rollout_weights),
                kv_cache=_dtype(args.kv_cache),
                donate=args.donate,
                topology=args.topology,
                max_device_bytes=args.max_device_bytes,
                init_cache=args.init_cache,
                decode=args.decode,
                cache=not args.no_cache,
            )
    except (TypeError, ValueError, ImportError) as error:
        raise usage_error(error, args) from error
    emit(report, args.format, "rl")
    if not report.ok:
        sys.stderr.write(f"{PROG}: {in_flags(report.verdict, 'rl')}.\n")
        return 1
    if args.measure is not None and measure_failed(
        [(p.name, p.measured) for p in report.phases]
    ):
        return 1
    return 0


def _dtype(name: str) -> str | None:
    """A dtype flag's value as the library takes it: ``None`` for ``model``."""
    return None if name == "model" else name

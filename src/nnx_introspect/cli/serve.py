"""``nnx-introspect serve``: serving memory per device, the most that fits."""

import argparse
import contextlib
import math
import os
import sys
from collections.abc import Iterator
from typing import Any

from nnx_introspect._targets import DEFAULT_TARGET
from nnx_introspect.cli.args import FORMATS, PROG, add_output_args, add_target_args
from nnx_introspect.cli.errors import UsageError, in_flags, usage_error
from nnx_introspect.cli.measuring import (
    measurable,
    measure_failed,
    warn_if_too_big,
)
from nnx_introspect.cli.options import (
    TOPOLOGY_HELP,
    add_measure_arg,
    add_xla_flag_arg,
    xla_flags,
)
from nnx_introspect.cli.output import emit
from nnx_introspect.cli.plan_args import bytes_arg, mesh_axes
from nnx_introspect.cli.progress import ClockLine, live_status

SERVE_TARGET = DEFAULT_TARGET
"""``serve``'s default TARGET, every command's: the 7B example whose weights
``tp`` splits (kept under this name for the modules that import it)."""

MESH_DEFAULT = "tp=8"
"""``serve``'s ``--mesh`` when none is given."""


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


WEIGHT_CHOICES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "f32": "float32"}
WEIGHT_CHOICES |= {"float32": "float32", "model": "model"}
KV_CACHE_CHOICES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "f32": "float32"}
KV_CACHE_CHOICES |= {"float32": "float32", "fp8": "float8_e4m3fn"}
KV_CACHE_CHOICES |= {"float8_e4m3fn": "float8_e4m3fn", "int8": "int8"}


def dtype_arg(table: dict[str, str], shown: str) -> Any:
    """An argparse converter to the dtype names a table takes, in the help's words."""

    def convert(text: str) -> str:
        found = table.get(text.strip().lower())
        if found is None:
            raise argparse.ArgumentTypeError(f"must be one of {shown}, got {text!r}")
        return found

    return convert


def mesh_arg(text: str) -> str:
    """``--mesh``: ``auto`` or ``axis=size,...``, spelled right (no JAX)."""
    if text.strip().lower() != "auto":
        mesh_axes(text, check=True)
    return text


def add_serve_parser(subparsers: Any) -> None:
    """Adds the ``serve`` command to ``subparsers``."""
    parser = subparsers.add_parser(
        "serve",
        help="compile prefill and decode and report their memory per device",
        description="Compile the two programs a server runs for TARGET — prefill "
        "of --prompt tokens and decode of one token per sequence, each with the "
        "KV cache of --sequences x --context positions donated — for --topology "
        "(no device needed) or this process's CPU devices, and report per device "
        "the weights, the KV cache, XLA's arguments, outputs, temporaries, "
        "aliases and peak. With --max-sequences or --max-context, the most that "
        "fits. Exits with 1 when a program does not fit, 2 on bad input.",
    )
    # the 7B example with its sharding annotations: tp splits its weights
    add_target_args(parser, seed=False)
    parser.add_argument(
        "--mesh",
        action="append",
        default=None,
        type=mesh_arg,
        help="serving mesh (default tp=8); repeat it (--mesh tp=8 --mesh "
        "data=2,tp=4) to rank meshes by estimated tokens/s per device, or "
        "'auto' for tp=t with the rest data-parallel for each divisor t of "
        "the topology's devices (both need --topology)",
    )
    _add_size_args(parser)
    _add_target_and_dtype_args(parser)
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="also list the buffers live at each program's peak: weights, KV "
        "cache, logits, activations, collective buffers, by source line",
    )
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="compile both programs anew (every compile of a search or a "
        "comparison too): neither read nor write the cache of compile results "
        "(NNX_INTROSPECT_CACHE=off does the same)",
    )
    add_measure_arg(parser, "prefill and decode")
    add_xla_flag_arg(parser)
    most = parser.add_mutually_exclusive_group()
    most.add_argument(
        "--max-sequences",
        action="store_true",
        help="find the most sequences that fit at --context instead (not with "
        "--sequences, which it searches): prefill and decode compiled at each "
        "value tried, with --prompt and --prefill-sequences as given",
    )
    most.add_argument(
        "--max-context",
        action="store_true",
        help="find the longest context that fits for --sequences instead (not "
        "with --context, which it searches), the same way",
    )
    add_output_args(parser, (*FORMATS, "html"))
    parser.set_defaults(
        handler=_run_serve, check=check_serve, mesh_default=MESH_DEFAULT
    )


def _add_size_args(parser: argparse.ArgumentParser) -> None:
    """Add ``--sequences``, ``--context``, ``--prompt``, ``--prefill-sequences``."""
    parser.add_argument(
        "--sequences",
        type=_positive,
        default=None,
        metavar="N",
        help="sequences decoded at once: the KV cache's rows (required, but "
        "with --max-sequences)",
    )
    parser.add_argument(
        "--context",
        type=_positive,
        default=None,
        metavar="T",
        help="positions of the KV cache per sequence, prompt and generated tokens "
        "(required, but with --max-context)",
    )
    parser.add_argument(
        "--prompt",
        type=_positive,
        default=None,
        metavar="P",
        help="tokens prefilled per sequence (default: the whole --context)",
    )
    parser.add_argument(
        "--prefill-sequences",
        type=_positive,
        default=None,
        metavar="N",
        help="sequences prefilled at once, as a server admits them in chunks "
        "(default: every sequence)",
    )


def _add_target_and_dtype_args(parser: argparse.ArgumentParser) -> None:
    """Add ``--topology``, ``--max-device-bytes``, the dtypes, the cache's calls."""
    parser.add_argument(
        "--topology",
        default=None,
        metavar="NAME",
        help=f"{TOPOLOGY_HELP}; the default budget is the memory a run gets there",
    )
    parser.add_argument(
        "--max-device-bytes",
        type=bytes_arg,
        default=None,
        metavar="SIZE",
        help="a budget per device, with its unit: 70GiB (default: the "
        "topology's memory a run gets)",
    )
    parser.add_argument(
        "--weights",
        default="bfloat16",
        type=dtype_arg(WEIGHT_CHOICES, "bf16, f32, model"),
        metavar="DTYPE",
        help="dtype of the served weights: bf16 (default), f32, or model (the "
        "model's own)",
    )
    parser.add_argument(
        "--kv-cache",
        default="bfloat16",
        type=dtype_arg(KV_CACHE_CHOICES, "bf16, f32, fp8, int8"),
        metavar="DTYPE",
        help="dtype of the KV cache: bf16 (default), f32, fp8 or int8",
    )
    parser.add_argument(
        "--init-cache",
        default=None,
        metavar="PKG.MOD:FN",
        help="makes the KV cache as fn(model, sequences, context, dtype) "
        "(default: the model's own init_cache)",
    )
    parser.add_argument(
        "--decode",
        default=None,
        metavar="PKG.MOD:FN",
        help="calls the model as fn(model, tokens, positions, cache) -> "
        "(logits, cache) (default: model(tokens, positions, cache, mask))",
    )


def check_serve(args: argparse.Namespace) -> None:
    """The flags against each other, before JAX starts: one line, exit 2."""
    if args.sequences is None and not args.max_sequences:
        raise UsageError("argument --sequences: required (or --max-sequences)")
    if args.context is None and not args.max_context:
        raise UsageError("argument --context: required (or --max-context)")
    prompt, context = args.prompt, args.context
    meshes = args.mesh or [MESH_DEFAULT]
    _check_auto(args, meshes)
    if _compared(args) and (args.max_sequences or args.max_context or args.breakdown):
        raise UsageError(
            "argument --mesh: several meshes are compared at --sequences and "
            "--context; not with --max-sequences, --max-context or --breakdown"
        )
    if len(meshes) > 1 and args.topology is None:
        raise UsageError(
            "argument --topology: comparing meshes ranks them by tokens/s "
            "estimated on a target's data sheet; pass e.g. --topology h100-8"
        )
    if len(set(meshes)) < len(meshes):
        raise UsageError("argument --mesh: a mesh is given twice")
    if args.measure is not None and (
        _compared(args) or args.max_sequences or args.max_context
    ):
        raise UsageError(
            "argument --measure: runs the two programs of one report; not with "
            "several --mesh, auto, --max-sequences or --max-context (measure "
            "the answer alone)"
        )
    if xla_flags(args) and (_compared(args) or args.max_sequences or args.max_context):
        raise UsageError(
            "argument --xla-flag: compiles the two programs of one report; not "
            "yet with several --mesh, auto, --max-sequences or --max-context "
            "(set the flags in LIBTPU_INIT_ARGS or XLA_FLAGS for those)"
        )
    if args.breakdown and (args.max_sequences or args.max_context):
        raise UsageError(
            "argument --breakdown: not with --max-sequences or --max-context; "
            "run the report at the answer with --breakdown"
        )
    if prompt is not None and context is not None and prompt > context:
        raise UsageError(
            f"argument --prompt: {prompt} is longer than --context {context}; "
            "the cache holds the prompt"
        )
    for flag, value, search in (
        ("--sequences", args.sequences, args.max_sequences and "--max-sequences"),
        ("--context", args.context, args.max_context and "--max-context"),
    ):
        if value is not None and search:
            raise UsageError(
                f"argument {flag}: {search} searches {flag} itself, so {flag} "
                f"{value} would be ignored; leave {flag} out, or drop {search} "
                f"for the report at {flag} {value}"
            )


def _auto(mesh: str) -> bool:
    return mesh.strip().lower() == "auto"


def _compared(args: argparse.Namespace) -> bool:
    """Whether the flags compare meshes: ``--mesh`` repeated, or ``auto``."""
    meshes = args.mesh or []
    return len(meshes) > 1 or any(_auto(m) for m in meshes)


def _check_auto(args: argparse.Namespace, meshes: list[str]) -> None:
    """``--mesh auto`` alone, with a ``--topology``: one line, exit 2."""
    if not any(_auto(m) for m in meshes):
        return
    if len(meshes) > 1:
        raise UsageError(
            "argument --mesh: --mesh auto stands alone (it lists the meshes "
            "itself); drop the other --mesh flags"
        )
    if args.topology is None:
        raise UsageError(
            "argument --mesh: --mesh auto needs --topology: the candidates are "
            "tp=t with the rest data-parallel for each divisor t of its device "
            "count; pass e.g. --topology h100-8"
        )
    if args.max_sequences or args.max_context or args.breakdown:
        raise UsageError(
            "argument --mesh: --mesh auto compares meshes at --sequences and "
            "--context; not with --max-sequences, --max-context or --breakdown"
        )


def _run_serve(args: argparse.Namespace) -> int:
    check_serve(args)
    common: dict[str, Any] = {
        "topology": args.topology,
        "max_device_bytes": args.max_device_bytes,
        "weights": None if args.weights == "model" else args.weights,
        "kv_cache": args.kv_cache,
        "init_cache": args.init_cache,
        "decode": args.decode,
    }
    where = f"XLA for {args.topology}" if args.topology else "XLA"
    what = "Searching" if args.max_sequences or args.max_context else "Compiling"
    message = f"{what} prefill and decode of {args.target} with {where}..."
    try:
        with live_status(ClockLine(message)), _cache_setting(args):
            result = _compute(args, common)
    except (TypeError, ValueError, ImportError) as error:
        raise usage_error(error, args) from error
    emit(result, args.format, "serve")
    compared = _compared(args)  # a ServeMeshComparison
    if args.breakdown and args.format in ("table", "markdown") and not compared:
        for program in (result.prefill, result.decode):
            if program.breakdown is not None:
                sys.stdout.write("\n")
                emit(program.breakdown, args.format, "serve")
            elif program.breakdown_error is not None:
                sys.stderr.write(
                    f"{PROG}: no breakdown of {program.name}: "
                    f"{in_flags(program.breakdown_error, 'serve')}\n"
                )
    if not result.ok:
        sys.stderr.write(f"{PROG}: {in_flags(result.verdict, 'serve')}.\n")
        return 1
    if args.measure is not None and measure_failed(
        [(p.name, p.measured) for p in (result.prefill, result.decode)]
    ):
        return 1
    return 0


@contextlib.contextmanager
def _cache_setting(args: argparse.Namespace) -> Iterator[None]:
    """``--no-cache``: ``NNX_INTROSPECT_CACHE=off`` while the command computes.

    The searches and comparisons compile in worker processes, which read the
    setting from the environment; it is restored afterwards.
    """
    if not getattr(args, "no_cache", False):
        yield
        return
    before = os.environ.get("NNX_INTROSPECT_CACHE")
    os.environ["NNX_INTROSPECT_CACHE"] = "off"
    try:
        yield
    finally:
        if before is None:
            del os.environ["NNX_INTROSPECT_CACHE"]
        else:
            os.environ["NNX_INTROSPECT_CACHE"] = before


def _compute(args: argparse.Namespace, common: dict[str, Any]) -> Any:
    """The report or the search the flags ask for."""
    from nnx_introspect import (
        compare_serving_meshes,
        max_context,
        max_sequences,
        serve_memory_report,
    )

    meshes = args.mesh or [MESH_DEFAULT]
    if _compared(args):
        return compare_serving_meshes(
            args.target,
            "auto" if _auto(meshes[0]) else meshes,
            sequences=args.sequences,
            context=args.context,
            prompt=args.prompt,
            prefill_sequences=args.prefill_sequences,
            **common,
        )
    mesh = meshes[0]
    sizes = {"prompt": args.prompt, "prefill_sequences": args.prefill_sequences}
    if args.max_sequences:
        return max_sequences(args.target, mesh, context=args.context, **sizes, **common)
    if args.max_context:
        return max_context(
            args.target, mesh, sequences=args.sequences, **sizes, **common
        )
    one = {
        "sequences": args.sequences,
        "context": args.context,
        **sizes,
        "breakdown": args.breakdown,
        "compiler_flags": xla_flags(args),
        **common,
    }
    devices = math.prod(size for _, size in mesh_axes(mesh))
    if args.measure is not None and measurable(devices):  # too big for them?
        compiled = serve_memory_report(args.target, mesh, **one)
        peak = max(compiled.prefill.peak_bytes, compiled.decode.peak_bytes)
        warn_if_too_big(peak, devices, "serving (prefill or decode)")
    return serve_memory_report(args.target, mesh, measure=args.measure, **one)

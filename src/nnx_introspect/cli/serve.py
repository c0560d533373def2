"""``nnx-introspect serve``: serving memory per device, the most that fits."""

import argparse
import sys
from typing import Any

from nnx_introspect.cli.args import FORMATS, PROG, add_output_args, add_target_args
from nnx_introspect.cli.errors import UsageError, usage_error

SERVE_FLAGS = {
    "sequences": "--sequences",
    "prefill_sequences": "--prefill-sequences",
    "context": "--context",
    "prompt": "--prompt",
    "weights": "--weights",
    "kv_cache": "--kv-cache",
    "init_cache": "--init-cache",
    "decode": "--decode",
}
"""The serving arguments and their flags (merged into the CLI's table)."""


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


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
    add_target_args(parser, seed=False)
    parser.add_argument("--mesh", default="tp=8", help="serving mesh (default tp=8)")
    parser.add_argument("--sequences", type=_positive, default=None)
    parser.add_argument("--context", type=_positive, default=None)
    parser.add_argument("--prompt", type=_positive, default=None)
    parser.add_argument("--prefill-sequences", type=_positive, default=None)
    parser.add_argument("--topology", default=None, help="e.g. h100-8, v5e-8")
    parser.add_argument("--max-device-bytes", default=None, help="e.g. 70GiB")
    parser.add_argument("--weights", default="bfloat16", help="bf16 | f32 | model")
    parser.add_argument("--kv-cache", default="bfloat16", help="bf16 | fp8 | int8")
    parser.add_argument("--init-cache", default=None, metavar="PKG.MOD:FN")
    parser.add_argument("--decode", default=None, metavar="PKG.MOD:FN")
    most = parser.add_mutually_exclusive_group()
    most.add_argument("--max-sequences", action="store_true")
    most.add_argument("--max-context", action="store_true")
    add_output_args(parser, FORMATS)
    parser.set_defaults(handler=_run_serve, check=check_serve)


def check_serve(args: argparse.Namespace) -> None:
    """The flags against each other, before JAX starts: one line, exit 2."""
    if args.sequences is None and not args.max_sequences:
        raise UsageError("argument --sequences: required (or --max-sequences)")
    if args.context is None and not args.max_context:
        raise UsageError("argument --context: required (or --max-context)")
    prompt, context = args.prompt, args.context
    if prompt is not None and context is not None and prompt > context:
        raise UsageError(
            f"argument --prompt: {prompt} is longer than --context {context}; "
            "the cache holds the prompt"
        )


def _run_serve(args: argparse.Namespace) -> int:
    from nnx_introspect import max_context, max_sequences, serve_memory_report

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
    sys.stderr.write(f"Compiling prefill and decode of {args.target} with {where}...\n")
    try:
        if args.max_sequences:
            found = max_sequences(
                args.target,
                args.mesh,
                context=args.context,
                prompt=args.prompt,
                **common,
            )
        elif args.max_context:
            found = max_context(
                args.target, args.mesh, sequences=args.sequences, **common
            )
        else:
            report = serve_memory_report(
                args.target,
                args.mesh,
                sequences=args.sequences,
                context=args.context,
                prompt=args.prompt,
                prefill_sequences=args.prefill_sequences,
                **common,
            )
    except (TypeError, ValueError, ImportError) as error:
        flag = SERVE_FLAGS.get(getattr(error, "argument", "") or "")
        if flag is not None:  # one line naming the serving flag
            words = " ".join(str(error).split())
            raise UsageError(f"argument {flag}: {words}") from error
        raise usage_error(error, args) from error
    if args.max_sequences or args.max_context:
        _emit_search(found, args.format)
        return 0 if found.value > 0 else 1
    _emit_report(report, args.format)
    if report.fits() is False:
        sys.stderr.write(f"{PROG}: {report.verdict}.\n")
        return 1
    return 0


def _emit_report(report: Any, fmt: str) -> None:
    """The serving report in ``fmt`` (it has no ``Report`` table yet)."""
    if fmt == "json":
        sys.stdout.write(report.to_json() + "\n")
    elif fmt == "markdown":
        sys.stdout.write(report.to_markdown())
    else:
        from rich.console import Console

        Console(file=sys.stdout, width=120).print(report)


def _emit_search(found: Any, fmt: str) -> None:
    if fmt == "json":
        import json

        data = {
            "searched": found.searched,
            "value": found.value,
            "step": found.step,
            "points": [list(p) for p in found.points],
            "budget_bytes": found.budget.bytes,
        }
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        sys.stdout.write(found.to_markdown())

"""The command line's errors: a handler's usage error; any exception in one line.

A library function refuses a bad value with an
:class:`~nnx_introspect._typing.ArgumentError` that names its Python argument;
:data:`FLAGS` is the one table from those names to the flags that set them, and
:func:`usage_error` the one function that turns the library's error into the
command's usage error (exit code 2). The flag is never read from the message's
text; the message's words are: :data:`SPELLINGS` rewrites the Python spellings
the library's messages use (``meshes[1]``, ``meshes='auto'``,
``network_bytes_per_second``) into the flags the user typed, and the library's
messages for Python callers stay as they are.

No JAX here: the library's types are looked up only once the library has been
imported (an ``ArgumentError`` cannot exist before), so ``--help`` stays fast.
"""

import argparse
import re
import sys
from collections.abc import Callable

FLAGS: dict[str, str] = {
    "target": "TARGET",
    "batch": "--batch",
    "batch_spec": "--batch",
    "loss": "--loss",
    "optimizer": "--optimizer",
    "topology": "--topology",
    "mesh": "--mesh",
    "meshes": "--mesh",
    "rules": "--rules",
    "logical_rules": "--rules",
    "max_device_bytes": "--max-device-bytes",
    "network_bytes_per_second": "--network-bandwidth",
    "max_workers": "--jobs",
    "top": "--top",
    "remat": "--remat",
    "microbatches": "--microbatches",
    "lora": "--lora",
    "role_meshes": "--role-mesh",
    "layouts": "--mesh",
    "offload": "--offload",
    "tokens_per_step": "--tokens-per-step",
    "depth": "--depth",
    "seed": "--seed",
    "rtol": "--rtol",
    "atol": "--atol",
    "sequences": "--sequences",
    "prefill_sequences": "--prefill-sequences",
    "context": "--context",
    "prompt": "--prompt",
    "weights": "--weights",
    "kv_cache": "--kv-cache",
    "init_cache": "--init-cache",
    "decode": "--decode",
    "measure": "--measure",
    "generations": "--generations",
    "completion": "--completion",
    "reference": "--no-reference",
    "rollout_weights": "--rollout-weights",
    "critic": "--critic",
}
"""The library's argument names (``ArgumentError.argument``) and their flags."""


def ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, ``11th``, ``21st``...

    Example:
        >>> [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 102)]
        ['1st', '2nd', '3rd', '4th', '11th', '12th', '13th', '21st', '102nd']
    """
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10)
    return f"{n}{suffix or 'th'}"


def _nth_mesh(match: re.Match[str]) -> str:
    return f"the {ordinal(int(match.group(1)) + 1)} --mesh"


SPELLINGS: tuple[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]], ...] = (
    (
        re.compile(r"`meshes\[(\d+)\]` (?=\([^()]*\) has \d+ devices, but)"),
        lambda m: f"{_nth_mesh(m)} ",
    ),
    (re.compile(r"`meshes='auto'`"), "--mesh auto"),
    (re.compile(r"`meshes` have (\d+) devices"), r"the meshes have \1 devices"),
    (re.compile(r"a TPU or GPU `topology`"), "a TPU or GPU --topology"),
    (re.compile(r"as `topology` '([^']*)'"), r"as --topology \1"),
    (re.compile(r"but `topology` '([^']*)' has"), r"but --topology \1 has"),
    (
        re.compile(r"neither `rules`, `logical_rules` nor `batch_spec` names one"),
        "no --rules name one",
    ),
    (re.compile(r"pass `rules` that"), "pass --rules that"),
    (
        re.compile(r"`network_bytes_per_second` \S+ is the network between GPU hosts"),
        "--network-bandwidth is the network between GPU hosts",
    ),
    (re.compile(r"but `topology` is None\."), "but no --topology was given."),
    (re.compile(r"but `topology` is '([^']*)'\."), r"but --topology is \1."),
    (
        re.compile(r"Pass a GPU topology such as 'h100-256', or leave it out\."),
        "Pass a GPU --topology such as h100-256, or leave --network-bandwidth out.",
    ),
    (re.compile(r"Pass e\.g\. kv_cache='bfloat16'\."), "Pass e.g. --kv-cache bf16."),
    (re.compile(r"kv_cache='([^']*)' \(--kv-cache \S+\)"), r"--kv-cache \1"),
    (re.compile(r"`kv_cache` '([^']*)':"), r"--kv-cache \1:"),
    (
        re.compile(r"\(prefilled (\d+) at a time\)"),
        r"(--prefill-sequences \1)",
    ),
    (
        re.compile(r"`prefill_sequences` (\d+) is more than `sequences` (\d+)\."),
        r"--prefill-sequences \1 is more than --sequences \2.",
    ),
    (
        re.compile(r"`mesh` \{([^{}]*)\}"),
        lambda m: (
            "--mesh "
            + ",".join(
                f"{k.strip().strip(chr(39))}={v.strip()}"
                for k, v in (part.split(":") for part in m.group(1).split(","))
            )
        ),
    ),
    (
        re.compile(r"pass a `topology` \(its device's memory\) or `max_device_bytes`"),
        "pass a --topology (its device's memory) or --max-device-bytes",
    ),
)
"""The library's Python spellings and the flags the command line says instead.

Each pattern matches words of one library message (the tests hold each
against the message it rewrites): ``meshes[1]`` is the 2nd ``--mesh``,
``meshes='auto'`` is ``--mesh auto``, a `topology` is ``--topology``,
``network_bytes_per_second`` is ``--network-bandwidth``. A mesh repeated and
meshes of different device counts never reach the library from the command
line: :mod:`.checks` refuses them before JAX starts, in the flags' words.
"""


def in_flags(message: str) -> str:
    """``message`` with the library's Python spellings rewritten as flags.

    Example:
        >>> in_flags("`meshes[1]` (data=8) has 8 devices, but `topology` 'h100-4' "
        ...          "has 4.")
        'the 2nd --mesh (data=8) has 8 devices, but --topology h100-4 has 4.'
    """
    for pattern, replacement in SPELLINGS:
        message = pattern.sub(replacement, message)
    return message


class UsageError(Exception):
    """A bad argument found by a handler; the message starts with the flag."""


def _argument(error: BaseException) -> str | None:
    """The Python argument ``error`` names if it is an ``ArgumentError``, else ``None``.

    Without importing the library: if :mod:`nnx_introspect._typing` was never
    imported, no ``ArgumentError`` was ever raised.
    """
    typing_module = sys.modules.get("nnx_introspect._typing")
    if typing_module is not None and isinstance(error, typing_module.ArgumentError):
        return str(error.argument)
    return None


def usage_error(error: BaseException, args: argparse.Namespace) -> UsageError:
    """The library's ``error`` about bad input, as one line naming the flag.

    An ``ArgumentError`` names its argument, and :data:`FLAGS` its flag
    (``argument --batch: <the message>``, its Python spellings rewritten by
    :func:`in_flags`). ``rules`` and ``logical_rules``
    count only when ``--rules`` was given: otherwise the rules are the fix the
    message proposes, not the cause. An ``ImportError`` while ``--topology``
    was given is that target's compiler missing: the library's own (a plain
    ``ImportError``, a sentence saying what to install) reads as it is, any
    other keeps its type. Anything else is kept whole, with its type.

    Example:
        >>> from nnx_introspect._typing import ArgumentError
        >>> args = argparse.Namespace(rules=None, topology=None)
        >>> error = ArgumentError("batch[0]", "`batch[0]` is a scalar.")
        >>> print(usage_error(error, args))
        argument --batch: `batch[0]` is a scalar.
        >>> print(usage_error(ValueError("no flag"), args))
        ValueError: no flag
    """
    flag = FLAGS.get(_argument(error) or "")
    if flag == "--rules" and getattr(args, "rules", None) is None:
        flag = None
    if flag is not None:
        return UsageError(f"argument {flag}: {in_flags(' '.join(str(error).split()))}")
    if isinstance(error, ImportError) and getattr(args, "topology", None) is not None:
        own = type(error) is ImportError and error.name is None
        what = " ".join(str(error).split()) if own else describe(error)
        return UsageError(f"argument --topology: {what}")
    return UsageError(describe(error))


def describe(error: BaseException) -> str:
    """``error`` in one line: its type and message.

    An ``ArgumentError`` reads as the ``ValueError`` the library documents.
    """
    if isinstance(error, SystemExit):
        return f"unexpected SystemExit({error.code!r})"
    try:
        text = " ".join(str(error).split())
    except Exception:  # an exception whose __str__ fails
        text = "<unprintable>"
    name = "ValueError" if _argument(error) is not None else type(error).__name__
    return f"{name}: {text}" if text else name

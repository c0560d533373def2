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
    "factory": "TARGET",
    "batch": "--batch",
    "batch_spec": "--batch",
    "loss": "--loss",
    "optimizer": "--optimizer",
    "topology": "--topology",
    "mesh": "--mesh",
    "mesh_axes": "--mesh",
    "meshes": "--mesh",
    "rules": "--rules",
    "logical_rules": "--rules",
    "max_device_bytes": "--max-device-bytes",
    "network_bytes_per_second": "--network-bandwidth",
    "max_workers": "--jobs",
    "top": "--top",
    "top_n": "--top",
    "remat": "--remat",
    "microbatches": "--microbatches",
    "lora": "--lora",
    "role_meshes": "--role-mesh",
    "layouts": "--mesh",
    "offload": "--offload",
    "donate": "--donate",
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
    "breakdown": "--breakdown",
    "generations": "--generations",
    "completion": "--completion",
    "reference": "--no-reference",
    "rollout_weights": "--rollout-weights",
    "critic": "--critic",
    "cache": "--no-cache",
    "trace_as_target": "--trace-as-cpu",
    "debug": "--debug",
    "compiler_flags": "--xla-flag",
}
"""The library's argument names (``ArgumentError.argument``) and their flags,
every command's together (:data:`COMMAND_FLAGS` has each command's own)."""

_STEP = (
    "target factory batch batch_spec loss optimizer topology mesh mesh_axes meshes "
    "rules logical_rules max_device_bytes network_bytes_per_second max_workers top "
    "top_n remat microbatches lora tokens_per_step measure breakdown cache "
    "trace_as_target debug compiler_flags"
)
_SERVE = (
    "target factory topology mesh mesh_axes meshes max_device_bytes sequences "
    "prefill_sequences context prompt weights kv_cache init_cache decode measure "
    "breakdown cache debug compiler_flags"
)
_RL = (
    "target factory topology mesh mesh_axes layouts role_meshes max_device_bytes "
    "batch generations prompt completion reference rollout_weights kv_cache "
    "init_cache decode critic offload optimizer donate lora measure breakdown cache "
    "debug compiler_flags"
)


def _flags(names: str, **own: str) -> dict[str, str]:
    """The flags of ``names`` (space-separated) from :data:`FLAGS`, and ``own``."""
    return {name: FLAGS[name] for name in names.split()} | own


COMMAND_FLAGS: dict[str, dict[str, str]] = {
    "summary": _flags("target factory depth seed debug"),
    "mesh": _flags(
        "target factory mesh mesh_axes rules logical_rules optimizer "
        "max_device_bytes seed debug"
    ),
    "diff": _flags(
        "seed rtol atol debug", target="A or B", factory="A or B", path="A or B"
    ),
    "checkpoint": _flags(
        "seed rtol atol debug", target="--model", factory="--model", path="PATH"
    ),
    "step": _flags(_STEP),
    "serve": _flags(_SERVE),
    "rl": _flags(_RL, model="TARGET", actor="TARGET"),
}
"""Each command's table: the library's argument names and the flags that set them.

A name a command does not take is not rewritten there: ``batch`` is ``step``'s
``--batch`` and ``rl``'s prompts per step, ``serve`` has none; ``path`` is
``checkpoint``'s PATH and one of ``diff``'s A and B.
"""

INVERSE = frozenset({"cache", "reference", "trace_as_target"})
"""Arguments whose flag says the opposite: ``cache=False`` is ``--no-cache``."""


def ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, ``11th``, ``21st``...

    Example:
        >>> [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 102)]
        ['1st', '2nd', '3rd', '4th', '11th', '12th', '13th', '21st', '102nd']
    """
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10)
    return f"{n}{suffix or 'th'}"


def _mesh_text(match: re.Match[str]) -> str:
    """``{'tp': 3, 'data': 2}`` (a mesh's dict) as ``tp=3,data=2``."""
    pairs = (part.split(":") for part in match.group(1).split(",") if ":" in part)
    return ",".join(f"{k.strip().strip(chr(39))}={v.strip()}" for k, v in pairs)


Spelling = tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]

SPELLINGS: tuple[Spelling, ...] = (
    (re.compile(r"`meshes` have (\d+) devices"), r"the meshes have \1 devices"),
    (re.compile(r"`meshes` must all have"), "the meshes must all have"),
    (
        re.compile(r"neither `rules`, `logical_rules` nor `batch_spec` names one"),
        "no --rules name one",
    ),
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
    (re.compile(r"\(prefilled (\d+) at a time\)"), r"(--prefill-sequences \1)"),
    (re.compile(r"`mesh` \{([^{}]*)\}"), lambda m: f"--mesh {_mesh_text(m)}"),
)
"""The library's Python phrases and the flags' words the command line says instead.

Each pattern matches words of one library message (the tests hold each
against the message it rewrites); :func:`in_flags` applies them before its
general rules, which rewrite each argument the command's table holds
(```meshes[1]``` is the 2nd ``--mesh``, ``meshes='auto'`` is ``--mesh auto``,
```topology``` is ``--topology``). A mesh repeated and meshes of different
device counts never reach the library from the command line: :mod:`.checks`
refuses them before JAX starts, in the flags' words.
"""

RL_SPELLINGS: tuple[Spelling, ...] = (
    (
        re.compile(r"`batch` (\d+) \(prefilled \d+ at a time\) does not split"),
        r"the rollout's \1 sequences (--batch x --generations) do not split",
    ),
    (
        re.compile(
            r"Pass a multiple of (\d+)\. \(the rollout's \d+ sequences are batch x "
            r"generations\)"
        ),
        r"Make --batch x --generations a multiple of \1.",
    ),
    (
        re.compile(r" \(the rollout's (\d+) sequences are batch x generations\)"),
        r" (the rollout's \1 sequences are --batch x --generations)",
    ),
    (
        re.compile(r" \(the rollout context of (\d+) is prompt \+ completion\)"),
        r" (the rollout's context of \1 is --prompt + --completion)",
    ),
)
"""``rl``'s own phrases: its rollout's sequences are ``--batch x --generations``
(``rl`` has no ``--prefill-sequences``), its context ``--prompt + --completion``."""

NOTES: tuple[Spelling, ...] = (
    (
        re.compile(r"Start from a batch nearer the answer, or narrow `lo` and `hi`\."),
        "Start from a --batch nearer the answer.",
    ),
    (re.compile(r", or narrow `lo` and `hi`"), ""),
    (re.compile(r" \(an int such as [0-9.eE]+ is bytes\)"), ""),
    (re.compile(r" or None for none\."), ", or leave it out."),
)
"""Words of the library's for Python callers only: ``lo`` and ``hi`` (no flag
sets them), an ``int`` budget (a flag's size always has its unit)."""

_ITEM = re.compile(r"`(\w+)\[(\d+)\]`")
_BARE_ITEM = re.compile(r"(?<![\w`.])(\w+)\[(\d+)\](?![\w`])")
_KEY = re.compile(r"`(\w+)\[('[^'`]*')\]`")
_ASSIGNED = re.compile(r"`(\w+)=([^`]*)`")
_VALUE = re.compile(r"`(\w+)` '([^'\s]*)'")
_NAME = re.compile(r"`(\w+)`")
_NAMED_TWICE = re.compile(r"`(\w+)` \((--[a-z][a-z-]*)\)")
_KEYWORD = re.compile(  # not a mesh's axis: (batch=8), --mesh batch=8
    r"(?<![\w.,=/(-])(?<!mesh )(\w+)=('[^']*'|\"[^\"]*\"|[\w.]+)(?![\w=]|,\w+=)"
)
_MESH_DICT = re.compile(r"(?<=--mesh )\{([^{}]*)\}")
_SAID_TWICE = re.compile(r"(--[a-z][a-z-]*(?: [\w.,=-]+)?) \(\1\)")
"""A flag said again in parentheses: ``loss="lm" (--loss lm)`` once rewritten."""


def _flag_value(flag: str, name: str, value: str) -> str:
    """``name=value`` as the flag that gives it: ``--generations 1``, ``--no-cache``."""
    value = value.strip("'\"")
    if value in ("True", "False", "None"):
        on = (value == "True") != (name in INVERSE)
        return flag if on and value != "None" else f"no {flag}"
    return f"{flag} {value}"


def in_flags(message: str, command: str | None = None) -> str:
    """``message`` with the library's Python spellings rewritten as ``command``'s flags.

    The phrases of :data:`SPELLINGS` (and ``rl``'s, :data:`RL_SPELLINGS`)
    first; then every argument of the command's table (:data:`COMMAND_FLAGS`,
    every command's :data:`FLAGS` without one): ```meshes[1]``` is the 2nd
    ``--mesh``, ```topology='v5e-4'``` and ```topology` 'v5e-4'`` are
    ``--topology v5e-4``, ```measure``` is ``--measure``, ``generations=1``
    is ``--generations 1`` and ``cache=False`` ``--no-cache``, and a flag the
    message then says twice (``loss="lm" (--loss lm)``) is said once; last,
    the words meant for Python callers only (:data:`NOTES`). A name the table does
    not hold (a state path, ```kernel```) is left as it is.

    Example:
        >>> in_flags("`meshes[1]` (data=8) has 8 devices, but `topology` 'h100-4' "
        ...          "has 4.")
        'the 2nd --mesh (data=8) has 8 devices, but --topology h100-4 has 4.'
        >>> in_flags("`measure` 5 runs the step, but `mesh` {'data': 8} needs 8. "
        ...          "Leave `measure` out.", "step")
        '--measure 5 runs the step, but --mesh data=8 needs 8. Leave --measure out.'
        >>> in_flags("Pass generations=1, or no critic for GRPO.", "rl")
        'Pass --generations 1, or no critic for GRPO.'
    """
    table = COMMAND_FLAGS.get(command or "", FLAGS)
    phrases = (*RL_SPELLINGS, *SPELLINGS) if command == "rl" else SPELLINGS
    for pattern, replacement in phrases:
        message = pattern.sub(replacement, message)

    def item(match: re.Match[str]) -> str:
        flag = table.get(match.group(1))
        if flag is None:
            return match.group(0)
        return f"the {ordinal(int(match.group(2)) + 1)} {flag}"

    def key(match: re.Match[str]) -> str:
        flag = table.get(match.group(1))
        return match.group(0) if flag is None else f"{flag} axis {match.group(2)}"

    def assigned(match: re.Match[str]) -> str:
        flag = table.get(match.group(1))
        if flag is None:
            return match.group(0)
        return _flag_value(flag, match.group(1), match.group(2))

    def name(match: re.Match[str]) -> str:
        return table.get(match.group(1), match.group(0))

    message = _ITEM.sub(item, message)
    message = _BARE_ITEM.sub(item, message)
    message = _KEY.sub(key, message)
    message = _ASSIGNED.sub(assigned, message)
    message = _VALUE.sub(
        lambda m: (
            m.group(0)
            if m.group(1) not in table
            else f"{table[m.group(1)]} {m.group(2)}"
        ),
        message,
    )
    message = _NAMED_TWICE.sub(
        lambda m: m.group(2) if table.get(m.group(1)) == m.group(2) else m.group(0),
        message,
    )
    message = _NAME.sub(name, message)
    message = _KEYWORD.sub(assigned, message)
    message = _MESH_DICT.sub(_mesh_text, message)
    message = _SAID_TWICE.sub(r"\1", message)
    for pattern, replacement in NOTES:
        message = pattern.sub(replacement, message)
    return message


class UsageError(Exception):
    """A bad argument found by a handler; the message starts with the flag."""


def _argument(error: BaseException) -> str | None:
    """The Python argument ``error`` names, if it is one of the library's that do.

    An ``ArgumentError`` (a bad value) or an ``ArgumentTypeError`` (a bad
    type) carries it; anything else names none. Without importing the library:
    if :mod:`nnx_introspect._typing` was never imported, neither was raised.
    """
    typing_module = sys.modules.get("nnx_introspect._typing")
    if typing_module is None:
        return None
    kinds = (typing_module.ArgumentError, typing_module.ArgumentTypeError)
    if isinstance(error, kinds):
        return str(error.argument)
    return None


def names_an_argument(error: BaseException) -> bool:
    """Whether ``error`` is the library's refusal of an argument it names."""
    return _argument(error) is not None


def _command(args: argparse.Namespace) -> str | None:
    """The subcommand ``args`` were parsed for (``None``: a handler called alone)."""
    command = getattr(args, "command", None)
    return command if isinstance(command, str) else None


def given(args: argparse.Namespace, flag: str) -> bool:
    """Whether ``flag`` was on the command line (``True`` when it is not known).

    :func:`~nnx_introspect.cli.entry.main` records the flags it parsed as
    ``args.given_flags``; a handler called without it knows nothing else, and
    counts every flag as given.
    """
    flags = getattr(args, "given_flags", None)
    if flags is None or not flag.startswith("--"):
        return True
    return flag in flags


def default_words(args: argparse.Namespace, flag: str) -> str:
    """``--mesh tp=8 is the default (no --mesh was given)``, or ``""`` if given.

    The value is the one the command used: ``args``' own, or, where the
    parser keeps ``None`` and the handler fills it in, ``args.<dest>_default``.
    """
    if given(args, flag):
        return ""
    dest = flag[2:].replace("-", "_")
    value = getattr(args, dest, None)
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if value is None:
        value = getattr(args, f"{dest}_default", None)
    if value is None or isinstance(value, bool):
        return ""
    return f"{flag} {value} is the default (no {flag} was given)"


def with_default(text: str, args: argparse.Namespace, flag: str) -> str:
    """``text``, then a sentence saying ``flag``'s value was its default, if it was.

    Example:
        >>> args = argparse.Namespace(mesh="tp=8", given_flags=frozenset())
        >>> with_default("--mesh tp=8 does not divide 4 heads.", args, "--mesh")
        '--mesh tp=8 does not divide 4 heads. --mesh tp=8 is the default (no --mesh \
was given).'
    """
    words = default_words(args, flag)
    if not words:
        return text
    stop = "" if text.rstrip().endswith((".", ";", ":")) else ";"
    return f"{text.rstrip()}{stop} {words}."


def usage_error(error: BaseException, args: argparse.Namespace) -> UsageError:
    """The library's ``error`` about bad input, as one line naming the flag.

    An ``ArgumentError`` or ``ArgumentTypeError`` names its argument, and the
    command's table (:data:`COMMAND_FLAGS`) its flag: ``argument --batch: <the
    message>``, the message's Python spellings rewritten by :func:`in_flags`,
    and, when the flag was not given, that its value was the default.
    ``rules`` and ``logical_rules`` count only when ``--rules`` was given:
    otherwise the rules are the fix the message proposes, not the cause. An
    ``ImportError`` while ``--topology`` was given is that target's compiler
    missing: the library's own (a plain ``ImportError``, a sentence saying
    what to install) reads as it is, any other keeps its type. Anything else
    is kept whole, with its type, its words in the flags' spellings.

    Example:
        >>> from nnx_introspect._typing import ArgumentError
        >>> args = argparse.Namespace(rules=None, topology=None, command="step")
        >>> error = ArgumentError("batch[0]", "`batch[0]` is a scalar.")
        >>> print(usage_error(error, args))
        argument --batch: the 1st --batch is a scalar.
        >>> print(usage_error(ValueError("no flag"), args))
        ValueError: no flag
    """
    command = _command(args)
    table = COMMAND_FLAGS.get(command or "", FLAGS)
    flag = table.get(_argument(error) or "")
    if flag == "--rules" and getattr(args, "rules", None) is None:
        flag = None
    text = in_flags(" ".join(str(error).split()), command)
    if flag is not None:
        return UsageError(f"argument {flag}: {with_default(text, args, flag)}")
    if isinstance(error, ImportError) and getattr(args, "topology", None) is not None:
        own = type(error) is ImportError and error.name is None
        what = text if own else _typed(error, text)
        return UsageError(f"argument --topology: {what}")
    return UsageError(_typed(error, text))


def describe(error: BaseException, command: str | None = None) -> str:
    """``error`` in one line: its type and message (in ``command``'s flags, if given).

    An ``ArgumentError`` reads as the ``ValueError`` the library documents,
    an ``ArgumentTypeError`` as its ``TypeError``.
    """
    if isinstance(error, SystemExit):
        return f"unexpected SystemExit({error.code!r})"
    try:
        text = " ".join(str(error).split())
    except Exception:  # an exception whose __str__ fails
        text = "<unprintable>"
    if command is not None:
        text = in_flags(text, command)
    return _typed(error, text)


def _typed(error: BaseException, text: str) -> str:
    """``"ValueError: text"``: the type a caller of the library knows, and ``text``."""
    name = type(error).__name__
    if _argument(error) is not None:
        name = "TypeError" if isinstance(error, TypeError) else "ValueError"
    return f"{name}: {text}" if text else name

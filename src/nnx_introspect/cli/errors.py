"""The command line's errors: a handler's usage error; any exception in one line.

A library function refuses a bad value with an
:class:`~nnx_introspect._typing.ArgumentError` that names its Python argument;
:data:`FLAGS` is the one table from those names to the flags that set them, and
:func:`_usage_error` the one function that turns the library's error into the
command's usage error (exit code 2). Nothing here reads the message's text.

No JAX here: the library's types are looked up only once the library has been
imported (an ``ArgumentError`` cannot exist before), so ``--help`` stays fast.
"""

import argparse
import sys

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
    "depth": "--depth",
    "seed": "--seed",
    "rtol": "--rtol",
    "atol": "--atol",
}
"""The library's argument names (``ArgumentError.argument``) and their flags."""


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


def _usage_error(error: BaseException, args: argparse.Namespace) -> UsageError:
    """The library's ``error`` about bad input, as one line naming the flag.

    An ``ArgumentError`` names its argument, and :data:`FLAGS` its flag
    (``argument --batch: <the message>``). ``rules`` and ``logical_rules``
    count only when ``--rules`` was given: otherwise the rules are the fix the
    message proposes, not the cause. An ``ImportError`` while ``--topology``
    was given is that target's compiler missing: the library's own (a plain
    ``ImportError``, a sentence saying what to install) reads as it is, any
    other keeps its type. Anything else is kept whole, with its type.

    Example:
        >>> from nnx_introspect._typing import ArgumentError
        >>> args = argparse.Namespace(rules=None, topology=None)
        >>> error = ArgumentError("batch[0]", "`batch[0]` is a scalar.")
        >>> print(_usage_error(error, args))
        argument --batch: `batch[0]` is a scalar.
        >>> print(_usage_error(ValueError("no flag"), args))
        ValueError: no flag
    """
    flag = FLAGS.get(_argument(error) or "")
    if flag == "--rules" and getattr(args, "rules", None) is None:
        flag = None
    if flag is not None:
        return UsageError(f"argument {flag}: {' '.join(str(error).split())}")
    if isinstance(error, ImportError) and getattr(args, "topology", None) is not None:
        own = type(error) is ImportError and error.name is None
        what = " ".join(str(error).split()) if own else _describe(error)
        return UsageError(f"argument --topology: {what}")
    return UsageError(_describe(error))


def _describe(error: BaseException) -> str:
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

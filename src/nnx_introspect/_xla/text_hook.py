"""A hook on each compiled program's text: off unless the environment names one.

The time model's calibration (``benchmarks/calibration/timecal.py``) keeps the
optimized HLO text of every program a report compiles. With
``NNX_INTROSPECT_PROGRAM_TEXT_HOOK`` set to ``package.module:function``, each
time a compile's program text has been read (by
:func:`~nnx_introspect._xla.analysis.compile_lowered` and
:func:`~nnx_introspect._xla.analysis.program_figures`), the function is called
with the text and the compiled program, in this process and in the child
processes a compile runs in (they inherit the environment). Unset or empty, the
default, nothing is imported or called. The function's result is ignored; an
error importing or calling it is a :class:`RuntimeWarning`, never the
compile's error.
"""

import importlib
import os
import warnings
from typing import Any

HOOK_VARIABLE = "NNX_INTROSPECT_PROGRAM_TEXT_HOOK"
"""The environment variable naming the hook, as ``package.module:function``."""


def program_text_read(text: str, compiled: Any) -> None:
    """Hand a compiled program's text to the hook the environment names, if any.

    Example:
        >>> import os
        >>> os.environ[HOOK_VARIABLE] = "builtins:print"
        >>> program_text_read("HloModule jit_train", "compiled")
        HloModule jit_train compiled
        >>> del os.environ[HOOK_VARIABLE]
        >>> program_text_read("HloModule jit_train", "compiled")  # off: nothing runs
    """
    spec = os.environ.get(HOOK_VARIABLE, "").strip()
    if not spec:
        return
    module, _, name = spec.partition(":")
    try:
        hook = getattr(importlib.import_module(module), name)
        hook(text, compiled)
    except Exception as error:  # the hook's failure is never the compile's
        warnings.warn(
            f"{HOOK_VARIABLE}={spec!r}: {type(error).__name__}: {error}",
            RuntimeWarning,
            stacklevel=2,
        )

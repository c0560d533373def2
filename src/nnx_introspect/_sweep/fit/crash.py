"""Why a search's worker processes died, in one line a user can act on.

A ``"spawn"`` pool's worker imports the parent's main module; a script that
calls a search at its top level, without the ``if __name__ == "__main__":``
guard, runs that call again in every worker, which then dies starting its own
pool, and the parent sees only ``BrokenProcessPool``. That case is named, with
its fix; any other death says where its own error went.
"""

import os
import re
import sys

from nnx_introspect._text import error_line

__all__ = ["crash_cause", "unguarded_main"]

_GUARD = re.compile(r"""^\s*if\s+__name__\s*==\s*(['"])__main__\1\s*:""", re.MULTILINE)


def unguarded_main() -> str | None:
    """The main script's path when it has no ``__main__`` guard, else ``None``.

    ``None`` too for an interactive session or a script that cannot be read.

    Example:
        >>> unguarded_main() is None or unguarded_main().endswith(".py")
        True
    """
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if not isinstance(path, str) or not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            source = file.read()
    except OSError:
        return None
    return None if _GUARD.search(source) else path


def crash_cause(error: BaseException, own_pool: bool) -> str:
    """One line: the worker processes died, why if it can be told, and the fix.

    Example:
        >>> from concurrent.futures.process import BrokenProcessPool
        >>> print(crash_cause(BrokenProcessPool("gone"), own_pool=False))
        the worker processes died (BrokenProcessPool: gone); the worker's own error, \
if any, is on its stderr
    """
    cause = f"the worker processes died ({error_line(error)})"
    script = unguarded_main() if own_pool else None
    if script is not None:
        return (
            f'{cause}: the script {script} has no `if __name__ == "__main__":` '
            "guard, so each spawned worker re-runs it and dies starting its own "
            "pool; put the script's calls under that guard"
        )
    return f"{cause}; the worker's own error, if any, is on its stderr"

"""The child process of :func:`~nnx_introspect.step_memory_report`.

Started as ``python -m nnx_introspect._step_child`` with
``--xla_force_host_platform_device_count=N`` in ``XLA_FLAGS``, it reads one JSON
request on stdin (the target and loss by ``"package.module:name"``, the mesh,
batch shapes, specs, optimizer name and rules), compiles the step and writes one
JSON line on stdout: ``{"result": {...numbers...}}`` or, for bad input,
``{"error": "ValueError", "message": "..."}``. Anything else is a crash: a
traceback on stderr and exit code 1.
"""

import json
import sys
from typing import Any

from nnx_introspect._step import run_child_request
from nnx_introspect._targets import TargetError

__all__ = ["main"]


def main() -> int:
    """Serve one request from stdin; the exit code."""
    request = json.loads(sys.stdin.read())
    answer: dict[str, Any]
    try:
        answer = {"result": run_child_request(request)}
    except TargetError as error:
        answer = {"error": "ValueError", "message": f"`target`: {error}"}
    except (TypeError, ValueError) as error:
        answer = {"error": type(error).__name__, "message": str(error)}
    sys.stdout.write(json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m nnx_introspect._step``: the child process of a step compile.

See :mod:`nnx_introspect._step.child` for the request it reads and what it writes.
"""

import sys

from nnx_introspect._step.child import main

if __name__ == "__main__":
    sys.exit(main())

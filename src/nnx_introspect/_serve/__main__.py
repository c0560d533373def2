"""``python -m nnx_introspect._serve``: the child process of a serving compile.

See :mod:`nnx_introspect._serve.child` for the request it reads and what it writes.
"""

import sys

from nnx_introspect._serve.child import main

if __name__ == "__main__":
    sys.exit(main())

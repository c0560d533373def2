"""``python -m nnx_introspect.cli``: the same command line as ``nnx-introspect``."""

import sys

from nnx_introspect.cli import main

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

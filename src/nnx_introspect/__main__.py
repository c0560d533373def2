"""``python -m nnx_introspect``: the ``nnx-introspect`` command line."""

import sys

from nnx_introspect.cli import main

if __name__ == "__main__":
    sys.exit(main())

"""One compile shared by a module's tests: the compile cache in a directory of its own.

The test run turns the cache of compile results off (the root ``conftest.py``):
a test sees the compile it asks for. A module whose command-line test asks for
the very program an API test compiled already turns it on, in a directory only
that module uses, around both: the API's compile is stored, and the command
line's request, when it is the same, reads it back instead of compiling again.
That it does is asserted where it is used (the command line's JSON says
``cached``): the command line asked for the same program as the API. The
directory is the ``module_cache`` fixture's (``tests/conftest.py``).
"""

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["cache_in"]


@contextlib.contextmanager
def cache_in(directory: Path) -> Iterator[None]:
    """The compile cache on, in ``directory``, for the ``with`` block only."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NNX_INTROSPECT_CACHE", "on")
        patch.setenv("NNX_INTROSPECT_CACHE_DIR", os.fspath(directory))
        yield

"""Sphinx configuration for nnx-introspect."""

import os
import socket

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()

import nnx_introspect

# JAX's first import, through the package: its plugins' native lines (CUDA's
# "Could not find cuda drivers") stay out of the build's log.
from nnx_introspect import summarize  # noqa: F401

project = "nnx-introspect"
author = "nnx-introspect developers"
copyright = "2026, nnx-introspect developers"
release = nnx_introspect.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.doctest",
    "sphinx.ext.intersphinx",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "myst_parser",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
html_theme = "furo"
html_title = "nnx-introspect"

autodoc_typehints = "description"
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
myst_enable_extensions = ["colon_fence"]


def _online(host: str = "docs.jax.dev") -> bool:
    """Whether the inventories' hosts resolve (CI machines may have no network)."""
    try:
        socket.getaddrinfo(host, 443)
    except OSError:
        return False
    return True


# Links into the jax/flax/numpy docs when the network is there; offline builds
# (``-W`` must stay green) skip intersphinx instead of warning about it.
_INTERSPHINX = os.environ.get("NNX_INTROSPECT_INTERSPHINX", "auto")
intersphinx_mapping = (
    {
        "python": ("https://docs.python.org/3", None),
        "jax": ("https://docs.jax.dev/en/latest", None),
        "flax": ("https://flax.readthedocs.io/en/latest", None),
        "numpy": ("https://numpy.org/doc/stable", None),
    }
    if _INTERSPHINX == "1" or (_INTERSPHINX == "auto" and _online())
    else {}
)
intersphinx_timeout = 5
nitpicky = False

doctest_global_setup = """
import jax
import jax.numpy as jnp
from flax import nnx
import nnx_introspect as ni
"""
# Docstring examples are run by pytest (--doctest-modules, in their module's
# namespace); the doctest builder runs the pages' explicit doctest blocks.
doctest_test_doctest_blocks = ""
